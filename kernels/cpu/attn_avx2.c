// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/attn_avx2.c - the AVX2 inner loops of the CPU attention kernels.
 *
 * Compiled with -mavx2 -mfma -mf16c (kernels/cpu/Kbuild) and reached only through isa.c after
 * the CPU said yes.  It defines eight-float primitives for the loops of attn_vec.h.  AVX2
 * has no masked loads of 8- and 16-bit elements, so a tail shorter than a vector is copied
 * into a zeroed buffer first: the kernels never read past a row, which matters at the end of
 * a mapping.  exp() is the same range reduction and polynomial as the AVX-512 file, with 2^n
 * built in the exponent bits (n >= -126 after the clamp).
 */
#include <immintrin.h>
#include <math.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

typedef __m256 vec;
#define VW 8

static __always_inline __m256 load8(uint32_t dt, const void *p)
{
	switch (dt) {
	case KVMM_DTYPE_FP32:
		return _mm256_loadu_ps(p);
	case KVMM_DTYPE_FP16:
		return _mm256_cvtph_ps(_mm_loadu_si128(p));
	case KVMM_DTYPE_BF16:
		return _mm256_castsi256_ps(
			_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p)), 16));
	default:
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p)));
	}
}

/* left elements at p (all 8 if left >= 8), zeros after them; never reads past them */
static __always_inline __m256 vload_kv(uint32_t dt, const void *p, uint32_t left)
{
	unsigned char buf[32] __aligned(32) = {0};
	uint32_t esz = dt == KVMM_DTYPE_FP32 ? 4 : dt == KVMM_DTYPE_INT8 ? 1 : 2;

	if (left >= 8)
		return load8(dt, p);
	memcpy(buf, p, left * esz);
	return load8(dt, buf);
}

static __always_inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#define vloadf(p) _mm256_loadu_ps(p)
#define vstoref(p, v) _mm256_storeu_ps(p, v)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vzero() _mm256_setzero_ps()
#define vset1(x) _mm256_set1_ps(x)
#define vhsum(v) hsum8(v)

/* dst[0..3] = horizontal sums of a, b, c, d (as in attn_avx512.c, one lane fewer) */
static __always_inline void vhsum4(float *dst, __m256 a, __m256 b, __m256 c, __m256 d)
{
	__m256 x = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
	__m256 y = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
	__m256 z = _mm256_add_ps(_mm256_shuffle_ps(x, y, 0x44), _mm256_shuffle_ps(x, y, 0xee));

	_mm_storeu_ps(dst, _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1)));
}

/* sixteen ymm registers: 2 queries x 4 rows of sums, 4 K rows, a query; 4 x 2 V sums */
#define QK_QB 2
#define PV_DB 2

static __always_inline __m256 exp8(__m256 x)
{
	const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
	const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
	const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
	__m256 n, r, p;
	__m256i e;

	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, ln2_hi, x);
	r = _mm256_fnmadd_ps(n, ln2_lo, r);
	p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	/* 2^n for -126 <= n <= 0: the biased exponent n + 127 in bits 23..30 */
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* s[t] = exp(s[t] - m) for t < n (every s[t] <= m); returns their sum */
static float expsum(float *s, uint32_t n, float m)
{
	__m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
	uint32_t t = 0;
	float tail = 0.0f;

	for (; t + 8 <= n; t += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv));

		_mm256_storeu_ps(s + t, e);
		sum = _mm256_add_ps(sum, e);
	}
	if (t < n) {
		float buf[8] __aligned(32);
		__m256 e;

		for (uint32_t i = 0; i < 8; i++)
			buf[i] = t + i < n ? s[t + i] : m;
		e = exp8(_mm256_sub_ps(_mm256_load_ps(buf), mv));
		_mm256_store_ps(buf, e);
		for (uint32_t i = 0; t + i < n; i++) {
			s[t + i] = buf[i];
			tail += buf[i];
		}
	}
	return hsum8(sum) + tail;
}

/* the largest of s[0..n), n >= 1 */
static float row_max(const float *s, uint32_t n)
{
	__m256 mx = _mm256_set1_ps(-INFINITY);
	__m128 h;
	uint32_t t = 0;
	float r;

	for (; t + 8 <= n; t += 8)
		mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
	h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	r = _mm_cvtss_f32(h);
	for (; t < n; t++)
		r = s[t] > r ? s[t] : r;
	return r;
}

#include "kernels/cpu/attn_vec.h"

VEC_OPS(fp32, KVMM_DTYPE_FP32)
VEC_OPS(fp16, KVMM_DTYPE_FP16)
VEC_OPS(bf16, KVMM_DTYPE_BF16)
VEC_OPS(int8, KVMM_DTYPE_INT8)

const struct kvmm_cpu_ops kvmm_cpu_ops_avx2[KVMM_DTYPE_COUNT] = {
	[KVMM_DTYPE_FP32] = {qk_fp32, softmax_vec, pv_fp32},
	[KVMM_DTYPE_FP16] = {qk_fp16, softmax_vec, pv_fp16},
	[KVMM_DTYPE_BF16] = {qk_bf16, softmax_vec, pv_bf16},
	[KVMM_DTYPE_INT8] = {qk_int8, softmax_vec, pv_int8},
};
