// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_trace.c - kvmm/trace.c: records in order with their numbers, a reader that
 * tells a record not yet published from one overwritten, the records of a clock span staged
 * until its end (and flushed when the stage fills), a ring uninstalled under a span, and
 * several threads writing spans at once (every record exactly once).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kvmm/trace.h"

static int setup(void **state)
{
	struct kvmm_trace *tr = kvmm_trace_create(1024);

	if (!tr)
		return -1;
	__atomic_store_n(&kvmm_trace_ring, tr, __ATOMIC_RELEASE);
	*state = tr;
	return 0;
}

static int teardown(void **state)
{
	__atomic_store_n(&kvmm_trace_ring, NULL, __ATOMIC_RELEASE);
	kvmm_trace_destroy(*state);
	return 0;
}

static void ev(uint32_t frame, uint64_t count)
{
	kvmm_trace_event(KVMM_TR_ALLOC, NULL, 7, 1, 42, frame, count);
}

static void test_create_sizes(void **state)
{
	struct kvmm_trace *tr;

	(void)state;
	tr = kvmm_trace_create(100);
	assert_non_null(tr);
	assert_int_equal(tr->mask, 127);
	kvmm_trace_destroy(tr);
	tr = kvmm_trace_create(1);
	assert_non_null(tr);
	assert_int_equal(tr->mask, 63);
	kvmm_trace_destroy(tr);
	errno = 0;
	assert_null(kvmm_trace_create((1u << 24) + 1));
	assert_int_equal(errno, EINVAL);
	assert_string_equal(kvmm_trace_type_name(KVMM_TR_SWAPIN), "swap-in");
	assert_string_equal(kvmm_trace_type_name(999), "?");
	assert_int_equal(kvmm_trace_type_from_name("oom"), KVMM_TR_OOM);
	assert_int_equal(kvmm_trace_type_from_name("nope"), -EINVAL);
}

static void test_direct_records(void **state)
{
	struct kvmm_trace *tr = *state;
	struct kvmm_trace_rec r;

	ev(1, 10);
	ev(2, 20);
	assert_int_equal(kvmm_trace_head(tr), 2);
	assert_true(kvmm_trace_read(tr, 1, &r));
	assert_int_equal(r.seqno, 1);
	assert_int_equal(r.frame, 1);
	assert_int_equal(r.count, 10);
	assert_int_equal(r.client, 7);
	assert_int_equal(r.seq, 42);
	assert_int_equal(r.type, KVMM_TR_ALLOC);
	assert_true(r.ts_ns > 0);
	assert_true(kvmm_trace_read(tr, 2, &r));
	assert_int_equal(r.frame, 2);
	/* not written yet: may still appear */
	assert_false(kvmm_trace_read(tr, 3, &r));
	assert_false(kvmm_trace_overwritten(tr, 3));
	assert_false(kvmm_trace_read(tr, 0, &r));
}

static void test_span_staged(void **state)
{
	struct kvmm_trace *tr = *state;
	struct kvmm_trace_rec r;
	uint64_t ts;

	kvmm_trace_clock_begin();
	for (uint32_t i = 0; i < 5; i++)
		ev(100 + i, i);
	/* staged: nothing claimed yet */
	assert_int_equal(kvmm_trace_head(tr), 0);
	assert_false(kvmm_trace_read(tr, 1, &r));
	kvmm_trace_clock_end();
	assert_int_equal(kvmm_trace_head(tr), 5);
	assert_true(kvmm_trace_read(tr, 1, &r));
	ts = r.ts_ns;
	for (uint64_t s = 1; s <= 5; s++) {
		assert_true(kvmm_trace_read(tr, s, &r));
		assert_int_equal(r.seqno, s);
		assert_int_equal(r.frame, 100 + s - 1);
		assert_int_equal(r.count, s - 1);
		assert_int_equal(r.ts_ns, ts); /* one clock reading for the span */
	}
	/* outside a span: published at once, a clock of its own */
	ev(9, 9);
	assert_int_equal(kvmm_trace_head(tr), 6);
	assert_true(kvmm_trace_read(tr, 6, &r));
	assert_true(r.ts_ns >= ts);
}

static void test_span_stage_full(void **state)
{
	struct kvmm_trace *tr = *state;
	struct kvmm_trace_rec r;

	kvmm_trace_clock_begin();
	for (uint32_t i = 0; i < 300; i++)
		ev(i, i);
	/* the stage holds 128: two full stages went out in order, 44 wait for the end */
	assert_int_equal(kvmm_trace_head(tr), 256);
	kvmm_trace_clock_end();
	assert_int_equal(kvmm_trace_head(tr), 300);
	for (uint64_t s = 1; s <= 300; s++) {
		assert_true(kvmm_trace_read(tr, s, &r));
		assert_int_equal(r.frame, s - 1);
	}
}

static void test_wrap_overwritten(void **state)
{
	struct kvmm_trace *tr = kvmm_trace_create(64);
	struct kvmm_trace_rec r;

	(void)state;
	__atomic_store_n(&kvmm_trace_ring, tr, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < 100; i++)
		ev(i, i);
	assert_int_equal(kvmm_trace_head(tr), 100);
	assert_false(kvmm_trace_read(tr, 1, &r));
	assert_true(kvmm_trace_overwritten(tr, 1));
	assert_true(kvmm_trace_overwritten(tr, 36));
	assert_true(kvmm_trace_read(tr, 37, &r));
	assert_int_equal(r.frame, 36);
	assert_true(kvmm_trace_read(tr, 100, &r));
	assert_false(kvmm_trace_overwritten(tr, 101));
	__atomic_store_n(&kvmm_trace_ring, *state, __ATOMIC_RELEASE);
	kvmm_trace_destroy(tr);
}

static void test_uninstalled_under_span(void **state)
{
	struct kvmm_trace *tr = *state;

	kvmm_trace_clock_begin();
	ev(1, 1);
	__atomic_store_n(&kvmm_trace_ring, NULL, __ATOMIC_RELEASE);
	ev(2, 2); /* a tracepoint with the ring gone is a no-op */
	kvmm_trace_clock_end();
	/* the staged record went with its ring */
	assert_int_equal(kvmm_trace_head(tr), 0);
	__atomic_store_n(&kvmm_trace_ring, tr, __ATOMIC_RELEASE);
	ev(3, 3);
	assert_int_equal(kvmm_trace_head(tr), 1);
}

#define THREADS 4
#define SPANS 200
#define PER_SPAN 7

static void *writer(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;

	for (uint32_t s = 0; s < SPANS; s++) {
		kvmm_trace_clock_begin();
		for (uint32_t i = 0; i < PER_SPAN; i++)
			kvmm_trace_event(KVMM_TR_SEAL, NULL, id, 0, s, i, 0);
		kvmm_trace_clock_end();
		ev(UINT32_MAX - 1, id); /* and one outside a span */
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct kvmm_trace *tr = kvmm_trace_create(THREADS * SPANS * (PER_SPAN + 1));
	static uint8_t seen[THREADS][SPANS][PER_SPAN];
	uint64_t outside[THREADS] = {0}, head;
	pthread_t t[THREADS];

	(void)state;
	__atomic_store_n(&kvmm_trace_ring, tr, __ATOMIC_RELEASE);
	for (uintptr_t i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	head = kvmm_trace_head(tr);
	assert_int_equal(head, THREADS * SPANS * (PER_SPAN + 1));
	for (uint64_t s = 1; s <= head; s++) {
		struct kvmm_trace_rec r;

		assert_true(kvmm_trace_read(tr, s, &r));
		if (r.type == KVMM_TR_ALLOC) {
			outside[r.count]++;
			continue;
		}
		assert_int_equal(r.type, KVMM_TR_SEAL);
		assert_true(r.client < THREADS && r.seq < SPANS && r.frame < PER_SPAN);
		assert_int_equal(seen[r.client][r.seq][r.frame], 0);
		seen[r.client][r.seq][r.frame] = 1;
		/* a span's records are contiguous: the next one follows it */
		if (r.frame + 1 < PER_SPAN) {
			struct kvmm_trace_rec n;

			assert_true(kvmm_trace_read(tr, s + 1, &n));
			assert_int_equal(n.client, r.client);
			assert_int_equal(n.frame, r.frame + 1);
		}
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(outside[i], SPANS);
	__atomic_store_n(&kvmm_trace_ring, *state, __ATOMIC_RELEASE);
	kvmm_trace_destroy(tr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_sizes),
		cmocka_unit_test_setup_teardown(test_direct_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_span_staged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_span_stage_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrap_overwritten, setup, teardown),
		cmocka_unit_test_setup_teardown(test_uninstalled_under_span, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
