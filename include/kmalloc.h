/* SPDX-License-Identifier: MIT */
/*
 * kmalloc.h - the allocator for kvmmd's own metadata (sequence page tables and token arrays,
 * page-cache entries, swap-tier slot maps, ipc sessions).  In a normal build the calls go to a
 * dedicated jemalloc arena (created on first use with "arenas.create"), so that the daemon's
 * metadata neither shares pages with libc allocations of the libraries it links nor hides in
 * their statistics, and kvmm_kmalloc_stats() reports exactly what the metadata costs.  In a
 * sanitizer build (KVMM_SANITIZE) they are plain libc calls, because ASan intercepts malloc
 * but not jemalloc's mallocx; the same statistics then come from counting live bytes.
 *
 * Pointers from kvmm_malloc/kvmm_calloc/kvmm_realloc must be freed with kvmm_free (and only
 * those): in a jemalloc build, free(3) of such a pointer is a bug.  Implementation in
 * kvmm/kmalloc.c; programs that link kvmm/built-in.a also link $(KVMM_JEMALLOC_LDLIBS).
 */
#ifndef KVMM_KMALLOC_H
#define KVMM_KMALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Like malloc(3), calloc(3), realloc(3) and free(3); a size of 0 is taken as 1. */
void *kvmm_malloc(size_t size);
void *kvmm_calloc(size_t nmemb, size_t size);
void *kvmm_realloc(void *ptr, size_t size);
void kvmm_free(void *ptr);

/*
 * Statistics of the metadata allocator, in bytes.  For jemalloc they are the arena's (after an
 * "epoch" refresh): allocated (bytes in live allocations), active (pages backing them),
 * resident (physically resident pages of the arena, its metadata included), metadata (the
 * arena's own bookkeeping: base + internal); total_* are the whole process's jemalloc numbers
 * ("stats.allocated", "stats.resident", "stats.metadata").  For libc: allocated and active
 * are the live bytes counted by the wrapper (usable sizes), the others 0.
 */
struct kvmm_kmalloc_stats {
	const char *backend; /* "jemalloc" or "libc" */
	unsigned int arena;  /* jemalloc arena index (0 for libc) */
	uint64_t nr_allocs;  /* successful allocations (realloc counts once) */
	uint64_t nr_frees;
	uint64_t allocated;
	uint64_t active;
	uint64_t resident;
	uint64_t metadata;
	uint64_t total_allocated;
	uint64_t total_resident;
	uint64_t total_metadata;
};

/* Fill *st; returns 0 or a negative errno (the fields are then zero but backend is set). */
int kvmm_kmalloc_stats(struct kvmm_kmalloc_stats *st);

#endif /* KVMM_KMALLOC_H */
