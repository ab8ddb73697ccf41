// SPDX-License-Identifier: MIT
/*
 * kvmm/swap_writeback.c - asynchronous swap-out (write-back): kvmm_mm_seq_swap_out_async()
 * starts the writes of a sequence's pages, which stay mapped and LOCKED meanwhile; memory
 * tiers are copied by kvmm_swap_writeback() with the pool lock let go, and the PTEs switch to
 * their slots only when the writes complete (kvmm_swap_wb_reap()).  Completions that arrive
 * during a synchronous batch only go to their done lists and are installed later, so no page
 * changes under a caller's feet.  Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "compiler.h"
#include "kmalloc.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

/* ---- asynchronous write-back ------------------------------------------------------------ */

/*
 * A swap-out in flight keeps its page mapped (LOCKED | WRITEBACK) and its slot SLOT_WRITING,
 * named by nobody.  Memory tiers (ops->slot_addr) are copied by kvmm_swap_writeback() with the
 * pool lock dropped; other tiers get an ordinary submit() whose end_io queues the record.
 * Completion (wb_finish, under the lock) switches the PTE to the slot and frees the frame -
 * unless the page was touched meanwhile (KVMM_PG_WB_CANCEL: kvmm_page_get/put, an append or
 * truncate into it, a fault), is pinned, was written (ntokens changed) or the write failed:
 * then the page simply stays resident and the slot is freed.  A put that dropped the last
 * reference during the write left the page MAPPED with refcount 0; the completion finishes it.
 */
static void wb_end_io(struct kvmm_swap_io *io)
{
	struct swap_wb *wb = io->priv;

	wb->t->inflight--;
	wb->t->nr_wb_io--;
	list_add_tail(&wb->node, &wb->t->pool->swap->wb_done);
}

/* Whether a completed write-back leaves its page resident (failed, or the page was touched). */
static bool wb_cancelled(const struct swap_wb *wb)
{
	const struct kvmm_page *pg = wb->pg;

	return wb->io.res || (pg->flags & KVMM_PG_WB_CANCEL) || pg->refcount != 1 || pg->pincount ||
	       pg->ntokens != wb->ntokens;
}

/* Finish a completed write-back; true when its frame was freed. */
static bool wb_finish(struct kvmm_pool *pool, struct swap_wb *wb)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t = wb->t;
	struct kvmm_page *pg = wb->pg;
	struct kvmm_seq *seq = wb->seq;
	uint64_t s = wb->io.slot;
	bool cancel;

	list_del(&wb->node);
	list_del(&wb->all);
	sw->nr_wb--;
	t->nr_wb--;
	cancel = wb_cancelled(wb);
	pg->flags &= ~(KVMM_PG_LOCKED | KVMM_PG_WRITEBACK | KVMM_PG_WB_CANCEL);
	if (wb->io.res)
		kvmm_swap_count_fail(t, true, s, wb->io.res);
	if (cancel) {
		/* nothing lost: the page stays where it is (resident, dirty), the slot goes */
		t->slots[s].flags = 0;
		kvmm_swap_slot_release(t, s);
		if (!pg->refcount) {
			/* its last mapper went away during the write: finish that put now */
			pg->refcount = 1;
			kvmm_page_put(pool, pg, NULL);
		}
		free(wb);
		return false;
	}
	t->nr_out++;
	t->bytes_out += t->page_size;
	pool->stat[KVMM_STAT_SWPOUT]++;
	pool->stat[KVMM_STAT_SEQ_SWAPOUT]++;
	KVMM_BUG_ON(wb->block >= seq->nblocks ||
		    kvmm_pte_frame(seq->pte[wb->block]) != kvmm_page_to_frame(pool, pg));
	kvmm_swap_slot_fill(sw, t, s, pg, seq, wb->block);
	seq->pte[wb->block] = swp_entry(t->id, s) | kvmm_pte_flags(seq->pte[wb->block]);
	pg->refcount = 0;
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	kvmm_free_page(pool, pg, seq->as->mag);
	if (pool->hooks && pool->hooks->seq_changed)
		pool->hooks->seq_changed(pool, seq, wb->block);
	free(wb);
	return true;
}

uint32_t kvmm_swap_wb_reap(struct kvmm_pool *pool)
{
	struct kvmm_swap *sw = pool->swap;
	uint32_t n = 0;

	if (!sw)
		return 0;
	while (!list_empty(&sw->wb_done))
		n += wb_finish(pool, list_first_entry(&sw->wb_done, struct swap_wb, node));
	return n;
}

/* Start one page's write-back into slot @s of @t. */
static int wb_start(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint64_t s,
		    struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_pool *pool = sw->pool;
	struct kvmm_page *pg = kvmm_frame_to_page(pool, kvmm_pte_frame(seq->pte[block]));
	struct swap_wb *wb;
	int mode, ret;

	wb = calloc(1, sizeof(*wb));
	if (!wb)
		return -ENOMEM;
	wb->t = t;
	wb->pg = pg;
	wb->seq = seq;
	wb->block = block;
	wb->ntokens = pg->ntokens;
	wb->io.slot = s;
	wb->io.write = true;
	swap_io_frame(pool, &wb->io, kvmm_page_to_frame(pool, pg));
	wb->io.end_io = wb_end_io;
	wb->io.priv = wb;
	mode = kvmm_swap_fault_hit(sw, FP_WRITE);
	if (mode == KVMM_FAULT_CORRUPT && t->ops->slot_addr) {
		wb->io.corrupt = true; /* copied, then spoilt (kvmm_swap_writeback) */
		mode = -1;
	}
	if (mode >= 0) {
		/* injected: completes at once as failed (a short write is not trusted either) */
		wb->io.res = mode == KVMM_FAULT_ENOSPC ? -ENOSPC : -EIO;
		list_add_tail(&wb->node, &sw->wb_done);
	} else if (t->ops->slot_addr) {
		wb->dst = t->ops->slot_addr(t, s);
		list_add_tail(&wb->node, &sw->wb_copy);
	} else {
		while ((ret = t->ops->submit(t, &wb->io)) == -EAGAIN) {
			t->ops->flush(t);
			if (t->ops->poll(t, true) < 0)
				break;
		}
		if (ret) {
			free(wb);
			return ret;
		}
		t->inflight++;
		t->nr_wb_io++;
	}
	t->slots[s].flags = SLOT_WRITING;
	t->slots[s].ns_id = pg->ns_id;
	pg->flags |= KVMM_PG_LOCKED | KVMM_PG_WRITEBACK;
	list_add_tail(&wb->all, &sw->wb_all);
	sw->nr_wb++;
	t->nr_wb++;
	return 0;
}

int kvmm_mm_seq_swap_out_async(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_swap_tier *t;
	struct kvmm_pool *pool;
	struct kvmm_swap *sw;
	uint32_t b, end, started = 0, clean = 0;
	int err = 0;

	err = kvmm_swap_out_range(seq, first, n, &end);
	if (err <= 0)
		return err;
	err = 0;
	pool = seq->as->pool;
	sw = pool->swap;
	b = first;
	while (b < end && !err) {
		uint32_t blocks[KVMM_SWAP_BATCH], got, k;
		uint32_t want = kvmm_swap_out_candidates(sw, seq, &b, end, blocks, &clean);
		uint64_t s;

		for (k = 0; k < want; k += got) {
			got = kvmm_swap_alloc_run(sw, NULL, false, want - k, &t, &s, &err);
			if (!got)
				break;
			for (uint32_t i = 0; i < got; i++) {
				int ret = wb_start(sw, t, s + i, seq, blocks[k + i]);

				if (ret) {
					/* not started: this and the rest of the run go back */
					while (i < got)
						kvmm_swap_slot_release(t, s + i++);
					err = ret;
					break;
				}
				started++;
			}
			if (err)
				break;
		}
	}
	list_for_each_entry (t, &sw->tiers, node)
		if (t->nr_wb)
			t->ops->flush(t);
	if (clean) {
		/* as wb_finish() does for each write that completes */
		pool->stat[KVMM_STAT_SEQ_SWAPOUT] += clean;
		if (pool->hooks && pool->hooks->seq_changed)
			pool->hooks->seq_changed(pool, seq, first);
	}
	started += clean;
	return started ? (int)started : err;
}

/*
 * A batch of write-back copies that kvmm_swap_writeback() makes with the pool lock let go.  It
 * lives on the copier's stack and sits on sw->wb_batches while the copier is away, so that a
 * thread that needs the frames meanwhile (kvmm_swap_writeback_wait, lock held) can wait for the
 * copies and then complete the records itself: the copier needs no lock to finish copying, so
 * waiting under the lock cannot deadlock, and the waiter's view of the pool does not change
 * while it waits.  The copier, back under the lock, finds its batch taken (@node empty).
 */
struct wb_batch {
	struct list_head node; /* in sw->wb_batches until taken */
	struct list_head recs; /* struct swap_wb.node; the copier's alone until @copied */
	uint32_t n;
	bool copied; /* under @mtx: every copy of @recs is done (results in io.res) */
	pthread_mutex_t mtx;
	pthread_cond_t done; /* with @mtx: @copied became true */
};

/* Pool lock held, the batch copied: its records are completed writes, ready to finish. */
static void wb_batch_take(struct kvmm_swap *sw, struct wb_batch *b)
{
	list_del_init(&b->node);
	sw->nr_wb_copying -= b->n;
	list_splice_tail_init(&b->recs, &sw->wb_done);
}

/* Copy the pending write-backs (letting go of the lock with @unlock), wait for the others. */
static void wb_run(struct kvmm_pool *pool, bool unlock)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct swap_wb *wb;
	struct wb_batch b;
	bool staged;
	int ret;

	/*
	 * Take the pending copies: their pages and slots are ours until they are finished.  A
	 * staging backend's copies are started and waited for under the lock (its stream is
	 * the pool's, like every other backend call); memcpy runs without it.
	 */
	staged = swap_staged(pool);
	INIT_LIST_HEAD(&b.recs);
	list_splice_init(&sw->wb_copy, &b.recs);
	b.n = 0;
	list_for_each_entry (wb, &b.recs, node)
		b.n++;
	unlock = unlock && !staged && b.n;
	if (unlock) {
		b.copied = false;
		pthread_mutex_init(&b.mtx, NULL);
		pthread_cond_init(&b.done, NULL);
		list_add_tail(&b.node, &sw->wb_batches);
		sw->nr_wb_copying += b.n;
		pthread_mutex_unlock(&pool->lock);
	}
	/* hashed as copied (memory frames); a staged copy is hashed once it landed, below */
	list_for_each_entry (wb, &b.recs, node)
		wb->io.res = kvmm_swap_mem_write(wb->t, &wb->io, wb->io.slot, wb->dst, false);
	if (staged && b.n) {
		ret = pool->be.ops->sync ? pool->be.ops->sync(&pool->be) : 0;
		list_for_each_entry (wb, &b.recs, node)
			if (!wb->io.res)
				wb->io.res = ret;
	}
	/* staged: the checksums of what landed (the slots are ours until the records finish) */
	list_for_each_entry (wb, &b.recs, node) {
		if (wb->io.res)
			continue;
		if (staged)
			kvmm_swap_mem_csum(wb->t, wb->io.slot, wb->dst);
		if (wb->io.corrupt)
			kvmm_swap_mem_corrupt(wb->t, wb->io.slot, wb->dst);
	}
	if (unlock) {
		/* from here on a waiter under the lock may finish the records */
		pthread_mutex_lock(&b.mtx);
		b.copied = true;
		pthread_cond_broadcast(&b.done);
		pthread_mutex_unlock(&b.mtx);
		pthread_mutex_lock(&pool->lock);
		if (!list_empty(&b.node))
			wb_batch_take(sw, &b);
		/* a waiter let go of @mtx before it let go of the pool lock */
		pthread_cond_destroy(&b.done);
		pthread_mutex_destroy(&b.mtx);
	} else {
		list_splice_tail_init(&b.recs, &sw->wb_done);
	}
	/* submitted writes: wait under the lock (the ring is not shared across threads) */
	list_for_each_entry (t, &sw->tiers, node) {
		if (t->ops->slot_addr || !t->nr_wb)
			continue;
		t->ops->flush(t);
		t->ops->poll(t, false);
		while (t->nr_wb_io && t->ops->poll(t, true) >= 0)
			;
	}
}

int kvmm_swap_writeback(struct kvmm_pool *pool, bool unlock)
{
	if (!pool || !pool->swap)
		return 0;
	wb_run(pool, unlock);
	return (int)kvmm_swap_wb_reap(pool);
}

int kvmm_swap_writeback_wait(struct kvmm_pool *pool, bool all)
{
	struct kvmm_swap *sw = pool ? pool->swap : NULL;
	struct swap_wb *wb, *tmp;
	uint32_t before;

	if (!sw || !sw->nr_wb)
		return 0;
	before = kvmm_pool_nr_free(pool);
	/* other threads' copies: wait for each batch, lock held (its copier needs none) */
	while (!list_empty(&sw->wb_batches)) {
		struct wb_batch *b = list_first_entry(&sw->wb_batches, struct wb_batch, node);

		pthread_mutex_lock(&b->mtx);
		while (!b->copied)
			pthread_cond_wait(&b->done, &b->mtx);
		pthread_mutex_unlock(&b->mtx);
		wb_batch_take(sw, b);
	}
	wb_run(pool, false);
	if (all) {
		kvmm_swap_wb_reap(pool);
	} else {
		/* only what changes no mapping: the rest stays for the next completion */
		list_for_each_entry_safe (wb, tmp, &sw->wb_done, node)
			if (wb_cancelled(wb))
				wb_finish(pool, wb);
	}
	/* frames: swapped-out pages, and cancelled ones whose last mapper went meanwhile */
	return (int)(kvmm_pool_nr_free(pool) - min(before, kvmm_pool_nr_free(pool)));
}

uint32_t kvmm_swap_nr_writeback(const struct kvmm_pool *pool)
{
	return pool && pool->swap ? pool->swap->nr_wb : 0;
}
