// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/cache.cu - reshape_and_cache on the GPU (included by module.cu, once per
 * dtype): one thread block per new token writes its K and V rows into the token's page.
 *
 * fp32 is copied, fp16 and bf16 are narrowed with round to nearest even by the same bit
 * manipulations as the CPU kernels, and int8 is quantized per group of gs elements of a head
 * by one thread per group: scale = max|x| / 127, q = rint(x * (1 / scale)), clamped to
 * +-127, the scale stored as fp32.  The divisions are IEEE (nvcc's default -prec-div=true) and
 * the product is rounded on its own (__fmul_rn), so the results are bit-identical to
 * kernels/cpu/cache.c.  A negative slot (padding) or one past nr_frames is skipped.
 */

template <int DT>
__device__ __forceinline__ void store_row(const struct kvmm_cuda_pages &pg, char *row, float *sc,
					  const float *x)
{
	const uint32_t nelem = pg.kv_heads * pg.head_dim;

	if (DT == DT_INT8) {
		for (uint32_t g = threadIdx.x; g < nelem / pg.gs; g += blockDim.x) {
			const float *xg = x + (uint64_t)g * pg.gs;
			signed char *qg = (signed char *)row + (uint64_t)g * pg.gs;
			float amax = 0.0f, s, inv;

			for (uint32_t i = 0; i < pg.gs; i++)
				amax = fmaxf(amax, fabsf(xg[i]));
			s = amax / 127.0f;
			inv = s > 0.0f ? 1.0f / s : 0.0f;
			for (uint32_t i = 0; i < pg.gs; i++) {
				float r = rintf(__fmul_rn(xg[i], inv));

				qg[i] = (signed char)(r > 127.0f    ? 127
						      : r < -127.0f ? -127
								    : (int)r);
			}
			sc[g] = s;
		}
	} else {
		for (uint32_t i = threadIdx.x; i < nelem; i += blockDim.x) {
			if (DT == DT_FP32)
				((float *)row)[i] = x[i];
			else if (DT == DT_FP16)
				((uint16_t *)row)[i] = f32_to_fp16(x[i]);
			else
				((uint16_t *)row)[i] = f32_to_bf16(x[i]);
		}
	}
}

template <int DT> __device__ __forceinline__ void cache_body(const struct kvmm_cuda_cache_args &a)
{
	const struct kvmm_cuda_pages &pg = a.pg;
	const uint32_t t = blockIdx.x;
	const uint64_t nelem = (uint64_t)pg.kv_heads * pg.head_dim;
	int64_t slot = ((const int64_t *)a.slots)[t];
	uint64_t frame;
	uint32_t row;
	char *page;

	if (t >= a.nr_tokens || slot < 0)
		return;
	frame = (uint64_t)slot / pg.tokens_per_page;
	if (pg.nr_frames && frame >= pg.nr_frames)
		return;
	row = (uint32_t)((uint64_t)slot % pg.tokens_per_page);
	page = (char *)(pg.base + frame * pg.page_size);
	store_row<DT>(pg, page + pg.k_off + row * pg.row_bytes,
		      (float *)(page + pg.ks_off + row * pg.scale_row_bytes),
		      (const float *)a.k + t * nelem);
	store_row<DT>(pg, page + pg.v_off + row * pg.row_bytes,
		      (float *)(page + pg.vs_off + row * pg.scale_row_bytes),
		      (const float *)a.v + t * nelem);
}

#define KVMM_CACHE_KERNEL(name, dt)                                                       \
	extern "C" __global__ void kvmm_cache_##name(const struct kvmm_cuda_cache_args a) \
	{                                                                                 \
		cache_body<dt>(a);                                                        \
	}

KVMM_CACHE_KERNEL(fp32, DT_FP32)
KVMM_CACHE_KERNEL(fp16, DT_FP16)
KVMM_CACHE_KERNEL(bf16, DT_BF16)
KVMM_CACHE_KERNEL(int8, DT_INT8)
