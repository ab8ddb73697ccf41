/* SPDX-License-Identifier: MIT */
/*
 * include/format.h - KV formats: how the tokens of one format are laid out inside a page
 * (lib/format.c).  The layer that the daemon, libkvmm, the kernels and the tools share: pure
 * arithmetic, no dependency on the daemon, installed with the public headers (kernels.h
 * needs it).  Documentation/mm/format.md.
 */
#ifndef KVMM_FORMAT_H
#define KVMM_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "uapi/kvmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libkvmm.so exports what is declared from here on (runtime/libkvmm.map, -fvisibility=hidden) */
#pragma GCC visibility push(default)

/*
 * Page layout (Documentation/mm/format.md): for each layer, the K slab then the V slab; a
 * slab holds tokens_per_page rows of [head][dim] elements.  For int8 a slab's data is padded
 * to KVMM_FMT_SCALE_BYTES and followed by its scales: one fp32 per (token, head, group).
 */
#define KVMM_FMT_SCALE_BYTES 4u	       /* int8 scales are fp32 */
#define KVMM_FMT_BAD_OFFSET UINT64_MAX /* kvmm_fmt_*offset() of an out-of-range slot */

/*
 * One format: what a client registers at attach (struct kvmm_format of uapi/kvmm.h, the
 * 24 bytes on the wire) and, derived from it and the pool's page size by kvmm_fmt_init(), the
 * numbers every reader of a page needs.  The wire struct is embedded, not copied field by
 * field: fmt->format is what to send or compare, and its fields read directly as fmt->layers,
 * fmt->kv_heads, ... (an anonymous struct over the same bytes, asserted below).
 */
struct kvmm_fmt {
	union {
		struct kvmm_format format;
		struct {
			uint32_t layers;
			uint32_t kv_heads;
			uint32_t head_dim;
			uint32_t dtype;	      /* enum kvmm_dtype */
			uint32_t quant_group; /* int8: elements per scale, divides head_dim */
			uint32_t reserved;    /* zero */
		};
	};
	uint64_t page_size;
	/* derived by kvmm_fmt_init(), read by the kernels and the offset helpers */
	uint64_t token_bytes; /* bytes of one token over all layers, K and V, incl. scales */
	uint32_t tokens_per_page;
	uint32_t elem_bytes;	  /* bytes per element of dtype */
	uint64_t slab_bytes;	  /* one (layer, K|V) slab: data, padding, scales */
	uint64_t row_bytes;	  /* one token's [head][dim] data inside a slab */
	uint64_t scale_off;	  /* int8: offset of the scales inside a slab, else 0 */
	uint64_t scale_row_bytes; /* int8: one token's [head][group] scales, else 0 */
};

#define KVMM_FMT_ASSERT_SAME(field)                                         \
	KVMM_STATIC_ASSERT(offsetof(struct kvmm_fmt, field) ==              \
				   offsetof(struct kvmm_fmt, format.field), \
			   "struct kvmm_fmt: " #field " is not format." #field)
KVMM_FMT_ASSERT_SAME(layers);
KVMM_FMT_ASSERT_SAME(kv_heads);
KVMM_FMT_ASSERT_SAME(head_dim);
KVMM_FMT_ASSERT_SAME(dtype);
KVMM_FMT_ASSERT_SAME(quant_group);
KVMM_FMT_ASSERT_SAME(reserved);
#undef KVMM_FMT_ASSERT_SAME

/* kvmm_dtype_size() and kvmm_dtype_name() come from uapi/kvmm.h. */

/*
 * Validate @format and derive the layout of its tokens in pages of @page_size bytes into
 * *fmt.  -EINVAL on a NULL argument, zero sizes, a bad dtype, a quant_group that is 0 for int8,
 * does not divide head_dim or is non-zero for another dtype, a non-zero reserved word, a token
 * larger than a page, overflow (incl. more than UINT32_MAX tokens per page).  The sanity
 * limits of kvmm_format_check() are not imposed: the arithmetic holds for any 32-bit sizes.
 * *fmt is left untouched on error.
 */
int kvmm_fmt_init(struct kvmm_fmt *fmt, const struct kvmm_format *format, uint64_t page_size);
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
#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* KVMM_FORMAT_H */
