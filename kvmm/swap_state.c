// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_state.c - the swap cache and fault-in: bringing swapped pages back into frames,
 * synchronously for a step that needs them, asynchronously for readahead and prefetch.
 *
 * A page on its way back has a frame already (allocated, charged, MAPPED with refcount 0 and
 * KVMM_PG_LOCKED so nothing else touches it) and a struct swap_rd in the swap cache, a hash
 * of reads in flight by swap entry; its slot carries SLOT_READING.  A fault on a block whose
 * read is in flight finds the record and waits for that read (SWAP_CACHE_HIT) instead of
 * issuing a second one.  Completions only queue the record on the done list; kvmm_swap_reap()
 * installs them at a point where the core is consistent (the entry of every swap call and
 * kvmm_swap_poll()), so a completion never lands in the middle of reclaim or a page-table
 * update.  Installing a page hands it to whoever names the slot: the sequence's PTE becomes
 * present again and/or the page-cache entry names the frame again; if both went away while
 * the read was in flight, frame and slot are simply freed.
 *
 * Workingset: each slot remembers the swap-out clock (pages swapped out so far) at its write.
 * A page that comes back before more pages than the pool has frames went out after it is a
 * refault (Linux's refault distance): with that many more frames it would never have left.
 * Many refaults mean the pool is too small for the working set, not that it holds cold pages.
 * Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

struct swap_rd *kvmm_swap_cache_find(struct kvmm_swap *sw, uint64_t swp)
{
	struct swap_rd *rd;

	kvmm_htable_for_each_possible (&sw->cache, rd, hnode, swp)
		if (rd->swp == swp)
			return rd;
	return NULL;
}

void kvmm_swap_slot_install(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t slot,
			    struct kvmm_page *pg)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_slot *sl = &t->slots[slot];
	struct kvmm_seq *seq = sl->seq;
	uint32_t block = sl->block;

	if (sw->clock - sl->swapped_at <= pool->nframes)
		pool->stat[KVMM_STAT_REFAULT]++;
	pg->ntokens = sl->ntokens;
	pg->flags |= sl->pgflags;
	if (sl->ent)
		kvmm_pagecache_ent_swapin(pool, sl->ent, pg, 0);
	kvmm_swap_slot_release(t, slot);
	if (seq) {
		kvmm_page_get(pool, pg);
		seq->pte[block] = kvmm_mm_seq_mk_pte(pool, pg, block < seq->nsealed);
	}
}

/* A completed read: install its page, or give everything back. */
static void rd_finish(struct kvmm_pool *pool, struct swap_rd *rd)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t = rd->t;
	struct kvmm_page *pg = rd->pg;
	uint64_t s = kvmm_pte_swap_slot(rd->swp);
	struct kvmm_swap_slot *sl = &t->slots[s];

	kvmm_htable_del(&rd->hnode);
	list_del(&rd->node);
	sw->nr_inflight--;
	sl->flags &= ~SLOT_READING;
	pg->flags &= ~KVMM_PG_LOCKED;
	if (rd->io.res) {
		kvmm_swap_count_fail(t);
		kvmm_free_page(pool, pg, NULL);
		if (!sl->seq && !sl->ent)
			kvmm_swap_slot_release(t, s);
	} else if (!sl->seq && !sl->ent) {
		/* its owner went away while the read was in flight */
		kvmm_free_page(pool, pg, NULL);
		kvmm_swap_slot_release(t, s);
	} else {
		bool cached_only = !sl->seq;

		t->nr_in++;
		t->bytes_in += t->page_size;
		pool->stat[KVMM_STAT_SWPIN]++;
		kvmm_swap_slot_install(pool, t, s, pg);
		if (cached_only) {
			/* nobody maps it: it becomes CACHED (or is freed, if an orphan) */
			kvmm_page_get(pool, pg);
			kvmm_page_put(pool, pg, NULL);
		}
	}
	free(rd);
}

int kvmm_swap_reap(struct kvmm_pool *pool)
{
	struct kvmm_swap *sw = pool->swap;
	int n = 0;

	if (!sw)
		return 0;
	while (!list_empty(&sw->done)) {
		rd_finish(pool, list_first_entry(&sw->done, struct swap_rd, node));
		n++;
	}
	return n;
}

int kvmm_swap_poll(struct kvmm_pool *pool, bool wait)
{
	struct kvmm_swap *sw;
	struct kvmm_swap_tier *t;
	int n;

	if (!pool || !pool->swap)
		return 0;
	sw = pool->swap;
	list_for_each_entry (t, &sw->tiers, node) {
		t->ops->poll(t, false);
		while (wait && t->inflight)
			t->ops->poll(t, true);
	}
	/* waiting: pending write-back copies are done here, under the lock */
	n = wait ? kvmm_swap_writeback(pool, false) : (int)kvmm_swap_wb_reap(pool);
	return n + kvmm_swap_reap(pool);
}

void kvmm_swap_cache_wait(struct kvmm_pool *pool, struct swap_rd *rd)
{
	struct kvmm_swap_tier *t = rd->t;

	pool->stat[KVMM_STAT_SWAP_CACHE_HIT]++;
	while (!rd->done)
		t->ops->poll(t, true);
	kvmm_swap_reap(pool);
}

static void rd_end_io(struct kvmm_swap_io *io)
{
	struct swap_rd *rd = io->priv;

	rd->done = true;
	rd->t->inflight--;
	list_add_tail(&rd->node, &rd->sw->done);
}

/* A frame for the page of slot @sl, charged to its namespace. */
static struct kvmm_page *slot_frame(struct kvmm_pool *pool, const struct kvmm_swap_slot *sl,
				    struct kvmm_magazine *mag)
{
	struct kvmm_ns *ns = sl->ns_id ? pool->ns[sl->ns_id] : NULL;
	struct kvmm_page *pg;

	/* no demotion (I/O) from inside this I/O: reclaim drops cached pages instead */
	pool->swap->busy++;
	pg = kvmm_alloc_page(pool, ns, mag);
	pool->swap->busy--;
	return pg;
}

/* Start an asynchronous read of swap entry @swp; 1 started, 0 nothing to do, or -errno. */
static int read_async(struct kvmm_pool *pool, uint64_t swp, struct kvmm_magazine *mag)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct swap_rd *rd;
	uint64_t s;
	int ret;

	t = kvmm_swap_decode(pool, swp, &s);
	if (!t)
		return -EINVAL;
	if (t->slots[s].flags & SLOT_READING)
		return 0;
	if (kvmm_swap_fault_hit(sw, FP_READ) >= 0) {
		kvmm_swap_count_fail(t);
		return -EIO;
	}
	rd = calloc(1, sizeof(*rd));
	if (!rd)
		return -ENOMEM;
	rd->pg = slot_frame(pool, &t->slots[s], mag);
	if (!rd->pg) {
		free(rd);
		return -ENOMEM;
	}
	rd->pg->flags |= KVMM_PG_LOCKED;
	rd->sw = sw;
	rd->t = t;
	rd->swp = swp;
	rd->io.slot = s;
	rd->io.write = false;
	swap_io_frame(pool, &rd->io, kvmm_page_to_frame(pool, rd->pg));
	rd->io.end_io = rd_end_io;
	rd->io.priv = rd;
	while ((ret = t->ops->submit(t, &rd->io)) == -EAGAIN) {
		t->ops->flush(t);
		if (t->ops->poll(t, true) < 0)
			break;
	}
	if (ret) {
		rd->pg->flags &= ~KVMM_PG_LOCKED;
		kvmm_free_page(pool, rd->pg, mag);
		free(rd);
		kvmm_swap_count_fail(t);
		return ret;
	}
	t->inflight++;
	t->slots[s].flags |= SLOT_READING;
	kvmm_htable_add(&sw->cache, &rd->hnode, swp);
	sw->nr_inflight++;
	pool->stat[KVMM_STAT_SWAP_RA]++;
	return 1;
}

int kvmm_mm_seq_prefetch(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_pool *pool;
	struct kvmm_swap_tier *t;
	uint32_t b, end;
	int started = 0, ret = 0;

	if (!seq)
		return -EINVAL;
	pool = seq->as->pool;
	if (!pool->swap || first >= seq->nblocks)
		return 0;
	kvmm_swap_reap(pool);
	end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	for (b = first; b < end; b++) {
		if (!kvmm_pte_is_swap(seq->pte[b]))
			continue;
		ret = read_async(pool, seq->pte[b] & ~KVMM_PTE_FLAGS_MASK, seq->as->mag);
		if (ret < 0)
			break;
		started += ret;
	}
	list_for_each_entry (t, &pool->swap->tiers, node)
		t->ops->flush(t);
	return started ? started : (ret < 0 ? ret : 0);
}

/* Read ahead the next swapped blocks after @end. */
static void readahead(struct kvmm_seq *seq, uint32_t end)
{
	uint32_t depth = seq->as->pool->swap->ra_depth;

	if (depth && end < seq->nblocks)
		kvmm_mm_seq_prefetch(seq, end, depth);
}

int kvmm_mm_seq_fault(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_swap_io ios[64];
	struct kvmm_page *pgs[64];
	uint32_t blocks[64];
	struct kvmm_pool *pool;
	struct kvmm_swap *sw;
	uint32_t b, end, got = 0;
	int err = 0;

	if (!seq)
		return -EINVAL;
	pool = seq->as->pool;
	sw = pool->swap;
	if (!sw || first >= seq->nblocks)
		return 0;
	end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	kvmm_swap_reap(pool);
	b = first;
	while (b < end && !err) {
		struct kvmm_swap_tier *t = NULL;
		uint32_t nr = 0, k;
		uint64_t s;

		/* a batch of swapped blocks on one tier */
		for (; b < end && nr < ARRAY_SIZE(ios); b++) {
			uint64_t swp = seq->pte[b] & ~KVMM_PTE_FLAGS_MASK;
			struct kvmm_swap_tier *bt;
			struct swap_rd *rd;

			if (!kvmm_pte_is_swap(swp)) {
				/* wanted now: a swap-out in flight keeps the page resident */
				if (kvmm_pte_is_present(swp))
					kvmm_page_wb_touch(
						kvmm_frame_to_page(pool, kvmm_pte_frame(swp)));
				continue;
			}
			rd = kvmm_swap_cache_find(sw, swp);
			if (rd) {
				/* join the read in flight */
				kvmm_swap_cache_wait(pool, rd);
				if (kvmm_pte_is_present(seq->pte[b])) {
					got++;
					continue;
				}
				/* that read failed: read again below */
			}
			bt = kvmm_swap_decode(pool, swp, &s);
			KVMM_BUG_ON(!bt);
			if (t && bt != t)
				break;
			t = bt;
			pgs[nr] = slot_frame(pool, &t->slots[s], seq->as->mag);
			if (!pgs[nr]) {
				err = -ENOMEM;
				break;
			}
			ios[nr].slot = s;
			ios[nr].write = false;
			swap_io_frame(pool, &ios[nr], kvmm_page_to_frame(pool, pgs[nr]));
			blocks[nr++] = b;
		}
		if (!nr)
			continue;
		kvmm_swap_io_run(sw, t, ios, nr);
		for (k = 0; k < nr; k++) {
			if (ios[k].res) {
				/* the block stays swapped: a later fault tries again */
				kvmm_free_page(pool, pgs[k], seq->as->mag);
				err = -EIO;
				continue;
			}
			KVMM_BUG_ON(t->slots[ios[k].slot].seq != seq ||
				    t->slots[ios[k].slot].block != blocks[k]);
			kvmm_swap_slot_install(pool, t, ios[k].slot, pgs[k]);
			got++;
		}
	}
	if (err)
		return err;
	readahead(seq, end);
	return (int)got;
}

struct kvmm_page *kvmm_swap_fault_ent(struct kvmm_pool *pool, struct kvmm_cache_ent *ent,
				      struct kvmm_magazine *mag)
{
	uint64_t swp = kvmm_pagecache_ent_swap(ent), s;
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct kvmm_swap_io io;
	struct kvmm_page *pg;
	struct swap_rd *rd;

	KVMM_BUG_ON(!sw || !swp);
	rd = kvmm_swap_cache_find(sw, swp);
	if (rd) {
		uint32_t frame;

		pg = rd->pg;
		frame = kvmm_page_to_frame(pool, pg);
		kvmm_swap_cache_wait(pool, rd);
		/* installed: the entry names its frame again */
		if (kvmm_swap_slot_ent(pool, swp) != ent && pg->cache == ent &&
		    kvmm_page_to_frame(pool, pg) == frame)
			return pg;
		swp = kvmm_pagecache_ent_swap(ent);
		if (!swp) {
			errno = EIO;
			return NULL;
		}
	}
	t = kvmm_swap_decode(pool, swp, &s);
	KVMM_BUG_ON(!t || t->slots[s].ent != ent);
	pg = slot_frame(pool, &t->slots[s], mag);
	if (!pg)
		return NULL;
	io.slot = s;
	io.write = false;
	swap_io_frame(pool, &io, kvmm_page_to_frame(pool, pg));
	kvmm_swap_io_run(sw, t, &io, 1);
	if (io.res) {
		kvmm_free_page(pool, pg, mag);
		errno = -io.res;
		return NULL;
	}
	kvmm_swap_slot_install(pool, t, s, pg);
	return pg;
}
