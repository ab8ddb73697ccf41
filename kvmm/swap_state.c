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
 * the read was in flight, frame and slot are simply freed.  A sequence's page whose KV is
 * written (not KVMM_PG_KV_PENDING) keeps the slot: it is swap-cached and clean until
 * kvmm_swap_page_dirty() (an append, truncate, second mapper, ...) or a full tier frees it.
 *
 * Unlocked fault-in (kvmm_mm_seq_fault_unlocked): for pages on a memory tier (ops->slot_addr)
 * the faulting thread makes the swap-cache records under the lock - frames allocated and
 * charged, LOCKED, slots SLOT_READING, exactly the state of a read in flight - then lets go of
 * the pool lock while it copies the slots into the frames, takes it again and installs them.
 * Nothing can free a reading slot or a locked frame, so the copy needs no lock.  Anyone who
 * needs one of those pages meanwhile (a fault, a lookup, swapoff, teardown) finds its record
 * and, under the lock, does that page's copy itself if the copier has not started it yet, or
 * waits for it to be published (struct swap_rd.cstate), then installs it; the copier, back
 * under the lock, finishes what is left.  Installation goes through the slot's reverse map,
 * never through the faulting thread's sequence pointer, so a sequence that was truncated or
 * freed meanwhile just has its frames given back.
 *
 * Workingset: each slot remembers the swap-out clock (pages swapped out so far) at its write.
 * A page that comes back before more pages than the pool has frames went out after it is a
 * refault (Linux's refault distance): with that many more frames it would never have left.
 * Many refaults mean the pool is too small for the working set, not that it holds cold pages.
 * Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
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
	uint32_t block = sl->block, nr_map = sl->nr_map;

	if (sw->clock - sl->swapped_at <= pool->nframes)
		pool->stat[KVMM_STAT_REFAULT]++;
	pg->ntokens = sl->ntokens;
	pg->flags |= sl->pgflags;
	if (sl->ent)
		kvmm_pagecache_ent_swapin(pool, sl->ent, pg, 0);
	if ((seq || nr_map) && !(pg->flags & KVMM_PG_KV_PENDING)) {
		/* clean: the slot still holds these bytes, the next swap-out reuses it */
		memset(sl, 0, sizeof(*sl));
		sl->flags = SLOT_KEPT;
		sl->block = kvmm_page_to_frame(pool, pg);
		t->nr_kept++;
		pg->swap = swp_entry(t->id, slot);
	} else {
		kvmm_swap_slot_release(t, slot);
	}
	if (seq) {
		kvmm_page_get(pool, pg);
		seq->pte[block] = kvmm_mm_seq_mk_pte(pool, pg, block < seq->nsealed);
	}
	/* a page several sequences mapped comes back for all of them: one read, one frame */
	if (nr_map)
		KVMM_BUG_ON(kvmm_swap_shared_remap(pool, swp_entry(t->id, slot), block, pg, 0,
						   NULL) != nr_map);
}

void kvmm_swap_page_uncache(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	struct kvmm_swap_tier *t;
	uint64_t s;

	t = kvmm_swap_decode(pool, pg->swap, &s);
	KVMM_BUG_ON(!t || !(t->slots[s].flags & SLOT_KEPT) ||
		    t->slots[s].block != kvmm_page_to_frame(pool, pg));
	kvmm_swap_kept_release(t, s);
}

/*
 * A completed read: install its page, or give everything back.  The record leaves the swap
 * cache; the caller frees it, except an unlocked copy's, which its copier frees.
 */
static void rd_finish(struct kvmm_pool *pool, struct swap_rd *rd)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t = rd->t;
	struct kvmm_page *pg = rd->pg;
	uint64_t s = kvmm_pte_swap_slot(rd->swp);
	struct kvmm_swap_slot *sl = &t->slots[s];

	kvmm_htable_del(&rd->hnode);
	sw->nr_inflight--;
	if (rd->unlocked) {
		/* the copy's own result, unless the read had failed already (injected) */
		if (!rd->io.res)
			rd->io.res = rd->copy_res;
		list_del(&rd->node);
		sw->nr_rd_copy--;
		rd->finished = true;
	}
	sl->flags &= ~SLOT_READING;
	pg->flags &= ~KVMM_PG_LOCKED;
	if (rd->io.res) {
		kvmm_swap_count_fail(t, false, rd->io.slot, rd->io.res);
		kvmm_free_page(pool, pg, NULL);
		if (rd->io.res == -EBADMSG)
			kvmm_swap_slot_corrupt(pool, t, s); /* its bytes are not its page's */
		else if (!sl->seq && !sl->nr_map && !sl->ent)
			kvmm_swap_slot_release(t, s);
	} else if (!sl->seq && !sl->nr_map && !sl->ent) {
		/* its owner went away while the read was in flight */
		kvmm_free_page(pool, pg, NULL);
		kvmm_swap_slot_release(t, s);
	} else {
		bool cached_only = !sl->seq && !sl->nr_map;

		t->nr_in++;
		t->bytes_in += t->page_size;
		pool->stat[KVMM_STAT_SWPIN]++;
		rd->installed = !cached_only;
		kvmm_swap_slot_install(pool, t, s, pg);
		if (cached_only) {
			/* nobody maps it: it becomes CACHED (or is freed, if an orphan) */
			kvmm_page_get(pool, pg);
			kvmm_page_put(pool, pg, NULL);
		}
	}
}

/*
 * Copy @rd's page (an unlocked fault-in's record) unless someone else claimed it first; @sync:
 * wait for a staged copy to land (never needed for memory frames; kept for the contract).
 */
static void rd_claim_copy(struct swap_rd *rd, bool sync)
{
	int pending = RD_PENDING;

	if (!__atomic_compare_exchange_n(&rd->cstate, &pending, RD_COPYING, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return;
	/* checked against the memory tier's checksum: a spoilt slot fails with -EBADMSG */
	rd->copy_res = kvmm_swap_mem_read(rd->t, &rd->io, rd->io.slot, rd->src, sync);
	/* from here on anyone under the lock may install it: the frame holds the page */
	__atomic_store_n(&rd->cstate, RD_COPIED, __ATOMIC_RELEASE);
}

/*
 * Pool lock held: finish the unlocked copy @rd.  A copy nobody started yet is done here; one
 * in progress is waited for: its thread needs no lock to complete it, so waiting under the
 * lock cannot deadlock, and the caller's view of the pool does not change while it waits.
 */
static void rd_copy_wait(struct kvmm_pool *pool, struct swap_rd *rd)
{
	unsigned int spins = 0;

	rd_claim_copy(rd, true);
	while (__atomic_load_n(&rd->cstate, __ATOMIC_ACQUIRE) != RD_COPIED) {
		if (++spins < 64)
			cpu_relax();
		else
			sched_yield(); /* the copier may be waiting for this CPU */
	}
	rd_finish(pool, rd);
}

int kvmm_swap_reap(struct kvmm_pool *pool)
{
	struct kvmm_swap *sw = pool->swap;
	int n = 0;

	if (!sw)
		return 0;
	while (!list_empty(&sw->done)) {
		struct swap_rd *rd = list_first_entry(&sw->done, struct swap_rd, node);

		list_del(&rd->node);
		rd_finish(pool, rd);
		free(rd);
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
	/* and other threads' unlocked fault-in copies are waited for */
	while (wait && !list_empty(&sw->rd_copy)) {
		rd_copy_wait(pool, list_first_entry(&sw->rd_copy, struct swap_rd, node));
		n++;
	}
	return n + kvmm_swap_reap(pool);
}

void kvmm_swap_cache_wait(struct kvmm_pool *pool, struct swap_rd *rd)
{
	struct kvmm_swap_tier *t = rd->t;

	pool->stat[KVMM_STAT_SWAP_CACHE_HIT]++;
	if (rd->unlocked)
		rd_copy_wait(pool, rd); /* another thread is copying it without the lock */
	while (!rd->unlocked && !rd->done)
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

/*
 * A read record of slot @s of @t (swap entry @swp) into a new frame, locked, its I/O set up as
 * a read into that frame; NULL when there is no memory for either.
 */
static struct swap_rd *rd_new(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t s,
			      uint64_t swp, struct kvmm_magazine *mag)
{
	struct swap_rd *rd = calloc(1, sizeof(*rd));

	if (!rd)
		return NULL;
	rd->pg = slot_frame(pool, &t->slots[s], mag);
	if (!rd->pg) {
		free(rd);
		return NULL;
	}
	rd->pg->flags |= KVMM_PG_LOCKED;
	rd->sw = pool->swap;
	rd->t = t;
	rd->swp = swp;
	rd->io.slot = s;
	rd->io.write = false;
	swap_io_frame(pool, &rd->io, kvmm_page_to_frame(pool, rd->pg));
	return rd;
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
		kvmm_swap_count_fail(t, false, s, -EIO);
		return -EIO;
	}
	rd = rd_new(pool, t, s, swp, mag);
	if (!rd)
		return -ENOMEM;
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
		kvmm_swap_count_fail(t, false, s, ret);
		return ret;
	}
	t->inflight++;
	t->slots[s].flags |= SLOT_READING;
	kvmm_htable_add(&sw->cache, &rd->hnode, swp);
	sw->nr_inflight++;
	pool->stat[KVMM_STAT_SWAP_RA]++;
	return 1;
}

/* Can pages of @t be copied in by the faulting thread with the pool lock let go? */
static bool copy_unlocked(const struct kvmm_pool *pool, const struct kvmm_swap_tier *t)
{
	/* a memory tier, and frames memcpy reaches (a staging backend's stream is the pool's) */
	return t->ops->slot_addr && !swap_staged(pool);
}

/*
 * Make the swap-cache record of an unlocked copy of slot @s of memory tier @t into a new
 * frame, and add it to the caller's @own list, for kvmm_swap_fault_copy().  An injected read failure (swap.read) is decided here, under the lock:
 * the record is made anyway and completes as failed, with no copy.  0 or -ENOMEM.
 */
static int rd_start_unlocked(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t s, bool ra,
			     struct kvmm_magazine *mag, struct list_head *own)
{
	struct kvmm_swap *sw = pool->swap;
	struct swap_rd *rd;

	rd = rd_new(pool, t, s, swp_entry(t->id, s), mag);
	if (!rd)
		return -ENOMEM;
	rd->src = t->ops->slot_addr(t, s);
	rd->unlocked = true;
	rd->ra = ra;
	if (kvmm_swap_fault_hit(sw, FP_READ) >= 0) {
		rd->io.res = -EIO; /* a short read is not trusted either */
		rd->cstate = RD_COPIED;
	}
	t->slots[s].flags |= SLOT_READING;
	kvmm_htable_add(&sw->cache, &rd->hnode, rd->swp);
	sw->nr_inflight++;
	list_add_tail(&rd->node, &sw->rd_copy);
	sw->nr_rd_copy++;
	list_add_tail(&rd->own, own);
	if (ra)
		pool->stat[KVMM_STAT_SWAP_RA]++;
	return 0;
}

void kvmm_swap_fault_copy(struct kvmm_swap_fault *f)
{
	struct swap_rd *rd;

	list_for_each_entry (rd, &f->own, own)
		rd_claim_copy(rd, false);
}

int kvmm_swap_fault_finish(struct kvmm_swap_fault *f)
{
	struct swap_rd *rd, *tmp;

	list_for_each_entry_safe (rd, tmp, &f->own, own) {
		/* copied (or copied now, when the caller skipped kvmm_swap_fault_copy), installed */
		if (!rd->finished)
			rd_copy_wait(f->pool, rd);
		if (!rd->ra && rd->io.res && !f->err)
			f->err = -EIO;
		else if (!rd->ra && rd->installed)
			f->got++;
		list_del(&rd->own);
		free(rd);
	}
	return f->err ? f->err : (int)f->got;
}

/*
 * Start reads of the swapped blocks [first, first + n) of @seq.  With @own, pages on memory
 * tiers become unlocked copies on that list instead (the caller copies them).
 */
static int prefetch(struct kvmm_seq *seq, uint32_t first, uint32_t n, struct list_head *own)
{
	struct kvmm_pool *pool = seq->as->pool;
	struct kvmm_swap_tier *t;
	uint32_t b, end;
	int started = 0, ret = 0;

	end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	for (b = first; b < end; b++) {
		uint64_t swp = seq->pte[b] & ~KVMM_PTE_FLAGS_MASK, s;

		if (!kvmm_pte_is_swap(swp))
			continue;
		t = kvmm_swap_decode(pool, swp, &s);
		if (t && (t->slots[s].flags & SLOT_BAD))
			continue; /* never read again (kvmm_swap_slot_corrupt) */
		if (own && t && copy_unlocked(pool, t)) {
			if (t->slots[s].flags & SLOT_READING)
				continue;
			ret = rd_start_unlocked(pool, t, s, true, seq->as->mag, own);
			ret = ret ? ret : 1;
		} else {
			ret = read_async(pool, swp, seq->as->mag);
		}
		if (ret < 0)
			break;
		started += ret;
	}
	list_for_each_entry (t, &pool->swap->tiers, node)
		t->ops->flush(t);
	return started ? started : (ret < 0 ? ret : 0);
}

int kvmm_mm_seq_prefetch(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_pool *pool;

	if (!seq)
		return -EINVAL;
	pool = seq->as->pool;
	if (!pool->swap || first >= seq->nblocks)
		return 0;
	kvmm_swap_reap(pool);
	return prefetch(seq, first, n, NULL);
}

/* Read ahead the next swapped blocks after @end (with @own: see prefetch()). */
static void readahead(struct kvmm_seq *seq, uint32_t end, struct list_head *own)
{
	uint32_t depth = seq->as->pool->swap->ra_depth;

	if (depth && end < seq->nblocks)
		prefetch(seq, end, depth, own);
}

/*
 * Fault in blocks [first, first + n) of @seq: reads from other tiers are batched and run
 * under the lock; with @f, pages on memory tiers (and their readahead) become unlocked copies
 * on f->own instead, counted in f->got when kvmm_swap_fault_finish() installs them.
 */
static int fault_range(struct kvmm_seq *seq, uint32_t first, uint32_t n, struct kvmm_swap_fault *f)
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
			if (bt->slots[s].flags & SLOT_BAD) {
				err = -EIO; /* failed its checksum already: its bytes are nobody's */
				break;
			}
			if (f && copy_unlocked(pool, bt)) {
				/* copied by kvmm_swap_fault_copy(), without the lock */
				err = rd_start_unlocked(pool, bt, s, false, seq->as->mag, &f->own);
				if (err)
					break;
				continue;
			}
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
				/* unless its bytes are wrong: the sequence is reported dropped */
				if (ios[k].res == -EBADMSG)
					kvmm_swap_slot_corrupt(pool, t, ios[k].slot);
				continue;
			}
			KVMM_BUG_ON((t->slots[ios[k].slot].seq != seq &&
				     !t->slots[ios[k].slot].nr_map) ||
				    t->slots[ios[k].slot].block != blocks[k]);
			kvmm_swap_slot_install(pool, t, ios[k].slot, pgs[k]);
			got++;
		}
	}
	if (!err)
		readahead(seq, end, f ? &f->own : NULL);
	return err ? err : (int)got;
}

int kvmm_mm_seq_fault(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	return fault_range(seq, first, n, NULL);
}

int kvmm_mm_seq_fault_start(struct kvmm_seq *seq, uint32_t first, uint32_t n,
			    struct kvmm_swap_fault *f)
{
	struct swap_rd *rd;
	int ret, nr = 0;

	f->pool = seq ? seq->as->pool : NULL;
	INIT_LIST_HEAD(&f->own);
	f->got = 0;
	f->err = 0;
	ret = fault_range(seq, first, n, f);
	if (ret < 0)
		f->err = ret;
	else
		f->got = (uint32_t)ret;
	list_for_each_entry (rd, &f->own, own)
		nr++;
	return nr;
}

int kvmm_mm_seq_fault_unlocked(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_swap_fault f;

	if (kvmm_mm_seq_fault_start(seq, first, n, &f) > 0) {
		/* from here on @seq may change or go: installs go through the slots */
		pthread_mutex_unlock(&f.pool->lock);
		kvmm_swap_fault_copy(&f);
		pthread_mutex_lock(&f.pool->lock);
	}
	return kvmm_swap_fault_finish(&f);
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
		if (io.res == -EBADMSG) {
			/* dropped: a miss from here on (ENODATA tells the lookup so) */
			kvmm_swap_slot_corrupt(pool, t, s);
			errno = ENODATA;
		}
		return NULL;
	}
	kvmm_swap_slot_install(pool, t, s, pg);
	return pg;
}
