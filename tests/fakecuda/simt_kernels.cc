// SPDX-License-Identifier: MIT
/*
 * tests/fakecuda/simt_kernels.cc - kernels/cuda's kernels built for the host, for the fake
 * driver's SIMT emulator: the kernel files nvcc compiles into kvmm.fatbin, included here after
 * simt_device.h (CUDA's built-ins) and, in place of kernels/cuda/device.cuh (PTX), host
 * versions of its helpers: cp.async queued until the thread's wait, cvt.f32.f16 as the
 * common bit conversion (both exact).  The kernel code itself is not changed or copied, so
 * what the tests check here is the code the GPU runs.
 *
 * simt_kernels[] lists every extern "C" kernel of module.cu with its argument size and
 * __launch_bounds__, for cuModuleGetFunction and cuLaunchKernel.
 */
#include "tests/fakecuda/simt_device.h"

#include "kernels/cuda/common.cuh"

/* ---- kernels/cuda/device.cuh, for the host ---- */
static char *const kvmm_decode_smem = simt_dyn_smem;

static inline void cp_async16(void *dst, const void *src)
{
	simt_cp_async(dst, src, 16);
}

static inline void cp_async4(void *dst, const void *src)
{
	simt_cp_async(dst, src, 4);
}

static inline void cp_async_commit(void)
{
	simt_cp_async_commit();
}

static inline void cp_async_wait_all(void)
{
	simt_cp_async_wait_all();
}

static inline float half_bits_to_f32(uint32_t h)
{
	return fp16_to_f32((uint16_t)h);
}

/* ---- the kernel files, as module.cu includes them ---- */
#include "kernels/cuda/attn.cu"
#include "kernels/cuda/cache.cu"
#include "kernels/cuda/copy.cu"

/* one table entry: the kernel called with a copy of its by-value argument */
#define SIMT_KERNEL(fn, argtype, threads)   \
	{                                   \
#fn,                                      \
		[](const void *p) {                       \
			argtype a;                        \
			memcpy(&a, p, sizeof(a));         \
			fn(a);                            \
		},                                        \
		sizeof(argtype), threads, \
	}

#define SIMT_DTYPES(prefix, argtype, threads)                                                     \
	SIMT_KERNEL(prefix##fp32, argtype, threads), SIMT_KERNEL(prefix##fp16, argtype, threads), \
		SIMT_KERNEL(prefix##bf16, argtype, threads),                                      \
		SIMT_KERNEL(prefix##int8, argtype, threads)

extern "C" {
const struct simt_kernel simt_kernels[] = {
	SIMT_DTYPES(kvmm_prefill_, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_DTYPES(kvmm_decode_, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_decode_merge, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_prefill_merge, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_DTYPES(kvmm_cache_, struct kvmm_cuda_cache_args, SIMT_MAX_THREADS),
	SIMT_KERNEL(kvmm_copy_pages, struct kvmm_cuda_copy_args, SIMT_MAX_THREADS),
};
const unsigned int simt_nr_kernels = sizeof(simt_kernels) / sizeof(simt_kernels[0]);
}
