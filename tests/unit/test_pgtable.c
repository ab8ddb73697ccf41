// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_pgtable.c - address spaces and sequences (kvmm/pgtable.c): append across
 * page boundaries, truncate, fork with copy-on-write on every side (page contents checked
 * through kvmm_pool_frame_addr), sealing and the PTE flags, -ENOMEM rolling back cleanly, bad
 * arguments, and the namespace charges all of it moves.  Every test ends with
 * kvmm_check_invariants() over the whole pool, then again once every sequence is gone.
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
#include "list.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

#define NFRAMES 64

static int setup(void **state)
{
	return mmf_setup(state,
			 &(struct mm_fixture_opts){.params.nframes = NFRAMES, .ns = "tenant"});
}

static int setup_mag(void **state)
{
	return mmf_setup(state, &(struct mm_fixture_opts){
					.params.nframes = NFRAMES, .ns = "tenant", .mag = true});
}

static int setup2(void **state)
{
	return mmf_setup(state, &(struct mm_fixture_opts){
					.params.nframes = NFRAMES, .ns = "tenant", .ns2 = "other"});
}

static uint32_t *iota(uint32_t n, uint32_t base)
{
	return mmf_tokens(n, base);
}

static struct kvmm_page *block_page(struct kvmm_seq *seq, uint32_t b)
{
	uint32_t frame = kvmm_mm_seq_frame(seq, b);

	assert_int_not_equal(frame, KVMM_FRAME_NONE);
	return kvmm_frame_to_page(seq->as->pool, frame);
}

static unsigned char *block_addr(struct kvmm_seq *seq, uint32_t b)
{
	unsigned char *p = kvmm_pool_frame_addr(seq->as->pool, kvmm_mm_seq_frame(seq, b));

	assert_non_null(p);
	return p;
}

/* Every byte of the page holds @v (COW copies whole pages). */
static void assert_page_filled(struct kvmm_seq *seq, uint32_t b, unsigned char v)
{
	unsigned char *p = block_addr(seq, b);
	size_t i;

	for (i = 0; i < PAGE_SZ; i++)
		if (p[i] != v)
			fail_msg("block %u byte %zu is %#x, want %#x", b, i, p[i], v);
}

/* ---- append ------------------------------------------------------------------------------- */

static void test_append_across_pages(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(100, 1000);
	struct kvmm_seq *seq;
	uint32_t b, frames[4];

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(seq->ntokens, 0);
	assert_int_equal(kvmm_mm_seq_frame(seq, 0), KVMM_FRAME_NONE);

	assert_int_equal(kvmm_mm_seq_append(seq, 1, t), 0);
	assert_int_equal(seq->nblocks, 1);
	assert_int_equal(f->ns->used, 1);
	assert_int_equal(kvmm_mm_seq_append(seq, 15, t + 1), 0); /* fills page 0 exactly */
	assert_int_equal(seq->nblocks, 1);
	assert_int_equal(f->ns->used, 1);
	assert_int_equal(kvmm_mm_seq_append(seq, 1, t + 16), 0); /* crosses into page 1 */
	assert_int_equal(seq->nblocks, 2);
	assert_int_equal(kvmm_mm_seq_append(seq, 40, t + 17), 0); /* 57 tokens: 4 pages */
	assert_int_equal(seq->ntokens, 57);
	assert_int_equal(seq->nblocks, 4);
	assert_int_equal(f->ns->used, 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC], 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 0);

	for (b = 0; b < 4; b++) {
		struct kvmm_page *pg = block_page(seq, b);
		uint64_t pte = seq->pte[b];

		frames[b] = kvmm_mm_seq_frame(seq, b);
		assert_int_equal(pg->refcount, 1);
		assert_int_equal(pg->state, KVMM_PAGE_MAPPED);
		assert_int_equal(pg->ntokens, b < 3 ? TPP : 57 - 3 * TPP);
		assert_true(kvmm_pte_is_present(pte));
		assert_true(pte & KVMM_PTE_WRITABLE);
		assert_false(pte & (KVMM_PTE_SEALED | KVMM_PTE_SHARED));
	}
	for (b = 1; b < 4; b++)
		assert_int_not_equal(frames[b], frames[b - 1]);
	assert_int_equal(kvmm_mm_seq_frame(seq, 4), KVMM_FRAME_NONE);
	assert_memory_equal(seq->tokens, t, 57 * sizeof(*t));
	mmf_check(f->pool);

	assert_int_equal(kvmm_mm_seq_append(seq, 0, t), 0);
	assert_int_equal(seq->ntokens, 57);
	free(t);
}

static void test_append_null_ids_are_zero(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;
	uint32_t i;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 20, NULL), 0);
	for (i = 0; i < 20; i++)
		assert_int_equal(seq->tokens[i], 0);
	assert_int_equal(seq->nblocks, 2);
}

static void test_append_many_grows_table(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(40 * TPP, 7);
	struct kvmm_seq *seq;
	uint32_t i;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	/* one token at a time: the arrays double many times underneath */
	for (i = 0; i < 40 * TPP; i++)
		assert_int_equal(kvmm_mm_seq_append(seq, 1, t + i), 0);
	assert_int_equal(seq->nblocks, 40);
	assert_true(seq->cap >= 40);
	assert_memory_equal(seq->tokens, t, 40 * TPP * sizeof(*t));
	assert_int_equal(f->ns->used, 40);
	mmf_check(f->pool);
	free(t);
}

static void test_append_through_magazine(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	/* a page at a time (a bulk append takes blocks from the buddy instead) */
	for (int i = 0; i < 5; i++)
		assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), 0);
	assert_true(f->pool->stat[KVMM_STAT_MAG_HIT] >= 5);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], 0);
	mmf_check(f->pool);
	/* freed frames go back to the address space's magazine */
	kvmm_mm_seq_free(seq);
	assert_true(f->mag.count > 0);
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
}

/* ---- adopting pages (kvmmd's magazine frames) ------------------------------------------- */

/*
 * A holder sequence gives up its last pages (unmap_tail) and another sequence maps them as
 * its new blocks (append_pages): the bytes written into them before stay, the charge does
 * not move, and a page that is not the caller's to give is refused with nothing changed.
 */
static void test_append_pages_adopts(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *hold, *seq;
	struct kvmm_page *pg[3];
	uint32_t *t = iota(2 * TPP + 3, 100);
	uint32_t used, frames[3], i;

	assert_int_equal(kvmm_mm_seq_create(f->as, &hold), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(hold, 4 * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3, t), 0);
	used = f->ns->used;
	/* the "client" writes its KV into the last three pages of the holder */
	for (i = 0; i < 3; i++) {
		frames[i] = kvmm_mm_seq_frame(hold, 1 + i);
		memset(kvmm_pool_frame_addr(f->pool, frames[i]), 0xa0 + i, PAGE_SZ);
	}
	assert_int_equal(kvmm_mm_seq_unmap_tail(hold, 3, pg), 0);
	assert_int_equal(hold->nblocks, 1);
	assert_int_equal(hold->ntokens, TPP);
	for (i = 0; i < 3; i++) {
		assert_int_equal(kvmm_page_to_frame(f->pool, pg[i]), frames[i]);
		assert_int_equal(pg[i]->refcount, 0);
		assert_int_equal(pg[i]->state, KVMM_PAGE_MAPPED);
	}
	assert_int_equal(f->ns->used, used); /* still charged */

	/* wrong count: 2 * TPP more tokens after 3 need 2 new blocks, not 3 */
	assert_int_equal(kvmm_mm_seq_append_pages(seq, 2 * TPP, t + 3, pg, 3), -EINVAL);
	/* the same page twice */
	{
		struct kvmm_page *dup[2] = {pg[0], pg[0]};

		assert_int_equal(kvmm_mm_seq_append_pages(seq, 2 * TPP, t + 3, dup, 2), -EINVAL);
	}
	/* a page somebody maps */
	{
		struct kvmm_page *mapped[2] = {pg[0], block_page(hold, 0)};

		assert_int_equal(kvmm_mm_seq_append_pages(seq, 2 * TPP, t + 3, mapped, 2), -EINVAL);
	}
	assert_int_equal(seq->ntokens, 3);
	assert_int_equal(seq->nblocks, 1);
	for (i = 0; i < 3; i++)
		assert_int_equal(pg[i]->refcount, 0);

	/* 3 + 2 * TPP tokens: the partial block fills in place, two new blocks adopt pg[0..1] */
	assert_int_equal(kvmm_mm_seq_append_pages(seq, 2 * TPP, t + 3, pg, 2), 0);
	assert_int_equal(seq->nblocks, 3);
	assert_int_equal(seq->ntokens, 2 * TPP + 3);
	assert_int_equal(kvmm_mm_seq_frame(seq, 1), frames[0]);
	assert_int_equal(kvmm_mm_seq_frame(seq, 2), frames[1]);
	assert_page_filled(seq, 1, 0xa0);
	assert_page_filled(seq, 2, 0xa1);
	assert_true(seq->pte[1] & KVMM_PTE_WRITABLE);
	assert_int_equal(block_page(seq, 2)->ntokens, 3);
	assert_memory_equal(seq->tokens, t, (2 * TPP + 3) * sizeof(uint32_t));
	/* the third goes back to the holder; charges never moved */
	assert_int_equal(kvmm_mm_seq_append_pages(hold, TPP, NULL, &pg[2], 1), 0);
	assert_int_equal(kvmm_mm_seq_frame(hold, 1), frames[2]);
	assert_int_equal(f->ns->used, used);
	mmf_check(f->pool);

	/* a shared tail is refused by unmap_tail, nothing changes */
	{
		struct kvmm_seq *child;
		struct kvmm_page *one;

		assert_int_equal(kvmm_mm_seq_fork(hold, &child), 0);
		assert_int_equal(kvmm_mm_seq_unmap_tail(hold, 1, &one), -EINVAL);
		assert_int_equal(hold->nblocks, 2);
		kvmm_mm_seq_free(child);
	}
	assert_int_equal(kvmm_mm_seq_unmap_tail(hold, 0, NULL), 0);
	assert_int_equal(kvmm_mm_seq_unmap_tail(hold, 3, pg), -EINVAL); /* more than it has */
	assert_int_equal(kvmm_mm_seq_append_pages(seq, TPP, NULL, NULL, 1), -EINVAL);
	mmf_check(f->pool);
	kvmm_mm_seq_free(hold);
	kvmm_mm_seq_free(seq);
	assert_int_equal(f->ns->used, 0);
	free(t);
}

/* A page of another namespace is refused. */
static void test_append_pages_other_ns(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b;
	struct kvmm_page *pg;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as2, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(b, TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_unmap_tail(b, 1, &pg), 0);
	assert_int_equal(kvmm_mm_seq_append_pages(a, 1, NULL, &pg, 1), -EINVAL);
	assert_int_equal(a->nblocks, 0);
	assert_int_equal(kvmm_mm_seq_append_pages(b, TPP, NULL, &pg, 1), 0);
	mmf_check(f->pool);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(b);
}

/* frames of blocks [from, from + n) of @seq are consecutive */
static bool consecutive(struct kvmm_seq *seq, uint32_t from, uint32_t n)
{
	for (uint32_t b = from + 1; b < from + n; b++)
		if (kvmm_mm_seq_frame(seq, b) != kvmm_mm_seq_frame(seq, b - 1) + 1)
			return false;
	return true;
}

/* A bulk append takes blocks of consecutive frames: 20 pages are a run of 16 and one of 4. */
static void test_bulk_append_runs(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(20 * TPP, 1);
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 20 * TPP, t), 0);
	assert_int_equal(seq->nblocks, 20);
	assert_true(consecutive(seq, 0, 16));
	assert_int_equal(kvmm_mm_seq_frame(seq, 0) % 16, 0); /* an aligned buddy block */
	assert_true(consecutive(seq, 16, 4));
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC], 20);
	assert_int_equal(f->ns->used, 20);
	for (uint32_t b = 0; b < 20; b++) {
		struct kvmm_page *pg = block_page(seq, b);

		assert_int_equal(pg->refcount, 1);
		assert_int_equal(pg->ns_id, f->ns->id);
		assert_true(pg->flags & KVMM_PG_DIRTY);
	}
	assert_memory_equal(seq->tokens, t, 20 * TPP * sizeof(*t));
	mmf_check(f->pool);
	kvmm_mm_seq_free(seq);
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
	free(t);
}

/*
 * No block that large in a fragmented buddy: the append takes the largest there is, then
 * single frames; the results are the same either way.
 */
static void test_bulk_append_fragmented(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b, *c;
	uint64_t blocks;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	/* a and b take frames in turns, one page at a time: 0, 1, 2, ... 59 */
	for (int i = 0; i < 30; i++) {
		assert_int_equal(kvmm_mm_seq_append(a, TPP, NULL), 0);
		assert_int_equal(kvmm_mm_seq_append(b, TPP, NULL), 0);
	}
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], 0);
	kvmm_mm_seq_free(b); /* every other frame free: no block of two among them */
	mmf_check(f->pool);

	blocks = f->pool->stat[KVMM_STAT_ALLOC_BLOCK];
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	/* no block of 8: the block of 4 there is (frames 60..63), then single frames */
	assert_int_equal(kvmm_mm_seq_append(c, 8 * TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], blocks + 1);
	assert_true(consecutive(c, 0, 4));
	assert_int_equal(kvmm_mm_seq_frame(c, 0), 60);
	for (uint32_t i = 4; i < 8; i++)
		assert_int_equal(kvmm_mm_seq_frame(c, i) % 2, 1); /* b's old frames */
	assert_int_equal(c->nblocks, 8);
	assert_int_equal(f->ns->used, 38);
	mmf_check(f->pool);
	kvmm_mm_seq_free(c);

	/* four pages: the block of four the pool still has (frames 60..63) */
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_seq_append(c, 4 * TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], blocks + 2);
	assert_true(consecutive(c, 0, 4));
	assert_int_equal(kvmm_mm_seq_frame(c, 0), 60);
	mmf_check(f->pool);
	kvmm_mm_seq_free(c);
	kvmm_mm_seq_free(a);
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
}

/* Watermarks 0, 0, 1: the whole pool can fill up with cache before anything is reclaimed. */
static int setup_nowmark(void **state)
{
	return mmf_setup(state,
			 &(struct mm_fixture_opts){.params = {.nframes = NFRAMES, .wmark_high = 1},
						   .ns = "tenant"});
}

/* A pool full of clean cache: two sealed, freed sequences of 32 pages, frames 0..63 in order. */
static void fill_with_cache(struct mm_fixture *f)
{
	uint32_t *t = iota(64 * TPP, 7);

	for (int i = 0; i < 2; i++) {
		struct kvmm_seq *s;

		assert_int_equal(kvmm_mm_seq_create(f->as, &s), 0);
		assert_int_equal(kvmm_mm_seq_append(s, 32 * TPP, t + i * 32 * TPP), 0);
		assert_int_equal(kvmm_mm_seq_seal(s), 32);
		kvmm_mm_seq_free(s);
	}
	assert_int_equal(f->ns->cached, 64);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	free(t);
}

/*
 * In a pool full of clean cache that its allocations may drop in line, a bulk append first
 * drops what its blocks need (kvmm_alloc_block_prepare): 16 pages of the oldest cache come
 * back as one block of 16 rather than as single frames reclaimed a batch at a time.
 */
static void test_bulk_append_full_pool_prepares(void **state)
{
	struct mm_fixture *f = *state;
	uint64_t blocks;
	struct kvmm_seq *c;

	f->pool->reclaim_inline = true;
	fill_with_cache(f);
	blocks = f->pool->stat[KVMM_STAT_ALLOC_BLOCK];
	assert_int_equal(f->pool->stat[KVMM_STAT_RECLAIM_INLINE], 0);
	assert_int_equal(kvmm_alloc_block_room(f->pool, f->ns), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_seq_append(c, 16 * TPP, NULL), 0);
	/* one aligned block of the older sequence's frames (0..31), the ones evicted */
	assert_true(consecutive(c, 0, 16));
	assert_int_equal(kvmm_mm_seq_frame(c, 0) % 16, 0);
	assert_true(kvmm_mm_seq_frame(c, 0) < 32);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], blocks + 1);
	assert_int_equal(f->pool->stat[KVMM_STAT_RECLAIM_INLINE], 16);
	assert_int_equal(f->ns->used, 16);
	mmf_check(f->pool);
	kvmm_mm_seq_free(c);
	mmf_check(f->pool);
}

/* Not where reclaim is more than dropping cache, nor past a namespace's limit: frame by frame. */
static void test_bulk_append_full_pool_no_prepare(void **state)
{
	struct mm_fixture *f = *state;
	uint64_t blocks;
	struct kvmm_seq *c;

	f->pool->reclaim_inline = false; /* reclaim may demote (kvmm_reclaim_drop_only) */
	fill_with_cache(f);
	blocks = f->pool->stat[KVMM_STAT_ALLOC_BLOCK];
	assert_int_equal(kvmm_alloc_block_prepare(f->pool, f->ns, 16), 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_seq_append(c, 16 * TPP, NULL), 0);
	assert_int_equal(c->nblocks, 16);
	assert_int_equal(f->pool->stat[KVMM_STAT_RECLAIM_INLINE], 0);
	mmf_check(f->pool);
	kvmm_mm_seq_free(c);
	assert_int_equal(f->ns->used, 0);

	/* the namespace at its limit: its own cache makes room, page by page */
	f->pool->reclaim_inline = true;
	assert_int_equal(kvmm_ns_set_limit(f->ns, f->ns->cached), 0);
	assert_int_equal(kvmm_alloc_block_room(f->pool, f->ns), 0);
	assert_int_equal(kvmm_alloc_block_prepare(f->pool, f->ns, 16), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_RECLAIM_INLINE], 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &c), 0);
	assert_int_equal(kvmm_mm_seq_append(c, 16 * TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_ALLOC_BLOCK], blocks);
	assert_true(f->ns->used + f->ns->cached <= f->ns->limit);
	mmf_check(f->pool);
	kvmm_mm_seq_free(c);
	mmf_check(f->pool);
}

/* A block's frames that held another namespace's KV are scrubbed like single pages. */
static void test_bulk_append_scrubs(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b;
	uint64_t scrubs;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 64 * TPP - 1, NULL), 0); /* the whole pool */
	assert_int_equal(a->nblocks, 64);
	for (uint32_t i = 0; i < 64; i++)
		memset(block_addr(a, i), 0x5a, PAGE_SZ);
	kvmm_mm_seq_free(a);

	scrubs = f->pool->stat[KVMM_STAT_SCRUB];
	assert_int_equal(kvmm_mm_seq_create(f->as2, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(b, 8 * TPP, NULL), 0);
	assert_true(consecutive(b, 0, 8));
	assert_int_equal(f->pool->stat[KVMM_STAT_SCRUB], scrubs + 8);
	for (uint32_t i = 0; i < 8; i++) {
		const unsigned char *p = block_addr(b, i);

		for (uint32_t k = 0; k < PAGE_SZ; k++)
			if (p[k])
				fail_msg("block %u byte %u not scrubbed: %#x", i, k, p[k]);
	}
	assert_int_equal(f->ns2->used, 8);
	mmf_check(f->pool);
	kvmm_mm_seq_free(b);
}

/* kvmm_alloc_block(): bad orders, and no block past a namespace limit or under low */
static void test_alloc_block_refuses(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_page *pg;

	errno = 0;
	assert_null(kvmm_alloc_block(f->pool, f->ns, 0));
	assert_int_equal(errno, EINVAL);
	assert_null(kvmm_alloc_block(f->pool, f->ns, KVMM_MAX_ORDER));
	assert_int_equal(errno, EINVAL);
	assert_null(kvmm_alloc_block(f->pool, f->ns, 7)); /* 128 frames: more than the pool */
	assert_int_equal(errno, ENOMEM);

	assert_int_equal(kvmm_ns_set_limit(f->ns, 3), 0);
	assert_null(kvmm_alloc_block(f->pool, f->ns, 2));
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(f->ns->used, 0);
	assert_int_equal(kvmm_ns_set_limit(f->ns, 0), 0);

	pg = kvmm_alloc_block(f->pool, f->ns, 2);
	assert_non_null(pg);
	assert_int_equal(f->ns->used, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pg[i].state, KVMM_PAGE_MAPPED);
		kvmm_free_page(f->pool, &pg[i], NULL);
	}
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
}

/* ---- truncate ----------------------------------------------------------------------------- */

static void test_truncate(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(50, 1);
	uint32_t free0 = kvmm_pool_nr_free(f->pool);
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 50, t), 0);
	assert_int_equal(f->ns->used, 4);

	assert_int_equal(kvmm_mm_seq_truncate(seq, 51), -EINVAL);
	assert_int_equal(seq->ntokens, 50);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 50), 0);
	assert_int_equal(f->ns->used, 4);

	assert_int_equal(kvmm_mm_seq_truncate(seq, 33), 0); /* drops block 3, shortens block 2 */
	assert_int_equal(seq->ntokens, 33);
	assert_int_equal(seq->nblocks, 3);
	assert_int_equal(f->ns->used, 3);
	assert_int_equal(block_page(seq, 2)->ntokens, 1);
	assert_int_equal(kvmm_mm_seq_frame(seq, 3), KVMM_FRAME_NONE);
	mmf_check(f->pool);

	assert_int_equal(kvmm_mm_seq_truncate(seq, 32), 0); /* exactly two full blocks */
	assert_int_equal(seq->nblocks, 2);
	assert_int_equal(f->ns->used, 2);

	/* growing again writes into fresh pages with the new tokens */
	assert_int_equal(kvmm_mm_seq_append(seq, 3, t + 40), 0);
	assert_int_equal(seq->nblocks, 3);
	assert_memory_equal(seq->tokens + 32, t + 40, 3 * sizeof(*t));
	assert_int_equal(block_page(seq, 2)->ntokens, 3);

	assert_int_equal(kvmm_mm_seq_truncate(seq, 0), 0);
	assert_int_equal(seq->nblocks, 0);
	assert_int_equal(f->ns->used, 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0);
	mmf_check(f->pool);
	free(t);
}

static void test_truncate_in_partial_then_append_in_place(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;
	uint32_t frame;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 10, NULL), 0);
	frame = kvmm_mm_seq_frame(seq, 0);
	assert_int_equal(kvmm_mm_seq_truncate(seq, 4), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 2, NULL), 0);
	/* exclusive and unsealed: written in place, no copy */
	assert_int_equal(kvmm_mm_seq_frame(seq, 0), frame);
	assert_int_equal(block_page(seq, 0)->ntokens, 6);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 0);
}

/* ---- fork and copy-on-write ----------------------------------------------------------------- */

static void test_fork_shares_every_page(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(40, 5);
	struct kvmm_seq *a, *b;
	uint32_t i;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 40, t), 0); /* 2 full + 8 tokens */
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(f->as->nr_seqs, 2);
	assert_int_equal(b->ntokens, 40);
	assert_int_equal(b->nblocks, 3);
	assert_memory_equal(b->tokens, t, 40 * sizeof(*t));
	for (i = 0; i < 3; i++) {
		assert_int_equal(kvmm_mm_seq_frame(a, i), kvmm_mm_seq_frame(b, i));
		assert_int_equal(block_page(a, i)->refcount, 2);
		assert_true(a->pte[i] & KVMM_PTE_SHARED);
		assert_false(a->pte[i] & KVMM_PTE_WRITABLE);
		assert_true(b->pte[i] & KVMM_PTE_SHARED);
	}
	assert_int_equal(f->ns->used, 3); /* shared pages are charged once */
	mmf_check(f->pool);

	kvmm_mm_seq_free(a);
	for (i = 0; i < 3; i++)
		assert_int_equal(block_page(b, i)->refcount, 1);
	assert_int_equal(f->ns->used, 3);
	mmf_check(f->pool);
	free(t);
}

static void test_fork_cow_every_side(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b, *c;
	uint32_t full, part, fa, fb;
	uint32_t tok = 99;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, TPP + 4, NULL), 0);
	memset(block_addr(a, 0), 0xa0, PAGE_SZ);
	memset(block_addr(a, 1), 0xa1, PAGE_SZ);
	full = kvmm_mm_seq_frame(a, 0);
	part = kvmm_mm_seq_frame(a, 1);

	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &c), 0);
	assert_int_equal(block_page(a, 1)->refcount, 3);

	/* the child writes first: it gets a copy, the others keep the original */
	assert_int_equal(kvmm_mm_seq_append(b, 1, &tok), 0);
	fb = kvmm_mm_seq_frame(b, 1);
	assert_int_not_equal(fb, part);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 1);
	assert_page_filled(b, 1, 0xa1);
	assert_int_equal(block_page(b, 1)->ntokens, 5);
	assert_true(b->pte[1] & KVMM_PTE_WRITABLE);
	assert_int_equal(kvmm_frame_to_page(f->pool, part)->refcount, 2);
	memset(block_addr(b, 1), 0xb1, PAGE_SZ);
	assert_page_filled(a, 1, 0xa1);
	assert_page_filled(c, 1, 0xa1);

	/* the parent writes next: still shared with c, so it copies too */
	assert_int_equal(kvmm_mm_seq_append(a, 1, &tok), 0);
	fa = kvmm_mm_seq_frame(a, 1);
	assert_int_not_equal(fa, part);
	assert_int_not_equal(fa, fb);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 2);
	assert_page_filled(a, 1, 0xa1);
	memset(block_addr(a, 1), 0xa2, PAGE_SZ);
	assert_page_filled(b, 1, 0xb1);
	assert_page_filled(c, 1, 0xa1);

	/* the last holder writes in place */
	assert_int_equal(kvmm_frame_to_page(f->pool, part)->refcount, 1);
	assert_int_equal(kvmm_mm_seq_append(c, 1, &tok), 0);
	assert_int_equal(kvmm_mm_seq_frame(c, 1), part);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 2);

	/* the full page was never written: still one frame for all three */
	assert_int_equal(kvmm_mm_seq_frame(b, 0), full);
	assert_int_equal(kvmm_mm_seq_frame(c, 0), full);
	assert_int_equal(kvmm_frame_to_page(f->pool, full)->refcount, 3);
	assert_page_filled(c, 0, 0xa0);
	assert_int_equal(f->ns->used, 4);
	mmf_check(f->pool);

	/* growing past the page boundary after a fork allocates, never copies */
	assert_int_equal(kvmm_mm_seq_append(b, TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 2);
	assert_int_equal(b->nblocks, 3);
	mmf_check(f->pool);
}

static void test_fork_at_page_boundary_no_cow(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP, NULL), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 1, NULL), 0);
	assert_int_equal(kvmm_mm_seq_append(b, 1, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 0);
	assert_int_not_equal(kvmm_mm_seq_frame(a, 2), kvmm_mm_seq_frame(b, 2));
	assert_int_equal(f->ns->used, 4);
}

static void test_fork_empty(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(b->ntokens, 0);
	assert_int_equal(kvmm_mm_seq_append(b, 3, NULL), 0);
	assert_int_equal(a->ntokens, 0);
}

/* ---- sealing (page-table side) ---------------------------------------------------------------- */

static void test_seal_marks_blocks(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(3 * TPP, 50);
	struct kvmm_seq *seq;
	uint32_t b;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 2 * TPP + 5, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 2);
	assert_int_equal(seq->nsealed, 2);
	assert_int_equal(kvmm_mm_seq_seal(seq), 0);
	for (b = 0; b < 2; b++) {
		struct kvmm_page *pg = block_page(seq, b);

		assert_true(pg->flags & KVMM_PG_SEALED);
		assert_false(pg->flags & KVMM_PG_DIRTY);
		assert_non_null(pg->cache);
		assert_true(seq->pte[b] & KVMM_PTE_SEALED);
		assert_false(seq->pte[b] & KVMM_PTE_WRITABLE);
	}
	assert_false(block_page(seq, 2)->flags & KVMM_PG_SEALED);
	assert_true(seq->pte[2] & KVMM_PTE_WRITABLE);
	assert_int_equal(f->pool->stat[KVMM_STAT_SEAL], 2);
	mmf_check(f->pool);

	assert_int_equal(kvmm_mm_seq_append(seq, TPP - 5, t + 2 * TPP + 5), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 1);
	assert_int_equal(seq->nsealed, 3);
	assert_int_equal(kvmm_pagecache_count(f->pool), 3);
	mmf_check(f->pool);
	free(t);
}

static void test_truncate_into_sealed_block_copies(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = iota(2 * TPP, 1);
	struct kvmm_seq *seq;
	uint32_t sealed_frame;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 2);
	memset(block_addr(seq, 1), 0x5e, PAGE_SZ);
	sealed_frame = kvmm_mm_seq_frame(seq, 1);

	assert_int_equal(kvmm_mm_seq_truncate(seq, TPP + 3), 0);
	assert_int_equal(seq->nsealed, 1);
	assert_false(seq->pte[1] & (KVMM_PTE_SEALED | KVMM_PTE_WRITABLE));
	mmf_check(f->pool);

	/* the sealed page is immutable: appending into it copies first */
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), 0);
	assert_int_not_equal(kvmm_mm_seq_frame(seq, 1), sealed_frame);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 1);
	assert_page_filled(seq, 1, 0x5e);
	assert_int_equal(block_page(seq, 1)->ntokens, 4);
	/* the old page lost its last mapper: cached, not freed */
	assert_int_equal(kvmm_frame_to_page(f->pool, sealed_frame)->state, KVMM_PAGE_CACHED);
	assert_int_equal(f->ns->cached, 1);
	assert_int_equal(f->ns->used, 2);
	mmf_check(f->pool);
	free(t);
}

static void test_free_caches_sealed_frees_rest(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t free0 = kvmm_pool_nr_free(f->pool);
	struct kvmm_seq *seq;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 3 * TPP + 1, NULL), 0);
	assert_int_equal(kvmm_mm_seq_seal(seq), 3);
	kvmm_mm_seq_free(seq);
	assert_int_equal(f->as->nr_seqs, 0);
	assert_int_equal(f->ns->used, 0);
	assert_int_equal(f->ns->cached, 3);
	assert_int_equal(f->pool->nr_state[KVMM_PAGE_CACHED], 3);
	assert_int_equal(kvmm_pool_nr_free(f->pool), free0 - 3);
	mmf_check(f->pool);
}

/* ---- errors ----------------------------------------------------------------------------------- */

static void assert_seq_same(struct kvmm_seq *seq, uint64_t ntokens, const uint64_t *pte,
			    uint32_t nblocks)
{
	assert_int_equal(seq->ntokens, ntokens);
	assert_int_equal(seq->nblocks, nblocks);
	assert_memory_equal(seq->pte, pte, nblocks * sizeof(*pte));
}

static void test_enomem_rolls_back(void **state)
{
	struct mm_fixture *f = *state;
	uint64_t pte[8];
	struct kvmm_seq *a, *b;
	uint32_t tok = 1;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 3 * TPP + 2, NULL), 0); /* 4 pages */
	assert_int_equal(kvmm_ns_set_limit(f->ns, 6), 0);

	/* needs 3 more pages, only 2 fit: the first two come back */
	memcpy(pte, a->pte, 4 * sizeof(*pte));
	assert_int_equal(kvmm_mm_seq_append(a, 3 * TPP, NULL), -ENOMEM);
	assert_seq_same(a, 3 * TPP + 2, pte, 4);
	assert_int_equal(f->ns->used, 4);
	assert_true(f->pool->stat[KVMM_STAT_NS_LIMIT_HIT] >= 1);
	mmf_check(f->pool);

	/* COW of the shared partial page plus one new page, at the limit: both undone */
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	memcpy(pte, a->pte, 4 * sizeof(*pte)); /* fork made them SHARED */
	assert_int_equal(kvmm_ns_set_limit(f->ns, 4), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 1, &tok), -ENOMEM);
	assert_seq_same(a, 3 * TPP + 2, pte, 4);
	assert_int_equal(kvmm_ns_set_limit(f->ns, 5), 0);
	assert_int_equal(kvmm_mm_seq_append(a, TPP, NULL), -ENOMEM); /* COW ok, new page not */
	assert_seq_same(a, 3 * TPP + 2, pte, 4);
	assert_int_equal(block_page(a, 3)->refcount, 2);
	assert_int_equal(f->ns->used, 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 0);
	mmf_check(f->pool);

	/* room again: the same append now works */
	assert_int_equal(kvmm_ns_set_limit(f->ns, 6), 0);
	assert_int_equal(kvmm_mm_seq_append(a, TPP, NULL), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 1);
	assert_int_equal(f->ns->used, 6);
	mmf_check(f->pool);
}

static void test_enomem_pool_exhausted(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *seq;
	uint64_t ntok;

	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, NFRAMES * TPP, NULL), 0);
	assert_int_equal(kvmm_pool_nr_free(f->pool), 0);
	ntok = seq->ntokens;
	assert_int_equal(kvmm_mm_seq_append(seq, 1, NULL), -ENOMEM);
	assert_int_equal(seq->ntokens, ntok);
	mmf_check(f->pool);
}

static void test_bad_args(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	struct kvmm_fmt bad = f->fmt;
	uint64_t saved;

	assert_int_equal(kvmm_mm_seq_create(NULL, &seq), -EINVAL);
	assert_int_equal(kvmm_mm_seq_create(f->as, NULL), -EINVAL);
	assert_int_equal(kvmm_mm_seq_append(NULL, 1, NULL), -EINVAL);
	assert_int_equal(kvmm_mm_seq_truncate(NULL, 0), -EINVAL);
	assert_int_equal(kvmm_mm_seq_fork(NULL, &seq), -EINVAL);
	assert_int_equal(kvmm_mm_seq_seal(NULL), -EINVAL);
	assert_int_equal(kvmm_mm_seq_frame(NULL, 0), KVMM_FRAME_NONE);
	assert_int_equal(kvmm_aspace_create(f->pool, NULL, &f->fmt, NULL, &as), -EINVAL);
	bad.page_size = PAGE_SZ * 2;
	assert_int_equal(kvmm_aspace_create(f->pool, f->ns, &bad, NULL, &as), -EINVAL);
	kvmm_mm_seq_free(NULL);
	kvmm_aspace_destroy(NULL);

	/* a length whose block count does not fit in 32 bits is refused before anything moves */
	assert_int_equal(kvmm_mm_seq_create(f->as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, 5, NULL), 0);
	saved = seq->ntokens;
	seq->ntokens = (uint64_t)UINT32_MAX * TPP;
	assert_int_equal(kvmm_mm_seq_append(seq, TPP, NULL), -EINVAL);
	seq->ntokens = saved;
	assert_int_equal(seq->nblocks, 1);
	assert_int_equal(f->ns->used, 1);
}

static void test_aspace_destroy_frees_sequences(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_aspace *as;
	struct kvmm_seq *a, *b;

	assert_int_equal(kvmm_aspace_create(f->pool, f->ns, &f->fmt, NULL, &as), 0);
	assert_int_not_equal(as->id, f->as->id);
	assert_int_equal(kvmm_mm_seq_create(as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP + 1, NULL), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_not_equal(a->id, b->id);
	assert_int_equal(kvmm_ns_destroy(f->ns), -EBUSY);
	kvmm_aspace_destroy(as);
	assert_int_equal(f->ns->used, 0);
	mmf_check(f->pool);
}

/* ---- the invariant checker sees corruption --------------------------------------------------- */

static void expect_unclean(struct kvmm_pool *pool, const char *what)
{
	char why[256];

	if (kvmm_check_invariants(pool, why, sizeof(why)) != -EUCLEAN)
		fail_msg("invariants missed: %s", what);
	assert_true(why[0] != '\0');
}

static void test_invariants_catch_corruption(void **state)
{
	struct mm_fixture *f = *state;
	struct kvmm_seq *a, *b;
	struct kvmm_page *pg, *cached;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP + 1, NULL), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 2);
	kvmm_mm_seq_free(b);
	assert_int_equal(kvmm_mm_seq_truncate(a, TPP), 0); /* block 1 now cached */
	mmf_check(f->pool);
	pg = block_page(a, 0);
	assert_false(list_empty(&f->pool->lru.inactive));
	cached = list_first_entry(&f->pool->lru.inactive, struct kvmm_page, lru);
	assert_int_equal(cached->state, KVMM_PAGE_CACHED);

	pg->refcount++;
	expect_unclean(f->pool, "refcount above the mappers");
	pg->refcount--;
	f->ns->used++;
	expect_unclean(f->pool, "namespace used charge");
	f->ns->used--;
	f->ns->cached--;
	expect_unclean(f->pool, "namespace cached charge");
	f->ns->cached++;
	f->pool->nr_state[KVMM_PAGE_FREE]--;
	f->pool->nr_state[KVMM_PAGE_MAPPED]++;
	expect_unclean(f->pool, "state counters");
	f->pool->nr_state[KVMM_PAGE_FREE]++;
	f->pool->nr_state[KVMM_PAGE_MAPPED]--;
	f->pool->lru.nr_inactive++;
	expect_unclean(f->pool, "LRU count");
	f->pool->lru.nr_inactive--;
	cached->flags |= KVMM_PG_ACTIVE;
	expect_unclean(f->pool, "active flag on the inactive list");
	cached->flags &= ~KVMM_PG_ACTIVE;
	a->pte[0] |= KVMM_PTE_WRITABLE;
	expect_unclean(f->pool, "writable sealed block");
	a->pte[0] &= ~KVMM_PTE_WRITABLE;
	a->nsealed = 0;
	a->nblocks = 2;
	expect_unclean(f->pool, "block count");
	a->nblocks = 1;
	a->nsealed = 1;
	f->pool->nr_free--;
	expect_unclean(f->pool, "buddy count");
	f->pool->nr_free++;
	mmf_check(f->pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_append_across_pages, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_null_ids_are_zero, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_many_grows_table, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_through_magazine, setup_mag,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_pages_adopts, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_pages_adopts, setup_mag, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_append_pages_other_ns, setup2, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_runs, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_runs, setup_mag, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_fragmented, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_scrubs, setup2, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_full_pool_prepares, setup_nowmark,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bulk_append_full_pool_no_prepare,
						setup_nowmark, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_alloc_block_refuses, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_truncate, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_truncate_in_partial_then_append_in_place,
						setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_shares_every_page, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_cow_every_side, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_cow_every_side, setup_mag, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_at_page_boundary_no_cow, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_empty, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_seal_marks_blocks, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_truncate_into_sealed_block_copies, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_free_caches_sealed_frees_rest, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_enomem_rolls_back, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_enomem_rolls_back, setup_mag, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_enomem_pool_exhausted, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_bad_args, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_aspace_destroy_frees_sequences, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_invariants_catch_corruption, setup,
						mmf_teardown),
	};

	return cmocka_run_group_tests_name("pgtable", tests, NULL, NULL);
}
