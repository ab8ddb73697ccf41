// SPDX-License-Identifier: MIT
/*
 * kvmm/swapfile.c - swap tiers and their slots, swap-out, demotion, move-down, swapoff and
 * the swap fault points.
 *
 * A pool's swap state (struct kvmm_swap, made at the first swapon) holds up to 31 tiers in
 * priority order.  Each tier is a medium (struct kvmm_swap_ops) and a slot allocator: a
 * bitmap of page-size slots grouped in clusters of KVMM_SWAP_CLUSTER.  A batch of a
 * sequence's consecutive pages asks for a run: the current cluster's next free run when it is
 * long enough, else a wholly free cluster (which then becomes current), else any free slots
 * (a fragmented tier).  Consecutive slots keep a sequence's pages together on the medium, so
 * readahead reads neighbours and a swapoff walks a file roughly in order.
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
 * (write-back: kvmm_mm_seq_swap_out_async, kvmm_swap_writeback): the pages stay mapped and
 * LOCKED while their writes run, memory tiers are copied with the pool lock let go, and the
 * PTEs switch to their slots only when the writes complete (see the section below).
 * Completions of asynchronous reads (readahead, swap_state.c) and writes that arrive during a
 * synchronous batch only go to their done lists and are installed later, so no page changes
 * under a caller's feet.  While a swap operation runs, sw->busy keeps nested
 * reclaim (a swap-in's frame allocation under min) from demoting, i.e. from starting I/O
 * inside I/O.  Locking: the pool lock (mm.h).
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

static const char *const fault_names[KVMM_FAULT_POINTS] = {
	[FP_WRITE] = "swap.write",
	[FP_READ] = "swap.read",
	[FP_ALLOC] = "swap.alloc",
};

#define SWAP_BATCH 64 /* pages per synchronous I/O batch */

/* ---- swap state and tiers -------------------------------------------------------------- */

static struct kvmm_swap *swap_get(struct kvmm_pool *pool)
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

static inline uint32_t cluster_size(const struct kvmm_swap_tier *t, uint32_t c)
{
	uint64_t start = (uint64_t)c * KVMM_SWAP_CLUSTER;

	return (uint32_t)min_t(uint64_t, KVMM_SWAP_CLUSTER, t->nslots - start);
}

static void tier_free(struct kvmm_swap_tier *t)
{
	kvmm_free(t->map);
	kvmm_free(t->cluster_free);
	kvmm_free(t->slots);
	kvmm_free(t);
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
	sw = swap_get(pool);
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
	t->nclusters = (uint32_t)DIV_ROUND_UP(t->nslots, (uint64_t)KVMM_SWAP_CLUSTER);
	t->map = kvmm_calloc(1, bitmap_size(t->nslots));
	t->cluster_free = kvmm_calloc(t->nclusters, sizeof(*t->cluster_free));
	t->slots = kvmm_calloc(t->nslots, sizeof(*t->slots));
	if (!t->map || !t->cluster_free || !t->slots) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (c = 0; c < t->nclusters; c++)
		t->cluster_free[c] = (uint16_t)cluster_size(t, c);
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
	return 0;

out_free:
	tier_free(t);
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
	info->direct = t->direct;
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
	sw = swap_get(pool);
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
		if (t->cluster_free[c]-- == cluster_size(t, c))
			t->nr_free_clusters--;
	}
	t->nr_used += n;
}

void kvmm_swap_slot_release(struct kvmm_swap_tier *t, uint64_t slot)
{
	uint32_t c = (uint32_t)(slot / KVMM_SWAP_CLUSTER);

	KVMM_BUG_ON(!bitmap_test_bit(t->map, slot));
	bitmap_clear_bit(t->map, slot);
	memset(&t->slots[slot], 0, sizeof(t->slots[slot]));
	if (++t->cluster_free[c] == cluster_size(t, c))
		t->nr_free_clusters++;
	t->nr_used--;
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
static uint32_t release_kept(struct kvmm_swap_tier *t, uint32_t n)
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
	end = (uint64_t)c * KVMM_SWAP_CLUSTER + cluster_size(t, c);
	s = find_next_zero_bit(t->map, end, (uint64_t)c * KVMM_SWAP_CLUSTER);
	if (s < end) {
		len = run_len(t, s, (uint32_t)min_t(uint64_t, want, end - s));
		if (len == want || !t->nr_free_clusters)
			goto take;
	}
	/* a wholly free cluster keeps the run together */
	for (i = 1; i <= t->nclusters && t->nr_free_clusters; i++) {
		uint32_t n = (c + i) % t->nclusters;

		if (t->cluster_free[n] == cluster_size(t, n)) {
			t->cur_cluster = n;
			s = (uint64_t)n * KVMM_SWAP_CLUSTER;
			len = min_t(uint32_t, want, cluster_size(t, n));
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
static uint32_t alloc_run(struct kvmm_swap *sw, const struct kvmm_swap_tier *skip, bool below,
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
	if (!got && t && release_kept(t, want))
		got = slot_alloc_run(t, want, first);
	if (!got) {
		*err = -ENOSPC;
		return 0;
	}
	*tp = t;
	return got;
}

/* ---- fault injection ---------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

int kvmm_swap_fault_hit(struct kvmm_swap *sw, int point)
{
	struct swap_fault *f = &sw->fault[point];
	const struct kvmm_fault_attr *a = &f->attr;
	bool hit = false;

	if (likely(!f->armed))
		return -1;
	f->calls++;
	if (a->times && f->failures >= a->times)
		return -1;
	if (a->nth && f->calls == a->nth) {
		hit = true;
	} else if (a->interval || a->probability) {
		if (!a->interval || f->calls % a->interval == 0) {
			f->rng = mix64(f->rng + UINT64_C(0x9e3779b97f4a7c15));
			/* probability 0 with an interval: every interval-th call */
			hit = !a->probability || f->rng % 100 < a->probability;
		}
	}
	if (!hit)
		return -1;
	f->failures++;
	return (int)a->mode;
}

static int fault_index(const char *point)
{
	int i;

	for (i = 0; i < KVMM_FAULT_POINTS; i++)
		if (point && !strcmp(point, fault_names[i]))
			return i;
	return -1;
}

int kvmm_swap_fault_set(struct kvmm_pool *pool, const char *point,
			const struct kvmm_fault_attr *attr)
{
	struct kvmm_swap *sw;
	struct swap_fault *f;
	int i;

	if (!pool)
		return -EINVAL;
	i = fault_index(point);
	if (i < 0)
		return -ENOENT;
	if (attr && ((unsigned int)attr->mode >= KVMM_FAULT_MODE_COUNT || attr->probability > 100))
		return -EINVAL;
	sw = swap_get(pool);
	if (!sw)
		return -ENOMEM;
	f = &sw->fault[i];
	memset(f, 0, sizeof(*f));
	if (attr) {
		f->attr = *attr;
		f->armed = attr->nth || attr->interval || attr->probability;
		f->rng = attr->seed ? attr->seed : UINT64_C(0x6b766d6d2d666c74);
	}
	return 0;
}

int kvmm_swap_fault_stats(struct kvmm_pool *pool, const char *point, uint64_t *calls,
			  uint64_t *failures)
{
	int i = fault_index(point);

	if (!pool || i < 0)
		return -ENOENT;
	if (calls)
		*calls = pool->swap ? pool->swap->fault[i].calls : 0;
	if (failures)
		*failures = pool->swap ? pool->swap->fault[i].failures : 0;
	return 0;
}

static int parse_u64(const char *v, uint64_t *out)
{
	char *end;

	if (!*v || *v == '-')
		return -EINVAL;
	errno = 0;
	*out = strtoull(v, &end, 0);
	return errno || *end ? -EINVAL : 0;
}

int kvmm_swap_fault_parse(struct kvmm_pool *pool, const char *spec)
{
	struct kvmm_fault_attr a = {0};
	char buf[256], *save = NULL, *tok, *point;
	bool off = false;

	if (!pool || !spec || strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	point = strtok_r(buf, " \t,", &save);
	if (!point)
		return -EINVAL;
	while ((tok = strtok_r(NULL, " \t,", &save))) {
		char *eq = strchr(tok, '=');
		uint64_t v;

		if (!strcmp(tok, "off")) {
			off = true;
			continue;
		}
		if (!eq)
			return -EINVAL;
		*eq++ = '\0';
		if (!strcmp(tok, "mode")) {
			if (!strcmp(eq, "eio"))
				a.mode = KVMM_FAULT_EIO;
			else if (!strcmp(eq, "short"))
				a.mode = KVMM_FAULT_SHORT;
			else if (!strcmp(eq, "enospc"))
				a.mode = KVMM_FAULT_ENOSPC;
			else
				return -EINVAL;
			continue;
		}
		if (parse_u64(eq, &v))
			return -EINVAL;
		if (!strcmp(tok, "nth"))
			a.nth = v;
		else if (!strcmp(tok, "seed"))
			a.seed = v;
		else if (v > UINT32_MAX)
			return -EINVAL;
		else if (!strcmp(tok, "interval"))
			a.interval = (uint32_t)v;
		else if (!strcmp(tok, "probability"))
			a.probability = (uint32_t)v;
		else if (!strcmp(tok, "times"))
			a.times = (uint32_t)v;
		else
			return -EINVAL;
	}
	return kvmm_swap_fault_set(pool, point, off ? NULL : &a);
}

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

void kvmm_swap_count_fail(struct kvmm_swap_tier *t)
{
	t->nr_fail++;
	t->pool->stat[KVMM_STAT_SWAP_FAIL]++;
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
		if (mode >= 0) {
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
		if (ios[i].res) {
			kvmm_swap_count_fail(t);
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
static void slot_fill(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint64_t s,
		      struct kvmm_page *pg, struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_swap_slot *sl = &t->slots[s];

	sl->seq = seq;
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
	slot_fill(sw, t, s, pg, seq, block);
	seq->pte[block] = swp_entry(t->id, s) | kvmm_pte_flags(seq->pte[block]);
	pg->refcount = 0;
	pg->flags &= ~(KVMM_PG_ACTIVE | KVMM_PG_REFERENCED);
	kvmm_free_page(pool, pg, seq->as->mag);
	t->nr_clean_out++;
	pool->stat[KVMM_STAT_SWAP_CLEAN]++;
}

/*
 * The next swap-out candidates of seq from block *b to end: a clean swap-cached page needs no
 * write and goes at once (clean_out(), counted in *clean); the others, up to SWAP_BATCH, are
 * put in blocks and counted in the return value.  *b moves past the last block looked at.
 */
static uint32_t out_candidates(struct kvmm_swap *sw, struct kvmm_seq *seq, uint32_t *b,
			       uint32_t end, uint32_t *blocks, uint32_t *clean)
{
	struct kvmm_pool *pool = seq->as->pool;
	uint32_t want = 0;

	for (; *b < end && want < SWAP_BATCH; (*b)++) {
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

int kvmm_mm_seq_swap_out(struct kvmm_seq *seq, uint32_t first, uint32_t n)
{
	struct kvmm_swap_io ios[SWAP_BATCH];
	uint32_t blocks[SWAP_BATCH];
	struct kvmm_pool *pool;
	struct kvmm_swap *sw;
	uint32_t b, end, done = 0;
	int err = 0;

	if (!seq)
		return -EINVAL;
	pool = seq->as->pool;
	sw = pool->swap;
	if (!sw || !sw->nr_tiers)
		return -ENOSPC;
	if (first >= seq->nblocks || !n)
		return 0;
	end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	kvmm_swap_reap(pool);
	sw->busy++;
	b = first;
	while (b < end) {
		struct kvmm_swap_tier *t;
		uint32_t want, got, i, k;
		uint64_t s;

		want = out_candidates(sw, seq, &b, end, blocks, &done);
		if (!want)
			break;
		for (i = 0; i < want; i += got) {
			got = alloc_run(sw, NULL, false, want - i, &t, &s, &err);
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
				slot_fill(sw, t, s + k, pg, seq, blk);
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
		kvmm_swap_count_fail(t);
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
	slot_fill(sw, t, s, pg, seq, wb->block);
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

	if (!seq)
		return -EINVAL;
	pool = seq->as->pool;
	sw = pool->swap;
	if (!sw || !sw->nr_tiers)
		return -ENOSPC;
	if (first >= seq->nblocks || !n)
		return 0;
	end = (uint32_t)min_t(uint64_t, (uint64_t)first + n, seq->nblocks);
	b = first;
	while (b < end && !err) {
		uint32_t blocks[SWAP_BATCH], got, k;
		uint32_t want = out_candidates(sw, seq, &b, end, blocks, &clean);
		uint64_t s;

		for (k = 0; k < want; k += got) {
			got = alloc_run(sw, NULL, false, want - k, &t, &s, &err);
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
	list_for_each_entry (wb, &b.recs, node)
		wb->io.res = kvmm_swap_io_to_host(wb->t, &wb->io, wb->dst, false);
	if (staged && b.n) {
		ret = pool->be.ops->sync ? pool->be.ops->sync(&pool->be) : 0;
		list_for_each_entry (wb, &b.recs, node)
			if (!wb->io.res)
				wb->io.res = ret;
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
	if (!alloc_run(sw, NULL, false, 1, &t, &s, &err))
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
	slot_fill(sw, t, s, pg, NULL, 0);
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
	if (sl->ent)
		kvmm_pagecache_ent_swapin(from->pool, sl->ent, NULL, swp);
	kvmm_swap_slot_release(from, s);
}

/*
 * Move up to @n used slots of @t, from its move cursor on, to other tiers (@below: only
 * lower-priority ones).  Returns the number moved, -ENOSPC when no tier has room, -ENOMEM.
 */
static int move_slots(struct kvmm_swap *sw, struct kvmm_swap_tier *t, uint32_t n, bool below)
{
	struct kvmm_swap_io rd[SWAP_BATCH], wr[SWAP_BATCH];
	uint64_t src[SWAP_BATCH];
	struct kvmm_swap_tier *dst;
	uint64_t s = t->move_cursor, scanned = 0, d;
	uint32_t moved = 0;
	uint8_t *bounce;
	int err = 0;

	bounce = aligned_alloc(4096, SWAP_BATCH * t->page_size);
	if (!bounce)
		return -ENOMEM;
	sw->busy++;
	while (moved < n && t->nr_used && scanned < t->nslots) {
		uint32_t want = 0, got, k;

		/* the next used slots that no read is using */
		while (want < SWAP_BATCH && want < n - moved && scanned < t->nslots) {
			if (s >= t->nslots)
				s = 0;
			if (!bitmap_test_bit(t->map, s) ||
			    (t->slots[s].flags & (SLOT_READING | SLOT_WRITING))) {
				/* free, or in use by a read or a write-back */
			} else if (t->slots[s].flags & SLOT_KEPT) {
				/* its page is resident: the slot is just freed, that is room too */
				kvmm_swap_kept_release(t, s);
			} else if (!t->slots[s].seq && kvmm_pagecache_ent_orphan(t->slots[s].ent)) {
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
		got = alloc_run(sw, t, below, want, &dst, &d, &err);
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

/* ---- swapoff ---------------------------------------------------------------------------------- */

static void tier_remove(struct kvmm_swap *sw, struct kvmm_swap_tier *t)
{
	/* resident pages that kept a slot here lose it (pool teardown: nothing else is left) */
	release_kept(t, UINT32_MAX);
	list_del(&t->node);
	sw->tier[t->id] = NULL;
	sw->nr_tiers--;
	t->ops->fini(t);
	tier_free(t);
}

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
	/* kept slots are not swapped pages: their resident pages simply lose them */
	release_kept(t, UINT32_MAX);
	/* first choice: keep the pages swapped, on the other tiers */
	while (t->nr_used) {
		ret = move_slots(sw, t, SWAP_BATCH, false);
		if (ret <= 0)
			break;
	}
	/* what does not fit elsewhere: sequences' pages come back, cached ones are dropped */
	for (s = 0; t->nr_used && s < t->nslots; s++) {
		struct kvmm_swap_slot *sl = &t->slots[s];

		if (!bitmap_test_bit(t->map, s))
			continue;
		if (sl->seq) {
			ret = kvmm_mm_seq_fault(sl->seq, sl->block, 1);
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
	release_kept(t, UINT32_MAX);
	KVMM_BUG_ON(t->nr_used);
	tier_remove(sw, t);
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
	KVMM_BUG_ON(sl->seq != seq || sl->block != block);
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

			if (sl->ns_id != ns->id || (sl->flags & SLOT_WRITING))
				continue;
			KVMM_BUG_ON(sl->seq); /* no address space of the namespace is left */
			if (sl->ent)
				kvmm_pagecache_remove_ent(pool, sl->ent);
			kvmm_swap_slot_release(t, s);
		}
	}
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
			if (sl->seq || !sl->ent || (sl->flags & SLOT_READING))
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

/* ---- invariants and teardown ------------------------------------------------------------------- */

__printf(3, 4) static int swap_fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return -EUCLEAN;
}

static int check_tier(struct kvmm_pool *pool, struct kvmm_swap_tier *t, uint32_t *reading,
		      uint32_t *writing, char *why, size_t len)
{
	uint64_t kept_n = 0, *kept = &kept_n;
	uint32_t c, free_clusters = 0;
	uint64_t s, used = 0;

	for (c = 0; c < t->nclusters; c++) {
		uint64_t base = (uint64_t)c * KVMM_SWAP_CLUSTER, i;
		uint32_t nfree = 0;

		for (i = base; i < base + cluster_size(t, c); i++)
			nfree += !bitmap_test_bit(t->map, i);
		if (nfree != t->cluster_free[c])
			return swap_fail(why, len, "swap tier %u cluster %u: %u free, counted %u",
					 t->id, c, nfree, t->cluster_free[c]);
		free_clusters += nfree == cluster_size(t, c);
	}
	if (free_clusters != t->nr_free_clusters)
		return swap_fail(why, len, "swap tier %u: %u free clusters, counted %u", t->id,
				 free_clusters, t->nr_free_clusters);
	for (s = 0; s < t->nslots; s++) {
		const struct kvmm_swap_slot *sl = &t->slots[s];
		uint64_t swp = swp_entry(t->id, s);

		if (!bitmap_test_bit(t->map, s)) {
			if (sl->seq || sl->ent || sl->flags)
				return swap_fail(why, len, "swap tier %u slot %llu: free but named",
						 t->id, (unsigned long long)s);
			continue;
		}
		used++;
		if (sl->flags & SLOT_KEPT) {
			const struct kvmm_page *pg =
				sl->block < pool->nframes ? &pool->pages[sl->block] : NULL;

			++*kept;
			if (sl->seq || sl->ent || sl->flags != SLOT_KEPT || !pg || pg->swap != swp)
				return swap_fail(why, len,
						 "swap tier %u slot %llu: kept, but frame %u does "
						 "not name it",
						 t->id, (unsigned long long)s, sl->block);
			continue;
		}
		if (sl->flags & SLOT_READING)
			++*reading;
		if (sl->flags & SLOT_WRITING) {
			++*writing;
			if (sl->seq || sl->ent || (sl->flags & SLOT_READING))
				return swap_fail(why, len,
						 "swap tier %u slot %llu: being written but named",
						 t->id, (unsigned long long)s);
			continue;
		}
		if (!sl->seq && !sl->ent && !(sl->flags & SLOT_READING))
			return swap_fail(why, len, "swap tier %u slot %llu: used by no one", t->id,
					 (unsigned long long)s);
		if (sl->seq) {
			uint64_t pte = sl->block < sl->seq->nblocks ? sl->seq->pte[sl->block] : 0;

			if (!kvmm_pte_is_swap(pte) || (pte & ~KVMM_PTE_FLAGS_MASK) != swp)
				return swap_fail(
					why, len,
					"swap tier %u slot %llu: seq %llu block %u does not "
					"name it",
					t->id, (unsigned long long)s,
					(unsigned long long)sl->seq->id, sl->block);
		}
		if (sl->ent && kvmm_pagecache_ent_swap(sl->ent) != swp)
			return swap_fail(why, len, "swap tier %u slot %llu: its entry names %#llx",
					 t->id, (unsigned long long)s,
					 (unsigned long long)kvmm_pagecache_ent_swap(sl->ent));
		if (sl->ns_id >= KVMM_MAX_NS || (sl->ns_id && !pool->ns[sl->ns_id]))
			return swap_fail(why, len, "swap tier %u slot %llu: namespace %u gone",
					 t->id, (unsigned long long)s, sl->ns_id);
	}
	if (used != t->nr_used)
		return swap_fail(why, len, "swap tier %u: %llu slots used, counted %llu", t->id,
				 (unsigned long long)used, (unsigned long long)t->nr_used);
	if (kept_n != t->nr_kept)
		return swap_fail(why, len, "swap tier %u: %llu slots kept, counted %llu", t->id,
				 (unsigned long long)kept_n, (unsigned long long)t->nr_kept);
	return 0;
}

int kvmm_swap_check(struct kvmm_pool *pool, char *why, size_t len)
{
	struct kvmm_swap *sw = pool->swap;
	struct kvmm_swap_tier *t;
	struct kvmm_aspace *as;
	struct swap_rd *rd;
	struct swap_wb *wb;
	uint32_t reading = 0, writing = 0, recs = 0, n = 0, f, wbpages = 0;
	size_t bkt;
	int ret;

	if (!sw)
		return 0;
	list_for_each_entry (t, &sw->tiers, node) {
		if (sw->tier[t->id] != t)
			return swap_fail(why, len, "swap tier %u not indexed", t->id);
		ret = check_tier(pool, t, &reading, &writing, why, len);
		if (ret)
			return ret;
		n++;
	}
	if (n != sw->nr_tiers)
		return swap_fail(why, len, "%u swap tiers listed, %u counted", n, sw->nr_tiers);
	/* every swap PTE names a used slot that names it back */
	list_for_each_entry (as, &pool->aspaces, node) {
		const struct kvmm_seq *seq;

		list_for_each_entry (seq, &as->seqs, node) {
			uint32_t b;

			for (b = 0; b < seq->nblocks; b++) {
				uint64_t s;

				if (!kvmm_pte_is_swap(seq->pte[b]))
					continue;
				t = kvmm_swap_decode(pool, seq->pte[b], &s);
				if (!t || !bitmap_test_bit(t->map, s) || t->slots[s].seq != seq ||
				    t->slots[s].block != b)
					return swap_fail(why, len,
							 "seq %llu block %u: swap pte %#llx names "
							 "no slot of it",
							 (unsigned long long)seq->id, b,
							 (unsigned long long)seq->pte[b]);
			}
		}
	}
	/* the swap cache: one record per slot being read, into a locked, unmapped frame */
	kvmm_htable_for_each (&sw->cache, bkt, rd, hnode) {
		uint64_t s;

		t = kvmm_swap_decode(pool, rd->swp, &s);
		if (!t || t != rd->t || !(t->slots[s].flags & SLOT_READING))
			return swap_fail(why, len, "swap cache: record %#llx names no reading slot",
					 (unsigned long long)rd->swp);
		if (rd->pg->state != KVMM_PAGE_MAPPED || rd->pg->refcount ||
		    !(rd->pg->flags & KVMM_PG_LOCKED))
			return swap_fail(why, len, "swap cache: frame %u of %#llx is not locked",
					 kvmm_page_to_frame(pool, rd->pg),
					 (unsigned long long)rd->swp);
		recs++;
	}
	if (recs != reading || recs != sw->nr_inflight)
		return swap_fail(why, len, "swap cache: %u records, %u slots reading, %u counted",
				 recs, reading, sw->nr_inflight);
	/* unlocked fault-in: records being copied are in the swap cache, unfinished */
	recs = 0;
	list_for_each_entry (rd, &sw->rd_copy, node) {
		if (!rd->unlocked || rd->finished || kvmm_swap_cache_find(sw, rd->swp) != rd)
			return swap_fail(why, len, "swap cache: unlocked copy %#llx not cached",
					 (unsigned long long)rd->swp);
		recs++;
	}
	if (recs != sw->nr_rd_copy)
		return swap_fail(why, len, "swap cache: %u unlocked copies, %u counted", recs,
				 sw->nr_rd_copy);
	/* write-back: one record per slot being written, from a locked, mapped page */
	recs = 0;
	list_for_each_entry (wb, &sw->wb_all, all) {
		uint64_t s = wb->io.slot;

		if (sw->tier[wb->t->id] != wb->t || s >= wb->t->nslots ||
		    !bitmap_test_bit(wb->t->map, s) || !(wb->t->slots[s].flags & SLOT_WRITING))
			return swap_fail(why, len,
					 "write-back: tier %u slot %llu is not being written",
					 wb->t->id, (unsigned long long)s);
		if (wb->pg->state != KVMM_PAGE_MAPPED ||
		    (wb->pg->flags & (KVMM_PG_LOCKED | KVMM_PG_WRITEBACK)) !=
			    (KVMM_PG_LOCKED | KVMM_PG_WRITEBACK))
			return swap_fail(why, len, "write-back: frame %u is not under writeback",
					 kvmm_page_to_frame(pool, wb->pg));
		recs++;
	}
	for (f = 0; f < pool->nframes; f++) {
		const struct kvmm_page *pg = &pool->pages[f];

		/* a clean swap-cached page: mapped by its one sequence, unchanged since fault-in */
		if (pg->swap) {
			uint64_t s;

			t = kvmm_swap_decode(pool, pg->swap, &s);
			if (!t || !bitmap_test_bit(t->map, s) || !(t->slots[s].flags & SLOT_KEPT) ||
			    t->slots[s].block != f)
				return swap_fail(why, len,
						 "frame %u: kept slot %#llx not kept for it", f,
						 (unsigned long long)pg->swap);
			if (pg->state != KVMM_PAGE_MAPPED || pg->refcount != 1 ||
			    (pg->flags & (KVMM_PG_LOCKED | KVMM_PG_KV_PENDING)))
				return swap_fail(why, len,
						 "frame %u: keeps slot %#llx but is %s, refcount "
						 "%u, flags %#x",
						 f, (unsigned long long)pg->swap,
						 kvmm_page_state_name(pg->state), pg->refcount,
						 pg->flags);
		}
		if (pg->flags & KVMM_PG_WRITEBACK)
			wbpages++;
		else if (pg->flags & KVMM_PG_WB_CANCEL)
			return swap_fail(why, len, "frame %u: write-back cancelled but none", f);
	}
	if (recs != writing || recs != wbpages || recs != sw->nr_wb || sw->nr_wb_copying > recs)
		return swap_fail(why, len,
				 "write-back: %u records, %u slots writing, %u pages, %u counted",
				 recs, writing, wbpages, sw->nr_wb);
	return 0;
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
		tier_remove(sw, t);
	kvmm_htable_destroy(&sw->cache);
	kvmm_free(sw);
	pool->swap = NULL;
}
