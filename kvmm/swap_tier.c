// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_tier.c - a pool's swap tiers and their slot allocators: the swap state (made at
 * the first swapon), swapon and the tiers' list in priority order, what a tier reports, and
 * the slots.  A tier is a medium (struct kvmm_swap_ops) and a bitmap of page-size slots
 * grouped in clusters of KVMM_SWAP_CLUSTER; a batch of a sequence's consecutive pages asks
 * for a run: the current cluster's next free run when it is long enough, else a wholly free
 * cluster (which then becomes current), else any free slots (a fragmented tier).  Consecutive
 * slots keep a sequence's pages together on the medium, so readahead reads neighbours and a
 * swapoff walks a file roughly in order.  A full tier frees kept slots (SLOT_KEPT, see
 * swapfile.c) before anything else.  Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitmap.h"
#include "compiler.h"
#include "log.h"
#include "kmalloc.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

/* ---- swap state and tiers -------------------------------------------------------------- */

struct kvmm_swap *kvmm_swap_get(struct kvmm_pool *pool)
{
	struct kvmm_swap *sw = pool->swap;

	if (sw)
		return sw;
	sw = kvmm_calloc(1, sizeof(*sw));
	if (!sw)
		return NULL;
	if (kvmm_htable_init(&sw->cache, 6)) {
		kvmm_free(sw);
		return NULL;
	}
	sw->pool = pool;
	INIT_LIST_HEAD(&sw->tiers);
	INIT_LIST_HEAD(&sw->done);
	INIT_LIST_HEAD(&sw->rd_copy);
	INIT_LIST_HEAD(&sw->wb_all);
	INIT_LIST_HEAD(&sw->wb_copy);
	INIT_LIST_HEAD(&sw->wb_done);
	INIT_LIST_HEAD(&sw->wb_batches);
	sw->ra_depth = KVMM_SWAP_RA_DEFAULT;
	pool->swap = sw;
	return sw;
}

struct kvmm_swap_tier *kvmm_swap_tier_get(struct kvmm_pool *pool, unsigned int tier)
{
	if (!pool || !pool->swap || !tier || tier > KVMM_SWAP_TIER_MAX)
		return NULL;
	return pool->swap->tier[tier];
}

struct kvmm_swap_tier *kvmm_swap_decode(struct kvmm_pool *pool, uint64_t swp, uint64_t *slot)
{
	struct kvmm_swap_tier *t;

	if (!kvmm_pte_is_swap(swp))
		return NULL;
	t = kvmm_swap_tier_get(pool, kvmm_pte_swap_tier(swp));
	if (!t)
		return NULL;
	*slot = kvmm_pte_swap_slot(swp);
	return *slot < t->nslots ? t : NULL;
}

void kvmm_swap_tier_free(struct kvmm_swap_tier *t)
{
	kvmm_free(t->map);
	kvmm_free(t->cluster_free);
	kvmm_free(t->slots);
	kvmm_free(t->far_pins);
	kvmm_free(t);
}

/*
 * Far arenas' generations (kvmm_swap_far_tier): never 0, unique in the daemon's life and
 * unlikely to repeat across restarts (seeded from the clock), so that a client's window of
 * an earlier daemon never passes for the current arena.
 */
static uint64_t swap_gen;

static uint64_t swap_gen_next(void)
{
	uint64_t zero = 0, seed = ((uint64_t)time(NULL) << 20) | 1;

	__atomic_compare_exchange_n(&swap_gen, &zero, seed, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
	return __atomic_add_fetch(&swap_gen, 1, __ATOMIC_RELAXED);
}

int kvmm_swapon(struct kvmm_pool *pool, const struct kvmm_swap_ops *ops,
		const struct kvmm_swap_tier_params *p)
{
	struct kvmm_swap_tier *t, *pos;
	struct kvmm_swap *sw;
	uint32_t c;
	int ret;

	if (!pool || !ops || !p || !ops->init || !ops->fini || !ops->submit || !ops->flush ||
	    !ops->poll)
		return -EINVAL;
	if (!p->tier || p->tier > KVMM_SWAP_TIER_MAX || !p->size ||
	    p->size % kvmm_frame_bytes(pool) ||
	    p->size / kvmm_frame_bytes(pool) > KVMM_SWAP_SLOT_MAX ||
	    p->queue_depth > KVMM_SWAP_QD_MAX)
		return -EINVAL;
	if (p->path && strlen(p->path) >= KVMM_PATH_LEN)
		return -ENAMETOOLONG;
	/* tiers copy pages through their host address, or through the backend's staging hooks */
	if (!pool->be.ops->frame_addr && !swap_staged(pool))
		return -EOPNOTSUPP;
	sw = kvmm_swap_get(pool);
	if (!sw)
		return -ENOMEM;
	if (sw->tier[p->tier])
		return -EEXIST;

	t = kvmm_calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ops = ops;
	t->pool = pool;
	t->id = p->tier;
	t->priority = p->priority;
	t->page_size = kvmm_frame_bytes(pool); /* a slot: the frame on every device */
	t->size = p->size;
	t->nslots = p->size / t->page_size;
	t->gen = swap_gen_next();
	t->nclusters = (uint32_t)DIV_ROUND_UP(t->nslots, (uint64_t)KVMM_SWAP_CLUSTER);
	t->map = kvmm_calloc(1, bitmap_size(t->nslots));
	t->cluster_free = kvmm_calloc(t->nclusters, sizeof(*t->cluster_free));
	t->slots = kvmm_calloc(t->nslots, sizeof(*t->slots));
	if (!t->map || !t->cluster_free || !t->slots) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (c = 0; c < t->nclusters; c++)
		t->cluster_free[c] = (uint16_t)kvmm_swap_cluster_size(t, c);
	t->nr_free_clusters = t->nclusters;
	if (p->path)
		snprintf(t->path, sizeof(t->path), "%s", p->path);
	ret = ops->init(t, p);
	if (ret)
		goto out_free;

	/* priority order, highest first; among equals the older tier first */
	list_for_each_entry (pos, &sw->tiers, node)
		if (pos->priority < t->priority)
			break;
	list_add_tail(&t->node, &pos->node);
	sw->tier[t->id] = t;
	sw->nr_tiers++;
	if (p->index_ns && p->path) {
		/* without its index the tier still works: only a restart loses its pages */
		ret = kvmm_swap_index_attach(t, p->index_ns);
		if (ret)
			kvmm_warn("swap tier %u: no warm-restart index for %s: %s", t->id, t->path,
				  strerror(-ret));
	}
	return 0;

out_free:
	kvmm_swap_tier_free(t);
	return ret;
}

int kvmm_swap_tier_info(struct kvmm_pool *pool, unsigned int tier, struct kvmm_swap_tier_info *info)
{
	struct kvmm_swap_tier *t = kvmm_swap_tier_get(pool, tier);

	if (!t || !info)
		return -ENOENT;
	memset(info, 0, sizeof(*info));
	info->tier = t->id;
	info->priority = t->priority;
	info->kind = t->ops->name;
	info->nslots = t->nslots;
	info->used = t->nr_used - t->nr_kept;
	info->kept = t->nr_kept;
	info->clean_out = t->nr_clean_out;
	info->bytes_out = t->bytes_out;
	info->bytes_in = t->bytes_in;
	info->pages_out = t->nr_out;
	info->pages_in = t->nr_in;
	info->failures = t->nr_fail;
	info->csum_bad = t->nr_csum_bad;
	info->direct = t->direct;
	kvmm_swap_index_info(t, info);
	return 0;
}

unsigned int kvmm_swap_tiers(struct kvmm_pool *pool, unsigned int *ids, unsigned int max)
{
	struct kvmm_swap_tier *t;
	unsigned int n = 0;

	if (!pool || !pool->swap)
		return 0;
	list_for_each_entry (t, &pool->swap->tiers, node) {
		if (n >= max)
			break;
		ids[n++] = t->id;
	}
	return n;
}

int kvmm_swap_set_readahead(struct kvmm_pool *pool, uint32_t depth)
{
	struct kvmm_swap *sw;

	if (!pool || depth > KVMM_SWAP_RA_MAX)
		return -EINVAL;
	sw = kvmm_swap_get(pool);
	if (!sw)
		return -ENOMEM;
	sw->ra_depth = depth;
	return 0;
}

/* ---- slots ------------------------------------------------------------------------------ */

static void slot_take(struct kvmm_swap_tier *t, uint64_t s, uint32_t n)
{
	uint64_t i;

	for (i = s; i < s + n; i++) {
		uint32_t c = (uint32_t)(i / KVMM_SWAP_CLUSTER);

		KVMM_BUG_ON(bitmap_test_bit(t->map, i));
		bitmap_set_bit(t->map, i);
		if (t->cluster_free[c]-- == kvmm_swap_cluster_size(t, c))
			t->nr_free_clusters--;
	}
	t->nr_used += n;
}

void kvmm_swap_slot_claim(struct kvmm_swap_tier *t, uint64_t s)
{
	slot_take(t, s, 1);
}

void kvmm_swap_slot_release(struct kvmm_swap_tier *t, uint64_t slot)
{
	uint32_t c = (uint32_t)(slot / KVMM_SWAP_CLUSTER);

	kvmm_swap_index_forget(t, slot);
	KVMM_BUG_ON(!bitmap_test_bit(t->map, slot));
	if (t->far_pins && t->far_pins[slot]) {
		/* clients read it in place: free it at the last far unpin */
		memset(&t->slots[slot], 0, sizeof(t->slots[slot]));
		t->slots[slot].flags = SLOT_FAR_HELD;
		t->pool->stat[KVMM_STAT_FAR_HELD]++;
		return;
	}
	bitmap_clear_bit(t->map, slot);
	memset(&t->slots[slot], 0, sizeof(t->slots[slot]));
	if (++t->cluster_free[c] == kvmm_swap_cluster_size(t, c))
		t->nr_free_clusters++;
	t->nr_used--;
}

/* ---- far reads -------------------------------------------------------------------------- */

struct kvmm_swap_tier *kvmm_swap_far_tier(struct kvmm_pool *pool)
{
	struct kvmm_swap_tier *t;

	if (!pool || !pool->swap)
		return NULL;
	list_for_each_entry (t, &pool->swap->tiers, node)
		if (t->ops->arena_fd && t->ops->arena_fd(t) >= 0)
			return t;
	return NULL;
}

struct kvmm_swap_tier *kvmm_swap_tier_of_gen(struct kvmm_pool *pool, uint64_t gen)
{
	struct kvmm_swap_tier *t;

	if (!pool || !pool->swap || !gen)
		return NULL;
	list_for_each_entry (t, &pool->swap->tiers, node)
		if (t->gen == gen)
			return t;
	return NULL;
}

bool kvmm_swap_far_usable(const struct kvmm_swap_tier *t, uint64_t pte, bool sealed)
{
	uint64_t s;

	if (!sealed || !kvmm_pte_is_swap(pte) || kvmm_pte_swap_tier(pte) != t->id)
		return false;
	s = kvmm_pte_swap_slot(pte);
	return s < t->nslots && bitmap_test_bit(t->map, s) &&
	       !(t->slots[s].flags & (SLOT_BAD | SLOT_WRITING | SLOT_FAR_HELD)) &&
	       (!t->far_pins || t->far_pins[s] < UINT32_MAX);
}

bool kvmm_swap_far_pin(struct kvmm_swap_tier *t, uint64_t pte, bool sealed, uint64_t *slot)
{
	uint64_t s;

	if (!kvmm_swap_far_usable(t, pte, sealed))
		return false;
	s = kvmm_pte_swap_slot(pte);
	if (!t->far_pins) {
		t->far_pins = kvmm_calloc(t->nslots, sizeof(*t->far_pins));
		if (!t->far_pins)
			return false; /* the caller faults it in instead */
	}
	t->far_pins[s]++;
	t->nr_far_pins++;
	t->pool->stat[KVMM_STAT_FAR_PIN]++;
	*slot = s;
	return true;
}

void kvmm_swap_far_unpin(struct kvmm_swap_tier *t, uint64_t slot)
{
	KVMM_BUG_ON(!t->far_pins || slot >= t->nslots || !t->far_pins[slot] || !t->nr_far_pins);
	t->nr_far_pins--;
	if (--t->far_pins[slot] || !(t->slots[slot].flags & SLOT_FAR_HELD))
		return;
	t->slots[slot].flags = 0;
	kvmm_swap_slot_release(t, slot);
}

void kvmm_swap_kept_release(struct kvmm_swap_tier *t, uint64_t slot)
{
	struct kvmm_swap_slot *sl = &t->slots[slot];

	KVMM_BUG_ON(!(sl->flags & SLOT_KEPT) || sl->block >= t->pool->nframes);
	t->pool->pages[sl->block].swap = 0;
	t->nr_kept--;
	kvmm_swap_slot_release(t, slot);
}

/*
 * A full tier makes room: free up to @n slots kept by resident clean pages (they only lose
 * their copy-free swap-out), from the kept cursor on.  Returns how many were freed.
 */
uint32_t kvmm_swap_release_kept(struct kvmm_swap_tier *t, uint32_t n)
{
	uint64_t s = t->kept_cursor, scanned;
	uint32_t freed = 0;

	for (scanned = 0; scanned < t->nslots && freed < n && t->nr_kept; scanned++, s++) {
		if (s >= t->nslots)
			s = 0;
		if (bitmap_test_bit(t->map, s) && (t->slots[s].flags & SLOT_KEPT)) {
			kvmm_swap_kept_release(t, s);
			freed++;
		}
	}
	t->kept_cursor = s;
	return freed;
}

/* Free slots from @s on, at most @max. */
static uint32_t run_len(const struct kvmm_swap_tier *t, uint64_t s, uint32_t max)
{
	uint64_t busy = find_next_bit(t->map, s + max, s);

	return (uint32_t)(busy - s);
}

/* A run of up to @want free slots, taken; returns its length (0: the tier is full). */
static uint32_t slot_alloc_run(struct kvmm_swap_tier *t, uint32_t want, uint64_t *first)
{
	uint64_t s, end;
	uint32_t c, i, len;

	if (t->nr_used >= t->nslots || !want)
		return 0;
	want = min_t(uint32_t, want, KVMM_SWAP_CLUSTER);
	c = t->cur_cluster;
	end = (uint64_t)c * KVMM_SWAP_CLUSTER + kvmm_swap_cluster_size(t, c);
	s = find_next_zero_bit(t->map, end, (uint64_t)c * KVMM_SWAP_CLUSTER);
	if (s < end) {
		len = run_len(t, s, (uint32_t)min_t(uint64_t, want, end - s));
		if (len == want || !t->nr_free_clusters)
			goto take;
	}
	/* a wholly free cluster keeps the run together */
	for (i = 1; i <= t->nclusters && t->nr_free_clusters; i++) {
		uint32_t n = (c + i) % t->nclusters;

		if (t->cluster_free[n] == kvmm_swap_cluster_size(t, n)) {
			t->cur_cluster = n;
			s = (uint64_t)n * KVMM_SWAP_CLUSTER;
			len = min_t(uint32_t, want, kvmm_swap_cluster_size(t, n));
			goto take;
		}
	}
	/* fragmented: the first free slots anywhere */
	s = find_first_zero_bit(t->map, t->nslots);
	if (s >= t->nslots)
		return 0;
	len = run_len(t, s, (uint32_t)min_t(uint64_t, want, t->nslots - s));
	t->cur_cluster = (uint32_t)(s / KVMM_SWAP_CLUSTER);
take:
	slot_take(t, s, len);
	*first = s;
	return len;
}

/*
 * The tier new pages go to: the highest-priority one with a free slot, other than @skip and,
 * when @below is set, of a lower priority than it (move-down).
 */
static struct kvmm_swap_tier *pick_tier(struct kvmm_swap *sw, const struct kvmm_swap_tier *skip,
					bool below)
{
	struct kvmm_swap_tier *t;

	list_for_each_entry (t, &sw->tiers, node) {
		/* kept slots are room: they are freed when needed */
		if (t == skip || (t->nr_used >= t->nslots && !t->nr_kept))
			continue;
		if (below && (t->priority > skip->priority ||
			      (t->priority == skip->priority && t->id < skip->id)))
			continue;
		return t;
	}
	return NULL;
}

/* Allocate a run on the best tier; 0 with *err = -ENOSPC when none has room (or injected). */
uint32_t kvmm_swap_alloc_run(struct kvmm_swap *sw, const struct kvmm_swap_tier *skip, bool below,
			     uint32_t want, struct kvmm_swap_tier **tp, uint64_t *first, int *err)
{
	struct kvmm_swap_tier *t;
	uint32_t got;

	if (kvmm_swap_fault_hit(sw, FP_ALLOC) >= 0) {
		sw->pool->stat[KVMM_STAT_SWAP_FAIL]++;
		*err = -ENOSPC;
		return 0;
	}
	t = pick_tier(sw, skip, below);
	got = t ? slot_alloc_run(t, want, first) : 0;
	if (!got && t && kvmm_swap_release_kept(t, want))
		got = slot_alloc_run(t, want, first);
	if (!got) {
		*err = -ENOSPC;
		return 0;
	}
	*tp = t;
	return got;
}

/* ---- removing a tier ------------------------------------------------------------------------ */

void kvmm_swap_tier_remove(struct kvmm_swap *sw, struct kvmm_swap_tier *t)
{
	/* resident pages that kept a slot here lose it (pool teardown: nothing else is left) */
	kvmm_swap_release_kept(t, UINT32_MAX);
	list_del(&t->node);
	sw->tier[t->id] = NULL;
	sw->nr_tiers--;
	kvmm_swap_index_detach(t);
	t->ops->fini(t);
	kvmm_swap_tier_free(t);
}
