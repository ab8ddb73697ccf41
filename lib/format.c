// SPDX-License-Identifier: MIT
/*
 * lib/format.c - KV formats: how a client's tokens are laid out inside one frame.
 *
 * A format (struct kvmm_format: layers, kv heads, head dim, dtype, int8 quantization group)
 * registered at attach decides the bytes one token takes and so how many tokens fit in a page.
 * The layout is [layer][K|V][token][head][dim]: for each layer the K slab then the V slab,
 * each slab holding tokens_per_page rows of kv_heads * head_dim elements, so one layer's slice
 * of a page is contiguous and a whole page moves in one copy.  int8 formats carry one fp32 scale per
 * (token, head, group of quant_group elements); a slab's scales follow its data, after padding
 * the data to 4 bytes so every scale is naturally aligned (see Documentation/mm/format.md).
 * Everything here is pure arithmetic on a struct kvmm_fmt: no pool, no allocation, no locks.
 * Sizes come from clients, so every product is overflow-checked and every bad format is -EINVAL.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "format.h"

static uint64_t round_up_u64(uint64_t v, uint64_t align, bool *ovf)
{
	uint64_t r = v % align;

	if (!r)
		return v;
	if (__builtin_add_overflow(v, align - r, &v))
		*ovf = true;
	return v;
}

/*
 * Bytes of one page's worth of the format at @tpp tokens per page, with padding; false on
 * overflow.  Computed from scratch so the caller can try a candidate tpp and step down.
 */
static bool page_bytes(const struct kvmm_fmt *f, uint64_t tpp, uint64_t *slab, uint64_t *scale_off,
		       uint64_t *total)
{
	uint64_t data, scales, s, nslabs;
	bool ovf = false;

	ovf |= __builtin_mul_overflow(tpp, f->row_bytes, &data);
	ovf |= __builtin_mul_overflow(tpp, f->scale_row_bytes, &scales);
	if (f->scale_row_bytes)
		data = round_up_u64(data, KVMM_FMT_SCALE_BYTES, &ovf);
	ovf |= __builtin_add_overflow(data, scales, &s);
	ovf |= __builtin_mul_overflow((uint64_t)f->layers, 2, &nslabs);
	ovf |= __builtin_mul_overflow(s, nslabs, total);
	*slab = s;
	*scale_off = f->scale_row_bytes ? data : 0;
	return !ovf;
}

int kvmm_fmt_init(struct kvmm_fmt *fmt, const struct kvmm_format *format, uint64_t page_size)
{
	struct kvmm_fmt f;
	uint64_t ngroups = 0, tpp, slab, scale_off, total, nslabs;
	bool ovf = false;

	if (!fmt || !format || !format->layers || !format->kv_heads || !format->head_dim ||
	    format->reserved || !page_size)
		return -EINVAL;
	memset(&f, 0, sizeof(f));
	f.format = *format;
	f.elem_bytes = kvmm_dtype_size(f.dtype);
	if (!f.elem_bytes)
		return -EINVAL;
	if (f.dtype == KVMM_DTYPE_INT8) {
		if (!f.quant_group || f.head_dim % f.quant_group)
			return -EINVAL;
		ngroups = f.head_dim / f.quant_group;
	} else if (f.quant_group) {
		return -EINVAL;
	}
	f.page_size = page_size;

	/* row = kv_heads * head_dim * elem; scale row = kv_heads * ngroups * 4 */
	ovf |= __builtin_mul_overflow((uint64_t)f.kv_heads, (uint64_t)f.head_dim, &f.row_bytes);
	ovf |= __builtin_mul_overflow(f.row_bytes, (uint64_t)f.elem_bytes, &f.row_bytes);
	ovf |= __builtin_mul_overflow((uint64_t)f.kv_heads, ngroups, &f.scale_row_bytes);
	ovf |= __builtin_mul_overflow(f.scale_row_bytes, (uint64_t)KVMM_FMT_SCALE_BYTES,
				      &f.scale_row_bytes);
	ovf |= __builtin_add_overflow(f.row_bytes, f.scale_row_bytes, &f.token_bytes);
	ovf |= __builtin_mul_overflow((uint64_t)f.layers, 2, &nslabs);
	ovf |= __builtin_mul_overflow(f.token_bytes, nslabs, &f.token_bytes);
	if (ovf)
		return -EINVAL;

	/*
	 * floor(page / token_bytes) fits unless an int8 slab needs padding before its scales.
	 * The padding is under 4 bytes per slab, i.e. under 6 * layers bytes per page, and a token
	 * takes at least 10 * layers bytes (1 element and 1 scale in each of 2 * layers slabs), so
	 * one step down always fits.
	 */
	tpp = page_size / f.token_bytes;
	if (!tpp)
		return -EINVAL;
	if (!page_bytes(&f, tpp, &slab, &scale_off, &total) || total > page_size) {
		tpp--;
		if (!tpp || !page_bytes(&f, tpp, &slab, &scale_off, &total) || total > page_size)
			return -EINVAL;
	}
	if (tpp > UINT32_MAX)
		return -EINVAL;
	f.tokens_per_page = (uint32_t)tpp;
	f.slab_bytes = slab;
	f.scale_off = scale_off;
	*fmt = f;
	return 0;
}

uint64_t kvmm_fmt_offset(const struct kvmm_fmt *fmt, uint32_t layer, uint32_t kv, uint32_t token)
{
	if (layer >= fmt->layers || kv > 1 || token >= fmt->tokens_per_page)
		return KVMM_FMT_BAD_OFFSET;
	/* kvmm_fmt_init() checked that the whole page fits in 64 bits: no overflow here */
	return ((uint64_t)layer * 2 + kv) * fmt->slab_bytes + (uint64_t)token * fmt->row_bytes;
}

uint64_t kvmm_fmt_scale_offset(const struct kvmm_fmt *fmt, uint32_t layer, uint32_t kv,
			       uint32_t token)
{
	if (!fmt->scale_row_bytes || layer >= fmt->layers || kv > 1 ||
	    token >= fmt->tokens_per_page)
		return KVMM_FMT_BAD_OFFSET;
	return ((uint64_t)layer * 2 + kv) * fmt->slab_bytes + fmt->scale_off +
	       (uint64_t)token * fmt->scale_row_bytes;
}
