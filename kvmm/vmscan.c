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
	kvmm_pagecache_remove(pool, pg);
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	/* still CACHED: kvmm_free_page uncharges ns->cached */
	kvmm_free_page(pool, pg, NULL);
	pool->stat[KVMM_STAT_PGSTEAL]++;
}

static inline bool skip_page(const struct kvmm_page *pg, const struct kvmm_ns *ns)
{
	return (ns && pg->ns_id != ns->id) || (pg->flags & KVMM_PG_LOCKED);
}

/* One pass over the inactive list from the tail; returns the number evicted (<= want). */
static uint32_t shrink_inactive(struct kvmm_pool *pool, const struct kvmm_ns *ns, uint32_t want)
{
	struct kvmm_page *pg, *prev;
	uint32_t got = 0;

	list_for_each_entry_safe_reverse (pg, prev, &pool->lru.inactive, lru) {
		if (skip_page(pg, ns))
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
		if (skip_page(pg, ns))
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
