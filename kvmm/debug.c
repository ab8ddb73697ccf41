// SPDX-License-Identifier: MIT
/*
 * kvmm/debug.c - kvmm_check_invariants(): the whole pool, checked from scratch.
 *
 * The allocator, the page tables, the page cache, the LRU and the namespaces each keep
 * counters and lists that must agree with one another.  This walks everything reachable
 * from the pool - buddy free lists, magazines (pool->mags), LRU lists, every sequence of
 * every address space, the page cache - recounts what the counters claim and checks that
 * each frame is in exactly one state, on the one list that state implies, with a refcount
 * equal to the number of PTEs that map it, and that the sealed blocks of every sequence form
 * one reachable chain of page-cache entries.  It is O(frames + PTEs + cache entries) and
 * allocates one counter per frame, so it is for tests, the model test and debug builds, not
 * for hot paths.  The first inconsistency found is described in @why and -EUCLEAN returned.
 * Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"

/* per-frame bookkeeping of one check */
struct frame_seen {
	uint32_t mappers; /* PTEs found mapping the frame */
	uint8_t lists;	  /* times found on a buddy, magazine or LRU list */
};

__printf(3, 4) static int fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EUCLEAN;
}

static int check_buddy(struct kvmm_pool *pool, struct frame_seen *seen, char *why, size_t len)
{
	uint32_t frames = 0, resident, fr;
	unsigned int o;

	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		struct kvmm_page *pg;
		uint32_t blocks = 0;

		list_for_each_entry (pg, &pool->free_area[o], lru) {
			uint32_t f = kvmm_page_to_frame(pool, pg), i, n = UINT32_C(1) << o;

			if (f >= pool->nframes || (f & (n - 1)) || n > pool->nframes - f)
				return fail(why, len, "buddy order %u: block at frame %u misplaced",
					    o, f);
			if (!(pg->flags & KVMM_PG_BUDDY_HEAD) || pg->order != o)
				return fail(why, len,
					    "buddy order %u: frame %u is not a head of it", o, f);
			for (i = 0; i < n; i++) {
				if (pg[i].state != KVMM_PAGE_FREE)
					return fail(why, len,
						    "buddy: frame %u of a free block is %s", f + i,
						    kvmm_page_state_name(pg[i].state));
				if (i && (pg[i].flags & KVMM_PG_BUDDY_HEAD))
					return fail(why, len,
						    "buddy: frame %u inside a block is a head",
						    f + i);
				if (seen[f + i].lists++)
					return fail(why, len, "buddy: frame %u on a list twice",
						    f + i);
			}
			blocks++;
			frames += n;
		}
		if (blocks != pool->nr_free_blocks[o])
			return fail(why, len, "buddy order %u: %u blocks listed, %u counted", o,
				    blocks, pool->nr_free_blocks[o]);
	}
	if (frames != pool->nr_free)
		return fail(why, len, "buddy: %u frames listed, nr_free %u", frames, pool->nr_free);
	/*
	 * The daemon-wide budget (budget.c) is charged for every frame out of the buddy and every
	 * free frame whose memory was not given back (RESIDENT, only in a pool of a budget).
	 */
	resident = 0;
	for (fr = 0; fr < pool->nframes; fr++)
		if (pool->pages[fr].flags & KVMM_PG_RESIDENT) {
			if (pool->pages[fr].state != KVMM_PAGE_FREE || !pool->budget)
				return fail(why, len, "frame %u: resident flag on a %s frame%s", fr,
					    kvmm_page_state_name(pool->pages[fr].state),
					    pool->budget ? "" : " of a pool in no budget");
			resident++;
		}
	if (pool->budget && resident != pool->nr_free_resident)
		return fail(why, len, "budget: %u free frames resident, %u counted", resident,
			    pool->nr_free_resident);
	if (pool->budget &&
	    pool->budget_charged != pool->nframes - pool->nr_free + pool->nr_free_resident)
		return fail(why, len,
			    "budget: %u frames charged, %u out of the buddy and %u free resident",
			    pool->budget_charged, pool->nframes - pool->nr_free,
			    pool->nr_free_resident);
	if (pool->budget &&
	    __atomic_load_n(&pool->budget->used, __ATOMIC_RELAXED) + pool->budget_pending <
		    pool->budget_charged)
		return fail(
			why, len,
			"budget: %llu frames used in all (%u pending here), %u by this pool",
			(unsigned long long)__atomic_load_n(&pool->budget->used, __ATOMIC_RELAXED),
			pool->budget_pending, pool->budget_charged);
	return 0;
}

static int check_mags(struct kvmm_pool *pool, struct frame_seen *seen, char *why, size_t len)
{
	struct kvmm_magazine *mag;

	list_for_each_entry (mag, &pool->mags, node) {
		struct kvmm_page *pg;
		uint32_t n = 0;

		if (mag->pool != pool || !mag->count)
			return fail(why, len,
				    "magazine of owner %u: empty or foreign on pool->mags",
				    mag->owner);
		list_for_each_entry (pg, &mag->frames, lru) {
			uint32_t f = kvmm_page_to_frame(pool, pg);

			if (f >= pool->nframes)
				return fail(why, len, "magazine of owner %u: frame out of range",
					    mag->owner);
			if (pg->state != KVMM_PAGE_MAGAZINE || pg->owner != mag->owner)
				return fail(why, len,
					    "magazine of owner %u: frame %u is %s of owner %u",
					    mag->owner, f, kvmm_page_state_name(pg->state),
					    pg->owner);
			if (seen[f].lists++)
				return fail(why, len, "magazine: frame %u on a list twice", f);
			n++;
		}
		if (n != mag->count)
			return fail(why, len, "magazine of owner %u: %u frames listed, count %u",
				    mag->owner, n, mag->count);
	}
	return 0;
}

static int check_lru_list(struct kvmm_pool *pool, struct frame_seen *seen, bool active, char *why,
			  size_t len)
{
	struct list_head *head = active ? &pool->lru.active : &pool->lru.inactive;
	uint32_t want = active ? pool->lru.nr_active : pool->lru.nr_inactive;
	const char *name = active ? "active" : "inactive";
	struct kvmm_page *pg;
	uint32_t n = 0;

	list_for_each_entry (pg, head, lru) {
		uint32_t f = kvmm_page_to_frame(pool, pg);

		if (f >= pool->nframes)
			return fail(why, len, "%s LRU: frame out of range", name);
		if (pg->state != KVMM_PAGE_CACHED || !(pg->flags & KVMM_PG_LRU) ||
		    !!(pg->flags & KVMM_PG_ACTIVE) != active)
			return fail(why, len, "%s LRU: frame %u is %s with flags %#x", name, f,
				    kvmm_page_state_name(pg->state), pg->flags);
		if (seen[f].lists++)
			return fail(why, len, "%s LRU: frame %u on a list twice", name, f);
		n++;
	}
	if (n != want)
		return fail(why, len, "%s LRU: %u frames listed, %u counted", name, n, want);
	return 0;
}

static int check_seq(struct kvmm_pool *pool, const struct kvmm_seq *seq, struct frame_seen *seen,
		     char *why, size_t len)
{
	const struct kvmm_aspace *as = seq->as;
	uint32_t tpp = as->fmt.tokens_per_page, b;

	if (seq->nblocks != DIV_ROUND_UP(seq->ntokens, (uint64_t)tpp) || seq->nblocks > seq->cap ||
	    seq->nsealed > seq->ntokens / tpp)
		return fail(why, len, "seq %llu: %llu tokens, %u blocks, %u sealed, cap %u",
			    (unsigned long long)seq->id, (unsigned long long)seq->ntokens,
			    seq->nblocks, seq->nsealed, seq->cap);
	for (b = 0; b < seq->cap; b++) {
		uint64_t pte = seq->pte[b];
		const struct kvmm_page *pg;
		uint32_t f;

		if (b >= seq->nblocks) {
			if (!kvmm_pte_is_none(pte))
				return fail(why, len, "seq %llu: block %u past the end is mapped",
					    (unsigned long long)seq->id, b);
			continue;
		}
		/* a swapped block: kvmm_swap_check() matches it with its slot */
		if (kvmm_pte_is_swap(pte))
			continue;
		f = kvmm_pte_frame(pte);
		if (f >= pool->nframes)
			return fail(why, len, "seq %llu: block %u pte %#llx maps no frame",
				    (unsigned long long)seq->id, b, (unsigned long long)pte);
		pg = &pool->pages[f];
		seen[f].mappers++;
		if (pg->state != KVMM_PAGE_MAPPED)
			return fail(why, len, "seq %llu: block %u maps frame %u in state %s",
				    (unsigned long long)seq->id, b, f,
				    kvmm_page_state_name(pg->state));
		if (pg->ns_id != as->ns->id)
			return fail(why, len, "seq %llu: frame %u charged to ns %u, not %u",
				    (unsigned long long)seq->id, f, pg->ns_id, as->ns->id);
		if (b < seq->nsealed && (!(pg->flags & KVMM_PG_SEALED) || !(pte & KVMM_PTE_SEALED)))
			return fail(why, len, "seq %llu: sealed block %u, frame %u not sealed",
				    (unsigned long long)seq->id, b, f);
		if ((pte & KVMM_PTE_SEALED) && !(pg->flags & KVMM_PG_SEALED))
			return fail(why, len,
				    "seq %llu: pte of block %u says sealed, frame %u isn't",
				    (unsigned long long)seq->id, b, f);
		if ((pte & KVMM_PTE_WRITABLE) &&
		    (pg->refcount != 1 || (pg->flags & KVMM_PG_SEALED)))
			return fail(why, len,
				    "seq %llu: block %u writable but frame %u shared/sealed",
				    (unsigned long long)seq->id, b, f);
	}
	return 0;
}

static int check_frames(struct kvmm_pool *pool, const struct frame_seen *seen, char *why,
			size_t len)
{
	uint32_t nr_state[KVMM_PAGE_STATE_COUNT] = {0};
	uint32_t used[KVMM_MAX_NS] = {0}, cached[KVMM_MAX_NS] = {0};
	uint32_t f, total = 0, sealed = 0, i;

	for (f = 0; f < pool->nframes; f++) {
		const struct kvmm_page *pg = &pool->pages[f];
		bool on_list = pg->state != KVMM_PAGE_MAPPED;

		if (pg->state >= KVMM_PAGE_STATE_COUNT)
			return fail(why, len, "frame %u: bad state %u", f, pg->state);
		nr_state[pg->state]++;
		/* every free frame, magazine frame and cached frame was found on its list */
		if (on_list && seen[f].lists != 1)
			return fail(why, len, "frame %u: %s but on %u lists", f,
				    kvmm_page_state_name(pg->state), seen[f].lists);
		if (!on_list && seen[f].lists)
			return fail(why, len, "frame %u: mapped but on a free or LRU list", f);
		if (pg->refcount != seen[f].mappers)
			return fail(why, len, "frame %u: refcount %u, mapped by %u PTEs", f,
				    pg->refcount, seen[f].mappers);
		if (pg->ns_id >= KVMM_MAX_NS || (pg->ns_id && !pool->ns[pg->ns_id]))
			return fail(why, len, "frame %u: charged to missing ns %u", f, pg->ns_id);
		if (!!(pg->flags & KVMM_PG_SEALED) != !!pg->cache)
			return fail(why, len, "frame %u: sealed flag and cache entry disagree", f);

		switch (pg->state) {
		case KVMM_PAGE_FREE:
		case KVMM_PAGE_MAGAZINE:
			if (pg->refcount || pg->cache ||
			    (pg->flags &
			     ~(KVMM_PG_BUDDY_HEAD | KVMM_PG_POISONED | KVMM_PG_RESIDENT)))
				return fail(why, len, "frame %u: %s with refcount %u flags %#x", f,
					    kvmm_page_state_name(pg->state), pg->refcount,
					    pg->flags);
			if (pg->state == KVMM_PAGE_MAGAZINE && (pg->flags & KVMM_PG_BUDDY_HEAD))
				return fail(why, len, "frame %u: in a magazine and a buddy head",
					    f);
			break;
		case KVMM_PAGE_MAPPED:
			/* ... except a frame a swap-in is still reading into (LOCKED) */
			if (!pg->refcount && !(pg->flags & KVMM_PG_LOCKED))
				return fail(why, len, "frame %u: mapped by no one", f);
			if (pg->flags & (KVMM_PG_LRU | KVMM_PG_BUDDY_HEAD))
				return fail(why, len, "frame %u: mapped with flags %#x", f,
					    pg->flags);
			if (pg->ns_id)
				used[pg->ns_id]++;
			break;
		case KVMM_PAGE_CACHED:
			if (pg->refcount || !(pg->flags & KVMM_PG_SEALED) ||
			    !(pg->flags & KVMM_PG_LRU))
				return fail(why, len, "frame %u: cached with refcount %u flags %#x",
					    f, pg->refcount, pg->flags);
			if (pg->ns_id)
				cached[pg->ns_id]++;
			break;
		}
		if (pg->flags & KVMM_PG_SEALED)
			sealed++;
	}

	for (i = 0; i < KVMM_PAGE_STATE_COUNT; i++) {
		if (nr_state[i] != pool->nr_state[i])
			return fail(why, len, "%u frames %s, nr_state says %u", nr_state[i],
				    kvmm_page_state_name(i), pool->nr_state[i]);
		total += pool->nr_state[i];
	}
	if (total != pool->nframes)
		return fail(why, len, "nr_state sums to %u of %u frames", total, pool->nframes);
	if (pool->lru.nr_active + pool->lru.nr_inactive != nr_state[KVMM_PAGE_CACHED])
		return fail(why, len, "LRU holds %u pages, %u are cached",
			    pool->lru.nr_active + pool->lru.nr_inactive,
			    nr_state[KVMM_PAGE_CACHED]);

	for (i = 1; i < KVMM_MAX_NS; i++) {
		const struct kvmm_ns *ns = pool->ns[i];

		if (!ns)
			continue;
		if (ns->id != i || ns->pool != pool)
			return fail(why, len, "ns slot %u holds ns %u", i, ns->id);
		if (ns->used != used[i] || ns->cached != cached[i])
			return fail(why, len, "ns %s: used %u cached %u, recount %u and %u",
				    ns->name, ns->used, ns->cached, used[i], cached[i]);
	}
	/* entries of swapped pages name a slot, not a frame */
	if (sealed + kvmm_swap_nr_ents(pool) != kvmm_pagecache_count(pool))
		return fail(why, len, "%u sealed frames + %u swapped, %u page cache entries",
			    sealed, kvmm_swap_nr_ents(pool), kvmm_pagecache_count(pool));
	return 0;
}

int kvmm_check_invariants(struct kvmm_pool *pool, char *why, size_t whylen)
{
	struct frame_seen *seen;
	struct kvmm_aspace *as;
	int ret;

	if (why && whylen)
		why[0] = '\0';
	if (!pool)
		return -EINVAL;
	seen = calloc(pool->nframes, sizeof(*seen));
	if (!seen)
		return -ENOMEM;

	ret = check_buddy(pool, seen, why, whylen);
	if (ret)
		goto out;
	ret = check_mags(pool, seen, why, whylen);
	if (ret)
		goto out;
	ret = check_lru_list(pool, seen, true, why, whylen);
	if (ret)
		goto out;
	ret = check_lru_list(pool, seen, false, why, whylen);
	if (ret)
		goto out;
	list_for_each_entry (as, &pool->aspaces, node) {
		const struct kvmm_seq *seq;
		uint32_t nseqs = 0;

		if (as->pool != pool || !as->ns || pool->ns[as->ns->id] != as->ns) {
			ret = fail(why, whylen, "aspace %u: bad pool or namespace", as->id);
			goto out;
		}
		list_for_each_entry (seq, &as->seqs, node) {
			if (seq->as != as) {
				ret = fail(why, whylen, "seq %llu: not of aspace %u",
					   (unsigned long long)seq->id, as->id);
				goto out;
			}
			ret = check_seq(pool, seq, seen, why, whylen);
			if (ret)
				goto out;
			nseqs++;
		}
		if (nseqs != as->nr_seqs) {
			ret = fail(why, whylen, "aspace %u: %u seqs listed, %u counted", as->id,
				   nseqs, as->nr_seqs);
			goto out;
		}
	}
	ret = check_frames(pool, seen, why, whylen);
	if (ret)
		goto out;
	ret = kvmm_pagecache_check(pool, why, whylen);
	if (ret)
		goto out;
	ret = kvmm_swap_check(pool, why, whylen);
	if (ret)
		goto out;
	/* with the entries sound: each sequence's sealed blocks are one reachable chain */
	list_for_each_entry (as, &pool->aspaces, node) {
		const struct kvmm_seq *seq;

		list_for_each_entry (seq, &as->seqs, node) {
			ret = kvmm_pagecache_check_seq(seq, why, whylen);
			if (ret)
				goto out;
		}
	}
out:
	free(seen);
	return ret;
}
