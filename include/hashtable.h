/* SPDX-License-Identifier: MIT */
/*
 * hashtable.h - chained hash tables with a power-of-two number of hlist buckets and integer
 * keys. The table stores no keys and no comparator: an object embeds a struct hlist_node,
 * is added under the bucket of its key, and a lookup walks the one bucket the key can be
 * in (hash_for_each_possible) comparing the full key itself, since different keys share
 * buckets. Two forms: a fixed-size array declared with DEFINE_HASHTABLE/DECLARE_HASHTABLE
 * whose size is part of its type, and struct kvmm_htable whose size is chosen at run time
 * (for instance from the pool size). Neither resizes nor locks; the owner serializes.
 */
#ifndef KVMM_HASHTABLE_H
#define KVMM_HASHTABLE_H

#include <errno.h>
#include <stdlib.h>

#include "compiler.h"
#include "hash.h"
#include "list.h"

/* ------------------------------------------------------------------------------------ */
/* Fixed size: struct hlist_head name[1 << bits] */

/* A table with 2^bits empty buckets, defined and initialized (file or block scope). */
#define DEFINE_HASHTABLE(name, bits) \
	struct hlist_head name[1U << (bits)] = {[0 ...((1U << (bits)) - 1)] = HLIST_HEAD_INIT}

/* A table with 2^bits buckets, e.g. as a struct member; hash_init() it before use. */
#define DECLARE_HASHTABLE(name, bits) struct hlist_head name[1U << (bits)]

#define HASH_SIZE(name) ARRAY_SIZE(name)
#define HASH_BITS(name) ((unsigned int)ilog2(HASH_SIZE(name)))

/*
 * Bucket index of an integer key: 32-bit keys take the cheaper hash_32. Use hash_ptr() or a
 * (uintptr_t) cast for pointer keys.
 */
#define hash_min(val, bits)                                \
	(sizeof(val) <= 4 ? hash_32((uint32_t)(val), bits) \
			  : (uint32_t)hash_64((uint64_t)(val), bits))

static inline void kvmm_hash_init_buckets(struct hlist_head *buckets, size_t n)
{
	for (size_t i = 0; i < n; i++)
		INIT_HLIST_HEAD(&buckets[i]);
}

static inline bool kvmm_hash_buckets_empty(const struct hlist_head *buckets, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!hlist_empty(&buckets[i]))
			return false;
	return true;
}

#define hash_init(table) kvmm_hash_init_buckets(table, HASH_SIZE(table))
#define hash_empty(table) kvmm_hash_buckets_empty(table, HASH_SIZE(table))

/* Add node under key. Adding a second object under an equal key is allowed. */
#define hash_add(table, node, key) hlist_add_head(node, &(table)[hash_min(key, HASH_BITS(table))])

/* Remove node from whatever table holds it; safe on an unhashed node. */
static inline void hash_del(struct hlist_node *node)
{
	hlist_del_init(node);
}

/* Is node in a table? (nodes start unhashed after INIT_HLIST_NODE or hash_del) */
static inline bool hash_hashed(const struct hlist_node *node)
{
	return !hlist_unhashed(node);
}

/*
 * Visit every object: bkt is an unsigned bucket cursor, obj the entry cursor. A break in the
 * body leaves obj on the object and bkt on its bucket: a finished bucket walk leaves obj
 * NULL, which is what lets the bucket loop advance.
 */
#define hash_for_each(table, bkt, obj, member)                                             \
	for ((bkt) = 0, (obj) = NULL; !(obj) && (bkt) < HASH_SIZE(table); (bkt) += !(obj)) \
		hlist_for_each_entry (obj, &(table)[bkt], member)

/* Same, and obj may be deleted in the body; tmp is a struct hlist_node *. */
#define hash_for_each_safe(table, bkt, tmp, obj, member)                                   \
	for ((bkt) = 0, (obj) = NULL; !(obj) && (bkt) < HASH_SIZE(table); (bkt) += !(obj)) \
		hlist_for_each_entry_safe (obj, tmp, &(table)[bkt], member)

/* Visit the objects that may have key: compare the real key in the body. */
#define hash_for_each_possible(table, obj, member, key) \
	hlist_for_each_entry (obj, &(table)[hash_min(key, HASH_BITS(table))], member)

#define hash_for_each_possible_safe(table, obj, tmp, member, key) \
	hlist_for_each_entry_safe (obj, tmp, &(table)[hash_min(key, HASH_BITS(table))], member)

/* ------------------------------------------------------------------------------------ */
/* Size chosen at run time: struct kvmm_htable, 64-bit keys */

/* Tables beyond 2^KVMM_HTABLE_MAX_BITS buckets are refused as a likely unit mistake. */
#define KVMM_HTABLE_MAX_BITS 30

struct kvmm_htable {
	struct hlist_head *buckets;
	unsigned int bits;
};

/* Allocate 2^bits empty buckets. Returns 0, -EINVAL for bits out of range, or -ENOMEM. */
static inline __must_check int kvmm_htable_init(struct kvmm_htable *ht, unsigned int bits)
{
	ht->buckets = NULL;
	ht->bits = 0;
	if (bits > KVMM_HTABLE_MAX_BITS)
		return -EINVAL;
	/* calloc's zeroes are empty buckets: an empty hlist_head is a NULL first pointer. */
	ht->buckets = calloc((size_t)1 << bits, sizeof(*ht->buckets));
	if (!ht->buckets)
		return -ENOMEM;
	ht->bits = bits;
	return 0;
}

/* Free the buckets (the objects are the caller's); ht may then be init'ed again. */
static inline void kvmm_htable_destroy(struct kvmm_htable *ht)
{
	free(ht->buckets);
	ht->buckets = NULL;
	ht->bits = 0;
}

static inline size_t kvmm_htable_size(const struct kvmm_htable *ht)
{
	return (size_t)1 << ht->bits;
}

static inline struct hlist_head *kvmm_htable_bucket(const struct kvmm_htable *ht, uint64_t key)
{
	return &ht->buckets[hash_64(key, ht->bits)];
}

static inline void kvmm_htable_add(struct kvmm_htable *ht, struct hlist_node *node, uint64_t key)
{
	hlist_add_head(node, kvmm_htable_bucket(ht, key));
}

static inline void kvmm_htable_del(struct hlist_node *node)
{
	hlist_del_init(node);
}

static inline bool kvmm_htable_empty(const struct kvmm_htable *ht)
{
	return kvmm_hash_buckets_empty(ht->buckets, kvmm_htable_size(ht));
}

#define kvmm_htable_for_each(ht, bkt, obj, member)                                             \
	for ((bkt) = 0, (obj) = NULL; !(obj) && (bkt) < kvmm_htable_size(ht); (bkt) += !(obj)) \
		hlist_for_each_entry (obj, &(ht)->buckets[bkt], member)

#define kvmm_htable_for_each_safe(ht, bkt, tmp, obj, member)                                   \
	for ((bkt) = 0, (obj) = NULL; !(obj) && (bkt) < kvmm_htable_size(ht); (bkt) += !(obj)) \
		hlist_for_each_entry_safe (obj, tmp, &(ht)->buckets[bkt], member)

#define kvmm_htable_for_each_possible(ht, obj, member, key) \
	hlist_for_each_entry (obj, kvmm_htable_bucket(ht, key), member)

#define kvmm_htable_for_each_possible_safe(ht, obj, tmp, member, key) \
	hlist_for_each_entry_safe (obj, tmp, kvmm_htable_bucket(ht, key), member)

#endif /* KVMM_HASHTABLE_H */
