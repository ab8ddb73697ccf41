// SPDX-License-Identifier: MIT
/*
 * kvmm/kmalloc.c - kvmmd's metadata allocator (include/kmalloc.h).  A normal build sends every
 * call to one jemalloc arena of its own, created on first use, with the thread cache bypassed
 * (MALLOCX_TCACHE_NONE): the metadata is allocated by the single epoll thread and kvswapd, so
 * the cache would buy little, and without it the arena's statistics are exact at every epoch
 * (no bytes parked in a thread's cache) and a free never lands in another arena's cache.  A
 * sanitizer build (KVMM_SANITIZE) uses libc, which ASan intercepts, and counts live bytes with
 * malloc_usable_size() so that the same statistics stay meaningful there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmalloc.h"

#ifndef KVMM_SANITIZE
#define KVMM_SANITIZE 0
#endif

static uint64_t nr_allocs, nr_frees;

static inline void count(uint64_t *ctr)
{
	__atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
}

#if KVMM_SANITIZE

#include <malloc.h>

static uint64_t live_bytes;

static void account(void *p, bool add)
{
	size_t n = malloc_usable_size(p);

	if (add)
		__atomic_fetch_add(&live_bytes, n, __ATOMIC_RELAXED);
	else
		__atomic_fetch_sub(&live_bytes, n, __ATOMIC_RELAXED);
}

void *kvmm_malloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p) {
		account(p, true);
		count(&nr_allocs);
	}
	return p;
}

void *kvmm_calloc(size_t nmemb, size_t size)
{
	void *p;

	/* checked here: ASan reports an overflowing calloc as an error instead of NULL */
	if (size && nmemb > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (p) {
		account(p, true);
		count(&nr_allocs);
	}
	return p;
}

void *kvmm_realloc(void *ptr, size_t size)
{
	size_t old = ptr ? malloc_usable_size(ptr) : 0;
	void *p = realloc(ptr, size ? size : 1);

	if (!p)
		return NULL;
	__atomic_fetch_sub(&live_bytes, old, __ATOMIC_RELAXED);
	account(p, true);
	if (!ptr)
		count(&nr_allocs);
	return p;
}

void kvmm_free(void *ptr)
{
	if (!ptr)
		return;
	account(ptr, false);
	count(&nr_frees);
	free(ptr);
}

int kvmm_kmalloc_stats(struct kvmm_kmalloc_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->backend = "libc";
	st->nr_allocs = __atomic_load_n(&nr_allocs, __ATOMIC_RELAXED);
	st->nr_frees = __atomic_load_n(&nr_frees, __ATOMIC_RELAXED);
	st->allocated = __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
	st->active = st->allocated;
	st->total_allocated = st->allocated;
	return 0;
}

#else /* jemalloc */

#include <jemalloc/jemalloc.h>

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned int arena_ind;
static bool arena_ok;
static int arena_flags = MALLOCX_TCACHE_NONE;

static void arena_init(void)
{
	unsigned int ind;
	size_t sz = sizeof(ind);

	/* Without an arena of our own (cannot happen short of ENOMEM) use the default ones. */
	if (mallctl("arenas.create", &ind, &sz, NULL, 0) != 0)
		return;
	arena_ind = ind;
	arena_ok = true;
	arena_flags = MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE;
}

static inline int flags(void)
{
	pthread_once(&arena_once, arena_init);
	return arena_flags;
}

void *kvmm_malloc(size_t size)
{
	void *p = mallocx(size ? size : 1, flags());

	if (p)
		count(&nr_allocs);
	else
		errno = ENOMEM;
	return p;
}

void *kvmm_calloc(size_t nmemb, size_t size)
{
	size_t bytes;
	void *p;

	if (size && nmemb > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	bytes = nmemb * size;
	p = mallocx(bytes ? bytes : 1, flags() | MALLOCX_ZERO);
	if (p)
		count(&nr_allocs);
	else
		errno = ENOMEM;
	return p;
}

void *kvmm_realloc(void *ptr, size_t size)
{
	void *p;

	if (!ptr)
		return kvmm_malloc(size);
	p = rallocx(ptr, size ? size : 1, flags());
	if (!p)
		errno = ENOMEM;
	return p;
}

void kvmm_free(void *ptr)
{
	if (!ptr)
		return;
	count(&nr_frees);
	dallocx(ptr, flags());
}

static int ctl_size(const char *name, uint64_t *out)
{
	size_t v, sz = sizeof(v);

	if (mallctl(name, &v, &sz, NULL, 0) != 0)
		return -ENOENT;
	*out = v;
	return 0;
}

static int arena_size(const char *leaf, uint64_t *out)
{
	char name[96];

	snprintf(name, sizeof(name), "stats.arenas.%u.%s", arena_ind, leaf);
	return ctl_size(name, out);
}

int kvmm_kmalloc_stats(struct kvmm_kmalloc_stats *st)
{
	uint64_t epoch = 1, small = 0, large = 0, pactive = 0, page = 0, base = 0, internal = 0;
	size_t esz = sizeof(epoch);
	bool enabled = false;
	size_t bsz = sizeof(enabled);
	int ret = 0;

	memset(st, 0, sizeof(*st));
	st->backend = "jemalloc";
	flags();
	st->arena = arena_ind;
	st->nr_allocs = __atomic_load_n(&nr_allocs, __ATOMIC_RELAXED);
	st->nr_frees = __atomic_load_n(&nr_frees, __ATOMIC_RELAXED);
	/* a jemalloc built without --enable-stats answers every stats.* name with ENOENT */
	if (mallctl("config.stats", &enabled, &bsz, NULL, 0) != 0 || !enabled)
		return -ENOTSUP;
	if (mallctl("epoch", &epoch, &esz, &epoch, sizeof(epoch)) != 0)
		return -EIO;
	if (arena_ok) {
		ret |= arena_size("small.allocated", &small);
		ret |= arena_size("large.allocated", &large);
		ret |= arena_size("pactive", &pactive);
		ret |= arena_size("resident", &st->resident);
		ret |= arena_size("base", &base);
		ret |= arena_size("internal", &internal);
		ret |= ctl_size("arenas.page", &page);
		st->allocated = small + large;
		st->active = pactive * page;
		st->metadata = base + internal;
	}
	ret |= ctl_size("stats.allocated", &st->total_allocated);
	ret |= ctl_size("stats.resident", &st->total_resident);
	ret |= ctl_size("stats.metadata", &st->total_metadata);
	return ret ? -ENOENT : 0;
}

#endif /* KVMM_SANITIZE */
