// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_pagecache.c - the prefix page cache (kvmm/pagecache.c): sealing indexes
 * pages, a lookup maps the longest cached prefix (the very frames that were sealed, byte
 * contents checked), partial matches stop at the first miss, a forced hash function puts
 * different blocks - and different parents - on one key and shows that verification never
 * returns a wrong page, namespaces and formats never hit each other, sealing an already
 * cached block deduplicates, and the key is XXH3 over exactly the documented input.
 * A block a fork sibling sealed under an entry since evicted is re-parented (or shared with
 * a re-cached copy) when the sequence seals, so a lookup still finds the longest prefix, and
 * unreachable orphans lose their LRU protection and are freed once unmapped.
 * Every test ends with kvmm_check_invariants(), which also recomputes every entry's key.
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
#include <xxhash.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "mm_fixture.h"

#define NFRAMES 128

static int setup(void **state)
{
	return mmf_setup(state,
			 &(struct mm_fixture_opts){.params.nframes = NFRAMES, .ns = "tenant"});
}

/* A prompt whose block i holds tokens seed * 1000 + i * TPP + j. */
static uint32_t *prompt(uint32_t nblocks, uint32_t seed)
{
	return mmf_tokens(nblocks * TPP, seed * 1000);
}

/* A sequence holding @n tokens of @t, sealed, with block i's page filled with byte @tag + i. */
static struct kvmm_seq *sealed_seq(struct kvmm_aspace *as, const uint32_t *t, uint32_t n,
				   unsigned char tag)
{
	struct kvmm_seq *seq;
	uint32_t b;

	assert_int_equal(kvmm_mm_seq_create(as, &seq), 0);
	assert_int_equal(kvmm_mm_seq_append(seq, n, t), 0);
	for (b = 0; b < seq->nblocks; b++)
		memset(kvmm_pool_frame_addr(as->pool, kvmm_mm_seq_frame(seq, b)), tag + b, PAGE_SZ);
	assert_int_equal(kvmm_mm_seq_seal(seq), (int)(n / TPP));
	return seq;
}

static void assert_frame_tag(struct kvmm_pool *pool, uint32_t frame, unsigned char v)
{
	const unsigned char *p = kvmm_pool_frame_addr(pool, frame);

	assert_non_null(p);
	assert_int_equal(p[0], v);
	assert_int_equal(p[PAGE_SZ - 1], v);
}

static int lookup(struct kvmm_aspace *as, const uint32_t *t, uint64_t n, struct kvmm_seq **out)
{
	assert_int_equal(kvmm_mm_seq_create(as, out), 0);
	return kvmm_mm_prefix_lookup(*out, t, n);
}

/* ---- hits --------------------------------------------------------------------------------- */

static void test_seal_then_lookup_maps_same_frames(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(4, 1);
	struct kvmm_seq *a, *b;
	uint32_t i;

	a = sealed_seq(f->as, t, 3 * TPP + 5, 0x10);
	assert_int_equal(kvmm_pagecache_count(f->pool), 3);
	mmf_check(f->pool);

	/* a longer prompt with the same beginning: the 3 full cached blocks come back */
	assert_int_equal(lookup(f->as, t, 4 * TPP, &b), 3 * TPP);
	assert_int_equal(b->ntokens, 3 * TPP);
	assert_int_equal(b->nblocks, 3);
	assert_int_equal(b->nsealed, 3);
	assert_memory_equal(b->tokens, t, 3 * TPP * sizeof(*t));
	for (i = 0; i < 3; i++) {
		uint32_t frame = kvmm_mm_seq_frame(b, i);

		assert_int_equal(frame, kvmm_mm_seq_frame(a, i));
		assert_int_equal(kvmm_frame_to_page(f->pool, frame)->refcount, 2);
		assert_true(b->pte[i] & KVMM_PTE_SEALED);
		assert_true(b->pte[i] & KVMM_PTE_SHARED);
		assert_false(b->pte[i] & KVMM_PTE_WRITABLE);
		assert_frame_tag(f->pool, frame, (unsigned char)(0x10 + i));
	}
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_HIT], 3);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_MISS], 1);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	assert_int_equal(f->ns->used, 4);
	mmf_check(f->pool);

	/* the prompt's remainder is appended as usual, into a new page */
	assert_int_equal(kvmm_mm_seq_append(b, TPP, t + 3 * TPP), 0);
	assert_int_equal(b->nblocks, 4);
	assert_int_equal(f->pool->stat[KVMM_STAT_COW], 0);
	mmf_check(f->pool);
	free(t);
}

/*
 * Where a block has one cached successor or none, the walk compares that child directly
 * instead of hashing; at a branch point it hashes.  Each prompt still maps exactly its own
 * pages as the children of one block come and go.
 */
static void test_lookup_through_branch_points(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(3, 20), *u = prompt(3, 20);
	struct kvmm_seq *a, *b, *q;

	u[2 * TPP] ^= 1; /* the same first two blocks, another third */
	a = sealed_seq(f->as, t, 3 * TPP, 0x40);
	/* one child under block 1: the other third block misses there, the same one hits */
	assert_int_equal(lookup(f->as, u, 3 * TPP, &q), 2 * TPP);
	kvmm_mm_seq_free(q);
	assert_int_equal(lookup(f->as, t, 3 * TPP, &q), 3 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 2), kvmm_mm_seq_frame(a, 2));
	kvmm_mm_seq_free(q);

	/* the other third block sealed too: block 1 branches, each prompt gets its own page */
	b = sealed_seq(f->as, u, 3 * TPP, 0x50);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), kvmm_mm_seq_frame(a, 1));
	assert_int_not_equal(kvmm_mm_seq_frame(b, 2), kvmm_mm_seq_frame(a, 2));
	assert_int_equal(lookup(f->as, t, 3 * TPP, &q), 3 * TPP);
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 2), 0x42);
	kvmm_mm_seq_free(q);
	assert_int_equal(lookup(f->as, u, 3 * TPP, &q), 3 * TPP);
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 2), 0x52);
	kvmm_mm_seq_free(q);
	mmf_check(f->pool);

	/* t's third block evicted: block 1 has one child again, u's */
	kvmm_mm_seq_free(a);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_int_equal(lookup(f->as, t, 3 * TPP, &q), 2 * TPP);
	kvmm_mm_seq_free(q);
	assert_int_equal(lookup(f->as, u, 3 * TPP, &q), 3 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 2), kvmm_mm_seq_frame(b, 2));
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 2), 0x52);
	kvmm_mm_seq_free(q);
	kvmm_mm_seq_free(b);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	mmf_check(f->pool);
	free(t);
	free(u);
}

static void test_lookup_of_cached_pages(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 2);
	struct kvmm_seq *a, *b;
	uint32_t f0, f1;

	a = sealed_seq(f->as, t, 2 * TPP, 0x20);
	f0 = kvmm_mm_seq_frame(a, 0);
	f1 = kvmm_mm_seq_frame(a, 1);
	kvmm_mm_seq_free(a);
	assert_int_equal(f->ns->cached, 2);
	assert_int_equal(f->ns->used, 0);
	assert_int_equal(f->pool->lru.nr_inactive, 2);
	mmf_check(f->pool);

	/* a hit on an unmapped page takes it off the LRU and charges it as used again */
	assert_int_equal(lookup(f->as, t, 2 * TPP, &b), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(b, 0), f0);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), f1);
	assert_int_equal(f->ns->cached, 0);
	assert_int_equal(f->ns->used, 2);
	assert_int_equal(f->pool->lru.nr_inactive, 0);
	assert_int_equal(kvmm_frame_to_page(f->pool, f0)->state, KVMM_PAGE_MAPPED);
	assert_true(kvmm_frame_to_page(f->pool, f0)->flags & KVMM_PG_REFERENCED);
	assert_false(kvmm_frame_to_page(f->pool, f0)->flags & KVMM_PG_LRU);
	assert_true(b->pte[0] & KVMM_PTE_SEALED);
	assert_false(b->pte[0] & (KVMM_PTE_WRITABLE | KVMM_PTE_SHARED));
	assert_frame_tag(f->pool, f1, 0x21);
	mmf_check(f->pool);
	free(t);
}

static void test_partial_match(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(4, 3), *q = prompt(4, 3);
	struct kvmm_seq *a, *b;

	a = sealed_seq(f->as, t, 4 * TPP, 0x30);

	/* differs in the 3rd block: the first two hit */
	q[2 * TPP + 7]++;
	assert_int_equal(lookup(f->as, q, 4 * TPP, &b), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), kvmm_mm_seq_frame(a, 1));
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_MISS], 1);
	kvmm_mm_seq_free(b);

	/* a later block equal to the cached one does not hit after a miss: keys chain */
	q[2 * TPP + 7]--;
	q[TPP]++;
	assert_int_equal(lookup(f->as, q, 4 * TPP, &b), TPP);
	kvmm_mm_seq_free(b);

	/* the very first token differs: nothing */
	q[TPP]--;
	q[0]++;
	assert_int_equal(lookup(f->as, q, 4 * TPP, &b), 0);
	assert_int_equal(b->nblocks, 0);
	kvmm_mm_seq_free(b);

	/* a prompt shorter than a block, or a truncated prompt, maps whole blocks only */
	assert_int_equal(lookup(f->as, t, TPP - 1, &b), 0);
	kvmm_mm_seq_free(b);
	assert_int_equal(lookup(f->as, t, 3 * TPP - 1, &b), 2 * TPP);
	kvmm_mm_seq_free(b);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	mmf_check(f->pool);
	free(t);
	free(q);
}

static void test_lookup_bad_args(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(1, 4);
	struct kvmm_seq *a, *b;

	a = sealed_seq(f->as, t, TPP, 0x40);
	assert_int_equal(kvmm_mm_prefix_lookup(NULL, t, TPP), -EINVAL);
	assert_int_equal(kvmm_mm_seq_append(a, 1, t), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(a, t, TPP), -EINVAL); /* partial last page */
	assert_int_equal(kvmm_mm_prefix_lookup(a, NULL, 0), -EINVAL);
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, NULL, TPP), -EINVAL);
	assert_int_equal(kvmm_mm_prefix_lookup(b, NULL, 0), 0);
	free(t);
}

static void test_empty_cache_misses(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 5);
	struct kvmm_seq *b;

	assert_int_equal(lookup(f->as, t, 2 * TPP, &b), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_MISS], 1);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_HIT], 0);
	free(t);
}

/* ---- continuing a lookup -------------------------------------------------------------------- */

/* @q maps exactly the blocks of @ref (same frames, tokens, sealed, mapped by both). */
static void assert_same_blocks(struct kvmm_seq *q, struct kvmm_seq *ref, uint32_t nblocks)
{
	uint32_t i;

	assert_int_equal(q->ntokens, (uint64_t)nblocks * TPP);
	assert_int_equal(q->nblocks, nblocks);
	assert_int_equal(q->nsealed, nblocks);
	assert_memory_equal(q->tokens, ref->tokens, (size_t)nblocks * TPP * sizeof(*q->tokens));
	for (i = 0; i < nblocks; i++) {
		assert_int_equal(kvmm_mm_seq_frame(q, i), kvmm_mm_seq_frame(ref, i));
		assert_true(q->pte[i] & KVMM_PTE_SEALED);
		assert_true(q->pte[i] & KVMM_PTE_SHARED);
		assert_false(q->pte[i] & KVMM_PTE_WRITABLE);
	}
}

static void test_lookup_continue_equals_full_lookup(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(6, 22);
	struct kvmm_seq *a, *full, *q;
	uint64_t hits;
	uint32_t i;

	a = sealed_seq(f->as, t, 5 * TPP, 0x12);
	/* the reference: one lookup of the whole prompt (5 cached blocks, then a miss) */
	assert_int_equal(lookup(f->as, t, 6 * TPP + 3, &full), 5 * TPP);
	assert_same_blocks(full, a, 5);
	hits = f->pool->stat[KVMM_STAT_CACHE_HIT];
	assert_int_equal(hits, 5);

	/* the same prompt in pieces: each call gets only the ids after the sequence's end */
	assert_int_equal(lookup(f->as, t, 2 * TPP + 7, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, t + 2 * TPP, TPP - 1), 2 * TPP); /* < a page */
	assert_int_equal(kvmm_mm_prefix_lookup(q, t + 2 * TPP, 0), 2 * TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, t + 2 * TPP, TPP), 3 * TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, t + 3 * TPP, 3 * TPP + 3), 5 * TPP);
	assert_same_blocks(q, full, 5);
	for (i = 0; i < 5; i++)
		assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, i), (unsigned char)(0x12 + i));
	/* blocks already mapped are neither walked nor counted again */
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_HIT], hits + 5);
	assert_int_equal(kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(a, 0))->refcount, 3);
	assert_int_equal(kvmm_frame_to_page(f->pool, kvmm_mm_seq_frame(a, 4))->refcount, 3);
	mmf_check(f->pool);

	/* at the end of what is cached: a miss, the length stays */
	assert_int_equal(kvmm_mm_prefix_lookup(q, t + 5 * TPP, TPP), 5 * TPP);
	assert_int_equal(q->nblocks, 5);
	/* the rest of the prompt is appended as usual and sealed under the chain */
	assert_int_equal(kvmm_mm_seq_append(q, TPP, t + 5 * TPP), 0);
	assert_int_equal(kvmm_mm_seq_seal(q), 1);
	assert_int_equal(kvmm_pagecache_count(f->pool), 6);
	kvmm_mm_seq_free(full);
	assert_int_equal(lookup(f->as, t, 6 * TPP, &full), 6 * TPP);
	assert_same_blocks(full, q, 6);
	mmf_check(f->pool);
	free(t);
}

static void test_lookup_continues_sealed_sequences(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(4, 23), *u = prompt(4, 23);
	struct kvmm_seq *a, *b;

	a = sealed_seq(f->as, t, 4 * TPP, 0x22);
	/* a sequence that computed and sealed the first two blocks itself (deduplicated) */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(b, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_seal(b), 2);
	assert_int_equal(kvmm_mm_prefix_lookup(b, t + 2 * TPP, 2 * TPP), 4 * TPP);
	assert_same_blocks(b, a, 4);
	kvmm_mm_seq_free(b);

	/* a truncated to whole pages: its dropped blocks are cached, and come back */
	assert_int_equal(kvmm_mm_seq_truncate(a, TPP), 0);
	assert_int_equal(a->nsealed, 1);
	assert_int_equal(f->ns->cached, 3);
	assert_int_equal(kvmm_mm_prefix_lookup(a, t + TPP, 3 * TPP), 4 * TPP);
	assert_int_equal(f->ns->cached, 0);
	assert_int_equal(f->ns->used, 4);
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(a, 3), 0x25);
	mmf_check(f->pool);

	/* the continuation is keyed by the sequence's own chain: other ids miss */
	assert_int_equal(kvmm_mm_seq_truncate(a, 2 * TPP), 0);
	u[2 * TPP + 1]++;
	assert_int_equal(kvmm_mm_prefix_lookup(a, u + 2 * TPP, 2 * TPP), 2 * TPP);
	/* ... and the ids of block 0 are not block 2's after the first two */
	assert_int_equal(kvmm_mm_prefix_lookup(a, t, 2 * TPP), 2 * TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(a, t + 2 * TPP, 2 * TPP), 4 * TPP);
	mmf_check(f->pool);
	free(t);
	free(u);
}

static void test_lookup_continue_needs_whole_sealed_pages(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(3, 24);
	struct kvmm_seq *a, *b;
	uint64_t hits, misses;

	a = sealed_seq(f->as, t, 3 * TPP, 0x32);
	hits = f->pool->stat[KVMM_STAT_CACHE_HIT];
	misses = f->pool->stat[KVMM_STAT_CACHE_MISS];

	/* a full block not sealed yet: its key is not in the chain, nothing can follow it */
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(b, TPP, t), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, t + TPP, 2 * TPP), -EINVAL);
	/* sealed, then an unsealed tail block */
	assert_int_equal(kvmm_mm_seq_seal(b), 1);
	assert_int_equal(kvmm_mm_seq_append(b, TPP, t + TPP), 0);
	assert_int_equal(b->nsealed, 1);
	assert_int_equal(kvmm_mm_prefix_lookup(b, t + 2 * TPP, TPP), -EINVAL);
	/* a partial last page */
	assert_int_equal(kvmm_mm_seq_truncate(b, TPP + 3), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, t + TPP + 3, TPP), -EINVAL);
	/* nothing changed on the way */
	assert_int_equal(b->ntokens, TPP + 3);
	assert_int_equal(b->nblocks, 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_HIT], hits);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_MISS], misses);
	mmf_check(f->pool);

	/* cut back to the sealed page, it continues */
	assert_int_equal(kvmm_mm_seq_truncate(b, TPP), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(b, t + TPP, 2 * TPP), 3 * TPP);
	assert_same_blocks(b, a, 3);
	mmf_check(f->pool);
	free(t);
}

/* ---- collisions: a forced hash ---------------------------------------------------------------- */

static uint64_t const_hash(const struct kvmm_ns *ns, uint64_t parent_key, uint64_t fmt_id,
			   const uint32_t *tokens, uint32_t n)
{
	(void)ns;
	(void)parent_key;
	(void)fmt_id;
	(void)tokens;
	(void)n;
	return 42;
}

static void test_forced_collision_never_wrong_hit(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *x = prompt(2, 6), *y = prompt(2, 7), *z = prompt(2, 6), *w = prompt(1, 8);
	struct kvmm_seq *sx, *sy, *q;
	uint64_t collide;

	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, const_hash), 0);
	/*
	 * x = [A, B] and y = [C, B]: every block of both has key 42, and both second blocks hold
	 * the same tokens under the same parent key.  Only the parent entry tells them apart.
	 */
	memcpy(y + TPP, x + TPP, TPP * sizeof(*y));
	sx = sealed_seq(f->as, x, 2 * TPP, 0x60);
	sy = sealed_seq(f->as, y, 2 * TPP, 0x70);
	assert_int_equal(kvmm_pagecache_count(f->pool), 4);
	assert_int_not_equal(kvmm_mm_seq_frame(sx, 1), kvmm_mm_seq_frame(sy, 1));
	mmf_check(f->pool);

	assert_int_equal(lookup(f->as, x, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(sx, 0));
	assert_int_equal(kvmm_mm_seq_frame(q, 1), kvmm_mm_seq_frame(sx, 1));
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 0), 0x60);
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 1), 0x61);
	assert_true(f->pool->stat[KVMM_STAT_CACHE_COLLIDE] > 0);
	kvmm_mm_seq_free(q);

	assert_int_equal(lookup(f->as, y, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(sy, 0));
	assert_int_equal(kvmm_mm_seq_frame(q, 1), kvmm_mm_seq_frame(sy, 1));
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 1), 0x71);
	/* x's B has y's tokens and parent key: passed over as stale, not a collision */
	assert_true(f->pool->stat[KVMM_STAT_CACHE_STALE] > 0);
	kvmm_mm_seq_free(q);

	/* z = [A, D]: A hits, D collides with every entry and is rejected */
	z[TPP + 3] = 0xdead;
	collide = f->pool->stat[KVMM_STAT_CACHE_COLLIDE];
	assert_int_equal(lookup(f->as, z, 2 * TPP, &q), TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(sx, 0));
	assert_true(f->pool->stat[KVMM_STAT_CACHE_COLLIDE] - collide >= 4);
	kvmm_mm_seq_free(q);

	/* a block cached nowhere: rejected everywhere, no hit at all */
	assert_int_equal(lookup(f->as, w, TPP, &q), 0);
	kvmm_mm_seq_free(q);

	/* cannot change the hash under a populated cache */
	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, NULL), -EBUSY);
	mmf_check(f->pool);
	free(x);
	free(y);
	free(z);
	free(w);
}

static void test_forced_collision_seal_does_not_dedup_wrong_block(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *x = prompt(1, 9), *y = prompt(1, 10);
	struct kvmm_seq *sx, *sy;

	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, const_hash), 0);
	sx = sealed_seq(f->as, x, TPP, 0x90);
	sy = sealed_seq(f->as, y, TPP, 0xa0);
	/* same key, other tokens: both cached side by side, each seq keeps its own page */
	assert_int_not_equal(kvmm_mm_seq_frame(sx, 0), kvmm_mm_seq_frame(sy, 0));
	assert_int_equal(kvmm_pagecache_count(f->pool), 2);
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(sy, 0), 0xa0);
	mmf_check(f->pool);
	free(x);
	free(y);
}

static void test_forced_collision_continuation_never_wrong_hit(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *x = prompt(3, 25), *y = prompt(3, 26), *z = prompt(2, 25);
	struct kvmm_seq *sx, *sy, *q;
	uint64_t collide;
	uint32_t i;

	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, const_hash), 0);
	/* x = [A, B, C] and y = [D, B, C]: every key 42, only the parent entries differ */
	memcpy(y + TPP, x + TPP, 2 * TPP * sizeof(*y));
	sx = sealed_seq(f->as, x, 3 * TPP, 0x40);
	sy = sealed_seq(f->as, y, 3 * TPP, 0x50);
	assert_int_equal(kvmm_pagecache_count(f->pool), 6);

	/* continuing after A takes x's B and C, after D y's: the seam keeps the parent entry */
	assert_int_equal(lookup(f->as, x, TPP, &q), TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, x + TPP, 2 * TPP), 3 * TPP);
	assert_same_blocks(q, sx, 3);
	for (i = 0; i < 3; i++)
		assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, i), (unsigned char)(0x40 + i));
	kvmm_mm_seq_free(q);
	assert_int_equal(lookup(f->as, y, TPP, &q), TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, y + TPP, TPP), 2 * TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, y + 2 * TPP, TPP), 3 * TPP);
	assert_same_blocks(q, sy, 3);
	for (i = 0; i < 3; i++)
		assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, i), (unsigned char)(0x50 + i));
	assert_true(f->pool->stat[KVMM_STAT_CACHE_STALE] > 0);
	kvmm_mm_seq_free(q);

	/* a sequence that sealed D itself continues under y's chain too */
	assert_int_equal(kvmm_mm_seq_create(f->as, &q), 0);
	assert_int_equal(kvmm_mm_seq_append(q, TPP, y), 0);
	assert_int_equal(kvmm_mm_seq_seal(q), 1);
	assert_int_equal(kvmm_mm_prefix_lookup(q, y + TPP, 2 * TPP), 3 * TPP);
	assert_same_blocks(q, sy, 3);
	kvmm_mm_seq_free(q);

	/* [A, E]: E collides with every entry and is rejected */
	z[TPP + 5] = 0xbeef;
	collide = f->pool->stat[KVMM_STAT_CACHE_COLLIDE];
	assert_int_equal(lookup(f->as, z, TPP, &q), TPP);
	assert_int_equal(kvmm_mm_prefix_lookup(q, z + TPP, TPP), TPP);
	assert_true(f->pool->stat[KVMM_STAT_CACHE_COLLIDE] - collide >= 5);
	assert_int_equal(q->nblocks, 1);
	kvmm_mm_seq_free(q);
	mmf_check(f->pool);
	free(x);
	free(y);
	free(z);
}

/* ---- isolation ---------------------------------------------------------------------------------- */

static void test_namespaces_isolated(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 11);
	struct kvmm_aspace *as2;
	struct kvmm_ns *ns2;
	struct kvmm_seq *q;

	assert_int_equal(kvmm_ns_create(f->pool, "other", 0, 0, &ns2), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, ns2, &f->fmt, NULL, &as2), 0);
	assert_memory_not_equal(f->ns->secret, ns2->secret, sizeof(ns2->secret));
	assert_true(kvmm_cache_key(f->ns, 0, f->as->fmt_id, t, TPP) !=
		    kvmm_cache_key(ns2, 0, f->as->fmt_id, t, TPP));

	sealed_seq(f->as, t, 2 * TPP, 0xb0);
	assert_int_equal(lookup(as2, t, 2 * TPP, &q), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_HIT], 0);
	kvmm_mm_seq_free(q);
	/* the same prompt in the other namespace gets its own pages */
	sealed_seq(as2, t, 2 * TPP, 0xc0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 4);
	assert_int_equal(f->ns->used, 2);
	assert_int_equal(ns2->used, 2);
	mmf_check(f->pool);
	kvmm_aspace_destroy(as2);
	free(t);
}

static void test_namespaces_isolated_under_forced_hash(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(1, 12);
	struct kvmm_aspace *as2;
	struct kvmm_ns *ns2;
	struct kvmm_seq *q;

	/* even when the keys collide on purpose, the namespace check rejects the entry */
	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, const_hash), 0);
	assert_int_equal(kvmm_ns_create(f->pool, "other", 0, 0, &ns2), 0);
	assert_int_equal(kvmm_aspace_create(f->pool, ns2, &f->fmt, NULL, &as2), 0);
	sealed_seq(f->as, t, TPP, 0xd0);
	assert_int_equal(lookup(as2, t, TPP, &q), 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 1);
	kvmm_mm_seq_free(q);
	/* nor does sealing the same block there share the other namespace's page */
	sealed_seq(as2, t, TPP, 0xe0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 2);
	mmf_check(f->pool);
	kvmm_aspace_destroy(as2);
	free(t);
}

static void test_formats_isolated(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(1, 13);
	struct kvmm_aspace *as2;
	struct kvmm_fmt fmt2;
	struct kvmm_seq *q;

	/* same tokens per page, other dtype: the KV bytes mean something else */
	assert_int_equal(kvmm_fmt_init(&fmt2, &(struct kvmm_format){1, 1, 128, KVMM_DTYPE_INT8, 32},
				       PAGE_SZ),
			 0);
	assert_int_equal(kvmm_aspace_create(f->pool, f->ns, &fmt2, NULL, &as2), 0);
	assert_int_not_equal(as2->fmt_id, f->as->fmt_id);
	sealed_seq(f->as, t, TPP, 0xf0);
	assert_int_equal(kvmm_mm_seq_create(as2, &q), 0);
	assert_int_equal(kvmm_mm_prefix_lookup(q, t, (uint64_t)fmt2.tokens_per_page), 0);
	mmf_check(f->pool);
	kvmm_aspace_destroy(as2);
	free(t);
}

/* ---- deduplication -------------------------------------------------------------------------------- */

static void test_seal_dedups_identical_blocks(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(4, 14);
	struct kvmm_seq *a, *b;
	uint32_t i, own[3];

	a = sealed_seq(f->as, t, 3 * TPP, 0x11);
	assert_int_equal(kvmm_mm_seq_create(f->as, &b), 0);
	assert_int_equal(kvmm_mm_seq_append(b, 3 * TPP + 2, t), 0);
	for (i = 0; i < 3; i++)
		own[i] = kvmm_mm_seq_frame(b, i);
	assert_int_equal(f->ns->used, 7);

	/* b computed the same prefix itself: sealing maps a's pages and drops b's copies */
	assert_int_equal(kvmm_mm_seq_seal(b), 3);
	for (i = 0; i < 3; i++) {
		assert_int_equal(kvmm_mm_seq_frame(b, i), kvmm_mm_seq_frame(a, i));
		assert_int_not_equal(kvmm_mm_seq_frame(b, i), own[i]);
		assert_int_equal(kvmm_frame_to_page(f->pool, own[i])->state, KVMM_PAGE_FREE);
	}
	assert_int_equal(f->ns->used, 4);
	assert_int_equal(kvmm_pagecache_count(f->pool), 3);
	assert_int_equal(f->pool->stat[KVMM_STAT_SEAL], 3);
	mmf_check(f->pool);
	free(t);
}

static void test_fork_then_seal_both_sides(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 15);
	struct kvmm_seq *a, *b;

	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	assert_int_equal(kvmm_mm_seq_seal(a), 2);
	/* b maps the pages a just sealed; b's view still says unsealed and read-only */
	assert_false(b->pte[0] & (KVMM_PTE_SEALED | KVMM_PTE_WRITABLE));
	mmf_check(f->pool);
	assert_int_equal(kvmm_mm_seq_seal(b), 2);
	assert_true(b->pte[1] & KVMM_PTE_SEALED);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), kvmm_mm_seq_frame(a, 1));
	assert_int_equal(kvmm_pagecache_count(f->pool), 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_SEAL], 2);
	mmf_check(f->pool);
	free(t);
}

static void test_many_entries_grow_table(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(100, 16);
	struct kvmm_seq *a, *q;
	uint32_t i;

	/* 100 chained blocks: more entries than the first table has buckets */
	a = sealed_seq(f->as, t, 100 * TPP, 0);
	assert_int_equal(kvmm_pagecache_count(f->pool), 100);
	mmf_check(f->pool);
	assert_int_equal(lookup(f->as, t, 100 * TPP, &q), 100 * TPP);
	for (i = 0; i < 100; i++)
		assert_int_equal(kvmm_mm_seq_frame(q, i), kvmm_mm_seq_frame(a, i));
	free(t);
}

/* ---- a chain broken by eviction -------------------------------------------------------------- */

/*
 * A and B share unsealed pages X0, X1 (fork).  A seals: block 0 deduplicates to an already
 * cached Y0, so X1 is sealed under Y0.  A goes, Y0 is evicted: X1 is orphaned but B still
 * maps it.  Returns B (unsealed, 2 blocks); *x1 is X1's frame.
 */
static struct kvmm_seq *orphaned_sibling(struct mm_fixture *f, const uint32_t *t, uint32_t *x1)
{
	struct kvmm_seq *y, *a, *b;
	uint32_t y0;

	y = sealed_seq(f->as, t, TPP, 0x50);
	y0 = kvmm_mm_seq_frame(y, 0);
	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	*x1 = kvmm_mm_seq_frame(a, 1);
	assert_int_equal(kvmm_mm_seq_seal(a), 2);
	assert_int_equal(kvmm_mm_seq_frame(a, 0), y0);
	assert_int_not_equal(kvmm_mm_seq_frame(b, 0), y0);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), *x1);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(y);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	assert_int_equal(kvmm_frame_to_page(f->pool, y0)->state, KVMM_PAGE_FREE);
	mmf_check(f->pool);
	return b;
}

static void test_seal_reparents_block_orphaned_by_eviction(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 17);
	struct kvmm_seq *b, *q;
	uint32_t x1;

	b = orphaned_sibling(f, t, &x1);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_ORPHAN], 1);
	/* B seals: X0 gets a new entry, and X1 - already sealed - must now hang under it */
	assert_int_equal(kvmm_mm_seq_seal(b), 2);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), x1);
	assert_int_equal(kvmm_pagecache_count(f->pool), 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_REPARENT], 1);
	mmf_check(f->pool);
	/* the longest cached prefix: both blocks, B's own pages */
	assert_int_equal(lookup(f->as, t, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(b, 0));
	assert_int_equal(kvmm_mm_seq_frame(q, 1), x1);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	mmf_check(f->pool);
	free(t);
}

static void test_seal_shares_block_recached_over_orphan(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 18);
	struct kvmm_seq *b, *c, *q;
	uint32_t x1;

	b = orphaned_sibling(f, t, &x1);
	/* C computes and seals the same prompt again: new entries, the orphan X1 is skipped */
	c = sealed_seq(f->as, t, 2 * TPP, 0x80);
	assert_int_not_equal(kvmm_mm_seq_frame(c, 1), x1);
	assert_int_equal(kvmm_pagecache_count(f->pool), 3);
	/*
	 * X1 has the same key and tokens under a dead parent.  C's new entry for block 0 has no
	 * child, so the seal of block 1 knew without searching the table that the block was not
	 * cached: X1 was never looked at, neither counted stale nor a collision (the tests with
	 * a forced hash function search the table for every block and count stale entries)
	 */
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_STALE], 0);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	mmf_check(f->pool);

	/* B seals: both blocks are shared with C, and X1, mapped by no one now, is freed */
	assert_int_equal(kvmm_mm_seq_seal(b), 2);
	assert_int_equal(kvmm_mm_seq_frame(b, 0), kvmm_mm_seq_frame(c, 0));
	assert_int_equal(kvmm_mm_seq_frame(b, 1), kvmm_mm_seq_frame(c, 1));
	assert_int_equal(kvmm_frame_to_page(f->pool, x1)->state, KVMM_PAGE_FREE);
	assert_int_equal(kvmm_pagecache_count(f->pool), 2);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_REPARENT], 0);
	assert_int_equal(f->ns->used, 2);
	assert_int_equal(f->ns->cached, 0);
	mmf_check(f->pool);
	assert_int_equal(lookup(f->as, t, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 1), kvmm_mm_seq_frame(c, 1));
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 1), 0x81);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_COLLIDE], 0);
	mmf_check(f->pool);
	free(t);
}

static void test_orphan_loses_protection_and_is_freed_unmapped(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *t = prompt(2, 19);
	struct kvmm_seq *y, *a, *b, *q;
	uint32_t x1;

	y = sealed_seq(f->as, t, TPP, 0x50);
	assert_int_equal(kvmm_mm_seq_create(f->as, &a), 0);
	assert_int_equal(kvmm_mm_seq_append(a, 2 * TPP, t), 0);
	assert_int_equal(kvmm_mm_seq_fork(a, &b), 0);
	x1 = kvmm_mm_seq_frame(a, 1);
	assert_int_equal(kvmm_mm_seq_seal(a), 2);
	/* a hit on X1 under Y0 gives it a second chance... */
	assert_int_equal(lookup(f->as, t, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 1), x1);
	assert_true(kvmm_frame_to_page(f->pool, x1)->flags & KVMM_PG_REFERENCED);
	kvmm_mm_seq_free(q);
	kvmm_mm_seq_free(a);
	kvmm_mm_seq_free(y);
	assert_int_equal(kvmm_reclaim(f->pool, NULL, 1), 1);
	/* ...which it loses when Y0 goes and nothing can reach it any more */
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_ORPHAN], 1);
	assert_int_equal(kvmm_frame_to_page(f->pool, x1)->state, KVMM_PAGE_MAPPED);
	assert_false(kvmm_frame_to_page(f->pool, x1)->flags & KVMM_PG_REFERENCED);
	mmf_check(f->pool);
	/* its last mapper goes: freed at once rather than cached, since it can never be hit */
	kvmm_mm_seq_free(b);
	assert_int_equal(kvmm_frame_to_page(f->pool, x1)->state, KVMM_PAGE_FREE);
	assert_int_equal(kvmm_pagecache_count(f->pool), 0);
	assert_int_equal(f->ns->used, 0);
	assert_int_equal(f->ns->cached, 0);
	assert_int_equal(f->pool->lru.nr_inactive + f->pool->lru.nr_active, 0);
	mmf_check(f->pool);
	free(t);
}

static void test_reparent_under_forced_collision_never_wrong_hit(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t *x = prompt(2, 20), *y = prompt(2, 21);
	struct kvmm_seq *b, *sy, *q;
	uint32_t x1;

	/* every key is 42; x = [A, B] re-parented, y = [C, B] cached alongside */
	assert_int_equal(kvmm_pagecache_set_hash_fn(f->pool, const_hash), 0);
	memcpy(y + TPP, x + TPP, TPP * sizeof(*y));
	b = orphaned_sibling(f, x, &x1);
	sy = sealed_seq(f->as, y, 2 * TPP, 0x70);
	assert_int_equal(kvmm_mm_seq_seal(b), 2);
	assert_int_equal(kvmm_mm_seq_frame(b, 1), x1);
	assert_int_equal(f->pool->stat[KVMM_STAT_CACHE_REPARENT], 1);
	/* y's B looked like x's under the same parent key: stale, never taken */
	assert_true(f->pool->stat[KVMM_STAT_CACHE_STALE] > 0);
	mmf_check(f->pool);

	assert_int_equal(lookup(f->as, x, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(b, 0));
	assert_int_equal(kvmm_mm_seq_frame(q, 1), x1);
	kvmm_mm_seq_free(q);
	assert_int_equal(lookup(f->as, y, 2 * TPP, &q), 2 * TPP);
	assert_int_equal(kvmm_mm_seq_frame(q, 0), kvmm_mm_seq_frame(sy, 0));
	assert_int_equal(kvmm_mm_seq_frame(q, 1), kvmm_mm_seq_frame(sy, 1));
	assert_frame_tag(f->pool, kvmm_mm_seq_frame(q, 1), 0x71);
	kvmm_mm_seq_free(q);
	mmf_check(f->pool);
	free(x);
	free(y);
}

/* ---- the key ------------------------------------------------------------------------------------ */

static void test_key_is_xxh3_of_documented_input(void **state)
{
	struct mm_fixture *f = *state;
	uint32_t tok[300];
	uint64_t buf[4 + 150];
	uint32_t i, n;

	for (i = 0; i < 300; i++)
		tok[i] = i * 2654435761u;
	/* 16 tokens take the one-shot path, 300 the streaming one: both are the same function */
	for (n = 16; n <= 300; n += 284) {
		buf[0] = 0x1234;
		buf[1] = f->as->fmt_id;
		buf[2] = f->ns->secret[0];
		buf[3] = f->ns->secret[1];
		memcpy(&buf[4], tok, n * sizeof(*tok));
		assert_true(kvmm_cache_key(f->ns, 0x1234, f->as->fmt_id, tok, n) ==
			    XXH3_64bits_withSeed(buf, 32 + n * sizeof(*tok), f->ns->hash_seed));
	}
	/* every input matters */
	assert_true(kvmm_cache_key(f->ns, 1, 2, tok, 16) != kvmm_cache_key(f->ns, 3, 2, tok, 16));
	assert_true(kvmm_cache_key(f->ns, 1, 2, tok, 16) != kvmm_cache_key(f->ns, 1, 3, tok, 16));
	assert_true(kvmm_cache_key(f->ns, 1, 2, tok, 16) !=
		    kvmm_cache_key(f->ns, 1, 2, tok + 1, 16));
	assert_true(kvmm_cache_key(f->ns, 1, 2, tok, 16) != kvmm_cache_key(f->ns, 1, 2, tok, 15));
}

/* kvmm_fmt_id(), the format part of every cache key */
static void test_fmt_id(void **state)
{
	struct kvmm_fmt a, b;
	uint64_t base;

	(void)state;
	assert_int_equal(
		kvmm_fmt_init(&a, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	/* the id depends on the defining fields only, not on padding or stale bytes */
	memset(&b, 0x5a, sizeof(b));
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	base = kvmm_fmt_id(&a);
	assert_int_equal(base, kvmm_fmt_id(&b));

	/* any defining field changes it */
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){31, 8, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&b), base);
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 4, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&b), base);
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 8, 64, KVMM_DTYPE_FP16}, 2u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&b), base);
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_BF16}, 2u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&b), base);
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_FP16}, 4u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&b), base);
	/* two int8 formats differing only in group size */
	assert_int_equal(
		kvmm_fmt_init(&a, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_INT8, 32}, 2u << 20),
		0);
	assert_int_equal(
		kvmm_fmt_init(&b, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_INT8, 64}, 2u << 20),
		0);
	assert_int_not_equal(kvmm_fmt_id(&a), kvmm_fmt_id(&b));
	/* swapping two fields is not the same format */
	assert_int_equal(
		kvmm_fmt_init(&a, &(struct kvmm_format){8, 32, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	assert_int_not_equal(kvmm_fmt_id(&a), base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fmt_id),
		cmocka_unit_test_setup_teardown(test_seal_then_lookup_maps_same_frames, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_of_cached_pages, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_partial_match, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_bad_args, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_empty_cache_misses, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_continue_equals_full_lookup, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_continues_sealed_sequences, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_continue_needs_whole_sealed_pages,
						setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_forced_collision_continuation_never_wrong_hit,
						setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_forced_collision_never_wrong_hit, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(
			test_forced_collision_seal_does_not_dedup_wrong_block, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_namespaces_isolated, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_namespaces_isolated_under_forced_hash, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_formats_isolated, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_seal_dedups_identical_blocks, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_fork_then_seal_both_sides, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_many_entries_grow_table, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_seal_reparents_block_orphaned_by_eviction,
						setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_lookup_through_branch_points, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_seal_shares_block_recached_over_orphan, setup,
						mmf_teardown),
		cmocka_unit_test_setup_teardown(test_orphan_loses_protection_and_is_freed_unmapped,
						setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(
			test_reparent_under_forced_collision_never_wrong_hit, setup, mmf_teardown),
		cmocka_unit_test_setup_teardown(test_key_is_xxh3_of_documented_input, setup,
						mmf_teardown),
	};

	return cmocka_run_group_tests_name("pagecache", tests, NULL, NULL);
}
