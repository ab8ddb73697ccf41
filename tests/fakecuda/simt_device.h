/* SPDX-License-Identifier: MIT */
/*
 * tests/fakecuda/simt_device.h - CUDA C++'s built-ins for the host build of kernels/cuda's
 * kernel files (simt_kernels.cc): the qualifiers vanish, __shared__ variables are statics
 * (one block runs at a time, and all its threads are fibers of one host thread, so a static
 * is exactly the block's one copy), the thread and block indices are the emulator's
 * (simt.c sets simt_thread_idx on every switch), and barriers and shuffles go to its
 * scheduler.  Only what kvmm's kernels use is here; a kernel that uses more fails to compile
 * for the host, and the missing built-in is added here then.
 */
#ifndef KVMM_TESTS_FAKECUDA_SIMT_DEVICE_H
#define KVMM_TESTS_FAKECUDA_SIMT_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/fakecuda/simt.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
/* the kernels' declared shared-memory loads: checked and their bank conflicts counted */
#define KVMM_SMEM_LOAD(p, n)                           \
	do {                                           \
		static const char kvmm_site_ = 0;      \
		simt_smem_load((p), (n), &kvmm_site_); \
	} while (0)

#define threadIdx simt_thread_idx
#define blockIdx simt_block_idx
#define blockDim simt_block_dim
#define gridDim simt_grid_dim

struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};

struct __attribute__((aligned(8))) uint2 {
	unsigned int x, y;
};

struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};

static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w)
{
	return uint4{x, y, z, w};
}

static inline float __uint_as_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float __int_as_float(int32_t i)
{
	float f;

	memcpy(&f, &i, sizeof(f));
	return f;
}

static inline uint32_t __float_as_uint(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline int __ffs(int x)
{
	return __builtin_ffs(x);
}

/* a product rounded on its own, never fused (the build has -ffp-contract=off anyway) */
static inline float __fmul_rn(float a, float b)
{
	return a * b;
}

/* CUDA's integer min and max overloads */
static inline uint32_t min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static inline uint64_t min(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint32_t max(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

static inline uint64_t max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static inline void __syncthreads(void)
{
	simt_syncthreads();
}

static inline float __shfl_xor_sync(unsigned int mask, float v, int lane_mask)
{
	return __uint_as_float(simt_shfl_xor(mask, __float_as_uint(v), lane_mask));
}

static inline unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, int lane_mask)
{
	return simt_shfl_xor(mask, v, lane_mask);
}

/* a 64-bit shuffle is two 32-bit ones on the GPU too */
static inline unsigned long long __shfl_xor_sync(unsigned int mask, unsigned long long v,
						 int lane_mask)
{
	unsigned long long lo = simt_shfl_xor(mask, (uint32_t)v, lane_mask);

	return lo | (unsigned long long)simt_shfl_xor(mask, (uint32_t)(v >> 32), lane_mask) << 32;
}

#endif /* KVMM_TESTS_FAKECUDA_SIMT_DEVICE_H */
