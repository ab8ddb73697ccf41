/* SPDX-License-Identifier: MIT */
/*
 * kernels/cpu/cpu.h - what the CPU kernels share inside kernels/cpu/: the per-ISA table of
 * inner loops and the scalar element conversions.
 *
 * The drivers (attn.c) walk block tables, keep the online-softmax state and call one
 * struct kvmm_cpu_ops per page dtype for the loops of a GQA group over a chunk of KV rows:
 * its scores, the online-softmax step, and the weighted sum of its V rows.
 * attn_scalar.c, attn_avx2.c and attn_avx512.c each provide a table per dtype; the AVX files
 * are compiled with their own -m flags and only reached through isa.c after a CPU check.
 *
 * The conversions are bit manipulations of our own rather than _Float16, which clang 14 does
 * not support on x86-64: fp16 and bf16 widen to fp32 exactly, fp32 narrows with round to
 * nearest even (NaN stays NaN, overflow goes to infinity, fp16 subnormals are kept).
 */
#ifndef KVMM_KERNELS_CPU_H
#define KVMM_KERNELS_CPU_H

#include <stdint.h>
#include <string.h>

#include "compiler.h"
#include "kernels/kernels.h"

/*
 * Queries and accumulators live in scratch rows padded to a multiple of this many floats
 * (zeros in the padding), so vector loops may read and write whole vectors of them; only the
 * KV rows in the pages need tails.
 */
#define KVMM_CPU_PAD 16u

/*
 * A chunk of KV rows, up to 64 tokens over one or more pages: its runs, each the rows of one
 * page (seg[r].n of them, stride bytes apart), given by their first row's K and V for KV head
 * 0 and, for int8, that row's scales (sstride bytes apart), else NULL.  A head's part of a row
 * is hoff bytes further (its scales hsoff).  The group this chunk is given to sees its first
 * n tokens (a causal limit may cut the last runs short).
 *
 * Prefetch: pf is how far (bytes) the same row of the matching run of the chunk to be computed
 * next (kvmm_cpu_prefetch_chunks ahead, attn.c) lies from this run's row, for K and V alike
 * (pfs for the scales); the inner loops prefetch every 64-byte line they load at that
 * distance, so the next chunk is asked for line by line at the rate this one is consumed and
 * in the order it will be.  0 where there is nothing to ask for (the prefetch then names a
 * line already loaded).  A run longer than its match asks for a few lines past the match's
 * end: harmless, a prefetch never faults.
 */
struct kvmm_cpu_seg {
	const char *k, *v, *ks, *vs;
	int64_t pf, pfs;
	uint32_t n;
};

struct kvmm_cpu_chunk {
	const struct kvmm_cpu_seg *seg;
	uint64_t hoff, hsoff, stride, sstride;
	uint32_t n, dim, gs;
	/*
	 * Prefetch the next step's lines into L1 (kvmm_cpu_prefetch_l1()): decode, which loads
	 * each line once per step.  Not prefill: its query tiles load a head's K rows once per
	 * block of queries, and the V lines would evict them (same L1 sets) between blocks.
	 */
	bool l1;
};

/*
 * Prefetch into L2 (prefetcht1): the next chunk is a chunk's time away and, with K and V of
 * the current one, more than the L1 holds (see Documentation/kernels/cpu.md).
 */
static __always_inline void kvmm_cpu_prefetch(const void *p)
{
	__builtin_prefetch(p, 0, 2);
}

/*
 * Prefetch into L1 (prefetcht0), for the step after the current one: while the scores of a
 * head load its K rows, the same lines of its V rows, which the weighted sums load next; while
 * the sums load V, the same lines of the next head's K rows.  The hardware prefetchers that
 * keep a contiguous walk in L1 start over on every scattered page; these do not care where
 * the page is (Documentation/kernels/cpu.md, Prefetch).
 */
static __always_inline void kvmm_cpu_prefetch_l1(const void *p)
{
	__builtin_prefetch(p, 0, 3);
}

/*
 * The nq queries (accumulators) of one GQA group are padded scratch rows qstride (astride)
 * floats apart; their scores (weights) rows of the chunk's tokens, sq (sp) floats apart.
 */
struct kvmm_cpu_ops {
	/* s[i * sq + t] = dot(q_i, K row t), i < nq, t < c->n */
	void (*qk)(const struct kvmm_cpu_chunk *c, const float *q, uint64_t qstride, uint32_t nq,
		   float *s, uint64_t sq);
	/*
	 * Online softmax of the chunk's n scores of each query i < nq: fold them into the
	 * running max m[i] and sum l[i] and turn them into weights exp(s - m[i]) against the new
	 * max; corr[i] is the factor the query's accumulator must be scaled by (exp(old - new),
	 * 0 before the first token, 1 when the max did not grow).
	 */
	void (*softmax)(float *s, uint64_t sq, uint32_t nq, uint32_t n, float *m, float *l,
			float *corr);
	/* acc_i = corr[i] * acc_i + sum over t < c->n of p[i * sp + t] * V row t, i < nq */
	void (*pv)(const struct kvmm_cpu_chunk *c, float *acc, uint64_t astride, const float *p,
		   uint64_t sp, uint32_t nq, const float *corr);
};

/* Indexed by enum kvmm_dtype; the NONE entry is empty. */
extern const struct kvmm_cpu_ops kvmm_cpu_ops_scalar[KVMM_DTYPE_COUNT];
extern const struct kvmm_cpu_ops kvmm_cpu_ops_avx2[KVMM_DTYPE_COUNT];
extern const struct kvmm_cpu_ops kvmm_cpu_ops_avx512[KVMM_DTYPE_COUNT];

/* The table of the ISA in use (isa.c). */
const struct kvmm_cpu_ops *kvmm_cpu_ops(uint32_t dtype);

/*
 * Run fn(arg, w) on up to n threads at once (pool.c): the caller as w = 0 and pool workers as
 * w = 1, 2, ...  Returns how many took part (1 when n <= 1, or the pool is busy with another
 * caller's job); fn must share its work so that any number of participants finishes it.
 */
uint32_t kvmm_cpu_pool_run(void (*fn)(void *arg, uint32_t w), void *arg, uint32_t n);

/*
 * With threads, a context is split in parts of at least this many bytes of KV (attn.c);
 * tests lower it to split small contexts.  Not for use while kernels run.
 */
extern uint32_t kvmm_cpu_split_min_bytes;
/* How many chunks ahead attention prefetches the KV rows (0 = none); for tuning. */
extern uint32_t kvmm_cpu_prefetch_chunks;
/*
 * Decode visits a sequence's full pages, prefill those below its first new token, in the
 * order of their frame numbers (1, the default) or in the block table's order (0); attn.c
 * says why.  For tests and the benchmark.
 */
extern uint32_t kvmm_cpu_decode_by_address;

static inline float kvmm_u32_to_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t kvmm_f32_to_u32(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kvmm_bf16_to_f32(uint16_t h)
{
	return kvmm_u32_to_f32((uint32_t)h << 16);
}

static inline uint16_t kvmm_f32_to_bf16(float f)
{
	uint32_t u = kvmm_f32_to_u32(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and a NaN */
		return (uint16_t)((u >> 16) | 0x40);
	/* round to nearest even: add half an ulp minus one, plus the kept lsb */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float kvmm_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f) /* inf, NaN */
		return kvmm_u32_to_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24, exact in fp32 */
		float v = (float)man * 0x1p-24f;

		return sign ? -v : v;
	}
	return kvmm_u32_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t kvmm_f32_to_fp16(float f)
{
	uint32_t u = kvmm_f32_to_u32(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	int32_t exp;
	uint32_t man, shift, half, rest, r;

	if (a > 0x7f800000u) /* NaN */
		return sign | 0x7e00;
	if (a >= 0x477ff000u) /* >= 65520 rounds to infinity (max fp16 65504) */
		return sign | 0x7c00;
	exp = (int32_t)(a >> 23) - 127;
	if (exp >= -14) {
		/* normal fp16: keep 10 of 23 mantissa bits, round the other 13 to nearest even */
		r = ((uint32_t)(exp + 15) << 10) | ((a >> 13) & 0x3ff);
		rest = a & 0x1fff;
		if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
			r++; /* a carry into the exponent is the right answer */
		return sign | (uint16_t)r;
	}
	if (exp < -25) /* below half the smallest subnormal: zero */
		return sign;
	/* subnormal fp16: value = man * 2^-24 with man < 1024 */
	man = (a & 0x7fffff) | 0x800000;    /* 24-bit significand, value = man * 2^(exp-23) */
	shift = (uint32_t)(-14 - exp) + 13; /* 14..24 */
	r = man >> shift;
	half = 1u << (shift - 1);
	rest = man & ((1u << shift) - 1);
	if (rest > half || (rest == half && (r & 1)))
		r++;
	return sign | (uint16_t)r;
}

#endif /* KVMM_KERNELS_CPU_H */
