// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_vmscan.c - the LRU lists and reclaim (kvmm/vmscan.c, with the page
 * references of kvmm/pgtable.c): unmapped sealed pages join the inactive list, reuse sets
 * REFERENCED and a second reuse promotes, reclaim evicts from the inactive tail giving
 * referenced pages a second chance, refills the inactive list from the active tail, is
 * restricted to one namespace when asked, and is what a namespace limit and the min
 * watermark fall back on before -ENOMEM, as are the owner's shrinkers (kvmm/shrinker.c), and
 * honours the namespaces' min and low protections under the pool's pressure.  Every test ends
 * with kvmm_check_invariants().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

#define NFRAMES 64

static int setup_params(void **state, const struct kvmm_pool_params *p)
{
	return mmf_setup(state, &(struct mm_fixture_opts){.params = *p, .ns = "one", .ns2 = "two"});
}

static int setup(void **state)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ, .nframes = NFRAMES};

	return setup_params(state, &p);
}

static void fill_block(uint32_t *t, uint32_t key)
{
	mmf_fill(t, TPP, key * 100);
}

/* Seal one block of prompt @key and unmap it: one CACHED page.  Returns its frame. */
static uint32_t cache_block(struct kvmm_aspace *as, uint32_t key)
{
	uint32_t t[TPP], frame;
	struct kvmm_seq *seq;

	fill_block(t, key);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 1);
	frame = kvmm_mm_seq_frame(seq, 0);
	kvmm_mm_seq_free(seq);
	assert_int_equal(kvmm_frame_to_page(as->pool, frame)->state, KVMM_PAGE_CACHED);
	return frame;
}

/* Look prompt @key up: a new sequence mapping the cached block (or NULL on a miss). */
static struct kvmm_seq *hit(struct kvmm_aspace *as, uint32_t key)
{
	struct kvmm_seq *seq;
	uint32_t t[TPP];
	int ret;

	fill_block(t, key);
	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	ret = kvmm_mm_prefix_lookup(seq, t, TPP);
	assert_true(ret == 0 || ret == TPP);
	if (!ret) {
		kvmm_mm_seq_free(seq);
		return NULL;
	}
	return seq;
}

static struct kvmm_page *pg_of(struct mm_fixture *f, uint32_t frame)
{
	return kvmm_frame_to_page(f->pool, frame);
}

static bool is_cached(struct mm_fixture *f, uint32_t frame)
{
	return pg_of(f, frame)->state == KVMM_PAGE_CACHED;
}

/* ---- the lists --------------------------------------------------------------------------- */

static void test_unmapped_sealed_page_joins_inactive(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t frame = cache_block(f->as, 1);
	struct kvmm_page *pg = pg_of(f, frame);

	assert_true(pg->flags & KVMM_PG_LRU);
	assert_false(pg->flags & (KVMM_PG_ACTIVE | KVMM_PG_REFERENCED));
	assert_int_equal(pg->refcount, 0);
	assert_int_equal(f->pool->lru.nr_inactive, 1);
	assert_int_equal(f->pool->lru.nr_active, 0);
	assert_ptr_equal(f->pool->lru.inactive.next, &pg->lru);
	assert_int_equal(f->ns->cached, 1);
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
}

static void test_reuse_references_then_promotes(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t frame = cache_block(f->as, 1);
	struct kvmm_page *pg = pg_of(f, frame);
	struct kvmm_seq *s1, *s2;

	s1 = hit(f->as, 1);
	assert_non_null(s1);
	assert_true(pg->flags & KVMM_PG_REFERENCED);
	assert_false(pg->flags & (KVMM_PG_ACTIVE | KVMM_PG_LRU));
	kvmm_mm_seq_free(s1);
	/* back on the inactive list, keeping its second chance */
	assert_true(pg->flags & KVMM_PG_REFERENCED);
	assert_int_equal(f->pool->lru.nr_inactive, 1);
	mmf_check(f->pool);

	/* reused again before reclaim came by: promoted, returns to the active list */
	s1 = hit(f->as, 1);
	s2 = hit(f->as, 1);
	assert_non_null(s2);
	assert_int_equal(pg->refcount, 2);
	assert_true(pg->flags & KVMM_PG_ACTIVE);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGACTIVATE], 1);
	kvmm_mm_seq_free(s1);
	kvmm_mm_seq_free(s2);
	assert_int_equal(f->pool->lru.nr_active, 1);
	assert_int_equal(f->pool->lru.nr_inactive, 0);
	assert_true(pg->flags & KVMM_PG_LRU);
	mmf_check(f->pool);
}

/* ---- reclaim ----------------------------------------------------------------------------- */

static void test_reclaim_evicts_oldest_first(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t fr[5], i;

	for (i = 0; i < 5; i++)
		fr[i] = cache_block(f->as, i);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 2), 2);
	assert_false(is_cached(f, fr[0]));
	assert_false(is_cached(f, fr[1]));
	for (i = 2; i < 5; i++)
		assert_true(is_cached(f, fr[i]));
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSCAN], 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSTEAL], 2);
	assert_int_equal(f->ns->cached, 3);
	assert_int_equal(kvmm_pagecache_count(f->pool), 3);
	/* the evicted blocks are gone from the cache too */
	assert_null(hit(f->as, 0));
	assert_null(hit(f->as, 1));
	mmf_check(f->pool);

	/* more than there is: returns what it could */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 10), 3);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 10), 0);
	assert_int_equal(f->ns->cached, 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), NFRAMES);
	mmf_check(f->pool);
}

static void test_second_chance(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t a, b, c;
	struct kvmm_seq *s;

	a = cache_block(f->as, 1);
	s = hit(f->as, 1);
	kvmm_mm_seq_free(s); /* a: inactive, REFERENCED */
	b = cache_block(f->as, 2);
	c = cache_block(f->as, 3); /* inactive: c b a(tail) */

	/* a is the oldest but was reused: it moves to the active list, b goes instead */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_true(is_cached(f, a));
	assert_true(pg_of(f, a)->flags & KVMM_PG_ACTIVE);
	assert_false(pg_of(f, a)->flags & KVMM_PG_REFERENCED);
	assert_false(is_cached(f, b));
	assert_true(is_cached(f, c));
	assert_int_equal(f->pool->stat[KVMM_STAT_PGACTIVATE], 1);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSCAN], 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSTEAL], 1);
	mmf_check(f->pool);

	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_false(is_cached(f, c));
	assert_true(is_cached(f, a));

	/* only the active page is left: it is deactivated, then evicted */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_false(is_cached(f, a));
	assert_int_equal(f->pool->stat[KVMM_STAT_PGDEACTIVATE], 1);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 0);
	mmf_check(f->pool);
}

static void test_inactive_refilled_from_active_tail(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t fr[4], i;
	struct kvmm_seq *s;

	/* promote four pages: each hit twice */
	for (i = 0; i < 4; i++) {
		fr[i] = cache_block(f->as, i);
		s = hit(f->as, i);
		kvmm_mm_seq_free(s);
		s = hit(f->as, i);
		kvmm_mm_seq_free(s);
		assert_true(pg_of(f, fr[i])->flags & KVMM_PG_ACTIVE);
	}
	assert_int_equal(f->pool->lru.nr_active, 4);
	assert_int_equal(f->pool->lru.nr_inactive, 0);

	/* reclaim first evens the lists out, taking the oldest active pages */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_false(is_cached(f, fr[0]));
	assert_int_equal(f->pool->stat[KVMM_STAT_PGDEACTIVATE], 2);
	assert_false(pg_of(f, fr[1])->flags & (KVMM_PG_ACTIVE | KVMM_PG_REFERENCED));
	assert_true(pg_of(f, fr[3])->flags & KVMM_PG_ACTIVE);
	assert_int_equal(f->pool->lru.nr_inactive, 1);
	assert_int_equal(f->pool->lru.nr_active, 2);
	mmf_check(f->pool);
}

static void test_mapped_pages_are_not_reclaimable(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3 * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 3);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 3), 0);
	assert_int_equal(kvmm_reclaim(f->pool, f->ns, 3), 0);
	assert_int_equal(kvmm_reclaim(NULL, NULL, 3), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSTEAL], 0);
	assert_int_equal(f->ns->used, 3);
	mmf_check(f->pool);
}

static void test_reclaim_one_namespace(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t a[3], b[3], i;

	for (i = 0; i < 3; i++) {
		a[i] = cache_block(f->as, i);
		b[i] = cache_block(f->as2, i);
	}
	assert_int_equal(f->ns->cached, 3);
	assert_int_equal(f->ns2->cached, 3);

	assert_int_equal(kvmm_reclaim(f->pool, f->ns2, 10), 3);
	for (i = 0; i < 3; i++) {
		assert_true(is_cached(f, a[i]));
		assert_false(is_cached(f, b[i]));
	}
	assert_int_equal(f->ns->cached, 3);
	assert_int_equal(f->ns2->cached, 0);
	/* pages of others are passed over, not counted as scanned */
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSCAN], 3);
	assert_int_equal(kvmm_reclaim(f->pool, f->ns2, 10), 0);
	mmf_check(f->pool);
}

static void test_child_evicted_before_parent(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t t[3 * TPP], fr[3], i;
	struct kvmm_seq *seq;

	for (i = 0; i < 3 * TPP; i++)
		t[i] = 7000 + i;
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 3);
	for (i = 0; i < 3; i++)
		fr[i] = kvmm_mm_seq_frame(seq, i);
	kvmm_mm_seq_free(seq);

	/* freed tail first: the last block is the oldest, the first block survives longest */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_false(is_cached(f, fr[2]));
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(seq, t, 3 * TPP), 2 * TPP);
	kvmm_mm_seq_free(seq);
	mmf_check(f->pool);
}

/* ---- what allocation falls back on --------------------------------------------------------- */

static void test_ns_limit_reclaims_own_cache_then_enomem(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t own[3], other[3], i;
	struct kvmm_seq *seq;

	for (i = 0; i < 3; i++) {
		own[i] = cache_block(f->as, i);
		other[i] = cache_block(f->as2, i);
	}
	assert_int_equal(kvmm_ns_set_limit(f->ns, 4), 0);
	assert_int_equal(f->ns->cached, 3);

	/* four pages at a limit of four: its own three cached pages make room */
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 4 * TPP, NULL), 0);
	assert_int_equal(f->ns->used, 4);
	assert_int_equal(f->ns->cached, 0);
	for (i = 0; i < 3; i++) {
		assert_false(is_cached(f, own[i]));
		assert_true(is_cached(f, other[i])); /* never another namespace's */
	}
	assert_int_equal(f->ns2->cached, 3);
	mmf_check(f->pool);

	/* nothing of its own left to reclaim: -ENOMEM, although the pool has room */
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), -ENOMEM);
	assert_int_equal(seq->ntokens, 4 * TPP);
	assert_true(f->pool->stat[KVMM_STAT_NS_LIMIT_HIT] >= 1);
	assert_int_equal(f->ns2->cached, 3);
	mmf_check(f->pool);
}

/*
 * OOM picks, among the sequences, only one whose end gives a frame back: a sequence whose
 * every page another maps too would lose its work for nothing, and its owner would map the
 * same pages again at once.
 */
static void test_oom_victim_frees_a_frame(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *older, *s1, *s2;

	assert_int_equal(kvmm_mm_seq_create(f->as, &older), 0);
	older->priority = 5; /* the last victim, by priority and by age */
	assert_int_equal(kvmm_mm_seq_append(older, TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &s1), 0);
	assert_int_equal(kvmm_mm_seq_append(s1, 2 * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_fork(s1, &s2), 0); /* s1 and s2 share both pages */

	assert_ptr_equal(kvmm_out_of_memory(f->pool), older);
	assert_true(older->flags & KVMM_SEQ_F_PREEMPTED);
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 1);
	kvmm_mm_seq_free(older);
	/* what is left frees nothing: no victim */
	assert_null(kvmm_out_of_memory(f->pool));
	assert_int_equal(f->pool->stat[KVMM_STAT_OOM], 1);
	/* once s2 has a page of its own (copy-on-write of nothing: a new block), it goes */
	assert_int_equal(kvmm_mm_seq_append(s2, TPP, NULL), 0);
	assert_ptr_equal(kvmm_out_of_memory(f->pool), s2);
	kvmm_mm_seq_free(s2);
	kvmm_mm_seq_free(s1);
	mmf_check(f->pool);
}

static int setup_wmark(void **state)
{
	struct kvmm_pool_params p = {.page_size = PAGE_SZ,
				     .nframes = 32,
				     .wmark_min = 4,
				     .wmark_low = 6,
				     .wmark_high = 8};

	return setup_params(state, &p);
}

static void test_min_watermark_reclaims_directly(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;
	uint32_t i, n;

	/* ns2 leaves 10 pages cached; ns1 maps 18: 4 frames free, at min */
	for (i = 0; i < 10; i++)
		cache_block(f->as2, i);
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 18 * TPP, NULL), 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_PGSTEAL], 0);

	/* the next allocation would go under min: it reclaims the cache first */
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), 0);
	assert_true(f->pool->stat[KVMM_STAT_DIRECT_RECLAIM] >= 1);
	assert_true(f->pool->stat[KVMM_STAT_PGSTEAL] >= 1);
	assert_true(kvmm_pool_nr_free(f->pool) >= 4);
	mmf_check(f->pool);

	/* keep going: the whole cache is used up, then the reserve, then -ENOMEM */
	for (n = 0; kvmm_mm_seq_append(seq, TPP, NULL) == 0; n++)
		assert_true(n < 32);
	assert_int_equal(f->ns2->cached, 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	assert_int_equal(f->ns->used, 32);
	mmf_check(f->pool);
}

/* ---- shrinkers: frames an owner parks (kvmm/shrinker.c) ------------------------------------- */

struct test_shrinker {
	struct kvmm_shrinker sh;
	struct kvmm_ns *ns;
	struct kvmm_seq *seq; /* the parked frames, held as a hidden sequence's pages (kvmmd) */
	uint32_t calls;
	bool busy;
};

static uint32_t test_scan(struct kvmm_shrinker *sh, struct kvmm_ns *ns, uint32_t want)
{
	struct test_shrinker *t = container_of(sh, struct test_shrinker, sh);
	uint32_t n;

	t->calls++;
	if (t->busy || (ns && ns != t->ns))
		return 0;
	n = min_t(uint32_t, want, t->seq->nblocks);
	kvmm_mm_seq_truncate(t->seq, (uint64_t)(t->seq->nblocks - n) * TPP);
	return n;
}

static void ts_init(struct test_shrinker *t, struct kvmm_aspace *as, uint32_t n)
{
	memset(t, 0, sizeof(*t));
	t->ns = as->ns;
	t->sh.scan = test_scan;
	assert_int_equal(kvmm_mm_seq_create(as, &t->seq), 0);
	t->seq->flags |= KVMM_SEQ_F_NORECLAIM;
	assert_int_equal(kvmm_mm_seq_append(t->seq, n * TPP, NULL), 0);
	kvmm_register_shrinker(as->pool, &t->sh);
}

static void ts_fini(struct test_shrinker *t)
{
	kvmm_unregister_shrinker(t->seq->as->pool, &t->sh);
	kvmm_mm_seq_free(t->seq);
}

/*
 * Under min with nothing cached, reclaim asks the shrinkers before anything fails, taking
 * turns so neither always pays first; a busy one gives nothing and is not held against it;
 * only when they have nothing left does an allocation fail.
 */
static void test_shrinkers_before_enomem(void **state)
{
	struct mm_fixture *f = *state;
	struct test_shrinker a, b;
	struct kvmm_seq *seq;
	uint32_t n;

	/* b is asked first (registered first), but busy */
	ts_init(&b, f->as2, 10);
	ts_init(&a, f->as, 10);
	b.busy = true;
	assert_int_equal(kvmm_pool_nr_free(f->pool), 12);
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	/* 8 pages leave 4 free: at min, nothing reclaimed yet */
	assert_int_equal(kvmm_mm_seq_append(seq, 8 * TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_SHRINKER_FREED], 0);
	/* the next takes the reserve down: the shrinkers are asked, b is busy, a pays */
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), 0);
	assert_true(a.seq->nblocks < 10);
	assert_int_equal(b.seq->nblocks, 10);
	assert_true(b.calls >= 1);
	assert_true(kvmm_pool_nr_free(f->pool) >= 4);
	mmf_check(f->pool);

	/* b is free to give now: both pay, in turns, then the pool runs dry */
	b.busy = false;
	for (n = 0; kvmm_mm_seq_append(seq, TPP, NULL) == 0; n++)
		assert_true(n < 32);
	assert_int_equal(a.seq->nblocks, 0);
	assert_int_equal(b.seq->nblocks, 0);
	assert_int_equal(a.sh.nr_freed, 10);
	assert_int_equal(b.sh.nr_freed, 10);
	assert_int_equal(f->pool->stat[KVMM_STAT_SHRINKER_FREED], 20);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	assert_int_equal(f->ns->used, 32);
	mmf_check(f->pool);
	ts_fini(&a);
	ts_fini(&b);
	kvmm_mm_seq_free(seq);
}

/* A namespace at its limit asks only for its own charges, after its own cache. */
static void test_shrinkers_at_ns_limit(void **state)
{
	struct mm_fixture *f = *state;
	struct test_shrinker a, b;
	struct kvmm_seq *seq;

	ts_init(&b, f->as2, 6);
	ts_init(&a, f->as, 6);
	assert_int_equal(kvmm_ns_set_limit(f->ns, 10), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	/* 10 pages at a limit of 10 with 6 parked: the 6 come back */
	assert_int_equal(kvmm_mm_seq_append(seq, 10 * TPP, NULL), 0);
	assert_int_equal(a.seq->nblocks, 0);
	assert_int_equal(b.seq->nblocks, 6); /* another namespace's: never */
	assert_int_equal(f->ns->used, 10);
	/* nothing of its own parked or cached: -ENOMEM */
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), -ENOMEM);
	assert_int_equal(b.seq->nblocks, 6);
	mmf_check(f->pool);
	ts_fini(&a);
	ts_fini(&b);
	kvmm_mm_seq_free(seq);
}

/* ---- protections: memcg's min and low between the namespaces of one pool ------------------- */

static void test_protection_checks(void **state)
{
	struct mm_fixture *f = *state;

	assert_int_equal(kvmm_ns_set_protection(f->ns, 5, 4), -EINVAL); /* min > low */
	assert_int_equal(kvmm_ns_set_protection(f->ns, 4, 0), 0);	/* min alone */
	assert_int_equal(kvmm_ns_set_protection(f->ns, 2, 6), 0);
	assert_int_equal(kvmm_ns_set_limit(f->ns, 5), -EINVAL); /* under low */
	assert_int_equal(kvmm_ns_set_limit(f->ns, 6), 0);
	assert_int_equal(kvmm_ns_set_protection(f->ns, 2, 7), -EINVAL); /* low over the limit */
	assert_int_equal(kvmm_ns_set_protection(NULL, 0, 0), -EINVAL);
	assert_int_equal(f->ns->min, 2);
	assert_int_equal(f->ns->low, 6);
	mmf_check(f->pool);
}

/*
 * The pool's pressure (kvmm_shrink, as kvswapd and direct reclaim run it) takes from an
 * unprotected namespace first, then from one above its min, never below a min; an admin's
 * explicit kvmm_reclaim() is not pressure and ignores them.
 */
static void test_protection_shrink_order(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t a[4], b[4], i;

	for (i = 0; i < 4; i++) {
		a[i] = cache_block(f->as, i);
		b[i] = cache_block(f->as2, i);
	}
	assert_int_equal(kvmm_ns_set_protection(f->ns, 2, 4), 0);

	/* low: the unprotected namespace pays first, although its pages are not the oldest */
	assert_int_equal(kvmm_shrink(f->pool, 4, KVMM_SHRINK_NOSWAP), 4);
	for (i = 0; i < 4; i++) {
		assert_true(is_cached(f, a[i]));
		assert_false(is_cached(f, b[i]));
	}
	/* then what only low covered, down to min; and min holds */
	assert_int_equal(kvmm_shrink(f->pool, 4, KVMM_SHRINK_NOSWAP), 2);
	assert_int_equal(f->ns->cached, 2);
	assert_int_equal(kvmm_shrink(f->pool, 4, KVMM_SHRINK_NOSWAP), 0);
	assert_int_equal(f->ns->cached, 2);
	/* reclaim for the namespace itself: its own protection does not hold against it */
	f->pool->reclaim_for = f->ns;
	assert_int_equal(kvmm_shrink(f->pool, 1, KVMM_SHRINK_NOSWAP), 1);
	f->pool->reclaim_for = NULL;
	assert_int_equal(f->ns->cached, 1);
	/* an explicit reclaim (drop-caches) is not pressure */
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 4), 1);
	assert_int_equal(f->ns->cached, 0);
	mmf_check(f->pool);
}

/* Another namespace's allocations never reclaim what min covers, its own do. */
static void test_protection_min_against_allocation(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq, *own;
	uint32_t i, got = 0;

	for (i = 0; i < 8; i++)
		cache_block(f->as, i);
	assert_int_equal(kvmm_ns_set_protection(f->ns, 8, 8), 0);
	/* the other namespace fills the pool: direct reclaim finds one's cache protected */
	assert_int_equal(kvmm_mm_seq_create(f->as2, &seq), 0);
	while (kvmm_mm_seq_append(seq, TPP, NULL) == 0)
		got++;
	assert_int_equal(f->ns->cached, 8);
	assert_int_equal(got, f->pool->nframes - 8);
	kvmm_mm_seq_free(seq);
	/* one itself may replace its own cache */
	assert_int_equal(kvmm_mm_seq_create(f->as2, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, (f->pool->nframes - 8) * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &own), 0);
	assert_int_equal(kvmm_mm_seq_append(own, 3 * TPP, NULL), 0);
	assert_int_equal(f->ns->used, 3);
	assert_true(f->ns->cached <= 5);
	kvmm_mm_seq_free(own);
	kvmm_mm_seq_free(seq);
	mmf_check(f->pool);
}

/* OOM: a namespace at or under its min is never the victim of another's pressure. */
static void test_protection_oom(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *old, *young;

	assert_int_equal(kvmm_mm_seq_create(f->as2, &old), 0);
	assert_int_equal(kvmm_mm_seq_append(old, TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &young), 0); /* the usual victim */
	assert_int_equal(kvmm_mm_seq_append(young, 2 * TPP, NULL), 0);
	assert_int_equal(kvmm_ns_set_protection(f->ns, 2, 2), 0);
	assert_ptr_equal(kvmm_out_of_memory(f->pool), old);
	kvmm_mm_seq_free(old);
	/* nothing unprotected left: no victim rather than a protected one */
	assert_null(kvmm_out_of_memory(f->pool));
	/* low alone only orders: with no other candidate, the sequence goes */
	assert_int_equal(kvmm_ns_set_protection(f->ns, 0, 2), 0);
	assert_ptr_equal(kvmm_out_of_memory(f->pool), young);
	kvmm_mm_seq_free(young);
	mmf_check(f->pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unmapped_sealed_page_joins_inactive, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_reuse_references_then_promotes, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_evicts_oldest_first, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_second_chance, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_inactive_refilled_from_active_tail, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_mapped_pages_are_not_reclaimable, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_one_namespace, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_child_evicted_before_parent, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_oom_victim_frees_a_frame, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_ns_limit_reclaims_own_cache_then_enomem, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_min_watermark_reclaims_directly, setup_wmark,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_shrinkers_before_enomem, setup_wmark,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_shrinkers_at_ns_limit, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_protection_checks, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_protection_shrink_order, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_protection_min_against_allocation, setup_wmark,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_protection_oom, setup, mmf_teardown),
	};

	return cmocka_run_group_tests_name("vmscan", tests, NULL, NULL);
}
