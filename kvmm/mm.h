/* SPDX-License-Identifier: MIT */
/*
 * kvmm/mm.h - the core memory model shared by every file of the VM subsystem.
 *
 * A pool is an array of fixed-size frames provided by a backend (host memory, later CUDA).
 * Each frame has one struct kvmm_page of metadata (64 bytes, asserted).  A frame is in
 * exactly one state at a time:
 *
 *   FREE      in the buddy allocator (only the head frame of a free block carries the order)
 *   MAGAZINE  pre-taken from the buddy by an owner (client) so it can allocate without a
 *             round trip; not charged to any namespace
 *   MAPPED    referenced by refcount >= 1 page-table entries of sequences; charged to its
 *             namespace as "used"
 *   CACHED    refcount == 0, sealed, indexed in the page cache and on an LRU list; charged
 *             to its namespace as "cached"; reclaimable
 *
 * A sealed page that is MAPPED is also indexed in the page cache (it can be hit) but is
 * not on an LRU list.  When its last mapper goes away it becomes CACHED and joins the
 * inactive list, keeping its REFERENCED bit for a second chance (or the active list if it
 * was promoted, KVMM_PG_ACTIVE).  An unsealed page whose last mapper goes away is freed.
 *
 * Locking: the core is not internally locked.  All calls on one pool (and everything
 * reachable from it: namespaces, address spaces, sequences, magazines) must be serialised
 * by the caller, normally by holding pool->lock.  kvmmd's event loop holds it around each
 * request; tests and benchmarks are single-threaded.
 */
#ifndef KVMM_MM_H
#define KVMM_MM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "format.h"
#include "list.h"
#include "uapi/kvmm.h"

struct kvmm_pool;
struct kvmm_ns;
struct kvmm_swap; /* kvmm/swap.h */
struct kvmm_seq;
struct kvmm_kswapd; /* kswapd.c */
struct kvmm_budget; /* budget.c */

/*
 * What the owner of a pool (kvmmd) wants to hear from reclaim, all called with the pool lock
 * held and from whatever thread reclaims (kvswapd included), so a hook must only record and
 * never call back into the core.  Any hook may be NULL.
 *   seq_changed  reclaim rewrote PTEs of @seq from block @from on (swap-out): mirrors of the
 *                page table are stale.
 *   oom          nothing is left to reclaim: @victim (lowest priority, then youngest) should
 *                be preempted to give back @nr_frames frames.  The core marks it
 *                KVMM_SEQ_F_PREEMPTED and never reports it again; freeing it is the owner's.
 *   demote       a sealed page is about to leave this machine's tiers for room (reclaim drops
 *                it because no swap tier took it, or the lowest tier pushes it out,
 *                kvmm_swap_push_out): @bytes are its page_size bytes, to be copied now.  With
 *                @bytes NULL the hook only says whether it would take the page.  true: taken
 *                (or would be).  The owner's remote tier (kvmm/ipc/remote_ipc.c).
 */
struct kvmm_cache_ent;
struct kvmm_mm_hooks {
	void (*seq_changed)(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t from);
	void (*oom)(struct kvmm_pool *pool, struct kvmm_seq *victim, uint32_t nr_frames);
	/*
	 * Optional: @seq lost a page's content (a swap slot failed its checksum) and is dropped
	 * like an OOM victim, but for that reason; NULL: reported through oom.
	 */
	void (*lost)(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t nr_frames);
	bool (*demote)(struct kvmm_pool *pool, const struct kvmm_cache_ent *ent, const void *bytes);
};

/* ---- frame metadata ------------------------------------------------------------------ */

enum kvmm_page_state {
	KVMM_PAGE_FREE,
	KVMM_PAGE_MAGAZINE,
	KVMM_PAGE_MAPPED,
	KVMM_PAGE_CACHED,
	KVMM_PAGE_STATE_COUNT,
};

const char *kvmm_page_state_name(enum kvmm_page_state s);

/* flag bits of struct kvmm_page.flags */
enum {
	KVMM_PG_ACTIVE = 1u << 0,     /* on the active LRU list (else inactive, if on one) */
	KVMM_PG_REFERENCED = 1u << 1, /* hit since it last moved on the LRU (second chance) */
	KVMM_PG_DIRTY = 1u << 2,      /* unsealed: still being written by its sequence */
	KVMM_PG_SEALED = 1u << 3,     /* full and immutable, indexed in the page cache */
	KVMM_PG_LRU = 1u << 4,	      /* on an LRU list */
	KVMM_PG_BUDDY_HEAD = 1u << 5, /* head frame of a free buddy block (order valid) */
	KVMM_PG_POISONED = 1u << 6,   /* backend reported an error: never hand out */
	KVMM_PG_LOCKED = 1u << 7,     /* I/O in flight (swap, later) */
	/* swap-out write in flight (with LOCKED): the frame is freed only when it completes */
	KVMM_PG_WRITEBACK = 1u << 8,
	/* touched during writeback (mapped, unmapped, written): the write completes, page stays */
	KVMM_PG_WB_CANCEL = 1u << 9,
	/*
	 * Tokens were appended into it whose KV the engine may not have written yet: it writes
	 * them while the page is pinned, before the UNPIN that ends its next pin window
	 * (kvmm_page_unpin() clears the bit).  Kept across a swap trip; a page with it never
	 * keeps its swap slot (swap.h, clean swap-cached pages).
	 */
	KVMM_PG_KV_PENDING = 1u << 10,
	/*
	 * A FREE frame of a pool in a budget whose memory is still there, charged to the budget
	 * (budget.c): given back (discarded) only past the pool's keep or under pressure.
	 */
	KVMM_PG_RESIDENT = 1u << 11,
};

struct kvmm_cache_ent; /* page-cache side record of a sealed page (pagecache.c) */

struct kvmm_page {
	struct list_head lru;	      /* buddy free list, magazine list or LRU list */
	uint32_t refcount;	      /* number of PTEs mapping this frame */
	uint32_t pincount;	      /* pins by engines for the running step */
	uint32_t flags;		      /* KVMM_PG_* */
	uint8_t state;		      /* enum kvmm_page_state */
	uint8_t order;		      /* buddy order, valid with KVMM_PG_BUDDY_HEAD */
	uint16_t ns_id;		      /* namespace charged for this frame (0 = none) */
	uint32_t owner;		      /* magazine owner while MAGAZINE */
	uint32_t ntokens;	      /* tokens written in this page */
	struct kvmm_cache_ent *cache; /* page-cache record while SEALED, else NULL */
	uint64_t swap;		      /* kept swap slot of a clean swap-cached page, 0 = none */
	uint16_t data_ns;	      /* ns whose data it may hold (KVMM_NS_CLEAN: none) */
	uint16_t spare16;
	uint32_t spare;
};

/* A page under writeback was used or changed: its swap-out is cancelled at completion. */
static inline void kvmm_page_wb_touch(struct kvmm_page *pg)
{
	if (pg->flags & KVMM_PG_WRITEBACK)
		pg->flags |= KVMM_PG_WB_CANCEL;
}

/*
 * An engine's pin window on @pg ends (UNPIN, @n pins): once no pin is left, the KV of every
 * token appended before the window is written (the engine's contract, uapi PIN), so the page
 * may keep a swap slot again after its next trip.  Only for the engine's own pins: a pin
 * that merely holds pages resident (around a reclaim) uses pincount directly.
 */
static inline void kvmm_page_unpin(struct kvmm_page *pg, uint32_t n)
{
	pg->pincount -= n;
	if (!pg->pincount)
		pg->flags &= ~KVMM_PG_KV_PENDING;
}

_Static_assert(sizeof(struct kvmm_page) <= 64, "struct kvmm_page must fit in 64 bytes");

/* ---- backends ------------------------------------------------------------------------ */

/*
 * One pool's instance of a backend.  (Not "struct kvmm_backend": that tag is the uapi enum
 * of backend kinds reported in HELLO, and C shares one tag namespace.)
 */
struct kvmm_backend_ctx;

/*
 * Where frames physically live.  The core never knows a backend by name; it calls through
 * this table.  Frame n lies at byte offset n * page_size of the backend's memory.  init and
 * fini are required; copy and scrub may be NULL when the memory needs neither.
 */
struct kvmm_backend_ops {
	const char *name;
	/* Provide nframes * page_size bytes. Returns 0 or -errno. */
	int (*init)(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes);
	void (*fini)(struct kvmm_backend_ctx *be);
	/* Host-visible address of a frame, or NULL when the memory is not host-mapped. */
	void *(*frame_addr)(struct kvmm_backend_ctx *be, uint32_t frame);
	/* Copy @bytes from frame @src to frame @dst (copy-on-write). 0 or -errno. */
	int (*copy)(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes);
	/* Zero a frame (scrub before it changes namespace). 0 or -errno. */
	int (*scrub)(struct kvmm_backend_ctx *be, uint32_t frame);
	/*
	 * Give the memory of frames [first, first + nr) back to the system (a punched hole, a
	 * dropped anonymous range): they read as zeroes afterwards, in every mapping of them,
	 * which stays valid.  NULL when the memory cannot be returned (cuda).  0 or -errno.
	 */
	int (*discard)(struct kvmm_backend_ctx *be, uint32_t first, uint32_t nr);
	/*
	 * Swap staging, for memory the host cannot address (cuda backend); NULL when frame_addr
	 * and memcpy serve.  copy_to_host / copy_from_host start copying whole frames
	 * frames[i] to / from @host + i * page_size * nr_devices, asynchronously on the
	 * backend's own stream (so with pinned @host from host_alloc a swap-out overlaps the
	 * next step); sync waits for every copy started.  host_alloc returns page-aligned, DMA-able (pinned) memory or
	 * NULL; host_free frees it.  0 or -errno.
	 */
	int (*copy_to_host)(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames,
			    uint32_t nr);
	int (*copy_from_host)(struct kvmm_backend_ctx *be, const uint32_t *frames, const void *host,
			      uint32_t nr);
	int (*sync)(struct kvmm_backend_ctx *be);
	void *(*host_alloc)(struct kvmm_backend_ctx *be, uint64_t bytes);
	void (*host_free)(struct kvmm_backend_ctx *be, void *host, uint64_t bytes);
};

struct kvmm_backend_ctx {
	const struct kvmm_backend_ops *ops;
	uint64_t page_size;
	uint32_t nframes;
	/*
	 * Devices mirroring each frame: 1 (set before init), more for a cuda pool spanning a
	 * tensor-parallel group, where frame n is page_size bytes on each device (each its own
	 * shard of the heads).  copy and scrub then act on every device, and the staging hooks
	 * move a frame as nr_devices * page_size bytes (device d's at d * page_size), which is
	 * the size of a swap slot (kvmm_frame_bytes()).  frame_addr must be NULL when above 1.
	 */
	uint32_t nr_devices;
	void *priv;
};

/* The plain anonymous-mmap backend used by tests and benchmarks. */
extern const struct kvmm_backend_ops kvmm_mmap_backend_ops;

/* ---- pool ---------------------------------------------------------------------------- */

#define KVMM_MAX_ORDER 11    /* orders 0 .. KVMM_MAX_ORDER - 1 */
#define KVMM_MAX_NS 64	     /* namespace ids 1 .. KVMM_MAX_NS - 1 */
#define KVMM_NS_CLEAN 0xffff /* struct kvmm_page.data_ns of a frame holding no one's data */
/* frames per pool: numbers 0 .. KVMM_FRAME_MAX, so KVMM_FRAME_NONE is never a real one */
#define KVMM_MAX_FRAMES ((uint32_t)KVMM_FRAME_MAX + 1)

/* event counters (vmstat); every counter an admin may ask about */
enum kvmm_stat {
	KVMM_STAT_ALLOC,	  /* frames allocated to sequences */
	KVMM_STAT_FREE,		  /* frames freed back */
	KVMM_STAT_BUDDY_ALLOC,	  /* blocks taken from the buddy allocator */
	KVMM_STAT_BUDDY_FREE,	  /* blocks returned to the buddy allocator */
	KVMM_STAT_BUDDY_SPLIT,	  /* buddy splits */
	KVMM_STAT_BUDDY_MERGE,	  /* buddy merges */
	KVMM_STAT_MAG_HIT,	  /* allocations served by a magazine */
	KVMM_STAT_MAG_REFILL,	  /* magazine refills (batches) */
	KVMM_STAT_MAG_DRAIN,	  /* magazine drains (batches) */
	KVMM_STAT_ALLOC_FAIL,	  /* allocations that returned -ENOMEM */
	KVMM_STAT_COW,		  /* copy-on-write copies */
	KVMM_STAT_SEAL,		  /* pages sealed into the page cache */
	KVMM_STAT_CACHE_HIT,	  /* lookup blocks found */
	KVMM_STAT_CACHE_MISS,	  /* lookup stopped at a missing block */
	KVMM_STAT_CACHE_COLLIDE,  /* key matched, hashed content did not: a real collision */
	KVMM_STAT_CACHE_STALE,	  /* key and content matched under another parent entry */
	KVMM_STAT_CACHE_ORPHAN,	  /* entries made unreachable by an ancestor's eviction */
	KVMM_STAT_CACHE_REPARENT, /* sealed blocks moved under a sealing sequence's chain */
	KVMM_STAT_PGSCAN,	  /* LRU pages scanned by reclaim */
	KVMM_STAT_PGSTEAL,	  /* pages reclaimed */
	KVMM_STAT_PGACTIVATE,	  /* inactive -> active promotions */
	KVMM_STAT_PGDEACTIVATE,	  /* active -> inactive demotions */
	KVMM_STAT_DIRECT_RECLAIM, /* allocations that reclaimed directly (under min) */
	KVMM_STAT_NS_LIMIT_HIT,	  /* allocations that hit a namespace limit */
	KVMM_STAT_SCRUB,	  /* frames zeroed because they changed namespace */
	/* swap (kvmm/swap.h, Documentation/mm/swap.md) */
	KVMM_STAT_SWPOUT,	  /* pages written to a swap tier (swap-out, demotion, move-down) */
	KVMM_STAT_SWPIN,	  /* pages read back into frames */
	KVMM_STAT_REFAULT,	  /* swap-ins soon after their swap-out (workingset) */
	KVMM_STAT_SWAP_FAIL,	  /* swap I/Os or slot allocations that failed */
	KVMM_STAT_SWAP_DEMOTE,	  /* clean cached pages demoted to a tier (prefix kept) */
	KVMM_STAT_SWAP_RA,	  /* pages read ahead or prefetched asynchronously */
	KVMM_STAT_SWAP_CACHE_HIT, /* faults that joined a read already in flight */
	KVMM_STAT_SWAP_DROP,	  /* demoted cached pages dropped from swap (drop_caches) */
	/* reclaim policy (vmscan.c, kswapd.c, Documentation/mm/reclaim.md) */
	KVMM_STAT_KSWAPD_WAKE,	  /* kvswapd wake-ups (free went under low) */
	KVMM_STAT_KSWAPD_STEAL,	  /* frames kvswapd freed */
	KVMM_STAT_SWAP_MOVEDOWN,  /* pages moved down a tier to make room on the top one */
	KVMM_STAT_SEQ_SWAPOUT,	  /* sequence pages swapped out by reclaim */
	KVMM_STAT_OOM,		  /* OOM: a victim sequence was reported for preemption */
	KVMM_STAT_SHRINKER_FREED, /* frames owners' shrinkers gave back (client magazines) */
	KVMM_STAT_SWAP_CLEAN,	  /* clean swap-cached pages swapped out into their kept slot */
	KVMM_STAT_ALLOC_BLOCK,	  /* blocks of consecutive frames a bulk append got at once */
	KVMM_STAT_SWAP_CSUM_BAD,  /* swap-ins whose bytes failed their checksum: page dropped */
	KVMM_STAT_RECLAIM_INLINE, /* cached pages the allocating thread dropped under low */
	/* the daemon-wide frame budget (budget.c, Documentation/mm/budget.md) */
	KVMM_STAT_BUDGET_RECLAIM, /* frames this pool gave up to the budget (any allocator's) */
	KVMM_STAT_BUDGET_LOW,	  /* budget reclaims that took this pool's namespace below low */
	KVMM_STAT_BUDGET_DISCARD, /* frames whose memory went back to the system (hole punched) */
	KVMM_STAT_CACHE_ADOPT, /* restored pages hung under a parent sealed again (warm restart) */
	KVMM_STAT_BUDGET_BG,   /* frames this pool gave up to background budget reclaim (kvswapd) */
	KVMM_STAT_LOOKUP_RECLAIM, /* lookups that made room to map more of a swapped prefix */
	KVMM_STAT_SWAP_SHARED, /* sealed pages several sequences map, swapped out of all of them */
	KVMM_STAT_FAR_PIN,     /* swapped pages pinned where they lie for far reads (SEQ_PIN_FAR) */
	KVMM_STAT_FAR_HELD,    /* slots released while far-pinned, freed at their last unpin */
	KVMM_STAT_FAR_MAP,     /* prefix-lookup hits mapped on the far tier, not faulted in */
	KVMM_STAT_COUNT,
};

const char *kvmm_stat_name(enum kvmm_stat s);

struct kvmm_pool_params {
	uint64_t page_size; /* bytes, power of two, >= 4096 */
	uint32_t nframes;   /* > 0, <= KVMM_MAX_FRAMES */
	/*
	 * Watermarks in frames, min <= low <= high < nframes.  0,0,0 = defaults: 1%, 2%, 3% of
	 * nframes, but at least 0, 1, 2 and then clipped to high <= nframes - 1 for tiny pools.
	 */
	uint32_t wmark_min;
	uint32_t wmark_low;
	uint32_t wmark_high;
	const struct kvmm_backend_ops *backend; /* NULL = kvmm_mmap_backend_ops */
};

struct kvmm_lru {
	struct list_head active;
	struct list_head inactive;
	uint32_t nr_active;
	uint32_t nr_inactive;
};

struct kvmm_pool {
	pthread_mutex_t lock; /* serialises every call on this pool (see top comment) */
	struct kvmm_backend_ctx be;
	uint64_t page_size;
	uint32_t nframes;
	struct kvmm_page *pages; /* nframes entries */

	/* buddy allocator */
	struct list_head free_area[KVMM_MAX_ORDER];
	uint32_t nr_free_blocks[KVMM_MAX_ORDER];
	uint32_t nr_free;      /* frames in the buddy */
	struct list_head mags; /* magazines holding frames (struct kvmm_magazine.node) */

	uint32_t nr_state[KVMM_PAGE_STATE_COUNT]; /* frames per state */
	uint32_t wmark_min, wmark_low, wmark_high;

	struct kvmm_lru lru;
	struct kvmm_pagecache *pagecache; /* pagecache.c */
	struct kvmm_ns *ns[KVMM_MAX_NS];  /* by id; [0] unused */
	struct list_head aspaces;	  /* every struct kvmm_aspace (invariant checks) */
	uint64_t next_id;		  /* ids of address spaces and sequences (pgtable.c) */

	uint64_t stat[KVMM_STAT_COUNT];
	struct kvmm_swap *swap; /* swap tiers and swap cache (swapfile.c); NULL: no swapon yet */

	/* reclaim policy (vmscan.c, kswapd.c) */
	const struct kvmm_mm_hooks *hooks; /* the owner's callbacks, NULL: none */
	void *hooks_priv;
	struct kvmm_kswapd *kswapd; /* background reclaimer, NULL: none (kswapd.c) */
	uint32_t reclaim_nest;	    /* inside kvmm_shrink(): no nested sequence swap-out */
	/*
	 * The owner's word that nothing takes pages leaving the pool but a swap tier (no hook
	 * demotes them): while no tier exists, reclaim only drops cached pages, and the thread
	 * that allocates does it in batches (kswapd.c, direct reclaim) instead of kvswapd.
	 */
	bool reclaim_inline;
	/*
	 * The namespace whose allocation reclaims (kvmm_alloc_page() sets it around its direct
	 * reclaim and OOM report): its own min and low do not protect it from itself.  NULL:
	 * the pool's pressure (kvswapd, an admin's RECLAIM), every protection holds.
	 */
	struct kvmm_ns *reclaim_for;
	unsigned int reclaim_prot;  /* the protection kvmm_reclaim() honours now (vmscan.c) */
	uint32_t nr_faulting;	    /* sequences a PIN is faulting in (KVMM_SEQ_F_FAULTING) */
	struct list_head shrinkers; /* struct kvmm_shrinker.node (shrinker.c) */

	/*
	 * The daemon-wide frame budget this pool draws from (budget.c), NULL: none.  Frames out
	 * of the buddy (MAGAZINE, MAPPED, CACHED) are charged to it: budget_charged of them.
	 */
	struct kvmm_budget *budget;
	struct list_head budget_node; /* in budget->pools */
	struct kvmm_ns *budget_ns;    /* the namespace whose min / low stand for the pool */
	uint32_t budget_charged;      /* frames out of the buddy + nr_free_resident */
	/*
	 * Of those, the ones not yet added to budget->used: while the budget is not
	 * overcommitted no charge can fail, and a take then counts here without the atomic add
	 * (a locked instruction per allocation, 10-15 % of a request in the flow benchmark);
	 * kvmm_budget_flush() moves them when it becomes overcommitted, or before an uncharge.
	 * Written under the pool lock, read without it (relaxed atomics, no locked instruction).
	 */
	uint32_t budget_pending;
	uint32_t nr_free_resident; /* FREE frames with KVMM_PG_RESIDENT */
	uint32_t budget_keep;	   /* free frames kept resident while overcommitted */
};

int kvmm_pool_create(const struct kvmm_pool_params *params, struct kvmm_pool **out);
void kvmm_pool_destroy(struct kvmm_pool *pool);

/* Bytes one frame holds over all the devices mirroring it: a swap slot's size. */
static inline uint64_t kvmm_frame_bytes(const struct kvmm_pool *pool)
{
	return pool->page_size * (pool->be.nr_devices ? pool->be.nr_devices : 1);
}

static inline uint32_t kvmm_page_to_frame(const struct kvmm_pool *pool, const struct kvmm_page *pg)
{
	return (uint32_t)(pg - pool->pages);
}

static inline struct kvmm_page *kvmm_frame_to_page(struct kvmm_pool *pool, uint32_t frame)
{
	return &pool->pages[frame];
}

void *kvmm_pool_frame_addr(struct kvmm_pool *pool, uint32_t frame);

/* Frames free for allocation: in the buddy plus in magazines. */
uint32_t kvmm_pool_nr_free(const struct kvmm_pool *pool);

/* ---- buddy allocator (page_alloc.c) --------------------------------------------------- */

/*
 * Take a block of 2^order frames (order < KVMM_MAX_ORDER) from the buddy, bypassing
 * watermarks, namespaces and magazines: every frame of it is MAPPED, refcount 0, uncharged
 * (ns_id 0), flags 0, not scrubbed, and marked KVMM_NS_DEAD so that it is scrubbed before
 * kvmm_alloc_page() hands it to anyone.  NULL with errno = ENOMEM when no block is large
 * enough (EINVAL for a bad order).
 */
struct kvmm_page *kvmm_buddy_alloc(struct kvmm_pool *pool, unsigned int order);
/*
 * Return a block of 2^order frames (head @pg, aligned to 2^order) to the buddy, merging with
 * free buddies.  The frames may be in any state but FREE; their counts move to FREE.
 */
void kvmm_buddy_free(struct kvmm_pool *pool, struct kvmm_page *pg, unsigned int order);

/*
 * buddyinfo-style report of free blocks per order, two lines, each a label padded to 6
 * characters and one right-aligned 7-wide column per order 0 .. KVMM_MAX_ORDER - 1:
 *
 *   Order:       0       1 ...      10\n
 *   Free:       12       3 ...       1\n
 *
 * Returns the length written (without the NUL), -EINVAL on bad arguments or -ENOSPC when
 * @len < KVMM_BUDDYINFO_SIZE would truncate it.
 */
#define KVMM_BUDDYINFO_SIZE 256
int kvmm_buddyinfo(const struct kvmm_pool *pool, char *buf, size_t len);

/* ---- magazines (page_alloc.c) --------------------------------------------------------- */

/*
 * A per-owner stash of free frames (state MAGAZINE, uncharged) so that the common
 * allocation and free are a list pop and push.  An empty magazine refills @batch frames from
 * the buddy; a free into a full one first drains the @batch coldest frames back.  While it
 * holds frames it is on pool->mags, so an allocation that finds nothing else free can take
 * back the frames other magazines hoard; an empty magazine is not referenced by the pool
 * and may simply be forgotten (after kvmm_magazine_drain_all()).
 */
struct kvmm_magazine {
	struct list_head frames; /* struct kvmm_page.lru, state MAGAZINE, hottest first */
	struct list_head node;	 /* in pool->mags while count > 0 */
	uint32_t count;
	uint32_t capacity; /* frames held at most; a full one drains to capacity - batch */
	uint32_t batch;	   /* frames moved per refill or drain, 1 <= batch <= capacity */
	uint32_t owner;
	struct kvmm_pool *pool;
};

#define KVMM_MAG_DEFAULT_CAPACITY 64
#define KVMM_MAG_DEFAULT_BATCH 16

/* capacity = batch = 0 picks the defaults above.  0 or -EINVAL (batch 0 or > capacity). */
int kvmm_magazine_init(struct kvmm_pool *pool, struct kvmm_magazine *mag, uint32_t owner,
		       uint32_t capacity, uint32_t batch);
/* Return every frame to the buddy (one MAG_DRAIN event if it held any). */
void kvmm_magazine_drain_all(struct kvmm_magazine *mag);

/*
 * Allocate one order-0 frame for namespace @ns (charged as used, state MAPPED with
 * refcount 0 - the caller installs it in a PTE and takes the reference), through @mag when
 * non-NULL.  @ns NULL allocates uncharged (ns_id 0).  Enforces the namespace limit
 * (used + cached + 1 > limit: kvmm_reclaim(pool, ns, excess) first, then -ENOMEM) and the
 * min watermark (taking a frame would leave kvmm_pool_nr_free() < wmark_min: direct
 * kvmm_reclaim(pool, NULL, n) of at most KVMM_RECLAIM_BATCH pages, then proceed; min is a
 * reserve hint and only an empty pool fails).  A frame last written by another namespace is
 * scrubbed through the backend first.  The page comes back with flags DIRTY, ntokens 0.
 * Returns the page or NULL with errno = ENOMEM (or EIO when the scrub failed).
 */
#define KVMM_RECLAIM_BATCH 32
struct kvmm_page *kvmm_alloc_page(struct kvmm_pool *pool, struct kvmm_ns *ns,
				  struct kvmm_magazine *mag);
/*
 * A block of 2^order consecutive frames (0 < order < KVMM_MAX_ORDER), each as
 * kvmm_alloc_page() hands one out (MAPPED, charged to @ns, scrubbed when it last held another
 * namespace's data, flags DIRTY), for bulk appends, whose KV then lies in one run of memory
 * (Documentation/mm/page_alloc.md, "Runs for bulk appends").  Best effort: no reclaim, no
 * magazine; NULL with errno = ENOMEM when the buddy has no block that large, when @ns would
 * go past its limit or free frames would fall under the low watermark (the caller falls back
 * to kvmm_alloc_page(), which reclaims), EIO when a scrub failed, EINVAL for a bad order.
 * The frames are freed one by one with kvmm_free_page().
 */
struct kvmm_page *kvmm_alloc_block(struct kvmm_pool *pool, struct kvmm_ns *ns, unsigned int order);
/*
 * How many frames kvmm_alloc_block() may take for @ns now, its limit, the low watermark and
 * the daemon-wide budget counted (the buddy may still lack a block that large): a bulk
 * append tries no block larger, so that a full pool costs it no failed calls.
 */
uint32_t kvmm_alloc_block_room(const struct kvmm_pool *pool, const struct kvmm_ns *ns);
/*
 * Before a bulk append of @n frames: when blocks lack room only because the pool is full of
 * clean cache (kvmm_reclaim_drop_only), drop enough of it first (at most 4 batches), so the
 * append takes blocks instead of single frames that reclaim one batch at a time.  Returns
 * kvmm_alloc_block_room() afterwards.  Best effort; pool lock held.
 */
uint32_t kvmm_alloc_block_prepare(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n);
/*
 * Free an order-0 frame that has no mapper: refcount 0, pincount 0, not SEALED, not on an
 * LRU list, cache NULL (an evicted page has been taken out of the page cache and the LRU
 * first).  Uncharges its namespace by state: MAPPED -> ns->used--, CACHED -> ns->cached--.
 * Clears the metadata and returns the frame to @mag when non-NULL, else to the buddy.
 * Anything else is a bug (KVMM_BUG_ON).
 */
void kvmm_free_page(struct kvmm_pool *pool, struct kvmm_page *pg, struct kvmm_magazine *mag);

/* Take / drop a mapping reference.  Dropping the last one caches a sealed page or frees. */
void kvmm_page_get(struct kvmm_pool *pool, struct kvmm_page *pg);
void kvmm_page_put(struct kvmm_pool *pool, struct kvmm_page *pg, struct kvmm_magazine *mag);

/* ---- formats: include/format.h (lib/format.c) ---------------------------------------- */

/*
 * A 64-bit identity of the format (incl. page size), mixed into cache keys; stable across
 * builds.  Here, not in the format layer, because only the page cache keys on it (pagecache.c).
 */
uint64_t kvmm_fmt_id(const struct kvmm_fmt *fmt);

/* ---- namespaces (ns.c) ---------------------------------------------------------------- */

struct kvmm_ns {
	uint16_t id;
	char name[32];
	uint64_t secret[2]; /* keys the page-cache hash: nothing crosses namespaces */
	uint32_t used;	    /* MAPPED frames charged */
	uint32_t cached;    /* CACHED frames charged */
	uint32_t limit;	    /* frames; 0 = unlimited (memcg's max) */
	/*
	 * Protection from the pressure of the pool's other namespaces (memcg's min and low, in
	 * frames; 0 = none): global reclaim never takes a namespace below min, and takes it
	 * below low only when no unprotected namespace has anything reclaimable (vmscan.c).
	 */
	uint32_t min;
	uint32_t low;
	uint32_t peak; /* the most used + cached ever charged at once (high-water mark) */
	/* budget reclaim (budget.c): frames taken for others, times taken below low */
	uint64_t budget_reclaimed;
	uint64_t low_events;
	int priority;
	struct kvmm_pool *pool;
	uint64_t hash_seed; /* XXH3 seed derived from secret (ns.c), cached for lookups */
	bool secret_set;    /* given by kvmm_ns_set_secret(), not drawn at random */
};

/* struct kvmm_page.data_ns of frames whose namespace was destroyed: scrub before any reuse */
#define KVMM_NS_DEAD KVMM_MAX_NS

/* Create namespace @name (unique), limit in frames (0 = none). */
int kvmm_ns_create(struct kvmm_pool *pool, const char *name, uint32_t limit, int priority,
		   struct kvmm_ns **out);
struct kvmm_ns *kvmm_ns_find(struct kvmm_pool *pool, const char *name);
/*
 * Give @ns a known secret instead of the random one it was created with: a provisioned one
 * (kvmmd's secret_file: namespaces with equal secrets compute equal content keys on any
 * machine, which is what lets the remote tier share their pages) or a warm restart's
 * (swap_index.c).  -EINVAL (all zero), -EBUSY once it has pages or the pool has cache
 * entries: keys made under the old secret would not survive the change.
 */
int kvmm_ns_set_secret(struct kvmm_ns *ns, const uint64_t secret[2]);
/*
 * Destroy.  Drops the namespace's cached pages first; -EBUSY while a frame is still mapped
 * for it (used) or an address space still belongs to it.
 */
int kvmm_ns_destroy(struct kvmm_ns *ns);
/* Set the limit (0 = none); cached pages over a lower limit are reclaimed at once. */
int kvmm_ns_set_limit(struct kvmm_ns *ns, uint32_t limit);
/*
 * Set @ns's protections (frames, 0 = none): min <= low, and both at most the limit when there
 * is one (-EINVAL otherwise).  Nothing is reclaimed; they only steer later reclaim.
 */
int kvmm_ns_set_protection(struct kvmm_ns *ns, uint32_t min, uint32_t low);
/* Pool teardown: free every namespace without looking at charges (kvmm_mm_release()). */
void kvmm_ns_destroy_all(struct kvmm_pool *pool);

/* ---- address spaces and sequences (pgtable.c) ------------------------------------------ */

struct kvmm_aspace {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_fmt fmt;
	struct kvmm_magazine *mag; /* may be NULL */
	struct list_head seqs;
	struct list_head node; /* in pool->aspaces */
	uint32_t id;
	uint32_t nr_seqs;
	/*
	 * kvmm_fmt_id(&fmt), computed once, and the client's model identity if it gave one
	 * (kvmm_key_domain): mixed into every cache key of its sequences
	 */
	uint64_t fmt_id;
	/*
	 * Its client reads the far tier in place (kvmm_swap_far_tier, FAR_MAP): prefix lookups
	 * map a sealed page found there without bringing it back (kvmm_swap_map_far).
	 */
	bool far_lookup;
};

struct kvmm_seq {
	struct list_head node; /* in aspace->seqs */
	struct kvmm_aspace *as;
	uint64_t id;
	uint64_t ntokens;
	uint32_t nblocks; /* blocks covered by ntokens */
	uint32_t nsealed; /* leading blocks sealed */
	uint32_t cap;	  /* capacity of pte[] and (in blocks) of tokens[] */
	uint64_t *pte;	  /* uapi PTE encoding per logical block */
	uint32_t *tokens; /* token ids, cap * tokens_per_page */
	int priority;
	uint32_t flags;	 /* KVMM_SEQ_F_* */
	uint64_t key_id; /* the key domain of its pages (salt): 0 = as->fmt_id (kvmm_seq_key_id) */
	void *priv;	 /* the owner's cookie (kvmmd: its struct kvmm_ipc_seq) */
};

/* struct kvmm_seq.flags */
enum {
	KVMM_SEQ_F_NORECLAIM = 1u << 0, /* never swapped out by reclaim (a hidden magazine seq) */
	KVMM_SEQ_F_PREEMPTED = 1u << 1, /* reported to the oom hook: its KV is about to go */
	KVMM_SEQ_F_FAULTING = 1u << 2,	/* a step is faulting it in: never an OOM victim for it */
};

int kvmm_aspace_create(struct kvmm_pool *pool, struct kvmm_ns *ns, const struct kvmm_fmt *fmt,
		       struct kvmm_magazine *mag, struct kvmm_aspace **out);
/* Frees every sequence left. */
void kvmm_aspace_destroy(struct kvmm_aspace *as);

int kvmm_mm_seq_create(struct kvmm_aspace *as, struct kvmm_seq **out);
/*
 * The most blocks that could ever be given to sequences of @as at once: frames the namespace
 * may hold (its limit, or the whole pool without one) plus every swap slot of the pool.
 */
uint64_t kvmm_mm_seq_blocks_max(const struct kvmm_aspace *as);
/*
 * Append n tokens (ids may be NULL = zeros); allocates pages as needed; COW on shared tail.
 * -E2BIG, before anything is reclaimed, when the new blocks alone are more than
 * kvmm_mm_seq_blocks_max() (such an append could never succeed).
 */
int kvmm_mm_seq_append(struct kvmm_seq *seq, uint32_t n, const uint32_t *token_ids);
/*
 * Append n tokens like kvmm_mm_seq_append(), but the blocks past the old last block are the
 * caller's @pages, in order, instead of fresh allocations: exactly one per new block, each
 * MAPPED with refcount 0, pincount 0, unsealed, on no list and charged to the sequence's
 * namespace (what kvmm_alloc_page() or kvmm_mm_seq_unmap_tail() hands out).  A shared or
 * sealed partial last block is still copied into a page allocated here.  -EINVAL (a count
 * or a page not as described, a page given twice), -ENOMEM, or a fault's error; on error
 * nothing changed and the pages are still the caller's.  kvmmd adopts the frames a client
 * took from its magazine (and already wrote) this way.
 */
int kvmm_mm_seq_append_pages(struct kvmm_seq *seq, uint32_t n, const uint32_t *token_ids,
			     struct kvmm_page *const *pages, uint32_t nr_pages);
/*
 * Unmap the last @nr blocks without freeing their pages: each must be resident, unsealed and
 * mapped only there (refcount 1, not pinned), else -EINVAL and nothing changes.  Their pages
 * go to pages[0..nr) in block order, MAPPED with refcount 0 and still charged: the caller
 * maps them again (kvmm_mm_seq_append_pages) or frees them (kvmm_free_page) before it drops
 * the pool lock.  The sequence keeps whole blocks: ntokens becomes nblocks * tokens_per_page.
 */
int kvmm_mm_seq_unmap_tail(struct kvmm_seq *seq, uint32_t nr, struct kvmm_page **pages);
int kvmm_mm_seq_truncate(struct kvmm_seq *seq, uint64_t ntokens);
int kvmm_mm_seq_fork(struct kvmm_seq *src, struct kvmm_seq **out);
void kvmm_mm_seq_free(struct kvmm_seq *seq);
/* Seal every full, unsealed block; inserts them in the page cache. Returns number sealed. */
int kvmm_mm_seq_seal(struct kvmm_seq *seq);
/*
 * Before sealing blocks [nsealed, end): fault in those of them that reclaim swapped out, and
 * the sealed block before them (the seal reads its cache entry through its page).  0 when
 * nothing was swapped, else kvmm_mm_seq_fault()'s return (negative: -ENOMEM and the like).
 */
int kvmm_mm_seq_seal_fault(struct kvmm_seq *seq, uint32_t end);
/* Frame of block i, or KVMM_FRAME_NONE. */
uint32_t kvmm_mm_seq_frame(const struct kvmm_seq *seq, uint32_t block);
/* Make room for @nblocks blocks in the page table and token array. 0 or -ENOMEM/-EINVAL. */
int kvmm_mm_seq_reserve(struct kvmm_seq *seq, uint32_t nblocks);
/*
 * The PTE this sequence should hold for @pg: present, SEALED when @sealed (the block is
 * sealed in this sequence), else DIRTY and WRITABLE when the page is exclusive or SHARED
 * when it is not.
 */
uint64_t kvmm_mm_seq_mk_pte(struct kvmm_pool *pool, const struct kvmm_page *pg, bool sealed);
/*
 * Pool teardown, called by kvmm_pool_destroy() before the frames go (and safe to call more
 * than once): destroys every address space left, the page cache and the namespaces.
 */
void kvmm_mm_release(struct kvmm_pool *pool);

/* ---- page cache (pagecache.c) ---------------------------------------------------------- */

/*
 * Map the longest cached run of full blocks of @tokens (n tokens) onto the end of @seq.
 * @seq must be empty or hold a whole number of pages, all sealed (what an earlier lookup
 * leaves): @tokens are then the ids that follow the sequence's own, not the whole prompt,
 * and the walk starts at block seq->nblocks under the cache entry of the sequence's last
 * block, exactly as a lookup of the whole prompt would reach it.  Every full block that hits
 * is mapped (refcount + 1), marked accessed and counted sealed; its token ids and its parent
 * entry are verified.  Returns the sequence's new length in tokens (seq->ntokens: the tokens
 * it held plus those mapped now, a multiple of tokens_per_page), or -EINVAL (NULL @seq,
 * NULL @tokens with n > 0, a partial last page or an unsealed block), -EOVERFLOW (the
 * sequence already holds more than INT_MAX tokens) or -ENOMEM (nothing mapped).  At most
 * INT_MAX tokens in all are mapped, so the length always fits.
 */
int kvmm_mm_prefix_lookup(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n);

/*
 * kvmm_mm_prefix_lookup() for a pool under pressure: the walk stops before a swapped hit whose
 * fault-in would need reclaim (inside a fault it may only drop cache, which would drop cached
 * pages of the prefix being walked), room is made in reclaim order (kvmm_shrink(): cached
 * pages demoted, then sequences swapped out, the pages just mapped included: they are the
 * sequence's alone and unpinned) and the walk continues from there while that maps more
 * (lookup_reclaim in vmstat counts the rounds): a prefix longer than the pool is mapped
 * whole, partly swapped.  Returns as
 * kvmm_mm_prefix_lookup(); -errno only when nothing was mapped.  Never inside reclaim or
 * swap I/O (the caller is at the top, as the IPC ops are).
 */
int kvmm_mm_prefix_lookup_reclaim(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n);

/*
 * A key domain: XXH3-64 seeded with ns->hash_seed over (tag, base, len, bytes). The model
 * identity of a client makes its aspace's fmt_id (base: kvmm_fmt_id, tag "model"); a salt
 * makes a sequence's key_id (base: the aspace's fmt_id, tag "salt"). Keys and cache entries
 * carry the domain where they carried the format id, so pages of different domains never
 * match (the entry stores it and lookups compare it).
 */
#define KVMM_KEY_DOMAIN_MODEL UINT64_C(0x6c65646f6d) /* "model" */
#define KVMM_KEY_DOMAIN_SALT UINT64_C(0x746c6173)    /* "salt" */
uint64_t kvmm_key_domain(const struct kvmm_ns *ns, uint64_t tag, uint64_t base, const void *bytes,
			 size_t len);
/* The key domain of seq's pages: its salt's, else its aspace's. */
static inline uint64_t kvmm_seq_key_id(const struct kvmm_seq *seq)
{
	return seq->key_id ? seq->key_id : seq->as->fmt_id;
}
/*
 * Set seq's salt (len 0: none): -EBUSY when that changes its key domain while it has a sealed
 * page or shares one (a fork sibling could seal it under the other domain).
 */
int kvmm_mm_seq_set_salt(struct kvmm_seq *seq, const void *salt, size_t len);

/*
 * The content key of one block: XXH3-64 seeded with ns->hash_seed over (parent key, format
 * id, the namespace's 128-bit secret, the block's token ids).  The parent key of a first
 * block is 0.  Exported for the benchmark's "hashing alone" baseline and for tests.
 */
uint64_t kvmm_cache_key(const struct kvmm_ns *ns, uint64_t parent_key, uint64_t fmt_id,
			const uint32_t *tokens, uint32_t n);
typedef uint64_t (*kvmm_cache_hash_fn)(const struct kvmm_ns *ns, uint64_t parent_key,
				       uint64_t fmt_id, const uint32_t *tokens, uint32_t n);
/*
 * Test hook: compute keys with @fn instead of kvmm_cache_key (NULL restores it), e.g. a
 * constant to force collisions.  -EBUSY while the cache holds entries (their keys would go
 * stale), -ENOMEM.
 */
int kvmm_pagecache_set_hash_fn(struct kvmm_pool *pool, kvmm_cache_hash_fn fn);
/*
 * Seal block @block of @seq (full, all earlier blocks sealed): index its page under its
 * content key, or, when a verified identical block is already cached, map that page instead
 * and drop this one (deduplication).  A page a fork sibling sealed under another entry for
 * the previous block is deduplicated the same way or re-parented under this sequence's.
 * 0 or -ENOMEM (nothing changed).
 */
int kvmm_pagecache_seal_block(struct kvmm_seq *seq, uint32_t block);
/*
 * Take an evicted page's entry out of the cache and free it (clears SEALED and pg->cache).
 * Its descendants become orphans: unreachable, and the cached ones go to the inactive tail.
 */
void kvmm_pagecache_remove(struct kvmm_pool *pool, struct kvmm_page *pg);
/*
 * A sealed page lost its last mapper (kvmm_page_put): if its entry is an orphan - no lookup
 * or seal can ever reach it again - take it out of the cache (as kvmm_pagecache_remove) and
 * return true, so that the caller frees the frame instead of caching it.
 */
bool kvmm_pagecache_drop_orphan(struct kvmm_pool *pool, struct kvmm_page *pg);
/* Entries in the cache (one per sealed page). */
uint32_t kvmm_pagecache_count(const struct kvmm_pool *pool);
/* The content key of @seq's sealed block @block (resident or swapped): 0 or -ENOENT. */
int kvmm_pagecache_seq_key(struct kvmm_seq *seq, uint32_t block, uint64_t *key);
/*
 * The remote tier has (or is being sent) the page of @seq's sealed, resident block @block:
 * mark its entry.  Returns true when it was not marked yet (the caller stores it), false when
 * it was, or the block is not a resident sealed page.
 */
bool kvmm_pagecache_remote_mark(struct kvmm_seq *seq, uint32_t block);
/* Whether the remote tier has (or is being sent) the page of @ent; mark that it has. */
bool kvmm_pagecache_ent_remote(const struct kvmm_cache_ent *ent);
void kvmm_pagecache_ent_set_remote(struct kvmm_cache_ent *ent);
/* No entry has @ent as parent: removing it orphans nobody. */
bool kvmm_pagecache_ent_leaf(const struct kvmm_cache_ent *ent);
/*
 * Call @fn with each block's token ids of @ent's prefix, from the first block through @ent's
 * own: 0, -ENOENT when the chain is broken (an orphan: a parent was evicted), -ENOMEM.
 */
int kvmm_pagecache_ent_prefix(const struct kvmm_cache_ent *ent,
			      void (*fn)(void *arg, const uint32_t *tokens, uint32_t n), void *arg);
/* Consistency of the cache with the frames (for kvmm_check_invariants). 0 or -EUCLEAN. */
int kvmm_pagecache_check(struct kvmm_pool *pool, char *why, size_t whylen);
/* The sealed blocks of @seq form one reachable chain of entries holding its tokens. */
int kvmm_pagecache_check_seq(const struct kvmm_seq *seq, char *why, size_t whylen);
/* Free every entry and the table; the pages keep their state (pool teardown only). */
void kvmm_pagecache_destroy(struct kvmm_pool *pool);

/* ---- LRU and reclaim (vmscan.c) -------------------------------------------------------- */

/*
 * Evict up to n cached pages from the inactive tail (ns == NULL: any namespace's), giving
 * REFERENCED pages a second chance on the active list and refilling the inactive list from
 * the active tail when it runs short.  Returns the number evicted (0: nothing reclaimable).
 */
uint32_t kvmm_reclaim(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t n);
/*
 * kvmm_reclaim() of any namespace's pages under the pool's pressure, honouring protections
 * (memcg's min and low, struct kvmm_ns): first only from namespaces above their low, then, if
 * that freed fewer than @n, from those above their min; never below a min, except the
 * namespace pool->reclaim_for (reclaim on its own behalf).  kvmm_shrink()'s first step.
 */
uint32_t kvmm_reclaim_protected(struct kvmm_pool *pool, uint32_t n);
/*
 * Whether global reclaim would leave @ns alone at @level (KVMM_PROT_LOW: its min and low;
 * KVMM_PROT_MIN: its min only) if it took @nr more of its frames.
 */
#define KVMM_PROT_NONE 0
#define KVMM_PROT_LOW 1
#define KVMM_PROT_MIN 2
bool kvmm_ns_protected(const struct kvmm_pool *pool, const struct kvmm_ns *ns, unsigned int level,
		       uint32_t nr);
/*
 * The whole reclaim order (Documentation/mm/reclaim.md): free up to @n frames by (1) cached
 * pages - demoted to the highest swap tier with room, after that tier made room by moving its
 * oldest pages down (host -> NVMe), else dropped - then, unless KVMM_SHRINK_NOSWAP, (2)
 * whole sequences swapped out, lowest namespace priority, then lowest sequence priority,
 * then youngest first; pinned, shared and NORECLAIM pages stay.  Between the two, write-back
 * in flight (kvswapd's) is waited for and completed, lock held (kvmm_swap_writeback_wait).
 * Returns the frames freed.  Nested calls (a swap I/O's own allocation) only drop cache and
 * complete the write-backs that change no mapping.
 */
#define KVMM_SHRINK_NOSWAP (1u << 0)
/*
 * Swap sequences out asynchronously (kvmm_mm_seq_swap_out_async): the pages counted are under
 * writeback, their frames free only once kvmm_swap_writeback() (or kvmm_swap_poll) completes
 * them.  For kvswapd and other callers that can let go of the lock; direct reclaim is sync.
 */
#define KVMM_SHRINK_ASYNC (1u << 1)
/* Honour low as well as min all the way (budget reclaim's first pass): nothing below low. */
#define KVMM_SHRINK_KEEP_LOW (1u << 2)
uint32_t kvmm_shrink(struct kvmm_pool *pool, uint32_t n, unsigned int flags);

/*
 * Shrinkers (shrinker.c): frames an owner of the pool keeps charged but idle - kvmmd's client
 * magazines - and gives back when reclaim asks.  kvmm_shrink() runs them after the cache and
 * before it swaps sequences out; a namespace at its limit runs them for its own charges before
 * it fails an allocation.  ->scan gives back up to @want frames charged to @ns (NULL: any
 * namespace) and returns how many it freed; it runs with the pool lock held, from whatever
 * thread reclaims (kvswapd included), may free pages through the core but must never
 * allocate, and must return 0 while its owner is in the middle of changing what it would
 * free (reclaim can start inside that owner's own allocation).  Registration and removal
 * need the pool lock.  The list is walked round-robin: each run starts after the shrinker
 * that was asked first last time, so no owner is always the first to pay.
 */
struct kvmm_shrinker {
	struct list_head node; /* in pool->shrinkers */
	uint32_t (*scan)(struct kvmm_shrinker *sh, struct kvmm_ns *ns, uint32_t want);
	uint64_t nr_freed; /* frames this one gave back, for its owner's statistics */
};

void kvmm_register_shrinker(struct kvmm_pool *pool, struct kvmm_shrinker *sh);
void kvmm_unregister_shrinker(struct kvmm_pool *pool, struct kvmm_shrinker *sh);
uint32_t kvmm_run_shrinkers(struct kvmm_pool *pool, struct kvmm_ns *ns, uint32_t want);

/*
 * Out of memory after reclaim: pick a victim (no pinned page preferred; lowest namespace
 * priority, lowest sequence priority, youngest), mark it PREEMPTED, count KVMM_STAT_OOM and
 * report it to hooks->oom.  Returns it, or NULL when there is none to pick.
 */
struct kvmm_seq *kvmm_out_of_memory(struct kvmm_pool *pool);
/* Frames of @seq that are resident (present PTEs). */
uint32_t kvmm_seq_nr_resident(const struct kvmm_seq *seq);

/* ---- kvswapd (kswapd.c) ---------------------------------------------------------------- */

/*
 * A background thread per pool that keeps free frames between the low and high watermarks:
 * woken (kvmm_wakeup_kswapd, by an allocation that leaves free < low) it runs kvmm_shrink()
 * in batches under pool->lock until free >= high or nothing more can go, then sleeps on a
 * condition variable tied to pool->lock.  0 or -errno.  Stop it before the pool goes.
 */
int kvmm_kswapd_start(struct kvmm_pool *pool);
void kvmm_kswapd_stop(struct kvmm_pool *pool);
/*
 * Pool lock held: free < low and kvswapd runs: wake it (cheap when already awake), or, when
 * kvmm_reclaim_drop_only(), drop one batch of cached pages here first.
 */
void kvmm_wakeup_kswapd(struct kvmm_pool *pool);
/*
 * Reclaim would only drop clean cached pages and the owner wants that done by the allocating
 * thread (pool->reclaim_inline): no swap tier to demote to, not inside reclaim.  Pool lock.
 */
bool kvmm_reclaim_drop_only(const struct kvmm_pool *pool);

/* Put a CACHED page on the LRU: the active list when it has KVMM_PG_ACTIVE, else inactive. */
void kvmm_lru_add(struct kvmm_pool *pool, struct kvmm_page *pg);
/* Take a page off its LRU list. */
void kvmm_lru_del(struct kvmm_pool *pool, struct kvmm_page *pg);
/*
 * A sealed page was reused (lookup hit or deduplicated seal): the first reuse sets
 * REFERENCED, a second one while still REFERENCED promotes it (ACTIVE).
 */
void kvmm_mark_page_accessed(struct kvmm_pool *pool, struct kvmm_page *pg);

/* ---- the daemon-wide frame budget (budget.c) ------------------------------------------ */

/*
 * Frames resident over several pools (kvmmd: one per namespace) never exceed @limit, though
 * the pools' sizes together may (overcommit): memcg's global limit over its children.  A pool
 * charges the budget for every frame it takes out of its buddy and keeps it charged while the
 * frame's memory is there (a free frame KVMM_PG_RESIDENT); while the pools together span more
 * than the limit (overcommitted) free frames past the pool's keep are discarded (the backend's
 * discard: the memory goes back to the system), and the rest when another pool needs them.
 * An allocation that finds the budget spent reclaims from the pools whose namespaces are above
 * their low, in proportion to what they hold above it (the allocating one included), then,
 * only when that was not enough, from those above their min; a namespace's min is never
 * reclaimed, and one under its min preempts (oom hook) in a pool above its own min.  @lock
 * orders the cross-pool reclaim: taken with trylock by allocators (one reclaimer at a time;
 * a second one goes without), with lock by join and leave; under it, other pools' locks.
 * used is atomic (pools change it under their own locks).
 */
struct kvmm_budget {
	pthread_mutex_t lock;
	uint64_t limit;		/* frames */
	uint64_t used;		/* frames charged by all pools (atomic) */
	uint64_t span;		/* frames of all pools together (under lock) */
	bool discard;		/* span > limit: frames going back are discarded */
	struct list_head pools; /* struct kvmm_pool.budget_node */
	uint32_t nr_pools;
	/*
	 * Background reclaim (kvmm_budget_balance, from kvswapd): a charge that leaves fewer
	 * than wmark_low frames of the budget free wakes the charging pool's kvswapd, which
	 * reclaims across the pools until wmark_high are free.  Set by kvmm_budget_init (2% and
	 * 3% of the limit); 0: none.
	 */
	uint64_t wmark_low, wmark_high;
	/* statistics (under lock): reclaims run, frames they freed, ones that fell short */
	uint64_t nr_reclaim, reclaimed, nr_short, nr_oom, low_events;
	uint64_t nr_background, bg_reclaimed; /* kvmm_budget_balance runs, frames they freed */
};

int kvmm_budget_init(struct kvmm_budget *b, uint64_t limit);
/* Every pool must have left. */
void kvmm_budget_fini(struct kvmm_budget *b);
/*
 * Make @pool (nothing allocated yet) draw from @b; @ns is the namespace whose min and low
 * stand for it in budget reclaim (NULL: none, never protected).  Takes b->lock, and the
 * pools' locks when the budget becomes overcommitted (their free frames are discarded).
 * 0, -EINVAL, -EBUSY (already in one or frames allocated), -ENOSPC (KVMM_BUDGET_MAX_POOLS).
 */
#define KVMM_BUDGET_MAX_POOLS 64
int kvmm_budget_join(struct kvmm_budget *b, struct kvmm_pool *pool, struct kvmm_ns *ns);
/* b->lock held: frames charged by all pools, their pending charges included. */
uint64_t kvmm_budget_used(struct kvmm_budget *b);
/* Pool lock held: add the pool's pending charges (budget_pending) to budget->used. */
void kvmm_budget_flush(struct kvmm_pool *pool);
/* Detach @pool from its budget (kvmm_pool_destroy calls it); its charges go. b->lock. */
void kvmm_budget_leave(struct kvmm_pool *pool);
/* Frames the budget has left (0 when spent). */
uint64_t kvmm_budget_free(const struct kvmm_budget *b);

/*
 * The reclaim-target choice, pure: @nr members holding usage[i] frames with floors floor[i]
 * (low at the first pass, min at the second): take[i] frames from each so that together they
 * give @want, in proportion to what each holds above its floor (never more than that; the
 * fractions go to the largest remainders, so the shares add up to @want exactly).  Returns
 * the sum of take[] (less than @want when the members hold less above their floors).
 */
uint64_t kvmm_budget_targets(const uint64_t *usage, const uint64_t *floor, unsigned int nr,
			     uint64_t want, uint64_t *take);
/*
 * The budget has fewer than @want frames left for @ns's allocation in @pool (pool lock held):
 * reclaim across the pools as described above.  Returns the frames the budget has left
 * afterwards.  0 at once when another thread reclaims for the budget.
 */
uint64_t kvmm_budget_reclaim(struct kvmm_pool *pool, struct kvmm_ns *ns, uint64_t want);
/*
 * Background reclaim for the budget (kvswapd of @pool, its lock held): while overcommitted
 * and fewer than wmark_high frames of the budget are free, give back the pools' resident
 * free frames, then reclaim cached pages (and the owners' shrinkers) from the pools whose
 * namespaces are above their low, in proportion to what they hold above it
 * (kvmm_budget_targets, KVMM_SHRINK_KEEP_LOW | KVMM_SHRINK_NOSWAP: no sequence is swapped
 * out and no protection broken in the background), every frame freed given back to the
 * system.  The frames freed in *nr_freed; returns 0, or -EBUSY at once when another thread
 * reclaims for the budget (kvswapd then looks again after its backoff).
 */
int kvmm_budget_balance(struct kvmm_pool *pool, uint64_t *nr_freed);
/* Under the budget's low point: does @pool's charge call for background reclaim? */
static inline bool kvmm_budget_below_low(const struct kvmm_budget *b)
{
	return b->wmark_low && __atomic_load_n(&b->discard, __ATOMIC_RELAXED) &&
	       kvmm_budget_free(b) < b->wmark_low;
}
/* Wake @pool's kvswapd for the budget (pool lock held): it runs kvmm_budget_balance. */
void kvmm_wakeup_kswapd_budget(struct kvmm_pool *pool);
/*
 * Give back the memory of up to @want free frames of @pool still charged (KVMM_PG_RESIDENT),
 * the coldest first; returns how many (pool lock held).  kvmm_budget_discard_free() gives
 * back all of them: when the budget becomes overcommitted.
 */
uint32_t kvmm_budget_trim(struct kvmm_pool *pool, uint32_t want);
void kvmm_budget_discard_free(struct kvmm_pool *pool);

/* ---- invariants (debug.c) --------------------------------------------------------------- */

/* Check every frame is in exactly one state, refcounts, counters. 0 or -EUCLEAN w/ message. */
int kvmm_check_invariants(struct kvmm_pool *pool, char *why, size_t whylen);

#endif /* KVMM_MM_H */
