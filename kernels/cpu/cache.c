// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/cache.c - reshape_and_cache: new K and V rows into their pages.
 *
 * An engine computes K and V for a step's new tokens as fp32 [token][kv_head][dim] and hands
 * them here with one slot per token (frame * tokens_per_page + row, negative to skip a
 * padding token).  Each row goes to its page at the layer's K and V slab offsets of
 * include/format.h, narrowed to the page dtype: fp16 and bf16 round to nearest even, int8 is
 * quantized per group of quant_group elements of one head with scale = max|x| / 127 and
 * q = round-to-nearest(x / scale) (a zero group gets scale 0), the scale stored as fp32 beside
 * the slab's data.  This is O(new tokens) work next to attention's O(context), so it stays
 * scalar and simple.  Every slot is checked before the first byte is written.
 */
#include <errno.h>
#include <math.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

static void quantize_group(const float *x, uint32_t n, int8_t *q, float *scale)
{
	float amax = 0.0f, s, inv;

	for (uint32_t i = 0; i < n; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	s = amax / 127.0f;
	inv = s > 0.0f ? 1.0f / s : 0.0f;
	for (uint32_t i = 0; i < n; i++) {
		float r = nearbyintf(x[i] * inv);

		/* x * (1/s) may land a hair past 127 at the max element */
		q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
	}
	*scale = s;
}

static void store_row(const struct kvmm_fmt *f, char *page, uint64_t off, uint64_t soff,
		      const float *x)
{
	uint64_t nelem = (uint64_t)f->kv_heads * f->head_dim;
	char *dst = page + off;

	switch (f->dtype) {
	case KVMM_DTYPE_FP32:
		memcpy(dst, x, nelem * sizeof(float));
		break;
	case KVMM_DTYPE_FP16:
		for (uint64_t i = 0; i < nelem; i++)
			((uint16_t *)dst)[i] = kvmm_f32_to_fp16(x[i]);
		break;
	case KVMM_DTYPE_BF16:
		for (uint64_t i = 0; i < nelem; i++)
			((uint16_t *)dst)[i] = kvmm_f32_to_bf16(x[i]);
		break;
	case KVMM_DTYPE_INT8: {
		float *sc = (float *)(page + soff);

		for (uint64_t g = 0; g < nelem / f->quant_group; g++)
			quantize_group(x + g * f->quant_group, f->quant_group,
				       (int8_t *)dst + g * f->quant_group, sc + g);
		break;
	}
	}
}

int kvmm_cpu_reshape_and_cache(const struct kvmm_kv_pages *kv, uint32_t nr_tokens,
			       const int64_t *slots, const float *k, const float *v)
{
	const struct kvmm_fmt *f = kv ? kv->fmt : NULL;
	uint64_t nelem;

	if (!f || !kv->base || kv->layer >= f->layers || !f->tokens_per_page)
		return -EINVAL;
	if (kvmm_dtype_size(f->dtype) == 0 || (f->dtype == KVMM_DTYPE_INT8 && !f->quant_group))
		return -EINVAL;
	if (nr_tokens && (!slots || !k || !v))
		return -EINVAL;
	for (uint32_t t = 0; t < nr_tokens; t++) {
		uint64_t frame;

		if (slots[t] < 0)
			continue;
		frame = (uint64_t)slots[t] / f->tokens_per_page;
		if (frame > KVMM_BLOCK_FRAME_MAX || (kv->nr_frames && frame >= kv->nr_frames))
			return -EINVAL;
	}

	nelem = (uint64_t)f->kv_heads * f->head_dim;
	for (uint32_t t = 0; t < nr_tokens; t++) {
		uint32_t row;
		char *page;

		if (slots[t] < 0)
			continue;
		row = (uint32_t)((uint64_t)slots[t] % f->tokens_per_page);
		page = (char *)kv->base + (uint64_t)slots[t] / f->tokens_per_page * f->page_size;
		store_row(f, page, kvmm_fmt_offset(f, kv->layer, 0, row),
			  f->scale_row_bytes ? kvmm_fmt_scale_offset(f, kv->layer, 0, row) : 0,
			  k + t * nelem);
		store_row(f, page, kvmm_fmt_offset(f, kv->layer, 1, row),
			  f->scale_row_bytes ? kvmm_fmt_scale_offset(f, kv->layer, 1, row) : 0,
			  v + t * nelem);
	}
	return 0;
}
