// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_kswapd.c - the reclaim order (vmscan.c kvmm_shrink: cache demoted or
 * dropped, the top tier making room by moving down, then whole sequences swapped out by
 * priority and age), direct reclaim under min, the OOM victim and its hook, and kvswapd
 * (kswapd.c) between the low and high watermarks.  Host-memory tiers only (the NVMe tier is
 * test_swap's); every page holds random bytes that must come back identical, and the pool's
 * invariants are checked after each step.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cmocka.h>

#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "check_inv.h"

#define PG 4096u
#define NF 32u

struct kfx {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	uint64_t rng;
	/* the oom hook's record */
	struct kvmm_seq *oom_victim;
	uint32_t oom_calls, oom_frames;
	uint32_t changed_calls;
};

static struct kfx *hook_fx;

static void on_oom(struct kvmm_pool *pool, struct kvmm_seq *victim, uint32_t nr)
{
	(void)pool;
	hook_fx->oom_victim = victim;
	hook_fx->oom_frames = nr;
	hook_fx->oom_calls++;
}

static void on_changed(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t from)
{
	(void)pool;
	(void)seq;
	(void)from;
	hook_fx->changed_calls++;
}

static const struct kvmm_mm_hooks hooks = {.seq_changed = on_changed, .oom = on_oom};

static int setup(void **state)
{
	struct kvmm_pool_params p = {
		.page_size = PG, .nframes = NF, .wmark_min = 2, .wmark_low = 4, .wmark_high = 8};
	struct kfx *f = calloc(1, sizeof(*f));

	if (!f || kvmm_pool_create(&p, &f->pool) || kvmm_ns_create(f->pool, "t", 0, 0, &f->ns) ||
	    kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 16, KVMM_DTYPE_FP32}, PG) ||
	    kvmm_aspace_create(f->pool, f->ns, &f->fmt, NULL, &f->as))
		return -1;
	f->rng = 42;
	f->pool->hooks = &hooks;
	hook_fx = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct kfx *f = *state;

	check_inv(f->pool);
	kvmm_pool_destroy(f->pool);
	free(f);
	return 0;
}

static uint8_t byte_of(uint64_t seed, uint32_t block, uint32_t i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + block * 0xbf58476d1ce4e5b9ull + i;

	z ^= z >> 29;
	z *= 0x94d049bb133111ebull;
	return (uint8_t)(z >> 32);
}

static void fill(struct kfx *f, struct kvmm_seq *seq, uint64_t seed)
{
	uint32_t b, i;

	for (b = 0; b < seq->nblocks; b++) {
		uint8_t *p = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(seq, b));

		for (i = 0; i < PG; i++)
			p[i] = byte_of(seed, b, i);
	}
}

static void same(struct kfx *f, struct kvmm_seq *seq, uint64_t seed)
{
	uint32_t b, i;

	for (b = 0; b < seq->nblocks; b++) {
		uint32_t fr = kvmm_mm_seq_frame(seq, b);
		uint8_t *p;

		assert_int_not_equal(fr, KVMM_FRAME_NONE);
		p = kvmm_pool_frame_addr(f->pool, fr);
		for (i = 0; i < PG; i++)
			if (p[i] != byte_of(seed, b, i))
				fail_msg("block %u byte %u differs", b, i);
	}
}

static uint32_t *toks(uint32_t n, uint32_t base)
{
	uint32_t *t = malloc(n * sizeof(*t));
	uint32_t i;

	assert_non_null(t);
	for (i = 0; i < n; i++)
		t[i] = base + i;
	return t;
}

/* A sequence of @nb full pages of tokens base.., filled with @seed's bytes. */
static struct kvmm_seq *mkseq(struct kfx *f, uint32_t nb, uint32_t base, int prio, uint64_t seed)
{
	uint32_t tpp = f->fmt.tokens_per_page, *t = toks(nb * tpp, base);
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	seq->priority = prio;
	assert_int_equal(kvmm_mm_seq_append(seq, nb * tpp, t), 0);
	fill(f, seq, seed);
	free(t);
	return seq;
}

/* @nb sealed pages of tokens base.. left CACHED (their sequence freed). */
static void mkcache(struct kfx *f, uint32_t nb, uint32_t base, uint64_t seed)
{
	struct kvmm_seq *seq = mkseq(f, nb, base, 0, seed);

	assert_int_equal(kvmm_mm_seq_seal(seq), (int)nb);
	kvmm_mm_seq_free(seq);
}

static int host_tier(struct kfx *f, unsigned int id, int prio, uint32_t slots)
{
	struct kvmm_swap_tier_params p = {.tier = id, .priority = prio, .size = slots * PG};

	return kvmm_swapon(f->pool, &kvmm_swap_host_ops, &p);
}

/* No tier: cache is dropped, sequences are never touched. */
static void test_no_tier_drops_cache(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *s = mkseq(f, 4, 1000, 0, 1);

	mkcache(f, 4, 0, 2);
	assert_int_equal(kvmm_shrink(f->pool, 10, 0), 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_SWAP_DEMOTE], 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_SEQ_SWAPOUT], 0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 0);
	check_inv(f->pool);
	kvmm_mm_seq_free(s);
}

/* With a tier: cache first (demoted, still found by lookup with identical bytes). */
static void test_cache_demoted_before_seqs(void **state)
{
	struct kfx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, *t = toks(4 * tpp, 0);
	struct kvmm_seq *s = mkseq(f, 4, 1000, 0, 1), *l;

	assert_int_equal(host_tier(f, 1, 10, 16), 0);
	mkcache(f, 4, 0, 2);
	assert_int_equal(kvmm_shrink(f->pool, 4, 0), 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_SWAP_DEMOTE], 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_SEQ_SWAPOUT], 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 0);
	check_inv(f->pool);
	/* the prefix survives */
	assert_int_equal(kvmm_mm_seq_create(f->as, &l), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(l, t, 4 * tpp), (int)(4 * tpp));
	same(f, l, 2);
	check_inv(f->pool);
	/* then sequences: the whole of one */
	assert_int_equal(kvmm_shrink(f->pool, 1, 0), 4);
	assert_true(f->pool->stat[KVMM_STAT_SEQ_SWAPOUT] == 4);
	assert_int_equal(hook_fx->changed_calls, 1);
	check_inv(f->pool);
	free(t);
	kvmm_mm_seq_free(l);
	kvmm_mm_seq_free(s);
}

/*
 * drop_caches swap: demoted cached pages leave the tier and the page cache; a sequence's
 * swapped pages (sealed or not) stay, and its sealed prefix is still found.
 */
static void test_drop_cached(void **state)
{
	struct kfx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page, *t = toks(4 * tpp, 0), *t2 = toks(3 * tpp, 500);
	struct kvmm_seq *s = mkseq(f, 3, 500, 0, 31), *u = mkseq(f, 2, 900, 0, 32), *l;
	struct kvmm_swap_tier_info ti;

	assert_int_equal(kvmm_swap_drop_cached(f->pool), 0); /* no tier: nothing */
	assert_int_equal(host_tier(f, 1, 10, 16), 0);
	mkcache(f, 4, 0, 2);
	assert_int_equal(kvmm_swap_demote(f->pool, NULL, 8), 4);
	assert_int_equal(kvmm_mm_seq_seal(s), 3);
	assert_int_equal(kvmm_mm_seq_swap_out(s, 0, 3), 3);
	assert_int_equal(kvmm_mm_seq_swap_out(u, 0, 2), 2);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 1, &ti), 0);
	assert_int_equal(ti.used, 9);
	check_inv(f->pool);

	assert_int_equal(kvmm_swap_drop_cached(f->pool), 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_SWAP_DROP], 4);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 1, &ti), 0);
	assert_int_equal(ti.used, 5);
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 3);
	assert_int_equal(kvmm_mm_seq_nr_swapped(u), 2);
	check_inv(f->pool);
	assert_int_equal(kvmm_swap_drop_cached(f->pool), 0); /* nothing left to drop */

	/* the dropped prefix is gone; the swapped sealed sequence's prefix is still found */
	assert_int_equal(kvmm_mm_seq_create(f->as, &l), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(l, t, 4 * tpp), 0);
	kvmm_mm_seq_free(l);
	assert_int_equal(kvmm_mm_seq_create(f->as, &l), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(l, t2, 3 * tpp), (int)(3 * tpp));
	same(f, l, 31);
	check_inv(f->pool);
	kvmm_mm_seq_free(l);
	/* the lookup's fault-in mapped the pages back for s too */
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 0);
	assert_int_equal(kvmm_mm_seq_fault(u, 0, 2), 2);
	same(f, s, 31);
	same(f, u, 32);
	check_inv(f->pool);
	free(t);
	free(t2);
	kvmm_mm_seq_free(s);
	kvmm_mm_seq_free(u);
}

/* Victims: lowest priority, then youngest; pinned pages stay; bytes come back identical. */
static void test_seq_order(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *a, *b, *c, *d;

	assert_int_equal(host_tier(f, 1, 10, 24), 0);
	a = mkseq(f, 2, 0, 0, 11);
	b = mkseq(f, 2, 100, 5, 12);
	c = mkseq(f, 2, 200, 0, 13);
	d = mkseq(f, 2, 300, -1, 14);
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(d, 0))->pincount++;
	/* d has the lowest priority but one page is pinned: only its other page goes */
	assert_int_equal(kvmm_shrink(f->pool, 1, 0), 1);
	assert_int_equal(kvmm_mm_seq_nr_swapped(d), 1);
	/* then c (priority 0, younger than a), then a, then b */
	assert_int_equal(kvmm_shrink(f->pool, 1, 0), 2);
	assert_int_equal(kvmm_mm_seq_nr_swapped(c), 2);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 0);
	assert_int_equal(kvmm_shrink(f->pool, 2, 0), 2);
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 2);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	assert_int_equal(kvmm_shrink(f->pool, 2, KVMM_SHRINK_NOSWAP), 0);
	check_inv(f->pool);
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(d, 0))->pincount--;
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 2), 2);
	assert_int_equal(kvmm_mm_seq_fault(c, 0, 2), 2);
	assert_int_equal(kvmm_mm_seq_fault(d, 0, 2), 1);
	same(f, a, 11);
	same(f, b, 12);
	same(f, c, 13);
	same(f, d, 14);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
	kvmm_mm_seq_free(c);
	kvmm_mm_seq_free(d);
}

/* The top tier full: its oldest pages move down so the newest land on top. */
static void test_move_down(void **state)
{
	struct kfx *f = *state;
	struct kvmm_swap_tier_info top, low;
	struct kvmm_seq *a, *b;

	assert_int_equal(host_tier(f, 1, 10, 4), 0);
	assert_int_equal(host_tier(f, 2, 5, 16), 0);
	a = mkseq(f, 4, 0, 0, 21);
	b = mkseq(f, 4, 100, 1, 22);
	assert_int_equal(kvmm_shrink(f->pool, 4, 0), 4); /* a fills the top tier */
	assert_int_equal(kvmm_mm_seq_nr_swapped(a), 4);
	assert_int_equal(kvmm_shrink(f->pool, 4, 0), 4); /* b: a moves down first */
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_SWAP_MOVEDOWN], 4);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 1, &top), 0);
	assert_int_equal(kvmm_swap_tier_info(f->pool, 2, &low), 0);
	assert_int_equal(top.used, 4);
	assert_int_equal(low.used, 4);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, 4), 4);
	assert_int_equal(kvmm_mm_seq_fault(b, 0, 4), 4);
	same(f, a, 21);
	same(f, b, 22);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
}

/* An allocation under min reclaims directly in the same order, swapping a sequence out. */
static void test_direct_reclaim_swaps(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *a, *b;
	uint32_t nsw;

	assert_int_equal(host_tier(f, 1, 10, 32), 0);
	a = mkseq(f, NF - 4, 0, 0, 31); /* leaves 4 free: at low, above min */
	b = mkseq(f, 4, 10000, 1, 32);	/* takes the rest: every one past min reclaims */
	assert_true(f->pool->stat[KVMM_STAT_DIRECT_RECLAIM] > 0);
	assert_true(kvmm_mm_seq_nr_swapped(a) > 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(b), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 0);
	check_inv(f->pool);
	kvmm_mm_seq_free(b);
	nsw = kvmm_mm_seq_nr_swapped(a);
	assert_int_equal(kvmm_mm_seq_fault(a, 0, a->nblocks), (int)nsw);
	same(f, a, 31);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
}

/* Nothing left: the victim is reported (unpinned first, lowest priority, youngest). */
static void test_oom_victim(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *a, *b, *c, *d;
	uint32_t tpp = f->fmt.tokens_per_page;

	a = mkseq(f, 8, 0, 0, 1);
	b = mkseq(f, 8, 100, 0, 2);
	c = mkseq(f, 8, 200, -3, 3); /* lowest priority, but pinned */
	d = mkseq(f, 8, 300, 2, 4);
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(c, 0))->pincount++;
	assert_int_equal(kvmm_mm_seq_append(a, tpp, NULL), -ENOMEM);
	assert_int_equal(hook_fx->oom_calls, 1);
	assert_ptr_equal(hook_fx->oom_victim, b);
	assert_int_equal(hook_fx->oom_frames, 8);
	assert_true(b->flags & KVMM_SEQ_F_PREEMPTED);
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 1);
	/* reported once: the next failure names the next victim */
	assert_int_equal(kvmm_mm_seq_append(a, tpp, NULL), -ENOMEM);
	assert_ptr_equal(hook_fx->oom_victim, a);
	assert_int_equal(kvmm_mm_seq_append(d, tpp, NULL), -ENOMEM);
	assert_ptr_equal(hook_fx->oom_victim, d);
	/* only the pinned one is left */
	assert_int_equal(kvmm_mm_seq_append(d, tpp, NULL), -ENOMEM);
	assert_ptr_equal(hook_fx->oom_victim, c);
	assert_int_equal(kvmm_mm_seq_append(d, tpp, NULL), -ENOMEM);
	assert_int_equal(hook_fx->oom_calls, 4);
	kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(c, 0))->pincount--;
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
	kvmm_mm_seq_free(c);
	kvmm_mm_seq_free(d);
}

static uint32_t nr_free_locked(struct kvmm_pool *pool)
{
	uint32_t n;

	pthread_mutex_lock(&pool->lock);
	n = kvmm_pool_nr_free(pool);
	pthread_mutex_unlock(&pool->lock);
	return n;
}

/* kvswapd: an allocation under low wakes it; it reclaims up to high and sleeps. */
static void test_kswapd(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *s;
	uint64_t wakes;
	int i;

	assert_int_equal(host_tier(f, 1, 10, 32), 0);
	assert_int_equal(kvmm_kswapd_start(f->pool), 0);
	assert_int_equal(kvmm_kswapd_start(f->pool), -EEXIST);
	pthread_mutex_lock(&f->pool->lock);
	mkcache(f, 12, 0, 5);
	s = mkseq(f, NF - 12 - 5, 1000, 0, 6); /* leaves 5 free: not under low yet */
	assert_int_equal(f->pool->stat[KVMM_STAT_KSWAPD_WAKE], 0);
	assert_int_equal(kvmm_mm_seq_append(s, f->fmt.tokens_per_page, NULL), 0); /* 4 < low? no */
	assert_int_equal(kvmm_mm_seq_append(s, f->fmt.tokens_per_page, NULL), 0); /* 3 < 4 */
	pthread_mutex_unlock(&f->pool->lock);
	/* wait (bounded) for it to bring free back to high */
	for (i = 0; i < 5000 && nr_free_locked(f->pool) < 8; i++) {
		struct timespec ts = {0, 1000000};

		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&f->pool->lock);
	wakes = f->pool->stat[KVMM_STAT_KSWAPD_WAKE];
	assert_true(wakes >= 1);
	assert_true(kvmm_pool_nr_free(f->pool) >= 8);
	assert_true(f->pool->stat[KVMM_STAT_KSWAPD_STEAL] >= 5);
	/* cache first: the sequence was not touched, the cache was demoted */
	assert_int_equal(kvmm_mm_seq_nr_swapped(s), 0);
	assert_true(f->pool->stat[KVMM_STAT_SWAP_DEMOTE] >= 5);
	check_inv(f->pool);
	kvmm_mm_seq_free(s);
	pthread_mutex_unlock(&f->pool->lock);
	kvmm_kswapd_stop(f->pool);
	assert_null(f->pool->kswapd);
}

/*
 * kvswapd with no cache left: it swaps a sequence out by asynchronous write-back, copying
 * with the lock let go, while this thread keeps appending to (and reading) another one.
 */
static void test_kswapd_writeback(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *victim, *busy;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct timespec t0;
	int i;

	assert_int_equal(host_tier(f, 1, 10, 64), 0);
	pthread_mutex_lock(&f->pool->lock);
	victim = mkseq(f, 20, 0, 0, 7); /* the lower priority goes first */
	busy = mkseq(f, 8, 1000, 1, 9); /* 4 frames left: at low */
	pthread_mutex_unlock(&f->pool->lock);
	assert_int_equal(kvmm_kswapd_start(f->pool), 0);
	/*
	 * Bounded by time, not by a count of iterations: on a loaded machine kvswapd may not
	 * run at all during a few thousand yields.
	 */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; nr_free_locked(f->pool) < 8; i++) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 10)
			break;
		pthread_mutex_lock(&f->pool->lock);
		/* append and truncate back: the tail page churns while kvswapd works */
		if (kvmm_pool_nr_free(f->pool) > 2)
			assert_int_equal(kvmm_mm_seq_append(busy, tpp, NULL), 0);
		check_inv(f->pool);
		assert_int_equal(kvmm_mm_seq_truncate(busy, 8ull * tpp), 0);
		pthread_mutex_unlock(&f->pool->lock);
		sched_yield();
	}
	kvmm_kswapd_stop(f->pool);
	pthread_mutex_lock(&f->pool->lock);
	kvmm_swap_poll(f->pool, true);
	check_inv(f->pool);
	assert_true(kvmm_pool_nr_free(f->pool) >= 8);
	assert_true(kvmm_mm_seq_nr_swapped(victim) > 0);
	assert_true(f->pool->stat[KVMM_STAT_SEQ_SWAPOUT] > 0);
	assert_int_equal(kvmm_mm_seq_fault(busy, 0, busy->nblocks) >= 0, 1);
	same(f, busy, 9);
	assert_true(kvmm_mm_seq_fault(victim, 0, victim->nblocks) >= 0);
	kvmm_swap_poll(f->pool, true);
	same(f, victim, 7);
	check_inv(f->pool);
	kvmm_mm_seq_free(victim);
	kvmm_mm_seq_free(busy);
	pthread_mutex_unlock(&f->pool->lock);
}

/*
 * A wake-up that comes while kvswapd backs off (its last pass freed nothing) is acted on when
 * the backoff ends, not lost: here nothing was reclaimable, then cache appears and the next
 * allocation wakes it within the backoff, and nothing else would ever wake it again.  (Taken
 * after the backoff, the wake-up is an ordinary one: the test passes either way with the fix.)
 */
static void test_kswapd_wake_in_backoff(void **state)
{
	struct kfx *f = *state;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct kvmm_seq *a, *c;
	struct timespec t0, now;

	pthread_mutex_lock(&f->pool->lock);
	a = mkseq(f, NF - 6, 0, 0, 51); /* no tier: sequences are never taken */
	c = mkseq(f, 3, 1000, 0, 52);	/* 3 free: under low */
	assert_int_equal(kvmm_mm_seq_seal(c), 3);
	pthread_mutex_unlock(&f->pool->lock);
	assert_int_equal(kvmm_kswapd_start(f->pool), 0);
	/* the start saw no wake-up: an allocation under low gives it one, a fruitless one */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_mm_seq_append(a, tpp, NULL), 0); /* 2 free */
	pthread_mutex_unlock(&f->pool->lock);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pthread_mutex_lock(&f->pool->lock);
		if (f->pool->stat[KVMM_STAT_KSWAPD_WAKE])
			break; /* its pass is over (it ran under the lock): backing off now */
		pthread_mutex_unlock(&f->pool->lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		assert_true(now.tv_sec - t0.tv_sec < 10);
		sched_yield();
	}
	assert_int_equal(f->pool->stat[KVMM_STAT_KSWAPD_STEAL], 0);
	/* now there is cache to take, and one more allocation under low */
	kvmm_mm_seq_free(c);
	assert_int_equal(kvmm_mm_seq_truncate(a, (uint64_t)(NF - 6) * tpp), 0);
	assert_int_equal(kvmm_mm_seq_append(a, tpp, NULL), 0);
	pthread_mutex_unlock(&f->pool->lock);
	/* bounded wait for the deferred pass to drop the cache */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pthread_mutex_lock(&f->pool->lock);
		if (f->pool->stat[KVMM_STAT_KSWAPD_STEAL] >= 3)
			break;
		pthread_mutex_unlock(&f->pool->lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 10)
			fail_msg("kvswapd never acted on the wake-up it got while backing off");
		sched_yield();
	}
	assert_true(f->pool->stat[KVMM_STAT_KSWAPD_WAKE] >= 2);
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
	check_inv(f->pool);
	kvmm_mm_seq_free(a);
	pthread_mutex_unlock(&f->pool->lock);
	kvmm_kswapd_stop(f->pool);
}

/*
 * A write-back copy held in flight, deterministically: the frame it copies first is made
 * unreadable, so the copier (kvmm_swap_writeback with the lock let go) faults on it and waits
 * in the signal handler until it is released; the handler then makes the frame readable again
 * and the copy goes on.  By then the copier has let go of the pool lock, so the test thread can
 * take it while the copy is in flight, whatever the scheduler does.
 */
static void *stall_page;
static int stall_hit, stall_release;

static void stall_handler(int sig, siginfo_t *si, void *uc)
{
	void *page = (void *)((uintptr_t)si->si_addr & ~(uintptr_t)(PG - 1));

	(void)uc;
	if (page != stall_page) {
		signal(sig, SIG_DFL); /* a real fault: let it kill the test */
		return;
	}
	__atomic_store_n(&stall_hit, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&stall_release, __ATOMIC_ACQUIRE))
		sched_yield();
	mprotect(page, PG, PROT_READ | PROT_WRITE);
}

static void *copier_main(void *arg)
{
	struct kvmm_pool *pool = arg;

	pthread_mutex_lock(&pool->lock);
	kvmm_swap_writeback(pool, true);
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

static void *releaser_main(void *arg)
{
	struct timespec ts = {0, 20 * 1000000};

	(void)arg;
	/* most often after the test thread started waiting; either order must work */
	nanosleep(&ts, NULL);
	__atomic_store_n(&stall_release, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct stall {
	struct sigaction old;
	pthread_t copier, releaser;
};

/*
 * A full pool (sw: 2 pages swapped out, victim 20 pages, filler the rest), then the victim put
 * under write-back and its copy started in another thread and held.  Returns with the pool lock
 * held, the copy in flight, and the releaser started.
 */
static void stall_writeback(struct kfx *f, struct stall *st, struct kvmm_seq **sw,
			    struct kvmm_seq **victim, struct kvmm_seq **filler)
{
	struct sigaction sa;

	assert_int_equal(host_tier(f, 1, 10, 64), 0);
	pthread_mutex_lock(&f->pool->lock);
	*sw = mkseq(f, 2, 2000, 1, 41);
	assert_int_equal(kvmm_mm_seq_swap_out(*sw, 0, 2), 2);
	*victim = mkseq(f, 20, 0, -1, 42); /* the lowest priority goes first */
	/* fill the pool to the last frame: direct reclaim under min may not take the victim */
	(*victim)->flags |= KVMM_SEQ_F_NORECLAIM;
	*filler = mkseq(f, NF - 20, 1000, 1, 43);
	(*filler)->flags |= KVMM_SEQ_F_NORECLAIM;
	(*victim)->flags &= ~KVMM_SEQ_F_NORECLAIM;
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	assert_int_equal(kvmm_shrink(f->pool, 1, KVMM_SHRINK_ASYNC), 20);
	assert_int_equal(kvmm_swap_nr_writeback(f->pool), 20);
	check_inv(f->pool);

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = stall_handler;
	sa.sa_flags = SA_SIGINFO;
	stall_page = kvmm_pool_frame_addr(f->pool, kvmm_mm_seq_frame(*victim, 0));
	stall_hit = 0;
	stall_release = 0;
	assert_int_equal(sigaction(SIGSEGV, &sa, &st->old), 0);
	assert_int_equal(mprotect(stall_page, PG, PROT_NONE), 0);
	pthread_mutex_unlock(&f->pool->lock);

	assert_int_equal(pthread_create(&st->copier, NULL, copier_main, f->pool), 0);
	while (!__atomic_load_n(&stall_hit, __ATOMIC_ACQUIRE))
		sched_yield(); /* ends: the copier reaches its first copy without help */
	/* the copier let go of the lock before it copied: the copy is in flight from here on */
	pthread_mutex_lock(&f->pool->lock);
	assert_int_equal(kvmm_swap_nr_writeback(f->pool), 20);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	assert_int_equal(pthread_create(&st->releaser, NULL, releaser_main, NULL), 0);
}

/* The pool lock held: let the copier finish and go, put the signal handler back. */
static void stall_end(struct kfx *f, struct stall *st)
{
	pthread_mutex_unlock(&f->pool->lock);
	pthread_join(st->releaser, NULL);
	pthread_join(st->copier, NULL);
	sigaction(SIGSEGV, &st->old, NULL);
	pthread_mutex_lock(&f->pool->lock);
}

/*
 * An allocation that finds the pool empty while kvswapd's write-back copy is in flight waits
 * for that copy and completes it (the frames were about to come back), instead of failing
 * with -ENOMEM and reporting an OOM victim.
 */
static void test_alloc_waits_for_writeback(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *sw, *victim, *filler;
	uint32_t tpp = f->fmt.tokens_per_page;
	struct stall st;
	int ret;

	stall_writeback(f, &st, &sw, &victim, &filler);
	/* the filler stays out of reach: the frames can only come from the write-back */
	ret = kvmm_mm_seq_append(filler, 4 * tpp, NULL); /* 4 frames, none free */
	stall_end(f, &st);
	filler->flags &= ~KVMM_SEQ_F_NORECLAIM;
	assert_int_equal(ret, 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 0);
	assert_int_equal(hook_fx->oom_calls, 0);
	/* the victim went out whole, the filler stayed */
	assert_int_equal(kvmm_swap_nr_writeback(f->pool), 0);
	assert_int_equal(kvmm_mm_seq_nr_swapped(victim), 20);
	assert_int_equal(kvmm_mm_seq_nr_swapped(filler), 0);
	check_inv(f->pool);
	assert_int_equal(kvmm_mm_seq_truncate(filler, (uint64_t)(NF - 20) * tpp), 0);
	assert_int_equal(kvmm_mm_seq_fault(victim, 0, 20), 20);
	same(f, victim, 42);
	same(f, filler, 43);
	check_inv(f->pool);
	kvmm_mm_seq_free(sw);
	kvmm_mm_seq_free(victim);
	kvmm_mm_seq_free(filler);
	pthread_mutex_unlock(&f->pool->lock);
}

/*
 * The sequence under write-back is freed while the copy is in flight: its frames come back
 * as soon as the copy is done, even to an allocation inside a swap operation (a fault-in),
 * where no sequence may be swapped out under the caller.
 */
static void test_writeback_freed_seq(void **state)
{
	struct kfx *f = *state;
	struct kvmm_seq *sw, *victim, *filler;
	struct stall st;
	int ret;

	stall_writeback(f, &st, &sw, &victim, &filler);
	filler->flags &= ~KVMM_SEQ_F_NORECLAIM; /* inside a fault-in it is out of reach anyway */
	kvmm_mm_seq_free(victim);
	/* still held by the copy: mapped by nobody, not free yet */
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	ret = kvmm_mm_seq_fault(sw, 0, 2);
	stall_end(f, &st);
	assert_int_equal(ret, 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 0);
	assert_int_equal(kvmm_swap_nr_writeback(f->pool), 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 18);
	same(f, sw, 41);
	same(f, filler, 43);
	check_inv(f->pool);
	kvmm_mm_seq_free(sw);
	kvmm_mm_seq_free(filler);
	pthread_mutex_unlock(&f->pool->lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_tier_drops_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_demoted_before_seqs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drop_cached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seq_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_move_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_direct_reclaim_swaps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oom_victim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kswapd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kswapd_writeback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kswapd_wake_in_backoff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alloc_waits_for_writeback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writeback_freed_seq, setup, teardown),
	};

	return cmocka_run_group_tests_name("kswapd", tests, NULL, NULL);
}
