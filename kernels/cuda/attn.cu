// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/attn.cu - paged prefill attention on the GPU (included by module.cu, compiled
 * once per dtype); decode has its own bandwidth-oriented kernel in decode.cu.
 *
 * The unit of work is one warp walking one query's tokens with an online softmax: for each
 * token the 32 lanes load the K row of the query's KV head (lane l holds dims l, l + 32, ...,
 * so a row is read in coalesced 32-element pieces), reduce the dot product across the warp,
 * fold the score into the running max and sum (when the max grows, the sum and accumulator
 * are scaled by exp(old - new), as in kernels/cpu/attn.c), and add the weighted V row.
 * Prefill gives each warp one new token's query, which sees the tokens at or before its
 * position.  Argument checks that need the device arrays happen here: a block-table entry
 * that is negative or past nr_frames makes its tokens count as absent (skipped), and a length
 * past the block table is clamped to it, so a bad table never reads outside the pool.
 */

template <int DT> struct attn_state {
	float m, l;
	float acc[KVMM_CUDA_MAX_DIM_PER_LANE];
};

/* fold tokens t0, t0 + step, ... < t1 of the sequence with block table table into st */
template <int DT>
__device__ __forceinline__ void attend_range(const struct kvmm_cuda_pages &pg, const int32_t *table,
					     uint32_t h, const float *qr, uint32_t t0, uint32_t t1,
					     uint32_t step, attn_state<DT> &st)
{
	const uint32_t lane = threadIdx.x & 31, dim = pg.head_dim;
	const uint64_t hb = (uint64_t)h * dim * elem_size<DT>::v;
	const uint64_t hs = (uint64_t)h * (dim / pg.gs) * sizeof(float);

	for (uint32_t t = t0; t < t1; t += step) {
		int32_t f = block_frame(pg, table, t / pg.tokens_per_page);
		uint32_t row = t % pg.tokens_per_page;
		const char *page, *k, *v;
		const float *ks = 0, *vs = 0;
		float s = 0.0f, mnew, corr, p;

		if (f < 0)
			continue; /* the same for every lane: no divergence */
		page = (const char *)(pg.base + (uint64_t)f * pg.page_size);
		k = page + pg.k_off + row * pg.row_bytes + hb;
		v = page + pg.v_off + row * pg.row_bytes + hb;
		if (DT == DT_INT8) {
			ks = (const float *)(page + pg.ks_off + row * pg.scale_row_bytes + hs);
			vs = (const float *)(page + pg.vs_off + row * pg.scale_row_bytes + hs);
		}
#pragma unroll
		for (uint32_t i = 0; i < KVMM_CUDA_MAX_DIM_PER_LANE; i++) {
			uint32_t d = lane + 32 * i;

			if (d < dim) {
				float x = load_elem<DT>(k, d);

				if (DT == DT_INT8)
					x *= ks[d / pg.gs];
				s += qr[i] * x;
			}
		}
		s = warp_sum(s);
		mnew = fmaxf(st.m, s);
		corr = expf(st.m - mnew); /* 0 for the first token: m is -inf */
		p = expf(s - mnew);
		st.l = st.l * corr + p;
#pragma unroll
		for (uint32_t i = 0; i < KVMM_CUDA_MAX_DIM_PER_LANE; i++) {
			uint32_t d = lane + 32 * i;

			if (d < dim) {
				float x = load_elem<DT>(v, d);

				if (DT == DT_INT8)
					x *= vs[d / pg.gs];
				st.acc[i] = st.acc[i] * corr + p * x;
			}
		}
		st.m = mnew;
	}
}

template <int DT>
__device__ __forceinline__ void attn_begin(const struct kvmm_cuda_attn_args &a, const float *q,
					   float *qr, attn_state<DT> &st)
{
	const uint32_t lane = threadIdx.x & 31;

#pragma unroll
	for (uint32_t i = 0; i < KVMM_CUDA_MAX_DIM_PER_LANE; i++) {
		uint32_t d = lane + 32 * i;

		qr[i] = d < a.pg.head_dim ? q[d] * a.scale : 0.0f;
		st.acc[i] = 0.0f;
	}
	st.m = -INFINITY;
	st.l = 0.0f;
}

/* tokens a sequence's block table can hold: longer lengths are clamped to it */
__device__ __forceinline__ uint32_t clamp_len(const struct kvmm_cuda_attn_args &a, uint32_t n)
{
	uint64_t cap = (uint64_t)a.max_blocks * a.pg.tokens_per_page;

	return n > cap ? (uint32_t)cap : n;
}

template <int DT> __device__ __forceinline__ void prefill_body(const struct kvmm_cuda_attn_args &a)
{
	__shared__ uint64_t qstart;
	const uint32_t seq = blockIdx.y, hq = blockIdx.x, warp = threadIdx.x >> 5;
	const uint32_t lane = threadIdx.x & 31, dim = a.pg.head_dim;
	const uint32_t h = hq / (a.num_q_heads / a.pg.kv_heads);
	const uint32_t *q_lens = (const uint32_t *)a.q_lens;
	const uint32_t ctx = clamp_len(a, ((const uint32_t *)a.ctx_lens)[seq]);
	const uint32_t qlen = min(q_lens[seq], ctx), first = ctx - qlen;
	const int32_t *table = (const int32_t *)a.block_tables + (uint64_t)seq * a.max_blocks;

	/* the sequence's first query row: the new tokens of the sequences before it */
	if (threadIdx.x == 0) {
		uint64_t n = 0;

		for (uint32_t i = 0; i < seq; i++)
			n += q_lens[i];
		qstart = n;
	}
	__syncthreads();

	for (uint32_t r = blockIdx.z * KVMM_CUDA_ATTN_WARPS + warp; r < qlen;
	     r += gridDim.z * KVMM_CUDA_ATTN_WARPS) {
		const uint64_t qoff = ((qstart + r) * a.num_q_heads + hq) * dim;
		float qr[KVMM_CUDA_MAX_DIM_PER_LANE], inv;
		attn_state<DT> st;

		attn_begin<DT>(a, (const float *)a.q + qoff, qr, st);
		attend_range<DT>(a.pg, table, h, qr, 0, first + r + 1, 1, st);
		inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
#pragma unroll
		for (uint32_t i = 0; i < KVMM_CUDA_MAX_DIM_PER_LANE; i++)
			if (lane + 32 * i < dim)
				((float *)a.out)[qoff + lane + 32 * i] = st.acc[i] * inv;
	}
}

#define KVMM_PREFILL_KERNEL(name, dt)                                           \
	extern "C" __global__ void __launch_bounds__(32 * KVMM_CUDA_ATTN_WARPS) \
		kvmm_prefill_##name(const struct kvmm_cuda_attn_args a)         \
	{                                                                       \
		prefill_body<dt>(a);                                            \
	}

KVMM_PREFILL_KERNEL(fp32, DT_FP32)
KVMM_PREFILL_KERNEL(fp16, DT_FP16)
KVMM_PREFILL_KERNEL(bf16, DT_BF16)
KVMM_PREFILL_KERNEL(int8, DT_INT8)
