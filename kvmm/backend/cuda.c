// SPDX-License-Identifier: MIT
/*
 * kvmm/backend/cuda.c - the GPU-memory backend (see cuda.h for the picture).
 *
 * init: the device's primary context (kernels/cuda/drv.c opens the driver with dlopen), a
 * check that it supports VMM and POSIX-fd export, the allocation granularity, then one reserved
 * virtual range of nr_chunks * chunk_size bytes and, per chunk, cuMemCreate (pinned device
 * memory, POSIX-fd handle type), cuMemExportToShareableHandle (the fd we pass to clients) and
 * cuMemMap at its slot; finally cuMemSetAccess read-write for the device over the whole range.
 * The daemon itself never touches frame contents but for copy-on-write (cuMemcpyDtoDAsync),
 * scrub (cuMemsetD8) and swap staging (cuMemcpyDtoHAsync / HtoDAsync on the backend's own
 * non-blocking stream, into pinned buffers from cuMemHostAlloc).  copy and scrub wait for
 * their work before returning, as the core expects of them; the staging copies do not (sync
 * waits).  kvmmd is single-threaded, but every entry point makes the context current anyway,
 * as the core may one day call from a reclaim thread.  Teardown unmaps, releases the handles
 * (the memory lives on while a client still maps an imported handle), closes the fds and
 * frees the range.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "kernels/cuda/cuda_drv.h"
#include "kvmm/backend/cuda.h"

/* per pool: struct kvmm_backend_ctx.priv */
struct cuda_mem {
	const struct kvmm_cuda_drv *d;
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	kvmm_cu_stream stream; /* swap staging */
	kvmm_cu_ptr base;      /* frame 0 */
	uint64_t chunk_size;
	uint64_t reserved; /* nr_chunks * chunk_size */
	uint32_t nr_chunks;
	uint32_t nr_mapped;
	int *fds;
	kvmm_cu_mem_handle *handles;
};

static int cu_fail(kvmm_cu_result r, const char *what)
{
	kvmm_cuda_drv_set_why("%s: %s (CUDA error %d)", what, kvmm_cuda_result_str(r), r);
	kvmm_err("cuda backend: %s", kvmm_cuda_drv_why());
	return kvmm_cuda_errno(r);
}

static void alloc_prop(struct kvmm_cu_mem_alloc_prop *prop, int ordinal)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop->location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = ordinal;
}

/* VMM and fd export on @dev; 0 or -ENOTSUP with the reason recorded */
static int check_device(const struct kvmm_cuda_drv *d, kvmm_cu_device dev, int ordinal)
{
	int vmm = 0, fd = 0;

	d->cuDeviceGetAttribute(&vmm, KVMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				dev);
	d->cuDeviceGetAttribute(
		&fd, KVMM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
	if (!vmm || !fd) {
		kvmm_cuda_drv_set_why("CUDA device %d lacks %s", ordinal,
				      !vmm ? "virtual memory management (cuMemCreate)"
					   : "POSIX file descriptor export");
		return -ENOTSUP;
	}
	return 0;
}

int kvmm_cuda_backend_probe(int device, char *why, size_t len)
{
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	int ret;

	ret = kvmm_cuda_drv_get_device(device, &dev, &ctx);
	if (!ret) {
		ret = check_device(kvmm_cuda_drv_load(), dev, device);
		kvmm_cuda_drv_put_device(dev);
	}
	if (why && len)
		snprintf(why, len, "%s", ret ? kvmm_cuda_drv_why() : "");
	return ret;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static uint64_t round_up64(uint64_t x, uint64_t unit)
{
	return DIV_ROUND_UP(x, unit) * unit;
}

static void cuda_teardown(struct cuda_mem *cm)
{
	const struct kvmm_cuda_drv *d = cm->d;

	d->cuCtxSetCurrent(cm->ctx);
	if (cm->stream) {
		d->cuStreamSynchronize(cm->stream);
		d->cuStreamDestroy(cm->stream);
	}
	for (uint32_t i = 0; i < cm->nr_mapped; i++)
		d->cuMemUnmap(cm->base + (uint64_t)i * cm->chunk_size, cm->chunk_size);
	for (uint32_t i = 0; i < cm->nr_chunks; i++) {
		if (cm->handles && cm->handles[i])
			d->cuMemRelease(cm->handles[i]);
		if (cm->fds && cm->fds[i] >= 0)
			close(cm->fds[i]);
	}
	if (cm->base)
		d->cuMemAddressFree(cm->base, cm->reserved);
	kvmm_cuda_drv_put_device(cm->dev);
	free(cm->handles);
	free(cm->fds);
	free(cm);
}

static int create_chunk(struct cuda_mem *cm, uint32_t i, const struct kvmm_cu_mem_alloc_prop *p)
{
	const struct kvmm_cuda_drv *d = cm->d;
	kvmm_cu_result r;
	int fd = -1;

	r = d->cuMemCreate(&cm->handles[i], cm->chunk_size, p, 0);
	if (r) {
		cm->handles[i] = 0;
		return cu_fail(r, "cuMemCreate");
	}
	r = d->cuMemExportToShareableHandle(&fd, cm->handles[i],
					    KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r)
		return cu_fail(r, "cuMemExportToShareableHandle");
	cm->fds[i] = fd;
	/* like the host backend's memfds: never inherited by a program kvmmd might exec */
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	r = d->cuMemMap(cm->base + (uint64_t)i * cm->chunk_size, cm->chunk_size, 0, cm->handles[i],
			0);
	if (r)
		return cu_fail(r, "cuMemMap");
	cm->nr_mapped = i + 1;
	return 0;
}

static int cuda_setup(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes,
		      int ordinal, uint64_t want_chunk)
{
	struct kvmm_cu_mem_alloc_prop prop;
	struct kvmm_cu_mem_access_desc acc;
	struct cuda_mem *cm;
	uint64_t bytes, unit, cs, nr;
	size_t gran = 0;
	kvmm_cu_result r;
	int ret;

	if (!page_size || !nframes || check_mul_overflow(page_size, (uint64_t)nframes, &bytes))
		return -EINVAL;
	cm = calloc(1, sizeof(*cm));
	if (!cm)
		return -ENOMEM;
	ret = kvmm_cuda_drv_get_device(ordinal, &cm->dev, &cm->ctx);
	if (ret) {
		kvmm_err("cuda backend: %s", kvmm_cuda_drv_why());
		free(cm);
		return ret;
	}
	cm->d = kvmm_cuda_drv_load();
	ret = check_device(cm->d, cm->dev, ordinal);
	if (ret) {
		kvmm_err("cuda backend: %s", kvmm_cuda_drv_why());
		kvmm_cuda_drv_put_device(cm->dev);
		free(cm);
		return ret;
	}
	alloc_prop(&prop, ordinal);
	r = cm->d->cuMemGetAllocationGranularity(&gran, &prop,
						 KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r || !gran) {
		ret = r ? cu_fail(r, "cuMemGetAllocationGranularity") : -EIO;
		kvmm_cuda_drv_put_device(cm->dev);
		free(cm);
		return ret;
	}

	/* chunks are whole pages and whole granules: a multiple of lcm(page_size, gran) */
	unit = page_size / gcd64(page_size, gran) * gran;
	if (want_chunk) {
		if (want_chunk % unit)
			ret = -EINVAL;
		cs = want_chunk;
	} else {
		cs = round_up64(KVMM_CUDA_CHUNK_DEFAULT, unit);
		/* a large pool (a whole GPU) gets larger chunks: ATTACH passes every fd at once */
		if (DIV_ROUND_UP(bytes, cs) > KVMM_CUDA_DEFAULT_MAX_CHUNKS)
			cs = round_up64(DIV_ROUND_UP(bytes, KVMM_CUDA_DEFAULT_MAX_CHUNKS), unit);
		cs = min(cs, round_up64(bytes, unit)); /* no bigger than the pool */
	}
	nr = DIV_ROUND_UP(bytes, cs);
	if (ret || nr > UINT32_MAX || check_mul_overflow(nr, cs, &cm->reserved)) {
		kvmm_cuda_drv_put_device(cm->dev);
		free(cm);
		return -EINVAL;
	}
	cm->chunk_size = cs;
	cm->nr_chunks = (uint32_t)nr;
	cm->fds = malloc(nr * sizeof(int));
	cm->handles = calloc(nr, sizeof(*cm->handles));
	if (!cm->fds || !cm->handles) {
		ret = -ENOMEM;
		goto out_teardown;
	}
	for (uint32_t i = 0; i < cm->nr_chunks; i++)
		cm->fds[i] = -1;

	r = cm->d->cuMemAddressReserve(&cm->base, cm->reserved, 0, 0, 0);
	if (r) {
		cm->base = 0;
		ret = cu_fail(r, "cuMemAddressReserve");
		goto out_teardown;
	}
	for (uint32_t i = 0; i < cm->nr_chunks; i++) {
		ret = create_chunk(cm, i, &prop);
		if (ret)
			goto out_teardown;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = ordinal;
	acc.flags = KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cm->d->cuMemSetAccess(cm->base, cm->reserved, &acc, 1);
	if (r) {
		ret = cu_fail(r, "cuMemSetAccess");
		goto out_teardown;
	}
	r = cm->d->cuStreamCreate(&cm->stream, KVMM_CU_STREAM_NON_BLOCKING);
	if (r) {
		cm->stream = NULL;
		ret = cu_fail(r, "cuStreamCreate");
		goto out_teardown;
	}
	be->page_size = page_size;
	be->nframes = nframes;
	be->priv = cm;
	kvmm_debug("cuda backend: device %d, %u frames of %llu bytes in %u chunks of %llu bytes",
		   ordinal, nframes, (unsigned long long)page_size, cm->nr_chunks,
		   (unsigned long long)cs);
	return 0;

out_teardown:
	cuda_teardown(cm);
	return ret;
}

static int cuda_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	const struct kvmm_cuda_backend *cb = container_of(be->ops, struct kvmm_cuda_backend, ops);

	return cuda_setup(be, page_size, nframes, cb->device, cb->chunk_size);
}

static void cuda_fini(struct kvmm_backend_ctx *be)
{
	if (be->priv)
		cuda_teardown(be->priv);
	be->priv = NULL;
}

/* the pool's memory, current in this thread; NULL for a bad call */
static struct cuda_mem *enter(struct kvmm_backend_ctx *be)
{
	struct cuda_mem *cm = be->priv;

	if (!cm || cm->d->cuCtxSetCurrent(cm->ctx))
		return NULL;
	return cm;
}

static kvmm_cu_ptr frame_ptr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	return ((struct cuda_mem *)be->priv)->base + (uint64_t)frame * be->page_size;
}

/* device memory: no host address */
static void *cuda_frame_addr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	(void)be;
	(void)frame;
	return NULL;
}

static int cuda_copy(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes)
{
	struct cuda_mem *cm = enter(be);
	kvmm_cu_result r;

	if (!cm || dst >= be->nframes || src >= be->nframes || bytes > be->page_size)
		return -EINVAL;
	if (dst == src || !bytes)
		return 0;
	r = cm->d->cuMemcpyDtoDAsync(frame_ptr(be, dst), frame_ptr(be, src), bytes, cm->stream);
	if (!r)
		r = cm->d->cuStreamSynchronize(cm->stream);
	return r ? cu_fail(r, "copy (cuMemcpyDtoDAsync)") : 0;
}

static int cuda_scrub(struct kvmm_backend_ctx *be, uint32_t frame)
{
	struct cuda_mem *cm = enter(be);
	kvmm_cu_result r;

	if (!cm || frame >= be->nframes)
		return -EINVAL;
	/*
	 * cuMemsetD8 runs on the legacy stream, which does not wait for our non-blocking one:
	 * a staging copy still in flight there could read the frame after the scrub, or write
	 * it after.  So finish those first, then wait for the memset, which orders the scrub
	 * before any later use.
	 */
	r = cm->d->cuStreamSynchronize(cm->stream);
	if (!r)
		r = cm->d->cuMemsetD8(frame_ptr(be, frame), 0, be->page_size);
	if (!r)
		r = cm->d->cuStreamSynchronize(NULL);
	return r ? cu_fail(r, "scrub (cuMemsetD8)") : 0;
}

static int check_frames(struct kvmm_backend_ctx *be, const void *host, const uint32_t *frames,
			uint32_t nr)
{
	if (nr && (!host || !frames))
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++)
		if (frames[i] >= be->nframes)
			return -EINVAL;
	return 0;
}

static int cuda_copy_to_host(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames,
			     uint32_t nr)
{
	struct cuda_mem *cm = enter(be);
	int ret = cm ? check_frames(be, host, frames, nr) : -EINVAL;

	for (uint32_t i = 0; !ret && i < nr; i++) {
		kvmm_cu_result r = cm->d->cuMemcpyDtoHAsync(
			(char *)host + (uint64_t)i * be->page_size, frame_ptr(be, frames[i]),
			be->page_size, cm->stream);

		if (r)
			ret = cu_fail(r, "swap-out copy (cuMemcpyDtoHAsync)");
	}
	return ret;
}

static int cuda_copy_from_host(struct kvmm_backend_ctx *be, const uint32_t *frames,
			       const void *host, uint32_t nr)
{
	struct cuda_mem *cm = enter(be);
	int ret = cm ? check_frames(be, host, frames, nr) : -EINVAL;

	for (uint32_t i = 0; !ret && i < nr; i++) {
		kvmm_cu_result r = cm->d->cuMemcpyHtoDAsync(
			frame_ptr(be, frames[i]), (const char *)host + (uint64_t)i * be->page_size,
			be->page_size, cm->stream);

		if (r)
			ret = cu_fail(r, "swap-in copy (cuMemcpyHtoDAsync)");
	}
	return ret;
}

static int cuda_sync(struct kvmm_backend_ctx *be)
{
	struct cuda_mem *cm = enter(be);
	kvmm_cu_result r;

	if (!cm)
		return -EINVAL;
	r = cm->d->cuStreamSynchronize(cm->stream);
	return r ? cu_fail(r, "swap copy (cuStreamSynchronize)") : 0;
}

static void *cuda_host_alloc(struct kvmm_backend_ctx *be, uint64_t bytes)
{
	struct cuda_mem *cm = enter(be);
	void *p = NULL;
	kvmm_cu_result r;

	if (!cm || !bytes) {
		errno = EINVAL;
		return NULL;
	}
	/* portable: pinned for every context, whatever thread later copies */
	r = cm->d->cuMemHostAlloc(&p, bytes, KVMM_CU_MEMHOSTALLOC_PORTABLE);
	if (r) {
		errno = -cu_fail(r, "staging buffer (cuMemHostAlloc)");
		return NULL;
	}
	return p;
}

static void cuda_host_free(struct kvmm_backend_ctx *be, void *host, uint64_t bytes)
{
	struct cuda_mem *cm = enter(be);

	(void)bytes;
	if (cm && host)
		cm->d->cuMemFreeHost(host);
}

static const struct kvmm_backend_ops cuda_ops = {
	.name = "cuda",
	.init = cuda_init,
	.fini = cuda_fini,
	.frame_addr = cuda_frame_addr,
	.copy = cuda_copy,
	.scrub = cuda_scrub,
	.copy_to_host = cuda_copy_to_host,
	.copy_from_host = cuda_copy_from_host,
	.sync = cuda_sync,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
};

void kvmm_cuda_backend_init(struct kvmm_cuda_backend *cb, int device, uint64_t chunk_size)
{
	cb->ops = cuda_ops;
	cb->device = device;
	cb->chunk_size = chunk_size;
}

bool kvmm_is_cuda_backend(const struct kvmm_backend_ctx *be)
{
	return be && be->ops && be->ops->init == cuda_init;
}

int kvmm_cuda_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size)
{
	struct cuda_mem *cm;

	if (!kvmm_is_cuda_backend(be))
		return -EOPNOTSUPP;
	cm = be->priv;
	if (!cm)
		return -EINVAL;
	if (fds)
		*fds = cm->fds;
	if (nr_chunks)
		*nr_chunks = cm->nr_chunks;
	if (chunk_size)
		*chunk_size = cm->chunk_size;
	return 0;
}

uint64_t kvmm_cuda_backend_base(struct kvmm_backend_ctx *be)
{
	struct cuda_mem *cm;

	if (!kvmm_is_cuda_backend(be))
		return 0;
	cm = be->priv;
	return cm ? cm->base : 0;
}
