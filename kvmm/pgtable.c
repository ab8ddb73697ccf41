// SPDX-License-Identifier: MIT
/*
 * kvmm/pgtable.c - address spaces, sequences and their page tables.
 *
 * An address space (one per attached client, like an mm_struct) belongs to one namespace and
 * one format, and owns sequences (like VMAs): growing token ranges whose page table maps
 * logical block i (tokens [i * tpp, (i + 1) * tpp)) to a uapi PTE.  A sequence also keeps the
 * token ids it holds, because sealing a block keys the page cache by them.  Pages are
 * reference counted by the PTEs that map them: append allocates a page per new block and
 * copies on write when the block to write into is shared (after fork) or sealed (after a
 * truncate into it); fork shares every page; truncate and free drop references, tail first.
 * kvmm_page_get()/kvmm_page_put() also live here: they move a sealed page between MAPPED
 * (charged as used) and CACHED (charged as cached, on the LRU).
 *
 * Errors leave a sequence as it was: append reserves its arrays and allocates every page it
 * needs (COW copy included) before it changes any PTE, and gives the pages back on failure.
 * Locking: the caller holds the pool lock (mm.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "kmalloc.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"

/* the largest block of consecutive frames a bulk append asks for: 16 frames */
#define KVMM_APPEND_MAX_ORDER 4

/* ---- page references ------------------------------------------------------------------ */

static inline struct kvmm_ns *page_ns(struct kvmm_pool *pool, const struct kvmm_page *pg)
{
	return pg->ns_id ? pool->ns[pg->ns_id] : NULL;
}

void kvmm_page_get(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	if (pg->state == KVMM_PAGE_CACHED) {
		struct kvmm_ns *ns = page_ns(pool, pg);

		/* a cache hit on an unmapped page: off the LRU, its charge goes back to used */
		kvmm_lru_del(pool, pg);
		pool->nr_state[KVMM_PAGE_CACHED]--;
		pool->nr_state[KVMM_PAGE_MAPPED]++;
		pg->state = KVMM_PAGE_MAPPED;
		if (ns) {
			ns->cached--;
			ns->used++;
		}
	}
	KVMM_BUG_ON(pg->state != KVMM_PAGE_MAPPED);
	kvmm_page_wb_touch(pg);
	/*
	 * A second mapper: an unsealed shared page is never swapped, it keeps no swap slot; a
	 * sealed one never changes, and goes out of all its mappers into the slot it kept
	 * (kvmm_mm_seq_swap_out_shared).
	 */
	if (pg->refcount && !(pg->flags & KVMM_PG_SEALED))
		kvmm_swap_page_dirty(pool, pg);
	pg->refcount++;
}

void kvmm_page_put(struct kvmm_pool *pool, struct kvmm_page *pg, struct kvmm_magazine *mag)
{
	struct kvmm_ns *ns;

	KVMM_BUG_ON(pg->state != KVMM_PAGE_MAPPED || !pg->refcount);
	kvmm_page_wb_touch(pg);
	if (--pg->refcount)
		return;
	/* no mapper left: a kept swap slot goes (only a sequence's page keeps one) */
	kvmm_swap_page_dirty(pool, pg);
	/* a swap-out write still reads the frame: its completion finishes this put */
	if (pg->flags & KVMM_PG_WRITEBACK)
		return;
	/* an orphaned sealed page can never be hit again (pagecache.c): free it like a dirty one */
	if (!(pg->flags & KVMM_PG_SEALED) || kvmm_pagecache_drop_orphan(pool, pg)) {
		kvmm_free_page(pool, pg, mag);
		return;
	}
	/* sealed: stays findable in the page cache, now reclaimable */
	ns = page_ns(pool, pg);
	pool->nr_state[KVMM_PAGE_MAPPED]--;
	pool->nr_state[KVMM_PAGE_CACHED]++;
	pg->state = KVMM_PAGE_CACHED;
	if (ns) {
		ns->used--;
		ns->cached++;
	}
	kvmm_lru_add(pool, pg);
}

/* ---- address spaces ------------------------------------------------------------------- */

int kvmm_aspace_create(struct kvmm_pool *pool, struct kvmm_ns *ns, const struct kvmm_fmt *fmt,
		       struct kvmm_magazine *mag, struct kvmm_aspace **out)
{
	struct kvmm_aspace *as;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!pool || !ns || !fmt || ns->id == 0 || ns->id >= KVMM_MAX_NS ||
	    pool->ns[ns->id] != ns || !fmt->tokens_per_page || fmt->page_size != pool->page_size ||
	    (mag && mag->pool != pool))
		return -EINVAL;

	as = calloc(1, sizeof(*as));
	if (!as)
		return -ENOMEM;
	as->pool = pool;
	as->ns = ns;
	as->fmt = *fmt;
	as->fmt_id = kvmm_fmt_id(fmt);
	as->mag = mag;
	INIT_LIST_HEAD(&as->seqs);
	as->id = (uint32_t)++pool->next_id;
	list_add_tail(&as->node, &pool->aspaces);
	*out = as;
	return 0;
}

void kvmm_aspace_destroy(struct kvmm_aspace *as)
{
	struct kvmm_seq *seq, *tmp;

	if (!as)
		return;
	list_for_each_entry_safe (seq, tmp, &as->seqs, node)
		kvmm_mm_seq_free(seq);
	list_del(&as->node);
	free(as);
}

void kvmm_mm_release(struct kvmm_pool *pool)
{
	struct kvmm_aspace *as, *tmp;

	if (!pool)
		return;
	/* no read may land in a frame while its sequence goes away */
	kvmm_swap_poll(pool, true);
	/* a clean shutdown leaves the warm-restart indexes as they are: restorable */
	kvmm_swap_index_detach_all(pool);
	list_for_each_entry_safe (as, tmp, &pool->aspaces, node)
		kvmm_aspace_destroy(as);
	kvmm_pagecache_destroy(pool);
	kvmm_swap_destroy(pool);
	kvmm_ns_destroy_all(pool);
}

/* ---- sequences ------------------------------------------------------------------------ */

static inline uint32_t seq_tpp(const struct kvmm_seq *seq)
{
	return seq->as->fmt.tokens_per_page;
}

static inline struct kvmm_page *seq_page(const struct kvmm_seq *seq, uint32_t block)
{
	uint32_t frame = kvmm_pte_frame(seq->pte[block]);

	KVMM_BUG_ON(frame >= seq->as->pool->nframes);
	return &seq->as->pool->pages[frame];
}

uint64_t kvmm_mm_seq_mk_pte(struct kvmm_pool *pool, const struct kvmm_page *pg, bool sealed)
{
	uint64_t flags;

	if (sealed)
		flags = KVMM_PTE_SEALED;
	else if (pg->flags & KVMM_PG_SEALED)
		flags = 0; /* sealed by a sibling, not yet in this sequence: read-only */
	else
		flags = KVMM_PTE_DIRTY;
	/* WRITABLE only when no one else can see the page; else the client must ask first */
	if (pg->refcount > 1)
		flags |= KVMM_PTE_SHARED;
	else if (!(pg->flags & KVMM_PG_SEALED))
		flags |= KVMM_PTE_WRITABLE;
	return kvmm_pte_mk_present(kvmm_page_to_frame(pool, pg), flags);
}

uint32_t kvmm_mm_seq_frame(const struct kvmm_seq *seq, uint32_t block)
{
	if (!seq || block >= seq->nblocks)
		return KVMM_FRAME_NONE;
	return kvmm_pte_frame(seq->pte[block]);
}

/*
 * Grow pte[] and tokens[] to hold @nblocks blocks (doubling, so appends are amortised O(1)).
 * Growing changes nothing a reader can see, so a failure half way (pte[] grown, tokens[]
 * not) leaves a valid sequence; cap only moves once both arrays are large enough.
 */
int kvmm_mm_seq_reserve(struct kvmm_seq *seq, uint32_t nblocks)
{
	uint32_t tpp = seq_tpp(seq);
	uint64_t *pte;
	uint32_t *tokens;
	uint32_t cap, i;
	size_t bytes;

	if (nblocks <= seq->cap)
		return 0;
	cap = seq->cap ? seq->cap : 4;
	while (cap < nblocks)
		cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;

	pte = kvmm_realloc(seq->pte, array_size(cap, sizeof(*pte)));
	if (!pte)
		return -ENOMEM;
	seq->pte = pte;
	for (i = seq->cap; i < cap; i++)
		pte[i] = kvmm_pte_none();

	bytes = array_size(array_size(cap, tpp), sizeof(*tokens));
	if (bytes == SIZE_MAX)
		return -EINVAL;
	tokens = kvmm_realloc(seq->tokens, bytes);
	if (!tokens)
		return -ENOMEM;
	seq->tokens = tokens;
	seq->cap = cap;
	return 0;
}

static struct kvmm_seq *seq_alloc(struct kvmm_aspace *as)
{
	struct kvmm_seq *seq = kvmm_calloc(1, sizeof(*seq));

	if (!seq)
		return NULL;
	seq->as = as;
	seq->id = ++as->pool->next_id;
	return seq;
}

static void seq_link(struct kvmm_seq *seq)
{
	list_add_tail(&seq->node, &seq->as->seqs);
	seq->as->nr_seqs++;
}

int kvmm_mm_seq_create(struct kvmm_aspace *as, struct kvmm_seq **out)
{
	struct kvmm_seq *seq;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!as)
		return -EINVAL;
	seq = seq_alloc(as);
	if (!seq)
		return -ENOMEM;
	seq_link(seq);
	*out = seq;
	return 0;
}

/*
 * Drop the references of blocks [from, nblocks), last block first: pages that become CACHED
 * join the LRU head in that order, so a prefix's first blocks (which every longer prompt
 * needs, and without which its later blocks are unreachable) are the last to be reclaimed.
 */
static void seq_drop_blocks(struct kvmm_seq *seq, uint32_t from)
{
	struct kvmm_pool *pool = seq->as->pool;
	uint32_t b;

	for (b = seq->nblocks; b-- > from;) {
		if (kvmm_pte_is_present(seq->pte[b]))
			kvmm_page_put(pool, seq_page(seq, b), seq->as->mag);
		else if (kvmm_pte_is_swap(seq->pte[b]))
			kvmm_swap_pte_drop(pool, seq, b);
		seq->pte[b] = kvmm_pte_none();
	}
}

void kvmm_mm_seq_free(struct kvmm_seq *seq)
{
	if (!seq)
		return;
	seq_drop_blocks(seq, 0);
	list_del(&seq->node);
	seq->as->nr_seqs--;
	kvmm_free(seq->pte);
	kvmm_free(seq->tokens);
	kvmm_free(seq);
}

/* Give back pages taken by a failed append (refcount 0, never mapped). */
static void free_unused(struct kvmm_pool *pool, struct list_head *pages, struct kvmm_magazine *mag)
{
	struct kvmm_page *pg, *tmp;

	list_for_each_entry_safe (pg, tmp, pages, lru) {
		list_del_init(&pg->lru);
		kvmm_free_page(pool, pg, mag);
	}
}

/*
 * Caller-supplied pages for the new blocks (kvmm_mm_seq_append_pages): each must be what
 * kvmm_alloc_page() returns for this sequence's namespace and nobody maps yet, and none may
 * be given twice (refcount is borrowed as the "seen" mark, and put back).
 */
static int check_given_pages(struct kvmm_seq *seq, struct kvmm_page *const *pages, uint32_t nr)
{
	struct kvmm_pool *pool = seq->as->pool;
	uint32_t i;
	int ret = 0;

	for (i = 0; i < nr; i++) {
		struct kvmm_page *pg = pages[i];

		if (!pg || pg < pool->pages || pg >= pool->pages + pool->nframes ||
		    pg->state != KVMM_PAGE_MAPPED || pg->refcount || pg->pincount || pg->cache ||
		    (pg->flags & (KVMM_PG_SEALED | KVMM_PG_LRU | KVMM_PG_LOCKED)) ||
		    pg->ns_id != seq->as->ns->id) {
			ret = -EINVAL;
			break;
		}
		pg->refcount = 1;
	}
	while (i--)
		pages[i]->refcount = 0;
	return ret;
}

/*
 * An append of more new blocks than this could only fail, after reclaim, swap-out and OOM
 * preemption had taken everything else down with it.
 */
uint64_t kvmm_mm_seq_blocks_max(const struct kvmm_aspace *as)
{
	struct kvmm_pool *pool = as->pool;
	uint64_t cap = as->ns && as->ns->limit ? min_t(uint32_t, as->ns->limit, pool->nframes)
					       : pool->nframes;
	unsigned int ids[KVMM_SWAP_TIER_MAX + 1], nr = kvmm_swap_tiers(pool, ids, ARRAY_SIZE(ids));

	for (unsigned int i = 0; i < nr; i++) {
		struct kvmm_swap_tier_info ti;

		if (!kvmm_swap_tier_info(pool, ids[i], &ti))
			cap += ti.nslots;
	}
	return cap;
}

static int seq_append(struct kvmm_seq *seq, uint32_t n, const uint32_t *token_ids,
		      struct kvmm_page *const *given, uint32_t nr_given)
{
	struct kvmm_aspace *as;
	struct kvmm_pool *pool;
	struct kvmm_page *old = NULL, *cow = NULL, *pg;
	uint64_t new_ntokens, new_nblocks64;
	uint32_t tpp, in_block, new_nblocks, b, first;
	LIST_HEAD(fresh);
	int ret;

	if (!seq)
		return -EINVAL;
	if (!n)
		return given && nr_given ? -EINVAL : 0;
	as = seq->as;
	pool = as->pool;
	tpp = seq_tpp(seq);
	new_ntokens = seq->ntokens + n;
	new_nblocks64 = DIV_ROUND_UP(new_ntokens, (uint64_t)tpp);
	if (new_nblocks64 > UINT32_MAX)
		return -EINVAL;
	new_nblocks = (uint32_t)new_nblocks64;
	/* more new blocks than could ever exist at once: nothing reclaimed, swapped or preempted */
	if (new_nblocks - seq->nblocks > kvmm_mm_seq_blocks_max(as))
		return -E2BIG;
	if (given) {
		/* exactly one page per block past the end, before anything changes */
		if (nr_given != new_nblocks - seq->nblocks)
			return -EINVAL;
		ret = check_given_pages(seq, given, nr_given);
		if (ret)
			return ret;
	}

	ret = kvmm_mm_seq_reserve(seq, new_nblocks);
	if (ret)
		return ret;

	/* the last block is partial: write into it only when no one else can see it */
	in_block = (uint32_t)(seq->ntokens % tpp);
	if (in_block && kvmm_pte_is_swap(seq->pte[seq->nblocks - 1])) {
		ret = kvmm_mm_seq_fault(seq, seq->nblocks - 1, 1);
		if (ret < 0)
			return ret;
	}
	if (in_block) {
		old = seq_page(seq, seq->nblocks - 1);
		/* written in place below: a swap-out in flight must not free it, nor its old slot */
		kvmm_page_wb_touch(old);
		kvmm_swap_page_dirty(pool, old);
		/*
		 * Pinned until the new frames are in: allocating them may reclaim, which must not
		 * swap out the page that is written (or copied) below.
		 */
		old->pincount++;
		if (old->refcount > 1 || (old->flags & KVMM_PG_SEALED)) {
			cow = kvmm_alloc_page(pool, as->ns, as->mag);
			if (!cow) {
				ret = -errno;
				goto out_free;
			}
			/* whole page: its layout interleaves layers, a prefix would miss data */
			ret = pool->be.ops->copy(&pool->be, kvmm_page_to_frame(pool, cow),
						 kvmm_page_to_frame(pool, old), pool->page_size);
			if (ret)
				goto out_free;
		}
	}
	/* a bulk append in a full pool: room for its blocks first, not frame by frame */
	if (!given && new_nblocks - seq->nblocks > 1)
		kvmm_alloc_block_prepare(pool, as->ns, new_nblocks - seq->nblocks);
	for (b = seq->nblocks; !given && b < new_nblocks;) {
		uint32_t order = 0, k, room = kvmm_alloc_block_room(pool, as->ns);

		/*
		 * A bulk append (a prompt) takes the largest blocks of consecutive frames the buddy
		 * has (up to 2^KVMM_APPEND_MAX_ORDER, no larger than what is left to allocate), so
		 * that its KV lies in runs of memory: attention reads scattered 64 KiB frames
		 * markedly slower than runs of them (Documentation/mm/page_alloc.md).
		 */
		while (order < KVMM_APPEND_MAX_ORDER && (2u << order) <= new_nblocks - b &&
		       (2u << order) <= room)
			order++;
		for (pg = NULL; order && !pg; order--) {
			pg = kvmm_alloc_block(pool, as->ns, order);
			if (pg)
				break;
		}
		if (!pg) {
			pg = kvmm_alloc_page(pool, as->ns, as->mag);
			if (!pg) {
				ret = -errno;
				goto out_free;
			}
		}
		/* an allocated page is on no list: its lru node can chain the batch */
		for (k = 0; k < (1u << order); k++)
			list_add_tail(&pg[k].lru, &fresh);
		b += 1u << order;
	}

	/* nothing can fail from here on */
	if (old)
		old->pincount--;
	if (cow) {
		kvmm_page_get(pool, cow);
		cow->ntokens = in_block;
		seq->pte[seq->nblocks - 1] = kvmm_mm_seq_mk_pte(pool, cow, false);
		kvmm_page_put(pool, old, as->mag);
		pool->stat[KVMM_STAT_COW]++;
	}
	for (b = seq->nblocks; b < new_nblocks; b++) {
		if (given) {
			pg = given[b - seq->nblocks];
		} else {
			pg = list_first_entry(&fresh, struct kvmm_page, lru);
			list_del_init(&pg->lru);
		}
		kvmm_page_get(pool, pg);
		seq->pte[b] = kvmm_mm_seq_mk_pte(pool, pg, false);
	}
	if (token_ids)
		memcpy(seq->tokens + seq->ntokens, token_ids, (size_t)n * sizeof(*token_ids));
	else
		memset(seq->tokens + seq->ntokens, 0, (size_t)n * sizeof(*token_ids));

	/*
	 * every page written is now exclusive to this sequence: record how full it is, and
	 * that the engine has yet to write the new tokens' KV (kvmm_page_unpin)
	 */
	first = (uint32_t)(seq->ntokens / tpp);
	for (b = first; b < new_nblocks; b++) {
		uint64_t end = min_t(uint64_t, new_ntokens, (uint64_t)(b + 1) * tpp);

		seq_page(seq, b)->ntokens = (uint32_t)(end - (uint64_t)b * tpp);
		seq_page(seq, b)->flags |= KVMM_PG_KV_PENDING;
	}
	seq->ntokens = new_ntokens;
	seq->nblocks = new_nblocks;
	return 0;

out_free:
	free_unused(pool, &fresh, as->mag);
	if (cow)
		kvmm_free_page(pool, cow, as->mag);
	if (old)
		old->pincount--;
	return ret;
}

int kvmm_mm_seq_append(struct kvmm_seq *seq, uint32_t n, const uint32_t *token_ids)
{
	return seq_append(seq, n, token_ids, NULL, 0);
}

int kvmm_mm_seq_append_pages(struct kvmm_seq *seq, uint32_t n, const uint32_t *token_ids,
			     struct kvmm_page *const *pages, uint32_t nr_pages)
{
	if (!pages && nr_pages)
		return -EINVAL;
	/* a NULL array with no page is an append that maps no new block */
	return seq_append(seq, n, token_ids, pages ? pages : (struct kvmm_page *const[]){NULL},
			  nr_pages);
}

int kvmm_mm_seq_unmap_tail(struct kvmm_seq *seq, uint32_t nr, struct kvmm_page **pages)
{
	uint32_t b, from;

	if (!seq || nr > seq->nblocks || (nr && !pages))
		return -EINVAL;
	if (!nr)
		return 0;
	from = seq->nblocks - nr;
	/* all or nothing: every block must be a private, resident, unsealed page */
	for (b = from; b < seq->nblocks; b++) {
		struct kvmm_page *pg;

		if (!kvmm_pte_is_present(seq->pte[b]))
			return -EINVAL;
		pg = seq_page(seq, b);
		if (pg->refcount != 1 || pg->pincount ||
		    (pg->flags & (KVMM_PG_SEALED | KVMM_PG_LOCKED)))
			return -EINVAL;
	}
	for (b = from; b < seq->nblocks; b++) {
		struct kvmm_page *pg = seq_page(seq, b);

		/* kvmm_page_put() without the free: still MAPPED and charged, now the caller's */
		kvmm_swap_page_dirty(seq->as->pool, pg);
		pg->refcount = 0;
		pages[b - from] = pg;
		seq->pte[b] = kvmm_pte_none();
	}
	seq->nblocks = from;
	seq->ntokens = (uint64_t)from * seq_tpp(seq);
	seq->nsealed = min_t(uint32_t, seq->nsealed, from);
	return 0;
}

int kvmm_mm_seq_truncate(struct kvmm_seq *seq, uint64_t ntokens)
{
	struct kvmm_pool *pool;
	uint32_t tpp, new_nblocks, in_block;
	int ret;

	if (!seq || ntokens > seq->ntokens)
		return -EINVAL;
	if (ntokens == seq->ntokens)
		return 0;
	pool = seq->as->pool;
	tpp = seq_tpp(seq);
	new_nblocks = (uint32_t)DIV_ROUND_UP(ntokens, (uint64_t)tpp);
	/* the new partial last page is rewritten below: it must be resident */
	if ((ntokens % tpp) && kvmm_pte_is_swap(seq->pte[new_nblocks - 1])) {
		ret = kvmm_mm_seq_fault(seq, new_nblocks - 1, 1);
		if (ret < 0)
			return ret;
	}

	seq_drop_blocks(seq, new_nblocks);
	seq->nblocks = new_nblocks;
	seq->ntokens = ntokens;
	/* a sealed block cut short is no longer sealed here: the next append copies it */
	seq->nsealed = (uint32_t)min_t(uint64_t, seq->nsealed, ntokens / tpp);

	in_block = (uint32_t)(ntokens % tpp);
	if (in_block) {
		struct kvmm_page *pg = seq_page(seq, new_nblocks - 1);

		kvmm_page_wb_touch(pg);
		/* its tokens past the cut are gone: the slot it came from no longer matches */
		kvmm_swap_page_dirty(pool, pg);
		if (pg->refcount == 1 && !(pg->flags & KVMM_PG_SEALED))
			pg->ntokens = in_block;
		seq->pte[new_nblocks - 1] = kvmm_mm_seq_mk_pte(pool, pg, false);
	}
	return 0;
}

int kvmm_mm_seq_fork(struct kvmm_seq *src, struct kvmm_seq **out)
{
	struct kvmm_pool *pool;
	struct kvmm_seq *seq;
	uint32_t b;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!src)
		return -EINVAL;
	pool = src->as->pool;
	/* a shared page is never swapped (swap.h): bring the source's pages back first */
	if (kvmm_mm_seq_nr_swapped(src)) {
		ret = kvmm_mm_seq_fault(src, 0, src->nblocks);
		if (ret < 0)
			return ret;
	}
	seq = seq_alloc(src->as);
	if (!seq)
		return -ENOMEM;
	ret = kvmm_mm_seq_reserve(seq, src->nblocks);
	if (ret)
		goto out_free;

	if (src->ntokens)
		memcpy(seq->tokens, src->tokens, (size_t)src->ntokens * sizeof(*src->tokens));
	seq->ntokens = src->ntokens;
	seq->nblocks = src->nblocks;
	seq->nsealed = src->nsealed;
	seq->priority = src->priority;
	seq->key_id = src->key_id; /* the child shares the parent's pages: and their salt */
	for (b = 0; b < src->nblocks; b++) {
		struct kvmm_page *pg = seq_page(src, b);
		bool sealed = b < src->nsealed;

		kvmm_page_get(pool, pg);
		/* both sides now see a shared page: neither may write it in place */
		src->pte[b] = kvmm_mm_seq_mk_pte(pool, pg, sealed);
		seq->pte[b] = src->pte[b];
	}
	seq_link(seq);
	*out = seq;
	return 0;

out_free:
	kvmm_free(seq->pte);
	kvmm_free(seq->tokens);
	kvmm_free(seq);
	return ret;
}

/*
 * Seal the full blocks in order: a block's key chains its parent's, so block i can only be
 * sealed once block i - 1 is.  On -ENOMEM the blocks sealed so far stay sealed (nsealed
 * says how far it got) and a later call carries on.
 */
int kvmm_mm_seq_seal_fault(struct kvmm_seq *seq, uint32_t end)
{
	uint32_t first;

	if (seq->nsealed >= end || !kvmm_mm_seq_nr_swapped(seq))
		return 0;
	/* sealing block b reads block b - 1's cache entry, through its page */
	first = seq->nsealed ? seq->nsealed - 1 : 0;
	return kvmm_mm_seq_fault(seq, first, end - first);
}

int kvmm_mm_seq_seal(struct kvmm_seq *seq)
{
	uint32_t full, sealed = 0;
	int ret;

	if (!seq)
		return -EINVAL;
	full = (uint32_t)(seq->ntokens / seq_tpp(seq));
	ret = kvmm_mm_seq_seal_fault(seq, full);
	if (ret < 0)
		return ret;
	while (seq->nsealed < full) {
		ret = kvmm_pagecache_seal_block(seq, seq->nsealed);
		if (ret)
			return ret;
		seq->nsealed++;
		sealed++;
	}
	return (int)sealed;
}
