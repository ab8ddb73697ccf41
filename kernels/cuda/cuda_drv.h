/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/cuda_drv.h - our own declarations of the few CUDA Driver API types, constants
 * and entry points kvmm uses, and the table they are loaded into.
 *
 * kvmm never links libcuda: a machine without the NVIDIA driver has no libcuda.so.1, and a
 * program linked with -lcuda would not even start there (the loader fails, exit 127).  So the
 * driver is opened with dlopen at run time (kvmm_cuda_drv_load) and each entry point looked up
 * by the symbol the driver exports, which for calls NVIDIA re-versioned is the _v2 name that
 * cuda.h's #defines select (cuMemAlloc_v2, cuMemcpyHtoD_v2, ...).  Declaring the types here
 * rather than including NVIDIA's cuda.h keeps the C build independent of the CUDA toolkit: only
 * nvcc needs it, for module.cu.  The values and struct layouts are those of cuda.h (CUDA 12 and
 * 13 agree on them); they are part of the driver's ABI and do not change.
 *
 * Users: cuda.c (kernels), kvmm/backend/cuda.c (kvmmd's pool), runtime/cuda_map.c (libkvmm's
 * mapping of the pool), the tests and the benchmark.
 */
#ifndef KVMM_KERNELS_CUDA_DRV_H
#define KVMM_KERNELS_CUDA_DRV_H

#include <stddef.h>
#include <stdint.h>

/* ---- types: cuda.h's, renamed so both headers can meet; the struct tags are the same ---- */
typedef int kvmm_cu_result;
typedef int kvmm_cu_device;
typedef uint64_t kvmm_cu_ptr;
typedef uint64_t kvmm_cu_mem_handle;
typedef struct CUctx_st *kvmm_cu_ctx;
typedef struct CUmod_st *kvmm_cu_module;
typedef struct CUfunc_st *kvmm_cu_function;
typedef struct CUstream_st *kvmm_cu_stream;
typedef struct CUevent_st *kvmm_cu_event;

/* CUuuid: a device's 16-byte UUID (the same in every process, whatever its ordinal there) */
typedef struct {
	unsigned char bytes[16];
} kvmm_cu_uuid;

/* ---- constants (values from cuda.h) ---- */
enum {
	KVMM_CUDA_SUCCESS = 0,
	KVMM_CUDA_ERROR_INVALID_VALUE = 1,
	KVMM_CUDA_ERROR_OUT_OF_MEMORY = 2,
	KVMM_CUDA_ERROR_STUB_LIBRARY = 34,
	KVMM_CUDA_ERROR_NO_DEVICE = 100,
	KVMM_CUDA_ERROR_INVALID_DEVICE = 101,
	KVMM_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
	KVMM_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	KVMM_CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum {
	KVMM_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	KVMM_CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36, /* kHz */
	KVMM_CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
	KVMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	KVMM_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	KVMM_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	KVMM_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
};

#define KVMM_CU_STREAM_NON_BLOCKING 0x1u
#define KVMM_CU_EVENT_DEFAULT 0x0u
#define KVMM_CU_MEMHOSTALLOC_PORTABLE 0x1u

/* CUmemAllocationHandleType, CUmemLocationType, CUmemAllocationType, CUmemAccess_flags */
#define KVMM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define KVMM_CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define KVMM_CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define KVMM_CU_MEM_ACCESS_FLAGS_PROT_READ 0x1
#define KVMM_CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define KVMM_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0
#define KVMM_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 0x1

/* CUmemLocation */
struct kvmm_cu_mem_location {
	int type; /* KVMM_CU_MEM_LOCATION_TYPE_* */
	int id;	  /* device ordinal */
};

/* CUmemAllocationProp (v1) */
struct kvmm_cu_mem_alloc_prop {
	int type;		    /* KVMM_CU_MEM_ALLOCATION_TYPE_PINNED */
	int requested_handle_types; /* KVMM_CU_MEM_HANDLE_TYPE_* */
	struct kvmm_cu_mem_location location;
	void *win32_handle_meta_data; /* NULL */
	struct {
		unsigned char compression_type;
		unsigned char gpu_direct_rdma_capable;
		unsigned short usage;
		unsigned char reserved[4];
	} alloc_flags;
};

/* CUmemAccessDesc (v1) */
struct kvmm_cu_mem_access_desc {
	struct kvmm_cu_mem_location location;
	int flags; /* KVMM_CU_MEM_ACCESS_FLAGS_* */
};

_Static_assert(sizeof(struct kvmm_cu_mem_alloc_prop) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(struct kvmm_cu_mem_access_desc) == 12, "CUmemAccessDesc layout");

/*
 * The loaded entry points.  Each member is named for the call as cuda.h spells it; the
 * symbol it is loaded from (its _v2 name where there is one) is in drv.c's table.
 */
struct kvmm_cuda_drv {
	kvmm_cu_result (*cuInit)(unsigned int flags);
	kvmm_cu_result (*cuDriverGetVersion)(int *version);
	kvmm_cu_result (*cuGetErrorString)(kvmm_cu_result err, const char **str);
	kvmm_cu_result (*cuDeviceGetCount)(int *count);
	kvmm_cu_result (*cuDeviceGet)(kvmm_cu_device *dev, int ordinal);
	kvmm_cu_result (*cuDeviceGetName)(char *name, int len, kvmm_cu_device dev);
	kvmm_cu_result (*cuDeviceGetAttribute)(int *value, int attrib, kvmm_cu_device dev);
	kvmm_cu_result (*cuDeviceGetUuid)(kvmm_cu_uuid *uuid, kvmm_cu_device dev);
	kvmm_cu_result (*cuDevicePrimaryCtxRetain)(kvmm_cu_ctx *ctx, kvmm_cu_device dev);
	kvmm_cu_result (*cuDevicePrimaryCtxRelease)(kvmm_cu_device dev);
	kvmm_cu_result (*cuCtxSetCurrent)(kvmm_cu_ctx ctx);
	kvmm_cu_result (*cuCtxSynchronize)(void);
	kvmm_cu_result (*cuModuleLoadData)(kvmm_cu_module *mod, const void *image);
	kvmm_cu_result (*cuModuleUnload)(kvmm_cu_module mod);
	kvmm_cu_result (*cuModuleGetFunction)(kvmm_cu_function *fn, kvmm_cu_module mod,
					      const char *name);
	kvmm_cu_result (*cuLaunchKernel)(kvmm_cu_function fn, unsigned int gx, unsigned int gy,
					 unsigned int gz, unsigned int bx, unsigned int by,
					 unsigned int bz, unsigned int shared_bytes,
					 kvmm_cu_stream stream, void **params, void **extra);
	kvmm_cu_result (*cuMemAlloc)(kvmm_cu_ptr *p, size_t bytes);
	kvmm_cu_result (*cuMemFree)(kvmm_cu_ptr p);
	kvmm_cu_result (*cuMemcpyHtoD)(kvmm_cu_ptr dst, const void *src, size_t bytes);
	kvmm_cu_result (*cuMemcpyDtoH)(void *dst, kvmm_cu_ptr src, size_t bytes);
	kvmm_cu_result (*cuMemcpyDtoD)(kvmm_cu_ptr dst, kvmm_cu_ptr src, size_t bytes);
	kvmm_cu_result (*cuMemcpyHtoDAsync)(kvmm_cu_ptr dst, const void *src, size_t bytes,
					    kvmm_cu_stream s);
	kvmm_cu_result (*cuMemcpyDtoHAsync)(void *dst, kvmm_cu_ptr src, size_t bytes,
					    kvmm_cu_stream s);
	kvmm_cu_result (*cuMemcpyDtoDAsync)(kvmm_cu_ptr dst, kvmm_cu_ptr src, size_t bytes,
					    kvmm_cu_stream s);
	kvmm_cu_result (*cuMemsetD8)(kvmm_cu_ptr dst, unsigned char v, size_t n);
	kvmm_cu_result (*cuMemHostAlloc)(void **p, size_t bytes, unsigned int flags);
	kvmm_cu_result (*cuMemFreeHost)(void *p);
	kvmm_cu_result (*cuStreamCreate)(kvmm_cu_stream *s, unsigned int flags);
	kvmm_cu_result (*cuStreamDestroy)(kvmm_cu_stream s);
	kvmm_cu_result (*cuStreamSynchronize)(kvmm_cu_stream s);
	kvmm_cu_result (*cuEventCreate)(kvmm_cu_event *e, unsigned int flags);
	kvmm_cu_result (*cuEventDestroy)(kvmm_cu_event e);
	kvmm_cu_result (*cuEventRecord)(kvmm_cu_event e, kvmm_cu_stream s);
	kvmm_cu_result (*cuEventSynchronize)(kvmm_cu_event e);
	kvmm_cu_result (*cuEventElapsedTime)(float *ms, kvmm_cu_event start, kvmm_cu_event end);
	kvmm_cu_result (*cuMemCreate)(kvmm_cu_mem_handle *h, size_t bytes,
				      const struct kvmm_cu_mem_alloc_prop *prop,
				      unsigned long long flags);
	kvmm_cu_result (*cuMemRelease)(kvmm_cu_mem_handle h);
	kvmm_cu_result (*cuMemExportToShareableHandle)(void *shareable, kvmm_cu_mem_handle h,
						       int type, unsigned long long flags);
	kvmm_cu_result (*cuMemImportFromShareableHandle)(kvmm_cu_mem_handle *h, void *os_handle,
							 int type);
	kvmm_cu_result (*cuMemAddressReserve)(kvmm_cu_ptr *p, size_t bytes, size_t align,
					      kvmm_cu_ptr addr, unsigned long long flags);
	kvmm_cu_result (*cuMemAddressFree)(kvmm_cu_ptr p, size_t bytes);
	kvmm_cu_result (*cuMemMap)(kvmm_cu_ptr p, size_t bytes, size_t offset, kvmm_cu_mem_handle h,
				   unsigned long long flags);
	kvmm_cu_result (*cuMemUnmap)(kvmm_cu_ptr p, size_t bytes);
	kvmm_cu_result (*cuMemSetAccess)(kvmm_cu_ptr p, size_t bytes,
					 const struct kvmm_cu_mem_access_desc *desc, size_t count);
	kvmm_cu_result (*cuMemGetAllocationGranularity)(size_t *gran,
							const struct kvmm_cu_mem_alloc_prop *prop,
							int option);
	kvmm_cu_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks,
								      kvmm_cu_function fn,
								      int threads,
								      size_t shared_bytes);
	/*
	 * Optional (NULL when the driver lacks them, before CUDA 11.2): stream-ordered
	 * allocation, for the split decode's scratch; without it decode does not split.
	 */
	kvmm_cu_result (*cuMemAllocAsync)(kvmm_cu_ptr *p, size_t bytes, kvmm_cu_stream s);
	kvmm_cu_result (*cuMemFreeAsync)(kvmm_cu_ptr p, kvmm_cu_stream s);
};

/*
 * Open the driver (once per process; later calls return the same table) and cuInit(0) it.
 * The library is $KVMM_LIBCUDA when set (tests point it at the toolkit's stub), else
 * libcuda.so.1.  NULL with errno ENODEV when there is no driver, a symbol is missing, or
 * cuInit fails (no GPU, the stub library): kvmm_cuda_drv_why() says which, in words.
 */
const struct kvmm_cuda_drv *kvmm_cuda_drv_load(void);
/* Why the last kvmm_cuda_drv_load() or kvmm_cuda_drv_device() failed; "" if none did. */
const char *kvmm_cuda_drv_why(void);
/*
 * Retain device @ordinal's primary context and make it current in the calling thread;
 * kvmm_cuda_drv_put_device() releases it.  0, -ENODEV (no driver, no such device; reason in
 * kvmm_cuda_drv_why()) or -EIO.
 */
int kvmm_cuda_drv_get_device(int ordinal, kvmm_cu_device *dev, kvmm_cu_ctx *ctx);
void kvmm_cuda_drv_put_device(kvmm_cu_device dev);
/* A driver result as -errno: -ENOMEM, -EINVAL, -ENODEV, -ENOTSUP or -EIO. */
int kvmm_cuda_errno(kvmm_cu_result r);
/* The driver's text for a result (never NULL). */
const char *kvmm_cuda_result_str(kvmm_cu_result r);
/* Record a failure reason (printf-style) for kvmm_cuda_drv_why(). */
void kvmm_cuda_drv_set_why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* KVMM_KERNELS_CUDA_DRV_H */
