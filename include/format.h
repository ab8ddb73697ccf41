/* SPDX-License-Identifier: MIT */
/*
 * include/format.h - KV formats: how the tokens of one format are laid out inside a page
 * (lib/format.c).  The layer that the daemon, libkvmm, the kernels and the tools share: pure
 * arithmetic, no dependency on the daemon, installed with the public headers (kernels.h
 * needs it).  Documentation/mm/format.md.
 */
#ifndef KVMM_FORMAT_H
#define KVMM_FORMAT_H

#include <stdint.h>

#include "uapi/kvmm.h"

/*
 * Page layout (Documentation/mm/format.md): for each layer, the K slab then the V slab; a
 * slab holds tokens_per_page rows of [head][dim] elements.  For int8 a slab's data is padded
 * to KVMM_FMT_SCALE_BYTES and followed by its scales: one fp32 per (token, head, group).
 */
#define KVMM_FMT_SCALE_BYTES 4u	       /* int8 scales are fp32 */
#define KVMM_FMT_BAD_OFFSET UINT64_MAX /* kvmm_fmt_*offset() of an out-of-range slot */

struct kvmm_fmt {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t dtype;	      /* enum kvmm_dtype from uapi */
	uint32_t group_size;  /* int8: elements per scale group (divides head_dim); else 0 */
	uint64_t token_bytes; /* bytes of one token over all layers, K and V, incl. scales */
	uint32_t tokens_per_page;
	uint64_t page_size;
	/* derived by kvmm_fmt_init(), read by the offset helpers */
	uint64_t slab_bytes;	  /* one (layer, K|V) slab: data, padding, scales */
	uint64_t row_bytes;	  /* one token's [head][dim] data inside a slab */
	uint64_t scale_off;	  /* int8: offset of the scales inside a slab, else 0 */
	uint64_t scale_row_bytes; /* int8: one token's [head][group] scales, else 0 */
	uint32_t elem_bytes;	  /* bytes per element of dtype */
};

/* kvmm_dtype_size() and kvmm_dtype_name() come from uapi/kvmm.h. */

/*
 * Validate and derive; -EINVAL on a NULL fmt, zero sizes, bad dtype, group_size 0 for int8,
 * not dividing head_dim or non-zero for another dtype, a token larger than a page, overflow
 * (incl. more than UINT32_MAX tokens per page).  *fmt is left untouched on error.
 */
int kvmm_fmt_init(struct kvmm_fmt *fmt, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		  uint32_t dtype, uint32_t group_size, uint64_t page_size);
/*
 * Byte offset of (layer, K=0/V=1, token) inside a page: layout [layer][K|V][token][head][dim].
 * The row there is fmt->row_bytes long.  KVMM_FMT_BAD_OFFSET when out of range.
 */
uint64_t kvmm_fmt_offset(const struct kvmm_fmt *fmt, uint32_t layer, uint32_t kv, uint32_t token);
/*
 * int8: byte offset of the fp32 scales of (layer, kv, token), [head][group], fmt->scale_row_bytes
 * long.  KVMM_FMT_BAD_OFFSET when out of range or the format has no scales.
 */
uint64_t kvmm_fmt_scale_offset(const struct kvmm_fmt *fmt, uint32_t layer, uint32_t kv,
			       uint32_t token);

#endif /* KVMM_FORMAT_H */
