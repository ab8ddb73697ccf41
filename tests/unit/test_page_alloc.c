// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_page_alloc.c - the page allocator (kvmm/page_alloc.c) and the mmap
 * backend: pool parameters and watermark defaults, the buddy allocator's split and merge
 * over pools of any size, magazines and their batches, exhaustion, namespace limits and
 * charges, scrubbing across namespaces, buddyinfo and the counters.  Every test checks the
 * whole pool with check_pool(), an independent walk of the free lists and frame states, after
 * each operation that changes them.  Random tests print their seed when they fail
 * (KVMM_TEST_SEED=n reruns one).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "list.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	/* xorshift64*: plenty for shuffling, and reproducible from the seed */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t test_seed(void)
{
	const char *s = getenv("KVMM_TEST_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : UINT64_C(0x9e3779b97f4a7c15);

	rng_state = seed ? seed : 1;
	return seed;
}

static void shuffle(struct kvmm_page **v, uint32_t n)
{
	uint32_t i;

	for (i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(rng_next() % i);
		struct kvmm_page *t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/*
 * Walk the whole pool and check everything the allocator promises: states counted exactly,
 * every free block aligned, inside the pool, made of FREE frames, head flagged with its
 * order, no frame in two blocks, no two free buddies left unmerged, nr_free and the
 * magazines' counts adding up.
 */
static void check_pool(struct kvmm_pool *pool)
{
	uint32_t counts[KVMM_PAGE_STATE_COUNT] = {0};
	uint32_t total = 0, free_frames = 0, mag_frames = 0, heads = 0;
	struct kvmm_magazine *mag;
	uint8_t *seen;
	unsigned int o, s;
	uint32_t f;

	for (f = 0; f < pool->nframes; f++) {
		assert_in_range(pool->pages[f].state, 0, KVMM_PAGE_STATE_COUNT - 1);
		counts[pool->pages[f].state]++;
		if (pool->pages[f].flags & KVMM_PG_BUDDY_HEAD)
			heads++;
	}
	for (s = 0; s < KVMM_PAGE_STATE_COUNT; s++) {
		assert_int_equal(counts[s], pool->nr_state[s]);
		total += pool->nr_state[s];
	}
	assert_int_equal(total, pool->nframes);

	seen = calloc(pool->nframes, 1);
	assert_non_null(seen);
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		struct kvmm_page *pg;
		uint32_t blocks = 0;

		list_for_each_entry (pg, &pool->free_area[o], lru) {
			uint32_t head = kvmm_page_to_frame(pool, pg), i;

			assert_int_equal(head & ((1u << o) - 1), 0);
			assert_true((uint64_t)head + (1u << o) <= pool->nframes);
			assert_true(pg->flags & KVMM_PG_BUDDY_HEAD);
			assert_int_equal(pg->order, o);
			for (i = 0; i < (1u << o); i++) {
				assert_int_equal(pg[i].state, KVMM_PAGE_FREE);
				assert_int_equal(seen[head + i], 0);
				seen[head + i] = 1;
				if (i)
					assert_false(pg[i].flags & KVMM_PG_BUDDY_HEAD);
			}
			if (o < KVMM_MAX_ORDER - 1) {
				uint32_t b = head ^ (1u << o);

				if (b < pool->nframes)
					assert_false((pool->pages[b].flags & KVMM_PG_BUDDY_HEAD) &&
						     pool->pages[b].order == o);
			}
			blocks++;
		}
		assert_int_equal(blocks, pool->nr_free_blocks[o]);
		free_frames += blocks << o;
	}
	free(seen);
	assert_int_equal(free_frames, pool->nr_free);
	assert_int_equal(free_frames, pool->nr_state[KVMM_PAGE_FREE]);

	list_for_each_entry (mag, &pool->mags, node) {
		struct kvmm_page *pg;
		uint32_t n = 0;

		assert_true(mag->count > 0);
		list_for_each_entry (pg, &mag->frames, lru) {
			assert_int_equal(pg->state, KVMM_PAGE_MAGAZINE);
			assert_int_equal(pg->owner, mag->owner);
			n++;
		}
		assert_int_equal(n, mag->count);
		assert_true(n <= mag->capacity);
		mag_frames += n;
	}
	assert_int_equal(mag_frames, pool->nr_state[KVMM_PAGE_MAGAZINE]);
	assert_int_equal(kvmm_pool_nr_free(pool), pool->nr_free + mag_frames);
	for (o = 0; o < KVMM_MAX_ORDER; o++)
		heads -= pool->nr_free_blocks[o];
	assert_int_equal(heads, 0);
}

/* Free blocks per order, as kvmm_buddyinfo() prints them, parsed back. */
static void parse_buddyinfo(struct kvmm_pool *pool, uint32_t blocks[KVMM_MAX_ORDER])
{
	char buf[KVMM_BUDDYINFO_SIZE], *p, *end;
	unsigned int o;
	int len;

	len = kvmm_buddyinfo(pool, buf, sizeof(buf));
	assert_true(len > 0);
	assert_int_equal((size_t)len, strlen(buf));
	assert_int_equal(strncmp(buf, "Order:", 6), 0);
	p = buf + 6;
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		assert_int_equal(strtoul(p, &end, 10), o);
		assert_true(end > p);
		p = end;
	}
	assert_int_equal(*p, '\n');
	p++;
	assert_int_equal(strncmp(p, "Free:", 5), 0);
	p += 5;
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		blocks[o] = (uint32_t)strtoul(p, &end, 10);
		assert_true(end > p);
		p = end;
	}
	assert_string_equal(p, "\n");
}

/*
 * The free blocks a fresh pool of n frames starts with: the maximal aligned blocks, i.e.
 * walking up from frame 0, the largest order that both fits and keeps alignment.
 */
static void expected_blocks(uint32_t n, uint32_t blocks[KVMM_MAX_ORDER])
{
	uint64_t f = 0;

	memset(blocks, 0, sizeof(uint32_t) * KVMM_MAX_ORDER);
	while (f < n) {
		int o = KVMM_MAX_ORDER - 1;

		while (o > 0 && ((f & ((UINT64_C(1) << o) - 1)) || f + (UINT64_C(1) << o) > n))
			o--;
		blocks[o]++;
		f += UINT64_C(1) << o;
	}
}

static void assert_pristine(struct kvmm_pool *pool)
{
	uint32_t want[KVMM_MAX_ORDER], got[KVMM_MAX_ORDER];
	unsigned int o;

	check_pool(pool);
	mmf_check(pool);
	expected_blocks(pool->nframes, want);
	parse_buddyinfo(pool, got);
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		assert_int_equal(got[o], want[o]);
		assert_int_equal(pool->nr_free_blocks[o], want[o]);
	}
	assert_int_equal(pool->nr_free, pool->nframes);
}

/* ---- pool parameters ------------------------------------------------------------------------ */

static int create_ret(uint64_t page_size, uint32_t nframes, uint32_t wmin, uint32_t wlow,
		      uint32_t whigh)
{
	struct kvmm_pool_params p = {
		.page_size = page_size,
		.nframes = nframes,
		.wmark_min = wmin,
		.wmark_low = wlow,
		.wmark_high = whigh,
	};
	struct kvmm_pool *pool = (struct kvmm_pool *)&p;
	int ret = kvmm_pool_create(&p, &pool);

	if (!ret) {
		assert_non_null(pool);
		kvmm_pool_destroy(pool);
	} else {
		assert_null(pool);
	}
	return ret;
}

static void test_params(void **state)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = 8};
	struct kvmm_pool *pool;

	(void)state;
	assert_int_equal(kvmm_pool_create(NULL, &pool), -EINVAL);
	assert_int_equal(kvmm_pool_create(&p, NULL), -EINVAL);

	assert_int_equal(create_ret(0, 8, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(2048, 8, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(4095, 8, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(6144, 8, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(3 * 8192, 8, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(PAGE_SZ, 0, 0, 0, 0), -EINVAL);
	/* nframes * page_size past the address space */
	assert_int_equal(create_ret(UINT64_C(1) << 40, 1u << 24, 0, 0, 0), -EINVAL);
	assert_int_equal(create_ret(UINT64_C(1) << 63, 2, 0, 0, 0), -EINVAL);

	/* watermarks: min <= low <= high < nframes */
	assert_int_equal(create_ret(PAGE_SZ, 8, 2, 1, 3), -EINVAL);
	assert_int_equal(create_ret(PAGE_SZ, 8, 1, 3, 2), -EINVAL);
	assert_int_equal(create_ret(PAGE_SZ, 8, 1, 2, 8), -EINVAL);
	assert_int_equal(create_ret(PAGE_SZ, 8, 0, 0, 9), -EINVAL);
	assert_int_equal(create_ret(PAGE_SZ, 8, 1, 2, 7), 0);
	assert_int_equal(create_ret(PAGE_SZ, 8, 0, 0, 1), 0);
	assert_int_equal(create_ret(PAGE_SZ, 8, 3, 3, 3), 0);

	assert_int_equal(create_ret(PAGE_SZ, 1, 0, 0, 0), 0);
	assert_int_equal(create_ret(UINT64_C(2) << 20, 4, 0, 0, 0), 0);
	assert_int_equal(create_ret(UINT64_C(1) << 30, 3, 0, 0, 0), 0); /* MAP_NORESERVE */

	/* explicit watermarks are taken as given */
	p.wmark_min = 1;
	p.wmark_low = 2;
	p.wmark_high = 5;
	assert_int_equal(kvmm_pool_create(&p, &pool), 0);
	assert_int_equal(pool->wmark_min, 1);
	assert_int_equal(pool->wmark_low, 2);
	assert_int_equal(pool->wmark_high, 5);
	assert_int_equal(pool->page_size, PAGE_SZ);
	assert_int_equal(pool->nframes, 8);
	assert_ptr_equal(pool->be.ops, &kvmm_mmap_backend_ops);
	kvmm_pool_destroy(pool);
	kvmm_pool_destroy(NULL);
}

static void test_default_watermarks(void **state)
{
	static const struct {
		uint32_t n, wmin, low, high;
	} cases[] = {
		{1, 0, 0, 0},	    {2, 0, 1, 1},	 {3, 0, 1, 2},
		{10, 0, 1, 2},	    {99, 0, 1, 2},	 {100, 1, 2, 3},
		{1000, 10, 20, 30}, {4096, 40, 81, 122}, {250, 2, 5, 7},
	};
	unsigned int i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		struct kvmm_pool *pool = mmf_pool(cases[i].n);

		assert_int_equal(pool->wmark_min, cases[i].wmin);
		assert_int_equal(pool->wmark_low, cases[i].low);
		assert_int_equal(pool->wmark_high, cases[i].high);
		assert_pristine(pool);
		kvmm_pool_destroy(pool);
	}
}

static int failing_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	(void)be;
	(void)page_size;
	(void)nframes;
	return -EIO;
}

static void noop_fini(struct kvmm_backend_ctx *be)
{
	(void)be;
}

static void test_backend_errors(void **state)
{
	static const struct kvmm_backend_ops failing = {
		.name = "failing",
		.init = failing_init,
		.fini = noop_fini,
	};
	static const struct kvmm_backend_ops no_init = {.name = "no_init", .fini = noop_fini};
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = 8, .backend = &failing};
	struct kvmm_pool *pool;

	(void)state;
	/* the error comes back and nothing leaks (ASan) */
	assert_int_equal(kvmm_pool_create(&p, &pool), -EIO);
	assert_null(pool);
	p.backend = &no_init;
	assert_int_equal(kvmm_pool_create(&p, &pool), -EINVAL);
}

/* ---- the mmap backend --------------------------------------------------------------------- */

static void test_frame_addr(void **state)
{
	struct kvmm_pool *pool = mmf_pool(16);
	const struct kvmm_backend_ops *ops = pool->be.ops;
	char *base = kvmm_pool_frame_addr(pool, 0);
	uint32_t f;

	(void)state;
	assert_non_null(base);
	for (f = 0; f < 16; f++) {
		char *a = kvmm_pool_frame_addr(pool, f);

		assert_ptr_equal(a, base + (size_t)f * PAGE_SZ);
		assert_int_equal(a[0], 0); /* fresh memory is zero */
		memset(a, (int)f + 1, PAGE_SZ);
	}
	assert_null(kvmm_pool_frame_addr(pool, 16));
	assert_null(kvmm_pool_frame_addr(pool, KVMM_FRAME_NONE));
	assert_null(kvmm_pool_frame_addr(NULL, 0));

	assert_int_equal(ops->copy(&pool->be, 3, 5, PAGE_SZ), 0);
	assert_int_equal(base[3 * PAGE_SZ + PAGE_SZ - 1], 6);
	assert_int_equal(ops->copy(&pool->be, 4, 5, 100), 0);
	assert_int_equal(base[4 * PAGE_SZ + 99], 6);
	assert_int_equal(base[4 * PAGE_SZ + 100], 5);
	assert_int_equal(ops->copy(&pool->be, 4, 16, 1), -EINVAL);
	assert_int_equal(ops->copy(&pool->be, 16, 4, 1), -EINVAL);
	assert_int_equal(ops->copy(&pool->be, 4, 5, PAGE_SZ + 1), -EINVAL);

	assert_int_equal(ops->scrub(&pool->be, 7), 0);
	for (f = 0; f < PAGE_SZ; f++)
		assert_int_equal(base[7 * PAGE_SZ + f], 0);
	assert_int_equal(base[6 * PAGE_SZ + PAGE_SZ - 1], 7);
	assert_int_equal(base[8 * PAGE_SZ], 9);
	assert_int_equal(ops->scrub(&pool->be, 16), -EINVAL);
	kvmm_pool_destroy(pool);
}

/* ---- buddy allocator ---------------------------------------------------------------------- */

static void test_initial_blocks(void **state)
{
	static const uint32_t sizes[] = {1, 2, 3, 5, 7, 8, 100, 1000, 1023, 1024, 1025, 2048, 3077};
	unsigned int i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		struct kvmm_pool *pool = mmf_pool(sizes[i]);

		assert_pristine(pool);
		assert_int_equal(pool->nr_state[KVMM_PAGE_FREE], sizes[i]);
		assert_int_equal(kvmm_pool_nr_free(pool), sizes[i]);
		kvmm_pool_destroy(pool);
	}

	/* spot checks of the expected layout itself */
	{
		struct kvmm_pool *pool = mmf_pool(1000); /* 512+256+128+64+32+8 */

		assert_int_equal(pool->nr_free_blocks[9], 1);
		assert_int_equal(pool->nr_free_blocks[8], 1);
		assert_int_equal(pool->nr_free_blocks[7], 1);
		assert_int_equal(pool->nr_free_blocks[6], 1);
		assert_int_equal(pool->nr_free_blocks[5], 1);
		assert_int_equal(pool->nr_free_blocks[4], 0);
		assert_int_equal(pool->nr_free_blocks[3], 1);
		assert_int_equal(pool->nr_free_blocks[0], 0);
		kvmm_pool_destroy(pool);

		pool = mmf_pool(3077); /* 3 x 1024 + 4 + 1 */
		assert_int_equal(pool->nr_free_blocks[KVMM_MAX_ORDER - 1], 3);
		assert_int_equal(pool->nr_free_blocks[2], 1);
		assert_int_equal(pool->nr_free_blocks[0], 1);
		kvmm_pool_destroy(pool);
	}
}

/* Allocate every frame (order 0, no magazine), free them in random order, check the pool. */
static void alloc_all_free_random(uint32_t nframes, uint64_t seed)
{
	struct kvmm_pool *pool = mmf_pool(nframes);
	struct kvmm_page **v = calloc(nframes, sizeof(*v));
	uint8_t *taken = calloc(nframes, 1);
	uint32_t i;

	assert_non_null(v);
	assert_non_null(taken);
	for (i = 0; i < nframes; i++) {
		uint32_t f;

		v[i] = kvmm_alloc_page(pool, NULL, NULL);
		assert_non_null(v[i]);
		f = kvmm_page_to_frame(pool, v[i]);
		assert_true(f < nframes);
		assert_int_equal(taken[f], 0);
		taken[f] = 1;
		assert_int_equal(v[i]->state, KVMM_PAGE_MAPPED);
		assert_int_equal(v[i]->refcount, 0);
		assert_int_equal(v[i]->flags, KVMM_PG_DIRTY);
		assert_int_equal(v[i]->ns_id, 0);
		assert_int_equal(v[i]->ntokens, 0);
		if (nframes <= 256 || i % 97 == 0)
			check_pool(pool);
	}
	check_pool(pool);
	assert_int_equal(pool->nr_free, 0);
	assert_int_equal(pool->nr_state[KVMM_PAGE_MAPPED], nframes);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC], nframes);

	errno = 0;
	assert_null(kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 1);

	rng_state = seed;
	shuffle(v, nframes);
	for (i = 0; i < nframes; i++) {
		kvmm_free_page(pool, v[i], NULL);
		if (nframes <= 256 || i % 97 == 0)
			check_pool(pool);
	}
	assert_pristine(pool);
	assert_int_equal(pool->stat[KVMM_STAT_FREE], nframes);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_ALLOC], nframes);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_FREE], nframes);
	/* every split made one more block, every merge one fewer: back to the start */
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_SPLIT], pool->stat[KVMM_STAT_BUDDY_MERGE]);
	if (nframes > 1)
		assert_true(pool->stat[KVMM_STAT_BUDDY_SPLIT] > 0);
	free(taken);
	free(v);
	kvmm_pool_destroy(pool);
}

static void test_split_merge_random(void **state)
{
	static const uint32_t sizes[] = {1, 2, 3, 7, 64, 100, 1000, 1024, 2049, 5000};
	uint64_t seed = test_seed();
	unsigned int i, round;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		for (round = 0; round < 3; round++) {
			uint64_t s = seed + i * 7919 + round;

			print_message("split/merge: nframes %u seed %llu\n", sizes[i],
				      (unsigned long long)s);
			alloc_all_free_random(sizes[i], s ? s : 1);
		}
	}
}

static void test_split_order(void **state)
{
	struct kvmm_pool *pool = mmf_pool(1024);
	struct kvmm_page *a, *b;

	(void)state;
	/* one order-10 block: the first frame splits it all the way down */
	a = kvmm_alloc_page(pool, NULL, NULL);
	assert_non_null(a);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_SPLIT], 10);
	check_pool(pool);
	for (unsigned int o = 0; o < 10; o++)
		assert_int_equal(pool->nr_free_blocks[o], 1);
	assert_int_equal(pool->nr_free_blocks[10], 0);
	/* the second is the buddy of the first, from order 0, no split */
	b = kvmm_alloc_page(pool, NULL, NULL);
	assert_int_equal(kvmm_page_to_frame(pool, a) ^ 1, kvmm_page_to_frame(pool, b));
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_SPLIT], 10);
	kvmm_free_page(pool, b, NULL);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_MERGE], 0); /* a is still out */
	kvmm_free_page(pool, a, NULL);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_MERGE], 10);
	assert_pristine(pool);
	kvmm_pool_destroy(pool);
}

static void test_higher_order(void **state)
{
	struct kvmm_pool *pool = mmf_pool(1000);
	struct kvmm_page *blk[8];
	unsigned int i;

	(void)state;
	errno = 0;
	assert_null(kvmm_buddy_alloc(pool, KVMM_MAX_ORDER));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(kvmm_buddy_alloc(pool, 10)); /* 1000 frames hold no 1024 block */
	assert_int_equal(errno, ENOMEM);

	blk[0] = kvmm_buddy_alloc(pool, 9);
	assert_non_null(blk[0]);
	assert_int_equal(kvmm_page_to_frame(pool, blk[0]), 0);
	for (i = 0; i < 512; i++) {
		assert_int_equal(blk[0][i].state, KVMM_PAGE_MAPPED);
		assert_int_equal(blk[0][i].flags, 0);
	}
	assert_int_equal(pool->nr_state[KVMM_PAGE_MAPPED], 512);
	check_pool(pool);
	errno = 0;
	assert_null(kvmm_buddy_alloc(pool, 9));
	assert_int_equal(errno, ENOMEM);

	/* order-3 blocks come aligned to 8 frames */
	for (i = 1; i < 8; i++) {
		blk[i] = kvmm_buddy_alloc(pool, 3);
		assert_non_null(blk[i]);
		assert_int_equal(kvmm_page_to_frame(pool, blk[i]) % 8, 0);
		check_pool(pool);
	}
	assert_int_equal(pool->nr_state[KVMM_PAGE_MAPPED], 512 + 7 * 8);
	for (i = 7; i > 0; i--) {
		kvmm_buddy_free(pool, blk[i], 3);
		check_pool(pool);
	}
	kvmm_buddy_free(pool, blk[0], 9);
	assert_pristine(pool);
	kvmm_pool_destroy(pool);
}

/* ---- magazines ---------------------------------------------------------------------------- */

static void test_magazine_init(void **state)
{
	struct kvmm_pool *pool = mmf_pool(64);
	struct kvmm_magazine mag;

	(void)state;
	assert_int_equal(kvmm_magazine_init(NULL, &mag, 1, 8, 4), -EINVAL);
	assert_int_equal(kvmm_magazine_init(pool, NULL, 1, 8, 4), -EINVAL);
	assert_int_equal(kvmm_magazine_init(pool, &mag, 1, 8, 0), -EINVAL);
	assert_int_equal(kvmm_magazine_init(pool, &mag, 1, 8, 9), -EINVAL);
	assert_int_equal(kvmm_magazine_init(pool, &mag, 1, 0, 4), -EINVAL);
	assert_int_equal(kvmm_magazine_init(pool, &mag, 1, 0, 0), 0);
	assert_int_equal(mag.capacity, KVMM_MAG_DEFAULT_CAPACITY);
	assert_int_equal(mag.batch, KVMM_MAG_DEFAULT_BATCH);
	assert_int_equal(mag.count, 0);
	assert_int_equal(kvmm_magazine_init(pool, &mag, 7, 4, 4), 0);
	assert_int_equal(mag.owner, 7);
	assert_ptr_equal(mag.pool, pool);
	kvmm_magazine_drain_all(&mag); /* empty: nothing happens */
	assert_int_equal(pool->stat[KVMM_STAT_MAG_DRAIN], 0);
	kvmm_magazine_drain_all(NULL);
	assert_pristine(pool);
	kvmm_pool_destroy(pool);
}

static void test_magazine_batches(void **state)
{
	struct kvmm_pool *pool = mmf_pool(256);
	struct kvmm_magazine mag;
	struct kvmm_page *pg[16];
	unsigned int i;

	(void)state;
	assert_int_equal(kvmm_magazine_init(pool, &mag, 42, 8, 4), 0);

	/* the first allocation refills a batch of 4 and pops one */
	pg[0] = kvmm_alloc_page(pool, NULL, &mag);
	assert_non_null(pg[0]);
	assert_int_equal(pg[0]->state, KVMM_PAGE_MAPPED);
	assert_int_equal(pg[0]->owner, 0);
	assert_int_equal(mag.count, 3);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_REFILL], 1);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_HIT], 1);
	assert_int_equal(pool->stat[KVMM_STAT_BUDDY_ALLOC], 4);
	assert_int_equal(pool->nr_state[KVMM_PAGE_MAGAZINE], 3);
	assert_int_equal(pool->nr_free, 252);
	/* magazine frames are free for the watermarks, not for the buddy */
	assert_int_equal(kvmm_pool_nr_free(pool), 255);
	check_pool(pool);

	for (i = 1; i < 4; i++)
		pg[i] = kvmm_alloc_page(pool, NULL, &mag);
	assert_int_equal(mag.count, 0);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_REFILL], 1);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_HIT], 4);
	assert_true(list_empty(&pool->mags)); /* an empty magazine is not on the pool */
	check_pool(pool);

	for (; i < 16; i++) {
		pg[i] = kvmm_alloc_page(pool, NULL, &mag);
		assert_non_null(pg[i]);
	}
	assert_int_equal(pool->stat[KVMM_STAT_MAG_REFILL], 4);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_HIT], 16);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC], 16);
	assert_int_equal(mag.count, 0);
	check_pool(pool);

	/* frees push until the magazine is full (8), the ninth drains a batch of 4 first */
	for (i = 0; i < 8; i++) {
		kvmm_free_page(pool, pg[i], &mag);
		assert_int_equal(pg[i]->state, KVMM_PAGE_MAGAZINE);
		assert_int_equal(pg[i]->owner, 42);
	}
	assert_int_equal(mag.count, 8);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_DRAIN], 0);
	check_pool(pool);
	kvmm_free_page(pool, pg[8], &mag);
	assert_int_equal(mag.count, 5);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_DRAIN], 1);
	/* the coldest frames (freed first) went back, the hottest stays on top */
	for (i = 0; i < 4; i++)
		assert_int_equal(pg[i]->state, KVMM_PAGE_FREE);
	assert_ptr_equal(list_first_entry(&mag.frames, struct kvmm_page, lru), pg[8]);
	check_pool(pool);

	/* LIFO: the next allocation gets the frame freed last */
	assert_ptr_equal(kvmm_alloc_page(pool, NULL, &mag), pg[8]);
	kvmm_free_page(pool, pg[8], &mag);

	for (i = 9; i < 16; i++)
		kvmm_free_page(pool, pg[i], NULL);
	assert_int_equal(pool->stat[KVMM_STAT_FREE], 17);
	check_pool(pool);
	kvmm_magazine_drain_all(&mag);
	assert_int_equal(mag.count, 0);
	assert_int_equal(pool->stat[KVMM_STAT_MAG_DRAIN], 2);
	assert_pristine(pool);
	kvmm_pool_destroy(pool);
}

/* An allocation that finds the buddy and its magazine empty takes other magazines' frames. */
static void test_magazine_steal(void **state)
{
	struct kvmm_pool *pool = mmf_pool(6);
	struct kvmm_magazine a, b;
	struct kvmm_page *pa, *pb[6];
	unsigned int n = 0;

	(void)state;
	assert_int_equal(kvmm_magazine_init(pool, &a, 1, 4, 4), 0);
	assert_int_equal(kvmm_magazine_init(pool, &b, 2, 4, 4), 0);
	pa = kvmm_alloc_page(pool, NULL, &a);
	assert_non_null(pa);
	assert_int_equal(a.count, 3);
	assert_int_equal(pool->nr_free, 2);

	while ((pb[n] = kvmm_alloc_page(pool, NULL, &b)))
		n++;
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(n, 5); /* 2 from the buddy, 3 pulled back from a */
	assert_int_equal(a.count, 0);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 1);
	assert_true(pool->stat[KVMM_STAT_MAG_DRAIN] >= 1);
	assert_int_equal(kvmm_pool_nr_free(pool), 0);
	check_pool(pool);

	kvmm_free_page(pool, pa, &a);
	while (n)
		kvmm_free_page(pool, pb[--n], &b);
	check_pool(pool);
	kvmm_magazine_drain_all(&a);
	kvmm_magazine_drain_all(&b);
	assert_pristine(pool);
	kvmm_pool_destroy(pool);
}

/* ---- exhaustion and watermarks -------------------------------------------------------------- */

static void test_exhaustion(void **state)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ,
				     .nframes = 64,
				     .wmark_min = 8,
				     .wmark_low = 16,
				     .wmark_high = 24};
	struct kvmm_pool *pool;
	struct kvmm_page *v[64];
	unsigned int i;

	(void)state;
	assert_int_equal(kvmm_pool_create(&p, &pool), 0);
	/* down to exactly min free: no direct reclaim */
	for (i = 0; i < 56; i++)
		assert_non_null(v[i] = kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(kvmm_pool_nr_free(pool), 8);
	assert_int_equal(pool->stat[KVMM_STAT_DIRECT_RECLAIM], 0);
	/* free 8 -> 7 would go under min: reclaims (nothing cached) and proceeds */
	v[i] = kvmm_alloc_page(pool, NULL, NULL);
	assert_non_null(v[i]);
	assert_int_equal(pool->stat[KVMM_STAT_DIRECT_RECLAIM], 1);
	/* min is a reserve hint: the reserve is handed out too, down to the last frame */
	for (i++; i < 64; i++)
		assert_non_null(v[i] = kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(pool->stat[KVMM_STAT_DIRECT_RECLAIM], 8);
	assert_int_equal(kvmm_pool_nr_free(pool), 0);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 0);

	errno = 0;
	assert_null(kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 1);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC], 64);
	check_pool(pool);

	for (i = 0; i < 64; i++)
		kvmm_free_page(pool, v[i], NULL);
	assert_pristine(pool);
	/* and the pool works again */
	v[0] = kvmm_alloc_page(pool, NULL, NULL);
	assert_non_null(v[0]);
	kvmm_free_page(pool, v[0], NULL);
	kvmm_pool_destroy(pool);
}

/* ---- namespaces ----------------------------------------------------------------------------- */

static void test_ns_charge_and_limit(void **state)
{
	struct kvmm_pool *pool = mmf_pool(64);
	struct kvmm_ns *ns = mmf_ns(pool, "tenant", 4);
	struct kvmm_ns *other = mmf_ns(pool, "other", 0);
	struct kvmm_page *v[5], *o;
	unsigned int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		v[i] = kvmm_alloc_page(pool, ns, NULL);
		assert_non_null(v[i]);
		assert_int_equal(v[i]->ns_id, ns->id);
		assert_int_equal(ns->used, i + 1);
	}
	errno = 0;
	assert_null(kvmm_alloc_page(pool, ns, NULL));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(pool->stat[KVMM_STAT_NS_LIMIT_HIT], 1);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 1);
	assert_int_equal(ns->used, 4);

	/* the limit is the namespace's alone */
	o = kvmm_alloc_page(pool, other, NULL);
	assert_non_null(o);
	assert_int_equal(other->used, 1);
	assert_int_equal(o->ns_id, other->id);

	/* a freed MAPPED frame uncharges used and makes room */
	kvmm_free_page(pool, v[3], NULL);
	assert_int_equal(ns->used, 3);
	v[3] = kvmm_alloc_page(pool, ns, NULL);
	assert_non_null(v[3]);

	/*
	 * What the mapping code does when a sealed page loses its last mapper: the charge moves
	 * from used to cached.  Cached frames count against the limit too, and freeing one
	 * (eviction) uncharges cached.
	 */
	pool->nr_state[KVMM_PAGE_MAPPED]--;
	pool->nr_state[KVMM_PAGE_CACHED]++;
	v[0]->state = KVMM_PAGE_CACHED;
	v[0]->flags &= ~KVMM_PG_DIRTY;
	ns->used--;
	ns->cached++;
	check_pool(pool);
	assert_null(kvmm_alloc_page(pool, ns, NULL));
	assert_int_equal(pool->stat[KVMM_STAT_NS_LIMIT_HIT], 2);
	kvmm_free_page(pool, v[0], NULL);
	assert_int_equal(ns->cached, 0);
	assert_int_equal(ns->used, 3);
	assert_int_equal(pool->nr_state[KVMM_PAGE_CACHED], 0);
	v[0] = kvmm_alloc_page(pool, ns, NULL);
	assert_non_null(v[0]);

	/* raising the limit lets it grow */
	assert_int_equal(kvmm_ns_set_limit(ns, 5), 0);
	v[4] = kvmm_alloc_page(pool, ns, NULL);
	assert_non_null(v[4]);
	assert_int_equal(ns->used, 5);
	check_pool(pool);

	for (i = 0; i < 5; i++)
		kvmm_free_page(pool, v[i], NULL);
	kvmm_free_page(pool, o, NULL);
	assert_int_equal(ns->used, 0);
	assert_int_equal(other->used, 0);
	assert_pristine(pool);
	assert_int_equal(kvmm_ns_destroy(ns), 0);
	assert_int_equal(kvmm_ns_destroy(other), 0);
	kvmm_pool_destroy(pool);
}

/* The limit is enforced after the namespace's own cache is reclaimed. */
static void test_ns_limit_reclaims_own_cache(void **state)
{
	struct kvmm_pool *pool = mmf_pool(64);
	struct kvmm_ns *ns = mmf_ns(pool, "tenant", 4);
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_fmt fmt;
	struct kvmm_page *v[4];
	uint32_t tpp, *tok;
	unsigned int i;

	(void)state;
	assert_int_equal(
		kvmm_fmt_init(&fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP16}, PAGE_SZ), 0);
	tpp = fmt.tokens_per_page;
	tok = calloc(2 * tpp, sizeof(*tok));
	assert_non_null(tok);
	for (i = 0; i < 2 * tpp; i++)
		tok[i] = i + 1;
	assert_int_equal(kvmm_aspace_create(pool, ns, &fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 2 * tpp, tok), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 2);
	kvmm_mm_seq_free(seq); /* both sealed pages stay cached, charged to ns */
	assert_int_equal(ns->used, 0);
	assert_int_equal(ns->cached, 2);

	/* used 0 + cached 2: two fit, the third and fourth evict the namespace's own cache */
	for (i = 0; i < 4; i++) {
		v[i] = kvmm_alloc_page(pool, ns, NULL);
		assert_non_null(v[i]);
	}
	assert_int_equal(ns->used, 4);
	assert_int_equal(ns->cached, 0);
	assert_int_equal(pool->stat[KVMM_STAT_NS_LIMIT_HIT], 0);
	assert_int_equal(pool->stat[KVMM_STAT_PGSTEAL], 2);
	assert_null(kvmm_alloc_page(pool, ns, NULL));
	assert_int_equal(pool->stat[KVMM_STAT_NS_LIMIT_HIT], 1);
	check_pool(pool);

	for (i = 0; i < 4; i++)
		kvmm_free_page(pool, v[i], NULL);
	kvmm_aspace_destroy(as);
	assert_int_equal(kvmm_ns_destroy(ns), 0);
	assert_pristine(pool);
	free(tok);
	kvmm_pool_destroy(pool);
}

/* Under min, an allocation evicts cached pages itself, just enough to keep the reserve. */
static void test_direct_reclaim_evicts_cache(void **state)
{
	struct kvmm_pool *pool = mmf_pool(16); /* min 0, low 1, high 2 */
	struct kvmm_ns *ns = mmf_ns(pool, "tenant", 0);
	struct kvmm_page *v[16];
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_fmt fmt;
	uint32_t tpp, *tok;
	unsigned int i;

	(void)state;
	assert_int_equal(
		kvmm_fmt_init(&fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP16}, PAGE_SZ), 0);
	tpp = fmt.tokens_per_page;
	tok = calloc(4 * tpp, sizeof(*tok));
	assert_non_null(tok);
	for (i = 0; i < 4 * tpp; i++)
		tok[i] = 7 * i + 3;
	assert_int_equal(kvmm_aspace_create(pool, ns, &fmt, NULL, &as), 0);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 4 * tpp, tok), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 4);
	kvmm_mm_seq_free(seq);
	assert_int_equal(ns->cached, 4);
	assert_int_equal(kvmm_pool_nr_free(pool), 12);

	for (i = 0; i < 12; i++)
		assert_non_null(v[i] = kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(pool->stat[KVMM_STAT_PGSTEAL], 0);
	/* each further allocation finds 0 free (<= min) and reclaims exactly one page */
	for (; i < 16; i++) {
		v[i] = kvmm_alloc_page(pool, NULL, NULL);
		assert_non_null(v[i]);
		assert_int_equal(pool->stat[KVMM_STAT_PGSTEAL], i - 11);
		assert_int_equal(ns->cached, 15 - i);
		check_pool(pool);
	}
	assert_true(pool->stat[KVMM_STAT_DIRECT_RECLAIM] >= 4);
	errno = 0;
	assert_null(kvmm_alloc_page(pool, NULL, NULL));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(pool->stat[KVMM_STAT_ALLOC_FAIL], 1);

	for (i = 0; i < 16; i++)
		kvmm_free_page(pool, v[i], NULL);
	kvmm_aspace_destroy(as);
	assert_int_equal(kvmm_ns_destroy(ns), 0);
	assert_pristine(pool);
	free(tok);
	kvmm_pool_destroy(pool);
}

/* A frame is zeroed before it changes namespace, and only then. */
static void test_scrub(void **state)
{
	struct kvmm_pool *pool = mmf_pool(4);
	struct kvmm_ns *a = mmf_ns(pool, "a", 0);
	struct kvmm_ns *b = mmf_ns(pool, "b", 0);
	struct kvmm_page *pg, *again;
	unsigned char *mem;
	unsigned int i;

	(void)state;
	pg = kvmm_alloc_page(pool, a, NULL);
	assert_non_null(pg);
	assert_int_equal(pool->stat[KVMM_STAT_SCRUB], 0); /* fresh memory is clean */
	mem = kvmm_pool_frame_addr(pool, kvmm_page_to_frame(pool, pg));
	memset(mem, 0xab, PAGE_SZ);
	kvmm_free_page(pool, pg, NULL);

	/* the same namespace gets its own frame back untouched */
	again = kvmm_alloc_page(pool, a, NULL);
	assert_ptr_equal(again, pg);
	assert_int_equal(mem[PAGE_SZ - 1], 0xab);
	assert_int_equal(pool->stat[KVMM_STAT_SCRUB], 0);
	kvmm_free_page(pool, again, NULL);

	/* another namespace gets it zeroed */
	again = kvmm_alloc_page(pool, b, NULL);
	assert_ptr_equal(again, pg);
	assert_int_equal(pool->stat[KVMM_STAT_SCRUB], 1);
	for (i = 0; i < PAGE_SZ; i++)
		assert_int_equal(mem[i], 0);
	memset(mem, 0xcd, PAGE_SZ);
	kvmm_free_page(pool, again, NULL);

	/* and so does an uncharged user */
	again = kvmm_alloc_page(pool, NULL, NULL);
	assert_ptr_equal(again, pg);
	assert_int_equal(pool->stat[KVMM_STAT_SCRUB], 2);
	assert_int_equal(mem[17], 0);
	kvmm_free_page(pool, again, NULL);

	assert_int_equal(kvmm_ns_destroy(a), 0);
	assert_int_equal(kvmm_ns_destroy(b), 0);
	kvmm_pool_destroy(pool);
}

/* ---- buddyinfo, names ---------------------------------------------------------------------- */

static void test_buddyinfo(void **state)
{
	struct kvmm_pool *pool = mmf_pool(3077);
	uint32_t blocks[KVMM_MAX_ORDER];
	char buf[KVMM_BUDDYINFO_SIZE];
	struct kvmm_page *pg;
	unsigned int o;
	int len;

	(void)state;
	assert_pristine(pool);
	pg = kvmm_alloc_page(pool, NULL, NULL);
	parse_buddyinfo(pool, blocks);
	for (o = 0; o < KVMM_MAX_ORDER; o++)
		assert_int_equal(blocks[o], pool->nr_free_blocks[o]);
	kvmm_free_page(pool, pg, NULL);

	len = kvmm_buddyinfo(pool, buf, sizeof(buf));
	assert_true(len > 0);
	/* two lines, label then one 8-wide column per order */
	assert_int_equal(len, 2 * (6 + 8 * KVMM_MAX_ORDER + 1));
	assert_int_equal(kvmm_buddyinfo(pool, buf, (size_t)len), -ENOSPC);
	assert_int_equal(kvmm_buddyinfo(pool, buf, 10), -ENOSPC);
	assert_int_equal(kvmm_buddyinfo(pool, buf, 0), -ENOSPC);
	assert_int_equal(kvmm_buddyinfo(pool, buf, (size_t)len + 1), len);
	assert_int_equal(kvmm_buddyinfo(NULL, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(kvmm_buddyinfo(pool, NULL, sizeof(buf)), -EINVAL);
	kvmm_pool_destroy(pool);
}

static void test_names(void **state)
{
	unsigned int i, j;

	(void)state;
	assert_string_equal(kvmm_page_state_name(KVMM_PAGE_FREE), "free");
	assert_string_equal(kvmm_page_state_name(KVMM_PAGE_MAGAZINE), "magazine");
	assert_string_equal(kvmm_page_state_name(KVMM_PAGE_MAPPED), "mapped");
	assert_string_equal(kvmm_page_state_name(KVMM_PAGE_CACHED), "cached");
	assert_string_equal(kvmm_page_state_name(KVMM_PAGE_STATE_COUNT), "unknown");
	assert_string_equal(kvmm_page_state_name((enum kvmm_page_state) - 1), "unknown");

	for (i = 0; i < KVMM_STAT_COUNT; i++) {
		const char *n = kvmm_stat_name((enum kvmm_stat)i);

		assert_string_not_equal(n, "unknown");
		for (j = 0; n[j]; j++)
			assert_true((n[j] >= 'a' && n[j] <= 'z') || n[j] == '_');
		for (j = 0; j < i; j++)
			assert_string_not_equal(n, kvmm_stat_name((enum kvmm_stat)j));
	}
	assert_string_equal(kvmm_stat_name(KVMM_STAT_ALLOC), "alloc");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_DIRECT_RECLAIM), "direct_reclaim");
	assert_string_equal(kvmm_stat_name(KVMM_STAT_COUNT), "unknown");
}

/* ---- misuse is caught ----------------------------------------------------------------------- */

/* Runs fn in a child and expects it to abort (KVMM_BUG_ON). */
static void expect_bug(void (*fn)(struct kvmm_pool *pool))
{
	pid_t pid;
	int status;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kvmm_pool *pool = mmf_pool(8);

		/* the child's report is expected; keep the test output readable */
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		fn(pool);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void double_free(struct kvmm_pool *pool)
{
	struct kvmm_page *pg = kvmm_alloc_page(pool, NULL, NULL);

	kvmm_free_page(pool, pg, NULL);
	kvmm_free_page(pool, pg, NULL);
}

static void free_mapped(struct kvmm_pool *pool)
{
	struct kvmm_page *pg = kvmm_alloc_page(pool, NULL, NULL);

	pg->refcount = 1;
	kvmm_free_page(pool, pg, NULL);
}

static void free_sealed(struct kvmm_pool *pool)
{
	struct kvmm_page *pg = kvmm_alloc_page(pool, NULL, NULL);

	pg->flags |= KVMM_PG_SEALED;
	kvmm_free_page(pool, pg, NULL);
}

static void free_in_magazine(struct kvmm_pool *pool)
{
	struct kvmm_magazine mag;
	struct kvmm_page *pg;

	kvmm_magazine_init(pool, &mag, 1, 4, 2);
	pg = kvmm_alloc_page(pool, NULL, &mag);
	kvmm_free_page(pool, pg, &mag);
	kvmm_free_page(pool, pg, NULL);
}

static void test_misuse(void **state)
{
	(void)state;
	expect_bug(double_free);
	expect_bug(free_mapped);
	expect_bug(free_sealed);
	expect_bug(free_in_magazine);
}

/* ---- random operations ---------------------------------------------------------------------- */

/*
 * Random allocations (through two magazines or none, charged to two namespaces or none) and
 * frees, with the whole pool checked after every operation against a plain model: which
 * frames are out, and each namespace's charge.
 */
static void test_random_ops(void **state)
{
	enum {
		NFRAMES = 300,
		OPS = 20000
	};
	uint64_t seed = test_seed() ^ 0x5bd1e995;
	struct kvmm_pool *pool = mmf_pool(NFRAMES);
	struct kvmm_ns *nss[3] = {NULL, mmf_ns(pool, "r1", 40), mmf_ns(pool, "r2", 0)};
	uint32_t model_used[3] = {0};
	struct kvmm_magazine mags[2];
	struct kvmm_page *out[NFRAMES];
	uint32_t nout = 0, i;

	(void)state;
	print_message("random ops: seed %llu\n", (unsigned long long)seed);
	rng_state = seed ? seed : 1;
	assert_int_equal(kvmm_magazine_init(pool, &mags[0], 1, 16, 5), 0);
	assert_int_equal(kvmm_magazine_init(pool, &mags[1], 2, 3, 1), 0);

	for (i = 0; i < OPS; i++) {
		uint64_t r = rng_next();
		struct kvmm_magazine *mag = (r >> 8) % 3 ? &mags[(r >> 10) & 1] : NULL;

		if ((r & 0xff) < 140 || !nout) {
			unsigned int k = (unsigned int)((r >> 16) % 3);
			bool over = nss[k] && nss[k]->limit && model_used[k] >= nss[k]->limit;
			bool empty = nout == NFRAMES;
			struct kvmm_page *pg = kvmm_alloc_page(pool, nss[k], mag);

			if (over || empty) {
				if (pg)
					print_message("seed %llu op %u\n", (unsigned long long)seed,
						      i);
				assert_null(pg);
				assert_int_equal(errno, ENOMEM);
			} else {
				if (!pg)
					print_message("seed %llu op %u\n", (unsigned long long)seed,
						      i);
				assert_non_null(pg);
				assert_int_equal(pg->ns_id, nss[k] ? nss[k]->id : 0);
				model_used[k]++;
				out[nout++] = pg;
			}
		} else {
			uint32_t j = (uint32_t)((r >> 24) % nout);
			struct kvmm_page *pg = out[j];
			unsigned int k = pg->ns_id == 0 ? 0 : pg->ns_id == nss[1]->id ? 1 : 2;

			out[j] = out[--nout];
			kvmm_free_page(pool, pg, mag);
			model_used[k]--;
		}
		assert_int_equal(pool->nr_state[KVMM_PAGE_MAPPED], nout);
		assert_int_equal(nss[1]->used, model_used[1]);
		assert_int_equal(nss[2]->used, model_used[2]);
		if (i % 8 == 0 || i > OPS - 100)
			check_pool(pool);
	}
	while (nout)
		kvmm_free_page(pool, out[--nout], NULL);
	kvmm_magazine_drain_all(&mags[0]);
	kvmm_magazine_drain_all(&mags[1]);
	assert_pristine(pool);
	assert_int_equal(kvmm_ns_destroy(nss[1]), 0);
	assert_int_equal(kvmm_ns_destroy(nss[2]), 0);
	kvmm_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_default_watermarks),
		cmocka_unit_test(test_backend_errors),
		cmocka_unit_test(test_frame_addr),
		cmocka_unit_test(test_initial_blocks),
		cmocka_unit_test(test_split_merge_random),
		cmocka_unit_test(test_split_order),
		cmocka_unit_test(test_higher_order),
		cmocka_unit_test(test_magazine_init),
		cmocka_unit_test(test_magazine_batches),
		cmocka_unit_test(test_magazine_steal),
		cmocka_unit_test(test_exhaustion),
		cmocka_unit_test(test_ns_charge_and_limit),
		cmocka_unit_test(test_ns_limit_reclaims_own_cache),
		cmocka_unit_test(test_direct_reclaim_evicts_cache),
		cmocka_unit_test(test_scrub),
		cmocka_unit_test(test_buddyinfo),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_misuse),
		cmocka_unit_test(test_random_ops),
	};

	return cmocka_run_group_tests_name("page_alloc", tests, NULL, NULL);
}
