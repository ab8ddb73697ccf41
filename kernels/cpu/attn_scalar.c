// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/attn_scalar.c - the portable inner loops of the CPU attention kernels.
 *
 * One struct kvmm_cpu_ops per page dtype (cpu.h), written as plain C over one element at a
 * time.  It is the fallback on a CPU without AVX2, the variant KVMM_KERNEL_ISA=scalar forces,
 * and the simplest statement of what the vector files must compute.  The loops are generated
 * from one always-inline body per operation with the dtype as a constant, so each table entry
 * is specialised without a switch in the inner loop.
 */
#include <math.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

static __always_inline float load_elem(uint32_t dt, const void *row, uint32_t i)
{
	switch (dt) {
	case KVMM_DTYPE_FP32:
		return ((const float *)row)[i];
	case KVMM_DTYPE_FP16:
		return kvmm_fp16_to_f32(((const uint16_t *)row)[i]);
	case KVMM_DTYPE_BF16:
		return kvmm_bf16_to_f32(((const uint16_t *)row)[i]);
	default:
		return (float)((const int8_t *)row)[i];
	}
}

static __always_inline void qk_body(uint32_t dt, const float *q, const void *row, uint64_t stride,
				    const float *sc, uint64_t sstride, uint32_t n, uint32_t dim,
				    uint32_t gs, float *s)
{
	for (uint32_t t = 0; t < n; t++) {
		const void *r = (const char *)row + t * stride;
		float sum = 0.0f;

		if (dt == KVMM_DTYPE_INT8) {
			const float *gsc = (const float *)((const char *)sc + t * sstride);

			for (uint32_t g = 0; g < dim / gs; g++) {
				float part = 0.0f;

				for (uint32_t i = g * gs; i < (g + 1) * gs; i++)
					part += q[i] * load_elem(dt, r, i);
				sum += part * gsc[g];
			}
		} else {
			for (uint32_t i = 0; i < dim; i++)
				sum += q[i] * load_elem(dt, r, i);
		}
		s[t] = sum;
	}
}

static __always_inline void pv_body(uint32_t dt, float *acc, const float *p, const void *row,
				    uint64_t stride, const float *sc, uint64_t sstride, uint32_t n,
				    uint32_t dim, uint32_t gs)
{
	for (uint32_t t = 0; t < n; t++) {
		const void *r = (const char *)row + t * stride;

		if (dt == KVMM_DTYPE_INT8) {
			const float *gsc = (const float *)((const char *)sc + t * sstride);

			for (uint32_t i = 0; i < dim; i++)
				acc[i] += p[t] * gsc[i / gs] * load_elem(dt, r, i);
		} else {
			for (uint32_t i = 0; i < dim; i++)
				acc[i] += p[t] * load_elem(dt, r, i);
		}
	}
}

/* the same online-softmax step as the vector files' softmax_vec, with libm's expf */
static void softmax_scalar(float *s, uint64_t sq, uint32_t nq, uint32_t n, float *m, float *l,
			   float *corr)
{
	for (uint32_t i = 0; i < nq; i++) {
		float *si = s + i * sq, mo = m[i], mn = mo, sum = 0.0f;

		for (uint32_t t = 0; t < n; t++)
			mn = si[t] > mn ? si[t] : mn;
		corr[i] = mo == -INFINITY ? 0.0f : mn > mo ? expf(mo - mn) : 1.0f;
		for (uint32_t t = 0; t < n; t++) {
			si[t] = expf(si[t] - mn);
			sum += si[t];
		}
		l[i] = l[i] * corr[i] + sum;
		m[i] = mn;
	}
}

/*
 * The same lines of the next chunk as a head's part of a run (rows at row, n of them): the
 * scalar loops take it once per run, before the first query's pass over it.
 */
static void pf_run(const struct kvmm_cpu_chunk *c, const char *row, const char *sc, uint32_t n,
		   uint32_t esz, int64_t pf, int64_t pfs)
{
	for (uint32_t t = 0; t < n; t++) {
		for (uint32_t b = 0; b < c->dim * esz; b += 64)
			kvmm_cpu_prefetch(row + t * c->stride + b + pf);
		if (sc)
			kvmm_cpu_prefetch(sc + t * c->sstride + pfs);
	}
}

/* the scalar code does one query and one run of rows at a time */
#define SCALAR_OPS(name, dt)                                                                    \
	static void qk_##name(const struct kvmm_cpu_chunk *c, const float *q, uint64_t qstride, \
			      uint32_t nq, float *s, uint64_t sq)                               \
	{                                                                                       \
		for (uint32_t i = 0; i < nq; i++) {                                             \
			const struct kvmm_cpu_seg *sg = c->seg;                                 \
                                                                                                \
			for (uint32_t t0 = 0; t0 < c->n; t0 += sg->n, sg++) {                   \
				if (i == 0)                                                     \
					pf_run(c, sg->k + c->hoff,                              \
					       sg->ks ? sg->ks + c->hsoff : NULL,               \
					       min_t(uint32_t, sg->n, c->n - t0),               \
					       kvmm_dtype_size(dt), sg->pf, sg->pfs);           \
				qk_body(dt, q + i * qstride, sg->k + c->hoff, c->stride,        \
					sg->ks ? (const float *)(sg->ks + c->hsoff) : NULL,     \
					c->sstride, min_t(uint32_t, sg->n, c->n - t0), c->dim,  \
					c->gs, s + i * sq + t0);                                \
			}                                                                       \
		}                                                                               \
	}                                                                                       \
	static void pv_##name(const struct kvmm_cpu_chunk *c, float *acc, uint64_t astride,     \
			      const float *p, uint64_t sp, uint32_t nq, const float *corr)      \
	{                                                                                       \
		for (uint32_t i = 0; i < nq; i++) {                                             \
			const struct kvmm_cpu_seg *sg = c->seg;                                 \
			float *a = acc + i * astride;                                           \
                                                                                                \
			for (uint32_t d = 0; d < c->dim; d++)                                   \
				a[d] *= corr[i];                                                \
			for (uint32_t t0 = 0; t0 < c->n; t0 += sg->n, sg++) {                   \
				if (i == 0)                                                     \
					pf_run(c, sg->v + c->hoff,                              \
					       sg->vs ? sg->vs + c->hsoff : NULL,               \
					       min_t(uint32_t, sg->n, c->n - t0),               \
					       kvmm_dtype_size(dt), sg->pf, sg->pfs);           \
				pv_body(dt, a, p + i * sp + t0, sg->v + c->hoff, c->stride,     \
					sg->vs ? (const float *)(sg->vs + c->hsoff) : NULL,     \
					c->sstride, min_t(uint32_t, sg->n, c->n - t0), c->dim,  \
					c->gs);                                                 \
			}                                                                       \
		}                                                                               \
	}

SCALAR_OPS(fp32, KVMM_DTYPE_FP32)
SCALAR_OPS(fp16, KVMM_DTYPE_FP16)
SCALAR_OPS(bf16, KVMM_DTYPE_BF16)
SCALAR_OPS(int8, KVMM_DTYPE_INT8)

const struct kvmm_cpu_ops kvmm_cpu_ops_scalar[KVMM_DTYPE_COUNT] = {
	[KVMM_DTYPE_FP32] = {qk_fp32, softmax_scalar, pv_fp32},
	[KVMM_DTYPE_FP16] = {qk_fp16, softmax_scalar, pv_fp16},
	[KVMM_DTYPE_BF16] = {qk_bf16, softmax_scalar, pv_bf16},
	[KVMM_DTYPE_INT8] = {qk_int8, softmax_scalar, pv_int8},
};
