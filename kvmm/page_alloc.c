// SPDX-License-Identifier: MIT
/*
 * kvmm/page_alloc.c - the page allocator: pools of frames, the buddy allocator, per-owner
 * magazines, kvmm_alloc_page()/kvmm_free_page() and the event counters.
 *
 * Every frame is in exactly one state and pool->nr_state[] counts them exactly.  The
 * transitions this file makes (the page tables and reclaim move MAPPED <-> CACHED):
 *
 *   FREE -> MAGAZINE             mag_refill(): a batch from the buddy into an empty magazine
 *   MAGAZINE -> FREE             mag_drain(): a batch of the coldest back to the buddy
 *   MAGAZINE -> MAPPED           kvmm_alloc_page() through a magazine
 *   FREE -> MAPPED               kvmm_alloc_page() without one, kvmm_buddy_alloc()
 *   MAPPED|CACHED -> MAGAZINE    kvmm_free_page() through a magazine
 *   MAPPED|CACHED -> FREE        kvmm_free_page() without one, kvmm_buddy_free()
 *
 * A free block of 2^o frames starting at frame f (f aligned to 2^o) sits on free_area[o];
 * only its head carries KVMM_PG_BUDDY_HEAD and the order, every frame of it is FREE.  Its
 * buddy is the block at f ^ 2^o: when that is a free head of the same order the two merge
 * into one block of order o + 1 (the pool's frame count need not be a power of two, so a
 * buddy past the end simply never exists and the tail stays in smaller blocks).  A split
 * hands the upper half back to the next lower list.  Free lists are LIFO so that the frame
 * freed last, still warm, is the next one handed out.
 *
 * Magazines are the per-cpu lists of this allocator: one per owner (client), a list of
 * MAGAZINE frames moved in batches, so that the common allocation and free are a pop and a
 * push with no search.  Frames in magazines are free for the watermarks
 * (kvmm_pool_nr_free()) but not in nr_free, which counts the buddy alone.  A magazine that
 * holds frames is on pool->mags, so an allocation that finds nothing in the buddy or in its
 * own magazine can pull back what other magazines hoard before it gives up.
 *
 * Namespaces are charged at allocation (used) and uncharged at free by state (MAPPED: used,
 * CACHED: cached); the mapping code moves charges between used and cached itself.  A frame
 * remembers whose data it may hold (data_ns) and is scrubbed through the backend before it
 * is handed to another namespace, so KV never leaks across tenants while reuse inside one
 * namespace costs nothing.
 *
 * Locking: none here; the caller serialises every call on a pool (pool->lock), see mm.h.
 * Direct reclaim calls kvmm_reclaim() (vmscan.c), which may call kvmm_free_page() back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

/* ---- names --------------------------------------------------------------------------- */

static const char *const page_state_names[KVMM_PAGE_STATE_COUNT] = {
	[KVMM_PAGE_FREE] = "free",
	[KVMM_PAGE_MAGAZINE] = "magazine",
	[KVMM_PAGE_MAPPED] = "mapped",
	[KVMM_PAGE_CACHED] = "cached",
};

const char *kvmm_page_state_name(enum kvmm_page_state s)
{
	if ((unsigned int)s >= KVMM_PAGE_STATE_COUNT || !page_state_names[s])
		return "unknown";
	return page_state_names[s];
}

/* vmstat-style names: lower case, underscores, stable (kvmmctl and scripts grep them) */
static const char *const stat_names[KVMM_STAT_COUNT] = {
	[KVMM_STAT_ALLOC] = "alloc",
	[KVMM_STAT_FREE] = "free",
	[KVMM_STAT_BUDDY_ALLOC] = "buddy_alloc",
	[KVMM_STAT_BUDDY_FREE] = "buddy_free",
	[KVMM_STAT_BUDDY_SPLIT] = "buddy_split",
	[KVMM_STAT_BUDDY_MERGE] = "buddy_merge",
	[KVMM_STAT_MAG_HIT] = "mag_hit",
	[KVMM_STAT_MAG_REFILL] = "mag_refill",
	[KVMM_STAT_MAG_DRAIN] = "mag_drain",
	[KVMM_STAT_ALLOC_FAIL] = "alloc_fail",
	[KVMM_STAT_COW] = "cow",
	[KVMM_STAT_SEAL] = "seal",
	[KVMM_STAT_CACHE_HIT] = "cache_hit",
	[KVMM_STAT_CACHE_MISS] = "cache_miss",
	[KVMM_STAT_CACHE_COLLIDE] = "cache_collide",
	[KVMM_STAT_CACHE_STALE] = "cache_stale",
	[KVMM_STAT_CACHE_ORPHAN] = "cache_orphan",
	[KVMM_STAT_CACHE_REPARENT] = "cache_reparent",
	[KVMM_STAT_PGSCAN] = "pgscan",
	[KVMM_STAT_PGSTEAL] = "pgsteal",
	[KVMM_STAT_PGACTIVATE] = "pgactivate",
	[KVMM_STAT_PGDEACTIVATE] = "pgdeactivate",
	[KVMM_STAT_DIRECT_RECLAIM] = "direct_reclaim",
	[KVMM_STAT_NS_LIMIT_HIT] = "namespace_limit_hit",
	[KVMM_STAT_SCRUB] = "scrub",
	[KVMM_STAT_SWPOUT] = "pswpout",
	[KVMM_STAT_SWPIN] = "pswpin",
	[KVMM_STAT_REFAULT] = "workingset_refault",
	[KVMM_STAT_SWAP_FAIL] = "swap_fail",
	[KVMM_STAT_SWAP_DEMOTE] = "swap_demote",
	[KVMM_STAT_SWAP_RA] = "swap_ra",
	[KVMM_STAT_SWAP_CACHE_HIT] = "swap_cache_hit",
	[KVMM_STAT_SWAP_DROP] = "swap_drop",
	[KVMM_STAT_KSWAPD_WAKE] = "kswapd_wake",
	[KVMM_STAT_KSWAPD_STEAL] = "kswapd_steal",
	[KVMM_STAT_SWAP_MOVEDOWN] = "swap_movedown",
	[KVMM_STAT_SEQ_SWAPOUT] = "seq_swapout",
	[KVMM_STAT_OOM] = "oom",
	[KVMM_STAT_SHRINKER_FREED] = "shrinker_freed",
	[KVMM_STAT_SWAP_CLEAN] = "swap_clean_out",
	[KVMM_STAT_ALLOC_BLOCK] = "alloc_block",
	[KVMM_STAT_SWAP_CSUM_BAD] = "swap_csum_bad",
	[KVMM_STAT_RECLAIM_INLINE] = "reclaim_inline",
	[KVMM_STAT_BUDGET_RECLAIM] = "budget_reclaim",
	[KVMM_STAT_BUDGET_LOW] = "budget_low",
	[KVMM_STAT_BUDGET_DISCARD] = "budget_discard",
	[KVMM_STAT_CACHE_ADOPT] = "cache_adopt",
	[KVMM_STAT_BUDGET_BG] = "budget_background",
	[KVMM_STAT_LOOKUP_RECLAIM] = "lookup_reclaim",
	[KVMM_STAT_SWAP_SHARED] = "swap_shared",
	[KVMM_STAT_FAR_PIN] = "far_pin",
	[KVMM_STAT_FAR_HELD] = "far_held",
	[KVMM_STAT_FAR_MAP] = "far_map",
};

const char *kvmm_stat_name(enum kvmm_stat s)
{
	if ((unsigned int)s >= KVMM_STAT_COUNT || !stat_names[s])
		return "unknown";
	return stat_names[s];
}

/* ---- frame state ----------------------------------------------------------------------- */

static inline void set_state(struct kvmm_pool *pool, struct kvmm_page *pg,
			     enum kvmm_page_state state)
{
	pool->nr_state[pg->state]--;
	pool->nr_state[state]++;
	pg->state = (uint8_t)state;
}

/* ---- buddy allocator --------------------------------------------------------------------- */

static inline void free_area_add(struct kvmm_pool *pool, struct kvmm_page *pg, unsigned int order)
{
	pg->flags |= KVMM_PG_BUDDY_HEAD;
	pg->order = (uint8_t)order;
	list_add(&pg->lru, &pool->free_area[order]);
	pool->nr_free_blocks[order]++;
}

static inline void free_area_del(struct kvmm_pool *pool, struct kvmm_page *pg, unsigned int order)
{
	list_del_init(&pg->lru);
	pg->flags &= ~KVMM_PG_BUDDY_HEAD;
	pg->order = 0;
	pool->nr_free_blocks[order]--;
}

/*
 * The daemon-wide budget (budget.c) charges a pool for every frame whose memory it holds:
 * every frame out of the buddy, and the free frames not yet given back (KVMM_PG_RESIDENT,
 * nr_free_resident of them).  false when @n more would go past its limit (nothing charged).
 */
static bool budget_charge(struct kvmm_pool *pool, uint32_t n)
{
	struct kvmm_budget *b = pool->budget;

	if (!n)
		return true;
	/* not overcommitted: the pools together cannot pass the limit (budget_pending) */
	if (!__atomic_load_n(&b->discard, __ATOMIC_RELAXED)) {
		__atomic_store_n(&pool->budget_pending, pool->budget_pending + n, __ATOMIC_RELAXED);
		pool->budget_charged += n;
		return true;
	}
	if (__atomic_add_fetch(&b->used, n, __ATOMIC_RELAXED) > b->limit) {
		__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
		kvmm_wakeup_kswapd_budget(pool);
		return false;
	}
	pool->budget_charged += n;
	/* under the budget's low point: kvswapd brings it back over its high (budget.c) */
	if (unlikely(kvmm_budget_below_low(b)))
		kvmm_wakeup_kswapd_budget(pool);
	return true;
}

/* Discard free frames [f, f + n), all RESIDENT: their memory goes, their charge with it. */
static void budget_discard(struct kvmm_pool *pool, uint32_t f, uint32_t n)
{
	struct kvmm_budget *b = pool->budget;
	uint32_t i;

	if (pool->be.ops->discard(&pool->be, f, n))
		return;
	kvmm_budget_flush(pool); /* the uncharge below comes out of budget->used */
	for (i = 0; i < n; i++) {
		pool->pages[f + i].flags &= ~KVMM_PG_RESIDENT;
		/* it reads zeroes now: no one's data, no scrub before another namespace's use */
		pool->pages[f + i].data_ns = KVMM_NS_CLEAN;
	}
	pool->nr_free_resident -= n;
	pool->budget_charged -= n;
	__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
	pool->stat[KVMM_STAT_BUDGET_DISCARD] += n;
}

uint32_t kvmm_budget_trim(struct kvmm_pool *pool, uint32_t want)
{
	uint32_t done = 0;
	int o;

	if (!pool->budget || !pool->be.ops->discard || !want)
		return 0;
	/* the coldest first: large merged blocks, and each list from its tail (lists are LIFO) */
	for (o = KVMM_MAX_ORDER - 1; o >= 0 && done < want && pool->nr_free_resident; o--) {
		struct kvmm_page *pg;

		list_for_each_entry_reverse (pg, &pool->free_area[o], lru) {
			uint32_t f = kvmm_page_to_frame(pool, pg), n = UINT32_C(1) << o, i = 0;

			while (i < n && done < want) {
				uint32_t run = 0;

				while (i + run < n && (pg[i + run].flags & KVMM_PG_RESIDENT) &&
				       done + run < want)
					run++;
				if (run) {
					budget_discard(pool, f + i, run);
					done += run;
					i += run;
				} else {
					i++;
				}
			}
			if (done >= want || !pool->nr_free_resident)
				break;
		}
	}
	return done;
}

/*
 * Frames [f, f + n) went back to the buddy: still charged (their memory is still there).
 * While the budget is overcommitted, free frames held past the pool's keep are given back
 * down to half of it, the coldest first (budget_keep_trim, once the block is on its list), so
 * that other pools can have the budget; below the keep, a pool that frees and allocates
 * again (an engine's step) never pays a refault.
 */
static void budget_freed(struct kvmm_pool *pool, uint32_t f, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		pool->pages[f + i].flags |= KVMM_PG_RESIDENT;
	pool->nr_free_resident += n;
}

/* After a block went back (and merged): trim past the keep (budget_freed). */
static void budget_keep_trim(struct kvmm_pool *pool)
{
	if (pool->nr_free_resident > pool->budget_keep &&
	    __atomic_load_n(&pool->budget->discard, __ATOMIC_RELAXED))
		kvmm_budget_trim(pool, pool->nr_free_resident - pool->budget_keep / 2);
}

/*
 * Take a block of 2^order frames and put every frame of it in @state.  The smallest free
 * block that is large enough is split; each split leaves its upper half on the list below.
 */
static struct kvmm_page *buddy_take(struct kvmm_pool *pool, unsigned int order,
				    enum kvmm_page_state state)
{
	struct kvmm_page *pg;
	unsigned int o, i, n;

	for (o = order; o < KVMM_MAX_ORDER; o++)
		if (!list_empty(&pool->free_area[o]))
			break;
	if (unlikely(o == KVMM_MAX_ORDER))
		return NULL;

	pg = list_first_entry(&pool->free_area[o], struct kvmm_page, lru);
	n = 1u << order;
	/*
	 * The frames taken that were given back (not RESIDENT) are charged again.  The budget
	 * spent, the pool's own free frames still resident are given back for them (a trim may
	 * reach this very block: count again).
	 */
	if (pool->budget) {
		uint32_t resident;

		for (;;) {
			for (resident = 0, i = 0; i < n; i++)
				resident += !!(pg[i].flags & KVMM_PG_RESIDENT);
			if (budget_charge(pool, n - resident))
				break;
			if (pool->nr_free_resident <= resident ||
			    !kvmm_budget_trim(pool, n - resident))
				return NULL;
		}
		for (i = 0; i < n; i++)
			pg[i].flags &= ~KVMM_PG_RESIDENT;
		pool->nr_free_resident -= resident;
	}
	free_area_del(pool, pg, o);
	while (o > order) {
		o--;
		free_area_add(pool, pg + (1u << o), o);
		pool->stat[KVMM_STAT_BUDDY_SPLIT]++;
	}

	for (i = 0; i < n; i++) {
		KVMM_BUG_ON(pg[i].state != KVMM_PAGE_FREE);
		pg[i].state = (uint8_t)state;
		if (i)
			INIT_LIST_HEAD(&pg[i].lru);
	}
	pool->nr_state[KVMM_PAGE_FREE] -= n;
	pool->nr_state[state] += n;
	pool->nr_free -= n;
	pool->stat[KVMM_STAT_BUDDY_ALLOC]++;
	return pg;
}

/*
 * Return a block to the buddy and merge it upwards while its buddy is a free block of the
 * same order.  The buddy index f ^ 2^o stays below 2^32 for any order < KVMM_MAX_ORDER.
 */
static void buddy_give(struct kvmm_pool *pool, struct kvmm_page *pg, unsigned int order)
{
	uint32_t f = kvmm_page_to_frame(pool, pg);
	unsigned int i, n = 1u << order;

	KVMM_BUG_ON(order >= KVMM_MAX_ORDER || (f & (n - 1)) || n > pool->nframes - f);
	for (i = 0; i < n; i++) {
		KVMM_BUG_ON(pg[i].state == KVMM_PAGE_FREE);
		pool->nr_state[pg[i].state]--;
		pg[i].state = KVMM_PAGE_FREE;
		pg[i].flags &= KVMM_PG_POISONED;
	}
	pool->nr_state[KVMM_PAGE_FREE] += n;
	pool->nr_free += n;
	pool->stat[KVMM_STAT_BUDDY_FREE]++;
	if (pool->budget)
		budget_freed(pool, f, n);

	while (order < KVMM_MAX_ORDER - 1) {
		uint32_t b = f ^ (UINT32_C(1) << order);
		struct kvmm_page *bp;

		if (b >= pool->nframes)
			break;
		bp = &pool->pages[b];
		if (!(bp->flags & KVMM_PG_BUDDY_HEAD) || bp->order != order)
			break;
		free_area_del(pool, bp, order);
		f &= ~(UINT32_C(1) << order);
		order++;
		pool->stat[KVMM_STAT_BUDDY_MERGE]++;
	}
	free_area_add(pool, &pool->pages[f], order);
	if (pool->budget)
		budget_keep_trim(pool);
}

struct kvmm_page *kvmm_buddy_alloc(struct kvmm_pool *pool, unsigned int order)
{
	struct kvmm_page *pg;
	unsigned int i;

	if (!pool || order >= KVMM_MAX_ORDER) {
		errno = EINVAL;
		return NULL;
	}
	pg = buddy_take(pool, order, KVMM_PAGE_MAPPED);
	if (!pg) {
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < (1u << order); i++) {
		pg[i].refcount = 0;
		pg[i].pincount = 0;
		pg[i].flags = 0;
		pg[i].ns_id = 0;
		pg[i].owner = 0;
		pg[i].ntokens = 0;
		pg[i].cache = NULL;
		pg[i].swap = 0;
		/* whatever the raw user writes, no namespace may see it unscrubbed */
		pg[i].data_ns = KVMM_NS_DEAD;
	}
	return pg;
}

void kvmm_buddy_free(struct kvmm_pool *pool, struct kvmm_page *pg, unsigned int order)
{
	buddy_give(pool, pg, order);
}

int kvmm_buddyinfo(const struct kvmm_pool *pool, char *buf, size_t len)
{
	size_t off = 0;
	unsigned int o;
	int n;

	if (!pool || !buf)
		return -EINVAL;

	/* snprintf returns what it would have written, so a short buffer shows as off >= len */
	n = snprintf(buf, len, "%-6s", "Order:");
	off += (size_t)n;
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		n = snprintf(buf + min(off, len), len - min(off, len), " %7u", o);
		off += (size_t)n;
	}
	n = snprintf(buf + min(off, len), len - min(off, len), "\n%-6s", "Free:");
	off += (size_t)n;
	for (o = 0; o < KVMM_MAX_ORDER; o++) {
		n = snprintf(buf + min(off, len), len - min(off, len), " %7u",
			     pool->nr_free_blocks[o]);
		off += (size_t)n;
	}
	n = snprintf(buf + min(off, len), len - min(off, len), "\n");
	off += (size_t)n;
	if (off >= len)
		return -ENOSPC;
	return (int)off;
}

/* ---- magazines ----------------------------------------------------------------------------- */

int kvmm_magazine_init(struct kvmm_pool *pool, struct kvmm_magazine *mag, uint32_t owner,
		       uint32_t capacity, uint32_t batch)
{
	if (!pool || !mag)
		return -EINVAL;
	if (!capacity && !batch) {
		capacity = KVMM_MAG_DEFAULT_CAPACITY;
		batch = KVMM_MAG_DEFAULT_BATCH;
	}
	if (!batch || batch > capacity)
		return -EINVAL;

	INIT_LIST_HEAD(&mag->frames);
	INIT_LIST_HEAD(&mag->node);
	mag->count = 0;
	mag->capacity = capacity;
	mag->batch = batch;
	mag->owner = owner;
	mag->pool = pool;
	return 0;
}

/* Move up to @n of the coldest frames (the tail) back to the buddy. */
static void mag_drain(struct kvmm_magazine *mag, uint32_t n)
{
	struct kvmm_pool *pool = mag->pool;

	if (!n || !mag->count)
		return;
	while (n-- && mag->count) {
		struct kvmm_page *pg = list_last_entry(&mag->frames, struct kvmm_page, lru);

		list_del_init(&pg->lru);
		mag->count--;
		pg->owner = 0;
		buddy_give(pool, pg, 0);
	}
	if (!mag->count)
		list_del_init(&mag->node);
	pool->stat[KVMM_STAT_MAG_DRAIN]++;
}

/* Take up to a batch of frames from the buddy; returns how many came. */
static uint32_t mag_refill(struct kvmm_magazine *mag)
{
	struct kvmm_pool *pool = mag->pool;
	uint32_t got = 0;

	while (got < mag->batch && mag->count + got < mag->capacity) {
		struct kvmm_page *pg = buddy_take(pool, 0, KVMM_PAGE_MAGAZINE);

		if (!pg)
			break;
		pg->owner = mag->owner;
		list_add_tail(&pg->lru, &mag->frames);
		got++;
	}
	if (got) {
		if (!mag->count)
			list_add(&mag->node, &pool->mags);
		mag->count += got;
		pool->stat[KVMM_STAT_MAG_REFILL]++;
	}
	return got;
}

void kvmm_magazine_drain_all(struct kvmm_magazine *mag)
{
	if (!mag || !mag->pool)
		return;
	mag_drain(mag, mag->count);
}

/* Give back what every magazine but @keep holds; the last resort before ENOMEM. */
static uint32_t drain_other_mags(struct kvmm_pool *pool, struct kvmm_magazine *keep)
{
	struct kvmm_magazine *m, *tmp;
	uint32_t n = 0;

	list_for_each_entry_safe (m, tmp, &pool->mags, node) {
		if (m == keep)
			continue;
		n += m->count;
		mag_drain(m, m->count);
	}
	return n;
}

static inline struct kvmm_page *mag_pop(struct kvmm_magazine *mag)
{
	struct kvmm_page *pg;

	if (unlikely(!mag->count) && !mag_refill(mag))
		return NULL;
	pg = list_first_entry(&mag->frames, struct kvmm_page, lru);
	list_del_init(&pg->lru);
	if (!--mag->count)
		list_del_init(&mag->node);
	pg->owner = 0;
	set_state(mag->pool, pg, KVMM_PAGE_MAPPED);
	mag->pool->stat[KVMM_STAT_MAG_HIT]++;
	return pg;
}

static inline void mag_push(struct kvmm_magazine *mag, struct kvmm_page *pg)
{
	if (unlikely(mag->count >= mag->capacity))
		mag_drain(mag, mag->batch);
	if (!mag->count)
		list_add(&mag->node, &mag->pool->mags);
	set_state(mag->pool, pg, KVMM_PAGE_MAGAZINE);
	pg->owner = mag->owner;
	list_add(&pg->lru, &mag->frames);
	mag->count++;
}

/* ---- allocation ---------------------------------------------------------------------------- */

/*
 * Only an allocation raises used + cached (mapping and sealing move frames between the two),
 * so the high-water mark is kept here: the frames a namespace's pool must hold to run its
 * workload without reclaim, which an admin sizes a pool from (meminfo's Peak).
 */
static inline void ns_note_peak(struct kvmm_ns *ns)
{
	uint32_t charged = ns->used + ns->cached;

	if (charged > ns->peak)
		ns->peak = charged;
}

/*
 * The namespace would go past its limit: evict its own cached pages first, since those are
 * the ones it is entitled to replace, then its clients' idle magazine frames (shrinker.c).
 * True when there is room afterwards.
 */
static bool ns_make_room(struct kvmm_pool *pool, struct kvmm_ns *ns)
{
	uint64_t charged = (uint64_t)ns->used + ns->cached;

	if (charged >= ns->limit)
		kvmm_reclaim(pool, ns, (uint32_t)(charged + 1 - ns->limit));
	/* then what its own clients park in their magazines (shrinker.c) */
	charged = (uint64_t)ns->used + ns->cached;
	if (charged >= ns->limit)
		kvmm_run_shrinkers(
			pool, ns,
			(uint32_t)min_t(uint64_t, charged + 1 - ns->limit, KVMM_RECLAIM_BATCH));
	return (uint64_t)ns->used + ns->cached < ns->limit;
}

/*
 * Taking a frame would go under the min watermark: reclaim just enough cached pages to keep
 * the reserve, at most a batch so one allocation's latency stays bounded.  The background
 * reclaimer (between low and high) is what should keep this rare.
 */
static void direct_reclaim(struct kvmm_pool *pool)
{
	uint32_t free = kvmm_pool_nr_free(pool);
	uint32_t want = pool->wmark_min + 1 - free;

	pool->stat[KVMM_STAT_DIRECT_RECLAIM]++;
	/*
	 * Only dropping to do (kvmm_reclaim_drop_only): a batch towards high, or every
	 * allocation at min pays a reclaim pass for one page (the flow benchmark made 4.7M such
	 * passes in 3 s while kvswapd could not keep up).
	 */
	if (kvmm_reclaim_drop_only(pool)) {
		uint32_t got = kvmm_reclaim_protected(
			pool, clamp_t(uint32_t, pool->wmark_high - free, 1, KVMM_RECLAIM_BATCH));

		pool->stat[KVMM_STAT_RECLAIM_INLINE] += got;
		if (kvmm_pool_nr_free(pool) > pool->wmark_min)
			return;
		free = kvmm_pool_nr_free(pool);
		want = pool->wmark_min + 1 - free;
	}
	/*
	 * The whole reclaim order: cache (demote or drop), write-back in flight finished (waiting
	 * for kvswapd's copies: a pool that looks empty only because of them is not out of
	 * memory), then sequences swapped out.
	 */
	kvmm_shrink(pool, clamp_t(uint32_t, want, 1, KVMM_RECLAIM_BATCH), 0);
}

/*
 * The budget, not the pool, is short, and @ns is under its min: the budget's reclaim already
 * preempted in a pool above its min (budget.c); its own sequences are not the ones to go.
 */
static bool budget_min_short(const struct kvmm_pool *pool, const struct kvmm_ns *ns)
{
	return pool->budget && pool->nr_free && ns && (uint64_t)ns->used + ns->cached < ns->min;
}

/* Nothing in the buddy nor in @mag: take back other magazines' frames and try once more. */
static struct kvmm_page *alloc_slow(struct kvmm_pool *pool, struct kvmm_magazine *mag)
{
	if (!drain_other_mags(pool, mag))
		return NULL;
	return mag ? mag_pop(mag) : buddy_take(pool, 0, KVMM_PAGE_MAPPED);
}

static int scrub_frame(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	int ret = 0;

	if (pool->be.ops->scrub)
		ret = pool->be.ops->scrub(&pool->be, kvmm_page_to_frame(pool, pg));
	if (!ret) {
		pg->data_ns = KVMM_NS_CLEAN;
		pool->stat[KVMM_STAT_SCRUB]++;
	}
	return ret;
}

/* A frame just allocated for namespace @ns_id: unmapped, unpinned, dirty, holding its data. */
static void page_init(struct kvmm_page *pg, uint16_t ns_id)
{
	pg->data_ns = ns_id;
	pg->refcount = 0;
	pg->pincount = 0;
	pg->flags = KVMM_PG_DIRTY;
	pg->ns_id = ns_id;
	pg->ntokens = 0;
	pg->cache = NULL;
	pg->swap = 0;
}

struct kvmm_page *kvmm_alloc_page(struct kvmm_pool *pool, struct kvmm_ns *ns,
				  struct kvmm_magazine *mag)
{
	struct kvmm_page *pg;
	uint16_t ns_id = 0;

	if (ns) {
		KVMM_BUG_ON(ns->id >= KVMM_MAX_NS || pool->ns[ns->id] != ns);
		if (unlikely(ns->limit && (uint64_t)ns->used + ns->cached >= ns->limit) &&
		    !ns_make_room(pool, ns)) {
			pool->stat[KVMM_STAT_NS_LIMIT_HIT]++;
			goto out_fail;
		}
		ns_id = ns->id;
	}
	KVMM_BUG_ON(mag && mag->pool != pool);

	if (unlikely(kvmm_pool_nr_free(pool) <= pool->wmark_min)) {
		/* @ns's own min and low do not protect it from its own allocation */
		struct kvmm_ns *prev = pool->reclaim_for;

		pool->reclaim_for = ns;
		direct_reclaim(pool);
		pool->reclaim_for = prev;
	}

	pg = mag ? mag_pop(mag) : buddy_take(pool, 0, KVMM_PAGE_MAPPED);
	/* free frames, but the daemon-wide budget is spent: reclaim across its pools (budget.c) */
	if (unlikely(!pg) && pool->budget && pool->nr_free) {
		kvmm_budget_reclaim(pool, ns, mag ? mag->batch : 1);
		pg = mag ? mag_pop(mag) : buddy_take(pool, 0, KVMM_PAGE_MAPPED);
	}
	if (unlikely(!pg)) {
		pg = alloc_slow(pool, mag);
		if (!pg) {
			/*
			 * Reclaim found nothing: ask the owner to preempt a victim (vmscan.c).
			 * Not while write-back is still in flight: that is left only inside a
			 * swap operation, and frees frames as soon as the operation is over.
			 */
			if (!kvmm_swap_nr_writeback(pool) && !budget_min_short(pool, ns)) {
				struct kvmm_ns *prev = pool->reclaim_for;

				pool->reclaim_for = ns;
				kvmm_out_of_memory(pool);
				pool->reclaim_for = prev;
			}
			goto out_fail;
		}
	}
	if (unlikely(pool->kswapd && kvmm_pool_nr_free(pool) < pool->wmark_low))
		kvmm_wakeup_kswapd(pool);

	if (unlikely(pg->data_ns != ns_id && pg->data_ns != KVMM_NS_CLEAN) &&
	    scrub_frame(pool, pg)) {
		/* the frame still holds another tenant's data: keep it out of use */
		buddy_give(pool, pg, 0);
		errno = EIO;
		pool->stat[KVMM_STAT_ALLOC_FAIL]++;
		return NULL;
	}
	page_init(pg, ns_id);
	if (ns) {
		ns->used++;
		ns_note_peak(ns);
	}
	pool->stat[KVMM_STAT_ALLOC]++;
	kvmm_trace_event(KVMM_TR_ALLOC, pool, mag ? mag->owner : 0, ns_id, 0,
			 kvmm_page_to_frame(pool, pg), 1);
	return pg;

out_fail:
	pool->stat[KVMM_STAT_ALLOC_FAIL]++;
	kvmm_trace_event(KVMM_TR_OOM, pool, mag ? mag->owner : 0, ns ? ns->id : 0, 0,
			 KVMM_TRACE_NONE, 1);
	errno = ENOMEM;
	return NULL;
}

/* The frames @ns may still take whatever the pool has free: its limit's room, the budget's. */
static uint64_t block_room_charge(const struct kvmm_pool *pool, const struct kvmm_ns *ns)
{
	uint64_t room = UINT64_MAX;

	if (ns && ns->limit) {
		uint64_t charged = (uint64_t)ns->used + ns->cached;

		room = charged < ns->limit ? ns->limit - charged : 0;
	}
	if (pool->budget)
		room = min_t(uint64_t, room, kvmm_budget_free(pool->budget));
	return room;
}

uint32_t kvmm_alloc_block_room(const struct kvmm_pool *pool, const struct kvmm_ns *ns)
{
	uint64_t room = kvmm_pool_nr_free(pool);

	room = room > pool->wmark_low ? room - pool->wmark_low : 0;
	room = min_t(uint64_t, room, block_room_charge(pool, ns));
	return (uint32_t)min_t(uint64_t, room, UINT32_MAX);
}

uint32_t kvmm_alloc_block_prepare(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n)
{
	uint32_t room = kvmm_alloc_block_room(pool, ns), free, got;
	struct kvmm_ns *prev;

	/*
	 * Only where reclaim is a few list operations (dropping clean cache, as the allocation
	 * that crosses low does in kvmm_wakeup_kswapd), and not past the namespace's limit or a
	 * spent budget, which the single-frame path handles.
	 */
	if (room >= n || !kvmm_reclaim_drop_only(pool) || block_room_charge(pool, ns) < n)
		return room;
	free = kvmm_pool_nr_free(pool);
	prev = pool->reclaim_for;
	pool->reclaim_for = ns;
	got = kvmm_reclaim_protected(pool,
				     (uint32_t)min_t(uint64_t, (uint64_t)pool->wmark_low + n - free,
						     KVMM_RECLAIM_BATCH * 4));
	pool->reclaim_for = prev;
	pool->stat[KVMM_STAT_RECLAIM_INLINE] += got;
	return kvmm_alloc_block_room(pool, ns);
}

struct kvmm_page *kvmm_alloc_block(struct kvmm_pool *pool, struct kvmm_ns *ns, unsigned int order)
{
	uint16_t ns_id = ns ? ns->id : 0;
	struct kvmm_page *pg;
	uint32_t n, i;

	if (!pool || !order || order >= KVMM_MAX_ORDER) {
		errno = EINVAL;
		return NULL;
	}
	n = 1u << order;
	KVMM_BUG_ON(ns && (ns->id >= KVMM_MAX_NS || pool->ns[ns->id] != ns));
	/* best effort: near a limit or a watermark the caller's single pages do the reclaim */
	if (kvmm_alloc_block_room(pool, ns) < n) {
		errno = ENOMEM;
		return NULL;
	}
	pg = buddy_take(pool, order, KVMM_PAGE_MAPPED);
	if (!pg) {
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (pg[i].data_ns != ns_id && pg[i].data_ns != KVMM_NS_CLEAN &&
		    scrub_frame(pool, &pg[i])) {
			/* a frame still holds another tenant's data: none of the block is used */
			buddy_give(pool, pg, order);
			errno = EIO;
			return NULL;
		}
	}
	for (i = 0; i < n; i++) {
		page_init(&pg[i], ns_id);
		pg[i].owner = 0;
	}
	if (ns) {
		ns->used += n;
		ns_note_peak(ns);
	}
	pool->stat[KVMM_STAT_ALLOC] += n;
	pool->stat[KVMM_STAT_ALLOC_BLOCK]++;
	kvmm_trace_event(KVMM_TR_ALLOC, pool, 0, ns_id, 0, kvmm_page_to_frame(pool, pg), n);
	if (unlikely(pool->kswapd && kvmm_pool_nr_free(pool) < pool->wmark_low))
		kvmm_wakeup_kswapd(pool);
	return pg;
}

void kvmm_free_page(struct kvmm_pool *pool, struct kvmm_page *pg, struct kvmm_magazine *mag)
{
	struct kvmm_ns *ns = NULL;

	KVMM_BUG_ON(pg < pool->pages || pg >= pool->pages + pool->nframes);
	KVMM_BUG_ON(pg->refcount || pg->pincount || pg->cache);
	KVMM_BUG_ON(pg->flags & (KVMM_PG_SEALED | KVMM_PG_LRU | KVMM_PG_BUDDY_HEAD));
	KVMM_BUG_ON(mag && mag->pool != pool);

	if (pg->ns_id) {
		KVMM_BUG_ON(pg->ns_id >= KVMM_MAX_NS);
		ns = pool->ns[pg->ns_id];
		KVMM_BUG_ON(!ns);
	}
	switch (pg->state) {
	case KVMM_PAGE_MAPPED:
		if (ns) {
			KVMM_BUG_ON(!ns->used);
			ns->used--;
		}
		break;
	case KVMM_PAGE_CACHED:
		if (ns) {
			KVMM_BUG_ON(!ns->cached);
			ns->cached--;
		}
		break;
	default:
		KVMM_BUG();
	}

	kvmm_trace_event(KVMM_TR_FREE, pool, mag ? mag->owner : 0, ns ? ns->id : 0, 0,
			 kvmm_page_to_frame(pool, pg), 1);
	pg->flags &= KVMM_PG_POISONED;
	pg->ns_id = 0;
	pg->ntokens = 0;
	pg->swap = 0;
	if (mag)
		mag_push(mag, pg);
	else
		buddy_give(pool, pg, 0);
	pool->stat[KVMM_STAT_FREE]++;
}

/* ---- pools --------------------------------------------------------------------------------- */

uint32_t kvmm_pool_nr_free(const struct kvmm_pool *pool)
{
	return pool->nr_free + pool->nr_state[KVMM_PAGE_MAGAZINE];
}

void *kvmm_pool_frame_addr(struct kvmm_pool *pool, uint32_t frame)
{
	if (!pool || frame >= pool->nframes || !pool->be.ops->frame_addr)
		return NULL;
	return pool->be.ops->frame_addr(&pool->be, frame);
}

static int check_params(const struct kvmm_pool_params *p, uint32_t wmark[3])
{
	if (!p || p->page_size < 4096 || !IS_POWER_OF_2(p->page_size))
		return -EINVAL;
	if (!p->nframes || p->nframes > KVMM_MAX_FRAMES)
		return -EINVAL;
	/* the backend maps nframes * page_size bytes in one piece */
	if ((uint64_t)p->nframes > (uint64_t)SIZE_MAX / p->page_size)
		return -EINVAL;

	if (!p->wmark_min && !p->wmark_low && !p->wmark_high) {
		uint64_t n = p->nframes;
		uint32_t high = (uint32_t)max_t(uint64_t, n * 3 / 100, 2);
		uint32_t low = (uint32_t)max_t(uint64_t, n * 2 / 100, 1);
		uint32_t wmin = (uint32_t)(n / 100);

		/* tiny pools: keep min <= low <= high < nframes */
		high = min(high, p->nframes - 1);
		low = min(low, high);
		wmin = min(wmin, low);
		wmark[0] = wmin;
		wmark[1] = low;
		wmark[2] = high;
		return 0;
	}
	if (p->wmark_min > p->wmark_low || p->wmark_low > p->wmark_high ||
	    p->wmark_high >= p->nframes)
		return -EINVAL;
	wmark[0] = p->wmark_min;
	wmark[1] = p->wmark_low;
	wmark[2] = p->wmark_high;
	return 0;
}

/* Cover [0, nframes) with maximal aligned blocks: the largest order that f is aligned to. */
static void seed_buddy(struct kvmm_pool *pool)
{
	uint32_t f = 0;

	while (f < pool->nframes) {
		uint32_t left = pool->nframes - f;
		unsigned int order = KVMM_MAX_ORDER - 1;

		if (f)
			order = min_t(unsigned int, order, (unsigned int)__builtin_ctz(f));
		order = min_t(unsigned int, order, (unsigned int)ilog2(left));
		free_area_add(pool, &pool->pages[f], order);
		f += UINT32_C(1) << order;
	}
}

int kvmm_pool_create(const struct kvmm_pool_params *params, struct kvmm_pool **out)
{
	const struct kvmm_backend_ops *ops;
	struct kvmm_pool *pool;
	uint32_t wmark[3];
	uint32_t f;
	size_t sz;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = check_params(params, wmark);
	if (ret)
		return ret;
	ops = params->backend ? params->backend : &kvmm_mmap_backend_ops;
	if (!ops->init || !ops->fini)
		return -EINVAL;

	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	/* one struct kvmm_page per cache line: no false sharing, no straddling */
	sz = array_size(params->nframes, sizeof(struct kvmm_page));
	sz = ALIGN(sz, KVMM_CACHELINE_SIZE);
	pool->pages = aligned_alloc(KVMM_CACHELINE_SIZE, sz);
	if (!pool->pages) {
		ret = -ENOMEM;
		goto out_free_pool;
	}
	memset(pool->pages, 0, sz);

	ret = -pthread_mutex_init(&pool->lock, NULL);
	if (ret)
		goto out_free_pages;

	pool->page_size = params->page_size;
	pool->nframes = params->nframes;
	pool->wmark_min = wmark[0];
	pool->wmark_low = wmark[1];
	pool->wmark_high = wmark[2];
	for (f = 0; f < KVMM_MAX_ORDER; f++)
		INIT_LIST_HEAD(&pool->free_area[f]);
	INIT_LIST_HEAD(&pool->mags);
	INIT_LIST_HEAD(&pool->lru.active);
	INIT_LIST_HEAD(&pool->lru.inactive);
	INIT_LIST_HEAD(&pool->aspaces);
	INIT_LIST_HEAD(&pool->shrinkers);

	for (f = 0; f < pool->nframes; f++) {
		struct kvmm_page *pg = &pool->pages[f];

		INIT_LIST_HEAD(&pg->lru);
		pg->state = KVMM_PAGE_FREE;
		/* a new backend's memory holds no namespace's data */
		pg->data_ns = KVMM_NS_CLEAN;
	}
	pool->nr_state[KVMM_PAGE_FREE] = pool->nframes;
	pool->nr_free = pool->nframes;
	seed_buddy(pool);

	pool->be.ops = ops;
	pool->be.page_size = params->page_size;
	pool->be.nframes = params->nframes;
	pool->be.nr_devices = 1;
	ret = ops->init(&pool->be, params->page_size, params->nframes);
	if (ret)
		goto out_mutex;
	if (!pool->be.nr_devices ||
	    (pool->be.nr_devices > 1 && ops->frame_addr && ops->frame_addr(&pool->be, 0))) {
		ops->fini(&pool->be); /* a backend bug: mirrored frames have no one host address */
		ret = -EINVAL;
		goto out_mutex;
	}

	*out = pool;
	return 0;

out_mutex:
	pthread_mutex_destroy(&pool->lock);
out_free_pages:
	free(pool->pages);
out_free_pool:
	free(pool);
	return ret;
}

void kvmm_pool_destroy(struct kvmm_pool *pool)
{
	if (!pool)
		return;
	kvmm_kswapd_stop(pool); /* no reclaimer may run while the pool goes */
	/* out of the budget first: no other pool's reclaim may look at this one any more */
	kvmm_budget_leave(pool);
	/* address spaces, the page cache and namespaces first: they point into the frames */
	kvmm_mm_release(pool);
	pool->be.ops->fini(&pool->be);
	pthread_mutex_destroy(&pool->lock);
	free(pool->pages);
	free(pool);
}
