// SPDX-License-Identifier: MIT
/*
 * test_bitmap.c - unit tests for include/bitmap.h: searches at word boundaries (bits 63, 64,
 * the last bit, empty and full maps, garbage past the size), counts, range operations and
 * searches compared with a plain bool-array model, and the atomic operations raced by
 * threads.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bitmap.h"

#define MAXBITS 320

static const unsigned long sizes[] = {1, 2, 63, 64, 65, 127, 128, 129, 200, 256, MAXBITS};

static void test_declare_and_sizes(void **state)
{
	DECLARE_BITMAP(one, 1);
	DECLARE_BITMAP(word, 64);
	DECLARE_BITMAP(more, 65);

	(void)state;
	assert_int_equal(BITS_PER_LONG, 64);
	assert_int_equal(sizeof(one), 8);
	assert_int_equal(sizeof(word), 8);
	assert_int_equal(sizeof(more), 16);
	assert_int_equal(bitmap_size(0), 0);
	assert_int_equal(bitmap_size(129), 24);
	assert_int_equal(BITMAP_LAST_WORD_MASK(64), ~0UL);
	assert_int_equal(BITMAP_LAST_WORD_MASK(65), 1UL);
	assert_int_equal(BITMAP_LAST_WORD_MASK(63), ~0UL >> 1);
}

static void test_empty_and_full(void **state)
{
	unsigned long map[BITS_TO_LONGS(MAXBITS)];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		unsigned long n = sizes[i];

		bitmap_zero(map, n);
		assert_int_equal(find_first_bit(map, n), n);
		assert_int_equal(find_next_bit(map, n, 0), n);
		assert_int_equal(find_last_bit(map, n), n);
		assert_int_equal(find_first_zero_bit(map, n), 0);
		assert_int_equal(find_next_zero_bit(map, n, n - 1), n - 1);
		assert_int_equal(bitmap_weight(map, n), 0);
		assert_true(bitmap_empty(map, n));
		assert_false(bitmap_full(map, n));

		bitmap_fill(map, n);
		assert_int_equal(find_first_zero_bit(map, n), n);
		assert_int_equal(find_next_zero_bit(map, n, n / 2), n);
		assert_int_equal(find_first_bit(map, n), 0);
		assert_int_equal(find_last_bit(map, n), n - 1);
		assert_int_equal(find_next_bit(map, n, n - 1), n - 1);
		assert_int_equal(bitmap_weight(map, n), n);
		assert_true(bitmap_full(map, n));
		assert_false(bitmap_empty(map, n));
		/* fill leaves the tail of the last word clear */
		assert_int_equal(map[BIT_WORD(n - 1)], BITMAP_LAST_WORD_MASK(n));

		/* searches from at or past the end find nothing */
		assert_int_equal(find_next_bit(map, n, n), n);
		assert_int_equal(find_next_bit(map, n, n + 100), n);
		assert_int_equal(find_next_zero_bit(map, n, n), n);
	}
	/* size 0 */
	assert_int_equal(find_first_bit(map, 0), 0);
	assert_int_equal(find_last_bit(map, 0), 0);
	assert_int_equal(bitmap_weight(map, 0), 0);
}

static void test_word_boundaries(void **state)
{
	DECLARE_BITMAP(map, 200);

	(void)state;
	bitmap_zero(map, 200);
	bitmap_set_bit(map, 63);
	assert_int_equal(find_first_bit(map, 200), 63);
	assert_int_equal(find_next_bit(map, 200, 63), 63);
	assert_int_equal(find_next_bit(map, 200, 64), 200);
	assert_int_equal(find_last_bit(map, 200), 63);
	assert_int_equal(find_first_bit(map, 63), 63); /* bit 63 is outside a 63-bit map */
	assert_int_equal(find_first_bit(map, 64), 63);
	assert_int_equal(map[0], 1UL << 63);
	assert_int_equal(map[1], 0);

	bitmap_set_bit(map, 64);
	assert_int_equal(map[1], 1UL);
	assert_int_equal(find_next_bit(map, 200, 64), 64);
	assert_int_equal(find_next_bit(map, 200, 65), 200);
	assert_int_equal(find_last_bit(map, 200), 64);
	assert_int_equal(find_last_bit(map, 64), 63);
	assert_int_equal(bitmap_weight(map, 200), 2);
	assert_int_equal(bitmap_weight(map, 64), 1);
	assert_int_equal(bitmap_weight(map, 65), 2);

	bitmap_set_bit(map, 199); /* last bit */
	assert_int_equal(find_next_bit(map, 200, 65), 199);
	assert_int_equal(find_last_bit(map, 200), 199);
	assert_int_equal(find_next_bit(map, 199, 65), 199); /* out of a 199-bit map */
	assert_int_equal(bitmap_weight(map, 200), 3);

	bitmap_clear_bit(map, 63);
	bitmap_clear_bit(map, 64);
	assert_int_equal(find_first_bit(map, 200), 199);

	/* zero search across a full word: the first zero is the first bit of the next one */
	bitmap_zero(map, 200);
	bitmap_set(map, 0, 128);
	assert_int_equal(map[0], ~0UL);
	assert_int_equal(map[1], ~0UL);
	assert_int_equal(map[2], 0);
	assert_int_equal(find_first_zero_bit(map, 200), 128);
	assert_int_equal(find_next_zero_bit(map, 200, 5), 128);
	assert_int_equal(find_first_zero_bit(map, 128), 128);
	bitmap_clear_bit(map, 64);
	assert_int_equal(find_next_zero_bit(map, 200, 0), 64);
	assert_int_equal(find_next_zero_bit(map, 200, 65), 128);
	bitmap_clear_bit(map, 63);
	assert_int_equal(find_next_zero_bit(map, 200, 0), 63);

	/* every single-bit position */
	for (unsigned long b = 0; b < 200; b++) {
		bitmap_zero(map, 200);
		bitmap_set_bit(map, b);
		assert_int_equal(find_first_bit(map, 200), b);
		assert_int_equal(find_last_bit(map, 200), b);
		assert_int_equal(find_next_bit(map, 200, b + 1), 200);
		bitmap_fill(map, 200);
		bitmap_clear_bit(map, b);
		assert_int_equal(find_first_zero_bit(map, 200), b);
		assert_int_equal(find_next_zero_bit(map, 200, b + 1), 200);
		assert_int_equal(bitmap_weight(map, 200), 199);
	}
}

/* Bits past the size in the last word are garbage as far as the bitmap is concerned. */
static void test_tail_bits_ignored(void **state)
{
	unsigned long map[2];

	(void)state;
	map[0] = 0;
	map[1] = ~0UL << 6; /* bits 70..127 set: beyond a 70-bit map */
	assert_int_equal(find_first_bit(map, 70), 70);
	assert_int_equal(find_next_bit(map, 70, 64), 70);
	assert_int_equal(find_last_bit(map, 70), 70);
	assert_int_equal(bitmap_weight(map, 70), 0);
	assert_true(bitmap_empty(map, 70));

	map[0] = ~0UL;
	map[1] = 0x3fUL; /* bits 64..69 set, tail clear */
	assert_true(bitmap_full(map, 70));
	assert_int_equal(find_first_zero_bit(map, 70), 70);
	assert_int_equal(bitmap_weight(map, 70), 70);
}

static void test_single_bit_ops(void **state)
{
	DECLARE_BITMAP(map, 130);

	(void)state;
	bitmap_zero(map, 130);
	assert_false(bitmap_test_and_set_bit(map, 129));
	assert_true(bitmap_test_and_set_bit(map, 129));
	assert_true(bitmap_test_bit(map, 129));
	assert_false(bitmap_test_bit(map, 128));
	assert_true(bitmap_test_and_clear_bit(map, 129));
	assert_false(bitmap_test_and_clear_bit(map, 129));
	assert_true(bitmap_empty(map, 130));

	assert_false(bitmap_test_and_set_bit_atomic(map, 64));
	assert_true(bitmap_test_and_set_bit_atomic(map, 64));
	assert_true(bitmap_test_bit_atomic(map, 64));
	bitmap_set_bit_atomic(map, 0);
	bitmap_clear_bit_atomic(map, 64);
	assert_false(bitmap_test_bit(map, 64));
	assert_true(bitmap_test_bit(map, 0));
	assert_true(bitmap_test_and_clear_bit_atomic(map, 0));
	assert_false(bitmap_test_and_clear_bit_atomic(map, 0));
	assert_false(bitmap_test_and_set_bit_lock(map, 5));
	assert_true(bitmap_test_and_set_bit_lock(map, 5));
	bitmap_clear_bit_unlock(map, 5);
	assert_true(bitmap_empty(map, 130));

	bitmap_set_bit(map, 3);
	bitmap_set_bit(map, 100);
	{
		DECLARE_BITMAP(copy, 130);

		bitmap_copy(copy, map, 130);
		assert_memory_equal(copy, map, bitmap_size(130));
	}
}

/* Model: a bool per bit. */
static bool model[MAXBITS];

static void check_against_model(const unsigned long *map, unsigned long n)
{
	unsigned long weight = 0, last = n;

	for (unsigned long i = 0; i < n; i++) {
		assert_int_equal(bitmap_test_bit(map, i), model[i]);
		weight += model[i];
		if (model[i])
			last = i;
	}
	assert_int_equal(bitmap_weight(map, n), weight);
	assert_int_equal(find_last_bit(map, n), last);
	for (unsigned long start = 0; start <= n; start++) {
		unsigned long set = start, clear = start;

		while (set < n && !model[set])
			set++;
		while (clear < n && model[clear])
			clear++;
		assert_int_equal(find_next_bit(map, n, start), set);
		assert_int_equal(find_next_zero_bit(map, n, start), clear);
	}
}

/* bitmap_set/bitmap_clear for every (start, len) in a 200-bit map against the model. */
static void test_ranges(void **state)
{
	const unsigned long n = 200;
	unsigned long map[BITS_TO_LONGS(MAXBITS)];

	(void)state;
	for (unsigned long start = 0; start < n; start += 3) {
		for (unsigned long len = 0; start + len <= n; len += 5) {
			bitmap_zero(map, n);
			memset(model, 0, sizeof(model));
			bitmap_set(map, start, len);
			for (unsigned long i = start; i < start + len; i++)
				model[i] = true;
			assert_int_equal(bitmap_weight(map, n), len);
			assert_int_equal(find_first_bit(map, n), len ? start : n);
			if (len)
				assert_int_equal(find_last_bit(map, n), start + len - 1);

			bitmap_fill(map, n);
			bitmap_clear(map, start, len);
			assert_int_equal(bitmap_weight(map, n), n - len);
			assert_int_equal(find_first_zero_bit(map, n), len ? start : n);
			for (unsigned long i = 0; i < n; i++)
				assert_int_equal(bitmap_test_bit(map, i),
						 i < start || i >= start + len);
		}
	}
	/* one full check with the model, ranges crossing two word boundaries */
	bitmap_zero(map, n);
	memset(model, 0, sizeof(model));
	bitmap_set(map, 60, 72);
	bitmap_clear(map, 62, 3);
	for (unsigned long i = 60; i < 132; i++)
		model[i] = i < 62 || i > 64;
	check_against_model(map, n);
}

static void test_random_model(void **state)
{
	unsigned long map[BITS_TO_LONGS(MAXBITS)];

	(void)state;
	srand(4242);
	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		unsigned long n = sizes[s];

		bitmap_zero(map, n);
		memset(model, 0, sizeof(model));
		for (int step = 0; step < 300; step++) {
			unsigned long bit = (unsigned long)rand() % n;
			unsigned long len = (unsigned long)rand() % (n - bit + 1);

			switch (rand() % 5) {
			case 0:
				bitmap_set_bit(map, bit);
				model[bit] = true;
				break;
			case 1:
				bitmap_clear_bit(map, bit);
				model[bit] = false;
				break;
			case 2:
				assert_int_equal(bitmap_test_and_set_bit(map, bit), model[bit]);
				model[bit] = true;
				break;
			case 3:
				bitmap_set(map, bit, len);
				for (unsigned long i = bit; i < bit + len; i++)
					model[i] = true;
				break;
			default:
				bitmap_clear(map, bit, len);
				for (unsigned long i = bit; i < bit + len; i++)
					model[i] = false;
				break;
			}
			if (step % 10 == 0)
				check_against_model(map, n);
		}
		check_against_model(map, n);
	}
}

static void test_find_next_zero_area(void **state)
{
	DECLARE_BITMAP(map, 256);

	(void)state;
	bitmap_zero(map, 256);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 256), 0);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 257), 256);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 10, 246), 10);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 10, 247), 256);

	bitmap_set(map, 0, 60);
	bitmap_set_bit(map, 66);
	bitmap_set(map, 80, 100);
	/* holes: [60, 66) of 6, [67, 80) of 13, [180, 256) of 76 */
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 6), 60);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 7), 67);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 61, 6), 67);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 14), 180);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 76), 180);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 77), 256);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 1), 60);
	bitmap_fill(map, 256);
	assert_int_equal(bitmap_find_next_zero_area(map, 256, 0, 1), 256);
}

static void test_for_each_bit(void **state)
{
	DECLARE_BITMAP(map, 150);
	unsigned long bit, n = 0, expect[] = {0, 63, 64, 65, 127, 128, 149};

	(void)state;
	bitmap_zero(map, 150);
	for_each_set_bit (bit, map, 150)
		fail_msg("set bit %lu in an empty map", bit);
	for (size_t i = 0; i < ARRAY_SIZE(expect); i++)
		bitmap_set_bit(map, expect[i]);
	for_each_set_bit (bit, map, 150) {
		assert_true(n < ARRAY_SIZE(expect));
		assert_int_equal(bit, expect[n++]);
	}
	assert_int_equal(n, ARRAY_SIZE(expect));

	n = 0;
	for_each_clear_bit (bit, map, 150) {
		assert_false(bitmap_test_bit(map, bit));
		n++;
	}
	assert_int_equal(n, 150 - ARRAY_SIZE(expect));

	/* clearing the current bit inside the walk is allowed */
	n = 0;
	for_each_set_bit (bit, map, 150) {
		bitmap_clear_bit(map, bit);
		n++;
	}
	assert_int_equal(n, ARRAY_SIZE(expect));
	assert_true(bitmap_empty(map, 150));
}

/* ------------------------------------------------------------------------------------ */
/* Concurrency: the atomic variants must not lose updates to a shared word */

#define NTHREADS 4
#define RACE_BITS 256
#define ROUNDS 200

static unsigned long race_map[BITS_TO_LONGS(RACE_BITS)];
static unsigned long claims[NTHREADS];
static unsigned long lock_word[1];
static unsigned long locked_counter;
static pthread_barrier_t start_barrier;

/* Thread i owns the bits with bit % NTHREADS == i; all threads share every word. */
static void *set_clear_worker(void *arg)
{
	unsigned long me = (unsigned long)(uintptr_t)arg;

	pthread_barrier_wait(&start_barrier);
	for (int r = 0; r < ROUNDS; r++) {
		for (unsigned long b = me; b < RACE_BITS; b += NTHREADS)
			bitmap_set_bit_atomic(race_map, b);
		for (unsigned long b = me; b < RACE_BITS; b += NTHREADS)
			if (b % 8 >= NTHREADS) /* leave the lowest bits set at the end */
				bitmap_clear_bit_atomic(race_map, b);
	}
	return NULL;
}

static void run_threads(void *(*fn)(void *))
{
	pthread_t th[NTHREADS];

	assert_int_equal(pthread_barrier_init(&start_barrier, NULL, NTHREADS), 0);
	for (unsigned long i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, fn, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&start_barrier);
}

static void test_atomic_set_clear_race(void **state)
{
	(void)state;
	bitmap_zero(race_map, RACE_BITS);
	run_threads(set_clear_worker);
	for (unsigned long b = 0; b < RACE_BITS; b++)
		assert_int_equal(bitmap_test_bit(race_map, b), b % 8 < NTHREADS);
}

/* Every thread tries to claim every bit; each bit must be claimed exactly once. */
static void *claim_worker(void *arg)
{
	unsigned long me = (unsigned long)(uintptr_t)arg;

	pthread_barrier_wait(&start_barrier);
	for (unsigned long b = 0; b < RACE_BITS; b++)
		if (!bitmap_test_and_set_bit_atomic(race_map, b))
			claims[me]++;
	return NULL;
}

static void test_atomic_claim_race(void **state)
{
	unsigned long total = 0;

	(void)state;
	for (int round = 0; round < 50; round++) {
		bitmap_zero(race_map, RACE_BITS);
		memset(claims, 0, sizeof(claims));
		run_threads(claim_worker);
		total = 0;
		for (int i = 0; i < NTHREADS; i++)
			total += claims[i];
		assert_int_equal(total, RACE_BITS);
		assert_true(bitmap_full(race_map, RACE_BITS));
	}
}

/* A bit lock protecting a plain counter: no increment may be lost. */
static void *bitlock_worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&start_barrier);
	for (int i = 0; i < 20000; i++) {
		while (bitmap_test_and_set_bit_lock(lock_word, 7))
			sched_yield(); /* the holder may be preempted on a small machine */
		locked_counter++;
		bitmap_clear_bit_unlock(lock_word, 7);
	}
	return NULL;
}

static void test_bit_lock(void **state)
{
	(void)state;
	lock_word[0] = 0x5UL; /* neighbouring bits must survive */
	locked_counter = 0;
	run_threads(bitlock_worker);
	assert_int_equal(locked_counter, NTHREADS * 20000UL);
	assert_int_equal(lock_word[0], 0x5UL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_declare_and_sizes),
		cmocka_unit_test(test_empty_and_full),
		cmocka_unit_test(test_word_boundaries),
		cmocka_unit_test(test_tail_bits_ignored),
		cmocka_unit_test(test_single_bit_ops),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_random_model),
		cmocka_unit_test(test_find_next_zero_area),
		cmocka_unit_test(test_for_each_bit),
		cmocka_unit_test(test_atomic_set_clear_race),
		cmocka_unit_test(test_atomic_claim_race),
		cmocka_unit_test(test_bit_lock),
	};

	return cmocka_run_group_tests_name("bitmap", tests, NULL, NULL);
}
