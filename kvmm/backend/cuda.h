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
 * base + i * chunk_size with no special case.  A pool may span a tensor-parallel group of
 * devices (kvmm_cuda_backend_init_group): each holds every frame (its shard of the heads) in
 * chunks and a reserved range of its own, and a client maps the chunks of its own device.  Swap staging uses pinned host buffers
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

/* devices of one tensor-parallel group (one node's GPUs) */
#define KVMM_CUDA_MAX_DEVICES 16

struct kvmm_cuda_backend {
	struct kvmm_backend_ops ops;	    /* pass &ops as kvmm_pool_params.backend */
	int devices[KVMM_CUDA_MAX_DEVICES]; /* CUDA device ordinals, member order */
	uint32_t nr_devices;
	uint64_t chunk_size; /* bytes per chunk on each device; 0 = default */
};

/*
 * Configure @cb: its ops become the cuda backend on @device with this chunk size (checked at
 * pool creation: -EINVAL unless a multiple of the page size and the device's granularity).
 * As with the host backend, @cb must outlive every pool created with it.
 */
void kvmm_cuda_backend_init(struct kvmm_cuda_backend *cb, int device, uint64_t chunk_size);

/*
 * The same over a tensor-parallel group: frame n is page_size bytes at base_d + n * page_size
 * on each of the @nr devices (member d = devices[d]), every device with its own chunks of
 * chunk_size bytes; copy and scrub act on all of them, swap staging moves all of them (a
 * frame's bytes are nr * page_size, device d's at d * page_size).  -EINVAL for no device,
 * more than KVMM_CUDA_MAX_DEVICES, an ordinal outside 0-1023 or one named twice.
 */
int kvmm_cuda_backend_init_group(struct kvmm_cuda_backend *cb, const int *devices, uint32_t nr,
				 uint64_t chunk_size);

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
 * kvmm/ipc/server.h): POSIX fds from cuMemExportToShareableHandle, owned by the backend,
 * close-on-exec, nr_chunks per device, every chunk chunk_size bytes; member-major: member
 * d's chunks in chunk order are (*fds)[d * nr_chunks ...] (be->nr_devices members).  0,
 * -EOPNOTSUPP when @be is not a cuda backend, -EINVAL when it is not initialized.
 */
int kvmm_cuda_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size);

/*
 * Which member of the group is the device with this UUID (cuDeviceGetUuid): its index, or
 * -ENODEV (none), -EOPNOTSUPP / -EINVAL as above (a kvmm_backend_member_fn).
 */
int kvmm_cuda_backend_member(struct kvmm_backend_ctx *be, const uint8_t uuid[16]);

/* Member @member's ordinal and UUID (either may be NULL): 0, or -EINVAL. */
int kvmm_cuda_backend_device(struct kvmm_backend_ctx *be, uint32_t member, int *ordinal,
			     uint8_t uuid[16]);

/* Device address of frame 0 in this process on member 0, or 0. */
uint64_t kvmm_cuda_backend_base(struct kvmm_backend_ctx *be);

/* The same on member @member, or 0 (no such member). */
uint64_t kvmm_cuda_backend_base_on(struct kvmm_backend_ctx *be, uint32_t member);

#endif /* KVMM_BACKEND_CUDA_H */
