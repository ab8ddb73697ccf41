// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/attn_avx512.c - the AVX-512 inner loops of the CPU attention kernels.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl (kernels/cpu/Kbuild) and reached only
 * through isa.c after the CPU said yes, so nothing here may be called directly.  Sixteen
 * floats per vector; KV elements are widened to fp32 on load (vcvtph2ps for fp16, a 16-bit
 * shift for bf16, sign extension for int8) and every tail uses a masked load, which never
 * touches the bytes past the row.  Scores and weighted sums handle four K or V rows at once so
 * a query or accumulator vector is loaded once per four rows and the four FMA chains overlap.
 * exp() is our own: range reduction by ln 2 and a degree-7 polynomial, then vscalefps; its
 * relative error is below 2e-7, far under the kernels' stated bounds.
 */
#include <immintrin.h>
#include <math.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

typedef __m512 vec;
#define VW 16

static __always_inline __mmask16 tail_mask(uint32_t left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* masked loads never touch the bytes of masked-off lanes: no read past a row */
static __always_inline __m512 vload_kv(uint32_t dt, const void *p, uint32_t left)
{
	__mmask16 m = tail_mask(left);

	switch (dt) {
	case KVMM_DTYPE_FP32:
		return _mm512_maskz_loadu_ps(m, p);
	case KVMM_DTYPE_FP16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
	case KVMM_DTYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
	default:
		return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
	}
}

#define vloadf(p) _mm512_loadu_ps(p)
#define vstoref(p, v) _mm512_storeu_ps(p, v)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vzero() _mm512_setzero_ps()
#define vset1(x) _mm512_set1_ps(x)
#define vhsum(v) _mm512_reduce_add_ps(v)

/*
 * dst[0..3] = horizontal sums of a, b, c, d: interleave and add pairs, then quads, inside
 * each 128-bit lane, then add the four lanes: 13 instructions for four sums.
 */
static __always_inline void vhsum4(float *dst, __m512 a, __m512 b, __m512 c, __m512 d)
{
	__m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
	__m512 y = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
	__m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xee));
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(z),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));

	_mm_storeu_ps(dst, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* exp(x) for x <= 0 (clamped at -87, whose exp is negligible beside the max term's 1). */
static __always_inline __m512 exp16(__m512 x)
{
	const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
	const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
	const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
	__m512 n, r, p;

	x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, ln2_hi, x);
	r = _mm512_fnmadd_ps(n, ln2_lo, r);
	/* Taylor terms 1/k! for k = 7 .. 0, |r| <= ln2/2 */
	p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

/* s[t] = exp(s[t] - m) for t < n (every s[t] <= m); returns their sum */
static float expsum(float *s, uint32_t n, float m)
{
	__m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();

	for (uint32_t t = 0; t < n; t += 16) {
		__mmask16 k = tail_mask(n - t);
		__m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), mv));

		_mm512_mask_storeu_ps(s + t, k, e);
		sum = _mm512_mask_add_ps(sum, k, sum, e);
	}
	return _mm512_reduce_add_ps(sum);
}

/* the largest of s[0..n), n >= 1 */
static float row_max(const float *s, uint32_t n)
{
	__m512 mx = _mm512_set1_ps(-INFINITY);

	for (uint32_t t = 0; t < n; t += 16)
		mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, tail_mask(n - t), s + t));
	return _mm512_reduce_max_ps(mx);
}

#include "kernels/cpu/attn_vec.h"

VEC_OPS(fp32, KVMM_DTYPE_FP32)
VEC_OPS(fp16, KVMM_DTYPE_FP16)
VEC_OPS(bf16, KVMM_DTYPE_BF16)
VEC_OPS(int8, KVMM_DTYPE_INT8)

const struct kvmm_cpu_ops kvmm_cpu_ops_avx512[KVMM_DTYPE_COUNT] = {
	[KVMM_DTYPE_FP32] = {qk_fp32, softmax_vec, pv_fp32},
	[KVMM_DTYPE_FP16] = {qk_fp16, softmax_vec, pv_fp16},
	[KVMM_DTYPE_BF16] = {qk_bf16, softmax_vec, pv_bf16},
	[KVMM_DTYPE_INT8] = {qk_int8, softmax_vec, pv_int8},
};
