/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/device.cuh - what only the GPU build of the kernels has: the decode kernel's
 * dynamic shared memory and the helpers written in PTX (cp.async, cvt.f32.f16).  module.cu
 * includes it before the kernel files; the host build of the same kernel files for the fake
 * driver's SIMT emulator (tests/fakecuda/simt_kernels.cc) provides these names itself, which
 * is why they live apart from the kernels that use them.
 */
#ifndef KVMM_KERNELS_CUDA_DEVICE_CUH
#define KVMM_KERNELS_CUDA_DEVICE_CUH

extern __shared__ __align__(16) char kvmm_decode_smem[];

/* cp.async (sm_80+): global to shared without a register round trip */
__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
	uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
	uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);

	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all(void)
{
	asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* fp16 to fp32 in one instruction (exact: every fp16 value is an fp32 value) */
__device__ __forceinline__ float half_bits_to_f32(uint32_t h)
{
	float f;

	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
	return f;
}

#endif /* KVMM_KERNELS_CUDA_DEVICE_CUH */
