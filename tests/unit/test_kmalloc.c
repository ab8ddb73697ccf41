// SPDX-License-Identifier: MIT
/*
 * test_kmalloc.c - unit tests for include/kmalloc.h (kvmm/kmalloc.c): allocation and zeroing,
 * realloc keeping the contents while growing and shrinking, the size-0 and NULL cases, calloc
 * overflow, and the statistics growing by at least what was allocated and falling back after
 * the frees, also for memory allocated by threads that have ended (each thread has a cache
 * and call counters of its own in the jemalloc build).  The same tests run against the
 * jemalloc arena (normal build) and libc (SAN=1).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kmalloc.h"

static void test_malloc_calloc(void **state)
{
	unsigned char *a, *z;
	size_t i;

	(void)state;
	a = kvmm_malloc(1000);
	assert_non_null(a);
	memset(a, 0xa5, 1000);
	z = kvmm_calloc(4096, 3);
	assert_non_null(z);
	for (i = 0; i < 4096 * 3; i++)
		assert_int_equal(z[i], 0);
	/* size 0 still gives a pointer that kvmm_free takes */
	kvmm_free(kvmm_malloc(0));
	kvmm_free(kvmm_calloc(0, 8));
	kvmm_free(NULL);
	kvmm_free(a);
	kvmm_free(z);
}

static void test_calloc_overflow(void **state)
{
	(void)state;
	errno = 0;
	assert_null(kvmm_calloc(SIZE_MAX / 2, 4));
	assert_int_equal(errno, ENOMEM);
}

static void test_realloc_preserves(void **state)
{
	uint32_t *p, *q;
	uint32_t i;

	(void)state;
	p = kvmm_realloc(NULL, 16 * sizeof(*p)); /* NULL: like kvmm_malloc */
	assert_non_null(p);
	for (i = 0; i < 16; i++)
		p[i] = i * 2654435761u;
	/* grow through small, large and huge size classes: the contents move along */
	for (size_t n = 64; n <= (1u << 20); n *= 8) {
		q = kvmm_realloc(p, n * sizeof(*q));
		assert_non_null(q);
		for (i = 0; i < 16; i++)
			assert_int_equal(q[i], i * 2654435761u);
		q[n - 1] = 0xdeadbeef;
		p = q;
	}
	q = kvmm_realloc(p, 8 * sizeof(*q)); /* shrink keeps the head */
	assert_non_null(q);
	for (i = 0; i < 8; i++)
		assert_int_equal(q[i], i * 2654435761u);
	kvmm_free(q);
}

static void test_stats_grow(void **state)
{
	struct kvmm_kmalloc_stats s0, s1, s2;
	enum {
		N = 64,
		SZ = 8192
	};
	void *v[N];
	int i, ret;

	(void)state;
	ret = kvmm_kmalloc_stats(&s0);
	if (ret == -ENOTSUP)
		skip(); /* a jemalloc built without statistics */
	assert_int_equal(ret, 0);
	assert_non_null(s0.backend);
	for (i = 0; i < N; i++) {
		v[i] = kvmm_malloc(SZ);
		assert_non_null(v[i]);
		memset(v[i], i, SZ); /* touched: resident too */
	}
	assert_int_equal(kvmm_kmalloc_stats(&s1), 0);
	assert_true(s1.allocated >= s0.allocated + (uint64_t)N * SZ);
	assert_true(s1.active >= s1.allocated);
	assert_true(s1.total_allocated >= s1.allocated);
	assert_true(s1.nr_allocs >= s0.nr_allocs + N);
	if (strcmp(s1.backend, "jemalloc") == 0) {
		assert_true(s1.resident >= (uint64_t)N * SZ);
		assert_true(s1.metadata > 0);
	}
	for (i = 0; i < N; i++)
		kvmm_free(v[i]);
	assert_int_equal(kvmm_kmalloc_stats(&s2), 0);
	assert_true(s2.allocated + (uint64_t)N * SZ <= s1.allocated);
	assert_true(s2.nr_frees >= s1.nr_frees + N);
}

enum {
	THREADS = 4,
	PER_THREAD = 256,
	OBJ = 64
};

/* Allocate PER_THREAD objects for the main thread to free, with some churn of its own. */
static void *alloc_thread(void *arg)
{
	void **v = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		kvmm_free(kvmm_malloc(OBJ)); /* stays in this thread's cache until it ends */
		v[i] = kvmm_malloc(OBJ);
		if (v[i])
			memset(v[i], i, OBJ);
	}
	return NULL;
}

static void test_threads(void **state)
{
	static void *v[THREADS][PER_THREAD];
	struct kvmm_kmalloc_stats s0, s1, s2;
	pthread_t t[THREADS];
	int ret;

	(void)state;
	ret = kvmm_kmalloc_stats(&s0);
	if (ret == -ENOTSUP)
		skip();
	assert_int_equal(ret, 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, alloc_thread, v[i]), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	/* the threads are gone: their calls are still counted, their objects still live */
	assert_int_equal(kvmm_kmalloc_stats(&s1), 0);
	assert_true(s1.nr_allocs >= s0.nr_allocs + 2 * THREADS * PER_THREAD);
	assert_true(s1.nr_frees >= s0.nr_frees + THREADS * PER_THREAD);
	assert_true(s1.allocated >= s0.allocated + (uint64_t)THREADS * PER_THREAD * OBJ);
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER_THREAD; j++) {
			const unsigned char *p = v[i][j];

			assert_non_null(p);
			assert_int_equal(p[OBJ - 1], (unsigned char)j);
			kvmm_free(v[i][j]);
		}
	/* freed by this thread: its cache is flushed by the statistics, which are exact again */
	assert_int_equal(kvmm_kmalloc_stats(&s2), 0);
	assert_true(s2.nr_frees >= s1.nr_frees + THREADS * PER_THREAD);
	assert_true(s2.allocated + (uint64_t)THREADS * PER_THREAD * OBJ <= s1.allocated);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malloc_calloc),	  cmocka_unit_test(test_calloc_overflow),
		cmocka_unit_test(test_realloc_preserves), cmocka_unit_test(test_stats_grow),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests_name("kmalloc", tests, NULL, NULL);
}
