// SPDX-License-Identifier: MIT
/*
 * kvmm/pagecache.c - the prefix page cache: sealed pages indexed by content key.
 *
 * When a sequence seals a full block, its page becomes immutable and is indexed under a
 * content key: XXH3-64 (Debian's libxxhash) seeded with the namespace's hash seed, over
 * (parent block's key, format id, the namespace's 128-bit secret, the block's token ids).
 * Chaining the parent key makes the key stand for the whole prefix up to the block; the
 * secret, both as seed and as input, makes keys differ per namespace, so nothing is shared
 * or probeable across tenants.  XXH3 is fast but not a PRF: the keys are an index, never a
 * proof.  Every entry (struct kvmm_cache_ent) therefore stores what the key was made from -
 * token ids, parent key, format id, namespace - plus a unique id and the id of its parent's
 * entry, and a candidate counts as a hit only when all of them match what the lookup is
 * walking.  Comparing the parent entry's id rather than only its key matters: with two
 * colliding parents cached, a child of the wrong one would otherwise pass (same tokens,
 * same parent key) and hand out KV computed over another prompt.  So a hash collision can
 * cost a miss (KVMM_STAT_CACHE_COLLIDE) but never a wrong hit.
 *
 * The table is a chained hash of hlist buckets (include/hashtable.h), a power of two in
 * size, doubled as entries grow up to one bucket per frame (there is at most one entry per
 * frame), so a lookup walks one short chain; colliding entries coexist on it.  Sealing a
 * block that is already cached - same verified content, same parent entry - deduplicates:
 * the sequence maps the cached page and its own copy is dropped, so a prefix has one
 * canonical chain of entries.  When a parent entry is evicted before its children, those
 * become unreachable (no lookup can verify their parent) and age out of the LRU; freeing a
 * sequence tail first (pgtable.c) makes that the rare order.  Locking: the pool lock.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no malloc when hashing */
#include <xxhash.h>

#include "compiler.h"
#include "hashtable.h"
#include "kvmm/mm.h"

struct kvmm_cache_ent {
	struct hlist_node hnode; /* in a bucket of kvmm_pagecache.ht */
	uint64_t key;
	uint64_t id;	     /* unique in this cache, never reused; 0 is "no entry" */
	uint64_t parent_key; /* 0 for a first block */
	uint64_t parent_id;  /* id of the parent block's entry when sealed; 0 for a first block */
	uint64_t fmt_id;
	uint32_t frame;
	uint32_t ntokens;
	uint16_t ns_id;
	uint32_t tokens[]; /* ntokens token ids */
};

struct kvmm_pagecache {
	struct kvmm_htable ht;
	uint32_t nr;	       /* entries */
	unsigned int max_bits; /* no point growing past one bucket per frame */
	uint64_t next_id;
	kvmm_cache_hash_fn hash_fn; /* NULL: kvmm_cache_key (test hook) */
};

#define PC_MIN_BITS 6
/* Blocks up to this many tokens are hashed in one call from a stack buffer. */
#define KEY_INLINE_TOKENS 120

uint64_t kvmm_cache_key(const struct kvmm_ns *ns, uint64_t parent_key, uint64_t fmt_id,
			const uint32_t *tokens, uint32_t n)
{
	struct {
		uint64_t hdr[4];
		uint32_t tok[KEY_INLINE_TOKENS];
	} buf;
	size_t tbytes = (size_t)n * sizeof(*tokens);

	buf.hdr[0] = parent_key;
	buf.hdr[1] = fmt_id;
	buf.hdr[2] = ns->secret[0];
	buf.hdr[3] = ns->secret[1];
	if (likely(n <= KEY_INLINE_TOKENS)) {
		memcpy(buf.tok, tokens, tbytes);
		return XXH3_64bits_withSeed(&buf, sizeof(buf.hdr) + tbytes, ns->hash_seed);
	} else {
		/* streaming gives the same value as one call over header and tokens */
		XXH3_state_t st;

		XXH3_INITSTATE(&st);
		XXH3_64bits_reset_withSeed(&st, ns->hash_seed);
		XXH3_64bits_update(&st, buf.hdr, sizeof(buf.hdr));
		XXH3_64bits_update(&st, tokens, tbytes);
		return XXH3_64bits_digest(&st);
	}
}

static inline uint64_t pc_hash(const struct kvmm_pagecache *pc, const struct kvmm_ns *ns,
			       uint64_t parent_key, uint64_t fmt_id, const uint32_t *tokens,
			       uint32_t n)
{
	if (likely(!pc->hash_fn))
		return kvmm_cache_key(ns, parent_key, fmt_id, tokens, n);
	return pc->hash_fn(ns, parent_key, fmt_id, tokens, n);
}

static struct kvmm_pagecache *pc_get(struct kvmm_pool *pool)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	uint64_t frames;

	if (likely(pc))
		return pc;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return NULL;
	if (kvmm_htable_init(&pc->ht, PC_MIN_BITS)) {
		free(pc);
		return NULL;
	}
	frames = roundup_pow_of_two(pool->nframes);
	pc->max_bits = clamp_t(unsigned int, (unsigned int)ilog2(frames), PC_MIN_BITS,
			       KVMM_HTABLE_MAX_BITS);
	pc->next_id = 1;
	pool->pagecache = pc;
	return pc;
}

/* Double the buckets; on -ENOMEM keep the old table (longer chains, still correct). */
static void pc_grow(struct kvmm_pagecache *pc)
{
	struct kvmm_htable nt;
	size_t i, size = kvmm_htable_size(&pc->ht);

	if (kvmm_htable_init(&nt, pc->ht.bits + 1))
		return;
	for (i = 0; i < size; i++) {
		struct hlist_head *head = &pc->ht.buckets[i];

		while (!hlist_empty(head)) {
			struct kvmm_cache_ent *ent =
				hlist_entry(head->first, struct kvmm_cache_ent, hnode);

			hlist_del(&ent->hnode);
			kvmm_htable_add(&nt, &ent->hnode, ent->key);
		}
	}
	kvmm_htable_destroy(&pc->ht);
	pc->ht = nt;
}

/*
 * The entry for (key, namespace, format, parent entry, tokens), or NULL.  Entries with the
 * key but other content are hash collisions: counted, never returned.
 */
static struct kvmm_cache_ent *pc_find(struct kvmm_pool *pool, const struct kvmm_pagecache *pc,
				      uint64_t key, uint16_t ns_id, uint64_t fmt_id,
				      const struct kvmm_cache_ent *parent, const uint32_t *tokens,
				      uint32_t n)
{
	uint64_t parent_id = parent ? parent->id : 0;
	uint64_t parent_key = parent ? parent->key : 0;
	struct kvmm_cache_ent *ent;

	kvmm_htable_for_each_possible (&pc->ht, ent, hnode, key) {
		if (ent->key != key)
			continue;
		if (likely(ent->ns_id == ns_id && ent->fmt_id == fmt_id &&
			   ent->parent_id == parent_id && ent->parent_key == parent_key &&
			   ent->ntokens == n &&
			   !memcmp(ent->tokens, tokens, (size_t)n * sizeof(*tokens))))
			return ent;
		pool->stat[KVMM_STAT_CACHE_COLLIDE]++;
	}
	return NULL;
}

static inline struct kvmm_page *block_page(struct kvmm_pool *pool, const struct kvmm_seq *seq,
					   uint32_t block)
{
	uint32_t frame = kvmm_pte_frame(seq->pte[block]);

	KVMM_BUG_ON(frame >= pool->nframes);
	return &pool->pages[frame];
}

int kvmm_pagecache_seal_block(struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_aspace *as = seq->as;
	struct kvmm_pool *pool = as->pool;
	uint32_t tpp = as->fmt.tokens_per_page;
	struct kvmm_cache_ent *parent = NULL, *ent;
	struct kvmm_pagecache *pc;
	struct kvmm_page *pg, *cached;
	const uint32_t *tokens;
	uint64_t key;

	KVMM_BUG_ON(block != seq->nsealed || (uint64_t)(block + 1) * tpp > seq->ntokens);
	pg = block_page(pool, seq, block);
	if (block) {
		parent = block_page(pool, seq, block - 1)->cache;
		KVMM_BUG_ON(!parent);
	}
	if (pg->flags & KVMM_PG_SEALED) {
		/* shared with a sibling (fork) that sealed it first: same tokens, same prefix */
		seq->pte[block] = kvmm_seq_mk_pte(pool, pg, true);
		return 0;
	}
	pc = pc_get(pool);
	if (!pc)
		return -ENOMEM;

	tokens = seq->tokens + (size_t)block * tpp;
	key = pc_hash(pc, as->ns, parent ? parent->key : 0, as->fmt_id, tokens, tpp);
	ent = pc_find(pool, pc, key, as->ns->id, as->fmt_id, parent, tokens, tpp);
	if (ent) {
		/* the same block of the same prefix is cached: share it, drop our copy */
		cached = &pool->pages[ent->frame];
		kvmm_page_get(pool, cached);
		kvmm_mark_page_accessed(pool, cached);
		seq->pte[block] = kvmm_seq_mk_pte(pool, cached, true);
		kvmm_page_put(pool, pg, as->mag);
		return 0;
	}

	ent = malloc(sizeof(*ent) + (size_t)tpp * sizeof(*tokens));
	if (!ent)
		return -ENOMEM;
	ent->key = key;
	ent->id = pc->next_id++;
	ent->parent_key = parent ? parent->key : 0;
	ent->parent_id = parent ? parent->id : 0;
	ent->fmt_id = as->fmt_id;
	ent->frame = kvmm_page_to_frame(pool, pg);
	ent->ntokens = tpp;
	ent->ns_id = as->ns->id;
	memcpy(ent->tokens, tokens, (size_t)tpp * sizeof(*tokens));
	kvmm_htable_add(&pc->ht, &ent->hnode, key);
	if (++pc->nr > kvmm_htable_size(&pc->ht) && pc->ht.bits < pc->max_bits)
		pc_grow(pc);

	pg->cache = ent;
	pg->flags = (pg->flags & ~KVMM_PG_DIRTY) | KVMM_PG_SEALED;
	pg->ntokens = tpp;
	seq->pte[block] = kvmm_seq_mk_pte(pool, pg, true);
	pool->stat[KVMM_STAT_SEAL]++;
	return 0;
}

int kvmm_prefix_lookup(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n)
{
	const struct kvmm_cache_ent *parent = NULL;
	struct kvmm_pagecache *pc;
	struct kvmm_aspace *as;
	struct kvmm_pool *pool;
	uint64_t nfull;
	uint32_t tpp, b, hits = 0;
	int ret = 0;

	if (!seq || (n && !tokens) || seq->ntokens || seq->nblocks)
		return -EINVAL;
	as = seq->as;
	pool = as->pool;
	pc = pool->pagecache;
	tpp = as->fmt.tokens_per_page;
	/* the result is a token count in an int */
	nfull = min_t(uint64_t, n / tpp, (uint64_t)INT_MAX / tpp);
	if (!nfull)
		return 0;
	if (!pc || !pc->nr) {
		pool->stat[KVMM_STAT_CACHE_MISS]++;
		return 0;
	}

	for (b = 0; b < nfull; b++) {
		const uint32_t *t = tokens + (size_t)b * tpp;
		struct kvmm_cache_ent *ent;
		struct kvmm_page *pg;
		uint64_t key;

		key = pc_hash(pc, as->ns, parent ? parent->key : 0, as->fmt_id, t, tpp);
		ent = pc_find(pool, pc, key, as->ns->id, as->fmt_id, parent, t, tpp);
		if (!ent) {
			pool->stat[KVMM_STAT_CACHE_MISS]++;
			break;
		}
		if (unlikely(b >= seq->cap) && kvmm_seq_reserve(seq, b + 1)) {
			/* keep what is mapped; report the failure only if nothing is */
			if (!hits)
				ret = -ENOMEM;
			break;
		}
		pg = &pool->pages[ent->frame];
		kvmm_page_get(pool, pg);
		kvmm_mark_page_accessed(pool, pg);
		seq->pte[b] = kvmm_seq_mk_pte(pool, pg, true);
		memcpy(seq->tokens + (size_t)b * tpp, t, (size_t)tpp * sizeof(*t));
		parent = ent;
		hits++;
	}
	pool->stat[KVMM_STAT_CACHE_HIT] += hits;
	seq->nblocks = hits;
	seq->nsealed = hits;
	seq->ntokens = (uint64_t)hits * tpp;
	return ret ? ret : (int)(hits * tpp);
}

void kvmm_pagecache_remove(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	struct kvmm_cache_ent *ent = pg->cache;

	KVMM_BUG_ON(!pc || !ent || !(pg->flags & KVMM_PG_SEALED) || !pc->nr);
	hlist_del(&ent->hnode);
	pc->nr--;
	free(ent);
	pg->cache = NULL;
	pg->flags &= ~KVMM_PG_SEALED;
}

int kvmm_pagecache_set_hash_fn(struct kvmm_pool *pool, kvmm_cache_hash_fn fn)
{
	struct kvmm_pagecache *pc;

	if (!pool)
		return -EINVAL;
	pc = pc_get(pool);
	if (!pc)
		return -ENOMEM;
	if (pc->nr)
		return -EBUSY;
	pc->hash_fn = fn;
	return 0;
}

uint32_t kvmm_pagecache_count(const struct kvmm_pool *pool)
{
	return pool->pagecache ? pool->pagecache->nr : 0;
}

static int pc_fail(char *why, size_t len, const struct kvmm_cache_ent *ent, const char *what)
{
	if (why && len)
		snprintf(why, len, "page cache entry %llu (frame %u, key %016llx): %s",
			 (unsigned long long)ent->id, ent->frame, (unsigned long long)ent->key,
			 what);
	return -EUCLEAN;
}

int kvmm_pagecache_check(struct kvmm_pool *pool, char *why, size_t whylen)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	uint32_t count = 0;
	size_t i;

	if (!pc)
		return 0;
	for (i = 0; i < kvmm_htable_size(&pc->ht); i++) {
		struct kvmm_cache_ent *ent;

		hlist_for_each_entry (ent, &pc->ht.buckets[i], hnode) {
			const struct kvmm_page *pg;
			const struct kvmm_ns *ns;

			count++;
			if (kvmm_htable_bucket(&pc->ht, ent->key) != &pc->ht.buckets[i])
				return pc_fail(why, whylen, ent, "in the wrong bucket");
			if (ent->frame >= pool->nframes)
				return pc_fail(why, whylen, ent, "frame out of range");
			pg = &pool->pages[ent->frame];
			if (pg->cache != ent || !(pg->flags & KVMM_PG_SEALED))
				return pc_fail(why, whylen, ent, "its page does not point back");
			if (pg->state != KVMM_PAGE_MAPPED && pg->state != KVMM_PAGE_CACHED)
				return pc_fail(why, whylen, ent, "page neither mapped nor cached");
			if (pg->ns_id != ent->ns_id || ent->ns_id == 0 || ent->ns_id >= KVMM_MAX_NS)
				return pc_fail(why, whylen, ent,
					       "namespace differs from its page's");
			ns = pool->ns[ent->ns_id];
			if (!ns)
				return pc_fail(why, whylen, ent, "namespace gone");
			if (!ent->id || ent->id >= pc->next_id || ent->parent_id >= ent->id)
				return pc_fail(why, whylen, ent, "bad id or parent id");
			if (!ent->ntokens || pg->ntokens != ent->ntokens)
				return pc_fail(why, whylen, ent,
					       "token count differs from its page's");
			if (pc_hash(pc, ns, ent->parent_key, ent->fmt_id, ent->tokens,
				    ent->ntokens) != ent->key)
				return pc_fail(why, whylen, ent, "key does not match its content");
		}
	}
	if (count != pc->nr) {
		if (why && whylen)
			snprintf(why, whylen, "page cache holds %u entries but counts %u", count,
				 pc->nr);
		return -EUCLEAN;
	}
	return 0;
}

void kvmm_pagecache_destroy(struct kvmm_pool *pool)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	size_t i;

	if (!pc)
		return;
	for (i = 0; i < kvmm_htable_size(&pc->ht); i++) {
		struct hlist_head *head = &pc->ht.buckets[i];

		while (!hlist_empty(head)) {
			struct kvmm_cache_ent *ent =
				hlist_entry(head->first, struct kvmm_cache_ent, hnode);

			hlist_del(&ent->hnode);
			if (ent->frame < pool->nframes && pool->pages[ent->frame].cache == ent)
				pool->pages[ent->frame].cache = NULL;
			free(ent);
		}
	}
	kvmm_htable_destroy(&pc->ht);
	free(pc);
	pool->pagecache = NULL;
}
