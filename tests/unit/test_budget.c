// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_budget.c - the daemon-wide frame budget (kvmm/budget.c): the reclaim-target
 * choice (in proportion to what each namespace holds above its floor), the accounting of
 * frames out of every pool's buddy against one limit, discarding (the memory of a freed frame
 * really goes back while the budget is overcommitted: mincore), and memcg's semantics when an
 * allocation finds the budget spent: a namespace above its low is reclaimed, one at its low
 * keeps its cached pages while another has something above its own, every namespace under
 * low is reclaimed best-effort down to min with a low event counted, a min is never
 * reclaimed, and a namespace under its min gets its frames by preempting in another pool.
 * Two pools of 64 frames (one namespace and address space each) share a budget of 64, so
 * they span twice what they may hold.  Every test ends with kvmm_check_invariants().
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

#define NFRAMES 64
#define BUDGET 64

struct side {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_aspace *as;
};

struct bfix {
	struct kvmm_budget budget;
	struct kvmm_fmt fmt;
	struct side a, b;
};

static struct kvmm_seq *oom_victim;
static uint32_t oom_calls;

static void on_oom(struct kvmm_pool *pool, struct kvmm_seq *victim, uint32_t nr)
{
	(void)pool;
	(void)nr;
	oom_victim = victim;
	oom_calls++;
}

static const struct kvmm_mm_hooks hooks = {.oom = on_oom};

static void side_init(struct bfix *f, struct side *s, const char *name)
{
	s->pool = mmf_pool(NFRAMES);
	s->pool->hooks = &hooks;
	s->ns = mmf_ns(s->pool, name, 0);
	assert_int_equal(kvmm_aspace_create(s->pool, s->ns, &f->fmt, NULL, &s->as), 0);
	assert_int_equal(kvmm_budget_join(&f->budget, s->pool, s->ns), 0);
}

static int setup(void **state)
{
	struct bfix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(
		kvmm_fmt_init(&f->fmt, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, PAGE_SZ),
		0);
	assert_int_equal(kvmm_budget_init(&f->budget, BUDGET), 0);
	side_init(f, &f->a, "a");
	side_init(f, &f->b, "b");
	oom_victim = NULL;
	oom_calls = 0;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct bfix *f = *state;

	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
	kvmm_aspace_destroy(f->a.as);
	kvmm_aspace_destroy(f->b.as);
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
	kvmm_pool_destroy(f->a.pool);
	assert_int_equal(f->budget.nr_pools, 1);
	kvmm_pool_destroy(f->b.pool);
	assert_int_equal(f->budget.nr_pools, 0);
	assert_int_equal(f->budget.used, 0);
	kvmm_budget_fini(&f->budget);
	free(f);
	return 0;
}

/* @n cached pages in @s: sealed blocks of distinct prompts, unmapped. */
static void cache_pages(struct side *s, uint32_t n, uint32_t key)
{
	uint32_t t[TPP], i;

	for (i = 0; i < n; i++) {
		struct kvmm_seq *seq;

		mmf_fill(t, TPP, (key + i) * 1000);
		assert_int_equal(kvmm_mm_seq_create(s->as, &seq), 0);
		assert_int_equal(kvmm_mm_seq_append(seq, TPP, t), 0);
		assert_int_equal(kvmm_mm_seq_seal(seq), 1);
		kvmm_mm_seq_free(seq);
	}
}

/* A sequence of @nblocks unsealed blocks in @s: its frames mapped (no swap: not reclaimable). */
static struct kvmm_seq *mapped_seq(struct side *s, uint32_t nblocks)
{
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(s->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, nblocks * TPP - 1, NULL), 0);
	return seq;
}

static uint64_t charged(const struct side *s)
{
	return (uint64_t)s->ns->used + s->ns->cached;
}

/* ---- the reclaim-target choice -------------------------------------------------------- */

static void test_targets(void **state)
{
	uint64_t usage[3] = {100, 50, 10}, floor[3] = {40, 30, 20}, take[3];

	(void)state;
	/* excess 60, 20, 0: 8 frames split 6 / 2 */
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 8, take), 8);
	assert_int_equal(take[0], 6);
	assert_int_equal(take[1], 2);
	assert_int_equal(take[2], 0);
	/* 1 frame: 0.75 / 0.25, the largest remainder gets it */
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 1, take), 1);
	assert_int_equal(take[0], 1);
	assert_int_equal(take[1], 0);
	/* 5 frames: 3.75 / 1.25: 4 / 1, exactly 5 */
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 5, take), 5);
	assert_int_equal(take[0], 4);
	assert_int_equal(take[1], 1);
	/* more than they hold above the floors: all of that, no more */
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 500, take), 80);
	assert_int_equal(take[0], 60);
	assert_int_equal(take[1], 20);
	assert_int_equal(take[2], 0);
	/* every one at or under its floor: nothing */
	floor[0] = 100;
	floor[1] = 60;
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 8, take), 0);
	assert_int_equal(take[0] + take[1] + take[2], 0);
	/* nothing wanted */
	floor[0] = 0;
	assert_int_equal(kvmm_budget_targets(usage, floor, 3, 0, take), 0);
}

/* ---- accounting and discarding -------------------------------------------------------- */

static uint64_t used_sum(const struct bfix *f)
{
	return (uint64_t)f->a.pool->budget_charged + f->b.pool->budget_charged;
}

static void test_accounting(void **state)
{
	struct bfix *f = *state;
	uint32_t keep = f->a.pool->budget_keep;
	struct kvmm_seq *sa, *sb;

	/* two pools of 64 on a budget of 64: overcommitted, freed frames past the keep go back */
	assert_true(f->budget.discard);
	assert_int_equal(f->budget.span, 2 * NFRAMES);
	assert_int_equal(keep, 32);
	sa = mapped_seq(&f->a, 20);
	sb = mapped_seq(&f->b, 30);
	assert_int_equal(f->budget.used, 50);
	assert_int_equal(kvmm_budget_free(&f->budget), BUDGET - 50);
	assert_int_equal(f->a.pool->budget_charged, 20);
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
	/*
	 * The budget, not the pool, runs out (a has 44 frames free in its own buddy): nothing
	 * reclaimable anywhere, the append fails; what it took stays resident in a's buddy,
	 * still charged, under the keep
	 */
	assert_int_equal(kvmm_mm_seq_append(sa, TPP * 20, NULL), -ENOMEM);
	assert_true(f->a.pool->nr_free >= 20);
	assert_int_equal(f->a.pool->nr_free_resident, BUDGET - 50);
	assert_int_equal(f->budget.used, BUDGET);
	assert_int_equal(f->budget.used, used_sum(f));
	assert_true(f->budget.nr_short >= 1);
	/* b's 30 frames go back to its buddy: resident too (30 <= its keep), nothing punched */
	kvmm_mm_seq_free(sb);
	assert_int_equal(f->b.pool->nr_free_resident, 30);
	assert_int_equal(f->b.pool->stat[KVMM_STAT_BUDGET_DISCARD], 0);
	mmf_check(f->b.pool);
	/* a wants 20 more: b's free resident frames are given back for it, nothing reclaimed */
	assert_int_equal(kvmm_mm_seq_append(sa, TPP * 20, NULL), 0);
	assert_true(f->b.pool->stat[KVMM_STAT_BUDGET_DISCARD] >= 6);
	assert_int_equal(f->b.ns->budget_reclaimed, 0);
	assert_int_equal(f->budget.used, used_sum(f));
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
	/* a frees its 40: past its keep, trimmed to half of it */
	kvmm_mm_seq_free(sa);
	assert_true(f->a.pool->nr_free_resident <= keep);
	assert_true(f->a.pool->stat[KVMM_STAT_BUDGET_DISCARD] > 0);
	assert_int_equal(f->budget.used, used_sum(f));
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
}

/* count of the pool's pages resident in memory (mincore) */
static uint32_t pages_in_core(struct kvmm_pool *pool)
{
	size_t len = (size_t)pool->nframes * PAGE_SZ, n = len / 4096, i;
	unsigned char *vec = malloc(n);
	uint32_t in = 0;

	assert_non_null(vec);
	assert_int_equal(mincore(kvmm_pool_frame_addr(pool, 0), len, vec), 0);
	for (i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	return in;
}

/* A freed frame's memory really goes back to the system, past the keep and when trimmed. */
static void test_discard_returns_memory(void **state)
{
	struct bfix *f = *state;
	struct kvmm_page *pg[48];
	uint32_t i, in;

	assert_int_equal(sysconf(_SC_PAGESIZE), 4096);
	for (i = 0; i < 48; i++) {
		pg[i] = kvmm_alloc_page(f->a.pool, f->a.ns, NULL);
		assert_non_null(pg[i]);
		memset(kvmm_pool_frame_addr(f->a.pool, kvmm_page_to_frame(f->a.pool, pg[i])), 0x5a,
		       PAGE_SZ);
	}
	assert_int_equal(pages_in_core(f->a.pool), 48);
	for (i = 0; i < 48; i++)
		kvmm_free_page(f->a.pool, pg[i], NULL);
	/* 48 free frames past a keep of 32: trimmed to 16, the others' memory is gone */
	in = pages_in_core(f->a.pool);
	assert_int_equal(in, f->a.pool->nr_free_resident);
	assert_true(in <= 32);
	/* all of it, on demand */
	assert_int_equal(kvmm_budget_trim(f->a.pool, UINT32_MAX), in);
	assert_int_equal(pages_in_core(f->a.pool), 0);
	assert_int_equal(f->a.pool->budget_charged, 0);
	/* a frame given back reads zeroes and holds no one's data (reading maps the zero page) */
	for (i = 0; i < NFRAMES; i++) {
		const struct kvmm_page *p = &f->a.pool->pages[i];
		const char *addr = kvmm_pool_frame_addr(f->a.pool, i);

		assert_false(p->flags & KVMM_PG_RESIDENT);
		assert_int_equal(addr[0], 0);
		assert_int_equal(p->data_ns, KVMM_NS_CLEAN);
	}
	mmf_check(f->a.pool);
}

/* Not overcommitted (the pools fit in the budget): nothing is given back. */
static void test_no_discard_when_it_fits(void **state)
{
	struct kvmm_budget b;
	struct kvmm_pool *pool = mmf_pool(NFRAMES);
	struct kvmm_page *pg[48];
	uint32_t i;

	(void)state;
	assert_int_equal(kvmm_budget_init(&b, NFRAMES), 0);
	assert_int_equal(kvmm_budget_join(&b, pool, NULL), 0);
	assert_false(b.discard);
	for (i = 0; i < 48; i++) {
		pg[i] = kvmm_alloc_page(pool, NULL, NULL);
		assert_non_null(pg[i]);
	}
	assert_int_equal(kvmm_budget_used(&b), 48);
	for (i = 0; i < 48; i++)
		kvmm_free_page(pool, pg[i], NULL);
	assert_int_equal(kvmm_budget_used(&b), 48);
	assert_int_equal(pool->nr_free_resident, 48);
	assert_int_equal(pool->stat[KVMM_STAT_BUDGET_DISCARD], 0);
	mmf_check(pool);
	/* taken again: no new charge */
	pg[0] = kvmm_alloc_page(pool, NULL, NULL);
	assert_non_null(pg[0]);
	assert_int_equal(kvmm_budget_used(&b), 48);
	kvmm_free_page(pool, pg[0], NULL);
	/* a pool that is not empty cannot join; one pool cannot join twice */
	assert_int_equal(kvmm_budget_join(&b, pool, NULL), -EBUSY);
	mmf_check(pool);
	kvmm_pool_destroy(pool);
	assert_int_equal(b.nr_pools, 0);
	assert_int_equal(b.used, 0);
	kvmm_budget_fini(&b);
}

/* ---- memcg semantics ------------------------------------------------------------------ */

/* a at its low keeps its cached pages; b, above its own (none), is what goes */
static void test_low_protects(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 0, 30), 0);
	cache_pages(&f->a, 30, 1);
	cache_pages(&f->b, 34, 100);
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	/* b wants 10 more: only b is above its low, so b pays */
	seq = mapped_seq(&f->b, 10);
	assert_int_equal(f->a.ns->cached, 30);
	assert_int_equal(f->b.ns->cached, 24);
	assert_int_equal(f->a.ns->low_events, 0);
	assert_int_equal(f->b.ns->budget_reclaimed, 10);
	assert_true(f->b.pool->stat[KVMM_STAT_BUDGET_RECLAIM] >= 10);
	/*
	 * a wants 10 more than its low: a is above its low as soon as it has one, so it pays its
	 * share (memcg: the allocating group is reclaimed too), but never below its low
	 */
	kvmm_mm_seq_free(seq);
	cache_pages(&f->b, 10, 200);
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	seq = mapped_seq(&f->a, 10);
	assert_int_equal(f->a.ns->used, 10);
	assert_true(charged(&f->a) >= 30);
	assert_true(f->b.ns->budget_reclaimed > 10);
	assert_int_equal(f->a.ns->low_events + f->b.ns->low_events, 0);
	kvmm_mm_seq_free(seq);
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
}

/* reclaim goes to both, in proportion to what each holds above its low */
static void test_proportional(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 0, 8), 0);
	assert_int_equal(kvmm_ns_set_protection(f->b.ns, 0, 8), 0);
	/* a: 40 cached (32 above low), b: 24 cached (16 above low) */
	cache_pages(&f->a, 40, 1);
	cache_pages(&f->b, 24, 100);
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	/* 6 frames wanted for b: a gives 4, b 2 */
	assert_int_equal(kvmm_budget_reclaim(f->b.pool, f->b.ns, 6), 6);
	assert_int_equal(f->a.ns->cached, 36);
	assert_int_equal(f->b.ns->cached, 22);
	assert_int_equal(f->a.ns->budget_reclaimed, 4);
	assert_int_equal(f->b.ns->budget_reclaimed, 2);
	seq = mapped_seq(&f->b, 6);
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	kvmm_mm_seq_free(seq);
}

/* every namespace at or under its low: best effort down to min, with a low event */
static void test_all_below_low(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 10, 40), 0);
	assert_int_equal(kvmm_ns_set_protection(f->b.ns, 0, 40), 0);
	cache_pages(&f->a, 32, 1);
	cache_pages(&f->b, 32, 100);
	seq = mapped_seq(&f->b, 4);
	assert_int_equal(charged(&f->a) + charged(&f->b), BUDGET);
	assert_true(f->a.ns->cached < 32 || f->b.ns->cached < 32);
	assert_true(f->a.ns->low_events + f->b.ns->low_events >= 1);
	assert_true(f->budget.low_events >= 1);
	assert_true(f->a.pool->stat[KVMM_STAT_BUDGET_LOW] + f->b.pool->stat[KVMM_STAT_BUDGET_LOW] >=
		    1);
	assert_true(charged(&f->a) >= 10);
	kvmm_mm_seq_free(seq);
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
}

/* a min is never reclaimed: with nothing else to take, the allocation fails */
static void test_min_never_reclaimed(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *hold, *seq;

	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 24, 24), 0);
	cache_pages(&f->a, 24, 1);
	hold = mapped_seq(&f->b, 40); /* b's frames: mapped, no swap tier, not reclaimable */
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	assert_int_equal(kvmm_mm_seq_create(f->b.as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), -ENOMEM);
	assert_int_equal(f->a.ns->cached, 24);
	assert_int_equal(f->a.ns->low_events, 0);
	assert_true(f->budget.nr_short >= 1);
	/* b's own overflow preempts b's own sequence, as without a budget */
	assert_ptr_equal(oom_victim, hold);
	kvmm_mm_seq_free(seq);
	kvmm_mm_seq_free(hold);
}

/* a namespace under its guaranteed min preempts in the pool holding the most above its own */
static void test_min_guaranteed(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *hold, *seq;

	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 16, 16), 0);
	hold = mapped_seq(&f->b, BUDGET);
	assert_int_equal(kvmm_budget_free(&f->budget), 0);
	assert_int_equal(kvmm_mm_seq_create(f->a.as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), -ENOMEM);
	assert_int_equal(oom_calls, 1);
	assert_ptr_equal(oom_victim, hold);
	assert_true(f->budget.nr_oom >= 1);
	/* the owner frees its victim: a gets its frames */
	kvmm_mm_seq_free(hold);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), 0);
	kvmm_mm_seq_free(seq);
}

/* ---- background reclaim (kvswapd) --------------------------------------------------------- */

/* The budget's free frames, read under @s's lock (kvswapd may be running). */
static uint64_t budget_free_locked(struct bfix *f, struct side *s)
{
	uint64_t v;

	pthread_mutex_lock(&s->pool->lock);
	v = kvmm_budget_free(&f->budget);
	pthread_mutex_unlock(&s->pool->lock);
	return v;
}

/*
 * kvmm_budget_balance brings the budget back to its high point: cached pages from the pools
 * above their low, in proportion to what they hold above it, given back to the system;
 * nothing below a low, no mapped sequence touched (no swap in the background).  Over its
 * high point it does nothing.
 */
static void test_background_balance(void **state)
{
	struct bfix *f = *state;
	struct kvmm_seq *seq;
	uint64_t got, bg;

	f->budget.wmark_low = 8;
	f->budget.wmark_high = 16;
	assert_int_equal(kvmm_ns_set_protection(f->a.ns, 0, 20), 0);
	cache_pages(&f->a, 30, 1);
	cache_pages(&f->b, 20, 100);
	seq = mapped_seq(&f->b, 10);
	assert_int_equal(kvmm_budget_free(&f->budget), 4);
	assert_true(kvmm_budget_below_low(&f->budget));
	pthread_mutex_lock(&f->a.pool->lock);
	assert_int_equal(kvmm_budget_balance(f->a.pool, &got), 0);
	pthread_mutex_unlock(&f->a.pool->lock);
	assert_int_equal(got, 12);
	assert_true(kvmm_budget_free(&f->budget) >= 16);
	assert_false(kvmm_budget_below_low(&f->budget));
	/* a keeps its low; b's sequence is untouched; both paid in proportion (10 : 30) */
	assert_true(charged(&f->a) >= 20);
	assert_int_equal(f->a.ns->cached, 27);
	assert_int_equal(f->b.ns->cached, 11);
	assert_int_equal(f->b.ns->used, 10);
	assert_int_equal(f->a.ns->low_events + f->b.ns->low_events, 0);
	bg = f->a.pool->stat[KVMM_STAT_BUDGET_BG] + f->b.pool->stat[KVMM_STAT_BUDGET_BG];
	assert_int_equal(bg, 12);
	assert_int_equal(f->budget.nr_background, 1);
	assert_int_equal(f->budget.bg_reclaimed, 12);
	/* over the high point: nothing */
	pthread_mutex_lock(&f->a.pool->lock);
	assert_int_equal(kvmm_budget_balance(f->a.pool, &got), 0);
	assert_int_equal(got, 0);
	pthread_mutex_unlock(&f->a.pool->lock);
	/* another holds the budget (taken first, as join does): -EBUSY, nothing done */
	f->budget.wmark_high = 40;
	pthread_mutex_lock(&f->budget.lock);
	pthread_mutex_lock(&f->a.pool->lock);
	assert_int_equal(kvmm_budget_balance(f->a.pool, &got), -EBUSY);
	assert_int_equal(got, 0);
	pthread_mutex_unlock(&f->a.pool->lock);
	pthread_mutex_unlock(&f->budget.lock);
	f->budget.wmark_high = 16;
	assert_int_equal(f->budget.nr_background, 1);
	kvmm_mm_seq_free(seq);
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
}

/*
 * With kvswapd running, the charge that takes the budget under its low point wakes it, and it
 * brings the budget back over its high point without any allocation failing first.
 */
static void test_background_kswapd(void **state)
{
	struct bfix *f = *state;
	int i;

	f->budget.wmark_low = 8;
	f->budget.wmark_high = 16;
	assert_int_equal(kvmm_kswapd_start(f->a.pool), 0);
	assert_int_equal(kvmm_kswapd_start(f->b.pool), 0);
	pthread_mutex_lock(&f->a.pool->lock);
	cache_pages(&f->a, 30, 1);
	pthread_mutex_unlock(&f->a.pool->lock);
	pthread_mutex_lock(&f->b.pool->lock);
	cache_pages(&f->b, 30, 100); /* 60 of 64: under the low point */
	pthread_mutex_unlock(&f->b.pool->lock);
	for (i = 0; i < 500 && budget_free_locked(f, &f->b) < 16; i++)
		usleep(10000);
	kvmm_kswapd_stop(f->a.pool);
	kvmm_kswapd_stop(f->b.pool);
	print_message("budget free %llu after %d ms; %llu background runs freed %llu\n",
		      (unsigned long long)kvmm_budget_free(&f->budget), i * 10,
		      (unsigned long long)f->budget.nr_background,
		      (unsigned long long)f->budget.bg_reclaimed);
	assert_true(kvmm_budget_free(&f->budget) >= 16);
	assert_true(f->budget.nr_background >= 1);
	assert_true(f->budget.bg_reclaimed >= 12);
	assert_true(f->a.pool->stat[KVMM_STAT_BUDGET_BG] + f->b.pool->stat[KVMM_STAT_BUDGET_BG] >=
		    12);
	assert_int_equal(f->budget.nr_reclaim, 0); /* no allocation had to reclaim */
	mmf_check(f->a.pool);
	mmf_check(f->b.pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_targets),
		cmocka_unit_test_setup_teardown(test_accounting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_discard_returns_memory, setup, teardown),
		cmocka_unit_test(test_no_discard_when_it_fits),
		cmocka_unit_test_setup_teardown(test_low_protects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_proportional, setup, teardown),
		cmocka_unit_test_setup_teardown(test_all_below_low, setup, teardown),
		cmocka_unit_test_setup_teardown(test_min_never_reclaimed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_min_guaranteed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_background_balance, setup, teardown),
		cmocka_unit_test_setup_teardown(test_background_kswapd, setup, teardown),
	};

	return cmocka_run_group_tests_name("budget", tests, NULL, NULL);
}
