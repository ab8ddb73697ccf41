/* SPDX-License-Identifier: MIT */
/*
 * kernels/cpu/attn_vec.h - the vector inner loops, written once for AVX2 and AVX-512.
 *
 * Included by attn_avx2.c and attn_avx512.c (only: each compiles it with its own -m flags),
 * after they define the vector type and a handful of primitives:
 *
 *   vec  VW               the vector type and its width in floats
 *   vload_kv(dt, p, left) VW elements of dtype dt at p widened to fp32, zeros past left
 *   vloadf(p) vstoref(p, v) vfma(a, b, c) vmul(a, b) vzero() vset1(x) vhsum(v)
 *   vhsum4(dst, a, b, c, d)   dst[0..3] = the horizontal sums of a, b, c, d
 *   row_max(s, n) expsum(s, n, m)  the softmax step's max and exp-and-sum of a score row
 *   QK_QB                 queries per block of the scores loop (registers: QK_QB * 4 sums)
 *
 * Grouped-query attention is where a CPU decode kernel wins or loses: the NQ (up to 4)
 * queries that share a KV head are done together, so each K or V vector is loaded and
 * converted once and feeds NQ FMAs.  Scores go four K rows at a time: 4 * NQ dot products
 * in registers, each query vector loaded once per four rows, and the horizontal sums of a
 * query's four rows done together by one transpose-and-add tree (vhsum4), which is a third
 * of the shuffles of four separate sums and one store; a tail of under four rows goes one
 * row at a time.  Weighted sums go PV_DB vectors of dims at a time over all the chunk's
 * runs of V rows, the NQ * PV_DB accumulators staying in registers (rescaled by the softmax
 * step's factor as they are loaded).  Both prefetch, for every 64-byte line they load, the same
 * line of the next chunk into L2 (seg->pf, cpu.h), and into L1 the same line of what the next
 * step loads: the scores the head's V rows, the sums the next head's K rows (pf_line()).
 * For int8 each group of gs elements is scaled by its token's scale as it is loaded.  NQ is
 * a compile-time constant in every instance (the switch at the bottom), so the small loops
 * over queries unroll.
 */
#ifndef KVMM_KERNELS_CPU_ATTN_VEC_H
#define KVMM_KERNELS_CPU_ATTN_VEC_H

#define QB 4 /* queries per block */
#ifndef QK_QB
#define QK_QB QB
#endif
#ifndef PV_DB
#define PV_DB 4 /* vectors of dims per pass of the weighted sums (registers: QB * PV_DB) */
#endif

/* (dt is a constant in every instance: kvmm_dtype_size() folds to one) */
static __always_inline const char *elem(uint32_t dt, const void *row, uint32_t i)
{
	return (const char *)row + (uint64_t)i * kvmm_dtype_size(dt);
}

/*
 * Element i of a row starts a 64-byte line of it: prefetch that line of the next chunk, pf
 * bytes on, into L2, and the line l1 bytes on, into L1: the same line of the rows the step
 * after this one loads (kvmm_cpu_prefetch_l1(): the scores prefetch the head's V rows, vk on,
 * the sums the next head's K rows, next_head_k()); l1 0 for none (c->l1 off).  With the dims
 * a constant (the head-dim instances) the test folds away.
 */
static __always_inline void pf_line(uint32_t dt, const void *row, uint32_t i, int64_t pf,
				    int64_t l1)
{
	if (((uint64_t)i * kvmm_dtype_size(dt)) % 64 == 0) {
		kvmm_cpu_prefetch(elem(dt, row, i) + pf);
		if (l1)
			kvmm_cpu_prefetch_l1(elem(dt, row, i) + l1);
	}
}

/* from a V row of head h to the K row of head h + 1 (for the last head: the next row's) */
static __always_inline int64_t next_head_k(uint32_t dt, const struct kvmm_cpu_chunk *c,
					   const struct kvmm_cpu_seg *sg, uint32_t dim)
{
	return c->l1 ? (sg->k - sg->v) + (int64_t)dim * kvmm_dtype_size(dt) : 0;
}

static __always_inline float row_scale(const float *sc, uint64_t sstride, uint32_t t, uint32_t g)
{
	return ((const float *)((const char *)sc + t * sstride))[g];
}

/* s[q * sq + t] = dot(q_q, row t) for q < NQ, t < n; vk: from a K row to its V row */
static __always_inline void qk_block(uint32_t dt, uint32_t NQ, const float *q, uint64_t qstride,
				     const void *row, uint64_t stride, const float *sc,
				     uint64_t sstride, uint32_t n, uint32_t dim, uint32_t gs,
				     float *s, uint64_t sq, int64_t pf, int64_t pfs, int64_t vk)
{
	if (dt != KVMM_DTYPE_INT8)
		gs = dim;
	for (uint32_t t = 0; t < n; t++) {
		const void *r = (const char *)row + t * stride;
		vec sum[QB];
		uint32_t i;

		_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++) sum[i] = vzero();
		if (dt == KVMM_DTYPE_INT8)
			kvmm_cpu_prefetch((const char *)sc + t * sstride + pfs);
		for (uint32_t g0 = 0; g0 < dim; g0 += gs) {
			vec sv = dt == KVMM_DTYPE_INT8 ? vset1(row_scale(sc, sstride, t, g0 / gs))
						       : vzero();

			for (uint32_t d = g0; d < g0 + gs; d += VW) {
				vec kv = vload_kv(dt, elem(dt, r, d), g0 + gs - d);

				pf_line(dt, r, d, pf, vk);
				if (dt == KVMM_DTYPE_INT8)
					kv = vmul(kv, sv);
				_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++) sum[i] =
					vfma(vloadf(q + i * qstride + d), kv, sum[i]);
			}
		}
		_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++) s[i * sq + t] = vhsum(sum[i]);
	}
}

/* acc_q = corr[q] * acc_q + sum over t < c->n of p[q * sp + t] * V row t, for q < NQ */
static __always_inline void pv_block(uint32_t dt, uint32_t NQ, const struct kvmm_cpu_chunk *c,
				     float *acc, uint64_t astride, const float *p, uint64_t sp,
				     const float *corr, uint32_t dim, uint32_t gs)
{
	uint64_t stride = c->stride, sstride = c->sstride;
	float one[QB];

	if (gs % VW) {
		/*
		 * A group's last vector reaches into the next group (int8 groups that are not
		 * whole vectors): those lanes are loaded and stored back unchanged, so they must
		 * not be rescaled twice; rescale every row first instead.
		 */
		for (uint32_t i = 0; i < NQ; i++) {
			for (uint32_t d = 0; d < dim; d += VW)
				vstoref(acc + i * astride + d,
					vmul(vset1(corr[i]), vloadf(acc + i * astride + d)));
			one[i] = 1.0f;
		}
		corr = one;
	}
	for (uint32_t g0 = 0; g0 < dim; g0 += gs) {
		uint32_t d = g0;

		/*
		 * PV_DB vectors of dims at a time, their NQ * PV_DB sums in registers over all
		 * the chunk's runs: each weight is broadcast once per PV_DB vectors instead of
		 * once per vector, and an accumulator is loaded (and rescaled) and stored once
		 * per chunk.
		 */
		for (; d + PV_DB * VW <= g0 + gs; d += PV_DB * VW) {
			vec a[QB][PV_DB];
			uint32_t i, k, t0 = 0;

			_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
			{
				vec cv = vset1(corr[i]);

				_Pragma("GCC unroll 4") for (k = 0; k < PV_DB; k++) a[i][k] =
					vmul(cv, vloadf(acc + i * astride + d + k * VW));
			}
			for (const struct kvmm_cpu_seg *sg = c->seg; t0 < c->n; t0 += sg->n, sg++) {
				const char *row = sg->v + c->hoff;
				const float *sc = dt == KVMM_DTYPE_INT8
							  ? (const float *)(sg->vs + c->hsoff)
							  : NULL;
				uint32_t n = min_t(uint32_t, sg->n, c->n - t0);

				for (uint32_t t = 0; t < n; t++) {
					const char *r = row + t * stride;
					vec vv[PV_DB];

					if (dt == KVMM_DTYPE_INT8 && d == 0)
						kvmm_cpu_prefetch((const char *)sc + t * sstride +
								  sg->pfs);
					_Pragma("GCC unroll 4") for (k = 0; k < PV_DB; k++)
					{
						pf_line(dt, r, d + k * VW, sg->pf,
							next_head_k(dt, c, sg, dim));
						vv[k] = vload_kv(dt, elem(dt, r, d + k * VW), VW);
						if (dt == KVMM_DTYPE_INT8)
							vv[k] = vmul(vv[k],
								     vset1(row_scale(sc, sstride, t,
										     g0 / gs)));
					}
					_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
					{
						vec pb = vset1(p[i * sp + t0 + t]);

						_Pragma("GCC unroll 4") for (k = 0; k < PV_DB; k++)
							a[i][k] = vfma(pb, vv[k], a[i][k]);
					}
				}
			}
			_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
				_Pragma("GCC unroll 4") for (k = 0; k < PV_DB; k++)
					vstoref(acc + i * astride + d + k * VW, a[i][k]);
		}
		for (; d < g0 + gs; d += VW) {
			vec a[QB];
			uint32_t i, t0 = 0;

			/* lanes past the group load zeros from the rows: they add nothing */
			_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++) a[i] =
				vmul(vset1(corr[i]), vloadf(acc + i * astride + d));
			for (const struct kvmm_cpu_seg *sg = c->seg; t0 < c->n; t0 += sg->n, sg++) {
				const char *row = sg->v + c->hoff;
				const float *sc = dt == KVMM_DTYPE_INT8
							  ? (const float *)(sg->vs + c->hsoff)
							  : NULL;
				uint32_t n = min_t(uint32_t, sg->n, c->n - t0);

				for (uint32_t t = 0; t < n; t++) {
					vec vv = vload_kv(dt, elem(dt, row + t * stride, d),
							  g0 + gs - d);

					if (dt == KVMM_DTYPE_INT8 && d == 0)
						kvmm_cpu_prefetch((const char *)sc + t * sstride +
								  sg->pfs);
					pf_line(dt, row + t * stride, d, sg->pf,
						next_head_k(dt, c, sg, dim));
					if (dt == KVMM_DTYPE_INT8)
						vv = vmul(vv, vset1(row_scale(sc, sstride, t,
									      g0 / gs)));
					_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++) a[i] =
						vfma(vset1(p[i * sp + t0 + t]), vv, a[i]);
				}
			}
			_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
				vstoref(acc + i * astride + d, a[i]);
		}
	}
}

/* the same as qk_block, four rows at a time (then qk_block for the last n % 4) */
static __always_inline void qk_block4(uint32_t dt, uint32_t NQ, const float *q, uint64_t qstride,
				      const void *row, uint64_t stride, const float *sc,
				      uint64_t sstride, uint32_t n, uint32_t dim, uint32_t gs,
				      float *s, uint64_t sq, int64_t pf, int64_t pfs, int64_t vk)
{
	uint32_t t = 0, i, u;

	if (dt != KVMM_DTYPE_INT8)
		gs = dim;
	for (; t + 4 <= n; t += 4) {
		const char *r = (const char *)row + t * stride;
		vec sum[QB][4]; /* NQ <= QK_QB of them used */

		_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
			_Pragma("GCC unroll 4") for (u = 0; u < 4; u++) sum[i][u] = vzero();
		for (uint32_t g0 = 0; g0 < dim; g0 += gs) {
			vec sv[4];

			if (dt == KVMM_DTYPE_INT8)
				_Pragma("GCC unroll 4") for (u = 0; u < 4; u++)
				{
					if (g0 == 0)
						kvmm_cpu_prefetch((const char *)sc +
								  (t + u) * sstride + pfs);
					sv[u] = vset1(row_scale(sc, sstride, t + u, g0 / gs));
				}
			for (uint32_t d = g0; d < g0 + gs; d += VW) {
				vec kv[4];

				_Pragma("GCC unroll 4") for (u = 0; u < 4; u++)
				{
					pf_line(dt, r + u * stride, d, pf, vk);
					kv[u] = vload_kv(dt, elem(dt, r + u * stride, d),
							 g0 + gs - d);
					if (dt == KVMM_DTYPE_INT8)
						kv[u] = vmul(kv[u], sv[u]);
				}
				_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
				{
					vec qv = vloadf(q + i * qstride + d);

					_Pragma("GCC unroll 4") for (u = 0; u < 4; u++) sum[i][u] =
						vfma(qv, kv[u], sum[i][u]);
				}
			}
		}
		_Pragma("GCC unroll 4") for (i = 0; i < NQ; i++)
			vhsum4(s + i * sq + t, sum[i][0], sum[i][1], sum[i][2], sum[i][3]);
	}
	if (t < n) /* sc is NULL unless int8: no offset on a null pointer */
		qk_block(dt, NQ, q, qstride, (const char *)row + t * stride, stride,
			 sc ? (const float *)((const char *)sc + t * sstride) : NULL, sstride,
			 n - t, dim, gs, s + t, sq, pf, pfs, vk);
}

/* the queries QK_QB at a time, each block over every run of the chunk */
static __always_inline void qk_chunk(uint32_t dt, const struct kvmm_cpu_chunk *c, const float *q,
				     uint64_t qstride, uint32_t nq, float *s, uint64_t sq,
				     uint32_t dim, uint32_t gs)
{
	for (uint32_t b = 0; b < nq; b += QK_QB) {
		const float *qb = q + b * qstride;
		uint32_t t0 = 0;

		for (const struct kvmm_cpu_seg *sg = c->seg; t0 < c->n; t0 += sg->n, sg++) {
			const char *row = sg->k + c->hoff;
			const float *sc =
				dt == KVMM_DTYPE_INT8 ? (const float *)(sg->ks + c->hsoff) : NULL;
			uint32_t n = min_t(uint32_t, sg->n, c->n - t0);
			float *sb = s + b * sq + t0;
			int64_t vk = c->l1 ? sg->v - sg->k : 0; /* to the V rows, for pf_line() */

			switch (nq - b >= QK_QB ? QK_QB : nq - b) {
			case 4:
				qk_block4(dt, 4, qb, qstride, row, c->stride, sc, c->sstride, n,
					  dim, gs, sb, sq, sg->pf, sg->pfs, vk);
				break;
			case 3:
				qk_block4(dt, 3, qb, qstride, row, c->stride, sc, c->sstride, n,
					  dim, gs, sb, sq, sg->pf, sg->pfs, vk);
				break;
			case 2:
				qk_block4(dt, 2, qb, qstride, row, c->stride, sc, c->sstride, n,
					  dim, gs, sb, sq, sg->pf, sg->pfs, vk);
				break;
			default:
				qk_block4(dt, 1, qb, qstride, row, c->stride, sc, c->sstride, n,
					  dim, gs, sb, sq, sg->pf, sg->pfs, vk);
				break;
			}
		}
	}
}

static __always_inline void pv_chunk(uint32_t dt, const struct kvmm_cpu_chunk *c, float *acc,
				     uint64_t astride, const float *p, uint64_t sp, uint32_t nq,
				     const float *corr, uint32_t dim, uint32_t gs)
{
	for (uint32_t b = 0; b < nq; b += QB) {
		float *ab = acc + b * astride;
		const float *pb = p + b * sp;

		switch (nq - b >= QB ? QB : nq - b) {
		case 4:
			pv_block(dt, 4, c, ab, astride, pb, sp, corr + b, dim, gs);
			break;
		case 3:
			pv_block(dt, 3, c, ab, astride, pb, sp, corr + b, dim, gs);
			break;
		case 2:
			pv_block(dt, 2, c, ab, astride, pb, sp, corr + b, dim, gs);
			break;
		default:
			pv_block(dt, 1, c, ab, astride, pb, sp, corr + b, dim, gs);
			break;
		}
	}
}

/*
 * The common head dims get their own instances, with the dim (and a group of the whole head)
 * a constant: every loop over dims unrolls and no load needs a tail mask.  Others (odd dims,
 * int8 groups smaller than the head) take the general loops.
 */
#define DIM_CASE(D, call_)                                              \
	if (c->dim == (D) && (dt != KVMM_DTYPE_INT8 || c->gs == (D))) { \
		call_(D, D);                                            \
		return;                                                 \
	}

static __always_inline void qk_body(uint32_t dt, const struct kvmm_cpu_chunk *c, const float *q,
				    uint64_t qstride, uint32_t nq, float *s, uint64_t sq)
{
#define QK_CALL(D, G) qk_chunk(dt, c, q, qstride, nq, s, sq, D, G)
	DIM_CASE(128, QK_CALL)
	DIM_CASE(64, QK_CALL)
	qk_chunk(dt, c, q, qstride, nq, s, sq, c->dim, dt == KVMM_DTYPE_INT8 ? c->gs : c->dim);
#undef QK_CALL
}

static __always_inline void pv_body(uint32_t dt, const struct kvmm_cpu_chunk *c, float *acc,
				    uint64_t astride, const float *p, uint64_t sp, uint32_t nq,
				    const float *corr)
{
#define PV_CALL(D, G) pv_chunk(dt, c, acc, astride, p, sp, nq, corr, D, G)
	DIM_CASE(128, PV_CALL)
	DIM_CASE(64, PV_CALL)
	pv_chunk(dt, c, acc, astride, p, sp, nq, corr, c->dim,
		 dt == KVMM_DTYPE_INT8 ? c->gs : c->dim);
#undef PV_CALL
}

/*
 * The online-softmax step of each query, with the file's row_max() and expsum(): the new max
 * against the running one, the factor that rescales what was summed (0 before the first
 * token: m is -inf and acc and l are zeros; exactly 1 when the max did not grow), the chunk's
 * weights and their sum.
 */
static void softmax_vec(float *s, uint64_t sq, uint32_t nq, uint32_t n, float *m, float *l,
			float *corr)
{
	for (uint32_t i = 0; i < nq; i++) {
		float *si = s + i * sq, mo = m[i], cm = row_max(si, n), mn = cm > mo ? cm : mo;

		corr[i] = mo == -INFINITY ? 0.0f : mn > mo ? expf(mo - mn) : 1.0f;
		l[i] = l[i] * corr[i] + expsum(si, n, mn);
		m[i] = mn;
	}
}

#define VEC_OPS(name, dt)                                                                       \
	static void qk_##name(const struct kvmm_cpu_chunk *c, const float *q, uint64_t qstride, \
			      uint32_t nq, float *s, uint64_t sq)                               \
	{                                                                                       \
		qk_body(dt, c, q, qstride, nq, s, sq);                                          \
	}                                                                                       \
	static void pv_##name(const struct kvmm_cpu_chunk *c, float *acc, uint64_t astride,     \
			      const float *p, uint64_t sp, uint32_t nq, const float *corr)      \
	{                                                                                       \
		pv_body(dt, c, acc, astride, p, sp, nq, corr);                                  \
	}

#endif /* KVMM_KERNELS_CPU_ATTN_VEC_H */
