// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/attn.cu - paged decode and prefill attention on the GPU: one kernel body, split-K
 * ("flash decoding") for memory bandwidth (included by module.cu, compiled once per dtype and
 * once for each of decode and prefill).
 *
 * A block serves a set of query "slots" that share one KV head: in decode, all (up to
 * KVMM_CUDA_DECODE_GMAX) GQA query heads of the KV head in one sequence; in prefill, d.rows
 * consecutive new tokens times those query heads (GQA 4: 2 tokens x 4 heads; MHA: 8 tokens),
 * each slot with its causal limit (position + 1).  Every K/V byte a block stages is used by
 * all its slots, so it comes from memory once per block instead of once per query head and
 * token.  Decode reads every K and V byte of a layer once and does little arithmetic per
 * byte, so the kernel is built to keep the memory system full:
 *   - a block serves one KV head and all (up to KVMM_CUDA_DECODE_GMAX) of its GQA query
 *     heads, so each K/V byte comes from DRAM once per step, not once per query head;
 *   - a sequence's context is cut into nsplit ranges of whole tiles, one block each, so a
 *     single 32k-token sequence still occupies every SM; each block leaves its part (the
 *     unnormalised accumulator, running max m and sum l of each slot) and the merge kernel
 *     combines the parts exactly as kernels/cpu/attn.c's merge_parts():
 *     M = max m_k over parts with l_k > 0, out = sum exp(m_k - M) acc_k / sum exp(m_k - M) l_k;
 *   - the tiles of K and V rows (tile tokens, one head) are staged in shared memory with
 *     cp.async 16-byte copies (no registers held while the data is in flight), two stages:
 *     tile i + 1 is in flight while tile i is computed;
 *   - the block computes a tile in three barrier-separated steps: scores (tpt threads per
 *     token, each over interleaved 16-byte chunks of the K row against the scaled queries in
 *     shared memory, then an xor-shuffle sum; prefill masks tokens past a slot's limit), the
 *     online-softmax update of each slot (one warp per slot: tile max, new max, weights, sum,
 *     correction factor), and the weighted V sum (lpr lanes per V row, 8 elements each,
 *     128 / lpr rows at a time; each thread keeps 8 accumulators per slot in registers).  The
 *     threads' accumulators are all relative to the same running max, so the block's result
 *     is their plain sum.
 *
 * Prefill's rows: the new tokens of sequence s are rows qstart(s) .. qstart(s) + n - 1 of q and
 * out, n = q_lens[s] clamped to its context and qstart(s) the sum of n over the sequences
 * before it, which the block computes from q_lens itself (the host cannot read device
 * arrays).  Rows past max_q_len are not computed (the grid and the parts are sized by it) but
 * still count in qstart.  Parts (split) are indexed by (s, row) with max_q_len rows per
 * sequence, so their scratch is bounded by what the host knows.
 *
 * Alignment: cp.async of 16 bytes needs 16-byte aligned source and destination.  The host
 * sets vec only when the pool base, page size, the layer's slab offsets, the row size and a
 * head's row (head_dim * elem) are multiples of 16 (int8 scales: of 4); otherwise the rows are
 * staged byte by byte (slow, correct, never reading a byte outside the head's row).  Shared
 * rows are row_stride apart, a multiple of 16 padded so that the lanes reading one 16-byte
 * chunk position of different rows hit different banks.
 *
 * Bad input from device arrays is made harmless as elsewhere: a block-table entry that is
 * negative or past nr_frames stages zeros and marks its tokens absent (score -inf, weight 0),
 * and lengths past the block table are clamped.  A sequence with no token yields zeros.
 *
 * Registers: 64 accumulators (8 slots x 8 elements) dominate; __launch_bounds__(128, 4)
 * caps a thread at 128 registers so that four blocks fit an SM by registers (ptxas: no
 * spills); shared memory (at most 48 KiB) allows four on sm_90 (228 KiB) and three on
 * sm_80 (164 KiB).  Documentation/kernels/cuda.md has the numbers and the reasoning.
 */

/* tokens a sequence's block table can hold: longer lengths are clamped to it */
__device__ __forceinline__ uint32_t clamp_len(const struct kvmm_cuda_attn_args &a, uint32_t n)
{
	uint64_t cap = (uint64_t)a.max_blocks * a.pg.tokens_per_page;

	return n > cap ? (uint32_t)cap : n;
}

/* per-dtype constants of the decode kernel */
template <int DT> struct dec_shape {
	static const uint32_t elem = elem_size<DT>::v;
	static const uint32_t vek = 16 / elem; /* elements per 16-byte K chunk */
	/*
	 * floats between the queries of consecutive K chunks in shared memory: vek, made an odd
	 * number of 16-byte units (fp16 12, int8 20), so that the scores' lanes of one row, each
	 * on its own chunk, read their queries from distinct banks (plan: qstride)
	 */
	static const uint32_t qcs = (vek / 4 | 1) * 4;
	static const uint32_t vb = DT == DT_INT8 ? 8 : 16;    /* bytes per V vector */
	static const uint32_t ve = vb / elem;		      /* elements per V vector */
	static const uint32_t nv = KVMM_CUDA_DECODE_EPL / ve; /* V vectors per lane */
};

/*
 * The unaligned path: bytes [off, off + 16) of a row of n bytes to dst, zeros past n, one
 * byte at a time (slow and rare; not unrolled, so that it costs no registers).
 */
__device__ __forceinline__ void bytes16(char *dst, const unsigned char *src, uint32_t off,
					uint32_t n)
{
#pragma unroll 1
	for (uint32_t b = 0; b < 16; b++)
		dst[b] = off + b < n ? (char)src[off + b] : 0;
}

__device__ __forceinline__ float bytes4f(const unsigned char *src)
{
	return __uint_as_float((uint32_t)src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 |
			       (uint32_t)src[3] << 24);
}

/* the elements packed in a 32-bit word, widened to fp32 (int8: the raw integers) */
template <int DT> __device__ __forceinline__ void widen(uint32_t w, float *x)
{
	if constexpr (DT == DT_FP32) {
		x[0] = __uint_as_float(w);
	} else if constexpr (DT == DT_FP16) {
		x[0] = half_bits_to_f32(w & 0xffffu);
		x[1] = half_bits_to_f32(w >> 16);
	} else if constexpr (DT == DT_BF16) {
		x[0] = __uint_as_float(w << 16);
		x[1] = __uint_as_float(w & 0xffff0000u);
	} else {
		/* 1.5 * 2^23 + i is exact for |i| < 2^22: an add instead of a slow I2F */
#pragma unroll
		for (uint32_t i = 0; i < 4; i++)
			x[i] = __int_as_float(0x4b400000 + (int)(signed char)(w >> (8 * i))) -
			       12582912.0f;
	}
}

/* NB (8 or 16) bytes of staged elements at p (NB-aligned shared memory) as fp32 */
template <int DT, uint32_t NB> __device__ __forceinline__ void load_vec(const char *p, float *x)
{
	const uint32_t per = 4 / elem_size<DT>::v; /* elements per 32-bit word */
	uint32_t w[NB / 4];

	KVMM_SMEM_LOAD(p, NB);
	if constexpr (NB == 16) {
		uint4 u = *(const uint4 *)p;

		w[0] = u.x;
		w[1] = u.y;
		w[2] = u.z;
		w[3] = u.w;
	} else {
		uint2 u = *(const uint2 *)p;

		w[0] = u.x;
		w[1] = u.y;
	}
#pragma unroll
	for (uint32_t i = 0; i < NB / 4; i++)
		widen<DT>(w[i], x + i * per);
}

/* int8: scale n elements from element d0 of a row by their groups' scales sc */
__device__ __forceinline__ uint32_t scale_idx(const struct kvmm_cuda_decode_args &d, uint32_t e)
{
	return min((e * d.gmagic) >> 16, d.ngroups - 1);
}

template <uint32_t N>
__device__ __forceinline__ void apply_scales(const struct kvmm_cuda_decode_args &d, const float *sc,
					     uint32_t d0, float *x)
{
	if (d.a.pg.gs % N == 0) {
		/* the common case (groups of 16, 32, ... elements): one scale per vector */
		float s = sc[scale_idx(d, d0)];

#pragma unroll
		for (uint32_t e = 0; e < N; e++)
			x[e] *= s;
	} else {
#pragma unroll
		for (uint32_t e = 0; e < N; e++)
			x[e] *= sc[scale_idx(d, d0 + e)];
	}
}

/*
 * Stage tokens [t0, t0 + tn) of head h into stage st: K and V rows, int8 scales, and an ok
 * flag per token.  Thread layout: sl lanes per row (chunk c = lane, lane + sl, ...), 128 / sl
 * rows at a time.  (cur_pi, cur_f) caches the thread's last block-table lookup: its rows only
 * move forward, so the table is read once per page, not once per row.
 */
template <int DT>
__device__ __forceinline__ void
stage_tile(const struct kvmm_cuda_decode_args &d, const int32_t *table, uint32_t h, char *st,
	   uint32_t t0, uint32_t tn, uint32_t sl_sh, uint32_t &cur_pi, int32_t &cur_f)
{
	typedef dec_shape<DT> X;
	const struct kvmm_cuda_pages &pg = d.a.pg;
	const uint32_t sl = d.sl, srow = threadIdx.x >> sl_sh, slane = threadIdx.x & (sl - 1);
	const uint32_t sstep = KVMM_CUDA_DECODE_THREADS >> sl_sh, tpp = pg.tokens_per_page;
	const uint32_t rbytes = pg.head_dim * X::elem;
	const uint64_t hoff = (uint64_t)h * rbytes;
	const uint64_t hsoff = (uint64_t)h * d.ngroups * sizeof(float);
	uint32_t pi, pr;

	if (srow >= tn)
		return;
	pi = (t0 + srow) / tpp;
	pr = (t0 + srow) - pi * tpp;
#pragma unroll 1
	for (uint32_t r = srow; r < tn; r += sstep) {
		char *kd = st + r * d.row_stride, *vd = st + d.v_soff + r * d.row_stride;
		float *ksd = (float *)(st + d.ks_soff) + r * d.ngroups;
		float *vsd = (float *)(st + d.vs_soff) + r * d.ngroups;

		if (pi != cur_pi) {
			cur_pi = pi;
			cur_f = block_frame(pg, table, pi);
		}
		if (cur_f >= 0) {
			const char *page = (const char *)(pg.base + (uint64_t)cur_f * pg.page_size);
			const char *ks = page + pg.k_off + (uint64_t)pr * pg.row_bytes + hoff;
			const char *vs = page + pg.v_off + (uint64_t)pr * pg.row_bytes + hoff;

#pragma unroll 1
			for (uint32_t c = slane; c < d.chunks; c += sl) {
				if (d.vec) {
					cp_async16(kd + 16 * c, ks + 16 * c);
					cp_async16(vd + 16 * c, vs + 16 * c);
				} else {
					bytes16(kd + 16 * c, (const unsigned char *)ks, 16 * c,
						rbytes);
					bytes16(vd + 16 * c, (const unsigned char *)vs, 16 * c,
						rbytes);
				}
			}
			if (DT == DT_INT8) {
				const char *kss = page + pg.ks_off +
						  (uint64_t)pr * pg.scale_row_bytes + hsoff;
				const char *vss = page + pg.vs_off +
						  (uint64_t)pr * pg.scale_row_bytes + hsoff;

#pragma unroll 1
				for (uint32_t g = slane; g < d.ngroups; g += sl) {
					if (d.vec) {
						cp_async4(ksd + g, kss + 4 * g);
						cp_async4(vsd + g, vss + 4 * g);
					} else {
						ksd[g] =
							bytes4f((const unsigned char *)kss + 4 * g);
						vsd[g] =
							bytes4f((const unsigned char *)vss + 4 * g);
					}
				}
			}
		} else {
/* absent: zeros, so that weight 0 times the row is 0, never NaN */
#pragma unroll 1
			for (uint32_t c = slane; c < d.chunks; c += sl) {
				*(uint4 *)(kd + 16 * c) = make_uint4(0, 0, 0, 0);
				*(uint4 *)(vd + 16 * c) = make_uint4(0, 0, 0, 0);
			}
#pragma unroll 1
			for (uint32_t g = slane; DT == DT_INT8 && g < d.ngroups; g += sl) {
				ksd[g] = 0.0f;
				vsd[g] = 0.0f;
			}
		}
		if (slane == 0)
			((int *)(st + d.ok_soff))[r] = cur_f >= 0;
		pr += sstep;
		while (pr >= tpp) {
			pr -= tpp;
			pi++;
		}
	}
}

/*
 * The double-buffered walk over tokens [tbeg, tend) in tiles of `tile`: while work(st, t0, tn)
 * computes the tile of tn tokens from t0 in stage st, the next tile is in flight (cp.async) to
 * the other stage.  Every thread of the block calls it, and work may hold barriers of its own;
 * when work runs, every thread is done with the other stage.  ZT: zero the V rows (and int8
 * scales) of a stage past its tile's last token, up to `tile` (the tensor-core kernels
 * multiply whole fragments of them by weight 0, and 0 times a NaN left in shared memory is
 * not 0).
 */
template <int DT, bool ZT, typename W>
__device__ __forceinline__ void tile_walk(const struct kvmm_cuda_decode_args &d,
					  const int32_t *table, uint32_t h, uint32_t tile,
					  uint32_t tbeg, uint32_t tend, W &&work)
{
	char *smem = kvmm_decode_smem;
	const uint32_t sl_sh = __ffs(d.sl) - 1;
	uint32_t cur_pi = 0xffffffffu, s = 0;
	int32_t cur_f = -1;
	/* stage tn tokens from t0 into st */
	auto stage = [&](char *st, uint32_t t0, uint32_t tn) {
		stage_tile<DT>(d, table, h, st, t0, tn, sl_sh, cur_pi, cur_f);
		if constexpr (ZT) {
			for (uint32_t i = threadIdx.x; i < (tile - tn) * d.row_stride / 16;
			     i += KVMM_CUDA_DECODE_THREADS)
				*(uint4 *)(st + d.v_soff + tn * d.row_stride + 16 * i) =
					make_uint4(0, 0, 0, 0);
			for (uint32_t i = tn * d.ngroups + threadIdx.x; i < tile * d.ngroups;
			     i += KVMM_CUDA_DECODE_THREADS)
				((float *)(st + d.vs_soff))[i] = 0.0f;
		}
	};

	if (tbeg < tend)
		stage(smem, tbeg, min(tile, tend - tbeg));
	cp_async_commit();
	for (uint32_t t0 = tbeg; t0 < tend; s ^= 1) {
		const uint32_t tn = min(tile, tend - t0);

		/* tile t0 is in stage s; every thread is done with stage s ^ 1 */
		cp_async_wait_all();
		__syncthreads();
		if (tend - t0 > tile)
			stage(smem + (s ^ 1) * d.stage_bytes, t0 + tile,
			      min(tile, tend - t0 - tile));
		cp_async_commit();
		work((const char *)smem + s * d.stage_bytes, t0, tn);
		if (tend - t0 <= tile)
			break;
		t0 += tile;
	}
}

/*
 * scores of the tile's tn tokens (t0 ...) for the block's ns slots, into ss[g][t]; prefill
 * (P) scores a token at or past slot g's limit slim[g] -inf, as an absent one
 */
template <int DT, bool P>
__device__ __forceinline__ void tile_scores(const struct kvmm_cuda_decode_args &d, const char *st,
					    const float *sq, float *ss, uint32_t tn, uint32_t ns,
					    uint32_t tpt_sh, uint32_t t0, const uint32_t *slim)
{
	typedef dec_shape<DT> X;
	const uint32_t tpt = d.tpt, t = threadIdx.x >> tpt_sh, sub = threadIdx.x & (tpt - 1);
	float dot[KVMM_CUDA_DECODE_GMAX];

#pragma unroll
	for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++)
		dot[g] = 0.0f;
	if (t < tn) {
		const char *kr = st + t * d.row_stride;
		const float *ksc = (const float *)(st + d.ks_soff) + t * d.ngroups;

#pragma unroll 1
		for (uint32_t c = sub; c < d.chunks; c += tpt) {
			float k[X::vek];

			load_vec<DT, 16>(kr + 16 * c, k);
			if (DT == DT_INT8)
				apply_scales<X::vek>(d, ksc, c * X::vek, k);
#pragma unroll
			for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++) {
				const float4 *qv =
					(const float4 *)(sq + g * d.qstride + c * X::qcs);

				if (g >= ns)
					break;
#pragma unroll
				for (uint32_t i = 0; i < X::vek / 4; i++) {
					KVMM_SMEM_LOAD(qv + i, 16);
					float4 q4 = qv[i];

					dot[g] = fmaf(q4.x, k[4 * i], dot[g]);
					dot[g] = fmaf(q4.y, k[4 * i + 1], dot[g]);
					dot[g] = fmaf(q4.z, k[4 * i + 2], dot[g]);
					dot[g] = fmaf(q4.w, k[4 * i + 3], dot[g]);
				}
			}
		}
	}
	/* the tpt threads of a token are neighbouring lanes: sum them (every lane takes part) */
	for (uint32_t o = tpt >> 1; o; o >>= 1) {
#pragma unroll
		for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++)
			if (g < ns)
				dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
	}
	if (t < tn && sub == 0) {
		bool ok = ((const int *)(st + d.ok_soff))[t] != 0;

#pragma unroll
		for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++)
			if (g < ns)
				ss[g * d.tile + t] =
					ok && (!P || t0 + t < slim[g]) ? dot[g] : -INFINITY;
	}
}

/*
 * Online softmax over the tile, one warp per slot: the new running max, the weights
 * exp(s - max) in place of the scores, the sum and the factor exp(old max - new max) that
 * rescales what was summed before.  While no token has been seen the max is -inf, and then
 * the weights are 0 and the factor 1 (exp(-inf - -inf) would be NaN).
 */
__device__ __forceinline__ void tile_softmax(const struct kvmm_cuda_decode_args &d, float *ss,
					     float *sst, uint32_t tn, uint32_t ns)
{
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float *sm = sst, *sl = sst + KVMM_CUDA_DECODE_GMAX, *sc = sst + 2 * KVMM_CUDA_DECODE_GMAX;

	for (uint32_t g = warp; g < ns; g += KVMM_CUDA_DECODE_WARPS) {
		float *row = ss + g * d.tile, mo = sm[g], mx = -INFINITY, mn, sum = 0.0f;

		for (uint32_t t = lane; t < tn; t += 32)
			mx = fmaxf(mx, row[t]);
		mn = fmaxf(mo, warp_max(mx));
		for (uint32_t t = lane; t < tn; t += 32) {
			float p = mn == -INFINITY ? 0.0f : expf(row[t] - mn);

			row[t] = p;
			sum += p;
		}
		sum = warp_sum(sum);
		if (lane == 0) {
			float corr = mn == -INFINITY ? 1.0f : expf(mo - mn);

			sc[g] = corr;
			sl[g] = sl[g] * corr + sum;
			sm[g] = mn;
		}
	}
}

/* acc = acc * corr + sum over the thread's tokens of weight * V row (its 8 elements) */
template <int DT>
__device__ __forceinline__ void
tile_values(const struct kvmm_cuda_decode_args &d, const char *st, const float *ss,
	    const float *sst, uint32_t tn, uint32_t ns, uint32_t lpr_sh,
	    float (&acc)[KVMM_CUDA_DECODE_GMAX][KVMM_CUDA_DECODE_EPL])
{
	typedef dec_shape<DT> X;
	const uint32_t lpr = d.lpr, c = threadIdx.x & (lpr - 1);
	const uint32_t nsub = KVMM_CUDA_DECODE_THREADS >> lpr_sh, dim = d.a.pg.head_dim;
	const float *sc = sst + 2 * KVMM_CUDA_DECODE_GMAX;
	uint32_t j = threadIdx.x >> lpr_sh;

	if (d.vk > 1) {
		/* the r rows of a bank phase (128 bytes of loads) vk apart, not consecutive */
		const uint32_t r = (128 / X::vb) >> lpr_sh, i = j % r, p = j / r;

		j = p / d.vk * r * d.vk + p % d.vk + i * d.vk;
	}

#pragma unroll
	for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++) {
		float corr;

		if (g >= ns)
			break;
		corr = sc[g];
#pragma unroll
		for (uint32_t i = 0; i < KVMM_CUDA_DECODE_EPL; i++)
			acc[g][i] *= corr;
	}
#pragma unroll 1
	for (uint32_t t = j; t < tn; t += nsub) {
		const char *vr = st + d.v_soff + t * d.row_stride;
		const float *vsc = (const float *)(st + d.vs_soff) + t * d.ngroups;
		float p[KVMM_CUDA_DECODE_GMAX];

#pragma unroll
		for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++) {
			if (g < ns)
				KVMM_SMEM_LOAD(ss + g * d.tile + t, 4);
			p[g] = g < ns ? ss[g * d.tile + t] : 0.0f;
		}
#pragma unroll
		for (uint32_t v = 0; v < X::nv; v++) {
			const uint32_t d0 = (v * lpr + c) * X::ve;
			float x[X::ve];

			if (d0 >= dim)
				continue;
			load_vec<DT, X::vb>(vr + d0 * X::elem, x);
			if (DT == DT_INT8)
				apply_scales<X::ve>(d, vsc, d0, x);
#pragma unroll
			for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++) {
				if (g >= ns)
					break;
#pragma unroll
				for (uint32_t e = 0; e < X::ve; e++)
					acc[g][v * X::ve + e] =
						fmaf(p[g], x[e], acc[g][v * X::ve + e]);
			}
		}
	}
}

/* prefill: the new tokens of sequence s, clamped to its context */
__device__ __forceinline__ uint32_t seq_new(const struct kvmm_cuda_decode_args &d, uint32_t s,
					    uint32_t ctx)
{
	return min(((const uint32_t *)d.a.q_lens)[s], ctx);
}

/*
 * Prefill: the rows of q and out before sequence seq's, the new tokens of the sequences
 * before it, summed by the block's 128 threads; red is 4 64-bit words of shared memory.
 * Every thread of the block must call it: it has a barrier.
 */
__device__ __forceinline__ uint64_t rows_before(const struct kvmm_cuda_decode_args &d, uint32_t seq,
						uint64_t *red)
{
	uint64_t n = 0;

	for (uint32_t i = threadIdx.x; i < seq; i += KVMM_CUDA_DECODE_THREADS)
		n += seq_new(d, i, clamp_len(d.a, ((const uint32_t *)d.a.ctx_lens)[i]));
	for (int o = 16; o > 0; o >>= 1)
		n += __shfl_xor_sync(0xffffffffu, (unsigned long long)n, o);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = n;
	__syncthreads();
	n = 0;
	for (uint32_t w = 0; w < KVMM_CUDA_DECODE_WARPS; w++)
		n += red[w];
	return n;
}

/*
 * The block's slots: slot g is row g / heads and query head g % heads of the block, at row
 * row0 + (g / heads) * num_q_heads + g % heads of q and out (in head_dim floats) and of the
 * parts (times nsplit).  Decode has one row, so slot g is query head hq0 + g.
 */
struct slots {
	uint64_t orow0, prow0;
	uint32_t heads, nqh;
};

__device__ __forceinline__ uint64_t slot_row(const struct slots &sl, uint64_t row0, uint32_t g)
{
	uint32_t r = g / sl.heads;

	return row0 + (uint64_t)r * sl.nqh + (g - r * sl.heads);
}

/*
 * Prefill: the block's rows, row tile rt of sequence seq (context ctx) for the gbn query heads
 * from hq0: their rows of q, out and the parts (sl), the slots (ns), row r0's causal limit
 * (lim0) and the tokens the last row sees (tend).  False when the tile is past the sequence's
 * rows: the same for the whole block, before any barrier, so the block may return at once;
 * otherwise every thread must call it (rows_before() has a barrier).
 */
__device__ __forceinline__ bool prefill_rows(const struct kvmm_cuda_decode_args &d, uint32_t seq,
					     uint32_t ctx, uint32_t rt, uint32_t hq0, uint32_t gbn,
					     uint64_t *red, struct slots &sl, uint32_t &ns,
					     uint32_t &lim0, uint32_t &tend)
{
	const struct kvmm_cuda_attn_args &a = d.a;
	/* rows past max_q are not computed (the plan sized the grid and parts by it) */
	const uint32_t qnew = seq_new(d, seq, ctx), qlen = min(qnew, d.max_q), r0 = rt * d.rows;
	uint32_t nr;

	if (r0 >= qlen)
		return false;
	nr = min(d.rows, qlen - r0);
	sl.orow0 = (rows_before(d, seq, red) + r0) * a.num_q_heads + hq0;
	sl.prow0 = ((uint64_t)seq * d.max_q + r0) * a.num_q_heads + hq0;
	ns = nr * gbn;
	lim0 = ctx - qnew + r0 + 1; /* row r0's position + 1 */
	tend = lim0 + nr - 1;	    /* the last row's limit */
	return true;
}

/*
 * Split xs of a context cut into nsplit ranges: [tbeg, tend) narrowed to its range; false when
 * nothing is left (the merge reads no part of these rows from this block)
 */
__device__ __forceinline__ bool split_range(const struct kvmm_cuda_decode_args &d, uint32_t xs,
					    uint32_t &tbeg, uint32_t &tend)
{
	uint64_t b = (uint64_t)xs * d.split_tokens;

	if (d.nsplit == 1)
		return true;
	if (b >= tend)
		return false;
	tbeg = (uint32_t)b;
	tend = (uint32_t)min((uint64_t)tend, b + d.split_tokens);
	return true;
}

template <int DT, bool P>
__device__ __forceinline__ void attn_body(const struct kvmm_cuda_decode_args &d)
{
	typedef dec_shape<DT> X;
	const struct kvmm_cuda_attn_args &a = d.a;
	char *smem = kvmm_decode_smem;
	const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t seq = blockIdx.z, h = blockIdx.y;
	/* blockIdx.x = (split * row_tiles + row tile) * nqg + query group */
	const uint32_t xq = blockIdx.x / d.nqg, qg = blockIdx.x - xq * d.nqg;
	const uint32_t xs = xq / d.row_tiles, rt = xq - xs * d.row_tiles;
	const uint32_t hq0 = h * d.group + qg * d.gb, gbn = min(d.gb, d.group - qg * d.gb);
	const uint32_t dim = a.pg.head_dim, tile = d.tile, lpr = d.lpr;
	const uint32_t ctx = clamp_len(a, ((const uint32_t *)a.ctx_lens)[seq]);
	const int32_t *table = (const int32_t *)a.block_tables + (uint64_t)seq * a.max_blocks;
	/* log2 of the power-of-2 thread layouts, so that the index math is shifts and masks */
	const uint32_t tpt_sh = __ffs(d.tpt) - 1, lpr_sh = __ffs(lpr) - 1;
	float *sq = (float *)(smem + d.q_soff), *ss = (float *)(smem + d.s_soff);
	float *sst = (float *)(smem + d.st_soff), *sacc = (float *)smem;
	/* slot limits (prefill) and rows_before()'s words, after max, sum and correction */
	uint32_t *slim = (uint32_t *)(sst + 3 * KVMM_CUDA_DECODE_GMAX);
	uint64_t *sred = (uint64_t *)(sst + 4 * KVMM_CUDA_DECODE_GMAX);
	float acc[KVMM_CUDA_DECODE_GMAX][KVMM_CUDA_DECODE_EPL];
	struct slots sl = {(uint64_t)seq * a.num_q_heads + hq0, 0, gbn, a.num_q_heads};
	uint32_t tbeg = 0, tend = ctx, ns = gbn, lim0 = ctx;

	sl.prow0 = sl.orow0;
	if (P && !prefill_rows(d, seq, ctx, rt, hq0, gbn, sred, sl, ns, lim0, tend))
		return; /* the same for the whole block, before any barrier */
	if (!split_range(d, xs, tbeg, tend))
		return;

	/*
	 * the scaled queries, chunk by chunk qcs floats apart (dec_shape), zero past head_dim (the
	 * padded chunk tail of K is zero too) and in the padding
	 */
	for (uint32_t i = tid; i < ns * d.qstride; i += KVMM_CUDA_DECODE_THREADS) {
		const uint32_t g = i / d.qstride, x = i - g * d.qstride, c = x / X::qcs;
		const uint32_t r = x - c * X::qcs, e = c * X::vek + r;

		sq[i] = r < X::vek && e < dim
				? ((const float *)a.q)[slot_row(sl, sl.orow0, g) * dim + e] *
					  a.scale
				: 0.0f;
	}
	if (tid < KVMM_CUDA_DECODE_GMAX) {
		sst[tid] = -INFINITY;			     /* running max */
		sst[KVMM_CUDA_DECODE_GMAX + tid] = 0.0f;     /* running sum */
		sst[2 * KVMM_CUDA_DECODE_GMAX + tid] = 1.0f; /* correction */
		slim[tid] = lim0 + (P ? tid / gbn : 0);	     /* causal limit (prefill) */
	}
#pragma unroll
	for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++)
#pragma unroll
		for (uint32_t i = 0; i < KVMM_CUDA_DECODE_EPL; i++)
			acc[g][i] = 0.0f;

	tile_walk<DT, false>(d, table, h, tile, tbeg, tend,
			     [&](const char *st, uint32_t t0, uint32_t tn) {
				     tile_scores<DT, P>(d, st, sq, ss, tn, ns, tpt_sh, t0, slim);
				     __syncthreads();
				     tile_softmax(d, ss, sst, tn, ns);
				     __syncthreads();
				     tile_values<DT>(d, st, ss, sst, tn, ns, lpr_sh, acc);
			     });

	/* sum the accumulators: first the row slots of a warp, then the warps in turn */
	for (uint32_t o = lpr; o < 32; o <<= 1) {
#pragma unroll
		for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++)
			if (g < ns)
#pragma unroll
				for (uint32_t i = 0; i < KVMM_CUDA_DECODE_EPL; i++)
					acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
	}
	__syncthreads(); /* the stages are free: sacc aliases them */
	for (uint32_t w = 0; w < KVMM_CUDA_DECODE_WARPS; w++) {
		if (warp == w && lane < lpr) {
#pragma unroll
			for (uint32_t g = 0; g < KVMM_CUDA_DECODE_GMAX; g++) {
				if (g >= ns)
					break;
#pragma unroll
				for (uint32_t v = 0; v < X::nv; v++)
#pragma unroll
					for (uint32_t e = 0; e < X::ve; e++) {
						uint32_t dd = (v * lpr + lane) * X::ve + e;

						if (dd < dim)
							sacc[g * dim + dd] =
								(w ? sacc[g * dim + dd] : 0.0f) +
								acc[g][v * X::ve + e];
					}
			}
		}
		__syncthreads();
	}

	if (d.nsplit == 1) {
		for (uint32_t i = tid; i < ns * dim; i += KVMM_CUDA_DECODE_THREADS) {
			uint32_t g = i / dim, e = i - g * dim;
			float l = sst[KVMM_CUDA_DECODE_GMAX + g];

			((float *)a.out)[slot_row(sl, sl.orow0, g) * dim + e] =
				l > 0.0f ? sacc[i] * (1.0f / l) : 0.0f;
		}
	} else {
		/* part xs of slot g: part row slot_row(prow0, g) * nsplit + xs */
		for (uint32_t i = tid; i < ns * dim; i += KVMM_CUDA_DECODE_THREADS) {
			uint32_t g = i / dim, e = i - g * dim;
			uint64_t r = slot_row(sl, sl.prow0, g) * d.nsplit + xs;

			((float *)d.part_acc)[r * dim + e] = sacc[i];
		}
		if (tid < ns) {
			uint64_t r = slot_row(sl, sl.prow0, tid) * d.nsplit + xs;
			float *ml = (float *)d.part_ml + r * 2;

			ml[0] = sst[tid];
			ml[1] = sst[KVMM_CUDA_DECODE_GMAX + tid];
		}
	}
}

/* the parts of part row p (tokens [0, lim) were split) into row o of out, as merge_parts() */
__device__ __forceinline__ void merge_row(const struct kvmm_cuda_decode_args &d, uint64_t o,
					  uint64_t p, uint32_t lim)
{
	const uint32_t dim = d.a.pg.head_dim;
	/* the splits that had tokens: the kernel wrote exactly these */
	const uint32_t np = (uint32_t)min(((uint64_t)lim + d.split_tokens - 1) / d.split_tokens,
					  (uint64_t)d.nsplit);
	const float *ml = (const float *)d.part_ml + p * d.nsplit * 2;
	const float *acc = (const float *)d.part_acc + p * d.nsplit * dim;
	float *out = (float *)d.a.out + o * dim;
	float mx = -INFINITY;

	for (uint32_t k = 0; k < np; k++)
		if (ml[2 * k + 1] > 0.0f)
			mx = fmaxf(mx, ml[2 * k]);
	for (uint32_t e = threadIdx.x; e < dim; e += blockDim.x) {
		float l = 0.0f, v = 0.0f;

		for (uint32_t k = 0; k < np; k++) {
			float pl = ml[2 * k + 1], w;

			if (!(pl > 0.0f))
				continue; /* a part whose tokens were all absent */
			w = expf(ml[2 * k] - mx);
			l += w * pl;
			v += w * acc[(uint64_t)k * dim + e];
		}
		out[e] = l > 0.0f ? v * (1.0f / l) : 0.0f;
	}
}

/*
 * Merge, grid (num_q_heads, nr_seqs, z): decode's row of (sequence blockIdx.y, query head
 * blockIdx.x); prefill's rows blockIdx.z, + gridDim.z, ... of the sequence for that head.
 */
template <bool P> __device__ __forceinline__ void merge_body(const struct kvmm_cuda_decode_args &d)
{
	__shared__ uint64_t red[KVMM_CUDA_DECODE_WARPS];
	const struct kvmm_cuda_attn_args &a = d.a;
	const uint32_t seq = blockIdx.y, hq = blockIdx.x;
	const uint32_t ctx = clamp_len(a, ((const uint32_t *)a.ctx_lens)[seq]);
	uint64_t qstart;
	uint32_t qnew, qlen;

	if (!P) {
		merge_row(d, (uint64_t)seq * a.num_q_heads + hq, (uint64_t)seq * a.num_q_heads + hq,
			  ctx);
		return;
	}
	qnew = seq_new(d, seq, ctx);
	qlen = min(qnew, d.max_q);
	qstart = rows_before(d, seq, red);
	for (uint32_t r = blockIdx.z; r < qlen; r += gridDim.z)
		merge_row(d, (qstart + r) * a.num_q_heads + hq,
			  ((uint64_t)seq * d.max_q + r) * a.num_q_heads + hq, ctx - qnew + r + 1);
}

#define KVMM_ATTN_KERNELS(name, dt)                                               \
	extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS, 4) \
		kvmm_decode_##name(const struct kvmm_cuda_decode_args d)          \
	{                                                                         \
		attn_body<dt, false>(d);                                          \
	}                                                                         \
	extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS, 4) \
		kvmm_prefill_##name(const struct kvmm_cuda_decode_args d)         \
	{                                                                         \
		attn_body<dt, true>(d);                                           \
	}

KVMM_ATTN_KERNELS(fp32, DT_FP32)
KVMM_ATTN_KERNELS(fp16, DT_FP16)
KVMM_ATTN_KERNELS(bf16, DT_BF16)
KVMM_ATTN_KERNELS(int8, DT_INT8)

extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS)
	kvmm_decode_merge(const struct kvmm_cuda_decode_args d)
{
	merge_body<false>(d);
}

extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS)
	kvmm_prefill_merge(const struct kvmm_cuda_decode_args d)
{
	merge_body<true>(d);
}
