// SPDX-License-Identifier: MIT
/*
 * test_atomic.c - unit tests for include/atomic.h: the value semantics of every counter
 * operation (32 and 64 bit), increments raced by two threads that must add up exactly,
 * acquire/release message passing, and the seqcount: a writer updating two fields while
 * readers (threads, and a process on a shared mapping) check that they never accept a
 * half-written pair.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "atomic.h"

static void test_atomic32_ops(void **state)
{
	struct kvmm_atomic v = KVMM_ATOMIC_INIT(5);
	int old;

	(void)state;
	assert_int_equal(kvmm_atomic_read(&v), 5);
	kvmm_atomic_set(&v, 10);
	assert_int_equal(kvmm_atomic_read(&v), 10);
	kvmm_atomic_inc(&v);
	kvmm_atomic_add(5, &v);
	assert_int_equal(kvmm_atomic_read(&v), 16);
	kvmm_atomic_dec(&v);
	kvmm_atomic_sub(3, &v);
	assert_int_equal(kvmm_atomic_read(&v), 12);
	assert_int_equal(kvmm_atomic_inc_return(&v), 13);
	assert_int_equal(kvmm_atomic_dec_return(&v), 12);
	assert_int_equal(kvmm_atomic_add_return(-20, &v), -8);
	assert_int_equal(kvmm_atomic_sub_return(-8, &v), 0);
	assert_int_equal(kvmm_atomic_fetch_add(3, &v), 0);
	assert_int_equal(kvmm_atomic_read(&v), 3);

	assert_false(kvmm_atomic_dec_and_test(&v));
	assert_false(kvmm_atomic_dec_and_test(&v));
	assert_true(kvmm_atomic_dec_and_test(&v));
	assert_false(kvmm_atomic_dec_and_test(&v)); /* 0 -> -1 is not zero */
	assert_int_equal(kvmm_atomic_read(&v), -1);

	assert_int_equal(kvmm_atomic_xchg(&v, 7), -1);
	assert_int_equal(kvmm_atomic_cmpxchg(&v, 7, 9), 7); /* success returns old */
	assert_int_equal(kvmm_atomic_read(&v), 9);
	assert_int_equal(kvmm_atomic_cmpxchg(&v, 7, 11), 9); /* failure returns current */
	assert_int_equal(kvmm_atomic_read(&v), 9);

	old = 8;
	assert_false(kvmm_atomic_try_cmpxchg(&v, &old, 1));
	assert_int_equal(old, 9); /* refreshed */
	assert_true(kvmm_atomic_try_cmpxchg(&v, &old, 1));
	assert_int_equal(kvmm_atomic_read(&v), 1);

	assert_true(kvmm_atomic_inc_not_zero(&v));
	assert_int_equal(kvmm_atomic_read(&v), 2);
	kvmm_atomic_set(&v, 0);
	assert_false(kvmm_atomic_inc_not_zero(&v));
	assert_int_equal(kvmm_atomic_read(&v), 0);
	assert_true(kvmm_atomic_add_unless(&v, 4, 1));
	assert_false(kvmm_atomic_add_unless(&v, 4, 4));
	assert_int_equal(kvmm_atomic_read(&v), 4);

	kvmm_atomic_set(&v, INT32_MAX);
	assert_int_equal(kvmm_atomic_inc_return(&v), INT32_MIN); /* wraps, no UB */
}

static void test_atomic64_ops(void **state)
{
	struct kvmm_atomic64 v = KVMM_ATOMIC_INIT(INT64_C(1) << 40);
	const int64_t big = INT64_C(1) << 40;
	int64_t old;

	(void)state;
	assert_true(kvmm_atomic64_read(&v) == big);
	kvmm_atomic64_inc(&v);
	kvmm_atomic64_add(big, &v);
	assert_true(kvmm_atomic64_read(&v) == 2 * big + 1);
	kvmm_atomic64_dec(&v);
	kvmm_atomic64_sub(big, &v);
	assert_true(kvmm_atomic64_read(&v) == big);
	assert_true(kvmm_atomic64_inc_return(&v) == big + 1);
	assert_true(kvmm_atomic64_dec_return(&v) == big);
	assert_true(kvmm_atomic64_add_return(big, &v) == 2 * big);
	assert_true(kvmm_atomic64_sub_return(2 * big, &v) == 0);
	assert_true(kvmm_atomic64_fetch_add(big, &v) == 0);
	kvmm_atomic64_set(&v, 2);
	assert_false(kvmm_atomic64_dec_and_test(&v));
	assert_true(kvmm_atomic64_dec_and_test(&v));
	assert_true(kvmm_atomic64_xchg(&v, big) == 0);
	assert_true(kvmm_atomic64_cmpxchg(&v, big, 3 * big) == big);
	assert_true(kvmm_atomic64_cmpxchg(&v, big, 0) == 3 * big);
	old = 0;
	assert_false(kvmm_atomic64_try_cmpxchg(&v, &old, 1));
	assert_true(old == 3 * big);
	assert_true(kvmm_atomic64_try_cmpxchg(&v, &old, 1));
	assert_true(kvmm_atomic64_inc_not_zero(&v));
	assert_true(kvmm_atomic64_read(&v) == 2);
	kvmm_atomic64_set(&v, 0);
	assert_false(kvmm_atomic64_inc_not_zero(&v));
	assert_false(kvmm_atomic64_add_unless(&v, 1, 0));
	assert_true(kvmm_atomic64_add_unless(&v, 1, 5));
	assert_true(kvmm_atomic64_read(&v) == 1);
}

/* ------------------------------------------------------------------------------------ */
/* Races between two threads */

#define RACE_ITERS 1000000

static struct kvmm_atomic counter32;
static struct kvmm_atomic64 counter64;
static struct kvmm_atomic cas_counter;
static pthread_barrier_t barrier2;

static void *inc_worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (int i = 0; i < RACE_ITERS; i++) {
		kvmm_atomic_inc(&counter32);
		kvmm_atomic64_add(3, &counter64);
	}
	return NULL;
}

/* The other thread mixes in value-returning and decrementing operations. */
static void *inc_return_worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (int i = 0; i < RACE_ITERS; i++) {
		kvmm_atomic_inc_return(&counter32);
		kvmm_atomic_add(2, &counter32);
		kvmm_atomic_dec(&counter32);
		kvmm_atomic64_inc_return(&counter64);
	}
	return NULL;
}

static void run_two(void *(*a)(void *), void *(*b)(void *))
{
	pthread_t t1, t2;

	assert_int_equal(pthread_barrier_init(&barrier2, NULL, 2), 0);
	assert_int_equal(pthread_create(&t1, NULL, a, NULL), 0);
	assert_int_equal(pthread_create(&t2, NULL, b, NULL), 0);
	assert_int_equal(pthread_join(t1, NULL), 0);
	assert_int_equal(pthread_join(t2, NULL), 0);
	pthread_barrier_destroy(&barrier2);
}

static void test_increment_race(void **state)
{
	(void)state;
	kvmm_atomic_set(&counter32, 0);
	kvmm_atomic64_set(&counter64, 0);
	run_two(inc_worker, inc_return_worker);
	assert_int_equal(kvmm_atomic_read(&counter32), 3 * RACE_ITERS);
	assert_true(kvmm_atomic64_read(&counter64) == 4 * (int64_t)RACE_ITERS);
}

/* A CAS loop that doubles-then-halves would lose updates if cmpxchg were not atomic. */
static void *cas_worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (int i = 0; i < RACE_ITERS / 2; i++) {
		int old = kvmm_atomic_read(&cas_counter);

		while (!kvmm_atomic_try_cmpxchg(&cas_counter, &old, old + 1))
			cpu_relax();
		old = kvmm_atomic_read(&cas_counter);
		while (kvmm_atomic_cmpxchg(&cas_counter, old, old + 1) != old)
			old = kvmm_atomic_read(&cas_counter);
	}
	return NULL;
}

static void test_cmpxchg_race(void **state)
{
	(void)state;
	kvmm_atomic_set(&cas_counter, 0);
	run_two(cas_worker, cas_worker);
	assert_int_equal(kvmm_atomic_read(&cas_counter), 2 * RACE_ITERS);
}

/* ------------------------------------------------------------------------------------ */
/* Acquire/release message passing */

#define MP_ROUNDS 100000

static uint64_t mp_data[4];
static uint32_t mp_seq; /* producer -> consumer: round published */
static uint32_t mp_ack; /* consumer -> producer: round consumed */
static uint32_t mp_errors;

static void *mp_producer(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (uint32_t r = 1; r <= MP_ROUNDS; r++) {
		while (smp_load_acquire(&mp_ack) != r - 1)
			cpu_relax();
		for (int i = 0; i < 4; i++)
			WRITE_ONCE(mp_data[i], (uint64_t)r * (uint64_t)(i + 1));
		smp_store_release(&mp_seq, r);
	}
	return NULL;
}

static void *mp_consumer(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (uint32_t r = 1; r <= MP_ROUNDS; r++) {
		while (smp_load_acquire(&mp_seq) != r)
			cpu_relax();
		for (int i = 0; i < 4; i++)
			if (READ_ONCE(mp_data[i]) != (uint64_t)r * (uint64_t)(i + 1))
				mp_errors++;
		smp_store_release(&mp_ack, r);
	}
	return NULL;
}

static void test_acquire_release(void **state)
{
	(void)state;
	mp_seq = mp_ack = mp_errors = 0;
	run_two(mp_producer, mp_consumer);
	assert_int_equal(mp_errors, 0);
	assert_int_equal(mp_seq, MP_ROUNDS);
	smp_mb();
	smp_rmb();
	smp_wmb();
}

/* ------------------------------------------------------------------------------------ */
/* Seqcount */

/*
 * The protected pair: b must always equal ~a * 3 of the same a. Fields sit on separate
 * cache lines so that a reader can easily observe one updated and not the other.
 */
struct pair {
	struct kvmm_seqcount seq;
	uint64_t a __cacheline_aligned;
	uint64_t b __cacheline_aligned;
	uint32_t writer_done;
};

#define PAIR_B(a) (~(a)*3)
#define SEQ_WRITES 200000

static void pair_write(struct pair *p, uint64_t a)
{
	kvmm_seqcount_write_begin(&p->seq);
	WRITE_ONCE(p->a, a);
	WRITE_ONCE(p->b, PAIR_B(a));
	kvmm_seqcount_write_end(&p->seq);
}

/* Read until the writer is done; returns the number of torn pairs accepted (must be 0). */
static unsigned long pair_reader(struct pair *p, uint64_t *last_a, unsigned long *reads)
{
	unsigned long torn = 0;
	uint64_t a, b, prev = 0;
	bool done;

	*reads = 0;
	do {
		uint32_t s;

		done = smp_load_acquire(&p->writer_done);
		do {
			s = kvmm_seqcount_read_begin(&p->seq);
			a = READ_ONCE(p->a);
			b = READ_ONCE(p->b);
		} while (kvmm_seqcount_read_retry(&p->seq, s));
		assert_int_equal(s & 1, 0);
		if (b != PAIR_B(a) || a < prev)
			torn++;
		prev = a;
		(*reads)++;
	} while (!done);
	*last_a = a;
	return torn;
}

static struct pair thread_pair;

static void *seq_writer(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	for (uint64_t i = 1; i <= SEQ_WRITES; i++)
		pair_write(&thread_pair, i);
	smp_store_release(&thread_pair.writer_done, 1);
	return NULL;
}

static unsigned long reader_torn, reader_reads;
static uint64_t reader_last;

static void *seq_reader(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier2);
	reader_torn = pair_reader(&thread_pair, &reader_last, &reader_reads);
	return NULL;
}

static void test_seqcount_threads(void **state)
{
	(void)state;
	memset(&thread_pair, 0, sizeof(thread_pair));
	kvmm_seqcount_init(&thread_pair.seq);
	thread_pair.b = PAIR_B(0);
	run_two(seq_writer, seq_reader);
	assert_int_equal(reader_torn, 0);
	assert_true(reader_reads > 0);
	assert_int_equal(reader_last, SEQ_WRITES); /* the last read follows writer_done */
	assert_int_equal(thread_pair.seq.sequence, 2 * SEQ_WRITES);
}

/* The same with the writer in another process, over a MAP_SHARED mapping. */
static void test_seqcount_processes(void **state)
{
	struct pair *p;
	unsigned long torn, reads;
	uint64_t last;
	pid_t pid;
	int status;

	(void)state;
	p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	kvmm_seqcount_init(&p->seq);
	p->b = PAIR_B(0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (uint64_t i = 1; i <= SEQ_WRITES; i++)
			pair_write(p, i);
		smp_store_release(&p->writer_done, 1);
		_exit(0);
	}
	torn = pair_reader(p, &last, &reads);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(torn, 0);
	assert_int_equal(last, SEQ_WRITES);
	assert_int_equal(p->seq.sequence, 2 * SEQ_WRITES);
	munmap(p, sizeof(*p));
}

/* Single-threaded protocol checks: odd while writing, retry after any write. */
static void test_seqcount_protocol(void **state)
{
	struct kvmm_seqcount s = KVMM_SEQCOUNT_INIT;
	uint32_t seq, seq2;

	(void)state;
	assert_true(kvmm_seqcount_try_read_begin(&s, &seq));
	assert_int_equal(seq, 0);
	assert_false(kvmm_seqcount_read_retry(&s, seq));

	kvmm_seqcount_write_begin(&s);
	assert_false(kvmm_seqcount_try_read_begin(&s, &seq2)); /* write in progress */
	assert_int_equal(seq2 & 1, 1);
	assert_true(kvmm_seqcount_read_retry(&s, seq)); /* a reader that began before */
	kvmm_seqcount_write_end(&s);
	assert_true(kvmm_seqcount_read_retry(&s, seq)); /* still changed */

	seq = kvmm_seqcount_read_begin(&s);
	assert_int_equal(seq, 2);
	assert_false(kvmm_seqcount_read_retry(&s, seq));

	/* wrap-around of the 32-bit count keeps working */
	s.sequence = UINT32_MAX - 1;
	seq = kvmm_seqcount_read_begin(&s);
	kvmm_seqcount_write_begin(&s);
	kvmm_seqcount_write_end(&s);
	assert_int_equal(s.sequence, 0);
	assert_true(kvmm_seqcount_read_retry(&s, seq));
	assert_false(kvmm_seqcount_read_retry(&s, kvmm_seqcount_read_begin(&s)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_atomic32_ops),	 cmocka_unit_test(test_atomic64_ops),
		cmocka_unit_test(test_increment_race),	 cmocka_unit_test(test_cmpxchg_race),
		cmocka_unit_test(test_acquire_release),	 cmocka_unit_test(test_seqcount_protocol),
		cmocka_unit_test(test_seqcount_threads), cmocka_unit_test(test_seqcount_processes),
	};

	return cmocka_run_group_tests_name("atomic", tests, NULL, NULL);
}
