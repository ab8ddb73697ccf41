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
 * one cuMemSetAccess.  The driver comes from kernels/cuda/drv.c (dlopen), so libkvmm starts
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
	uint32_t nr_mapped; /* chunks mapped, from chunk 0 */
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
		m->d->cuMemUnmap(m->base + (uint64_t)i * m->chunk_size, m->chunk_size);
	if (m->base)
		m->d->cuMemAddressFree(m->base, m->bytes);
	kvmm_cuda_drv_put_device(m->dev);
	free(m);
}

int kvmm_cuda_map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		      struct kvmm_cuda_map **out, uint64_t *devptr)
{
	struct kvmm_cu_mem_access_desc acc = {0};
	struct kvmm_cuda_map *m;
	kvmm_cu_result r;
	int ret;

	if (!fds || !nr_chunks || !chunk_size || !out || !devptr ||
	    chunk_size > UINT64_MAX / nr_chunks)
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
		r = m->d->cuMemMap(m->base + (uint64_t)i * chunk_size, chunk_size, 0, h, 0);
		/* mapped or not, the handle is not needed any more: the mapping holds the memory */
		m->d->cuMemRelease(h);
		if (r) {
			ret = map_fail(r, "cuMemMap (chunk size differs from the daemon's?)");
			goto out_unmap;
		}
		m->nr_mapped = i + 1;
	}
	acc.location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = device;
	acc.flags = KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = m->d->cuMemSetAccess(m->base, m->bytes, &acc, 1);
	if (r) {
		ret = map_fail(r, "cuMemSetAccess");
		goto out_unmap;
	}
	*out = m;
	*devptr = m->base;
	return 0;

out_unmap:
	kvmm_cuda_unmap(m);
	return ret;
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
	err = kvmm_cuda_map_fds(device, fds, nr_chunks, chunk_size, &c->cuda, &devptr);
	if (err) {
		c->cuda = NULL;
		return err;
	}
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
