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
 *
 * A tensor-parallel group (kvmm_cuda_backend_init_group) repeats all of that per device: each
 * member has its context, stream, reserved range, chunks and exported fds (member-major in
 * fds[]), and the ops loop over the members, each with its own context current.
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

/* one device of the group: its chunks, mapped back to back at base */
struct cuda_dev {
	int ordinal;
	bool have_dev; /* primary context retained */
	kvmm_cu_device dev;
	kvmm_cu_ctx ctx;
	kvmm_cu_stream stream; /* copies, scrub and swap staging */
	kvmm_cu_ptr base;      /* frame 0 */
	uint32_t nr_mapped;
	kvmm_cu_mem_handle *handles;
	uint8_t uuid[16];
};

/* per pool: struct kvmm_backend_ctx.priv */
struct cuda_mem {
	const struct kvmm_cuda_drv *d;
	uint64_t chunk_size;
	uint64_t reserved;  /* nr_chunks * chunk_size, on each device */
	uint32_t nr_chunks; /* per device */
	uint32_t nr_devs;
	int *fds; /* nr_devs * nr_chunks, member-major */
	struct cuda_dev devs[];
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

	for (uint32_t k = 0; k < cm->nr_devs; k++) {
		struct cuda_dev *cd = &cm->devs[k];

		if (!cd->have_dev)
			continue;
		d->cuCtxSetCurrent(cd->ctx);
		if (cd->stream) {
			d->cuStreamSynchronize(cd->stream);
			d->cuStreamDestroy(cd->stream);
		}
		for (uint32_t i = 0; i < cd->nr_mapped; i++)
			d->cuMemUnmap(cd->base + (uint64_t)i * cm->chunk_size, cm->chunk_size);
		for (uint32_t i = 0; cd->handles && i < cm->nr_chunks; i++)
			if (cd->handles[i])
				d->cuMemRelease(cd->handles[i]);
		if (cd->base)
			d->cuMemAddressFree(cd->base, cm->reserved);
		kvmm_cuda_drv_put_device(cd->dev);
		free(cd->handles);
	}
	for (uint64_t i = 0; cm->fds && i < (uint64_t)cm->nr_devs * cm->nr_chunks; i++)
		if (cm->fds[i] >= 0)
			close(cm->fds[i]);
	free(cm->fds);
	free(cm);
}

static int create_chunk(struct cuda_mem *cm, struct cuda_dev *cd, int *fdp, uint32_t i,
			const struct kvmm_cu_mem_alloc_prop *p)
{
	const struct kvmm_cuda_drv *d = cm->d;
	kvmm_cu_result r;
	int fd = -1;

	r = d->cuMemCreate(&cd->handles[i], cm->chunk_size, p, 0);
	if (r) {
		cd->handles[i] = 0;
		return cu_fail(r, "cuMemCreate");
	}
	r = d->cuMemExportToShareableHandle(&fd, cd->handles[i],
					    KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r)
		return cu_fail(r, "cuMemExportToShareableHandle");
	*fdp = fd;
	/* like the host backend's memfds: never inherited by a program kvmmd might exec */
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	r = d->cuMemMap(cd->base + (uint64_t)i * cm->chunk_size, cm->chunk_size, 0, cd->handles[i],
			0);
	if (r)
		return cu_fail(r, "cuMemMap");
	cd->nr_mapped = i + 1;
	return 0;
}

/* Open member @cd's device: context, checks, UUID, allocation granularity into @gran. */
static int open_device(struct cuda_mem *cm, struct cuda_dev *cd, size_t *gran)
{
	struct kvmm_cu_mem_alloc_prop prop;
	kvmm_cu_uuid uuid;
	kvmm_cu_result r;
	int ret;

	ret = kvmm_cuda_drv_get_device(cd->ordinal, &cd->dev, &cd->ctx);
	if (ret) {
		kvmm_err("cuda backend: device %d: %s", cd->ordinal, kvmm_cuda_drv_why());
		return ret;
	}
	cd->have_dev = true;
	cm->d = kvmm_cuda_drv_load();
	ret = check_device(cm->d, cd->dev, cd->ordinal);
	if (ret) {
		kvmm_err("cuda backend: %s", kvmm_cuda_drv_why());
		return ret;
	}
	r = cm->d->cuDeviceGetUuid(&uuid, cd->dev);
	if (r)
		return cu_fail(r, "cuDeviceGetUuid");
	memcpy(cd->uuid, uuid.bytes, sizeof(cd->uuid));
	alloc_prop(&prop, cd->ordinal);
	*gran = 0;
	r = cm->d->cuMemGetAllocationGranularity(gran, &prop,
						 KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r || !*gran)
		return r ? cu_fail(r, "cuMemGetAllocationGranularity") : -EIO;
	return 0;
}

/* Reserve, create, export and map member @k's chunks; grant access; its stream. */
static int map_device(struct cuda_mem *cm, uint32_t k)
{
	struct cuda_dev *cd = &cm->devs[k];
	struct kvmm_cu_mem_alloc_prop prop;
	struct kvmm_cu_mem_access_desc acc;
	kvmm_cu_result r;
	int ret;

	r = cm->d->cuCtxSetCurrent(cd->ctx);
	if (r)
		return cu_fail(r, "cuCtxSetCurrent");
	cd->handles = calloc(cm->nr_chunks, sizeof(*cd->handles));
	if (!cd->handles)
		return -ENOMEM;
	r = cm->d->cuMemAddressReserve(&cd->base, cm->reserved, 0, 0, 0);
	if (r) {
		cd->base = 0;
		return cu_fail(r, "cuMemAddressReserve");
	}
	alloc_prop(&prop, cd->ordinal);
	for (uint32_t i = 0; i < cm->nr_chunks; i++) {
		ret = create_chunk(cm, cd, &cm->fds[(uint64_t)k * cm->nr_chunks + i], i, &prop);
		if (ret)
			return ret;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = KVMM_CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = cd->ordinal;
	acc.flags = KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cm->d->cuMemSetAccess(cd->base, cm->reserved, &acc, 1);
	if (r)
		return cu_fail(r, "cuMemSetAccess");
	r = cm->d->cuStreamCreate(&cd->stream, KVMM_CU_STREAM_NON_BLOCKING);
	if (r) {
		cd->stream = NULL;
		return cu_fail(r, "cuStreamCreate");
	}
	return 0;
}

static int cuda_setup(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes,
		      const struct kvmm_cuda_backend *cb)
{
	struct cuda_mem *cm;
	uint64_t bytes, unit = 0, cs, nr, nfds;
	int ret = 0;

	if (!page_size || !nframes || !cb->nr_devices || cb->nr_devices > KVMM_CUDA_MAX_DEVICES ||
	    check_mul_overflow(page_size, (uint64_t)nframes, &bytes))
		return -EINVAL;
	cm = calloc(1, sizeof(*cm) + cb->nr_devices * sizeof(cm->devs[0]));
	if (!cm)
		return -ENOMEM;
	cm->nr_devs = cb->nr_devices;
	for (uint32_t k = 0; k < cm->nr_devs; k++) {
		size_t gran;

		cm->devs[k].ordinal = cb->devices[k];
		ret = open_device(cm, &cm->devs[k], &gran);
		if (ret)
			goto out_teardown;
		/* chunks are whole pages and whole granules of every device: lcm of them all */
		if (!unit)
			unit = page_size / gcd64(page_size, gran) * gran;
		else
			unit = unit / gcd64(unit, gran) * gran;
		for (uint32_t j = 0; j < k; j++) {
			if (!memcmp(cm->devs[j].uuid, cm->devs[k].uuid, 16)) {
				kvmm_cuda_drv_set_why("CUDA devices %d and %d are the same GPU",
						      cm->devs[j].ordinal, cm->devs[k].ordinal);
				kvmm_err("cuda backend: %s", kvmm_cuda_drv_why());
				ret = -EINVAL;
				goto out_teardown;
			}
		}
	}

	if (cb->chunk_size) {
		if (cb->chunk_size % unit)
			ret = -EINVAL;
		cs = cb->chunk_size;
	} else {
		cs = round_up64(KVMM_CUDA_CHUNK_DEFAULT, unit);
		/* a large pool (a whole GPU) gets larger chunks: ATTACH passes every fd at once */
		if (DIV_ROUND_UP(bytes, cs) > KVMM_CUDA_DEFAULT_MAX_CHUNKS)
			cs = round_up64(DIV_ROUND_UP(bytes, KVMM_CUDA_DEFAULT_MAX_CHUNKS), unit);
		cs = min(cs, round_up64(bytes, unit)); /* no bigger than the pool */
	}
	nr = DIV_ROUND_UP(bytes, cs);
	if (ret || nr > UINT32_MAX || check_mul_overflow(nr, cs, &cm->reserved) ||
	    check_mul_overflow(nr, (uint64_t)cm->nr_devs, &nfds) || nfds > INT32_MAX) {
		ret = -EINVAL;
		goto out_teardown;
	}
	cm->chunk_size = cs;
	cm->nr_chunks = (uint32_t)nr;
	cm->fds = malloc(nfds * sizeof(int));
	if (!cm->fds) {
		ret = -ENOMEM;
		goto out_teardown;
	}
	for (uint64_t i = 0; i < nfds; i++)
		cm->fds[i] = -1;
	for (uint32_t k = 0; k < cm->nr_devs; k++) {
		ret = map_device(cm, k);
		if (ret)
			goto out_teardown;
	}
	be->page_size = page_size;
	be->nframes = nframes;
	be->nr_devices = cm->nr_devs;
	be->priv = cm;
	kvmm_debug("cuda backend: %u device(s) from %d, %u frames of %llu bytes in %u chunks of "
		   "%llu bytes each",
		   cm->nr_devs, cm->devs[0].ordinal, nframes, (unsigned long long)page_size,
		   cm->nr_chunks, (unsigned long long)cs);
	return 0;

out_teardown:
	cuda_teardown(cm);
	return ret;
}

static int cuda_init(struct kvmm_backend_ctx *be, uint64_t page_size, uint32_t nframes)
{
	const struct kvmm_cuda_backend *cb = container_of(be->ops, struct kvmm_cuda_backend, ops);

	return cuda_setup(be, page_size, nframes, cb);
}

static void cuda_fini(struct kvmm_backend_ctx *be)
{
	if (be->priv)
		cuda_teardown(be->priv);
	be->priv = NULL;
}

/* Member @k's context current in this thread; 0 or -errno (recorded) */
static int enter_dev(struct cuda_mem *cm, uint32_t k)
{
	kvmm_cu_result r = cm->d->cuCtxSetCurrent(cm->devs[k].ctx);

	return r ? cu_fail(r, "cuCtxSetCurrent") : 0;
}

static kvmm_cu_ptr frame_ptr(struct kvmm_backend_ctx *be, const struct cuda_dev *cd, uint32_t frame)
{
	return cd->base + (uint64_t)frame * be->page_size;
}

/* device memory: no host address */
static void *cuda_frame_addr(struct kvmm_backend_ctx *be, uint32_t frame)
{
	(void)be;
	(void)frame;
	return NULL;
}

/* Wait for every member's stream; the first error. */
static int sync_all(struct cuda_mem *cm, const char *what)
{
	int ret = 0;

	for (uint32_t k = 0; k < cm->nr_devs; k++) {
		kvmm_cu_result r;
		int err = enter_dev(cm, k);

		if (!err) {
			r = cm->d->cuStreamSynchronize(cm->devs[k].stream);
			err = r ? cu_fail(r, what) : 0;
		}
		if (!ret)
			ret = err;
	}
	return ret;
}

/* Every member copies the frame on its own device, in parallel; then all are waited for. */
static int cuda_copy(struct kvmm_backend_ctx *be, uint32_t dst, uint32_t src, uint64_t bytes)
{
	struct cuda_mem *cm = be->priv;
	int ret = 0;

	if (!cm || dst >= be->nframes || src >= be->nframes || bytes > be->page_size)
		return -EINVAL;
	if (dst == src || !bytes)
		return 0;
	for (uint32_t k = 0; !ret && k < cm->nr_devs; k++) {
		struct cuda_dev *cd = &cm->devs[k];
		kvmm_cu_result r;

		ret = enter_dev(cm, k);
		if (ret)
			break;
		r = cm->d->cuMemcpyDtoDAsync(frame_ptr(be, cd, dst), frame_ptr(be, cd, src), bytes,
					     cd->stream);
		if (r)
			ret = cu_fail(r, "copy (cuMemcpyDtoDAsync)");
	}
	/* wait for what was started even after a failure: nothing may run on behind our back */
	return sync_all(cm, "copy (cuStreamSynchronize)") ?: ret;
}

static int cuda_scrub(struct kvmm_backend_ctx *be, uint32_t frame)
{
	struct cuda_mem *cm = be->priv;
	int ret = 0;

	if (!cm || frame >= be->nframes)
		return -EINVAL;
	/*
	 * cuMemsetD8 runs on the device's legacy stream, which does not wait for our
	 * non-blocking one: a staging copy still in flight there could read the frame after the
	 * scrub, or write it after.  So on each member finish those first, then wait for the
	 * memset, which orders the scrub before any later use.
	 */
	for (uint32_t k = 0; !ret && k < cm->nr_devs; k++) {
		kvmm_cu_result r;

		ret = enter_dev(cm, k);
		if (ret)
			break;
		r = cm->d->cuStreamSynchronize(cm->devs[k].stream);
		if (!r)
			r = cm->d->cuMemsetD8(frame_ptr(be, &cm->devs[k], frame), 0, be->page_size);
		if (!r)
			r = cm->d->cuStreamSynchronize(NULL);
		if (r)
			ret = cu_fail(r, "scrub (cuMemsetD8)");
	}
	return ret;
}

static int check_frames(struct kvmm_backend_ctx *be, const void *host, const uint32_t *frames,
			uint32_t nr)
{
	if (!be->priv || (nr && (!host || !frames)))
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++)
		if (frames[i] >= be->nframes)
			return -EINVAL;
	return 0;
}

/*
 * Staging: frame frames[i] is nr_devs * page_size bytes at @host + i * that, member k's
 * copy at k * page_size.  Each member's copies go on its own stream (the devices' copy
 * engines work in parallel); sync waits for all.  @out: device to host (swap-out).
 */
static int stage(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames, uint32_t nr,
		 bool out)
{
	struct cuda_mem *cm = be->priv;
	int ret = check_frames(be, host, frames, nr);

	for (uint32_t k = 0; !ret && nr && k < cm->nr_devs; k++) {
		struct cuda_dev *cd = &cm->devs[k];

		ret = enter_dev(cm, k);
		for (uint32_t i = 0; !ret && i < nr; i++) {
			char *h = (char *)host + ((uint64_t)i * cm->nr_devs + k) * be->page_size;
			kvmm_cu_ptr dp = frame_ptr(be, cd, frames[i]);
			kvmm_cu_result r =
				out ? cm->d->cuMemcpyDtoHAsync(h, dp, be->page_size, cd->stream)
				    : cm->d->cuMemcpyHtoDAsync(dp, h, be->page_size, cd->stream);

			if (r)
				ret = cu_fail(r, out ? "swap-out copy (cuMemcpyDtoHAsync)"
						     : "swap-in copy (cuMemcpyHtoDAsync)");
		}
	}
	return ret;
}

static int cuda_copy_to_host(struct kvmm_backend_ctx *be, void *host, const uint32_t *frames,
			     uint32_t nr)
{
	return stage(be, host, frames, nr, true);
}

static int cuda_copy_from_host(struct kvmm_backend_ctx *be, const uint32_t *frames,
			       const void *host, uint32_t nr)
{
	return stage(be, (void *)host, frames, nr, false);
}

static int cuda_sync(struct kvmm_backend_ctx *be)
{
	struct cuda_mem *cm = be->priv;

	if (!cm)
		return -EINVAL;
	return sync_all(cm, "swap copy (cuStreamSynchronize)");
}

static void *cuda_host_alloc(struct kvmm_backend_ctx *be, uint64_t bytes)
{
	struct cuda_mem *cm = be->priv;
	void *p = NULL;
	kvmm_cu_result r;
	int err;

	if (!cm || !bytes) {
		errno = EINVAL;
		return NULL;
	}
	err = enter_dev(cm, 0);
	if (err) {
		errno = -err;
		return NULL;
	}
	/* portable: pinned for every context (every member's), whatever thread later copies */
	r = cm->d->cuMemHostAlloc(&p, bytes, KVMM_CU_MEMHOSTALLOC_PORTABLE);
	if (r) {
		errno = -cu_fail(r, "staging buffer (cuMemHostAlloc)");
		return NULL;
	}
	return p;
}

static void cuda_host_free(struct kvmm_backend_ctx *be, void *host, uint64_t bytes)
{
	struct cuda_mem *cm = be->priv;

	(void)bytes;
	if (cm && host && !enter_dev(cm, 0))
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
	memset(cb, 0, sizeof(*cb));
	cb->ops = cuda_ops;
	cb->devices[0] = device;
	cb->nr_devices = 1;
	cb->chunk_size = chunk_size;
}

int kvmm_cuda_backend_init_group(struct kvmm_cuda_backend *cb, const int *devices, uint32_t nr,
				 uint64_t chunk_size)
{
	if (!cb || !devices || !nr || nr > KVMM_CUDA_MAX_DEVICES)
		return -EINVAL;
	for (uint32_t k = 0; k < nr; k++) {
		if (devices[k] < 0 || devices[k] > 1023)
			return -EINVAL;
		for (uint32_t j = 0; j < k; j++)
			if (devices[j] == devices[k])
				return -EINVAL;
	}
	kvmm_cuda_backend_init(cb, devices[0], chunk_size);
	memcpy(cb->devices, devices, nr * sizeof(*devices));
	cb->nr_devices = nr;
	return 0;
}

bool kvmm_is_cuda_backend(const struct kvmm_backend_ctx *be)
{
	return be && be->ops && be->ops->init == cuda_init;
}

static struct cuda_mem *cuda_mem_of(struct kvmm_backend_ctx *be, int *err)
{
	if (!kvmm_is_cuda_backend(be)) {
		*err = -EOPNOTSUPP;
		return NULL;
	}
	*err = be->priv ? 0 : -EINVAL;
	return be->priv;
}

int kvmm_cuda_backend_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr_chunks,
			     uint64_t *chunk_size)
{
	int err;
	struct cuda_mem *cm = cuda_mem_of(be, &err);

	if (!cm)
		return err;
	if (fds)
		*fds = cm->fds;
	if (nr_chunks)
		*nr_chunks = cm->nr_chunks;
	if (chunk_size)
		*chunk_size = cm->chunk_size;
	return 0;
}

int kvmm_cuda_backend_member(struct kvmm_backend_ctx *be, const uint8_t uuid[16])
{
	int err;
	struct cuda_mem *cm = cuda_mem_of(be, &err);

	if (!cm)
		return err;
	if (!uuid)
		return -EINVAL;
	for (uint32_t k = 0; k < cm->nr_devs; k++)
		if (!memcmp(cm->devs[k].uuid, uuid, sizeof(cm->devs[k].uuid)))
			return (int)k;
	return -ENODEV;
}

int kvmm_cuda_backend_device(struct kvmm_backend_ctx *be, uint32_t member, int *ordinal,
			     uint8_t uuid[16])
{
	int err;
	struct cuda_mem *cm = cuda_mem_of(be, &err);

	if (!cm)
		return err;
	if (member >= cm->nr_devs)
		return -EINVAL;
	if (ordinal)
		*ordinal = cm->devs[member].ordinal;
	if (uuid)
		memcpy(uuid, cm->devs[member].uuid, sizeof(cm->devs[member].uuid));
	return 0;
}

uint64_t kvmm_cuda_backend_base_on(struct kvmm_backend_ctx *be, uint32_t member)
{
	int err;
	struct cuda_mem *cm = cuda_mem_of(be, &err);

	return cm && member < cm->nr_devs ? cm->devs[member].base : 0;
}

uint64_t kvmm_cuda_backend_base(struct kvmm_backend_ctx *be)
{
	return kvmm_cuda_backend_base_on(be, 0);
}
