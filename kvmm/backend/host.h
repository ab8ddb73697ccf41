/* SPDX-License-Identifier: MIT */
/*
 * kvmm/backend/host.h - the host-memory backend kvmmd shares with its clients: a pool's
 * frames live in memfd chunks mapped MAP_SHARED back to back, so frame n is at
 * base + n * page_size in the daemon and, once a client has mapped the same chunk fds the
 * same way (SCM_RIGHTS in the ATTACH reply), in every client of the namespace too.
 *
 * Choosing the chunk size (for the ipc engineer and anyone creating pools):
 *
 *   - &kvmm_host_backend_ops as struct kvmm_pool_params.backend uses the defaults: chunks of
 *     KVMM_HOST_CHUNK_DEFAULT bytes (rounded down to a multiple of the page size, at least one
 *     page, at most the whole pool, larger for huge pools: see below), no prefault, scrub by
 *     memset.
 *   - For another chunk size or flags, fill a struct kvmm_host_backend with
 *     kvmm_host_backend_init() and pass &hb->ops as params.backend.  The pool finds the
 *     configuration through that pointer, so @hb must outlive every pool created with it and
 *     its ops must not be copied elsewhere.  One struct serves any number of pools (kvmmd
 *     creates one pool per namespace with the same one).
 *
 * Every chunk is chunk_size bytes except possibly the last, which holds the rest of the pool
 * (a multiple of page_size).  kvmm_host_backend_chunks() tells the effective values; a client
 * reserves nr_chunks * chunk_size bytes and maps chunk i at base + i * chunk_size (the bytes
 * past the end of a short last chunk belong to no frame and must not be touched).
 */
#ifndef KVMM_BACKEND_HOST_H
#define KVMM_BACKEND_HOST_H

#include <stdint.h>

#include "kvmm/mm.h"

/*
 * Chunk size when none is given (0): 64 MiB, the unit of sharing and of future migration,
 * grown (in whole pages) for pools so large that they would need more than
 * KVMM_HOST_DEFAULT_MAX_CHUNKS chunks: ATTACH passes every chunk fd in one message.
 */
#define KVMM_HOST_CHUNK_DEFAULT (UINT64_C(64) << 20)
#define KVMM_HOST_DEFAULT_MAX_CHUNKS 128

/* struct kvmm_host_backend.flags */
enum {
	KVMM_HOST_POPULATE = 1u << 0,	 /* prefault every chunk at init (MAP_POPULATE) */
	KVMM_HOST_PUNCH_SCRUB = 1u << 1, /* scrub by punching a hole (returns the memory) */
};

struct kvmm_host_backend {
	struct kvmm_backend_ops ops; /* pass &ops as kvmm_pool_params.backend */
	uint64_t chunk_size;	     /* bytes, a multiple of the page size; 0 = default */
	unsigned int flags;	     /* KVMM_HOST_* */
};

/* The host backend with default settings. */
extern const struct kvmm_backend_ops kvmm_host_backend_ops;

/*
 * Configure @hb: its ops table becomes the host backend with this chunk size and these flags.
 * Values are checked when a pool is created: a chunk size that is not a multiple of the page
 * size (or of the system page size) makes kvmm_pool_create() fail with -EINVAL.
 */
void kvmm_host_backend_init(struct kvmm_host_backend *hb, uint64_t chunk_size, unsigned int flags);

/* Whether @be is an instance of the host backend (default or configured). */
bool kvmm_is_host_backend(const struct kvmm_backend_ctx *be);

/*
 * The chunks of a host-backend pool: *fds points at nr_chunks memfds (owned by the backend,
 * close-on-exec, sealed against resizing; valid until the pool is destroyed), in chunk order.
 * Any out pointer may be NULL.  0, or -EOPNOTSUPP when @be is not a host backend, -EINVAL when
 * it is not initialized.
 */
int kvmm_host_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size);

/* Base address of the pool in this process (frame 0), or NULL. */
void *kvmm_host_backend_base(struct kvmm_backend_ctx *be);

#endif /* KVMM_BACKEND_HOST_H */
