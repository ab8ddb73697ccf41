/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/device.cuh - what only the GPU build of the kernels has: the decode kernel's
 * dynamic shared memory and the helpers written in PTX (cp.async, cvt, mma.sync).  module.cu
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

/* fp32 to a 16-bit element of DT (fp16 or bf16), round to nearest even (common.cuh's rounding) */
template <int DT> __device__ __forceinline__ uint32_t cvt_elem(float f)
{
	unsigned short h;

	if constexpr (DT == DT_BF16)
		asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
	else
		asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

/*
 * c += a * b on the tensor cores: mma.sync m16n8k16, A row-major 16 x 16, B column-major
 * 16 x 8, both fp16 or both bf16 (DT), fp32 accumulators; the fragments are laid out over the
 * warp's lanes as the PTX ISA says (attn_tc.cu).  sm_80 and later.  volatile, so that the
 * compiler never moves one into code some lanes skip: .aligned needs the whole warp there.
 */
template <int DT>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
					 uint32_t b1)
{
	if constexpr (DT == DT_BF16)
		asm volatile(
			"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
			"{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
			: "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	else
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
			     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
			     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* the same with k = 8: A 16 x 8 (two registers), B 8 x 8 (one) */
template <int DT>
__device__ __forceinline__ void mma1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b)
{
	if constexpr (DT == DT_BF16)
		asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
			     "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
			     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			     : "r"(a0), "r"(a1), "r"(b));
	else
		asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
			     "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
			     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
			     : "r"(a0), "r"(a1), "r"(b));
}

#endif /* KVMM_KERNELS_CUDA_DEVICE_CUH */
