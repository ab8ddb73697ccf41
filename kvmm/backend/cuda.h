/* SPDX-License-Identifier: MIT */
/*
 * kvmm/backend/cuda.h - the GPU-memory backend kvmmd shares with its clients: a pool's frames
 * live in CUDA VMM allocations (cuMemCreate, one per chunk, exportable as POSIX file
 * descriptors) mapped back to back into one reserved device virtual range, so frame n is at
 * base + n * page_size in the daemon and, once a client has imported the same chunk fds and
 * mapped them the same way (runtime/cuda_map.c, kvmm_cuda_map_fds()), in every client of the
 * namespace too: the host backend's rule, on the device.
 *
 * Every chunk is exactly chunk_size bytes (the last one too: the pool is rounded up to whole
 * chunks, and frames past nframes are never handed out), a multiple of both the page size and
 * the device's allocation granularity (2 MiB on current GPUs), so a client maps chunk i at
 * base + i * chunk_size with no special case.  Swap staging uses pinned host buffers
 * (host_alloc) and asynchronous copies on a stream of the daemon's (copy_to_host,
 * copy_from_host, sync in struct kvmm_backend_ops).
 *
 * Built only when CONFIG_KVMM_CUDA found nvcc; without a GPU every entry point fails with
 * -ENODEV and kvmm_cuda_drv_why() (kernels/cuda/cuda_drv.h) says why.
 */
#ifndef KVMM_BACKEND_CUDA_H
#define KVMM_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmm/mm.h"

/*
 * Chunk size when none is given: 64 MiB, rounded up to the page size and the granularity, and
 * larger for a pool that would need more than KVMM_CUDA_DEFAULT_MAX_CHUNKS chunks (a pool of
 * a whole GPU's memory): ATTACH passes every chunk fd in one message (at most 253).
 */
#define KVMM_CUDA_CHUNK_DEFAULT (UINT64_C(64) << 20)
#define KVMM_CUDA_DEFAULT_MAX_CHUNKS 128

struct kvmm_cuda_backend {
	struct kvmm_backend_ops ops; /* pass &ops as kvmm_pool_params.backend / server backend */
	int device;		     /* CUDA device ordinal */
	uint64_t chunk_size;	     /* bytes; 0 = default */
};

/*
 * Configure @cb: its ops become the cuda backend on @device with this chunk size (checked at
 * pool creation: -EINVAL unless a multiple of the page size and the device's granularity).
 * As with the host backend, @cb must outlive every pool created with it.
 */
void kvmm_cuda_backend_init(struct kvmm_cuda_backend *cb, int device, uint64_t chunk_size);

/* Whether @be is an instance of the cuda backend. */
bool kvmm_is_cuda_backend(const struct kvmm_backend_ctx *be);

/*
 * Whether @device can hold a pool: a driver, the device, VMM and POSIX-fd export support.
 * 0, or -ENODEV / -ENOTSUP with the reason in @why (always NUL-terminated).  kvmmd calls this
 * before anything else so that --backend cuda without a GPU fails at once, in words.
 */
int kvmm_cuda_backend_probe(int device, char *why, size_t len);

/*
 * The chunk fds of a cuda-backend pool, for SCM_RIGHTS (a kvmm_backend_chunks_fn of
 * kvmm/ipc/server.h): nr_chunks POSIX fds from cuMemExportToShareableHandle, owned by the
 * backend, close-on-exec, in chunk order, every chunk chunk_size bytes.  0, -EOPNOTSUPP when
 * @be is not a cuda backend, -EINVAL when it is not initialized.
 */
int kvmm_cuda_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size);

/* Device address of frame 0 in this process, or 0. */
uint64_t kvmm_cuda_backend_base(struct kvmm_backend_ctx *be);

#endif /* KVMM_BACKEND_CUDA_H */
