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

static float expsum_scalar(float *s, uint32_t n, float m)
{
	float sum = 0.0f;

	for (uint32_t t = 0; t < n; t++) {
		s[t] = expf(s[t] - m);
		sum += s[t];
	}
	return sum;
}

/* the scalar code does one query at a time */
#define SCALAR_OPS(name, dt)                                                                    \
	static void qk_##name(const float *q, uint64_t qstride, uint32_t nq, const void *row,   \
			      uint64_t stride, const float *sc, uint64_t sstride, uint32_t n,   \
			      uint32_t dim, uint32_t gs, float *s, uint64_t sq)                 \
	{                                                                                       \
		for (uint32_t i = 0; i < nq; i++)                                               \
			qk_body(dt, q + i * qstride, row, stride, sc, sstride, n, dim, gs,      \
				s + i * sq);                                                    \
	}                                                                                       \
	static void pv_##name(float *acc, uint64_t astride, const float *p, uint64_t sp,        \
			      uint32_t nq, const void *row, uint64_t stride, const float *sc,   \
			      uint64_t sstride, uint32_t n, uint32_t dim, uint32_t gs)          \
	{                                                                                       \
		for (uint32_t i = 0; i < nq; i++)                                               \
			pv_body(dt, acc + i * astride, p + i * sp, row, stride, sc, sstride, n, \
				dim, gs);                                                       \
	}

SCALAR_OPS(fp32, KVMM_DTYPE_FP32)
SCALAR_OPS(fp16, KVMM_DTYPE_FP16)
SCALAR_OPS(bf16, KVMM_DTYPE_BF16)
SCALAR_OPS(int8, KVMM_DTYPE_INT8)

const struct kvmm_cpu_ops kvmm_cpu_ops_scalar[KVMM_DTYPE_COUNT] = {
	[KVMM_DTYPE_FP32] = {qk_fp32, pv_fp32, expsum_scalar},
	[KVMM_DTYPE_FP16] = {qk_fp16, pv_fp16, expsum_scalar},
	[KVMM_DTYPE_BF16] = {qk_bf16, pv_bf16, expsum_scalar},
	[KVMM_DTYPE_INT8] = {qk_int8, pv_int8, expsum_scalar},
};
