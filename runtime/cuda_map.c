// SPDX-License-Identifier: MIT
/*
 * runtime/cuda_map.c - libkvmm's side of the cuda backend: mapping a namespace's pool chunks,
 * received as POSIX fds in the ATTACH reply, into this process's device address space by the
 * same frame-to-offset rule as the daemon (kvmm/backend/cuda.c) and the host backend: chunk i
 * at base + i * chunk_size of one reserved range, so frame n is at base + n * page_size.
 *
 * Each fd is imported (cuMemImportFromShareableHandle), mapped (cuMemMap) and its handle
 * released at once: the mapping keeps the memory alive, and unmapping the range later is all
 * the teardown there is.  Access is granted read-write to the device for the whole range in
 * one cuMemSetAccess; or, for a client that protects its pool (wprotect.c) when a frame is a
 * whole number of the driver's granules, each frame is its own mapping (cuMemMap at an offset
 * of the chunk), the range starts read-only, and wprotect.c makes a run of frames writable or
 * read-only again with one cuMemSetAccess (kvmm_client_cuda_protect).  The driver comes from kernels/cuda/drv.c (dlopen), so libkvmm starts
 * on machines without one and this call says -ENODEV there.  kvmm_attach (client.c) calls in
 * here when HELLO says the daemon's pools are in GPU memory (KVMM_BACKEND_CUDA), and
 * kvmm_frame_devptr() hands out the device addresses.  The file is built in every libkvmm: in
 * a build without CUDA (no nvcc) the same calls exist and fail with -ENODEV, saying so.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generated/autoconf.h"
#include "runtime/libkvmm.h"

#if CONFIG_KVMM_CUDA
#include "kernels/cuda/cuda_drv.h"

struct kvmm_cuda_map {
	const struct kvmm_cuda_drv *d;
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	kvmm_cu_ptr base;
	uint64_t bytes; /* reserved */
	uint64_t chunk_size;
	uint64_t piece;	    /* bytes per mapping: chunk_size, or page_size (frames alone) */
	uint32_t nr_mapped; /* mappings made, from the range's start */
	int device;	    /* the ordinal access is given to */
};

const char *kvmm_cuda_map_why(void)
{
	return kvmm_cuda_drv_why();
}

static int map_fail(kvmm_cu_result r, const char *what)
{
	kvmm_cuda_drv_set_why("%s: %s (CUDA error %d)", what, kvmm_cuda_result_str(r), r);
	return kvmm_cuda_errno(r);
}

void kvmm_cuda_unmap(struct kvmm_cuda_map *m)
{
	if (!m)
		return;
	m->d->cuCtxSetCurrent(m->ctx);
	for (uint32_t i = 0; i < m->nr_mapped; i++)
		m->d->cuMemUnmap(m->base + (uint64_t)i * m->piece, m->piece);
	if (m->base)
		m->d->cuMemAddressFree(m->base, m->bytes);
	kvmm_cuda_drv_put_device(m->dev);
	free(m);
}

/* cuMemSetAccess of [off, off + len) of the range: read-write or read-only. 0 or -errno. */
static int set_access(struct kvmm_cuda_map *m, uint64_t off, uint64_t len, bool rw)
{
	struct kvmm_cu_mem_access_desc acc = {0};
	kvmm_cu_result r;

	acc.location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = m->device;
	acc.flags =
		rw ? KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE : KVMM_CU_MEM_ACCESS_FLAGS_PROT_READ;
	r = m->d->cuMemSetAccess(m->base + off, len, &acc, 1);
	return r ? map_fail(r, rw ? "cuMemSetAccess (read-write)" : "cuMemSetAccess (read-only)")
		 : 0;
}

/*
 * Map the chunks, each as mappings of @piece bytes (chunk_size, or a frame), the whole range
 * read-only (@ro) or read-write.
 */
static int map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		   uint64_t piece, bool ro, struct kvmm_cuda_map **out, uint64_t *devptr)
{
	struct kvmm_cuda_map *m;
	kvmm_cu_result r;
	int ret;

	if (!fds || !nr_chunks || !chunk_size || !out || !devptr ||
	    chunk_size > UINT64_MAX / nr_chunks || !piece || chunk_size % piece)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = kvmm_cuda_drv_get_device(device, &m->dev, &m->ctx);
	if (ret) {
		free(m);
		return ret;
	}
	m->d = kvmm_cuda_drv_load();
	m->device = device;
	m->piece = piece;
	m->chunk_size = chunk_size;
	m->bytes = chunk_size * nr_chunks;
	r = m->d->cuMemAddressReserve(&m->base, m->bytes, 0, 0, 0);
	if (r) {
		m->base = 0;
		ret = map_fail(r, "cuMemAddressReserve");
		goto out_unmap;
	}
	for (uint32_t i = 0; i < nr_chunks; i++) {
		kvmm_cu_mem_handle h = 0;

		if (fds[i] < 0) {
			ret = -EINVAL;
			goto out_unmap;
		}
		r = m->d->cuMemImportFromShareableHandle(
			&h, (void *)(uintptr_t)fds[i],
			KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (r) {
			ret = map_fail(r, "cuMemImportFromShareableHandle");
			goto out_unmap;
		}
		r = KVMM_CUDA_SUCCESS;
		for (uint64_t off = 0; off < chunk_size && !r; off += piece) {
			r = m->d->cuMemMap(m->base + (uint64_t)i * chunk_size + off, piece, off, h,
					   0);
			if (!r)
				m->nr_mapped++;
		}
		/* mapped or not, the handle is not needed any more: the mappings hold the memory */
		m->d->cuMemRelease(h);
		if (r) {
			ret = map_fail(r,
				       piece == chunk_size
					       ? "cuMemMap (chunk size differs from the daemon's?)"
					       : "cuMemMap of one frame of a chunk");
			goto out_unmap;
		}
	}
	ret = set_access(m, 0, m->bytes, !ro);
	if (ret)
		goto out_unmap;
	*out = m;
	*devptr = m->base;
	return 0;

out_unmap:
	kvmm_cuda_unmap(m);
	return ret;
}

int kvmm_cuda_map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		      struct kvmm_cuda_map **out, uint64_t *devptr)
{
	return map_fds(device, fds, nr_chunks, chunk_size, chunk_size, false, out, devptr);
}

/*
 * A frame can be protected alone when it is a whole number of the device's granules (the
 * unit of cuMemMap and so of cuMemSetAccess): 0, or -EOPNOTSUPP (and why).
 */
static int frames_protectable(int device, uint64_t page_size, uint64_t chunk_size)
{
	const struct kvmm_cuda_drv *d = kvmm_cuda_drv_load();
	struct kvmm_cu_mem_alloc_prop prop = {0};
	size_t gran = 0;
	kvmm_cu_result r;

	if (!d)
		return -ENODEV;
	prop.type = KVMM_CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	prop.requested_handle_types = KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	r = d->cuMemGetAllocationGranularity(&gran, &prop, KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r)
		return map_fail(r, "cuMemGetAllocationGranularity");
	if (!gran || !page_size || page_size % gran || chunk_size % page_size) {
		kvmm_cuda_drv_set_why(
			"a %llu-byte frame is not a whole number of the GPU's %zu-byte "
			"mapping granules: it cannot be made read-only alone",
			(unsigned long long)page_size, gran);
		return -EOPNOTSUPP;
	}
	return 0;
}

int kvmm_client_cuda_protect(struct kvmm_client *c, uint64_t off, uint64_t len, bool rw)
{
	if (!c->cuda || !c->cuda_ro)
		return -EOPNOTSUPP;
	return set_access(c->cuda, off, len, rw);
}

static void set_why(const char *why)
{
	kvmm_cuda_drv_set_why("%s", why);
}

/* a device's UUID needs no context: nothing is created (and torn down) before the mapping */
static int device_uuid(int device, uint8_t uuid[16])
{
	const struct kvmm_cuda_drv *d = kvmm_cuda_drv_load();
	kvmm_cu_device dev;
	kvmm_cu_uuid u;
	kvmm_cu_result r;
	int count = 0;

	if (!d)
		return -ENODEV;
	r = d->cuDeviceGetCount(&count);
	if (r || device >= count) {
		kvmm_cuda_drv_set_why("CUDA device %d: %s (%d device%s)", device,
				      r ? kvmm_cuda_result_str(r) : "no such device", count,
				      count == 1 ? "" : "s");
		return -ENODEV;
	}
	r = d->cuDeviceGet(&dev, device);
	if (!r)
		r = d->cuDeviceGetUuid(&u, dev);
	if (r)
		return map_fail(r, "cuDeviceGetUuid");
	memcpy(uuid, u.bytes, sizeof(u.bytes));
	return 0;
}

#else /* !CONFIG_KVMM_CUDA */

static int device_uuid(int device, uint8_t uuid[16])
{
	(void)device;
	(void)uuid;
	return -ENODEV;
}

static void set_why(const char *why)
{
	(void)why; /* never reached: without CUDA there is no UUID to be refused for */
}

const char *kvmm_cuda_map_why(void)
{
	return "libkvmm was built without CUDA (CONFIG_KVMM_CUDA=n or no nvcc): it cannot map a "
	       "cuda-backend pool";
}

void kvmm_cuda_unmap(struct kvmm_cuda_map *m)
{
	(void)m; /* never handed out */
}

int kvmm_cuda_map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		      struct kvmm_cuda_map **out, uint64_t *devptr)
{
	(void)device;
	if (!fds || !nr_chunks || !chunk_size || !out || !devptr)
		return -EINVAL;
	return -ENODEV;
}

static int frames_protectable(int device, uint64_t page_size, uint64_t chunk_size)
{
	(void)device;
	(void)page_size;
	(void)chunk_size;
	return -ENODEV;
}

static int map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		   uint64_t piece, bool ro, struct kvmm_cuda_map **out, uint64_t *devptr)
{
	(void)piece;
	(void)ro;
	return kvmm_cuda_map_fds(device, fds, nr_chunks, chunk_size, out, devptr);
}

int kvmm_client_cuda_protect(struct kvmm_client *c, uint64_t off, uint64_t len, bool rw)
{
	(void)c;
	(void)off;
	(void)len;
	(void)rw;
	return -EOPNOTSUPP;
}

#endif /* CONFIG_KVMM_CUDA */

/*
 * $KVMM_CUDA_DEVICE: an ordinal of this process (CUDA_VISIBLE_DEVICES applies), default 0, or
 * "none" (-1): the handle maps no device (a scheduler process that only allocates).
 */
static int cuda_device_env(int *device)
{
	const char *env = getenv("KVMM_CUDA_DEVICE");
	char *end;
	long v;

	*device = 0;
	if (!env || !env[0])
		return 0;
	if (!strcmp(env, "none")) {
		*device = -1;
		return 0;
	}
	errno = 0;
	v = strtol(env, &end, 10);
	if (errno || *end || v < 0 || v > 1023)
		return -EINVAL;
	*device = (int)v;
	return 0;
}

int kvmm_client_cuda_map(struct kvmm_client *c, const int *fds, uint32_t nr_chunks,
			 uint64_t chunk_size)
{
	uint64_t devptr = 0;
	int device, err;

	err = cuda_device_env(&device);
	if (err)
		return err;
	c->cuda = NULL;
	c->cuda_device = device;
	if (device < 0)
		return 0; /* "none": the chunks are not mapped (the caller closes them) */
	c->cuda_ro = false;
	if (c->wp_want) {
		/*
		 * Read-only frames (wprotect.c grants the handle's own): each frame its own
		 * mapping. A driver that maps allocations only whole or refuses read-only access
		 * gets the pool read-write instead, and kvmm_write_protected() says 0.
		 */
		err = frames_protectable(device, c->page_size, chunk_size);
		if (!err)
			err = map_fds(device, fds, nr_chunks, chunk_size, c->page_size, true,
				      &c->cuda, &devptr);
		if (!err) {
			c->cuda_ro = true;
			goto mapped;
		}
		c->cuda = NULL;
		c->wp_off_reason = err;
	}
	err = kvmm_cuda_map_fds(device, fds, nr_chunks, chunk_size, &c->cuda, &devptr);
	if (err) {
		c->cuda = NULL;
		return err;
	}
mapped:
	c->cuda_device = device;
	c->devbase = devptr;
	return 0;
}

int kvmm_client_cuda_uuid(struct kvmm_client *c, uint8_t uuid[16])
{
	int device, err;

	err = cuda_device_env(&device);
	if (err)
		return err;
	c->cuda_device = device;
	return device < 0 ? 1 : device_uuid(device, uuid);
}

void kvmm_client_cuda_refused(struct kvmm_client *c)
{
	char why[224];

	snprintf(why, sizeof(why),
		 "this process's CUDA device %d ($KVMM_CUDA_DEVICE) is not one of the daemon's %u "
		 "device(s) holding the pool: run it on a GPU of kvmmd's --device group",
		 c->cuda_device, c->nr_devices ? c->nr_devices : 1);
	set_why(why);
}

void kvmm_client_cuda_unmap(struct kvmm_client *c)
{
	if (!c->cuda)
		return;
	kvmm_cuda_unmap(c->cuda);
	c->cuda = NULL;
	c->cuda_ro = false;
	c->devbase = 0;
}

uint64_t kvmm_frame_devptr(const kvmm_client_t *c, uint32_t frame)
{
	if (!c || !c->cuda || frame >= c->nr_frames) {
		/* host memory, or a cuda pool this handle does not map ($KVMM_CUDA_DEVICE=none) */
		errno = c && !c->cuda && (c->base || c->backend == KVMM_BACKEND_CUDA) ? EOPNOTSUPP
										      : EINVAL;
		return 0;
	}
	return c->devbase + (uint64_t)frame * c->page_size;
}
