// SPDX-License-Identifier: MIT
/*
 * kvmm/vmscan.c - the LRU lists of cached pages and reclaim.
 *
 * Sealed pages that no sequence maps (state CACHED) are the only reclaimable memory: they
 * hold KV that a future prompt may reuse, but nobody needs them now.  They sit on one of two
 * per-pool lists, newest at the head, like Linux's active and inactive file LRUs:
 *
 *   - a page becomes CACHED (last mapper gone) at the head of the inactive list, keeping the
 *     REFERENCED bit it got if it was reused while mapped; a page reused twice in a row
 *     (REFERENCED when hit again) was promoted (ACTIVE) and goes to the active list instead;
 *   - reclaim scans the inactive list from the tail: a REFERENCED page gets a second chance
 *     and moves to the active head (PGACTIVATE); any other page is evicted: taken out of
 *     the page cache, its entry freed and the frame freed to the buddy (PGSCAN, PGSTEAL);
 *   - when the inactive list is shorter than the active one, pages move from the active
 *     tail to the inactive head with REFERENCED cleared (PGDEACTIVATE), so that a working
 *     set that stopped being used ages out in two steps, not one.
 *
 * A cache hit (lookup) takes the page off its list (it is MAPPED again, charged as used)
 * and marks it accessed.  Reclaim may be restricted to one namespace (its limit is reached,
 * or it is being destroyed): pages of others are passed over and not counted as scanned.
 * kvmm_reclaim() returns 0 only when nothing (of that namespace) is cached at all, which
 * is when the allocator reports -ENOMEM.  Locking: the pool lock (mm.h).
 *
 * kvmm_shrink() is the whole reclaim order on top of that (Documentation/mm/reclaim.md),
 * used by direct reclaim under min and by kvswapd (kswapd.c) between low and high:
 *   1. cached pages: the eviction above demotes a page to the highest-priority swap tier
 *      with room, so its prefix survives; when that tier is full, its oldest pages first move
 *      down to the next tier (host -> NVMe) so the top tier keeps taking the newest; with no
 *      tier, or no room anywhere, the page is dropped;
 *   1b. the owner's idle frames: registered shrinkers (shrinker.c; kvmmd's client magazines);
 *   1c. write-back in flight (kvswapd's copies, made without the lock): finished, waiting for
 *      the copies, since those frames are about to come back - never -ENOMEM meanwhile;
 *   2. sequences: unpinned pages that only one sequence maps, whole sequences at a time (a
 *      step needs all of a sequence, so half of one is worth nothing), lowest namespace
 *      priority, then lowest sequence priority, then youngest (highest id) first, the way a
 *      scheduler preempts the request that arrived last; when the victim's own pages are not
 *      enough, the sealed pages it shares with other sequences go out of all of them
 *      (kvmm_mm_seq_swap_out_shared: a shared prefix);
 *   3. nothing left: kvmm_out_of_memory() picks a victim the same way (preferring one that
 *      is not pinned for the running step, and only one whose end gives something back: a
 *      resident page it alone maps, or a swap slot) and reports it to the pool owner's oom hook; the
 *      allocation that got there fails with -ENOMEM.
 * Swap I/O never nests: inside a swap operation (a fault-in's frame allocation) or inside
 * kvmm_shrink() itself, only step 1's dropping runs, and of 1c only the write-backs that
 * change no mapping (pages whose sequence went away meanwhile).
 */
#include "compiler.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

void kvmm_lru_add(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	KVMM_BUG_ON((pg->flags & KVMM_PG_LRU) || pg->state != KVMM_PAGE_CACHED);
	if (pg->flags & KVMM_PG_ACTIVE) {
		list_add(&pg->lru, &pool->lru.active);
		pool->lru.nr_active++;
	} else {
		list_add(&pg->lru, &pool->lru.inactive);
		pool->lru.nr_inactive++;
	}
	pg->flags |= KVMM_PG_LRU;
}

void kvmm_lru_del(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	KVMM_BUG_ON(!(pg->flags & KVMM_PG_LRU));
	list_del_init(&pg->lru);
	if (pg->flags & KVMM_PG_ACTIVE)
		pool->lru.nr_active--;
	else
		pool->lru.nr_inactive--;
	pg->flags &= ~KVMM_PG_LRU;
}

/* inactive -> active head (second chance or promotion) */
static void activate(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	list_move(&pg->lru, &pool->lru.active);
	pool->lru.nr_inactive--;
	pool->lru.nr_active++;
	pg->flags = (pg->flags & ~KVMM_PG_REFERENCED) | KVMM_PG_ACTIVE;
	pool->stat[KVMM_STAT_PGACTIVATE]++;
}

void kvmm_mark_page_accessed(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	if ((pg->flags & (KVMM_PG_REFERENCED | KVMM_PG_ACTIVE)) != KVMM_PG_REFERENCED) {
		pg->flags |= KVMM_PG_REFERENCED;
		return;
	}
	/* reused again before reclaim looked at it: promote */
	if (pg->flags & KVMM_PG_LRU) {
		activate(pool, pg);
		return;
	}
	pg->flags = (pg->flags & ~KVMM_PG_REFERENCED) | KVMM_PG_ACTIVE;
	pool->stat[KVMM_STAT_PGACTIVATE]++;
}

static void evict(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	/* only unmapped pages are on the LRU, and a pin always comes with a mapping */
	KVMM_BUG_ON(pg->refcount || pg->pincount);
	kvmm_lru_del(pool, pg);
	/* a swap tier with room keeps the prefix: demote instead of dropping (swapfile.c) */
	if (pool->swap && !kvmm_swap_demote_page(pool, pg)) {
		pool->stat[KVMM_STAT_PGSTEAL]++;
		return;
	}
	if (pool->hooks && pool->hooks->demote && !kvmm_pagecache_ent_orphan(pg->cache) &&
	    pool->hooks->demote(pool, pg->cache, NULL)) {
		void *bytes = kvmm_pool_frame_addr(pool, kvmm_page_to_frame(pool, pg));

		/*
		 * The tiers are full and the owner takes pages leaving them (its remote tier):
		 * the lowest tier's oldest cached pages go there and this one takes their place;
		 * with nothing to push out (or no tier), this page goes there itself.
		 */
		if (pool->swap && kvmm_swap_push_out(pool, KVMM_SWAP_PUSH_OUT) > 0 &&
		    !kvmm_swap_demote_page(pool, pg)) {
			pool->stat[KVMM_STAT_PGSTEAL]++;
			return;
		}
		if (bytes)
			pool->hooks->demote(pool, pg->cache, bytes);
	}
	kvmm_pagecache_remove(pool, pg);
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	/* still CACHED: kvmm_free_page uncharges ns->cached */
	kvmm_free_page(pool, pg, NULL);
	pool->stat[KVMM_STAT_PGSTEAL]++;
}

bool kvmm_ns_protected(const struct kvmm_pool *pool, const struct kvmm_ns *ns, unsigned int level,
		       uint32_t nr)
{
	uint64_t charged, floor;

	if (!ns || level == KVMM_PROT_NONE || ns == pool->reclaim_for)
		return false;
	floor = level == KVMM_PROT_LOW ? max(ns->min, ns->low) : ns->min;
	if (!floor)
		return false;
	charged = (uint64_t)ns->used + ns->cached;
	return charged < floor + (uint64_t)(nr ? nr : 1);
}

static inline bool skip_page(const struct kvmm_pool *pool, const struct kvmm_page *pg,
			     const struct kvmm_ns *ns)
{
	if ((ns && pg->ns_id != ns->id) || (pg->flags & KVMM_PG_LOCKED))
		return true;
	/* global reclaim: a protected namespace's pages are passed over, not scanned */
	return !ns && pool->reclaim_prot && pg->ns_id && pg->ns_id < KVMM_MAX_NS &&
	       kvmm_ns_protected(pool, pool->ns[pg->ns_id], pool->reclaim_prot, 1);
}

/* One pass over the inactive list from the tail; returns the number evicted (<= want). */
static uint32_t shrink_inactive(struct kvmm_pool *pool, const struct kvmm_ns *ns, uint32_t want)
{
	struct kvmm_page *pg, *prev;
	uint32_t got = 0;

	list_for_each_entry_safe_reverse (pg, prev, &pool->lru.inactive, lru) {
		if (skip_page(pool, pg, ns))
			continue;
		pool->stat[KVMM_STAT_PGSCAN]++;
		if (pg->flags & KVMM_PG_REFERENCED) {
			activate(pool, pg);
			continue;
		}
		evict(pool, pg);
		if (++got == want)
			break;
	}
	return got;
}

/* Move up to @want pages from the active tail to the inactive head, unreferenced. */
static uint32_t deactivate(struct kvmm_pool *pool, const struct kvmm_ns *ns, uint32_t want)
{
	struct kvmm_page *pg, *prev;
	uint32_t moved = 0;

	if (!want)
		return 0;
	list_for_each_entry_safe_reverse (pg, prev, &pool->lru.active, lru) {
		if (skip_page(pool, pg, ns))
			continue;
		list_move(&pg->lru, &pool->lru.inactive);
		pool->lru.nr_active--;
		pool->lru.nr_inactive++;
		pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
		pool->stat[KVMM_STAT_PGDEACTIVATE]++;
		if (++moved == want)
			break;
	}
	return moved;
}

uint32_t kvmm_reclaim(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n)
{
	uint32_t freed = 0;

	if (!pool || !n)
		return 0;
	/* keep the lists about even, so the active list cannot hoard the whole cache */
	if (pool->lru.nr_inactive < pool->lru.nr_active)
		deactivate(pool, NULL, (pool->lru.nr_active - pool->lru.nr_inactive + 1) / 2);

	/*
	 * Each round either evicts or moves unreferenced pages onto the inactive list, which
	 * the next round evicts; it stops when neither list has a page of the namespace.
	 */
	while (freed < n) {
		freed += shrink_inactive(pool, ns, n - freed);
		if (freed >= n || !deactivate(pool, ns, n - freed))
			break;
	}
	if (freed)
		kvmm_trace_event(KVMM_TR_RECLAIM, pool, 0, ns ? ns->id : 0, 0, KVMM_TRACE_NONE,
				 freed);
	return freed;
}

bool kvmm_reclaim_drop_only(const struct kvmm_pool *pool)
{
	return pool->reclaim_inline && !pool->reclaim_nest &&
	       !kvmm_swap_tiers((struct kvmm_pool *)pool, (unsigned int[1]){0}, 1);
}

static uint32_t reclaim_protected(struct kvmm_pool *pool, uint32_t n, bool keep_low)
{
	uint32_t freed;

	if (!pool || !n)
		return 0;
	/* first what no protection covers, then what only low covers; what min covers stays */
	pool->reclaim_prot = KVMM_PROT_LOW;
	freed = kvmm_reclaim(pool, NULL, n);
	if (freed < n && !keep_low) {
		pool->reclaim_prot = KVMM_PROT_MIN;
		freed += kvmm_reclaim(pool, NULL, n - freed);
	}
	pool->reclaim_prot = KVMM_PROT_NONE;
	return freed;
}

uint32_t kvmm_reclaim_protected(struct kvmm_pool *pool, uint32_t n)
{
	return reclaim_protected(pool, n, false);
}

/* ---- the reclaim order: cache, tiers, sequences, OOM ----------------------------------- */

static inline int ns_prio(struct kvmm_seq *seq)
{
	return seq->as->ns ? seq->as->ns->priority : 0;
}

/* Whether @a should go before @b: lower namespace priority, lower priority, younger. */
static bool seq_before(struct kvmm_seq *a, struct kvmm_seq *b)
{
	if (!b)
		return true;
	if (ns_prio(a) != ns_prio(b))
		return ns_prio(a) < ns_prio(b);
	if (a->priority != b->priority)
		return a->priority < b->priority;
	return a->id > b->id;
}

static inline struct kvmm_page *pte_page(struct kvmm_pool *pool, uint64_t pte)
{
	uint32_t f = kvmm_pte_frame(pte);

	return f == KVMM_FRAME_NONE ? NULL : kvmm_frame_to_page(pool, f);
}

uint32_t kvmm_seq_nr_resident(const struct kvmm_seq *seq)
{
	uint32_t b, n = 0;

	for (b = 0; b < seq->nblocks; b++)
		n += kvmm_pte_frame(seq->pte[b]) != KVMM_FRAME_NONE;
	return n;
}

/*
 * A page swap-out would take: unpinned, not in I/O, mapped by this sequence alone or (with a
 * swap tier) sealed and cached while other sequences map it too.
 */
static bool seq_swappable(struct kvmm_pool *pool, const struct kvmm_seq *seq)
{
	uint32_t b;

	if (seq->flags & (KVMM_SEQ_F_NORECLAIM | KVMM_SEQ_F_PREEMPTED))
		return false;
	for (b = 0; b < seq->nblocks; b++) {
		struct kvmm_page *pg = pte_page(pool, seq->pte[b]);

		if (pg && pg->refcount == 1 && !pg->pincount &&
		    !(pg->flags & (KVMM_PG_LOCKED | KVMM_PG_POISONED)))
			return true;
		if (pg && pg->refcount > 1 && kvmm_swap_shared_candidate(pg))
			return true;
	}
	return false;
}

/*
 * The top tier is short of @n free slots: move its oldest pages down (host -> NVMe), so that
 * what is reclaimed now lands on the fastest tier.  Only with two tiers or more.
 */
static void make_tier_room(struct kvmm_pool *pool, uint32_t n)
{
	struct kvmm_swap_tier_info ti;
	unsigned int ids[2];
	uint64_t room;
	int ret;

	if (kvmm_swap_tiers(pool, ids, 2) < 2 || kvmm_swap_tier_info(pool, ids[0], &ti))
		return;
	room = ti.nslots - ti.used;
	if (room >= n)
		return;
	ret = kvmm_swap_move_down(pool, ids[0], (uint32_t)(n - room));
	if (ret > 0)
		pool->stat[KVMM_STAT_SWAP_MOVEDOWN] += (uint64_t)ret;
}

/*
 * Swap out whole sequences, victims in reclaim order, until @want frames were freed (or, with
 * @async, put under writeback: kvmm_swap_writeback() frees them).
 */
static uint32_t shrink_seqs(struct kvmm_pool *pool, uint32_t want, bool async, bool keep_low)
{
	unsigned int level = KVMM_PROT_LOW;
	uint32_t freed = 0;

	while (freed < want) {
		struct kvmm_seq *seq, *victim = NULL;
		struct kvmm_aspace *as;
		int ret;

		/*
		 * A namespace that the swap-out would take below its low is passed over while
		 * another has something to give; below its min, never (but for its own sake).
		 */
		list_for_each_entry (as, &pool->aspaces, node)
			list_for_each_entry (seq, &as->seqs, node)
				if (seq_before(seq, victim) && seq_swappable(pool, seq) &&
				    !kvmm_ns_protected(pool, as->ns, level,
						       kvmm_seq_nr_resident(seq)))
					victim = seq;
		if (!victim && level == KVMM_PROT_LOW && !keep_low) {
			level = KVMM_PROT_MIN;
			continue;
		}
		if (!victim)
			break;
		make_tier_room(pool, kvmm_seq_nr_resident(victim));
		if (async)
			ret = kvmm_mm_seq_swap_out_async(victim, 0, victim->nblocks);
		else
			ret = kvmm_mm_seq_swap_out(victim, 0, victim->nblocks);
		/*
		 * Still short: the pages it shares with other sequences (a sealed prefix) go out
		 * of all of them, synchronously (Documentation/mm/reclaim.md, shared pages).
		 */
		if (freed + (ret > 0 ? (uint32_t)ret : 0) < want) {
			int sh = kvmm_mm_seq_swap_out_shared(victim, 0, victim->nblocks);

			if (sh > 0) {
				freed += (uint32_t)sh;
				ret = ret > 0 ? ret : 0;
				if (!ret)
					continue;
			}
		}
		if (ret <= 0)
			break; /* no room on any tier, or the write failed: nothing lost, stop */
		kvmm_trace_event(KVMM_TR_SWAPOUT, pool, 0, victim->as->ns ? victim->as->ns->id : 0,
				 victim->id, KVMM_TRACE_NONE, (uint64_t)ret);
		/* async: seq_swapout is counted, and the mirror told, as each write completes */
		if (!async) {
			pool->stat[KVMM_STAT_SEQ_SWAPOUT] += (uint64_t)ret;
			if (pool->hooks && pool->hooks->seq_changed)
				pool->hooks->seq_changed(pool, victim, 0);
		}
		/* each page's frame went to the buddy or the owner's magazine: both are free */
		freed += (uint32_t)ret;
	}
	return freed;
}

uint32_t kvmm_shrink(struct kvmm_pool *pool, uint32_t n, unsigned int flags)
{
	bool swap_ok;
	uint32_t freed;

	if (!pool || !n)
		return 0;
	swap_ok = pool->swap && !kvmm_swap_busy(pool) && !pool->reclaim_nest &&
		  kvmm_swap_tiers(pool, (unsigned int[1]){0}, 1);
	pool->reclaim_nest++;
	if (swap_ok && pool->lru.nr_active + pool->lru.nr_inactive)
		make_tier_room(pool, n);
	freed = reclaim_protected(pool, n, flags & KVMM_SHRINK_KEEP_LOW);
	/* frames the owner parks idle (client magazines) before anything someone uses */
	if (freed < n)
		freed += kvmm_run_shrinkers(pool, NULL, n - freed);
	/*
	 * Write-back in flight (kvswapd's copies): those frames are about to come back, so
	 * finish it rather than fail or take more.  Only at the top: inside a swap operation or
	 * reclaim no sequence may go out under the caller, so there only the write-backs that
	 * change no mapping are finished (a freed sequence's pages).
	 */
	if (freed < n && !(flags & KVMM_SHRINK_ASYNC) && kvmm_swap_nr_writeback(pool))
		freed += (uint32_t)kvmm_swap_writeback_wait(
			pool, swap_ok && !(flags & KVMM_SHRINK_NOSWAP));
	if (freed < n && swap_ok && !(flags & KVMM_SHRINK_NOSWAP))
		freed += shrink_seqs(pool, n - freed, flags & KVMM_SHRINK_ASYNC,
				     flags & KVMM_SHRINK_KEEP_LOW);
	/*
	 * Still short, the tiers full of demoted cache, and an allocation about to fail: a
	 * sequence's pages are data and go before cache, so dropped cached pages make room for
	 * them rather than a preemption (kvmm_out_of_memory) throwing a sequence's work away.
	 * Only then: not for kvswapd's watermarks (ASYNC), which would wear the tiers' cache
	 * (the warm-restart file's prefixes among it) down to keep frames free that nobody
	 * asked for; and not while a step faults pages in, the cache being what it reads.
	 */
	if (freed < n && swap_ok && !(flags & (KVMM_SHRINK_NOSWAP | KVMM_SHRINK_ASYNC)) &&
	    !pool->nr_faulting && kvmm_pool_nr_free(pool) <= pool->wmark_min &&
	    kvmm_swap_make_room(pool, n - freed))
		freed += shrink_seqs(pool, n - freed, flags & KVMM_SHRINK_ASYNC,
				     flags & KVMM_SHRINK_KEEP_LOW);
	pool->reclaim_nest--;
	return freed;
}

struct kvmm_seq *kvmm_out_of_memory(struct kvmm_pool *pool)
{
	struct kvmm_seq *seq, *victim = NULL;
	bool victim_pinned = true, victim_low = true;
	struct kvmm_aspace *as;

	list_for_each_entry (as, &pool->aspaces, node) {
		/* another namespace's pressure never preempts what its min covers */
		if (kvmm_ns_protected(pool, as->ns, KVMM_PROT_MIN, 1))
			continue;
		list_for_each_entry (seq, &as->seqs, node) {
			bool pinned = false, frees = false;
			bool low = kvmm_ns_protected(pool, as->ns, KVMM_PROT_LOW, 1);
			uint32_t b;

			if (!seq->nblocks ||
			    (seq->flags &
			     (KVMM_SEQ_F_NORECLAIM | KVMM_SEQ_F_PREEMPTED | KVMM_SEQ_F_FAULTING)))
				continue;
			for (b = 0; b < seq->nblocks; b++) {
				struct kvmm_page *pg = pte_page(pool, seq->pte[b]);

				pinned |= pg && pg->pincount;
				/* a frame it alone maps, or a swap slot (room for another's pages) */
				frees |= (pg && pg->refcount == 1) || kvmm_pte_is_swap(seq->pte[b]);
			}
			/*
			 * Every page resident and shared with other sequences: preempting it would
			 * throw its work away and give nothing back, and its owner would map the
			 * same pages again at once.
			 */
			if (!frees)
				continue;
			/*
			 * A sequence the running step needs goes last, and while a step faults a
			 * swapped sequence back in, not at all: it is as needed as that one.
			 */
			if (pinned && pool->nr_faulting)
				continue;
			if (victim && pinned && !victim_pinned)
				continue;
			/* then one that low protects goes only when no other can */
			if (victim && pinned == victim_pinned && low && !victim_low)
				continue;
			if ((victim && !pinned && victim_pinned) ||
			    (victim && pinned == victim_pinned && !low && victim_low) ||
			    seq_before(seq, victim)) {
				victim = seq;
				victim_pinned = pinned;
				victim_low = low;
			}
		}
	}
	if (!victim)
		return NULL;
	victim->flags |= KVMM_SEQ_F_PREEMPTED;
	pool->stat[KVMM_STAT_OOM]++;
	kvmm_trace_event(KVMM_TR_OOM, pool, 0, victim->as->ns ? victim->as->ns->id : 0, victim->id,
			 KVMM_TRACE_NONE, kvmm_seq_nr_resident(victim));
	if (pool->hooks && pool->hooks->oom)
		pool->hooks->oom(pool, victim, kvmm_seq_nr_resident(victim));
	return victim;
}
