// SPDX-License-Identifier: MIT
/*
 * kvmm/ns.c - namespaces: the sharing and accounting domains of a pool.
 *
 * A namespace is what a memcg and a user namespace are together in Linux: it is charged for
 * the frames its sequences map (used) and for the sealed pages it leaves in the page cache
 * (cached), it may carry a limit on the two together, and it keys the page-cache hash with a
 * secret drawn from getrandom() when it is created, so that the content key of a block is
 * different in every namespace and one tenant can neither hit nor probe another's prefixes.
 * Namespaces live in pool->ns[] by id (1 .. KVMM_MAX_NS - 1; 0 means "no namespace").  The
 * charges themselves are moved by the allocator (alloc/free) and by the mapping code (used
 * <-> cached); this file creates, finds, limits and destroys.  Locking: the caller holds the
 * pool lock, like every call on a pool.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "compiler.h"
#include "hash.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"

/* Fill @buf from the kernel's CSPRNG; getrandom() may return short reads or EINTR. */
static int fill_random(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t r = getrandom(p, len, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/*
 * The 64-bit XXH3 seed of the namespace: both secret words folded together, the second one
 * mixed first so that neither word can cancel the other out.  The secret words themselves
 * are also hashed as part of every key (pagecache.c), so the key depends on all 128 bits.
 */
static uint64_t ns_hash_seed(const uint64_t secret[2])
{
	return secret[0] ^ kvmm_hash_mix64(secret[1]);
}

struct kvmm_ns *kvmm_ns_find(struct kvmm_pool *pool, const char *name)
{
	unsigned int i;

	if (!pool || !name)
		return NULL;
	for (i = 1; i < KVMM_MAX_NS; i++) {
		struct kvmm_ns *ns = pool->ns[i];

		if (ns && !strncmp(ns->name, name, sizeof(ns->name)))
			return ns;
	}
	return NULL;
}

int kvmm_ns_set_secret(struct kvmm_ns *ns, const uint64_t secret[2])
{
	if (!ns || !ns->pool || !secret || (!secret[0] && !secret[1]))
		return -EINVAL;
	/* keys made under the old secret would become unreachable, and wrong under the new */
	if (ns->used || ns->cached || kvmm_pagecache_count(ns->pool))
		return -EBUSY;
	ns->secret[0] = secret[0];
	ns->secret[1] = secret[1];
	ns->hash_seed = ns_hash_seed(ns->secret);
	ns->secret_set = true;
	return 0;
}

int kvmm_ns_create(struct kvmm_pool *pool, const char *name, uint32_t limit, int priority,
		   struct kvmm_ns **out)
{
	struct kvmm_ns *ns;
	unsigned int id;
	size_t len;
	int ret;

	if (!pool || !name || !out)
		return -EINVAL;
	*out = NULL;
	len = strnlen(name, sizeof(ns->name));
	if (!len || len >= sizeof(ns->name))
		return -EINVAL;
	if (kvmm_ns_find(pool, name))
		return -EEXIST;
	for (id = 1; id < KVMM_MAX_NS; id++)
		if (!pool->ns[id])
			break;
	if (id == KVMM_MAX_NS)
		return -ENOSPC;

	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	ret = fill_random(ns->secret, sizeof(ns->secret));
	if (ret)
		goto out_free;
	ns->hash_seed = ns_hash_seed(ns->secret);
	ns->id = (uint16_t)id;
	memcpy(ns->name, name, len);
	ns->limit = limit;
	ns->priority = priority;
	ns->pool = pool;
	pool->ns[id] = ns;
	*out = ns;
	return 0;

out_free:
	free(ns);
	return ret;
}

/*
 * A lower limit takes effect at once as far as the namespace's own cache allows (clean
 * cached pages are dropped down to it); mapped frames are never taken away, the namespace
 * simply cannot allocate until it is back under its limit.
 */
int kvmm_ns_set_limit(struct kvmm_ns *ns, uint32_t limit)
{
	uint64_t charged;

	if (!ns || !ns->pool || (limit && (limit < ns->min || limit < ns->low)))
		return -EINVAL;
	ns->limit = limit;
	charged = (uint64_t)ns->used + ns->cached;
	if (limit && charged > limit)
		kvmm_reclaim(ns->pool, ns, (uint32_t)min_t(uint64_t, charged - limit, UINT32_MAX));
	return 0;
}

int kvmm_ns_set_protection(struct kvmm_ns *ns, uint32_t min, uint32_t low)
{
	if (!ns || !ns->pool || (low && min > low) ||
	    (ns->limit && (min > ns->limit || low > ns->limit)))
		return -EINVAL;
	ns->min = min;
	ns->low = low;
	return 0;
}

/*
 * Destroying drops the namespace's clean cache itself (nothing maps those pages, and the
 * cache would be unreachable without the secret), but refuses with -EBUSY while a frame is
 * still mapped for it or an address space still belongs to it.  Frames that last held its
 * data are marked so the allocator scrubs them even if a new namespace reuses the id.
 */
int kvmm_ns_destroy(struct kvmm_ns *ns)
{
	struct kvmm_aspace *as;
	struct kvmm_pool *pool;
	uint32_t f;

	if (!ns || !ns->pool || ns->id == 0 || ns->id >= KVMM_MAX_NS || ns->pool->ns[ns->id] != ns)
		return -EINVAL;
	pool = ns->pool;
	/* a swap-out write of a freed sequence's page holds its frame until it completes */
	if (ns->used && pool->swap)
		kvmm_swap_poll(pool, true);
	if (ns->used)
		return -EBUSY;
	list_for_each_entry (as, &pool->aspaces, node)
		if (as->ns == ns)
			return -EBUSY;
	if (ns->cached)
		kvmm_reclaim(pool, ns, ns->cached);
	if (KVMM_WARN_ON(ns->cached))
		return -EBUSY;
	/* its demoted (swapped) cached pages go too: nothing may name a dead namespace */
	kvmm_swap_drop_ns(pool, ns);

	for (f = 0; f < pool->nframes; f++)
		if (pool->pages[f].data_ns == ns->id)
			pool->pages[f].data_ns = KVMM_NS_DEAD;
	pool->ns[ns->id] = NULL;
	explicit_bzero(ns->secret, sizeof(ns->secret));
	ns->hash_seed = 0;
	free(ns);
	return 0;
}

void kvmm_ns_destroy_all(struct kvmm_pool *pool)
{
	unsigned int i;

	for (i = 1; i < KVMM_MAX_NS; i++) {
		struct kvmm_ns *ns = pool->ns[i];

		if (!ns)
			continue;
		explicit_bzero(ns->secret, sizeof(ns->secret));
		free(ns);
		pool->ns[i] = NULL;
	}
}
