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

/* cvt.rn.f16.f32 / cvt.rn.bf16.f32: the same round to nearest even as common.cuh's */
template <int DT> static inline uint32_t cvt_elem(float f)
{
	return DT == DT_BF16 ? f32_to_bf16(f) : f32_to_fp16(f);
}

/* element k (0 or 1) of a packed pair of DT (fp16 or bf16) as fp32 */
template <int DT> static inline float mma_half(uint32_t w, uint32_t k)
{
	const uint32_t h = k ? w >> 16 : w & 0xffffu;

	return DT == DT_BF16 ? __uint_as_float(h << 16) : fp16_to_f32((uint16_t)h);
}

/*
 * mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the warp's fragments gathered (all 32
 * lanes must be here, as on the GPU), then this lane's four elements of D = A B + C with
 * the fragment layouts of the PTX ISA (kernels/cuda/attn_tc.cu): lane 4 g + t holds A's
 * rows g and g + 8, columns 2t, 2t + 1 (registers 0, 1) and + 8 (2, 3); B's rows 2t, 2t + 1
 * (b0) and + 8 (b1) of column g; C's rows g (c0, c1) and g + 8 (c2, c3), columns 2t, 2t + 1.
 * The products of 16-bit numbers are exact in double; the sum is rounded once to fp32.
 * m16n8k8 is the same with k < 8: A's registers 0 and 1, B's b0.
 *
 * The first lane of the warp to get past the gather decodes A and B from the gathered words
 * into doubles (mma_decode(); 384 conversions where every lane decoding its own would make
 * 4096), the others find them decoded (the gather's serial), and each lane sums its four
 * elements from them.  A warp's lanes run one at a time, so nothing races.
 */
struct mma_frag {
	uint64_t serial;
	double a[16][16], b[8][16]; /* A(row, k), B(k, col) at b[col][k]: rows of the sums */
};

static mma_frag mma_frags[SIMT_MAX_THREADS / SIMT_WARP];

/* the words: all[lane * N + i]; A's registers first (K / 4 a lane), then B's (K / 8) */
template <int DT, uint32_t K, uint32_t N>
static inline const mma_frag &mma_decode(const struct simt_gathered *g)
{
	mma_frag &m = mma_frags[g->warp];

	if (m.serial == g->serial)
		return m;
	for (uint32_t row = 0; row < 16; row++)
		for (uint32_t k = 0; k < K; k++) {
			/* A(row, k): lane 4 (row % 8) + (k % 8) / 2, register (row / 8) + 2 (k / 8) */
			const uint32_t aw =
				g->words[(4 * (row % 8) + (k % 8) / 2) * N + row / 8 + 2 * (k / 8)];

			m.a[row][k] = mma_half<DT>(aw, k % 2);
		}
	for (uint32_t col = 0; col < 8; col++)
		for (uint32_t k = 0; k < K; k++) {
			/* B(k, col): lane 4 col + (k % 8) / 2, register k / 8 after A's */
			const uint32_t bw = g->words[(4 * col + (k % 8) / 2) * N + K / 4 + k / 8];

			m.b[col][k] = mma_half<DT>(bw, k % 2);
		}
	m.serial = g->serial;
	return m;
}

/* c += A B for m16n8kK (K 8 or 16), this lane's four elements */
template <int DT, uint32_t K, uint32_t N>
static inline void mma_lane(float (&c)[4], const struct simt_gathered *g)
{
	const mma_frag &m = mma_decode<DT, K, N>(g);
	const uint32_t lane = simt_thread_idx.x % SIMT_WARP, gr = lane / 4, t = lane % 4;

	for (uint32_t i = 0; i < 4; i++) {
		const uint32_t row = gr + 8 * (i / 2), col = 2 * t + i % 2;
		double sum = c[i];

		for (uint32_t k = 0; k < K; k++)
			sum += m.a[row][k] * m.b[col][k];
		c[i] = (float)sum;
	}
}

template <int DT>
static inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	const uint32_t in[6] = {a[0], a[1], a[2], a[3], b0, b1};

	mma_lane<DT, 16, 6>(c, simt_warp_gather(in, 6));
}

/* mma.sync.aligned.m16n8k8: A's registers 0 and 1 (rows g and g + 8, columns 2t, 2t + 1), b0 */
template <int DT> static inline void mma1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b)
{
	const uint32_t in[3] = {a0, a1, b};

	mma_lane<DT, 8, 3>(c, simt_warp_gather(in, 3));
}

/* ---- the kernel files, as module.cu includes them ---- */
#include "kernels/cuda/attn.cu"
#include "kernels/cuda/attn_tc.cu"
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
	SIMT_KERNEL(kvmm_prefill_tc_fp16, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_prefill_tc_bf16, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_prefill_tc_int8, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_decode_tc_fp16, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_decode_tc_bf16, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_KERNEL(kvmm_decode_tc_int8, struct kvmm_cuda_decode_args, KVMM_CUDA_DECODE_THREADS),
	SIMT_DTYPES(kvmm_cache_, struct kvmm_cuda_cache_args, SIMT_MAX_THREADS),
	SIMT_KERNEL(kvmm_copy_pages, struct kvmm_cuda_copy_args, SIMT_MAX_THREADS),
};
const unsigned int simt_nr_kernels = sizeof(simt_kernels) / sizeof(simt_kernels[0]);
}
