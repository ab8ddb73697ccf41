// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/attn_tc.cu - paged prefill attention on the tensor cores, for fp16, bf16 and int8
 * KV (included by module.cu after attn.cu, whose staging, row offsets, splits and merge it
 * uses).
 *
 * Prefill does many multiply-adds per K/V byte (every new token's query heads against every
 * token it sees), so on CUDA cores it is bound by fp32 FMAs; the tensor cores do the same
 * products an order of magnitude faster.  A block is kvmm_prefill_<dt>'s block grown to
 * KVMM_CUDA_TC_SLOTS slots (d.rows new tokens x d.gb query heads of one KV head, same grid,
 * same splits, same merge): each of its four warps holds 16 slots as the rows of mma.sync
 * m16n8k16 fragments, and per tile of KVMM_CUDA_TC_TILE staged tokens it computes
 *   S = Q K^T   (16 x 32 per warp: 4 n-tiles of 8 tokens, head_dim / 16 k-steps),
 *   the online softmax of S's rows in registers (each lane holds 2 rows x 8 tokens; a row's
 *   4 lanes reduce with two shuffles), and
 *   O += P V    (16 x head_dim: head_dim / 8 n-tiles, 2 k-steps of 16 tokens),
 * with fp32 accumulators throughout.  S's accumulator layout is exactly the A-fragment
 * layout P needs, so the weights never leave the registers.
 *
 * Precision: the K and V elements are fp16 or bf16 already and enter the products exactly.
 * The queries (fp32, scaled) and the weights (fp32) would lose their low bits as 16-bit
 * operands, so each enters as two: hi, the value rounded to the KV's type, and lo, the rounding
 * error x - hi rounded again; hi * k + lo * k is x * k to about 2^-22 (fp16, for |x| >= 2^-3;
 * below, lo is subnormal and the error at most 2^-25 absolute) or 2^-16 (bf16) relative,
 * against 2^-11 / 2^-8 for hi alone.  That doubles the tensor work (still far below the FMA
 * kernel's time) and keeps the results within the bound the fp32 kernels meet against the CPU
 * (test_cuda).  fp16's range still applies to hi: |q * scale| must stay below 65504.  The
 * weights of a tile are divided by a power of two per row first (tc_weights()), so weights far
 * below 1 keep their bits too; and each tile's P V products start from zero and are added to
 * the output in fp32, so no sum runs on through the tensor cores' accumulator from tile to
 * tile (the hardware truncates in its additions, which would drift over a long context).
 *
 * int8 (groups of gs elements, gs a multiple of 16, each with an fp32 scale per token): the
 * integers are exact in fp16, so the products run as fp16's; the scores sum each group's
 * k-steps apart and add them times the tokens' K scales, and the weighted sums take, for each
 * group's n-tiles, the weights times the tokens' V scales (split hi + lo again), so no scaled
 * element is ever rounded to 16 bits.  The integers are widened where the fragments are
 * loaded (each warp its own; converting the tile once in shared memory is left to a GPU
 * session that can measure it).
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
 * lane = 4 * g + t (g = lane / 4, t = lane % 4):
 *   A (16 x 16, row-major), four 32-bit registers of two elements (lower index in the low half):
 *     a[0] = (row g, cols 2t, 2t+1), a[1] = (row g+8, cols 2t, 2t+1),
 *     a[2] = (row g, cols 2t+8, 2t+9), a[3] = (row g+8, cols 2t+8, 2t+9);
 *   B (16 x 8, column-major): b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g);
 *   C (16 x 8, fp32): c[0], c[1] = (row g, cols 2t, 2t+1), c[2], c[3] = (row g+8, same cols).
 * K rows are staged [token][dim], so B = K^T's pairs are one 32-bit load; V's pairs are two
 * 16-bit loads from consecutive token rows.  Staged rows are an odd number of 16-byte units
 * apart (a word stride of 4 mod 8), so no two lanes of a load hit one bank at different words
 * (K: 32 banks; V and int8: lanes sharing a word).
 *
 * Shared memory: two stages of [K rows | V rows | ok flags] of KVMM_CUDA_TC_TILE tokens, then
 * rows_before()'s words (the plan: kvmm_cuda_prefill_plan with tc set).  V rows past a tile's
 * last token are zeroed: their weights are 0, but 0 times a NaN left in shared memory is not.
 */

#define TC_NK (KVMM_CUDA_TC_MAX_DIM / 16) /* k-steps of the scores, at most */
#define TC_NJ (KVMM_CUDA_TC_MAX_DIM / 8)  /* n-tiles of the weighted sums, at most */
#define TC_NT (KVMM_CUDA_TC_TILE / 8)	  /* n-tiles of the scores: 8 tokens each */

/* the 16-bit type the tensor cores multiply for KV of type DT: int8 values are exact in fp16 */
template <int DT> struct tc_type {
	static const int v = DT == DT_BF16 ? DT_BF16 : DT_FP16;
};

/* fp32 from a 16-bit element of DT */
template <int DT> __device__ __forceinline__ float elem16_to_f32(uint32_t b)
{
	if constexpr (DT == DT_BF16)
		return __uint_as_float(b << 16);
	else
		return half_bits_to_f32(b);
}

/* (x0, x1) as two packed pairs of DT elements, x0 in the low halves: hi + lo == x to ~2x DT's bits */
template <int DT>
__device__ __forceinline__ void split2(float x0, float x1, uint32_t &hi, uint32_t &lo)
{
	const uint32_t h0 = cvt_elem<DT>(x0), h1 = cvt_elem<DT>(x1);

	hi = h0 | h1 << 16;
	lo = cvt_elem<DT>(x0 - elem16_to_f32<DT>(h0)) | cvt_elem<DT>(x1 - elem16_to_f32<DT>(h1))
								<< 16;
}

/* an int8 element (the low byte of b) as fp16 bits, exactly */
__device__ __forceinline__ uint32_t i8_to_fp16(uint32_t b)
{
	/* 1.5 * 2^23 + i is exact for |i| < 2^22: an add instead of a slow I2F, as widen() */
	return cvt_elem<DT_FP16>(__int_as_float(0x4b400000 + (int)(signed char)b) - 12582912.0f);
}

/* elements 0 and 1 of DT at p as a packed pair of tc_type<DT> (element 0 low) */
template <int DT> __device__ __forceinline__ uint32_t pair_at(const char *p)
{
	if constexpr (DT == DT_INT8) {
		KVMM_SMEM_LOAD(p, 2);
		const uint32_t w = *(const uint16_t *)p;

		return i8_to_fp16(w & 0xffu) | i8_to_fp16(w >> 8) << 16;
	} else {
		KVMM_SMEM_LOAD(p, 4);
		return *(const uint32_t *)p;
	}
}

/* element c of staged V rows r and r + 1 (rs bytes apart), packed with row r low */
template <int DT>
__device__ __forceinline__ uint32_t vpair(const char *v, uint32_t rs, uint32_t r, uint32_t c)
{
	if constexpr (DT == DT_INT8) {
		KVMM_SMEM_LOAD(v + r * rs + c, 1);
		KVMM_SMEM_LOAD(v + (r + 1) * rs + c, 1);
		return i8_to_fp16((uint8_t)v[r * rs + c]) | i8_to_fp16((uint8_t)v[(r + 1) * rs + c])
								    << 16;
	} else {
		KVMM_SMEM_LOAD(v + r * rs + 2 * c, 2);
		KVMM_SMEM_LOAD(v + (r + 1) * rs + 2 * c, 2);
		const uint16_t lo = *(const uint16_t *)(v + r * rs + 2 * c);
		const uint16_t hi = *(const uint16_t *)(v + (r + 1) * rs + 2 * c);

		return (uint32_t)lo | (uint32_t)hi << 16;
	}
}

/*
 * The scores of the warp's NT * 8 tokens of a tile, from its token tok0 (prefill: all 32 from
 * 0; decode: 8 per warp), for the warp's 16 slots (sc: NT n-tiles of C fragments), masked
 * (absent tokens, tokens past the tile's tn, causal limits la / lb of the lane's rows g and
 * g + 8), then the online softmax: sc becomes the weights, mx / ls the rows' running max and
 * (the lane's share of) sum, and o is rescaled to the new max.
 */
template <int DT, uint32_t NT>
__device__ __forceinline__ void
tc_scores(const struct kvmm_cuda_decode_args &d, const char *st, const uint32_t (&qh)[TC_NK][4],
	  const uint32_t (&ql)[TC_NK][4], uint32_t tok0, uint32_t t0, uint32_t tn, uint32_t la,
	  uint32_t lb, float (&sc)[NT][4], float (&mx)[2], float (&ls)[2], float (&o)[TC_NJ][4])
{
	typedef dec_shape<DT> X;
	const int MT = tc_type<DT>::v;
	const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
	const uint32_t nk = d.a.pg.head_dim / 16, nj = d.a.pg.head_dim / 8, kpg = d.a.pg.gs / 16;
	const int *okf = (const int *)(st + d.ok_soff);
	float m[2] = {-INFINITY, -INFINITY}, nm[2], corr[2], sum[2] = {0.0f, 0.0f};

#pragma unroll
	for (uint32_t nt = 0; nt < NT; nt++) {
		/* B = K^T: this lane's token tok0 + nt * 8 + g, dims 2t, 2t + 1 (+ 8) of a k-step */
		const char *kr = st + (tok0 + nt * 8 + g) * d.row_stride + 2 * t4 * X::elem;
		/* int8: the dot products of the current scale group, its k-steps left, its index */
		float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		uint32_t left = kpg, grp = 0;

#pragma unroll
		for (uint32_t i = 0; i < 4; i++)
			sc[nt][i] = 0.0f;
#pragma unroll
		for (uint32_t kk = 0; kk < TC_NK; kk++) {
			uint32_t b0, b1;

			if (kk >= nk)
				break;
			b0 = pair_at<DT>(kr + 16 * kk * X::elem);
			b1 = pair_at<DT>(kr + (16 * kk + 8) * X::elem);
			if constexpr (DT == DT_INT8) {
				/* a group's products exact, then times the tokens' scales */
				const float *ks = (const float *)(st + d.ks_soff) +
						  (tok0 + nt * 8 + 2 * t4) * d.ngroups;

				mma16816<MT>(part, qh[kk], b0, b1);
				mma16816<MT>(part, ql[kk], b0, b1);
				if (--left)
					continue;
				sc[nt][0] += part[0] * ks[grp];
				sc[nt][1] += part[1] * ks[d.ngroups + grp];
				sc[nt][2] += part[2] * ks[grp];
				sc[nt][3] += part[3] * ks[d.ngroups + grp];
#pragma unroll
				for (uint32_t i = 0; i < 4; i++)
					part[i] = 0.0f;
				left = kpg;
				grp++;
			} else {
				mma16816<MT>(sc[nt], qh[kk], b0, b1);
				mma16816<MT>(sc[nt], ql[kk], b0, b1);
			}
		}
#pragma unroll
		for (uint32_t i = 0; i < 4; i++) {
			const uint32_t tok = tok0 + nt * 8 + 2 * t4 + (i & 1);

			if (!(tok < tn && okf[tok] && t0 + tok < (i < 2 ? la : lb)))
				sc[nt][i] = -INFINITY;
			m[i >> 1] = fmaxf(m[i >> 1], sc[nt][i]);
		}
	}
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		/* a row's tokens are on its 4 lanes (t = 0..3) */
		m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
		m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
		nm[r] = fmaxf(mx[r], m[r]);
		/* no token seen yet: weights 0, factor 1 (exp(-inf - -inf) would be NaN) */
		corr[r] = nm[r] == -INFINITY ? 1.0f : expf(mx[r] - nm[r]);
		mx[r] = nm[r];
	}
#pragma unroll
	for (uint32_t nt = 0; nt < NT; nt++)
#pragma unroll
		for (uint32_t i = 0; i < 4; i++) {
			const float n = nm[i >> 1];
			const float p = n == -INFINITY ? 0.0f : expf(sc[nt][i] - n);

			sc[nt][i] = p;
			sum[i >> 1] += p;
		}
	ls[0] = ls[0] * corr[0] + sum[0];
	ls[1] = ls[1] * corr[1] + sum[1];
#pragma unroll
	for (uint32_t j = 0; j < TC_NJ; j++) {
		if (j >= nj)
			break;
		o[j][0] *= corr[0];
		o[j][1] *= corr[0];
		o[j][2] *= corr[1];
		o[j][3] *= corr[1];
	}
}

/*
 * The weights of a warp's NT n-tiles of tokens from tok0 (the scores' C fragments sc), int8
 * times the tokens' V scales of group grp, as w, and for each of the lane's two rows the power
 * of two at or below the row's largest weight in the tile (nrm; 1 if none), w divided by it.
 * So the 16-bit hi + lo halves of the weights are as precise relative to the tile's largest
 * weight as they are for weights near 1: small weights (a tile far below the running max, or
 * int8's small V scales) would otherwise fall into fp16's subnormals and lose their bits.
 * Every lane of the warp must call it (the rows' maxima are reduced over their 4 lanes).
 */
template <int DT, uint32_t NT>
__device__ __forceinline__ void tc_weights(const struct kvmm_cuda_decode_args &d, const char *st,
					   uint32_t tok0, uint32_t grp, const float (&sc)[NT][4],
					   float (&w)[NT][4], float (&nrm)[2])
{
	const uint32_t t4 = threadIdx.x & 3;
	float mx[2] = {0.0f, 0.0f};

#pragma unroll
	for (uint32_t nt = 0; nt < NT; nt++)
#pragma unroll
		for (uint32_t i = 0; i < 4; i++) {
			w[nt][i] = sc[nt][i];
			if constexpr (DT == DT_INT8)
				w[nt][i] *= ((const float *)(st + d.vs_soff))
					[(tok0 + nt * 8 + 2 * t4 + (i & 1)) * d.ngroups + grp];
			mx[i >> 1] = fmaxf(mx[i >> 1], w[nt][i]);
		}
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		float inv;

		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
		/* the exponent bits alone: a power of two, exact to divide by (0: subnormal, none) */
		nrm[r] = __uint_as_float(__float_as_uint(mx[r]) & 0x7f800000u);
		nrm[r] = nrm[r] > 0.0f ? nrm[r] : 1.0f;
		inv = 1.0f / nrm[r];
#pragma unroll
		for (uint32_t nt = 0; nt < NT; nt++) {
			w[nt][2 * r] *= inv;
			w[nt][2 * r + 1] *= inv;
		}
	}
}

/*
 * o += P V for one tile (prefill, 32 tokens): the weights (tc_weights()) as A fragments, hi
 * and lo, of two k-steps of 16 tokens (S's n-tiles 2 kk and 2 kk + 1); each n-tile's products
 * start from zero and are added to o in fp32, times the rows' factors, so no sum runs on
 * through the tensor cores' accumulator across tiles (their additions truncate on some GPUs);
 * int8: the weights anew for each scale group's n-tiles
 */
template <int DT>
__device__ __forceinline__ void tc_values(const struct kvmm_cuda_decode_args &d, const char *st,
					  const float (&sc)[TC_NT][4], float (&o)[TC_NJ][4])
{
	const int MT = tc_type<DT>::v;
	const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
	const uint32_t nj = d.a.pg.head_dim / 8, rs = d.row_stride, jpg = d.a.pg.gs / 8;
	const char *vs = st + d.v_soff;
	uint32_t ph[TC_NT / 2][4], pl[TC_NT / 2][4], jn = 0, grp = 0;
	float nrm[2];
	/* the A fragments of both k-steps from the weights of scale group grp */
	auto frags = [&](uint32_t grp) {
		float w[TC_NT][4];

		tc_weights<DT, TC_NT>(d, st, 0, grp, sc, w, nrm);
#pragma unroll
		for (uint32_t kk = 0; kk < TC_NT / 2; kk++) {
			split2<MT>(w[2 * kk][0], w[2 * kk][1], ph[kk][0], pl[kk][0]);
			split2<MT>(w[2 * kk][2], w[2 * kk][3], ph[kk][1], pl[kk][1]);
			split2<MT>(w[2 * kk + 1][0], w[2 * kk + 1][1], ph[kk][2], pl[kk][2]);
			split2<MT>(w[2 * kk + 1][2], w[2 * kk + 1][3], ph[kk][3], pl[kk][3]);
		}
	};

	if constexpr (DT != DT_INT8)
		frags(0);
#pragma unroll
	for (uint32_t j = 0; j < TC_NJ; j++) {
		float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};

		if (j >= nj)
			break;
		if constexpr (DT == DT_INT8) {
			if (j == jn) { /* the first n-tile of scale group grp */
				frags(grp);
				jn += jpg;
				grp++;
			}
		}
#pragma unroll
		for (uint32_t kk = 0; kk < TC_NT / 2; kk++) {
			/* V rows 16 kk + 2t, + 1 (b0) and + 8, + 9 (b1), column 8 j + g */
			const uint32_t b0 = vpair<DT>(vs, rs, 16 * kk + 2 * t4, 8 * j + g);
			const uint32_t b1 = vpair<DT>(vs, rs, 16 * kk + 8 + 2 * t4, 8 * j + g);

			mma16816<MT>(t, ph[kk], b0, b1);
			mma16816<MT>(t, pl[kk], b0, b1);
		}
		o[j][0] += t[0] * nrm[0];
		o[j][1] += t[1] * nrm[0];
		o[j][2] += t[2] * nrm[1];
		o[j][3] += t[3] * nrm[1];
	}
}

/*
 * A warp's start: the scaled queries of slots m0 and m1 (the lane's rows) as A fragments, hi
 * and lo (0 past ns), and the accumulators o zeroed
 */
template <int DT>
__device__ __forceinline__ void
tc_start(const struct kvmm_cuda_decode_args &d, const struct slots &sl, uint32_t ns, uint32_t m0,
	 uint32_t m1, uint32_t (&qh)[TC_NK][4], uint32_t (&ql)[TC_NK][4], float (&o)[TC_NJ][4])
{
	const uint32_t t4 = threadIdx.x & 3, dim = d.a.pg.head_dim, nk = dim / 16;

#pragma unroll
	for (uint32_t kk = 0; kk < TC_NK; kk++)
#pragma unroll
		for (uint32_t r = 0; r < 4; r++) {
			const uint32_t m = r & 1 ? m1 : m0, c = 16 * kk + 8 * (r >> 1) + 2 * t4;
			float x0 = 0.0f, x1 = 0.0f;

			if (kk < nk && m < ns) {
				const float *q =
					(const float *)d.a.q + slot_row(sl, sl.orow0, m) * dim + c;

				x0 = q[0] * d.a.scale;
				x1 = q[1] * d.a.scale;
			}
			split2<tc_type<DT>::v>(x0, x1, qh[kk][r], ql[kk][r]);
		}
#pragma unroll
	for (uint32_t j = 0; j < TC_NJ; j++)
#pragma unroll
		for (uint32_t i = 0; i < 4; i++)
			o[j][i] = 0.0f;
}

template <int DT> __device__ __forceinline__ void tc_body(const struct kvmm_cuda_decode_args &d)
{
	const struct kvmm_cuda_attn_args &a = d.a;
	char *smem = kvmm_decode_smem;
	const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t g = lane >> 2, t4 = lane & 3;
	const uint32_t seq = blockIdx.z, h = blockIdx.y;
	/* blockIdx.x = (split * row_tiles + row tile) * nqg + query group, as attn_body() */
	const uint32_t xq = blockIdx.x / d.nqg, qg = blockIdx.x - xq * d.nqg;
	const uint32_t xs = xq / d.row_tiles, rt = xq - xs * d.row_tiles;
	const uint32_t hq0 = h * d.group + qg * d.gb, gbn = min(d.gb, d.group - qg * d.gb);
	const uint32_t dim = a.pg.head_dim, nj = dim / 8;
	const uint32_t ctx = clamp_len(a, ((const uint32_t *)a.ctx_lens)[seq]);
	const int32_t *table = (const int32_t *)a.block_tables + (uint64_t)seq * a.max_blocks;
	const uint32_t m0 = warp * 16 + g, m1 = m0 + 8; /* the lane's two fragment rows: slots */
	struct slots sl = {0, 0, gbn, a.num_q_heads};
	uint32_t qh[TC_NK][4], ql[TC_NK][4], ns = 0, lim0 = 0, la, lb, tbeg = 0, tend = 0;
	float o[TC_NJ][4], mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};

	if (!prefill_rows(d, seq, ctx, rt, hq0, gbn, (uint64_t *)(smem + d.st_soff), sl, ns, lim0,
			  tend))
		return; /* the same for the whole block, before any barrier */
	if (!split_range(d, xs, tbeg, tend))
		return;
	/* causal limits of the lane's rows; 0 for slots past ns, whose tokens are all masked */
	la = m0 < ns ? lim0 + m0 / gbn : 0;
	lb = m1 < ns ? lim0 + m1 / gbn : 0;

	tc_start<DT>(d, sl, ns, m0, m1, qh, ql, o);

	tile_walk<DT, true>(d, table, h, KVMM_CUDA_TC_TILE, tbeg, tend,
			    [&](const char *st, uint32_t t0, uint32_t tn) {
				    /* the same for the whole warp: mma.sync needs all lanes */
				    if (warp * 16 < ns) {
					    float sc[TC_NT][4];

					    tc_scores<DT, TC_NT>(d, st, qh, ql, 0, t0, tn, la, lb,
								 sc, mx, ls, o);
					    tc_values<DT>(d, st, sc, o);
				    }
			    });

	/* the rows' sums over their 4 lanes, then each lane writes its 2 columns per n-tile */
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 1);
		ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 2);
	}
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		const uint32_t m = r ? m1 : m0;

		if (m >= ns)
			continue;
		if (d.nsplit == 1) {
			float *out = (float *)a.out + slot_row(sl, sl.orow0, m) * dim + 2 * t4;
			const float inv = ls[r] > 0.0f ? 1.0f / ls[r] : 0.0f;

#pragma unroll
			for (uint32_t j = 0; j < TC_NJ; j++) {
				if (j >= nj)
					break;
				out[8 * j] = ls[r] > 0.0f ? o[j][2 * r] * inv : 0.0f;
				out[8 * j + 1] = ls[r] > 0.0f ? o[j][2 * r + 1] * inv : 0.0f;
			}
		} else {
			/* part xs of slot m: part row slot_row(prow0, m) * nsplit + xs */
			const uint64_t pr = slot_row(sl, sl.prow0, m) * d.nsplit + xs;
			float *acc = (float *)d.part_acc + pr * dim + 2 * t4;

#pragma unroll
			for (uint32_t j = 0; j < TC_NJ; j++) {
				if (j >= nj)
					break;
				acc[8 * j] = o[j][2 * r];
				acc[8 * j + 1] = o[j][2 * r + 1];
			}
			if (t4 == 0) {
				((float *)d.part_ml)[pr * 2] = mx[r];
				((float *)d.part_ml)[pr * 2 + 1] = ls[r];
			}
		}
	}
}

/*
 * Decode on the tensor cores: one query row per sequence, so a block's slots are the gb (at
 * most 16) query heads of its KV head, one fragment's rows, and the four warps split each
 * staged tile's tokens instead: warp w takes tokens 8w ... 8w + 7, computes their 16 x 8
 * scores (m16n8k16 over head_dim) and adds P V with m16n8k8 (k = its 8 tokens), each warp
 * with its own running max, sum and accumulators, combined at the end through shared memory
 * as split parts are (merge_row()).
 */

/* o += P V for the warp's 8 tokens from tok0 (m16n8k8), as tc_values() */
template <int DT>
__device__ __forceinline__ void tcd_values(const struct kvmm_cuda_decode_args &d, const char *st,
					   uint32_t tok0, const float (&sc)[1][4],
					   float (&o)[TC_NJ][4])
{
	const int MT = tc_type<DT>::v;
	const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
	const uint32_t nj = d.a.pg.head_dim / 8, rs = d.row_stride, jpg = d.a.pg.gs / 8;
	const char *vs = st + d.v_soff;
	uint32_t ph[2], pl[2], jn = 0, grp = 0;
	float nrm[2];
	/* A's registers: rows g and g + 8, the lane's tokens tok0 + 2t, + 1 */
	auto frags = [&](uint32_t grp) {
		float w[1][4];

		tc_weights<DT, 1>(d, st, tok0, grp, sc, w, nrm);
		split2<MT>(w[0][0], w[0][1], ph[0], pl[0]);
		split2<MT>(w[0][2], w[0][3], ph[1], pl[1]);
	};

	if constexpr (DT != DT_INT8)
		frags(0);
#pragma unroll
	for (uint32_t j = 0; j < TC_NJ; j++) {
		float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		uint32_t b;

		if (j >= nj)
			break;
		if constexpr (DT == DT_INT8) {
			if (j == jn) {
				frags(grp);
				jn += jpg;
				grp++;
			}
		}
		b = vpair<DT>(vs, rs, tok0 + 2 * t4, 8 * j + g);
		mma1688<MT>(t, ph[0], ph[1], b);
		mma1688<MT>(t, pl[0], pl[1], b);
		o[j][0] += t[0] * nrm[0];
		o[j][1] += t[1] * nrm[0];
		o[j][2] += t[2] * nrm[1];
		o[j][3] += t[3] * nrm[1];
	}
}

template <int DT> __device__ __forceinline__ void tcd_body(const struct kvmm_cuda_decode_args &d)
{
	const struct kvmm_cuda_attn_args &a = d.a;
	char *smem = kvmm_decode_smem;
	const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t g = lane >> 2, t4 = lane & 3, tok0 = 8 * warp;
	const uint32_t seq = blockIdx.z, h = blockIdx.y;
	/* blockIdx.x = split * nqg + query group */
	const uint32_t xs = blockIdx.x / d.nqg, qg = blockIdx.x - xs * d.nqg;
	const uint32_t hq0 = h * d.group + qg * d.gb, gbn = min(d.gb, d.group - qg * d.gb);
	const uint32_t dim = a.pg.head_dim, nj = dim / 8, ns = gbn;
	const uint32_t ctx = clamp_len(a, ((const uint32_t *)a.ctx_lens)[seq]);
	const int32_t *table = (const int32_t *)a.block_tables + (uint64_t)seq * a.max_blocks;
	/* every row sees every token; rows past ns none */
	const uint32_t la = g < ns ? 0xffffffffu : 0, lb = g + 8 < ns ? 0xffffffffu : 0;
	struct slots sl = {(uint64_t)seq * a.num_q_heads + hq0, 0, gbn, a.num_q_heads};
	uint32_t qh[TC_NK][4], ql[TC_NK][4], tbeg = 0, tend = ctx;
	float o[TC_NJ][4], mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};
	/* the combine, over the stages after the loop: per warp 16 rows of (max, sum), then acc */
	float *cml = (float *)smem, *cacc = cml + KVMM_CUDA_DECODE_WARPS * 16 * 2;

	sl.prow0 = sl.orow0;
	if (!split_range(d, xs, tbeg, tend))
		return; /* the same for the whole block, before any barrier */
	tc_start<DT>(d, sl, ns, g, g + 8, qh, ql, o);

	tile_walk<DT, true>(d, table, h, KVMM_CUDA_TC_TILE, tbeg, tend,
			    [&](const char *st, uint32_t t0, uint32_t tn) {
				    /* the same for the whole warp: mma.sync needs all lanes */
				    if (tok0 < tn) {
					    float sc[1][4];

					    tc_scores<DT, 1>(d, st, qh, ql, tok0, t0, tn, la, lb,
							     sc, mx, ls, o);
					    tcd_values<DT>(d, st, tok0, sc, o);
				    }
			    });

	/* each warp's state into shared memory (the stages are free after the barrier) */
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 1);
		ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 2);
	}
	__syncthreads();
#pragma unroll
	for (uint32_t r = 0; r < 2; r++) {
		const uint32_t m = g + 8 * r, w = warp * 16 + m;

		if (m >= ns)
			continue;
		if (t4 == 0) {
			cml[2 * w] = mx[r];
			cml[2 * w + 1] = ls[r];
		}
#pragma unroll
		for (uint32_t j = 0; j < TC_NJ; j++) {
			if (j >= nj)
				break;
			cacc[w * dim + 8 * j + 2 * t4] = o[j][2 * r];
			cacc[w * dim + 8 * j + 2 * t4 + 1] = o[j][2 * r + 1];
		}
	}
	__syncthreads();
	/* the warps' states combined as merge_row() combines parts */
	for (uint32_t i = tid; i < ns * dim; i += KVMM_CUDA_DECODE_THREADS) {
		const uint32_t m = i / dim, e = i - m * dim;
		float mm = -INFINITY, num = 0.0f, den = 0.0f;

		for (uint32_t w = 0; w < KVMM_CUDA_DECODE_WARPS; w++)
			if (cml[2 * (w * 16 + m) + 1] > 0.0f)
				mm = fmaxf(mm, cml[2 * (w * 16 + m)]);
		for (uint32_t w = 0; w < KVMM_CUDA_DECODE_WARPS; w++) {
			const float l = cml[2 * (w * 16 + m) + 1];
			float f;

			if (!(l > 0.0f))
				continue; /* a warp that saw no token */
			f = expf(cml[2 * (w * 16 + m)] - mm);
			num += f * cacc[(w * 16 + m) * dim + e];
			den += f * l;
		}
		if (d.nsplit == 1) {
			((float *)a.out)[slot_row(sl, sl.orow0, m) * dim + e] =
				den > 0.0f ? num * (1.0f / den) : 0.0f;
		} else {
			/* part xs of slot m, relative to mm */
			const uint64_t pr = slot_row(sl, sl.prow0, m) * d.nsplit + xs;

			((float *)d.part_acc)[pr * dim + e] = num;
			if (e == 0) {
				((float *)d.part_ml)[pr * 2] = mm;
				((float *)d.part_ml)[pr * 2 + 1] = den;
			}
		}
	}
}

#define KVMM_ATTN_TC_KERNEL(name, dt)                                             \
	extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS, 2) \
		kvmm_prefill_tc_##name(const struct kvmm_cuda_decode_args d)      \
	{                                                                         \
		tc_body<dt>(d);                                                   \
	}                                                                         \
	extern "C" __global__ void __launch_bounds__(KVMM_CUDA_DECODE_THREADS, 2) \
		kvmm_decode_tc_##name(const struct kvmm_cuda_decode_args d)       \
	{                                                                         \
		tcd_body<dt>(d);                                                  \
	}

KVMM_ATTN_TC_KERNEL(fp16, DT_FP16)
KVMM_ATTN_TC_KERNEL(bf16, DT_BF16)
KVMM_ATTN_TC_KERNEL(int8, DT_INT8)
