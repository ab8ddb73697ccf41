/* SPDX-License-Identifier: MIT */
/*
 * kvmm/swap.h - swap tiers, the swap cache, fault-in and fault injection: the API that the
 * reclaimer (kvswapd), the daemon's PIN path and its admin verbs build on.
 *
 * A pool may have up to KVMM_SWAP_TIER_MAX swap tiers, numbered 1..31 as in a swap PTE
 * (kvmm_pte_mk_swap(tier, slot)).  A tier is a struct kvmm_swap_ops table (host memory arena:
 * kvmm_swap_host_ops; swap file through io_uring: kvmm_swap_nvme_ops) plus a slot allocator:
 * a bitmap of page-size slots grouped in clusters of KVMM_SWAP_CLUSTER slots, so that the
 * consecutive pages of a sequence land in consecutive slots.  Tiers have priorities: pages go
 * to the highest-priority tier with room; kvmm_swap_move_down() moves a tier's oldest pages
 * to the next lower one (host -> NVMe).
 *
 * Who may be swapped (Documentation/mm/swap.md):
 *  - an unpinned page of a sequence that no other sequence maps (refcount 1): its PTE becomes
 *    a swap PTE (type SWAP, same flags).  Shared pages are never swapped: no reverse map is
 *    kept; each slot remembers its single (sequence, block) and that is enough for swapoff.
 *    A sealed page keeps its page-cache entry, which then names the slot instead of a frame.
 *  - a CACHED page (sealed, unmapped, on the LRU): "demoted" - its entry stays in the page
 *    cache, naming the slot, so kvmm_mm_prefix_lookup() still finds the prefix and faults the
 *    page back in synchronously.  Reclaim (kvmm_reclaim) demotes instead of dropping whenever a
 *    tier has room.
 *
 * Swap-out is synchronous and batched, or asynchronous (write-back: the page stays mapped,
 * LOCKED | WRITEBACK, until its write completes; memory tiers are copied without the pool
 * lock by kvmm_swap_writeback; a page touched meanwhile stays resident).  Fault-in
 * (kvmm_mm_seq_fault) is synchronous and reads ahead the following swapped blocks of the
 * sequence asynchronously (depth kvmm_swap_set_readahead, default 2);
 * kvmm_mm_seq_fault_unlocked() does the same but copies from memory tiers with the pool lock
 * let go, the pages waiting in the swap cache meanwhile; kvmm_mm_seq_prefetch()
 * is the asynchronous call for the next step's pages.  A page whose read is in flight sits in
 * the swap cache, found by its swap entry: a fault on it waits for that read instead of
 * issuing a second one.
 *
 * Clean swap-cached pages: a sequence's page faulted in with its KV written keeps its slot
 * (page->swap); swapping it out again is a PTE rewrite, no copy.  Changes to the page free
 * the slot first (kvmm_swap_page_dirty); a full tier frees kept slots before anything else.
 *
 * Errors: a failed write leaves the page resident (nothing lost, swap_fail counted, the
 * caller gets -EIO/-ENOSPC); a failed read leaves the swap PTE in place and the fault returns
 * -EIO (the next fault retries).  Locking: the pool lock, like the rest of the core (mm.h).
 */
#ifndef KVMM_SWAP_H
#define KVMM_SWAP_H

#include <stdbool.h>
#include <stdint.h>

#include "list.h"
#include "kvmm/mm.h"

#define KVMM_SWAP_CLUSTER 64	/* slots per cluster */
#define KVMM_SWAP_RA_DEFAULT 2	/* readahead depth (pages after a fault) */
#define KVMM_SWAP_RA_MAX 64	/* largest accepted readahead depth */
#define KVMM_SWAP_QD_DEFAULT 32 /* NVMe queue depth (= staging buffers) */
#define KVMM_SWAP_QD_MAX 4096
#define KVMM_SWAP_SLOT_NONE UINT64_MAX

struct kvmm_swap_tier;

/*
 * One page of I/O between a frame and a slot.  @buf is the frame's host address; NULL when
 * the pool's backend stages swap through its copy_to_host / copy_from_host hooks (memory the
 * host cannot address: the CUDA backend), and then @frame names the frame.  Tiers move the
 * bytes with kvmm_swap_io_to_host() / kvmm_swap_io_from_host(), which serve both cases.
 */
struct kvmm_swap_io {
	uint64_t slot;
	void *buf;	/* page_size bytes, host-visible, or NULL: staged (@frame) */
	uint32_t frame; /* the pool frame, when @buf is NULL */
	bool write;
	bool corrupt; /* swap.write mode=corrupt: flip a byte of the slot once written (core) */
	int res;      /* on completion: 0 or -errno */
	/* called exactly once on completion, from ops->poll (never from submit) */
	void (*end_io)(struct kvmm_swap_io *io);
	void *priv;
	struct list_head node; /* tier private while in flight */
};

struct kvmm_swap_tier_params {
	unsigned int tier;    /* 1..KVMM_SWAP_TIER_MAX, unique in the pool */
	int priority;	      /* higher is used first */
	uint64_t size;	      /* bytes, a positive multiple of the pool's page size */
	const char *path;     /* file tiers: created (or reused) and sized to @size */
	uint32_t queue_depth; /* file tiers: io_uring entries and staging buffers; 0 = default */
	/*
	 * File tiers: keep PATH.index, an index of the sealed pages of namespace @index_ns
	 * that the file holds, and serve them again after a restart (swap_index.c); NULL: no
	 * index.
	 */
	struct kvmm_ns *index_ns;
};

/*
 * A tier's medium.  The core never knows a tier by name.  submit() starts one page of I/O and
 * returns 0, -EAGAIN when the tier is out of queue slots (the core polls and retries) or
 * another -errno (not started); completions are reported by poll() only, which calls each
 * io->end_io.  poll() with @wait blocks until at least one I/O completes (if any is in flight)
 * and returns the number completed.  flush() pushes queued submissions to the device.
 */
struct kvmm_swap_ops {
	const char *name;
	int (*init)(struct kvmm_swap_tier *t, const struct kvmm_swap_tier_params *p);
	void (*fini)(struct kvmm_swap_tier *t);
	int (*submit)(struct kvmm_swap_tier *t, struct kvmm_swap_io *io);
	int (*flush)(struct kvmm_swap_tier *t);
	int (*poll)(struct kvmm_swap_tier *t, bool wait);
	/*
	 * Optional, memory tiers: the host address of @slot.  The core then copies swap-out
	 * writes itself, without the pool lock (kvmm_swap_writeback), instead of submit().
	 */
	void *(*slot_addr)(struct kvmm_swap_tier *t, uint64_t slot);
	/*
	 * Optional, memory tiers whose arena clients may map (far reads): the arena's
	 * descriptor (a memfd of size bytes, slot s at s * page_size), or -1 when it has none.
	 */
	int (*arena_fd)(struct kvmm_swap_tier *t);
};

/*
 * For tiers: copy @io's page into host memory @host (a swap-out) or from @host into it (a
 * swap-in): memcpy for a host-mapped frame, else the backend's copy_to_host / copy_from_host,
 * followed by its sync when @sync (else the caller syncs with kvmm_swap_io_sync before @host
 * is used or reused).  0 or -errno (-EOPNOTSUPP: neither a host address nor hooks).
 */
int kvmm_swap_io_to_host(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, void *host,
			 bool sync);
int kvmm_swap_io_from_host(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io,
			   const void *host, bool sync);
/*
 * Memory tiers' checksums (t->csum, one XXH3 per slot, kept in the tier's own memory): the
 * checksum of the page just written to @slot (@page: its bytes there), and a verified copy
 * out of @slot: kvmm_swap_io_from_host() whose result is -EBADMSG when the bytes are not
 * those written (a host-addressable frame is checked after the copy - the bytes that would
 * be mapped - a staged one before it).  No-ops without t->csum.
 */
void kvmm_swap_mem_csum(struct kvmm_swap_tier *t, uint64_t slot, const void *page);
/*
 * kvmm_swap_io_to_host() of @io's page into slot @slot (at @dst) of memory tier @t, its
 * checksum taken: in the same pass as the copy for a host-addressable frame; for a staged
 * one after the copy when @sync, else by the caller (kvmm_swap_mem_csum) once it synced.
 */
int kvmm_swap_mem_write(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, uint64_t slot,
			void *dst, bool sync);
int kvmm_swap_mem_read(struct kvmm_swap_tier *t, const struct kvmm_swap_io *io, uint64_t slot,
		       const void *src, bool sync);
/* Wait for the staging copies started on @t's pool backend (no-op without hooks). 0/-errno. */
int kvmm_swap_io_sync(struct kvmm_swap_tier *t);
/*
 * For tiers: host memory for an arena or staging buffers, pinned (DMA-able) through the
 * backend's host_alloc when it has one, else NULL (the tier allocates its own).  Free with
 * kvmm_swap_host_free() only what kvmm_swap_host_alloc() returned.
 */
void *kvmm_swap_host_alloc(struct kvmm_swap_tier *t, uint64_t bytes);
void kvmm_swap_host_free(struct kvmm_swap_tier *t, void *mem, uint64_t bytes);

extern const struct kvmm_swap_ops kvmm_swap_host_ops; /* swap_host.c: host-memory arena */
extern const struct kvmm_swap_ops kvmm_swap_nvme_ops; /* swap_nvme.c: O_DIRECT + io_uring */

/*
 * What one slot holds (a reverse map of exactly one PTE and/or one page-cache entry), or, kept
 * (SLOT_KEPT, swap_internal.h), the frame of the resident clean page whose bytes it still
 * holds: then neither @seq nor @ent, and @block is that frame (whose page->swap names it).
 */
struct kvmm_swap_slot {
	struct kvmm_seq *seq; /* the sequence whose PTE names this slot, or NULL */
	/*
	 * A sealed page that several sequences mapped, swapped out of all of them (seq NULL,
	 * ent set): how many sequences' PTEs at @block name this slot (0: none, or @seq's).
	 */
	uint32_t nr_map;
	struct kvmm_cache_ent *ent; /* the page-cache entry naming it (sealed page), or NULL */
	uint64_t swapped_at;	    /* pool swap-out clock at write (refault distance) */
	uint32_t block;		    /* seq's block; kept: the frame */
	uint32_t ntokens;	    /* the page's ntokens */
	uint32_t pgflags;	    /* KVMM_PG_ACTIVE / REFERENCED / KV_PENDING: kept across */
	uint16_t ns_id;		    /* namespace charged when it comes back */
	uint16_t flags;		    /* SLOT_* (swapfile.c) */
};

struct kvmm_swap_tier {
	const struct kvmm_swap_ops *ops;
	struct kvmm_pool *pool;
	void *priv;
	unsigned int id;
	int priority;
	uint64_t
		page_size; /* bytes per slot: kvmm_frame_bytes() of the pool (every device's copy) */
	uint64_t size;
	uint64_t nslots;
	uint64_t nr_used;
	unsigned long *map; /* used slots */
	uint32_t nclusters;
	uint32_t nr_free_clusters;
	uint16_t *cluster_free; /* free slots per cluster */
	uint32_t cur_cluster;	/* where runs are taken from next */
	uint64_t move_cursor;	/* kvmm_swap_move_down() scans from here */
	struct kvmm_swap_slot *slots;
	struct list_head node; /* in kvmm_swap.tiers, priority order */
	char path[KVMM_PATH_LEN];
	bool direct; /* file tiers: opened with O_DIRECT */
	/* statistics */
	uint64_t bytes_out, bytes_in;
	uint64_t nr_out, nr_in, nr_fail;
	uint64_t nr_csum_bad; /* reads whose bytes failed the slot's checksum (dropped) */
	uint64_t *csum;	      /* memory tiers: XXH3 of each slot's page as written (0: none) */
	uint32_t inflight;
	uint32_t nr_wb;	       /* swap-out writes in flight to this tier */
	uint32_t nr_wb_io;     /* of them, submitted and not completed by the medium */
	uint64_t nr_kept;      /* of nr_used, slots kept by resident clean pages (SLOT_KEPT) */
	uint64_t kept_cursor;  /* where a full tier looks for kept slots to release next */
	uint64_t nr_clean_out; /* swap-outs of clean pages into their kept slot: no write */
	struct kvmm_swap_index *index; /* file tiers: the warm-restart index, or NULL */
	/*
	 * Far reads (kvmm_swap_far_pin): pins per slot (allocated on the first far pin), the
	 * slots pinned (a slot once per pin), and the arena's generation (never 0, unique).
	 */
	uint32_t *far_pins;
	uint64_t nr_far_pins;
	uint64_t gen;
};

/* Tokens a warm-restart index record holds: longer blocks are not indexed (swap_index.c). */
#define KVMM_INDEX_TOKENS 64

/* ---- tiers (swapfile.c) -------------------------------------------------------------- */

/*
 * swapon: add a tier.  -EINVAL (bad id, size, ops), -EEXIST (id in use), -ENOMEM, or the
 * medium's error (e.g. -EINVAL when the file system refuses O_DIRECT and the fallback failed).
 */
int kvmm_swapon(struct kvmm_pool *pool, const struct kvmm_swap_ops *ops,
		const struct kvmm_swap_tier_params *params);
/*
 * swapoff: empty the tier and remove it.  Each page moves down to the next lower-priority tier
 * with room; else a sequence's page comes back into a frame and a demoted cached page is
 * dropped (its prefix is simply no longer cached).  -ENOENT (no such tier), -ENOMEM / -EIO
 * (a page could not be brought back: the tier stays, with what is left on it).
 */
int kvmm_swapoff(struct kvmm_pool *pool, unsigned int tier);
/* The tier, or NULL. */
struct kvmm_swap_tier *kvmm_swap_tier_get(struct kvmm_pool *pool, unsigned int tier);

/*
 * Far reads (swap_tier.c): a client reads a sealed page in a memory tier's arena where it
 * lies, through a read-only mapping of the arena (ops->arena_fd), instead of faulting it
 * back.  kvmm_swap_far_tier(): the pool's tier whose arena clients may map (the
 * highest-priority one with an arena_fd), or NULL.  kvmm_swap_far_pin(): if @pte is a swap
 * entry on @t naming a slot whose bytes are a sealed page's (not a corrupt slot), pin that
 * slot and store it in *slot: true.  A pinned slot is never reused, moved or dropped: a slot
 * released while pinned (its page faulted back, moved down, freed) keeps its bytes, owned
 * by nobody, until kvmm_swap_far_unpin() drops the last pin; swapoff of @t is -EBUSY
 * meanwhile.  Pool lock held.
 */
struct kvmm_swap_tier *kvmm_swap_far_tier(struct kvmm_pool *pool);
/* Would kvmm_swap_far_pin() pin @pte's slot? (Pins nothing.) */
bool kvmm_swap_far_usable(const struct kvmm_swap_tier *t, uint64_t pte, bool sealed);
bool kvmm_swap_far_pin(struct kvmm_swap_tier *t, uint64_t pte, bool sealed, uint64_t *slot);
void kvmm_swap_far_unpin(struct kvmm_swap_tier *t, uint64_t slot);
/*
 * A prefix lookup's hit on the cached page of @ent, swapped to far tier @t: map it into @seq
 * at @block (the entry's depth) as it lies, a swap PTE naming its slot, the slot counting
 * one more mapper (slot->nr_map), instead of faulting it in.  The page comes back when a pin
 * needs it (for every mapper at once), or is read in place (kvmm_swap_far_pin).  false
 * (nothing done: fault it in) unless the slot is @t's, sound, and not being read or written.
 */
bool kvmm_swap_map_far(struct kvmm_pool *pool, struct kvmm_swap_tier *t, struct kvmm_cache_ent *ent,
		       struct kvmm_seq *seq, uint32_t block);
/* The tier of generation @gen, or NULL (swapped off since). */
struct kvmm_swap_tier *kvmm_swap_tier_of_gen(struct kvmm_pool *pool, uint64_t gen);

struct kvmm_swap_tier_info {
	unsigned int tier;
	int priority;
	const char *kind;      /* ops->name */
	uint64_t nslots, used; /* used: slots holding swapped pages (kept ones not counted) */
	uint64_t kept;	       /* slots kept by resident clean pages: free on demand */
	uint64_t clean_out;    /* swap-outs that reused a kept slot (no copy, no write) */
	uint64_t bytes_out, bytes_in;
	uint64_t pages_out, pages_in, failures;
	bool direct;
	bool indexed;		 /* keeps a warm-restart index (swap_index.c) */
	uint64_t index_restored; /* sealed pages served again after the restart */
	uint64_t index_rejected; /* records found unusable then (torn, stale, duplicate) */
	uint64_t index_pending;	 /* restored then under a parent not cached: wait for it */
	uint64_t index_records;	 /* live records now */
	uint64_t csum_bad;	 /* reads that failed their slot's checksum: pages dropped */
};
/* Fill @info for tier @tier. 0 or -ENOENT. */
int kvmm_swap_tier_info(struct kvmm_pool *pool, unsigned int tier,
			struct kvmm_swap_tier_info *info);
/* The ids of the active tiers in priority order (highest first); returns how many (<= max). */
unsigned int kvmm_swap_tiers(struct kvmm_pool *pool, unsigned int *ids, unsigned int max);

/*
 * Readahead depth: swapped blocks after a faulted range that are read asynchronously
 * (0 disables; <= KVMM_SWAP_RA_MAX).  0 or -EINVAL.
 */
int kvmm_swap_set_readahead(struct kvmm_pool *pool, uint32_t depth);

/* ---- swap-out, demotion, fault-in (swapfile.c, swap_state.c) ----------------------------- */

/*
 * Swap out blocks [first, first + n) of @seq: every present, unpinned page that only this
 * sequence maps is written (one batch, consecutive slots when possible) and its frame freed;
 * others are skipped.  Returns the number swapped out, or -errno when none was and one failed
 * (-ENOSPC: no tier has room, -EIO: the write failed; the pages stay resident).
 */
int kvmm_mm_seq_swap_out(struct kvmm_seq *seq, uint32_t first, uint32_t n);
/*
 * Swap out the pages of blocks [first, first + n) of @seq that several sequences map: sealed,
 * in the page cache (not orphans), unpinned, not locked, no mapper KVMM_SEQ_F_NORECLAIM.  Each
 * is written once (or goes into the slot it kept, clean) and unmapped from every sequence that
 * maps it: their PTEs all name the one slot (slot->nr_map counts them), the page-cache entry
 * names it too, and the frame is freed.  A fault by any mapper (or a lookup hitting the entry)
 * reads it back once and maps it into all of them again.  The owner's seq_changed hook runs
 * for every mapper.  Returns the number swapped out, or -errno when none was and one failed.
 */
int kvmm_mm_seq_swap_out_shared(struct kvmm_seq *seq, uint32_t first, uint32_t n);
/* Whether @pg is a page kvmm_mm_seq_swap_out_shared() may take (its mappers aside). */
bool kvmm_swap_shared_candidate(const struct kvmm_page *pg);
/*
 * Asynchronous write-back: start swapping out blocks [first, first + n) of @seq (the same
 * pages as kvmm_mm_seq_swap_out).  Slots are taken and the writes started; each page stays
 * mapped, LOCKED and WRITEBACK, until the write completes in kvmm_swap_writeback() or
 * kvmm_swap_poll(): then its PTE becomes a swap PTE and its frame is freed.  A page touched
 * meanwhile (mapped again, unmapped, appended to, truncated, faulted, pinned) or whose write
 * failed stays resident and its slot is freed.  Returns the pages put under writeback, or
 * -errno when none was (-ENOSPC: no tier has room).
 */
int kvmm_mm_seq_swap_out_async(struct kvmm_seq *seq, uint32_t first, uint32_t n);
/*
 * Complete the write-backs started so far.  Called with pool->lock held; with @unlock it lets
 * go of the lock while it copies pages into memory tiers (host), and takes it again; other
 * tiers' writes are waited for under the lock.  Then installs what completed.  Returns the
 * frames freed by write-back.  Write-backs another thread is copying are left to it.
 */
int kvmm_swap_writeback(struct kvmm_pool *pool, bool unlock);
/*
 * Pool lock held, for reclaim that needs the frames now: complete the write-backs in flight,
 * waiting (with the lock kept) for the copies other threads make without it (kvswapd's), and
 * copying pending ones.  With @all, every one is finished (PTEs switch to their slots, frames
 * freed); without, only those that change no mapping (cancelled, failed, or whose mappers all
 * went: their frames are freed), the others are left for the next completion - for callers
 * inside a swap operation or reclaim, that must not see a sequence swapped out under them.
 * Returns the frames freed by the write-backs finished.
 */
int kvmm_swap_writeback_wait(struct kvmm_pool *pool, bool all);
/* Pages under write-back (swap-out writes in flight, any state). */
uint32_t kvmm_swap_nr_writeback(const struct kvmm_pool *pool);
/*
 * Bring swapped blocks [first, first + n) of @seq back into frames, synchronously (waiting for
 * reads already in flight), then read ahead the next swapped blocks asynchronously.  Returns
 * the number of pages brought in, or -EIO (a read failed: that block stays swapped) /
 * -ENOMEM (no frame); pages brought in before the failure stay in.
 */
int kvmm_mm_seq_fault(struct kvmm_seq *seq, uint32_t first, uint32_t n);
/*
 * The same, for a caller that holds pool->lock and lets other threads use the pool meanwhile:
 * pages on memory tiers (the host arena), and their readahead, are put in the swap cache under
 * the lock (frames allocated and charged, pages LOCKED: a fault, lookup or swapoff that needs
 * one waits for its copy), then copied with the lock let go; the lock is taken again and they
 * are installed.  Other tiers' reads, and every read on a backend that stages its copies, run
 * under the lock as in kvmm_mm_seq_fault().  While the lock is let go other threads may append
 * to, truncate or free @seq: pages of blocks that went away are freed, not installed, and @seq
 * is not looked at again.  Returns as kvmm_mm_seq_fault(): the pages of the range brought in,
 * or -EIO (a read failed: that block stays swapped, the others come in) / -ENOMEM.  Returns
 * with the lock held.  It is the three calls below.
 */
int kvmm_mm_seq_fault_unlocked(struct kvmm_seq *seq, uint32_t first, uint32_t n);

/* An unlocked fault-in in three steps (kvmm_mm_seq_fault_unlocked is start, copy, finish). */
struct kvmm_swap_fault {
	struct kvmm_pool *pool;
	struct list_head own; /* the swap-cache records this fault copies (swap_state.c) */
	uint32_t got;	      /* pages of the range installed so far */
	int err;	      /* first error */
};
/*
 * Pool lock held: what kvmm_mm_seq_fault() does, except that pages on memory tiers are only
 * put in the swap cache, in flight, for kvmm_swap_fault_copy().  Returns how many pages are
 * left to copy (0: nothing; kvmm_swap_fault_finish() must still be called).
 */
int kvmm_mm_seq_fault_start(struct kvmm_seq *seq, uint32_t first, uint32_t n,
			    struct kvmm_swap_fault *f);
/*
 * Without the pool lock (or with it): copy the pages from their tier into their frames (each
 * page that nobody under the lock copied first).
 */
void kvmm_swap_fault_copy(struct kvmm_swap_fault *f);
/*
 * Pool lock held, after kvmm_swap_fault_copy() returned (or instead of it): install the pages
 * (copying any still pending) and return what kvmm_mm_seq_fault() returns for the range.
 */
int kvmm_swap_fault_finish(struct kvmm_swap_fault *f);
/* Start reads of swapped blocks [first, first + n) of @seq; returns the number started. */
int kvmm_mm_seq_prefetch(struct kvmm_seq *seq, uint32_t first, uint32_t n);
/* Blocks of @seq now swapped out (PTE type SWAP). */
uint32_t kvmm_mm_seq_nr_swapped(const struct kvmm_seq *seq);
/*
 * Reap completed asynchronous reads and writes and install their pages (@wait: block until
 * everything in flight has completed, copying pending write-backs under the lock).  Returns
 * the number of pages installed plus frames freed by write-back.  The daemon calls this from
 * its loop; every swap call also installs completed reads on entry (write-backs complete only
 * here, in kvmm_swap_writeback() and in swapoff/teardown).
 */
int kvmm_swap_poll(struct kvmm_pool *pool, bool wait);
/*
 * Demote up to @n CACHED pages (of @ns, or any when NULL) from the inactive LRU tail to the
 * highest-priority tier with room, keeping their page-cache entries.  Returns the number
 * demoted (0 when no tier or nothing to demote) or -errno when none was and one failed.
 */
int kvmm_swap_demote(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n);
/*
 * Move up to @n pages of tier @tier to the next lower-priority tier with room (host -> NVMe),
 * oldest slots first.  Returns the number moved or -errno (-ENOENT: no tier; -ENOSPC: no
 * lower tier with room).
 */
int kvmm_swap_move_down(struct kvmm_pool *pool, unsigned int tier, uint32_t n);
/*
 * The lowest-priority tier is full and the pool's owner takes demoted pages (its demote hook,
 * mm.h): push up to @n of its cached pages (no sequence maps them) out to the owner, from its
 * move cursor on - roughly its oldest - read, handed over, their slots and entries freed.
 * Returns the number pushed out (0 when there was none to push, or no hook).
 */
int kvmm_swap_push_out(struct kvmm_pool *pool, uint32_t n);
#define KVMM_SWAP_PUSH_OUT 32 /* pages reclaim pushes out at once (one read batch) */

/* ---- fault injection (swapfile.c) ---------------------------------------------------------- */

enum kvmm_fault_mode {
	KVMM_FAULT_EIO,	   /* the I/O fails with -EIO */
	KVMM_FAULT_SHORT,  /* a short write or read: half the page moves, -EIO is reported */
	KVMM_FAULT_ENOSPC, /* the medium is full: -ENOSPC */
	/*
	 * swap.write only: the write succeeds, then one byte of the slot changes (bit rot in a
	 * memory tier, after its checksum was taken); a tier without slot_addr (a file) fails
	 * the write with -EIO instead
	 */
	KVMM_FAULT_CORRUPT,
	KVMM_FAULT_MODE_COUNT,
};

/*
 * A fault point fails a call when: it is the @nth call since the attribute was set (1 = the
 * next one; 0 = no such rule), or every @interval-th call (0 = every call) passes the
 * @probability test (percent, 0 = never) - at most @times failures in all (0 = unlimited).
 */
struct kvmm_fault_attr {
	uint64_t nth;
	uint32_t interval;
	uint32_t probability;
	uint32_t times;
	enum kvmm_fault_mode mode;
	uint64_t seed; /* for the probability rule; 0 = a fixed default */
};

/* Named points: "swap.write", "swap.read", "swap.alloc" (slot allocation: always ENOSPC). */
#define KVMM_FAULT_POINTS 3
/* Arm (or with @attr NULL, disarm) a point; resets its call and failure counts. 0/-ENOENT/-EINVAL. */
int kvmm_swap_fault_set(struct kvmm_pool *pool, const char *point,
			const struct kvmm_fault_attr *attr);
/*
 * The same from text, for config files and the admin verb:
 *   "swap.write nth=3 mode=short times=1", "swap.read probability=10 interval=2 seed=7",
 *   "swap.alloc off".  Keys: nth, interval, probability, times, seed, mode=eio|short|enospc.
 */
int kvmm_swap_fault_parse(struct kvmm_pool *pool, const char *spec);
/* Calls seen and failures injected by a point since it was set. 0 or -ENOENT. */
int kvmm_swap_fault_stats(struct kvmm_pool *pool, const char *point, uint64_t *calls,
			  uint64_t *failures);

/* ---- internal: used by the rest of the core -------------------------------------------------- */

/* Inside a swap operation (I/O running): reclaim must not start swap I/O of its own. */
bool kvmm_swap_busy(const struct kvmm_pool *pool);
/*
 * Clean swap-cached pages: a page faulted in for a sequence keeps its slot (page->swap names
 * it) while its bytes are those of the slot, so that its next swap-out is only a PTE rewrite.
 * Anything that changes the page or who maps it calls kvmm_swap_page_dirty() first (append
 * or truncate into it, a second mapper, its last mapper going, unmap_tail): the slot is freed.
 */
void kvmm_swap_page_uncache(struct kvmm_pool *pool, struct kvmm_page *pg);
static inline void kvmm_swap_page_dirty(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	if (pg->swap)
		kvmm_swap_page_uncache(pool, pg);
}
/* A swap PTE of a sequence goes away (free/truncate): drop the slot's reference. */
void kvmm_swap_pte_drop(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t block);
/*
 * A lookup or seal hit page-cache entry @ent whose page is swapped: bring it into a frame
 * (charged to the entry's namespace) and return the page (MAPPED by whoever else names the
 * slot, refcount possibly 0: the caller takes its reference).  NULL with errno on failure.
 */
struct kvmm_page *kvmm_swap_fault_ent(struct kvmm_pool *pool, struct kvmm_cache_ent *ent,
				      struct kvmm_magazine *mag);
/* The entry the slot named by swap entry @swp belongs to (or NULL): invariant checks. */
struct kvmm_cache_ent *kvmm_swap_slot_ent(struct kvmm_pool *pool, uint64_t swp);
/* Reclaim's eviction of a CACHED page: demote it instead when a tier has room. 0 or -errno. */
int kvmm_swap_demote_page(struct kvmm_pool *pool, struct kvmm_page *pg);
/*
 * drop_caches for swap (DROP_CACHES with KVMM_DROP_F_SWAP): drop every demoted page (cached,
 * no sequence names its slot): its page-cache entry and slot go.  Sequences' swapped pages
 * are data and stay.  Returns the number dropped (counted in swap_drop).
 */
uint32_t kvmm_swap_drop_cached(struct kvmm_pool *pool);
/*
 * Reclaim's last resort before a sequence is lost (kvmm_shrink): every tier is full and
 * sequences cannot go out.  Drop up to @want demoted cached pages (a page-cache entry in a
 * slot, no sequence's PTE, no I/O) - leaves of the cache tree only, each followed by its
 * parent when that became a demoted leaf in turn (a prefix goes from its end), so that no
 * subtree is orphaned under a caller in the middle of reclaim.  Counted in swap_drop.
 * Returns how many slots it freed.
 */
uint32_t kvmm_swap_make_room(struct kvmm_pool *pool, uint32_t want);
/* Namespace teardown (no address space left): drop its demoted pages and their slots. */
void kvmm_swap_drop_ns(struct kvmm_pool *pool, struct kvmm_ns *ns);
/* Page-cache entries whose page is swapped (slots naming an entry). */
uint32_t kvmm_swap_nr_ents(struct kvmm_pool *pool);
/* Swap side of kvmm_check_invariants(): slots, reverse maps, swap cache. 0 or -EUCLEAN. */
int kvmm_swap_check(struct kvmm_pool *pool, char *why, size_t whylen);
/* Pool teardown (kvmm_mm_release): wait for I/O, remove every tier. */
void kvmm_swap_destroy(struct kvmm_pool *pool);
/*
 * Pool teardown, first: let go of every tier's warm-restart index as it is, so that tearing
 * the cache down does not clear its records (swap_index.c).
 */
void kvmm_swap_index_detach_all(struct kvmm_pool *pool);

/* page-cache entries of swapped pages (pagecache.c) */
uint64_t kvmm_pagecache_ent_swap(const struct kvmm_cache_ent *ent);
uint16_t kvmm_pagecache_ent_ns(const struct kvmm_cache_ent *ent);
bool kvmm_pagecache_ent_orphan(const struct kvmm_cache_ent *ent);
/* The parent block's entry (NULL for a first block and for a detached orphan). */
struct kvmm_cache_ent *kvmm_pagecache_ent_parent(const struct kvmm_cache_ent *ent);
/* @pg's page goes to swap entry @swp: its entry now names the slot, pg is no longer SEALED. */
void kvmm_pagecache_ent_swapout(struct kvmm_pool *pool, struct kvmm_page *pg, uint64_t swp);
/* A swapped entry's page is back in @pg (SEALED again), or moved to slot @swp (pg NULL). */
void kvmm_pagecache_ent_swapin(struct kvmm_pool *pool, struct kvmm_cache_ent *ent,
			       struct kvmm_page *pg, uint64_t swp);
/* Remove a swapped entry from the cache (its descendants become orphans). */
void kvmm_pagecache_remove_ent(struct kvmm_pool *pool, struct kvmm_cache_ent *ent);

/* What a warm-restart index record says a swapped sealed page is (swap_index.c). */
struct kvmm_cache_desc {
	uint64_t key, parent_key, fmt_id;
	uint32_t depth, ntokens;
	const uint32_t *tokens;
};
/* The fields of entry @ent, for an index record (tokens point into the entry). */
void kvmm_pagecache_ent_desc(const struct kvmm_cache_ent *ent, struct kvmm_cache_desc *d);
/*
 * Re-create the entry of a sealed page of @ns that sits in swap entry @swp (a warm restart):
 * reachable under the entry its parent key names at depth - 1 (none at depth 0).  With no
 * such entry it is restored pending (pagecache.c): unreachable, under the pending entry of
 * that key or alone, until an entry of its parent key is sealed again, which adopts it.  The
 * key is hashed again from what it was made of under @ns's secret and must be @d->key.
 * Returns the entry, or NULL with errno: EBADMSG (the key does not match: another secret, or
 * a record that lies), ENOENT (two candidate parents on its parent key), EEXIST (that block
 * of that prefix is cached already), ENOMEM.
 */
struct kvmm_cache_ent *kvmm_pagecache_restore(struct kvmm_pool *pool, struct kvmm_ns *ns,
					      const struct kvmm_cache_desc *d, uint64_t swp);
/* Was @ent restored under a parent not cached, and is it still waiting for it? */
bool kvmm_pagecache_ent_pending(const struct kvmm_cache_ent *ent);
/* Pending roots: restored entries waiting for an entry of their parent key. */
uint32_t kvmm_pagecache_nr_pending(const struct kvmm_pool *pool);

#endif /* KVMM_SWAP_H */
