/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/common.cuh - what the device code shares: the dtype tags, element loads that
 * widen a page element to fp32, stores that narrow fp32 to a page element with the same
 * rounding as the CPU kernels (round to nearest even), and warp reductions.
 *
 * The dtype is a template parameter, so each kernel is compiled once per dtype with the
 * conversion inlined and no branch in the inner loops.  fp16 and bf16 conversions are our own
 * bit manipulations (as in kernels/cpu/cpu.h) rather than cuda_fp16.h, which keeps the module
 * free of headers outside the compiler and its results bit-identical to the CPU kernels.
 */
#ifndef KVMM_KERNELS_CUDA_COMMON_CUH
#define KVMM_KERNELS_CUDA_COMMON_CUH

#include <stdint.h>

#include "abi.h"

/*
 * A load of n bytes of shared memory at p that the kernel is about to make (the staged K/V
 * rows of the inner loops): nothing on a GPU; on the fake driver's SIMT emulator a misaligned
 * or out-of-range one is a fault and the bank conflicts of each warp-wide load are counted
 * (Documentation/dev-tools/fake-cuda.md).
 */
#ifndef KVMM_SMEM_LOAD
#define KVMM_SMEM_LOAD(p, n) ((void)0)
#endif

/* the values of enum kvmm_dtype (uapi/kvmm.h), which C++ cannot include as is */
enum {
	DT_FP32 = 1,
	DT_FP16 = 2,
	DT_BF16 = 3,
	DT_INT8 = 4
};

template <int DT> struct elem_size {
	static const uint32_t v = DT == DT_FP32 ? 4 : DT == DT_INT8 ? 1 : 2;
};

__device__ __forceinline__ float fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;

	if (exp == 0x1f)
		return __uint_as_float(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		float v = (float)man * 5.9604644775390625e-8f; /* 2^-24, exact */

		return sign ? -v : v;
	}
	return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

__device__ __forceinline__ uint16_t f32_to_fp16(float f)
{
	uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t man, shift, half, rest, r;
	int32_t exp;

	if (a > 0x7f800000u)
		return sign | 0x7e00;
	if (a >= 0x477ff000u)
		return sign | 0x7c00;
	exp = (int32_t)(a >> 23) - 127;
	if (exp >= -14) {
		r = ((uint32_t)(exp + 15) << 10) | ((a >> 13) & 0x3ff);
		rest = a & 0x1fff;
		if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
			r++;
		return sign | (uint16_t)r;
	}
	if (exp < -25)
		return sign;
	man = (a & 0x7fffff) | 0x800000;
	shift = (uint32_t)(-14 - exp) + 13;
	r = man >> shift;
	half = 1u << (shift - 1);
	rest = man & ((1u << shift) - 1);
	if (rest > half || (rest == half && (r & 1)))
		r++;
	return sign | (uint16_t)r;
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* element i of a row of dtype DT, as fp32 (int8: the raw integer, unscaled) */
template <int DT> __device__ __forceinline__ float load_elem(const char *row, uint32_t i)
{
	if (DT == DT_FP32)
		return ((const float *)row)[i];
	if (DT == DT_FP16)
		return fp16_to_f32(((const uint16_t *)row)[i]);
	if (DT == DT_BF16)
		return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
	return (float)((const signed char *)row)[i];
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* frame of logical block blk, or -1 when absent or past nr_frames (the token is skipped) */
__device__ __forceinline__ int32_t block_frame(const struct kvmm_cuda_pages &pg,
					       const int32_t *table, uint32_t blk)
{
	int32_t f = table[blk];

	if (f < 0 || (pg.nr_frames && (uint32_t)f >= pg.nr_frames))
		return -1;
	return f;
}

#endif /* KVMM_KERNELS_CUDA_COMMON_CUH */
