// SPDX-License-Identifier: MIT
/*
 * kvmm/swapfile.c - swap-out, demotion, move-down, swapoff and the references to slots; the
 * tiers and their slot allocators are swap_tier.c's, asynchronous write-back is
 * swap_writeback.c's, the fault points swap_fault.c's and the invariant checker swap_check.c's.
 *
 * Every used slot names what refers to it (struct kvmm_swap_slot): the one sequence whose PTE
 * holds the swap entry (only pages with refcount 1 are swapped, so there is never more than
 * one) and/or the page-cache entry of a sealed page.  That small reverse map is what lets
 * swapoff and move-down rewrite the references of a slot they move, and what lets a lookup
 * that faults a demoted page back map it for its sequence too.  A slot is freed when both
 * references are gone (and no read into it is in flight), unless the page it held came back
 * clean: then the resident page keeps it (SLOT_KEPT, page->swap) and its next swap-out is a
 * PTE rewrite with no write (clean_out); a full tier frees kept slots before anything else.
 *
 * Synchronous I/O here is batched (kvmm_swap_io_run): submit everything, flush once, poll
 * until every I/O of the batch completed.  Sequence swap-out can also be asynchronous
 * (swap_writeback.c).  Completions of asynchronous reads (readahead, swap_state.c) and writes
 * that arrive during a synchronous batch only go to their done lists and are installed later,
 * so no page changes under a caller's feet.  While a swap operation runs, sw->busy keeps
 * nested reclaim (a swap-in's frame allocation under min) from demoting, i.e. from starting
 * I/O inside I/O.  Locking: the pool lock (mm.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "bitmap.h"
#include "compiler.h"
#include "kmalloc.h"
#include "log.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/swap_internal.h"

/* ---- moving page bytes: host-mapped frames or the backend's staging hooks ------------------ */

int kvmm_swap_io_sync(struct kvmm_swap_tier *t)
{
	struct kvmm_backend_ctx *be = &t->pool->be;

	return swap_staged(t->pool) && be->ops->sync ? be->ops->sync(be) : 0;
}

int kvmm_swap_io_to_host(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, void *host,
			 bool sync)
{
	struct kvmm_backend_ctx *be = &t->pool->be;
	int ret;

	if (io->buf) {
		memcpy(host, io->buf, t->page_size);
		return 0;
	}
	if (!swap_staged(t->pool))
		return -EOPNOTSUPP;
	ret = be->ops->copy_to_host(be, host, &io->frame, 1);
	if (!ret && sync)
		ret = kvmm_swap_io_sync(t);
	return ret;
}

int kvmm_swap_io_from_host(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io,
			   const void *host, bool sync)
{
	struct kvmm_backend_ctx *be = &t->pool->be;
	int ret;

	if (io->buf) {
		memcpy(io->buf, host, t->page_size);
		return 0;
	}
	if (!swap_staged(t->pool))
		return -EOPNOTSUPP;
	ret = be->ops->copy_from_host(be, &io->frame, host, 1);
	if (!ret && sync)
		ret = kvmm_swap_io_sync(t);
	return ret;
}

void kvmm_swap_mem_csum(struct kvmm_swap_tier *t, uint64_t slot, const void *page)
{
	if (t->csum && slot < t->nslots)
		t->csum[slot] = XXH3_64bits(page, t->page_size);
}

#define COPY_HASH_CHUNK 4096 /* hashed while still in the L1 cache after its copy */

/*
 * memcpy(dst, src, n) and XXH3-64 of the bytes written, in one pass over memory: each chunk
 * is hashed right after it was copied, from the cache, instead of a second pass over the
 * page from DRAM.  The streaming hash equals XXH3_64bits(dst, n).
 */
static uint64_t copy_hash(void *dst, const void *src, size_t n)
{
	XXH3_state_t st;
	size_t off;

	XXH3_64bits_reset(&st);
	for (off = 0; off < n; off += COPY_HASH_CHUNK) {
		size_t len = n - off < COPY_HASH_CHUNK ? n - off : COPY_HASH_CHUNK;

		memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, len);
		XXH3_64bits_update(&st, (uint8_t *)dst + off, len);
	}
	return XXH3_64bits_digest(&st);
}

int kvmm_swap_mem_write(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, uint64_t slot,
			void *dst, bool sync)
{
	int ret;

	if (io->buf && t->csum && slot < t->nslots) {
		t->csum[slot] = copy_hash(dst, io->buf, t->page_size);
		return 0;
	}
	ret = kvmm_swap_io_to_host(t, io, dst, sync);
	/* staged and not synced: the caller hashes once the copy landed */
	if (!ret && (sync || io->buf))
		kvmm_swap_mem_csum(t, slot, dst);
	return ret;
}

int kvmm_swap_mem_read(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, uint64_t slot,
		       const void *src, bool sync)
{
	uint64_t want = t->csum && slot < t->nslots ? t->csum[slot] : 0;

	/* 0: nothing known (never written since the tier came up) */
	if (!want)
		return kvmm_swap_io_from_host(t, io, src, sync);
	/* the frame's bytes, hashed as they land: those that would be mapped */
	if (io->buf)
		return copy_hash(io->buf, src, t->page_size) == want ? 0 : -EBADMSG;
	/* staged: checked before it reaches the device */
	if (XXH3_64bits(src, t->page_size) != want)
		return -EBADMSG;
	return kvmm_swap_io_from_host(t, io, src, sync);
}

void kvmm_swap_mem_corrupt(struct kvmm_swap_tier *t, uint64_t slot, void *page)
{
	uint8_t *b = page;

	b[t->page_size / 2] ^= 0x5a;
	kvmm_warn("swap: fault injection corrupted slot %llu of tier %u", (unsigned long long)slot,
		  t->id);
}

void *kvmm_swap_host_alloc(struct kvmm_swap_tier *t, uint64_t bytes)
{
	struct kvmm_backend_ctx *be = &t->pool->be;

	if (!be->ops->host_alloc || !be->ops->host_free)
		return NULL;
	return be->ops->host_alloc(be, bytes);
}

void kvmm_swap_host_free(struct kvmm_swap_tier *t, void *mem, uint64_t bytes)
{
	struct kvmm_backend_ctx *be = &t->pool->be;

	if (mem)
		be->ops->host_free(be, mem, bytes);
}

/* ---- synchronous batched I/O -------------------------------------------------------------- */

struct io_batch {
	uint32_t pending;
};

static void batch_end_io(struct kvmm_swap_io *io)
{
	struct io_batch *b = io->priv;

	b->pending--;
}

void kvmm_swap_count_fail(struct kvmm_swap_tier *t, bool write, uint64_t slot, int err)
{
	const char *where = t->path[0] ? t->path : "host memory";

	t->nr_fail++;
	t->pool->stat[KVMM_STAT_SWAP_FAIL]++;
	if (!write && err == -EBADMSG) {
		t->nr_csum_bad++;
		t->pool->stat[KVMM_STAT_SWAP_CSUM_BAD]++;
		kvmm_warn_ratelimited("swap: slot %llu of tier %u (%s) failed its checksum: the "
				      "page is dropped (%llu on this tier)",
				      (unsigned long long)slot, t->id, where,
				      (unsigned long long)t->nr_csum_bad);
		return;
	}
	/* one line per failure, a bounded number per second per site (include/log.h) */
	if (write)
		kvmm_warn_ratelimited("swap: write of slot %llu to tier %u (%s) failed: %s; the "
				      "page stays resident (%llu failures on this tier)",
				      (unsigned long long)slot, t->id, where, strerror(-err),
				      (unsigned long long)t->nr_fail);
	else
		kvmm_warn_ratelimited("swap: read of slot %llu from tier %u (%s) failed: %s "
				      "(%llu failures on this tier)",
				      (unsigned long long)slot, t->id, where, strerror(-err),
				      (unsigned long long)t->nr_fail);
}

void kvmm_swap_io_run(struct kvmm_swap *sw, struct kvmm_swap_tier *t, struct kvmm_swap_io *ios,
		      uint32_t n)
{
	struct io_batch batch = {0};
	uint32_t i;
	int ret;

	for (i = 0; i < n; i++) {
		struct kvmm_swap_io *io = &ios[i];
		int mode = kvmm_swap_fault_hit(sw, io->write ? FP_WRITE : FP_READ);

		io->end_io = batch_end_io;
		io->priv = &batch;
		io->res = 0;
		io->corrupt = false;
		if (mode == KVMM_FAULT_CORRUPT && io->write && t->ops->slot_addr) {
			io->corrupt = true; /* written, then spoilt below */
		} else if (mode >= 0) {
			/* a short transfer is an error like any other: the slot is not trusted */
			io->res = mode == KVMM_FAULT_ENOSPC ? -ENOSPC : -EIO;
			continue;
		}
		while ((ret = t->ops->submit(t, io)) == -EAGAIN) {
			/* out of queue slots: let some complete */
			t->ops->flush(t);
			if (t->ops->poll(t, true) < 0)
				break;
		}
		if (ret) {
			io->res = ret;
			continue;
		}
		batch.pending++;
	}
	t->ops->flush(t);
	while (batch.pending) {
		ret = t->ops->poll(t, true);
		/* a tier whose queue broke cannot tell which I/O finished: nothing sane is left */
		KVMM_BUG_ON(ret < 0 && ret != -EINTR && ret != -EAGAIN);
	}
	for (i = 0; i < n; i++) {
		if (ios[i].corrupt && !ios[i].res)
			kvmm_swap_mem_corrupt(t, ios[i].slot, t->ops->slot_addr(t, ios[i].slot));
		if (ios[i].res) {
			kvmm_swap_count_fail(t, ios[i].write, ios[i].slot, ios[i].res);
		} else if (ios[i].write) {
			t->nr_out++;
			t->bytes_out += t->page_size;
			sw->pool->stat[KVMM_STAT_SWPOUT]++;
		} else {
			t->nr_in++;
			t->bytes_in += t->page_size;
			sw->pool->stat[KVMM_STAT_SWPIN]++;
		}
	}
}

/* ---- swap-out --------------------------------------------------------------------------------- */

static inline bool swappable(const struct kvmm_page *pg)
{
	return pg->state == KVMM_PAGE_MAPPED && pg->refcount == 1 && !pg->pincount &&
	       !(pg->flags & (KVMM_PG_LOCKED | KVMM_PG_POISONED));
}

/* Record in slot @s what page @pg was, and detach its page-cache entry to the slot. */
void kvmm_swap_slot_fill(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint64_t s,
			 struct kvmm_page *pg, struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_swap_slot *sl = &t->slots[s];

	sl->seq = seq;
	sl->nr_map = 0;
	sl->block = block;
	sl->ntokens = pg->ntokens;
	sl->pgflags = pg->flags & (KVMM_PG_ACTIVE | KVMM_PG_REFERENCED | KVMM_PG_KV_PENDING);
	sl->ns_id = pg->ns_id;
	sl->swapped_at = ++sw->clock;
	sl->flags = 0;
	sl->ent = NULL;
	if (pg->flags & KVMM_PG_SEALED) {
		sl->ent = pg->cache;
		kvmm_pagecache_ent_swapout(sw->pool, pg, swp_entry(t->id, s));
		kvmm_swap_index_note(t, s);
	}
}

/*
 * Swap out block @block of @seq, whose page is clean and swap-cached (it keeps the slot it
 * came in from, page->swap): no copy, no write - the PTE names the slot again and the frame
 * is freed at once.
 */
static void clean_out(struct kvmm_swap *sw, struct kvmm_seq *seq, uint32_t block,
		      struct kvmm_page *pg)
{
	struct kvmm_pool *pool = sw->pool;
	struct kvmm_swap_tier *t;
	uint64_t s;

	t = kvmm_swap_decode(pool, pg->swap, &s);
	KVMM_BUG_ON(!t || !(t->slots[s].flags & SLOT_KEPT) ||
		    t->slots[s].block != kvmm_page_to_frame(pool, pg) ||
		    (pg->flags & KVMM_PG_KV_PENDING));
	t->nr_kept--;
	pg->swap = 0;
	kvmm_swap_slot_fill(sw, t, s, pg, seq, block);
	seq->pte[block] = swp_entry(t->id, s) | kvmm_pte_flags(seq->pte[block]);
	pg->refcount = 0;
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	kvmm_free_page(pool, pg, seq->as->mag);
	t->nr_clean_out++;
	pool->stat[KVMM_STAT_SWAP_CLEAN]++;
}

/*
 * The next swap-out candidates of seq from block *b to end: a clean swap-cached page needs no
 * write and goes at once (clean_out(), counted in *clean); the others, up to KVMM_SWAP_BATCH, are
 * put in blocks and counted in the return value.  *b moves past the last block looked at.
 */
uint32_t kvmm_swap_out_candidates(struct kvmm_swap *sw, struct kvmm_seq *seq, uint32_t *b,
				  uint32_t end, uint32_t *blocks, uint32_t *clean)
{
	struct kvmm_pool *pool = seq->as->pool;
	uint32_t want = 0;

	for (; *b < end && want < KVMM_SWAP_BATCH; (*b)++) {
		uint32_t f = kvmm_pte_frame(seq->pte[*b]);

		if (f == KVMM_FRAME_NONE || !swappable(&pool->pages[f]))
			continue;
		if (pool->pages[f].swap) {
			clean_out(sw, seq, *b, &pool->pages[f]);
			(*clean)++;
			continue;
		}
		blocks[want++] = *b;
	}
	return want;
}

int kvmm_swap_out_range(struct kvmm_seq *seq, uint32_t first, uint32_t n, uint32_t *end)
{
	struct kvmm_swap *sw;

	if (!seq)
		return -EINVAL;
	sw = seq->as->pool->swap;
	if (!sw || !sw->nr_tiers)
		return -ENOSPC;
	if (first >= seq->nblocks || !n)
		return 0;
	*end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	return 1;
}

int kvmm_mm_seq_swap_out(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_swap_io ios[KVMM_SWAP_BATCH];
	uint32_t blocks[KVMM_SWAP_BATCH];
	struct kvmm_pool *pool;
	struct kvmm_swap *sw;
	uint32_t b, end, done = 0;
	int err = 0;

	err = kvmm_swap_out_range(seq, first, n, &end);
	if (err <= 0)
		return err;
	err = 0;
	pool = seq->as->pool;
	sw = pool->swap;
	kvmm_swap_reap(pool);
	sw->busy++;
	b = first;
	while (b < end) {
		struct kvmm_swap_tier *t;
		uint32_t want, got, i, k;
		uint64_t s;

		want = kvmm_swap_out_candidates(sw, seq, &b, end, blocks, &done);
		if (!want)
			break;
		for (i = 0; i < want; i += got) {
			got = kvmm_swap_alloc_run(sw, NULL, false, want - i, &t, &s, &err);
			if (!got)
				goto out;
			for (k = 0; k < got; k++) {
				ios[k].slot = s + k;
				ios[k].write = true;
				swap_io_frame(pool, &ios[k],
					      kvmm_pte_frame(seq->pte[blocks[i + k]]));
			}
			kvmm_swap_io_run(sw, t, ios, got);
			for (k = 0; k < got; k++) {
				uint32_t blk = blocks[i + k];
				struct kvmm_page *pg =
					kvmm_frame_to_page(pool, kvmm_pte_frame(seq->pte[blk]));
				uint64_t swp = swp_entry(t->id, s + k);

				if (ios[k].res) {
					/* nothing lost: the page stays resident, its slot goes */
					kvmm_swap_slot_release(t, s + k);
					err = ios[k].res;
					continue;
				}
				kvmm_swap_slot_fill(sw, t, s + k, pg, seq, blk);
				seq->pte[blk] = swp | kvmm_pte_flags(seq->pte[blk]);
				pg->refcount = 0;
				pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
				kvmm_free_page(pool, pg, seq->as->mag);
				done++;
			}
		}
	}
out:
	sw->busy--;
	return done ? (int)done : err;
}

/* ---- pages several sequences map ------------------------------------------------------------ */

bool kvmm_swap_shared_candidate(const struct kvmm_page *pg)
{
	return pg->state == KVMM_PAGE_MAPPED && pg->refcount >= 2 && !pg->pincount &&
	       (pg->flags & KVMM_PG_SEALED) && pg->cache && !kvmm_pagecache_ent_orphan(pg->cache) &&
	       !(pg->flags & (KVMM_PG_LOCKED | KVMM_PG_POISONED | KVMM_PG_WRITEBACK));
}

/* Does @seq's PTE at @block name frame @frame (swp 0) or swap entry @swp? */
static inline bool maps_at(const struct kvmm_seq *seq, uint32_t block, uint32_t frame, uint64_t swp)
{
	uint64_t pte;

	if (block >= seq->nblocks)
		return false;
	pte = seq->pte[block];
	if (swp)
		return kvmm_pte_is_swap(pte) && (pte & ~KVMM_PTE_FLAGS_MASK) == swp;
	return kvmm_pte_is_present(pte) && kvmm_pte_frame(pte) == frame;
}

uint32_t kvmm_swap_shared_remap(struct kvmm_pool *pool, uint64_t swp, uint32_t block,
				struct kvmm_page *pg, uint64_t to, struct kvmm_seq **first)
{
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	uint32_t n = 0;

	/* a shared page sits at its entry's depth in every sequence that maps it */
	list_for_each_entry (as, &pool->aspaces, node) {
		list_for_each_entry (seq, &as->seqs, node) {
			if (!maps_at(seq, block, 0, swp))
				continue;
			if (first && !n)
				*first = seq;
			n++;
			if (pg) {
				kvmm_page_get(pool, pg);
				seq->pte[block] =
					kvmm_mm_seq_mk_pte(pool, pg, block < seq->nsealed);
			} else if (to) {
				seq->pte[block] = to | kvmm_pte_flags(seq->pte[block]);
			} else if (first) {
				continue; /* only looking */
			} else if (!(seq->flags & KVMM_SEQ_F_PREEMPTED)) {
				/* its bytes are gone (a spoilt slot): report it like swap.h says */
				seq->flags |= KVMM_SEQ_F_PREEMPTED;
				if (pool->hooks && pool->hooks->lost)
					pool->hooks->lost(pool, seq, kvmm_seq_nr_resident(seq));
				else if (pool->hooks && pool->hooks->oom)
					pool->hooks->oom(pool, seq, kvmm_seq_nr_resident(seq));
				continue;
			}
			if ((pg || to) && pool->hooks && pool->hooks->seq_changed)
				pool->hooks->seq_changed(pool, seq, block);
		}
	}
	return n;
}

bool kvmm_swap_map_far(struct kvmm_pool *pool, struct kvmm_swap_tier *t, struct kvmm_cache_ent *ent,
		       struct kvmm_seq *seq, uint32_t block)
{
	uint64_t swp = kvmm_pagecache_ent_swap(ent), s;
	struct kvmm_swap_slot *sl;

	if (!t || kvmm_swap_decode(pool, swp, &s) != t || !bitmap_test_bit(t->map, s))
		return false;
	sl = &t->slots[s];
	if (sl->ent != ent || sl->nr_map == UINT32_MAX ||
	    (sl->flags & (SLOT_READING | SLOT_WRITING | SLOT_KEPT | SLOT_BAD | SLOT_FAR_HELD)))
		return false;
	if (sl->seq) {
		/* its one mapper's PTE names it at the same depth: now one of several */
		KVMM_BUG_ON(sl->block != block || !maps_at(sl->seq, block, 0, swp));
		sl->seq->pte[block] |= KVMM_PTE_SHARED;
		sl->seq = NULL;
		sl->nr_map = 1;
	} else if (!sl->nr_map) {
		sl->block = block; /* demoted cache until now: nobody mapped it */
	}
	KVMM_BUG_ON(sl->block != block);
	sl->nr_map++;
	seq->pte[block] = swp | KVMM_PTE_SEALED | KVMM_PTE_SHARED;
	return true;
}

/*
 * Swap out @pg, which several sequences map at @block: -EBUSY when it may not go (a mapper
 * forbids reclaim, or they do not add up to its refcount), else 0 or the I/O's error.
 */
static int shared_out(struct kvmm_swap *sw, struct kvmm_page *pg, uint32_t block)
{
	struct kvmm_pool *pool = sw->pool;
	uint32_t f = kvmm_page_to_frame(pool, pg), n = 0;
	struct kvmm_swap_tier *t;
	struct kvmm_aspace *as;
	struct kvmm_seq *seq;
	uint64_t s, swp;
	int err = 0;

	list_for_each_entry (as, &pool->aspaces, node) {
		list_for_each_entry (seq, &as->seqs, node) {
			if (!maps_at(seq, block, f, 0))
				continue;
			if (seq->flags & KVMM_SEQ_F_NORECLAIM)
				return -EBUSY;
			n++;
		}
	}
	if (n != pg->refcount)
		return -EBUSY;
	if (pg->swap) {
		/* clean and swap-cached: its kept slot still holds these bytes */
		t = kvmm_swap_decode(pool, pg->swap, &s);
		KVMM_BUG_ON(!t || !(t->slots[s].flags & SLOT_KEPT) || t->slots[s].block != f);
		t->nr_kept--;
		pg->swap = 0;
		t->nr_clean_out++;
		pool->stat[KVMM_STAT_SWAP_CLEAN]++;
	} else {
		struct kvmm_swap_io io;

		if (!kvmm_swap_alloc_run(sw, NULL, false, 1, &t, &s, &err))
			return err;
		io.slot = s;
		io.write = true;
		swap_io_frame(pool, &io, f);
		kvmm_swap_io_run(sw, t, &io, 1);
		if (io.res) {
			/* nothing lost: the page stays mapped, its slot goes */
			kvmm_swap_slot_release(t, s);
			return io.res;
		}
	}
	swp = swp_entry(t->id, s);
	/* every mapper's PTE names the slot: rewritten while they still map the frame */
	list_for_each_entry (as, &pool->aspaces, node) {
		list_for_each_entry (seq, &as->seqs, node) {
			if (!maps_at(seq, block, f, 0))
				continue;
			seq->pte[block] = swp | kvmm_pte_flags(seq->pte[block]);
			if (pool->hooks && pool->hooks->seq_changed)
				pool->hooks->seq_changed(pool, seq, block);
		}
	}
	kvmm_swap_slot_fill(sw, t, s, pg, NULL, block);
	t->slots[s].nr_map = n;
	pg->refcount = 0;
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	kvmm_free_page(pool, pg, NULL);
	pool->stat[KVMM_STAT_SWAP_SHARED]++;
	return 0;
}

int kvmm_mm_seq_swap_out_shared(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_pool *pool;
	struct kvmm_swap *sw;
	uint32_t b, end, done = 0;
	int err = 0;

	err = kvmm_swap_out_range(seq, first, n, &end);
	if (err <= 0)
		return err;
	err = 0;
	pool = seq->as->pool;
	sw = pool->swap;
	kvmm_swap_reap(pool);
	sw->busy++;
	for (b = first; b < end; b++) {
		uint64_t pte = seq->pte[b];
		int ret;

		if (!kvmm_pte_is_present(pte) ||
		    !kvmm_swap_shared_candidate(kvmm_frame_to_page(pool, kvmm_pte_frame(pte))))
			continue;
		ret = shared_out(sw, kvmm_frame_to_page(pool, kvmm_pte_frame(pte)), b);
		if (!ret) {
			done++;
		} else if (ret != -EBUSY) {
			err = ret; /* no room on any tier, or the write failed: stop */
			break;
		}
	}
	sw->busy--;
	return done ? (int)done : err;
}

bool kvmm_swap_busy(const struct kvmm_pool *pool)
{
	return pool->swap && pool->swap->busy;
}

uint32_t kvmm_mm_seq_nr_swapped(const struct kvmm_seq *seq)
{
	uint32_t b, n = 0;

	if (!seq)
		return 0;
	for (b = 0; b < seq->nblocks; b++)
		n += !!kvmm_pte_is_swap(seq->pte[b]);
	return n;
}

/* ---- demotion of cached pages -------------------------------------------------------------------- */

int kvmm_swap_demote_page(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct kvmm_swap_io io;
	uint64_t s;
	int err = 0;

	if (!sw || sw->busy || !sw->nr_tiers)
		return -ENOENT;
	KVMM_BUG_ON(pg->state != KVMM_PAGE_CACHED || (pg->flags & KVMM_PG_LRU) || !pg->cache);
	/* an orphan can never be found again: dropping it is all there is to do */
	if (kvmm_pagecache_ent_orphan(pg->cache))
		return -ENOENT;
	sw->busy++;
	if (!kvmm_swap_alloc_run(sw, NULL, false, 1, &t, &s, &err))
		goto out;
	io.slot = s;
	io.write = true;
	swap_io_frame(pool, &io, kvmm_page_to_frame(pool, pg));
	kvmm_swap_io_run(sw, t, &io, 1);
	if (io.res) {
		kvmm_swap_slot_release(t, s);
		err = io.res;
		goto out;
	}
	kvmm_swap_slot_fill(sw, t, s, pg, NULL, 0);
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	/* still CACHED: kvmm_free_page uncharges ns->cached */
	kvmm_free_page(pool, pg, NULL);
	pool->stat[KVMM_STAT_SWAP_DEMOTE]++;
out:
	sw->busy--;
	return err;
}

int kvmm_swap_demote(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n)
{
	struct kvmm_page *pg, *prev;
	uint32_t done = 0;
	int err = 0;

	if (!pool || !pool->swap || !pool->swap->nr_tiers)
		return 0;
	kvmm_swap_reap(pool);
	list_for_each_entry_safe_reverse (pg, prev, &pool->lru.inactive, lru) {
		if (done >= n)
			break;
		if ((ns && pg->ns_id != ns->id) || (pg->flags & KVMM_PG_LOCKED) ||
		    kvmm_pagecache_ent_orphan(pg->cache))
			continue;
		kvmm_lru_del(pool, pg);
		err = kvmm_swap_demote_page(pool, pg);
		if (err) {
			kvmm_lru_add(pool, pg);
			break;
		}
		done++;
	}
	return done ? (int)done : (err == -ENOENT ? 0 : err);
}

/* ---- moving slots between tiers ---------------------------------------------------------------- */

/* Rewrite the references of slot @s of @from to slot @ns of @to and move its record. */
static void slot_moved(struct kvmm_swap_tier *from, uint64_t s, struct kvmm_swap_tier *to,
		       uint64_t ns)
{
	struct kvmm_swap_slot *sl = &from->slots[s];
	uint64_t swp = swp_entry(to->id, ns);

	to->slots[ns] = *sl;
	if (sl->seq)
		sl->seq->pte[sl->block] = swp | kvmm_pte_flags(sl->seq->pte[sl->block]);
	if (sl->nr_map)
		KVMM_BUG_ON(kvmm_swap_shared_remap(from->pool, swp_entry(from->id, s), sl->block,
						   NULL, swp, NULL) != sl->nr_map);
	if (sl->ent)
		kvmm_pagecache_ent_swapin(from->pool, sl->ent, NULL, swp);
	kvmm_swap_slot_release(from, s);
	kvmm_swap_index_note(to, ns);
}

/*
 * Move up to @n used slots of @t, from its move cursor on, to other tiers (@below: only
 * lower-priority ones).  Returns the number moved, -ENOSPC when no tier has room, -ENOMEM.
 */
static int move_slots(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint32_t n, bool below)
{
	struct kvmm_swap_io rd[KVMM_SWAP_BATCH], wr[KVMM_SWAP_BATCH];
	uint64_t src[KVMM_SWAP_BATCH];
	struct kvmm_swap_tier *dst;
	uint64_t s = t->move_cursor, scanned = 0, d;
	uint32_t moved = 0;
	uint8_t *bounce;
	int err = 0;

	bounce = aligned_alloc(4096, KVMM_SWAP_BATCH * t->page_size);
	if (!bounce)
		return -ENOMEM;
	sw->busy++;
	while (moved < n && t->nr_used && scanned < t->nslots) {
		uint32_t want = 0, got, k;

		/* the next used slots that no read is using */
		while (want < KVMM_SWAP_BATCH && want < n - moved && scanned < t->nslots) {
			if (s >= t->nslots)
				s = 0;
			if (!bitmap_test_bit(t->map, s) ||
			    (t->slots[s].flags &
			     (SLOT_READING | SLOT_WRITING | SLOT_BAD | SLOT_FAR_HELD))) {
				/* free, in use by a read or a write-back, spoilt, or kept for readers */
			} else if (t->slots[s].flags & SLOT_KEPT) {
				/* its page is resident: the slot is just freed, that is room too */
				kvmm_swap_kept_release(t, s);
			} else if (!t->slots[s].seq && !t->slots[s].nr_map &&
				   kvmm_pagecache_ent_orphan(t->slots[s].ent)) {
				/* a demoted page no lookup can reach any more: drop, don't move */
				kvmm_pagecache_remove_ent(t->pool, t->slots[s].ent);
				kvmm_swap_slot_release(t, s);
			} else {
				src[want++] = s;
			}
			s++;
			scanned++;
		}
		if (!want)
			break;
		got = kvmm_swap_alloc_run(sw, t, below, want, &dst, &d, &err);
		if (!got)
			break;
		for (k = 0; k < got; k++) {
			rd[k].slot = src[k];
			rd[k].write = false;
			rd[k].buf = bounce + (size_t)k * t->page_size;
		}
		kvmm_swap_io_run(sw, t, rd, got);
		for (k = 0; k < got; k++) {
			wr[k].slot = d + k;
			wr[k].write = true;
			wr[k].buf = rd[k].buf;
		}
		kvmm_swap_io_run(sw, dst, wr, got);
		for (k = 0; k < got; k++) {
			if (rd[k].res || wr[k].res) {
				kvmm_swap_slot_release(dst, d + k);
				if (rd[k].res == -EBADMSG)
					kvmm_swap_slot_corrupt(t->pool, t, src[k]);
				err = rd[k].res ? rd[k].res : wr[k].res;
				continue;
			}
			slot_moved(t, src[k], dst, d + k);
			moved++;
		}
		/* slots not reached by the run are looked at again */
		s = src[got - 1] + 1;
	}
	t->move_cursor = s;
	sw->busy--;
	free(bounce);
	return moved ? (int)moved : err;
}

int kvmm_swap_move_down(struct kvmm_pool *pool, unsigned int tier, uint32_t n)
{
	struct kvmm_swap_tier *t = kvmm_swap_tier_get(pool, tier);

	if (!t)
		return -ENOENT;
	kvmm_swap_reap(pool);
	return move_slots(pool->swap, t, n, true);
}

#define PUSH_OUT_SCAN 1024 /* slots one push-out looks at, at most */

/* Free slot @s of @t and the cache entry of the page in it. */
static void push_out_free(struct kvmm_swap_tier *t, uint64_t s)
{
	kvmm_pagecache_remove_ent(t->pool, t->slots[s].ent);
	kvmm_swap_slot_release(t, s);
}

/*
 * An entry is removed only once it is a leaf: its children's prefix walk (the digest the
 * hook computes) goes through it, and a lookup here would find nothing below a removed
 * parent.  A parent written out while its children stay is marked and freed later, without
 * being read again, when it has become a leaf.
 */
int kvmm_swap_push_out(struct kvmm_pool *pool, uint32_t n)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_io rd[KVMM_SWAP_BATCH];
	unsigned int ids[KVMM_SWAP_TIER_MAX];
	bool (*demote)(struct kvmm_pool *, const struct kvmm_cache_ent *, const void *);
	bool taken[KVMM_SWAP_BATCH];
	struct kvmm_swap_tier *t;
	uint32_t want = 0, done = 0, k, scanned, nt;
	uint8_t *bounce;
	uint64_t s;

	demote = pool->hooks ? pool->hooks->demote : NULL;
	if (!sw || sw->busy || !demote || !n)
		return 0;
	nt = kvmm_swap_tiers(pool, ids, KVMM_SWAP_TIER_MAX);
	t = nt ? kvmm_swap_tier_get(pool, ids[nt - 1]) : NULL;
	if (!t || !t->nr_used)
		return 0;
	n = min_t(uint32_t, n, KVMM_SWAP_BATCH);
	s = t->move_cursor;
	for (scanned = 0; want < n && done < n && scanned < t->nslots && scanned < PUSH_OUT_SCAN;
	     scanned++, s++) {
		struct kvmm_swap_slot *sl;

		if (s >= t->nslots)
			s = 0;
		sl = &t->slots[s];
		/* a cached page alone in its slot: no sequence's PTE, no I/O, not resident */
		if (!bitmap_test_bit(t->map, s) || sl->seq || sl->nr_map || !sl->ent ||
		    (sl->flags & (SLOT_READING | SLOT_WRITING | SLOT_KEPT | SLOT_BAD)))
			continue;
		if (kvmm_pagecache_ent_orphan(sl->ent)) {
			/* no lookup can reach it any more: its room is free for the taking */
			push_out_free(t, s);
			done++;
			continue;
		}
		if (!demote(pool, sl->ent, NULL))
			continue;
		if (kvmm_pagecache_ent_remote(sl->ent)) {
			/* the cluster has it: free it once it is a leaf, no read needed */
			if (kvmm_pagecache_ent_leaf(sl->ent)) {
				push_out_free(t, s);
				done++;
			}
			continue;
		}
		rd[want].slot = s;
		rd[want].write = false;
		want++;
	}
	t->move_cursor = s;
	if (!want)
		return (int)done;
	bounce = aligned_alloc(4096, (size_t)want * t->page_size);
	if (!bounce)
		return (int)done;
	for (k = 0; k < want; k++)
		rd[k].buf = bounce + (size_t)k * t->page_size;
	sw->busy++;
	kvmm_swap_io_run(sw, t, rd, want);
	/* every chain is whole while the hook computes the digests: hand all over first */
	for (k = 0; k < want; k++) {
		struct kvmm_cache_ent *ent = t->slots[rd[k].slot].ent;

		/* a page that cannot be read or handed over stays where it is */
		taken[k] = !rd[k].res && demote(pool, ent, rd[k].buf);
		if (rd[k].res == -EBADMSG)
			kvmm_swap_slot_corrupt(pool, t, rd[k].slot); /* nor is a spoilt one sent */
		if (taken[k])
			kvmm_pagecache_ent_set_remote(ent);
	}
	/* then free them, children (later slots) before their parents */
	for (k = want; k--;) {
		if (!taken[k] || !kvmm_pagecache_ent_leaf(t->slots[rd[k].slot].ent))
			continue;
		push_out_free(t, rd[k].slot);
		done++;
	}
	sw->busy--;
	free(bounce);
	return (int)done;
}

/* ---- swapoff ---------------------------------------------------------------------------------- */

int kvmm_swapoff(struct kvmm_pool *pool, unsigned int tier)
{
	struct kvmm_swap_tier *t = kvmm_swap_tier_get(pool, tier);
	struct kvmm_swap *sw;
	uint64_t s;
	int ret;

	if (!t)
		return -ENOENT;
	sw = pool->swap;
	/* nothing may be reading from it or writing to it while it empties */
	kvmm_swap_poll(pool, true);
	if (t->nr_wb)
		return -EBUSY; /* another thread is copying into it without the lock: retry */
	if (t->nr_far_pins)
		return -EBUSY; /* clients are reading its slots in place (far pins): retry */
	/* kept slots are not swapped pages: their resident pages simply lose them */
	kvmm_swap_release_kept(t, UINT32_MAX);
	/* first choice: keep the pages swapped, on the other tiers */
	while (t->nr_used) {
		ret = move_slots(sw, t, KVMM_SWAP_BATCH, false);
		if (ret <= 0)
			break;
	}
	/* what does not fit elsewhere: sequences' pages come back, cached ones are dropped */
	for (s = 0; t->nr_used && s < t->nslots; s++) {
		struct kvmm_swap_slot *sl = &t->slots[s];

		if (!bitmap_test_bit(t->map, s))
			continue;
		if (sl->seq || sl->nr_map) {
			struct kvmm_seq *seq = sl->seq;

			/* a shared page comes back for every mapper with the first one's fault */
			if (!seq)
				kvmm_swap_shared_remap(pool, swp_entry(t->id, s), sl->block, NULL,
						       0, &seq);
			ret = kvmm_mm_seq_fault(seq, sl->block, 1);
			if (ret < 0)
				return ret;
			/* readahead may have claimed more slots: wait for them too */
			kvmm_swap_poll(pool, true);
			/* the page came back clean and kept this slot: it must go with the tier */
			if (bitmap_test_bit(t->map, s) && (sl->flags & SLOT_KEPT))
				kvmm_swap_kept_release(t, s);
		} else if (sl->flags & SLOT_KEPT) {
			/* brought in by an earlier page's readahead */
			kvmm_swap_kept_release(t, s);
		} else if (sl->ent) {
			kvmm_pagecache_remove_ent(pool, sl->ent);
			kvmm_swap_slot_release(t, s);
		}
	}
	/* readahead may have kept slots before the scan's position */
	kvmm_swap_release_kept(t, UINT32_MAX);
	KVMM_BUG_ON(t->nr_used);
	kvmm_swap_tier_remove(sw, t);
	return 0;
}

/* ---- references going away ---------------------------------------------------------------------- */

void kvmm_swap_pte_drop(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t block)
{
	uint64_t s;
	struct kvmm_swap_tier *t = kvmm_swap_decode(pool, seq->pte[block], &s);
	struct kvmm_swap_slot *sl;

	KVMM_BUG_ON(!t || !bitmap_test_bit(t->map, s));
	sl = &t->slots[s];
	KVMM_BUG_ON(sl->block != block || (sl->seq != seq && (sl->seq || !sl->nr_map)));
	if (sl->nr_map && --sl->nr_map)
		return; /* other sequences' PTEs still name it */
	sl->seq = NULL;
	/* an orphaned entry can never be hit again: the slot goes with it */
	if (sl->ent && kvmm_pagecache_ent_orphan(sl->ent)) {
		kvmm_pagecache_remove_ent(pool, sl->ent);
		sl->ent = NULL;
	}
	/* a read in flight frees it when it completes (swap_state.c) */
	if (!sl->ent && !(sl->flags & SLOT_READING))
		kvmm_swap_slot_release(t, s);
}

void kvmm_swap_slot_corrupt(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t s)
{
	struct kvmm_swap_slot *sl = &t->slots[s];
	struct kvmm_seq *seq = sl->seq;

	sl->flags |= SLOT_BAD;
	if (sl->ent) {
		kvmm_pagecache_remove_ent(pool, sl->ent);
		sl->ent = NULL;
	}
	/* the sequence keeps the slot (its PTE names it) until its owner frees or truncates it */
	if (seq && !(seq->flags & KVMM_SEQ_F_PREEMPTED)) {
		seq->flags |= KVMM_SEQ_F_PREEMPTED;
		if (pool->hooks && pool->hooks->lost)
			pool->hooks->lost(pool, seq, kvmm_seq_nr_resident(seq));
		else if (pool->hooks && pool->hooks->oom)
			pool->hooks->oom(pool, seq, kvmm_seq_nr_resident(seq));
	}
	/* a shared page's mappers all lost it; they keep the slot the same way */
	if (sl->nr_map)
		kvmm_swap_shared_remap(pool, swp_entry(t->id, s), sl->block, NULL, 0, NULL);
	if (!seq && !sl->nr_map && !(sl->flags & SLOT_READING))
		kvmm_swap_slot_release(t, s);
}

void kvmm_swap_drop_ns(struct kvmm_pool *pool, struct kvmm_ns *ns)
{
	struct kvmm_swap_tier *t;
	uint64_t s;

	if (!pool || !pool->swap || !ns)
		return;
	/* reads in flight land first (their pages are then cached and already reclaimed) */
	kvmm_swap_poll(pool, true);
	list_for_each_entry (t, &pool->swap->tiers, node) {
		for_each_set_bit (s, t->map, t->nslots) {
			struct kvmm_swap_slot *sl = &t->slots[s];

			if (sl->ns_id != ns->id || (sl->flags & (SLOT_WRITING | SLOT_FAR_HELD)))
				continue;
			/* no address space of the namespace is left */
			KVMM_BUG_ON(sl->seq || sl->nr_map);
			if (sl->ent)
				kvmm_pagecache_remove_ent(pool, sl->ent);
			kvmm_swap_slot_release(t, s);
		}
	}
}

/* May the demoted cached page in slot @s of @t go, to make room for a sequence's page? */
static bool room_droppable(const struct kvmm_swap_tier *t, uint64_t s)
{
	const struct kvmm_swap_slot *sl = &t->slots[s];

	return bitmap_test_bit(t->map, s) && !sl->seq && !sl->nr_map && sl->ent &&
	       !(sl->flags & (SLOT_READING | SLOT_WRITING | SLOT_KEPT | SLOT_BAD)) &&
	       kvmm_pagecache_ent_leaf(sl->ent) && !kvmm_pagecache_ent_pending(sl->ent);
}

uint32_t kvmm_swap_make_room(struct kvmm_pool *pool, uint32_t want)
{
	struct kvmm_swap_tier *t;
	uint32_t n = 0;
	uint64_t s;

	if (!pool->swap)
		return 0;
	list_for_each_entry (t, &pool->swap->tiers, node) {
		for_each_set_bit (s, t->map, t->nslots) {
			struct kvmm_swap_tier *pt = t;
			uint64_t ps = s;

			/* a leaf, then its parent while that is a demoted leaf in turn */
			while (n < want && room_droppable(pt, ps)) {
				struct kvmm_cache_ent *parent =
					kvmm_pagecache_ent_parent(pt->slots[ps].ent);

				kvmm_pagecache_remove_ent(pool, pt->slots[ps].ent);
				kvmm_swap_slot_release(pt, ps);
				n++;
				if (!parent || !kvmm_pagecache_ent_swap(parent))
					break;
				pt = kvmm_swap_decode(pool, kvmm_pagecache_ent_swap(parent), &ps);
				if (!pt)
					break;
			}
			if (n >= want)
				goto out;
		}
	}
out:
	pool->stat[KVMM_STAT_SWAP_DROP] += n;
	return n;
}

uint32_t kvmm_swap_drop_cached(struct kvmm_pool *pool)
{
	struct kvmm_swap_tier *t;
	uint32_t n = 0;
	uint64_t s;

	if (!pool || !pool->swap)
		return 0;
	list_for_each_entry (t, &pool->swap->tiers, node) {
		for_each_set_bit (s, t->map, t->nslots) {
			struct kvmm_swap_slot *sl = &t->slots[s];

			/*
			 * a sequence's swapped page is its data, not cache: it stays; a slot
			 * being read is left to the read (it installs or frees it)
			 */
			if (sl->seq || sl->nr_map || !sl->ent || (sl->flags & SLOT_READING))
				continue;
			kvmm_pagecache_remove_ent(pool, sl->ent);
			kvmm_swap_slot_release(t, s);
			n++;
		}
	}
	pool->stat[KVMM_STAT_SWAP_DROP] += n;
	return n;
}

struct kvmm_cache_ent *kvmm_swap_slot_ent(struct kvmm_pool *pool, uint64_t swp)
{
	uint64_t s;
	struct kvmm_swap_tier *t = kvmm_swap_decode(pool, swp, &s);

	if (!t || !bitmap_test_bit(t->map, s))
		return NULL;
	return t->slots[s].ent;
}

uint32_t kvmm_swap_nr_ents(struct kvmm_pool *pool)
{
	struct kvmm_swap_tier *t;
	uint32_t n = 0;
	uint64_t s;

	if (!pool->swap)
		return 0;
	list_for_each_entry (t, &pool->swap->tiers, node)
		for_each_set_bit (s, t->map, t->nslots)
			n += !!t->slots[s].ent;
	return n;
}

/* ---- teardown ------------------------------------------------------------------------------ */

void kvmm_swap_index_detach_all(struct kvmm_pool *pool)
{
	struct kvmm_swap_tier *t;

	if (!pool || !pool->swap)
		return;
	list_for_each_entry (t, &pool->swap->tiers, node)
		kvmm_swap_index_detach(t);
}

void kvmm_swap_destroy(struct kvmm_pool *pool)
{
	struct kvmm_swap *sw = pool ? pool->swap : NULL;
	struct kvmm_swap_tier *t, *tmp;

	if (!sw)
		return;
	kvmm_swap_poll(pool, true);
	KVMM_BUG_ON(sw->nr_wb); /* no other thread may run on a pool being torn down */
	list_for_each_entry_safe (t, tmp, &sw->tiers, node)
		kvmm_swap_tier_remove(sw, t);
	kvmm_htable_destroy(&sw->cache);
	kvmm_free(sw);
	pool->swap = NULL;
}
