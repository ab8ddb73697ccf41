// SPDX-License-Identifier: MIT
/*
 * kvmm/kmalloc.c - kvmmd's metadata allocator (include/kmalloc.h).  A normal build sends every
 * call to one jemalloc arena of its own, created on first use, through an explicit thread
 * cache per thread (tcache.create, never the automatic one): a free lands in a cache only
 * these calls use, so it never reaches another arena's cache, and the statistics flush the
 * reading thread's cache first, so they are exact for it (the epoll thread, which answers
 * the admin verbs).  The cache spares the arena's lock on most calls.  A
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

static inline __attribute__((unused)) void count_add(uint64_t *ctr, uint64_t n)
{
	__atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
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
static pthread_key_t tcache_key;
static bool tcache_key_ok;

/*
 * Each thread that allocates gets an explicit thread cache of its own ("tcache.create"),
 * used only by these calls: it holds only this arena's memory, so nothing of libc's malloc or
 * of another arena ever mixes in, and it spares the arena's lock on most calls (that lock,
 * taken on every call with the cache bypassed, was a tenth of a request's time in the core
 * flow benchmark).  0: not made yet; flags of a thread that could not have one: no cache.
 */
static __thread int thread_flags;
static __thread unsigned int thread_tcache; /* its index + 1; 0: none */

/*
 * The call counters, per thread: the owner bumps its own with a plain load and store (a
 * relaxed atomic store, no locked instruction: a locked add on every free drained the store
 * buffer and cost more than the free), the statistics sum every live thread's under
 * threads_lock plus what ended threads left in the global counters.  A thread that could not
 * be registered counts in the globals, atomically.
 */
struct kcount {
	uint64_t allocs, frees;
	struct kcount *next;
	bool linked;
};
static __thread struct kcount thread_count;
static struct kcount *threads;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void count_alloc(void)
{
	struct kcount *k = &thread_count;

	if (__builtin_expect(k->linked, 1))
		__atomic_store_n(&k->allocs, k->allocs + 1, __ATOMIC_RELAXED);
	else
		count(&nr_allocs);
}

static inline void count_free(void)
{
	struct kcount *k = &thread_count;

	if (__builtin_expect(k->linked, 1))
		__atomic_store_n(&k->frees, k->frees + 1, __ATOMIC_RELAXED);
	else
		count(&nr_frees);
}

static void tcache_gone(void *p)
{
	unsigned int ind = (unsigned int)(uintptr_t)p - 1;
	struct kcount **pp;

	mallctl("tcache.destroy", NULL, NULL, &ind, sizeof(ind));
	/* the thread's counts go to the globals, its record off the list */
	pthread_mutex_lock(&threads_lock);
	for (pp = &threads; *pp; pp = &(*pp)->next) {
		if (*pp == &thread_count) {
			*pp = thread_count.next;
			break;
		}
	}
	thread_count.linked = false;
	count_add(&nr_allocs, thread_count.allocs);
	count_add(&nr_frees, thread_count.frees);
	pthread_mutex_unlock(&threads_lock);
}

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
	/* a thread's cache goes back when the thread ends (kvswapd, a test's threads) */
	tcache_key_ok = pthread_key_create(&tcache_key, tcache_gone) == 0;
}

static int __attribute__((noinline)) flags_slow(void)
{
	unsigned int ind;
	size_t sz = sizeof(ind);

	pthread_once(&arena_once, arena_init);
	thread_flags = arena_flags;
	if (arena_ok && tcache_key_ok && mallctl("tcache.create", &ind, &sz, NULL, 0) == 0) {
		if (pthread_setspecific(tcache_key, (void *)(uintptr_t)(ind + 1)) == 0) {
			thread_tcache = ind + 1;
			thread_flags = MALLOCX_ARENA(arena_ind) | MALLOCX_TCACHE(ind);
			/* the key's destructor unlinks it when the thread ends */
			pthread_mutex_lock(&threads_lock);
			thread_count.next = threads;
			threads = &thread_count;
			thread_count.linked = true;
			pthread_mutex_unlock(&threads_lock);
		} else {
			mallctl("tcache.destroy", NULL, NULL, &ind, sizeof(ind));
		}
	}
	return thread_flags;
}

static inline int flags(void)
{
	int f = thread_flags;

	return __builtin_expect(f != 0, 1) ? f : flags_slow();
}

void *kvmm_malloc(size_t size)
{
	void *p = mallocx(size ? size : 1, flags());

	if (p)
		count_alloc();
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
		count_alloc();
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
	count_free();
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
	/*
	 * Exact for this thread: what its cache holds goes back to the arena first.  Another
	 * thread's cache may still hold a few freed objects (counted as allocated).
	 */
	if (thread_tcache) {
		unsigned int ind = thread_tcache - 1;

		mallctl("tcache.flush", NULL, NULL, &ind, sizeof(ind));
	}
	st->arena = arena_ind;
	pthread_mutex_lock(&threads_lock);
	st->nr_allocs = __atomic_load_n(&nr_allocs, __ATOMIC_RELAXED);
	st->nr_frees = __atomic_load_n(&nr_frees, __ATOMIC_RELAXED);
	for (struct kcount *k = threads; k; k = k->next) {
		st->nr_allocs += __atomic_load_n(&k->allocs, __ATOMIC_RELAXED);
		st->nr_frees += __atomic_load_n(&k->frees, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&threads_lock);
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
