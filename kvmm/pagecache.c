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
 * token ids, parent key, format id, namespace - and a pointer to its parent block's entry,
 * and a candidate counts as a hit only when all of them match what the lookup is walking.
 * Comparing the parent entry itself rather than only its key matters: with two colliding
 * parents cached, a child of the wrong one would otherwise pass (same tokens, same parent
 * key) and hand out KV computed over another prompt.  So a hash collision can cost a miss
 * (KVMM_STAT_CACHE_COLLIDE) but never a wrong hit.
 *
 * The entries form a forest: each knows its parent and its children.  Evicting an entry
 * detaches its children, and its whole subtree becomes orphaned: no lookup can reach it
 * (a lookup only ever steps from an entry to its children), so unmapped orphans are freed
 * at once and cached ones go to the inactive tail.  An orphan still mapped by a fork
 * sibling that has not sealed it yet is re-parented when that sibling seals: the block's KV
 * was computed over exactly the sibling's tokens, which its sealed chain verifies.  Sealing
 * a block that is already cached - same verified content, same parent entry - deduplicates:
 * the sequence maps the cached page and drops its own, so the reachable entries hold each
 * (parent, block) at most once.  Hence a live sequence's sealed blocks always form one
 * reachable chain, which is what lets a lookup find the longest cached prefix.
 *
 * A warm restart may restore entries whose parent is not cached (pending: see "warm restart"
 * below); they stay orphans until an entry of their parent key becomes reachable again.
 *
 * The table is a chained hash of hlist buckets (include/hashtable.h), a power of two in
 * size, doubled as entries grow up to one bucket per frame (there is at most one entry per
 * frame), so a lookup walks one short chain; colliding entries coexist on it.  Locking: the
 * pool lock.
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
#include "kmalloc.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

/* struct kvmm_cache_ent.flags */
enum {
	PC_ORPHAN = 1u << 0, /* unreachable: an ancestor was evicted (set on the whole subtree) */
	PC_REMOTE = 1u << 1, /* written to (or read from) the remote tier: not stored again */
	/*
	 * Restored by a warm restart under a parent that was not (with PC_ORPHAN): waits
	 * for a reachable entry of its parent key to be sealed (pc_adopt).
	 */
	PC_PENDING = 1u << 2,
};

struct kvmm_cache_ent {
	struct hlist_node hnode; /* in a bucket of kvmm_pagecache.ht */
	/*
	 * The parent block's entry; NULL for a first block (depth 0) and for a detached orphan
	 * (depth > 0, its parent evicted).  Never dangles: eviction detaches the children.
	 */
	struct kvmm_cache_ent *parent;
	struct list_head children; /* entries whose parent this is (their sibling nodes) */
	struct list_head sibling;  /* in parent->children; empty while detached or a root */
	uint64_t key;
	uint64_t id;	     /* unique in this cache, never reused (diagnostics) */
	uint64_t parent_key; /* the parent's key, as hashed into key; 0 for a first block */
	uint64_t fmt_id;
	uint32_t depth; /* block index in every sequence that maps it: parent's depth + 1 */
	uint32_t frame; /* KVMM_FRAME_NONE while the page is swapped (swap.h) */
	uint64_t swap;	/* the swap entry holding the page while swapped, else 0 */
	uint32_t ntokens;
	uint16_t ns_id;
	uint16_t flags;	   /* PC_* */
	uint32_t tokens[]; /* ntokens token ids */
};

/* A pending root: a restored entry whose parent is not cached, in pending by parent key. */
struct pc_pending {
	struct hlist_node hnode;
	struct kvmm_cache_ent *ent;
};

struct kvmm_pagecache {
	struct kvmm_htable ht;
	struct kvmm_htable pending; /* struct pc_pending; no buckets until the first one */
	uint32_t nr_pending;	    /* pending roots */
	uint32_t nr;		    /* entries */
	unsigned int max_bits;	    /* no point growing past one bucket per frame */
	uint64_t next_id;
	kvmm_cache_hash_fn hash_fn; /* NULL: kvmm_cache_key (test hook) */
};

#define PC_MIN_BITS 6
/* Blocks up to this many tokens are hashed in one call from a stack buffer. */
#define KEY_INLINE_TOKENS 120

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/*
 * The id keys the page cache, and cache keys may outlive a process (swap, a remote tier), so
 * it hashes a fixed little-endian encoding of the defining fields with a version word, never
 * the in-memory struct (padding, field order, endianness).  Derived fields follow from these.
 */
#define FMT_ID_VERSION 1

uint64_t kvmm_fmt_id(const struct kvmm_fmt *fmt)
{
	unsigned char buf[7 * 8];

	put_le64(buf + 0, FMT_ID_VERSION);
	put_le64(buf + 8, fmt->layers);
	put_le64(buf + 16, fmt->kv_heads);
	put_le64(buf + 24, fmt->head_dim);
	put_le64(buf + 32, fmt->dtype);
	put_le64(buf + 40, fmt->quant_group);
	put_le64(buf + 48, fmt->page_size);
	return XXH3_64bits(buf, sizeof(buf));
}

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

uint64_t kvmm_key_domain(const struct kvmm_ns *ns, uint64_t tag, uint64_t base, const void *bytes,
			 size_t len)
{
	unsigned char hdr[3 * 8];
	XXH3_state_t st;

	put_le64(hdr, tag);
	put_le64(hdr + 8, base);
	put_le64(hdr + 16, len);
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, ns->hash_seed);
	XXH3_64bits_update(&st, hdr, sizeof(hdr));
	if (len)
		XXH3_64bits_update(&st, bytes, len);
	return XXH3_64bits_digest(&st);
}

int kvmm_mm_seq_set_salt(struct kvmm_seq *seq, const void *salt, size_t len)
{
	const struct kvmm_pool *pool = seq->as->pool;
	uint64_t id =
		len ? kvmm_key_domain(seq->as->ns, KVMM_KEY_DOMAIN_SALT, seq->as->fmt_id, salt, len)
		    : 0;

	if (id == seq->key_id)
		return 0;
	if (seq->nsealed)
		return -EBUSY;
	for (uint32_t b = 0; b < seq->nblocks; b++) {
		uint64_t pte = seq->pte[b];
		uint32_t f = kvmm_pte_frame(pte);

		/* a shared page is never swapped: only present ones can be */
		if (kvmm_pte_is_present(pte) && f < pool->nframes &&
		    (pool->pages[f].refcount > 1 || (pool->pages[f].flags & KVMM_PG_SEALED)))
			return -EBUSY;
	}
	seq->key_id = id;
	return 0;
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
 * The reachable entry for (key, namespace, format, parent entry, depth, tokens), or NULL.
 * Other entries on the key are counted: a real collision when what was hashed differs
 * (COLLIDE), else the same block under another parent entry - an orphan, or a prefix whose
 * own key collided (STALE).  @parent is reachable (a lookup or a seal steps only from one),
 * so a match is too; at depth 0 the depth check keeps detached orphans out.
 */
static struct kvmm_cache_ent *pc_find(struct kvmm_pool *pool, const struct kvmm_pagecache *pc,
				      uint64_t key, uint16_t ns_id, uint64_t fmt_id,
				      const struct kvmm_cache_ent *parent, const uint32_t *tokens,
				      uint32_t n)
{
	uint64_t parent_key = parent ? parent->key : 0;
	uint32_t depth = parent ? parent->depth + 1 : 0;
	size_t bytes = (size_t)n * sizeof(*tokens);
	struct kvmm_cache_ent *ent;

	kvmm_htable_for_each_possible (&pc->ht, ent, hnode, key) {
		bool same;

		if (ent->key != key)
			continue;
		same = ent->ns_id == ns_id && ent->fmt_id == fmt_id && ent->ntokens == n &&
		       !memcmp(ent->tokens, tokens, bytes);
		if (likely(same && ent->parent == parent && ent->depth == depth))
			return ent;
		if (same && ent->parent_key == parent_key)
			pool->stat[KVMM_STAT_CACHE_STALE]++;
		else
			pool->stat[KVMM_STAT_CACHE_COLLIDE]++;
	}
	return NULL;
}

/*
 * The reachable entry under @parent for the block of (@ns_id, @fmt_id, @tokens), found
 * without hashing where @parent has at most one child: inside a shared prefix each block has
 * one successor, and every reachable entry whose parent is @parent is on its children list,
 * so with none there is no such entry and with one it is that one or none.  *@known says
 * whether the answer is that; else (a root, a branch point, or a test's hash function, whose
 * collisions pc_find() counts) the caller hashes and asks pc_find().  The two agree: a child
 * is keyed by its parent's key and its own tokens (pc_reparent() detaches the children of an
 * entry whose key changes), lies one block deeper, and sealing keeps one child per content.
 * Only pc_find()'s COLLIDE/STALE counting of other entries on the key is skipped.
 */
static struct kvmm_cache_ent *pc_find_child(const struct kvmm_pagecache *pc,
					    const struct kvmm_cache_ent *parent, uint16_t ns_id,
					    uint64_t fmt_id, const uint32_t *tokens, uint32_t n,
					    bool *known)
{
	struct kvmm_cache_ent *c;

	*known = parent && likely(!pc->hash_fn) &&
		 (list_empty(&parent->children) || list_is_singular(&parent->children));
	if (!*known || list_empty(&parent->children))
		return NULL;
	c = list_first_entry(&parent->children, struct kvmm_cache_ent, sibling);
	if (c->ns_id == ns_id && c->fmt_id == fmt_id && c->ntokens == n &&
	    !memcmp(c->tokens, tokens, (size_t)n * sizeof(*tokens)))
		return c;
	return NULL;
}

/*
 * The entry after @ent in a preorder walk of @root's subtree, or NULL: children first,
 * then the next sibling of the nearest ancestor that has one, never leaving @root.
 */
static struct kvmm_cache_ent *pc_subtree_next(const struct kvmm_cache_ent *root,
					      struct kvmm_cache_ent *ent)
{
	if (!list_empty(&ent->children))
		return list_first_entry(&ent->children, struct kvmm_cache_ent, sibling);
	for (; ent != root; ent = ent->parent) {
		if (!list_is_last(&ent->sibling, &ent->parent->children))
			return list_next_entry(ent, sibling);
	}
	return NULL;
}

/*
 * @root was just detached from its evicted parent: it and everything below become
 * unreachable.  Nothing can hit them again, so mapped ones are freed as soon as their last
 * mapper goes (kvmm_pagecache_drop_orphan) and cached ones lose their second chance
 * (REFERENCED).  They are neither freed nor moved between LRU lists here: this runs under
 * reclaim, in the middle of its walk of the inactive list, which must neither lose its
 * place nor miss a page it is still to meet (it evicts as many pages as asked while any
 * are cached), so they go in LRU order, like other cold pages.
 */
static void pc_orphan_subtree(struct kvmm_pool *pool, struct kvmm_cache_ent *root)
{
	struct kvmm_cache_ent *ent;

	for (ent = root; ent; ent = pc_subtree_next(root, ent)) {
		ent->flags |= PC_ORPHAN;
		if (ent->frame != KVMM_FRAME_NONE)
			pool->pages[ent->frame].flags &= ~KVMM_PG_REFERENCED;
		pool->stat[KVMM_STAT_CACHE_ORPHAN]++;
	}
}

/* Detach every child of @ent (they keep their subtrees); they must already be orphans. */
static void pc_detach_children(struct kvmm_cache_ent *ent)
{
	struct kvmm_cache_ent *child, *tmp;

	list_for_each_entry_safe (child, tmp, &ent->children, sibling) {
		list_del_init(&child->sibling);
		child->parent = NULL;
	}
}

static inline struct kvmm_page *block_page(struct kvmm_pool *pool, const struct kvmm_seq *seq,
					   uint32_t block)
{
	uint32_t frame = kvmm_pte_frame(seq->pte[block]);

	KVMM_BUG_ON(frame >= pool->nframes);
	return &pool->pages[frame];
}

/* The reachable entry of @ns keyed @key at @depth, if exactly one: a restored parent. */
static struct kvmm_cache_ent *pc_find_key(const struct kvmm_pagecache *pc, uint64_t key,
					  uint16_t ns_id, uint32_t depth)
{
	struct kvmm_cache_ent *ent, *found = NULL;

	kvmm_htable_for_each_possible (&pc->ht, ent, hnode, key) {
		if (ent->key != key || ent->ns_id != ns_id || ent->depth != depth ||
		    (ent->flags & PC_ORPHAN) || (depth && !ent->parent))
			continue;
		if (found)
			return NULL; /* two prefixes on one key: which one is meant is unknowable */
		found = ent;
	}
	return found;
}

/* ---- warm restart: entries restored before their parent (pending) ------------------------ */

/*
 * A warm restart (swap_index.c) restores the sealed pages a file tier holds, but the parent
 * of some was resident at the crash and is gone: a pending root.  It is kept, with the
 * subtree restored under it, as an orphan (no lookup steps into it), in pc->pending under its
 * parent key, until an entry of that key - the same namespace and format, one block up -
 * becomes reachable (sealed again by an engine that recomputed the prefix, re-parented, or
 * restored from another tier): pc_adopt() hangs it there and its subtree is reachable again.
 * Its key was hashed again at restore from its parent key and tokens under the namespace's
 * secret, exactly the trust a restored parent gets (kvmm_pagecache_restore), and its bytes
 * are checked against their checksum when they are read.  Being orphans, pending entries are
 * the first thing a full tier drops (swapfile.c): they cost slots nobody else wants.
 */

static struct pc_pending *pc_pending_node(const struct kvmm_pagecache *pc,
					  const struct kvmm_cache_ent *ent)
{
	struct pc_pending *p;

	if (!pc->nr_pending)
		return NULL;
	kvmm_htable_for_each_possible (&pc->pending, p, hnode, ent->parent_key) {
		if (p->ent == ent)
			return p;
	}
	return NULL;
}

/* Double the pending table's buckets; on -ENOMEM keep the old one (longer chains). */
static void pc_pending_grow(struct kvmm_pagecache *pc)
{
	struct kvmm_htable nt;
	size_t i, size = kvmm_htable_size(&pc->pending);

	if (kvmm_htable_init(&nt, pc->pending.bits + 1))
		return;
	for (i = 0; i < size; i++) {
		struct hlist_head *head = &pc->pending.buckets[i];

		while (!hlist_empty(head)) {
			struct pc_pending *p = hlist_entry(head->first, struct pc_pending, hnode);

			hlist_del(&p->hnode);
			kvmm_htable_add(&nt, &p->hnode, p->ent->parent_key);
		}
	}
	kvmm_htable_destroy(&pc->pending);
	pc->pending = nt;
}

/* Make @ent, detached, a pending root waiting for its parent key: 0 or -ENOMEM. */
static int pc_pending_add(struct kvmm_pagecache *pc, struct kvmm_cache_ent *ent)
{
	struct pc_pending *p;

	if (!pc->pending.buckets && kvmm_htable_init(&pc->pending, PC_MIN_BITS))
		return -ENOMEM;
	p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->ent = ent;
	ent->parent = NULL;
	ent->flags |= PC_ORPHAN | PC_PENDING;
	kvmm_htable_add(&pc->pending, &p->hnode, ent->parent_key);
	if (++pc->nr_pending > kvmm_htable_size(&pc->pending) &&
	    pc->pending.bits < KVMM_HTABLE_MAX_BITS)
		pc_pending_grow(pc);
	return 0;
}

static void pc_pending_del(struct kvmm_pagecache *pc, struct pc_pending *p)
{
	hlist_del(&p->hnode);
	free(p);
	pc->nr_pending--;
}

/* Does @parent have a child for the block of (@key, @ns_id, @fmt_id, @tokens)? */
static bool pc_has_child(const struct kvmm_cache_ent *parent, uint64_t key, uint16_t ns_id,
			 uint64_t fmt_id, const uint32_t *tokens, uint32_t n)
{
	const struct kvmm_cache_ent *c;

	list_for_each_entry (c, &parent->children, sibling) {
		if (c->key == key && c->ns_id == ns_id && c->fmt_id == fmt_id && c->ntokens == n &&
		    !memcmp(c->tokens, tokens, (size_t)n * sizeof(*tokens)))
			return true;
	}
	return false;
}

/*
 * @parent just became reachable: the pending roots restored under its key, in its namespace
 * and format one block deeper, become its children.  Only while @parent is the one reachable
 * entry of its key at its depth (what a restore demands of a parent: with two, which prefix
 * a record meant is unknowable), and only for blocks it has no child for yet (no duplicate).
 */
static void pc_adopt(struct kvmm_pool *pool, struct kvmm_pagecache *pc,
		     struct kvmm_cache_ent *parent)
{
	struct hlist_node *tmp;
	struct pc_pending *p;
	bool unique = false;

	if (likely(!pc->nr_pending))
		return;
	kvmm_htable_for_each_possible_safe (&pc->pending, p, tmp, hnode, parent->key) {
		struct kvmm_cache_ent *ent = p->ent, *e;

		if (ent->parent_key != parent->key || ent->depth != parent->depth + 1 ||
		    ent->ns_id != parent->ns_id || ent->fmt_id != parent->fmt_id)
			continue;
		if (!unique) {
			if (pc_find_key(pc, parent->key, parent->ns_id, parent->depth) != parent)
				return;
			unique = true;
		}
		if (pc_has_child(parent, ent->key, ent->ns_id, ent->fmt_id, ent->tokens,
				 ent->ntokens))
			continue; /* stays pending: a full tier drops it first */
		pc_pending_del(pc, p);
		ent->parent = parent;
		list_add_tail(&ent->sibling, &parent->children);
		for (e = ent; e; e = pc_subtree_next(ent, e)) {
			e->flags &= ~(PC_ORPHAN | PC_PENDING);
			pool->stat[KVMM_STAT_CACHE_ADOPT]++;
		}
	}
}

/*
 * @ent, sealed by a fork sibling, is an orphan that @seq maps as its block after @parent,
 * and @parent has no child with its content: hang it there, keyed @key.  Safe because no
 * lookup can reach it where it is, while its KV was computed over @seq's own tokens, which
 * @parent's chain holds.  When its key stays the same (the usual case: its old parent was
 * evicted and the same prefix sealed again) its subtree comes along and is reachable again;
 * otherwise its children keep their old keys and stay detached orphans (a sequence that
 * maps one of them re-parents it in turn when it seals).
 */
static void pc_reparent(struct kvmm_pool *pool, struct kvmm_pagecache *pc,
			struct kvmm_cache_ent *ent, struct kvmm_cache_ent *parent, uint64_t key)
{
	struct kvmm_cache_ent *e;

	if (ent->parent)
		list_del_init(&ent->sibling);
	if (key != ent->key) {
		pc_detach_children(ent);
		hlist_del(&ent->hnode);
		ent->key = key;
		kvmm_htable_add(&pc->ht, &ent->hnode, key);
	}
	ent->parent = parent;
	ent->parent_key = parent->key;
	list_add_tail(&ent->sibling, &parent->children);
	for (e = ent; e; e = pc_subtree_next(ent, e))
		e->flags &= ~PC_ORPHAN;
	pool->stat[KVMM_STAT_CACHE_REPARENT]++;
	pc_adopt(pool, pc, ent);
}

int kvmm_pagecache_seal_block(struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_aspace *as = seq->as;
	struct kvmm_pool *pool = as->pool;
	uint32_t tpp = as->fmt.tokens_per_page;
	struct kvmm_cache_ent *parent = NULL, *ent, *old;
	struct kvmm_pagecache *pc;
	struct kvmm_page *pg, *cached = NULL;
	const uint32_t *tokens;
	uint64_t key;
	bool known;

	KVMM_BUG_ON(block != seq->nsealed || (uint64_t)(block + 1) * tpp > seq->ntokens);
	pg = block_page(pool, seq, block);
	if (block) {
		/* sealed in this sequence, so part of its reachable chain */
		parent = block_page(pool, seq, block - 1)->cache;
		KVMM_BUG_ON(!parent || (parent->flags & PC_ORPHAN));
	}
	tokens = seq->tokens + (size_t)block * tpp;
	old = (pg->flags & KVMM_PG_SEALED) ? pg->cache : NULL;
	if (old) {
		/* sealed by a fork sibling: the same tokens over the same prefix */
		KVMM_BUG_ON(old->depth != block || old->ns_id != as->ns->id ||
			    old->fmt_id != kvmm_seq_key_id(seq) || old->ntokens != tpp ||
			    memcmp(old->tokens, tokens, (size_t)tpp * sizeof(*tokens)));
		if (likely(old->parent == parent)) {
			seq->pte[block] = kvmm_mm_seq_mk_pte(pool, pg, true);
			return 0;
		}
		/*
		 * ... but under another entry for the previous block: the sibling had that
		 * block deduplicated to a cached page, since evicted (or orphaned) and sealed
		 * again.  Below: share what @parent already has, else re-parent.
		 */
	}
	pc = pc_get(pool);
	if (!pc)
		return -ENOMEM;

	if (old && old->parent_key == (parent ? parent->key : 0))
		key = old->key;
	else
		key = pc_hash(pc, as->ns, parent ? parent->key : 0, kvmm_seq_key_id(seq), tokens,
			      tpp);
	ent = pc_find_child(pc, parent, as->ns->id, kvmm_seq_key_id(seq), tokens, tpp, &known);
	if (!known)
		ent = pc_find(pool, pc, key, as->ns->id, kvmm_seq_key_id(seq), parent, tokens, tpp);
	if (ent) {
		/* the same block of the same prefix is cached: share it, drop our copy */
		if (unlikely(ent->frame == KVMM_FRAME_NONE)) {
			cached = kvmm_swap_fault_ent(pool, ent, as->mag);
			if (!cached && errno != ENODATA)
				return -errno;
		} else {
			cached = &pool->pages[ent->frame];
		}
	}
	/* a cached copy that failed its checksum was dropped: this page takes its place */
	if (ent && cached) {
		kvmm_page_get(pool, cached);
		kvmm_mark_page_accessed(pool, cached);
		seq->pte[block] = kvmm_mm_seq_mk_pte(pool, cached, true);
		kvmm_page_put(pool, pg, as->mag);
		return 0;
	}
	if (old) {
		/*
		 * Two reachable entries for one prefix cannot hold the same block (sealing
		 * deduplicates), so the old chain is dead.  If it were not, moving the entry
		 * would cost its chain's hits: keep it (this chain then misses the block).
		 */
		if (!KVMM_WARN_ON_ONCE(!(old->flags & PC_ORPHAN)))
			pc_reparent(pool, pc, old, parent, key);
		seq->pte[block] = kvmm_mm_seq_mk_pte(pool, pg, true);
		return 0;
	}

	ent = kvmm_malloc(sizeof(*ent) + (size_t)tpp * sizeof(*tokens));
	if (!ent)
		return -ENOMEM;
	ent->key = key;
	ent->id = pc->next_id++;
	ent->parent = parent;
	ent->parent_key = parent ? parent->key : 0;
	INIT_LIST_HEAD(&ent->children);
	if (parent)
		list_add_tail(&ent->sibling, &parent->children);
	else
		INIT_LIST_HEAD(&ent->sibling);
	ent->fmt_id = kvmm_seq_key_id(seq);
	ent->depth = block;
	ent->frame = kvmm_page_to_frame(pool, pg);
	ent->swap = 0;
	ent->ntokens = tpp;
	ent->ns_id = as->ns->id;
	ent->flags = 0;
	memcpy(ent->tokens, tokens, (size_t)tpp * sizeof(*tokens));
	kvmm_htable_add(&pc->ht, &ent->hnode, key);
	if (++pc->nr > kvmm_htable_size(&pc->ht) && pc->ht.bits < pc->max_bits)
		pc_grow(pc);

	pg->cache = ent;
	pg->flags = (pg->flags & ~KVMM_PG_DIRTY) | KVMM_PG_SEALED;
	pg->ntokens = tpp;
	seq->pte[block] = kvmm_mm_seq_mk_pte(pool, pg, true);
	pool->stat[KVMM_STAT_SEAL]++;
	kvmm_trace_event(KVMM_TR_SEAL, pool, as->mag ? as->mag->owner : 0, as->ns->id, seq->id,
			 ent->frame, 1);
	pc_adopt(pool, pc, ent);
	return 0;
}

/*
 * The walk continues from the sequence's end: block seq->nblocks, under the entry of its last
 * block.  That entry is reachable and holds the sequence's own prefix (a live sequence's
 * sealed blocks form one reachable chain), so continuing from it finds exactly what a walk
 * of the whole prompt from block 0 would, without re-hashing the blocks already mapped - and
 * pc_find() still demands the exact parent entry at every step, so a collision cannot slip
 * in at the seam either.
 */
static int prefix_lookup(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n,
			 bool *short_of_room)
{
	const struct kvmm_cache_ent *parent = NULL;
	struct kvmm_pagecache *pc;
	struct kvmm_aspace *as;
	struct kvmm_pool *pool;
	uint64_t nfull, have;
	struct kvmm_swap_tier *far;
	uint32_t tpp, first, b, hits = 0;
	int ret = 0;

	if (!seq || (n && !tokens))
		return -EINVAL;
	as = seq->as;
	pool = as->pool;
	pc = pool->pagecache;
	tpp = as->fmt.tokens_per_page;
	first = seq->nblocks;
	/* only a whole number of pages, all sealed, can be continued */
	if (seq->ntokens != (uint64_t)first * tpp || seq->nsealed != first)
		return -EINVAL;
	/* the result is the sequence's length in tokens, in an int */
	have = seq->ntokens;
	if (have > INT_MAX)
		return -EOVERFLOW;
	nfull = min_t(uint64_t, n / tpp, (uint64_t)INT_MAX / tpp - first);
	if (!nfull)
		return (int)have;
	if (!pc || !pc->nr) {
		pool->stat[KVMM_STAT_CACHE_MISS]++;
		kvmm_trace_event(KVMM_TR_MISS, pool, as->mag ? as->mag->owner : 0, as->ns->id,
				 seq->id, KVMM_TRACE_NONE, first);
		return (int)have;
	}
	if (first) {
		/* sealed in this sequence, so the reachable entry of its prefix */
		if (kvmm_pte_is_swap(seq->pte[first - 1]))
			parent = kvmm_swap_slot_ent(pool, seq->pte[first - 1]);
		else
			parent = block_page(pool, seq, first - 1)->cache;
		KVMM_BUG_ON(!parent || (parent->flags & PC_ORPHAN) || parent->depth != first - 1);
	}

	/*
	 * Room for the whole prompt at once (its misses are appended next): one resize of the
	 * page table and token array instead of one per doubling.  Best effort: on failure the
	 * loop below grows it block by block and reports what it cannot.
	 */
	if (first + nfull > seq->cap)
		kvmm_mm_seq_reserve(seq, first + (uint32_t)nfull + (n % tpp ? 1 : 0));
	/* a client that reads the far tier in place: its hits there are mapped as they lie */
	far = as->far_lookup ? kvmm_swap_far_tier(pool) : NULL;
	for (b = 0; b < nfull; b++) {
		const uint32_t *t = tokens + (size_t)b * tpp;
		uint32_t blk = first + b;
		struct kvmm_cache_ent *ent;
		struct kvmm_page *pg;
		bool known;

		ent = pc_find_child(pc, parent, as->ns->id, kvmm_seq_key_id(seq), t, tpp, &known);
		if (!known) {
			uint64_t key = pc_hash(pc, as->ns, parent ? parent->key : 0,
					       kvmm_seq_key_id(seq), t, tpp);

			ent = pc_find(pool, pc, key, as->ns->id, kvmm_seq_key_id(seq), parent, t,
				      tpp);
		}
		if (!ent) {
			pool->stat[KVMM_STAT_CACHE_MISS]++;
			kvmm_trace_event(KVMM_TR_MISS, pool, as->mag ? as->mag->owner : 0,
					 as->ns->id, seq->id, KVMM_TRACE_NONE, blk);
			break;
		}
		if (unlikely(blk >= seq->cap) && kvmm_mm_seq_reserve(seq, blk + 1)) {
			/* keep what is mapped; report the failure only if nothing is */
			if (!hits)
				ret = -ENOMEM;
			break;
		}
		if (unlikely(ent->frame == KVMM_FRAME_NONE) && far &&
		    kvmm_swap_map_far(pool, far, ent, seq, blk)) {
			/* on the far tier: mapped where it lies (read in place, or faulted later) */
			memcpy(seq->tokens + (size_t)blk * tpp, t, (size_t)tpp * sizeof(*t));
			parent = ent;
			hits++;
			pool->stat[KVMM_STAT_FAR_MAP]++;
			continue;
		}
		if (unlikely(ent->frame == KVMM_FRAME_NONE)) {
			if (short_of_room && kvmm_pool_nr_free(pool) <= pool->wmark_min) {
				/*
				 * The fault's reclaim could only drop cache (no swap I/O inside
				 * swap I/O), maybe the rest of this very prefix: stop, the caller
				 * makes room at the top, where cached pages are demoted.
				 */
				*short_of_room = true;
				break;
			}
			/* demoted or swapped: fault it back in (swap_state.c) */
			pg = kvmm_swap_fault_ent(pool, ent, as->mag);
			if (!pg) {
				/* ENODATA: its bytes failed their checksum and it is gone: a miss */
				if (short_of_room && errno == ENOMEM)
					*short_of_room = true;
				if (!hits && errno != ENODATA)
					ret = -errno;
				if (errno == ENODATA)
					pool->stat[KVMM_STAT_CACHE_MISS]++;
				break;
			}
		} else {
			pg = &pool->pages[ent->frame];
		}
		kvmm_page_get(pool, pg);
		kvmm_mark_page_accessed(pool, pg);
		seq->pte[blk] = kvmm_mm_seq_mk_pte(pool, pg, true);
		memcpy(seq->tokens + (size_t)blk * tpp, t, (size_t)tpp * sizeof(*t));
		parent = ent;
		hits++;
	}
	pool->stat[KVMM_STAT_CACHE_HIT] += hits;
	if (hits)
		kvmm_trace_event(KVMM_TR_HIT, pool, as->mag ? as->mag->owner : 0, as->ns->id,
				 seq->id, KVMM_TRACE_NONE, hits);
	seq->nblocks = first + hits;
	seq->nsealed = first + hits;
	seq->ntokens = (uint64_t)seq->nblocks * tpp;
	return ret ? ret : (int)seq->ntokens;
}

int kvmm_mm_prefix_lookup(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n)
{
	return prefix_lookup(seq, tokens, n, NULL);
}

/*
 * A fault-in inside a lookup may only drop cache to make room (swap I/O never nests): in a
 * full pool it would drop cached pages - often the rest of the prefix being walked, a miss a
 * few blocks later - and where nothing is left to drop the walk stops at the first swapped
 * hit, although the pages it mapped so far (this sequence's alone, unpinned) could go out.
 * So this walk stops before a fault that would need reclaim, room is made here, at the top,
 * in reclaim order (cached pages demoted to swap, then sequences swapped out, these very
 * pages included), and the walk continues from where it stopped while that maps more.
 */
int kvmm_mm_prefix_lookup_reclaim(struct kvmm_seq *seq, const uint32_t *tokens, uint64_t n)
{
	struct kvmm_pool *pool;
	bool shrunk = false, marked = false;
	uint64_t done = 0;
	uint32_t tpp;
	int ret;

	if (!seq || (n && !tokens))
		return -EINVAL;
	pool = seq->as->pool;
	tpp = seq->as->fmt.tokens_per_page;
	/* its fault-ins are a step's: the sequence is no OOM victim for them */
	if (pool->swap && !(seq->flags & KVMM_SEQ_F_FAULTING)) {
		seq->flags |= KVMM_SEQ_F_FAULTING;
		pool->nr_faulting++;
		marked = true;
	}
	for (;;) {
		uint32_t before = seq->nblocks, want;
		bool room = false;

		ret = prefix_lookup(seq, tokens + done, n - done, &room);
		if (ret < 0 && done)
			ret = (int)seq->ntokens; /* keep what the earlier walks mapped */
		/* a miss, the end, or room made for nothing: done */
		if (!room || !pool->swap || (shrunk && seq->nblocks == before))
			break;
		done += (uint64_t)(seq->nblocks - before) * tpp;
		if (done + tpp > n)
			break;
		want = (uint32_t)min_t(uint64_t, (n - done) / tpp, pool->nframes / 4 + 1);
		if (!kvmm_shrink(pool, want + pool->wmark_min, 0))
			break;
		shrunk = true;
		pool->stat[KVMM_STAT_LOOKUP_RECLAIM]++;
	}
	if (marked) {
		seq->flags &= ~KVMM_SEQ_F_FAULTING;
		pool->nr_faulting--;
	}
	return ret;
}

static void pc_remove(struct kvmm_pool *pool, struct kvmm_cache_ent *ent)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	struct kvmm_cache_ent *child, *tmp;

	KVMM_BUG_ON(!pc || !pc->nr);
	hlist_del(&ent->hnode);
	pc->nr--;
	if ((ent->flags & PC_PENDING) && !ent->parent) {
		struct pc_pending *p = pc_pending_node(pc, ent);

		KVMM_BUG_ON(!p);
		pc_pending_del(pc, p);
	}
	list_del(&ent->sibling);
	list_for_each_entry_safe (child, tmp, &ent->children, sibling) {
		struct kvmm_cache_ent *e;

		list_del_init(&child->sibling);
		child->parent = NULL;
		if (!(child->flags & PC_ORPHAN))
			pc_orphan_subtree(pool, child);
		/* a pending entry still waits for its own parent key: a root now */
		if ((child->flags & PC_PENDING) && pc_pending_add(pc, child))
			for (e = child; e; e = pc_subtree_next(child, e))
				e->flags &= ~PC_PENDING;
	}
	kvmm_free(ent);
}

void kvmm_pagecache_remove(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	KVMM_BUG_ON(!pg->cache || !(pg->flags & KVMM_PG_SEALED));
	pc_remove(pool, pg->cache);
	pg->cache = NULL;
	pg->flags &= ~KVMM_PG_SEALED;
}

/* ---- entries of swapped pages (swap.h) ---------------------------------------------------- */

uint64_t kvmm_pagecache_ent_swap(const struct kvmm_cache_ent *ent)
{
	return ent->swap;
}

uint16_t kvmm_pagecache_ent_ns(const struct kvmm_cache_ent *ent)
{
	return ent->ns_id;
}

bool kvmm_pagecache_ent_orphan(const struct kvmm_cache_ent *ent)
{
	return ent->flags & PC_ORPHAN;
}

struct kvmm_cache_ent *kvmm_pagecache_ent_parent(const struct kvmm_cache_ent *ent)
{
	return ent->parent;
}

void kvmm_pagecache_ent_swapout(struct kvmm_pool *pool, struct kvmm_page *pg, uint64_t swp)
{
	struct kvmm_cache_ent *ent = pg->cache;

	KVMM_BUG_ON(!ent || !(pg->flags & KVMM_PG_SEALED) || !swp ||
		    ent->frame != kvmm_page_to_frame(pool, pg));
	ent->frame = KVMM_FRAME_NONE;
	ent->swap = swp;
	pg->cache = NULL;
	pg->flags &= ~KVMM_PG_SEALED;
}

void kvmm_pagecache_ent_swapin(struct kvmm_pool *pool, struct kvmm_cache_ent *ent,
			       struct kvmm_page *pg, uint64_t swp)
{
	KVMM_BUG_ON(ent->frame != KVMM_FRAME_NONE || !ent->swap);
	if (!pg) {
		/* moved to another slot */
		KVMM_BUG_ON(!swp);
		ent->swap = swp;
		return;
	}
	KVMM_BUG_ON(pg->cache || (pg->flags & KVMM_PG_SEALED));
	ent->frame = kvmm_page_to_frame(pool, pg);
	ent->swap = 0;
	pg->cache = ent;
	pg->flags = (pg->flags & ~KVMM_PG_DIRTY) | KVMM_PG_SEALED;
	pg->ntokens = ent->ntokens;
}

void kvmm_pagecache_remove_ent(struct kvmm_pool *pool, struct kvmm_cache_ent *ent)
{
	KVMM_BUG_ON(ent->frame != KVMM_FRAME_NONE);
	pc_remove(pool, ent);
}

void kvmm_pagecache_ent_desc(const struct kvmm_cache_ent *ent, struct kvmm_cache_desc *d)
{
	d->key = ent->key;
	d->parent_key = ent->parent_key;
	d->fmt_id = ent->fmt_id;
	d->depth = ent->depth;
	d->ntokens = ent->ntokens;
	d->tokens = ent->tokens;
}

/*
 * The pending entry of @ns keyed @key at @depth in format @fmt_id: 1 and *found if exactly
 * one, 0 if none, -1 if more (two prefixes on one key: which one a record meant is unknowable).
 */
static int pc_find_pending(const struct kvmm_pagecache *pc, uint64_t key, uint16_t ns_id,
			   uint32_t depth, uint64_t fmt_id, struct kvmm_cache_ent **found)
{
	struct kvmm_cache_ent *ent;
	int n = 0;

	*found = NULL;
	if (!pc->nr_pending)
		return 0;
	kvmm_htable_for_each_possible (&pc->ht, ent, hnode, key) {
		if (ent->key != key || ent->ns_id != ns_id || ent->depth != depth ||
		    ent->fmt_id != fmt_id || !(ent->flags & PC_PENDING))
			continue;
		if (n++)
			return -1;
		*found = ent;
	}
	return n;
}

/* Is the block of @d already a pending root (same parent key, depth, content)? */
static bool pc_pending_dup(const struct kvmm_pagecache *pc, uint16_t ns_id,
			   const struct kvmm_cache_desc *d)
{
	struct pc_pending *p;

	if (!pc->nr_pending)
		return false;
	kvmm_htable_for_each_possible (&pc->pending, p, hnode, d->parent_key) {
		const struct kvmm_cache_ent *e = p->ent;

		if (e->key == d->key && e->parent_key == d->parent_key && e->depth == d->depth &&
		    e->ns_id == ns_id && e->fmt_id == d->fmt_id && e->ntokens == d->ntokens &&
		    !memcmp(e->tokens, d->tokens, (size_t)d->ntokens * sizeof(*d->tokens)))
			return true;
	}
	return false;
}

struct kvmm_cache_ent *kvmm_pagecache_restore(struct kvmm_pool *pool, struct kvmm_ns *ns,
					      const struct kvmm_cache_desc *d, uint64_t swp)
{
	struct kvmm_cache_ent *parent = NULL, *ent;
	struct kvmm_pagecache *pc = pc_get(pool);
	bool pending = false;

	if (!pc) {
		errno = ENOMEM;
		return NULL;
	}
	if (!d->ntokens || !swp || (!d->depth) != (!d->parent_key) ||
	    pc_hash(pc, ns, d->parent_key, d->fmt_id, d->tokens, d->ntokens) != d->key) {
		errno = EBADMSG;
		return NULL;
	}
	if (d->depth) {
		parent = pc_find_key(pc, d->parent_key, ns->id, d->depth - 1);
		/* no reachable parent: under a pending one, or a pending root of its own */
		if (!parent) {
			pending = true;
			if (pc_find_pending(pc, d->parent_key, ns->id, d->depth - 1, d->fmt_id,
					    &parent) < 0) {
				errno = ENOENT;
				return NULL;
			}
		}
	}
	if (pending ? (parent ? pc_has_child(parent, d->key, ns->id, d->fmt_id, d->tokens,
					     d->ntokens)
			      : pc_pending_dup(pc, ns->id, d))
		    : !!pc_find(pool, pc, d->key, ns->id, d->fmt_id, parent, d->tokens,
				d->ntokens)) {
		errno = EEXIST;
		return NULL;
	}
	ent = kvmm_malloc(sizeof(*ent) + (size_t)d->ntokens * sizeof(*d->tokens));
	if (!ent) {
		errno = ENOMEM;
		return NULL;
	}
	ent->key = d->key;
	ent->id = pc->next_id++;
	ent->parent = parent;
	ent->parent_key = d->parent_key;
	INIT_LIST_HEAD(&ent->children);
	INIT_LIST_HEAD(&ent->sibling);
	ent->fmt_id = d->fmt_id;
	ent->depth = d->depth;
	ent->frame = KVMM_FRAME_NONE;
	ent->swap = swp;
	ent->ntokens = d->ntokens;
	ent->ns_id = ns->id;
	ent->flags = pending ? PC_ORPHAN | PC_PENDING : 0;
	memcpy(ent->tokens, d->tokens, (size_t)d->ntokens * sizeof(*d->tokens));
	if (pending && !parent && pc_pending_add(pc, ent)) {
		kvmm_free(ent);
		errno = ENOMEM;
		return NULL;
	}
	if (parent)
		list_add_tail(&ent->sibling, &parent->children);
	kvmm_htable_add(&pc->ht, &ent->hnode, ent->key);
	if (++pc->nr > kvmm_htable_size(&pc->ht) && pc->ht.bits < pc->max_bits)
		pc_grow(pc);
	/* reachable: pending pages restored from another tier may hang under it */
	if (!pending)
		pc_adopt(pool, pc, ent);
	return ent;
}

bool kvmm_pagecache_ent_pending(const struct kvmm_cache_ent *ent)
{
	return ent->flags & PC_PENDING;
}

uint32_t kvmm_pagecache_nr_pending(const struct kvmm_pool *pool)
{
	return pool->pagecache ? pool->pagecache->nr_pending : 0;
}

bool kvmm_pagecache_drop_orphan(struct kvmm_pool *pool, struct kvmm_page *pg)
{
	KVMM_BUG_ON(!pg->cache);
	if (!(pg->cache->flags & PC_ORPHAN))
		return false;
	kvmm_pagecache_remove(pool, pg);
	return true;
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

/* The entry of @seq's sealed block @block, resident or swapped; NULL if none. */
static struct kvmm_cache_ent *seq_block_ent(struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_pool *pool = seq->as->pool;

	if (block >= seq->nsealed || block >= seq->nblocks)
		return NULL;
	if (kvmm_pte_is_swap(seq->pte[block]))
		return kvmm_swap_slot_ent(pool, seq->pte[block]);
	if (!kvmm_pte_is_present(seq->pte[block]))
		return NULL;
	return block_page(pool, seq, block)->cache;
}

int kvmm_pagecache_seq_key(struct kvmm_seq *seq, uint32_t block, uint64_t *key)
{
	struct kvmm_cache_ent *ent = seq_block_ent(seq, block);

	if (!ent)
		return -ENOENT;
	*key = ent->key;
	return 0;
}

bool kvmm_pagecache_remote_mark(struct kvmm_seq *seq, uint32_t block)
{
	struct kvmm_cache_ent *ent = seq_block_ent(seq, block);

	if (!ent || ent->frame == KVMM_FRAME_NONE || (ent->flags & PC_REMOTE))
		return false;
	ent->flags |= PC_REMOTE;
	return true;
}

bool kvmm_pagecache_ent_remote(const struct kvmm_cache_ent *ent)
{
	return ent->flags & PC_REMOTE;
}

void kvmm_pagecache_ent_set_remote(struct kvmm_cache_ent *ent)
{
	ent->flags |= PC_REMOTE;
}

bool kvmm_pagecache_ent_leaf(const struct kvmm_cache_ent *ent)
{
	return list_empty(&ent->children);
}

int kvmm_pagecache_ent_prefix(const struct kvmm_cache_ent *ent,
			      void (*fn)(void *arg, const uint32_t *tokens, uint32_t n), void *arg)
{
	const struct kvmm_cache_ent **chain, *e = ent;
	uint32_t d;

	if (ent->flags & PC_ORPHAN)
		return -ENOENT;
	chain = malloc(((size_t)ent->depth + 1) * sizeof(*chain));
	if (!chain)
		return -ENOMEM;
	/* from @ent up to its first block: every parent one level up, ending at depth 0 */
	for (d = ent->depth;; d--) {
		if (!e || e->depth != d) {
			free(chain);
			return -ENOENT;
		}
		chain[d] = e;
		if (!d)
			break;
		e = e->parent;
	}
	for (d = 0; d <= ent->depth; d++)
		fn(arg, chain[d]->tokens, chain[d]->ntokens);
	free(chain);
	return 0;
}

static int pc_fail(char *why, size_t len, const struct kvmm_cache_ent *ent, const char *what)
{
	if (why && len)
		snprintf(why, len, "page cache entry %llu (frame %u, key %016llx): %s",
			 (unsigned long long)ent->id, ent->frame, (unsigned long long)ent->key,
			 what);
	return -EUCLEAN;
}

/* @ent points at a live entry of this cache (its page points back at it). */
static bool pc_live(const struct kvmm_pool *pool, const struct kvmm_cache_ent *ent)
{
	if (ent->frame == KVMM_FRAME_NONE)
		return ent->swap && kvmm_swap_slot_ent((struct kvmm_pool *)pool, ent->swap) == ent;
	return ent->frame < pool->nframes && pool->pages[ent->frame].cache == ent;
}

static bool pc_same_block(const struct kvmm_cache_ent *a, const struct kvmm_cache_ent *b)
{
	return a->parent == b->parent && a->depth == b->depth && a->ns_id == b->ns_id &&
	       a->fmt_id == b->fmt_id && a->ntokens == b->ntokens &&
	       !memcmp(a->tokens, b->tokens, (size_t)a->ntokens * sizeof(*a->tokens));
}

/*
 * Where @ent sits in the forest: a first block is a reachable root; a detached entry is an
 * orphan; an attached one is a live entry's child, one block deeper (so the forest is
 * acyclic), keyed from its key, in its namespace and format, and an orphan exactly when
 * its parent is.  A reachable entry is the only one with its block under its parent.
 */
static const char *pc_check_family(const struct kvmm_pool *pool, const struct kvmm_pagecache *pc,
				   const struct kvmm_cache_ent *ent, uint32_t *nchildren)
{
	const struct kvmm_cache_ent *p = ent->parent, *e;
	bool orphan = ent->flags & PC_ORPHAN;

	list_for_each_entry (e, &ent->children, sibling) {
		if (!pc_live(pool, e) || e->parent != ent)
			return "a child does not point back";
		++*nchildren;
	}
	if (ent->flags & ~(PC_ORPHAN | PC_REMOTE | PC_PENDING))
		return "unknown flags";
	if ((ent->flags & PC_PENDING) && !orphan)
		return "pending but reachable";
	if ((ent->flags & PC_PENDING) && p && !(p->flags & PC_PENDING))
		return "pending under an entry that is not";
	if ((ent->flags & PC_PENDING) && !p && (!ent->depth || !pc_pending_node(pc, ent)))
		return "a pending root not in the pending table";
	if (!ent->depth) {
		if (p || ent->parent_key || orphan || !list_empty(&ent->sibling))
			return "first block with a parent or orphaned";
		return NULL;
	}
	if (!p)
		return orphan && list_empty(&ent->sibling) ? NULL : "detached but not an orphan";
	if (!pc_live(pool, p))
		return "parent is not a live entry";
	if (p->depth + 1 != ent->depth || p->key != ent->parent_key || p->ns_id != ent->ns_id ||
	    p->fmt_id != ent->fmt_id)
		return "depth, parent key, namespace or format differs from its parent's";
	if (orphan != !!(p->flags & PC_ORPHAN))
		return "orphan flag differs from its parent's";
	if (orphan)
		return NULL;
	kvmm_htable_for_each_possible (&pc->ht, e, hnode, ent->key) {
		if (e != ent && e->key == ent->key && !(e->flags & PC_ORPHAN) &&
		    pc_same_block(e, ent))
			return "another reachable entry holds the same block";
	}
	return NULL;
}

int kvmm_pagecache_check(struct kvmm_pool *pool, char *why, size_t whylen)
{
	struct kvmm_pagecache *pc = pool->pagecache;
	uint32_t count = 0, attached = 0, nchildren = 0, pending = 0;
	size_t i;

	if (!pc)
		return 0;
	for (i = 0; i < kvmm_htable_size(&pc->ht); i++) {
		struct kvmm_cache_ent *ent;

		hlist_for_each_entry (ent, &pc->ht.buckets[i], hnode) {
			const struct kvmm_page *pg;
			const struct kvmm_ns *ns;
			const char *what;

			count++;
			if (kvmm_htable_bucket(&pc->ht, ent->key) != &pc->ht.buckets[i])
				return pc_fail(why, whylen, ent, "in the wrong bucket");
			if (ent->frame == KVMM_FRAME_NONE) {
				/* swapped: the slot names this entry (swapfile.c checks the rest) */
				if (!pc_live(pool, ent))
					return pc_fail(why, whylen, ent,
						       "swapped but its slot does not point back");
				pg = NULL;
			} else if (ent->frame >= pool->nframes) {
				return pc_fail(why, whylen, ent, "frame out of range");
			} else {
				pg = &pool->pages[ent->frame];
				if (ent->swap)
					return pc_fail(why, whylen, ent, "has a frame and a slot");
			}
			if (pg && (pg->cache != ent || !(pg->flags & KVMM_PG_SEALED)))
				return pc_fail(why, whylen, ent, "its page does not point back");
			if (pg && pg->state != KVMM_PAGE_MAPPED && pg->state != KVMM_PAGE_CACHED)
				return pc_fail(why, whylen, ent, "page neither mapped nor cached");
			if ((pg && pg->ns_id != ent->ns_id) || ent->ns_id == 0 ||
			    ent->ns_id >= KVMM_MAX_NS)
				return pc_fail(why, whylen, ent,
					       "namespace differs from its page's");
			ns = pool->ns[ent->ns_id];
			if (!ns)
				return pc_fail(why, whylen, ent, "namespace gone");
			if (!ent->id || ent->id >= pc->next_id)
				return pc_fail(why, whylen, ent, "bad id");
			if (!ent->ntokens || (pg && pg->ntokens != ent->ntokens))
				return pc_fail(why, whylen, ent,
					       "token count differs from its page's");
			if (pc_hash(pc, ns, ent->parent_key, ent->fmt_id, ent->tokens,
				    ent->ntokens) != ent->key)
				return pc_fail(why, whylen, ent, "key does not match its content");
			what = pc_check_family(pool, pc, ent, &nchildren);
			if (what)
				return pc_fail(why, whylen, ent, what);
			if (ent->parent)
				attached++;
			else if (ent->flags & PC_PENDING)
				pending++;
		}
	}
	if (pending != pc->nr_pending) {
		if (why && whylen)
			snprintf(why, whylen, "page cache holds %u pending roots but counts %u",
				 pending, pc->nr_pending);
		return -EUCLEAN;
	}
	if (count != pc->nr || nchildren != attached) {
		if (why && whylen)
			snprintf(why, whylen,
				 "page cache holds %u entries (%u attached, %u listed as children) "
				 "but counts %u",
				 count, attached, nchildren, pc->nr);
		return -EUCLEAN;
	}
	return 0;
}

int kvmm_pagecache_check_seq(const struct kvmm_seq *seq, char *why, size_t whylen)
{
	const struct kvmm_aspace *as = seq->as;
	const struct kvmm_pool *pool = as->pool;
	const struct kvmm_cache_ent *parent = NULL, *ent;
	uint32_t tpp = as->fmt.tokens_per_page, b;

	for (b = 0; b < seq->nsealed; b++, parent = ent) {
		uint32_t f = kvmm_pte_frame(seq->pte[b]);
		const char *what = NULL;

		if (kvmm_pte_is_swap(seq->pte[b]))
			ent = kvmm_swap_slot_ent((struct kvmm_pool *)pool, seq->pte[b]);
		else
			ent = f < pool->nframes ? pool->pages[f].cache : NULL;
		if (!ent)
			what = "has no cache entry";
		else if (ent->parent != parent || ent->depth != b || (ent->flags & PC_ORPHAN))
			what = "is not a reachable child of the previous block's entry";
		else if (ent->ns_id != as->ns->id || ent->fmt_id != kvmm_seq_key_id(seq) ||
			 ent->ntokens != tpp ||
			 memcmp(ent->tokens, seq->tokens + (size_t)b * tpp,
				(size_t)tpp * sizeof(*ent->tokens)))
			what = "has an entry for other tokens";
		if (what) {
			if (why && whylen)
				snprintf(why, whylen, "seq %llu: sealed block %u (frame %u) %s",
					 (unsigned long long)seq->id, b, f, what);
			return -EUCLEAN;
		}
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
			kvmm_free(ent);
		}
	}
	for (i = 0; pc->pending.buckets && i < kvmm_htable_size(&pc->pending); i++) {
		struct hlist_head *head = &pc->pending.buckets[i];

		while (!hlist_empty(head)) {
			struct pc_pending *p = hlist_entry(head->first, struct pc_pending, hnode);

			hlist_del(&p->hnode);
			free(p);
		}
	}
	kvmm_htable_destroy(&pc->pending);
	kvmm_htable_destroy(&pc->ht);
	free(pc);
	pool->pagecache = NULL;
}
