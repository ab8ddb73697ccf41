/* SPDX-License-Identifier: MIT */
/*
 * kvmm/swap_internal.h - state shared by the swap files: swap_tier.c (tiers, slots),
 * swapfile.c (synchronous I/O, swap-out, demotion, move-down, swapoff), swap_writeback.c
 * (asynchronous swap-out), swap_fault.c (fault injection), swap_check.c (invariants) and
 * swap_state.c (swap cache, fault-in, readahead).  Not for use outside kvmm/swap*.c.
 */
#ifndef KVMM_SWAP_INTERNAL_H
#define KVMM_SWAP_INTERNAL_H

#include "hashtable.h"
#include "list.h"
#include "kvmm/swap.h"

/* struct swap_rd.cstate */
enum {
	RD_PENDING,
	RD_COPYING,
	RD_COPIED
};

/* struct kvmm_swap_slot.flags */
enum {
	SLOT_READING = 1u << 0, /* an asynchronous read into a frame is in flight (swap cache) */
	SLOT_WRITING = 1u << 1, /* a swap-out write (struct swap_wb) is filling it */
	/* kept by the resident clean page of frame slot->block (page->swap names the slot) */
	SLOT_KEPT = 1u << 2,
	/* failed its checksum (kvmm_swap_slot_corrupt): never read or moved again */
	SLOT_BAD = 1u << 3,
	/*
	 * released while far-pinned (kvmm_swap_far_pin): named by nobody, its bytes kept for
	 * the clients reading them in place until the last kvmm_swap_far_unpin() frees it
	 */
	SLOT_FAR_HELD = 1u << 4,
};

/* fault point indices */
enum {
	FP_WRITE,
	FP_READ,
	FP_ALLOC
};

struct swap_fault {
	struct kvmm_fault_attr attr;
	bool armed;
	uint64_t calls, failures, rng;
};

/*
 * A read in flight: the swap cache entry of a page on its way back (swap_state.c).  Most are
 * the medium's I/O, reported through ops->poll.  The records of an unlocked fault-in
 * (kvmm_mm_seq_fault_unlocked) are copied from a memory tier by the faulting thread with the
 * pool lock let go: that thread owns them (@own, the memory) and finishes them when it has the
 * lock again - unless a waiter under the lock did it first (@finished).  Whoever claims a
 * record's copy first (@cstate: PENDING -> COPYING) does it, the copier or a waiter that will
 * not wait for a thread that has not started; it publishes it with COPIED.
 */
struct swap_rd {
	struct hlist_node hnode; /* in kvmm_swap.cache, by swap entry */
	struct list_head node;	 /* in kvmm_swap.done once completed; unlocked: kvmm_swap.rd_copy */
	struct list_head own;	 /* unlocked: the copier's private list (only it walks it) */
	struct kvmm_swap_io io;
	struct kvmm_swap *sw;
	struct kvmm_swap_tier *t;
	struct kvmm_page *pg; /* the frame read into: MAPPED, refcount 0, LOCKED */
	uint64_t swp;
	const void *src; /* unlocked: the slot in its memory tier (ops->slot_addr) */
	int copy_res;	 /* unlocked: the copy's result, valid once RD_COPIED */
	int cstate;	 /* unlocked: RD_PENDING, RD_COPYING, RD_COPIED (atomic) */
	bool done;
	bool unlocked;	/* copied without the lock; the copier frees it */
	bool finished;	/* unlocked: installed (or given back) already */
	bool installed; /* unlocked: finished into a sequence's PTE */
	bool ra;	/* unlocked: a readahead page, not part of the fault's range */
};

/*
 * A swap-out write in flight (asynchronous write-back, swapfile.c).  The page stays mapped by
 * its sequence, LOCKED | WRITEBACK; the slot is SLOT_WRITING and names nobody until the
 * write completes and the PTE is switched to it (or the write is cancelled).
 */
struct swap_wb {
	struct list_head all;  /* kvmm_swap.wb_all: every record in flight (invariants) */
	struct list_head node; /* kvmm_swap.wb_copy, a copier's private list, or wb_done */
	struct kvmm_swap_io io;
	struct kvmm_swap_tier *t;
	struct kvmm_page *pg;
	struct kvmm_seq *seq; /* valid while the page was not touched (KVMM_PG_WB_CANCEL) */
	void *dst;	      /* memory tiers: where the copy goes (ops->slot_addr) */
	uint32_t block;
	uint32_t ntokens; /* at submission: a change means the page was written */
};

struct kvmm_swap {
	struct kvmm_pool *pool;
	struct list_head tiers; /* struct kvmm_swap_tier.node, highest priority first */
	struct kvmm_swap_tier *tier[KVMM_SWAP_TIER_MAX + 1];
	unsigned int nr_tiers;
	uint32_t ra_depth;
	uint64_t clock;		  /* pages swapped out so far: the refault distance clock */
	struct kvmm_htable cache; /* struct swap_rd by swap entry: reads in flight */
	struct list_head done;	  /* completed reads not installed yet */
	uint32_t nr_inflight;	  /* swap_rd records */
	struct list_head rd_copy; /* swap_rd being copied without the lock (unlocked fault-in) */
	uint32_t nr_rd_copy;	  /* of nr_inflight, on rd_copy */
	int busy;		  /* inside a swap operation: nested reclaim must not demote */
	struct list_head wb_all;  /* swap_wb in flight, all states */
	struct list_head wb_copy; /* swap_wb of memory tiers waiting for their copy */
	struct list_head wb_done; /* swap_wb whose write completed, not yet finished */
	uint32_t nr_wb;		  /* swap_wb records in flight, all states */
	uint32_t nr_wb_copying;	  /* of them, being copied by a thread without the lock */
	/* those copies: a struct wb_batch per copier, waited for by reclaim (swapfile.c) */
	struct list_head wb_batches;
	struct swap_fault fault[KVMM_FAULT_POINTS];
};

/* the canonical swap entry (no PTE flags) of (tier, slot) */
static inline uint64_t swp_entry(unsigned int tier, uint64_t slot)
{
	return kvmm_pte_mk_swap(tier, slot);
}

/* Does @pool's backend stage swap through copy_to_host / copy_from_host? */
static inline bool swap_staged(const struct kvmm_pool *pool)
{
	return pool->be.ops->copy_to_host && pool->be.ops->copy_from_host;
}

/* Point @io at frame @frame: its host address, or (staged backends) NULL and the frame. */
static inline void swap_io_frame(struct kvmm_pool *pool, struct kvmm_swap_io *io, uint32_t frame)
{
	io->frame = frame;
	io->buf = swap_staged(pool) ? NULL : kvmm_pool_frame_addr(pool, frame);
}

#define KVMM_SWAP_BATCH 64 /* pages per synchronous I/O batch */

/* Slots in cluster @c of @t (the last cluster may be short). */
static inline uint32_t kvmm_swap_cluster_size(const struct kvmm_swap_tier *t, uint32_t c)
{
	uint64_t start = (uint64_t)c * KVMM_SWAP_CLUSTER;

	return (uint32_t)min_t(uint64_t, KVMM_SWAP_CLUSTER, t->nslots - start);
}

/* swap_tier.c */
/* The pool's swap state, made at first use; NULL when out of memory. */
struct kvmm_swap *kvmm_swap_get(struct kvmm_pool *pool);
struct kvmm_swap_tier *kvmm_swap_decode(struct kvmm_pool *pool, uint64_t swp, uint64_t *slot);
void kvmm_swap_tier_free(struct kvmm_swap_tier *t);
/* Take @t off the tiers' list and free it (swapoff, teardown); kept slots are let go. */
void kvmm_swap_tier_remove(struct kvmm_swap *sw, struct kvmm_swap_tier *t);
void kvmm_swap_slot_release(struct kvmm_swap_tier *t, uint64_t slot);
/* Free kept slot @slot of @t: its page is no longer swap-cached. */
void kvmm_swap_kept_release(struct kvmm_swap_tier *t, uint64_t slot);
/*
 * A full tier makes room: free up to @n slots kept by resident clean pages (they only lose
 * their copy-free swap-out), from the kept cursor on.  Returns how many were freed.
 */
uint32_t kvmm_swap_release_kept(struct kvmm_swap_tier *t, uint32_t n);
/*
 * Allocate a run of up to @want slots on the best tier (not @skip; only below it with @below):
 * its length, the tier in *tp and the first slot in *first; 0 with *err = -ENOSPC when none
 * has room (or a failure was injected).
 */
uint32_t kvmm_swap_alloc_run(struct kvmm_swap *sw, const struct kvmm_swap_tier *skip, bool below,
			     uint32_t want, struct kvmm_swap_tier **tp, uint64_t *first, int *err);

/* Mark slot @s of @t used, for a record found at a warm restart (its fields are the caller's). */
void kvmm_swap_slot_claim(struct kvmm_swap_tier *t, uint64_t s);

/* swap_index.c: the warm-restart index of a file tier (see there) */
/* Open or create PATH.index for @t (just swapped on) and restore what it holds for @ns. */
int kvmm_swap_index_attach(struct kvmm_swap_tier *t, struct kvmm_ns *ns);
void kvmm_swap_index_detach(struct kvmm_swap_tier *t);
/* The medium wrote @page into @slot: remember its checksum for the slot's record. */
void kvmm_swap_index_csum(struct kvmm_swap_tier *t, uint64_t slot, const void *page);
/*
 * The medium read @page from @slot: false when the tier keeps checksums (an index) and the
 * bytes are not those written there (a torn or corrupted slot): the read must fail with
 * -EBADMSG and the page be dropped (kvmm_swap_slot_corrupt), never used.
 */
bool kvmm_swap_index_verify(struct kvmm_swap_tier *t, uint64_t slot, const void *page);
/*
 * Slot @s of @t failed its checksum: nothing may use its bytes.  Its page-cache entry goes
 * (a lookup misses it), its sequence is dropped like an OOM victim but reported as lost (the
 * owner's lost hook, else its oom hook: its KV is gone), the slot is marked SLOT_BAD (never
 * read or moved again) and let go once nobody names it.  Pool lock held.
 */
void kvmm_swap_slot_corrupt(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t s);
/* Slot @slot now names a page-cache entry: write its record. */
void kvmm_swap_index_note(struct kvmm_swap_tier *t, uint64_t slot);
/* Slot @slot is let go: clear its record. */
void kvmm_swap_index_forget(struct kvmm_swap_tier *t, uint64_t slot);
void kvmm_swap_index_info(const struct kvmm_swap_tier *t, struct kvmm_swap_tier_info *info);

/* swap_fault.c */
/*
 * -1: no failure, else the enum kvmm_fault_mode to inject (KVMM_FAULT_CORRUPT: the caller
 * writes, then spoils the slot with kvmm_swap_mem_corrupt - memory tiers - or fails the
 * write with -EIO)
 */
int kvmm_swap_fault_hit(struct kvmm_swap *sw, int point);

/* swapfile.c */
/* swap.write mode=corrupt: change a byte of slot @slot (at @page) after its checksum, logged. */
void kvmm_swap_mem_corrupt(struct kvmm_swap_tier *t, uint64_t slot, void *page);
/* Run @n I/Os on @t to completion (fault points applied); each io->res says how it went. */
void kvmm_swap_io_run(struct kvmm_swap *sw, struct kvmm_swap_tier *t, struct kvmm_swap_io *ios,
		      uint32_t n);
/*
 * Count a failed read or write (-err) of slot on t, and log it (rate-limited per kind: a
 * failing medium must not flood the log, nor go unseen).
 */
void kvmm_swap_count_fail(struct kvmm_swap_tier *t, bool write, uint64_t slot, int err);
/* Record in slot @s what page @pg was, and detach its page-cache entry to the slot. */
void kvmm_swap_slot_fill(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint64_t s,
			 struct kvmm_page *pg, struct kvmm_seq *seq, uint32_t block);
/*
 * The next swap-out candidates of @seq from block *b to @end: a clean swap-cached page needs
 * no write and goes at once (counted in *clean); the others, up to KVMM_SWAP_BATCH, are put in
 * @blocks and counted in the return value.  *b moves past the last block looked at.
 */
uint32_t kvmm_swap_out_candidates(struct kvmm_swap *sw, struct kvmm_seq *seq, uint32_t *b,
				  uint32_t end, uint32_t *blocks, uint32_t *clean);

/* swap_writeback.c */
/* Finish every completed write-back (wb_done); returns the frames freed. */
uint32_t kvmm_swap_wb_reap(struct kvmm_pool *pool);

/* swap_state.c */
/* A read of @slot completed into @pg: hand the page to whoever names the slot, free the slot. */
void kvmm_swap_slot_install(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint64_t slot,
			    struct kvmm_page *pg);
/* Install every completed read (the done list); returns how many were processed. */
int kvmm_swap_reap(struct kvmm_pool *pool);
/*
 * The arguments of a swap-out of @seq's blocks [first, first + n): 1 with the end of the range
 * (clamped to the sequence) in *end, 0 when there is nothing to do, -EINVAL (no sequence) or
 * -ENOSPC (no swap tier).
 */
int kvmm_swap_out_range(struct kvmm_seq *seq, uint32_t first, uint32_t n, uint32_t *end);
/*
 * The sequences whose PTE at @block names swap entry @swp (a shared page's slot, swapfile.c):
 * with @pg, map it into each; with @to, make each name swap entry @to instead (the owner's
 * seq_changed hook runs for each either way); with @first, only count them and return the
 * first in *first; with none of these, report each as having lost its KV (a spoilt slot).
 * Returns how many there are.
 */
uint32_t kvmm_swap_shared_remap(struct kvmm_pool *pool, uint64_t swp, uint32_t block,
				struct kvmm_page *pg, uint64_t to, struct kvmm_seq **first);
struct swap_rd *kvmm_swap_cache_find(struct kvmm_swap *sw, uint64_t swp);
/* Wait for @rd to complete and install it (and whatever else completed). */
void kvmm_swap_cache_wait(struct kvmm_pool *pool, struct swap_rd *rd);

#endif /* KVMM_SWAP_INTERNAL_H */
