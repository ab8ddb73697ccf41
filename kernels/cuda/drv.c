// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/drv.c - opening the CUDA driver at run time: dlopen of libcuda.so.1, dlsym of
 * each entry point kvmm uses into one struct kvmm_cuda_drv, cuInit, and the translation of
 * driver results into errno values and words.
 *
 * Loading happens once per process under a mutex; success or failure is remembered (a machine
 * does not grow a GPU while a process runs), so every later caller gets the same answer cheaply.
 * A failure is never fatal here: the caller gets -ENODEV and kvmm_cuda_drv_why() tells a
 * person what was missing ("libcuda.so.1: cannot open shared object file", "cuInit: no CUDA-
 * capable device is detected", ...).  The handle is never dlclosed: the driver keeps threads
 * and state that cannot be unloaded safely.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_drv.h"

static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvmm_cuda_drv drv;
static int drv_state; /* 0 not tried, 1 loaded, -1 failed (under drv_lock) */
static char drv_why[256];

/* one row per member of struct kvmm_cuda_drv: where it goes and the symbol it comes from */
struct drv_sym {
	size_t off;
	const char *name;     /* the exported symbol (the _v2 name where cuda.h uses one) */
	const char *fallback; /* an older name with the same signature, or NULL */
	bool optional;	      /* left NULL when missing (the caller copes) */
};

#define SYM(member, sym)                                                 \
	{                                                                \
		offsetof(struct kvmm_cuda_drv, member), sym, NULL, false \
	}
#define SYM2(member, sym, old)                                          \
	{                                                               \
		offsetof(struct kvmm_cuda_drv, member), sym, old, false \
	}
#define SYM_OPT(member, sym)                                            \
	{                                                               \
		offsetof(struct kvmm_cuda_drv, member), sym, NULL, true \
	}

static const struct drv_sym drv_syms[] = {
	SYM(cuInit, "cuInit"),
	SYM(cuDriverGetVersion, "cuDriverGetVersion"),
	SYM(cuGetErrorString, "cuGetErrorString"),
	SYM(cuDeviceGetCount, "cuDeviceGetCount"),
	SYM(cuDeviceGet, "cuDeviceGet"),
	SYM(cuDeviceGetName, "cuDeviceGetName"),
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
	/* cuda.h maps the call to _v2 since CUDA 11.4 (a MIG instance's own UUID) */
	SYM2(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
	SYM(cuCtxSynchronize, "cuCtxSynchronize"),
	SYM(cuModuleLoadData, "cuModuleLoadData"),
	SYM(cuModuleUnload, "cuModuleUnload"),
	SYM(cuModuleGetFunction, "cuModuleGetFunction"),
	SYM(cuLaunchKernel, "cuLaunchKernel"),
	SYM(cuMemAlloc, "cuMemAlloc_v2"),
	SYM(cuMemFree, "cuMemFree_v2"),
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
	SYM(cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	SYM(cuMemsetD8, "cuMemsetD8_v2"),
	SYM(cuMemHostAlloc, "cuMemHostAlloc"),
	SYM(cuMemFreeHost, "cuMemFreeHost"),
	SYM(cuStreamCreate, "cuStreamCreate"),
	SYM(cuStreamDestroy, "cuStreamDestroy_v2"),
	SYM(cuStreamSynchronize, "cuStreamSynchronize"),
	SYM(cuEventCreate, "cuEventCreate"),
	SYM(cuEventDestroy, "cuEventDestroy_v2"),
	SYM(cuEventRecord, "cuEventRecord"),
	SYM(cuEventSynchronize, "cuEventSynchronize"),
	/* CUDA 13's cuda.h maps the call to _v2; drivers before 12.8 only have the old name */
	SYM2(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
	SYM(cuMemCreate, "cuMemCreate"),
	SYM(cuMemRelease, "cuMemRelease"),
	SYM(cuMemExportToShareableHandle, "cuMemExportToShareableHandle"),
	SYM(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle"),
	SYM(cuMemAddressReserve, "cuMemAddressReserve"),
	SYM(cuMemAddressFree, "cuMemAddressFree"),
	SYM(cuMemMap, "cuMemMap"),
	SYM(cuMemUnmap, "cuMemUnmap"),
	SYM(cuMemSetAccess, "cuMemSetAccess"),
	SYM(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
	SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor,
	    "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
	SYM_OPT(cuMemAllocAsync, "cuMemAllocAsync"),
	SYM_OPT(cuMemFreeAsync, "cuMemFreeAsync"),
};

void kvmm_cuda_drv_set_why(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(drv_why, sizeof(drv_why), fmt, ap);
	va_end(ap);
}

const char *kvmm_cuda_drv_why(void)
{
	return drv_why;
}

const char *kvmm_cuda_result_str(kvmm_cu_result r)
{
	const char *s = NULL;

	if (drv_state == 1 && drv.cuGetErrorString && !drv.cuGetErrorString(r, &s) && s)
		return s;
	switch (r) {
	case KVMM_CUDA_ERROR_STUB_LIBRARY:
		return "the CUDA driver is a stub library (no NVIDIA driver installed)";
	case KVMM_CUDA_ERROR_NO_DEVICE:
		return "no CUDA-capable device is detected";
	default:
		return "CUDA driver error";
	}
}

int kvmm_cuda_errno(kvmm_cu_result r)
{
	switch (r) {
	case KVMM_CUDA_SUCCESS:
		return 0;
	case KVMM_CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case KVMM_CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	case KVMM_CUDA_ERROR_STUB_LIBRARY:
	case KVMM_CUDA_ERROR_NO_DEVICE:
	case KVMM_CUDA_ERROR_INVALID_DEVICE:
	case KVMM_CUDA_ERROR_NO_BINARY_FOR_GPU:
		return -ENODEV;
	case KVMM_CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

static int drv_open(void)
{
	const char *path = getenv("KVMM_LIBCUDA");
	kvmm_cu_result r;
	void *lib;
	size_t i;

	if (!path || !*path)
		path = "libcuda.so.1";
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		kvmm_cuda_drv_set_why("no CUDA driver: %s", dlerror());
		return -ENODEV;
	}
	for (i = 0; i < sizeof(drv_syms) / sizeof(drv_syms[0]); i++) {
		const struct drv_sym *s = &drv_syms[i];
		void *fn = dlsym(lib, s->name);

		if (!fn && s->fallback)
			fn = dlsym(lib, s->fallback);
		if (!fn && s->optional)
			continue;
		if (!fn) {
			kvmm_cuda_drv_set_why("CUDA driver %s lacks %s (driver too old)", path,
					      s->name);
			goto out_close;
		}
		memcpy((char *)&drv + s->off, &fn, sizeof(fn));
	}
	drv_state = 1; /* for kvmm_cuda_result_str() below */
	r = drv.cuInit(0);
	if (r) {
		drv_state = -1;
		kvmm_cuda_drv_set_why("cuInit: %s (error %d)", kvmm_cuda_result_str(r), r);
		goto out_close;
	}
	/* kept open for the life of the process: see the file comment */
	return 0;

out_close:
	memset(&drv, 0, sizeof(drv));
	dlclose(lib);
	return -ENODEV;
}

const struct kvmm_cuda_drv *kvmm_cuda_drv_load(void)
{
	int ok;

	pthread_mutex_lock(&drv_lock);
	if (!drv_state)
		drv_state = drv_open() ? -1 : 1;
	ok = drv_state == 1;
	pthread_mutex_unlock(&drv_lock);
	if (!ok) {
		errno = ENODEV;
		return NULL;
	}
	return &drv;
}

int kvmm_cuda_drv_get_device(int ordinal, kvmm_cu_device *dev, kvmm_cu_ctx *ctx)
{
	const struct kvmm_cuda_drv *d = kvmm_cuda_drv_load();
	kvmm_cu_result r;
	int count = 0;

	if (!d)
		return -ENODEV;
	r = d->cuDeviceGetCount(&count);
	if (r || ordinal < 0 || ordinal >= count) {
		kvmm_cuda_drv_set_why("CUDA device %d: %s (%d device%s)", ordinal,
				      r ? kvmm_cuda_result_str(r) : "no such device", count,
				      count == 1 ? "" : "s");
		return -ENODEV;
	}
	r = d->cuDeviceGet(dev, ordinal);
	if (!r)
		r = d->cuDevicePrimaryCtxRetain(ctx, *dev);
	if (r) {
		kvmm_cuda_drv_set_why("CUDA device %d: %s", ordinal, kvmm_cuda_result_str(r));
		return kvmm_cuda_errno(r);
	}
	r = d->cuCtxSetCurrent(*ctx);
	if (r) {
		d->cuDevicePrimaryCtxRelease(*dev);
		kvmm_cuda_drv_set_why("cuCtxSetCurrent: %s", kvmm_cuda_result_str(r));
		return kvmm_cuda_errno(r);
	}
	return 0;
}

void kvmm_cuda_drv_put_device(kvmm_cu_device dev)
{
	const struct kvmm_cuda_drv *d = kvmm_cuda_drv_load();

	if (d)
		d->cuDevicePrimaryCtxRelease(dev);
}
