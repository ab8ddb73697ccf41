// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_format.c - unit tests for lib/format.c.
 *
 * The offsets are checked against a reference layout that is built independently: a cursor
 * walks the page element by element in [layer][K|V][token][head][dim] order (then the int8
 * scales of the slab, after 4-byte padding) and records where each row starts, and the
 * tokens per page is found by binary search over that walk.  Exhaustive small formats check
 * that no two regions overlap and that all of them fit in the page.  Every -EINVAL case and
 * the overflow boundaries are covered with huge values.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"

static const uint32_t all_dtypes[] = {KVMM_DTYPE_FP32, KVMM_DTYPE_FP16, KVMM_DTYPE_BF16,
				      KVMM_DTYPE_INT8};

/* element size written out independently of kvmm_dtype_size() */
static uint64_t ref_elem(uint32_t dtype)
{
	if (dtype == KVMM_DTYPE_FP32)
		return 4;
	if (dtype == KVMM_DTYPE_INT8)
		return 1;
	return 2;
}

/*
 * Lay out a page of @tpp tokens one element at a time.  When @data / @scales are non-NULL,
 * record the start of each (layer, kv, token) row at index (layer * 2 + kv) * tpp + token.
 * Returns the bytes used, or stops early with some value over @limit once past it (so a
 * search over large tpp costs O(limit), not O(tpp)).
 */
static uint64_t ref_walk(uint32_t layers, uint32_t heads, uint32_t dim, uint32_t dtype,
			 uint32_t group, uint64_t tpp, uint64_t limit, uint64_t *data,
			 uint64_t *scales)
{
	uint64_t cur = 0, esz = ref_elem(dtype);
	uint32_t ngroups = dtype == KVMM_DTYPE_INT8 ? dim / group : 0;

	for (uint32_t l = 0; l < layers; l++) {
		for (uint32_t kv = 0; kv < 2; kv++) {
			uint64_t base = ((uint64_t)l * 2 + kv) * tpp;

			for (uint64_t t = 0; t < tpp; t++) {
				if (cur > limit)
					return cur;
				if (data)
					data[base + t] = cur;
				for (uint32_t h = 0; h < heads; h++)
					for (uint32_t d = 0; d < dim; d++)
						cur += esz;
			}
			if (!ngroups)
				continue;
			while (cur % 4)
				cur++;
			for (uint64_t t = 0; t < tpp; t++) {
				if (cur > limit)
					return cur;
				if (scales)
					scales[base + t] = cur;
				for (uint32_t h = 0; h < heads; h++)
					for (uint32_t g = 0; g < ngroups; g++)
						cur += 4;
			}
		}
	}
	return cur;
}

/* Largest tpp whose walk fits in @page (0 if none), by binary search: the walk grows with tpp. */
static uint64_t ref_tpp(uint32_t layers, uint32_t heads, uint32_t dim, uint32_t dtype,
			uint32_t group, uint64_t page)
{
	uint64_t lo = 0, hi = page + 1; /* walk(lo) fits, walk(hi) does not */

	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (ref_walk(layers, heads, dim, dtype, group, mid, page, NULL, NULL) <= page)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Check one format against the reference: -EINVAL exactly when no token fits, else the same
 * tokens per page and offsets, natural alignment, no overlap, everything inside the page.
 */
static void check_format(uint32_t layers, uint32_t heads, uint32_t dim, uint32_t dtype,
			 uint32_t group, uint64_t page)
{
	struct kvmm_fmt f;
	uint64_t tpp = ref_tpp(layers, heads, dim, dtype, group, page);
	uint64_t nrows, *data, *scales;
	unsigned char *owner;
	int ret;

	ret = kvmm_fmt_init(&f, &(struct kvmm_format){layers, heads, dim, dtype, group}, page);
	if (!tpp) {
		assert_int_equal(ret, -EINVAL);
		return;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(f.tokens_per_page, tpp);
	assert_int_equal(f.layers, layers);
	assert_int_equal(f.kv_heads, heads);
	assert_int_equal(f.head_dim, dim);
	assert_int_equal(f.dtype, dtype);
	assert_int_equal(f.quant_group, group);
	assert_int_equal(f.page_size, page);
	assert_int_equal(f.elem_bytes, ref_elem(dtype));
	/* token_bytes: everything one token writes, i.e. the walk of one token without padding */
	assert_int_equal(f.token_bytes, (uint64_t)layers * 2 * heads *
						(dim * ref_elem(dtype) +
						 (dtype == KVMM_DTYPE_INT8 ? dim / group * 4 : 0)));
	assert_true(f.token_bytes * tpp <= page);
	/* padding costs at most one token against the plain division */
	assert_true(tpp == page / f.token_bytes ||
		    (dtype == KVMM_DTYPE_INT8 && tpp + 1 == page / f.token_bytes));

	nrows = (uint64_t)layers * 2 * tpp;
	data = calloc(nrows, sizeof(*data));
	scales = calloc(nrows, sizeof(*scales));
	owner = calloc(page, 1);
	assert_non_null(data);
	assert_non_null(scales);
	assert_non_null(owner);
	assert_true(ref_walk(layers, heads, dim, dtype, group, tpp, page, data, scales) <= page);

	for (uint32_t l = 0; l < layers; l++) {
		for (uint32_t kv = 0; kv < 2; kv++) {
			for (uint32_t t = 0; t < tpp; t++) {
				uint64_t i = ((uint64_t)l * 2 + kv) * tpp + t;
				uint64_t off = kvmm_fmt_offset(&f, l, kv, t);
				uint64_t soff = kvmm_fmt_scale_offset(&f, l, kv, t);

				assert_int_equal(off, data[i]);
				assert_int_equal(off % ref_elem(dtype), 0);
				assert_true(off + f.row_bytes <= page);
				for (uint64_t b = off; b < off + f.row_bytes; b++) {
					assert_int_equal(owner[b], 0);
					owner[b] = 1;
				}
				if (dtype != KVMM_DTYPE_INT8) {
					assert_int_equal(soff, KVMM_FMT_BAD_OFFSET);
					continue;
				}
				assert_int_equal(soff, scales[i]);
				assert_int_equal(soff % 4, 0);
				assert_int_equal(f.scale_row_bytes,
						 (uint64_t)heads * (dim / group) * 4);
				assert_true(soff + f.scale_row_bytes <= page);
				for (uint64_t b = soff; b < soff + f.scale_row_bytes; b++) {
					assert_int_equal(owner[b], 0);
					owner[b] = 2;
				}
			}
		}
	}
	/* out of range on each axis */
	assert_int_equal(kvmm_fmt_offset(&f, layers, 0, 0), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 2, 0), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 0, (uint32_t)tpp), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(kvmm_fmt_scale_offset(&f, layers, 0, 0), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(kvmm_fmt_scale_offset(&f, 0, 2, 0), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(kvmm_fmt_scale_offset(&f, 0, 0, (uint32_t)tpp), KVMM_FMT_BAD_OFFSET);
	free(owner);
	free(scales);
	free(data);
}

static void test_dtype_helpers(void **state)
{
	(void)state;
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_FP32), 4);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_FP16), 2);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_BF16), 2);
	assert_int_equal(kvmm_dtype_size(KVMM_DTYPE_INT8), 1);
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_FP32), "fp32");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_FP16), "fp16");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_BF16), "bf16");
	assert_string_equal(kvmm_dtype_name(KVMM_DTYPE_INT8), "int8");
	/* anything that is not one of the four is unknown */
	for (uint32_t d = 0; d < 64; d++) {
		bool known = false;

		for (size_t i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
			known |= d == all_dtypes[i];
		if (known)
			continue;
		assert_int_equal(kvmm_dtype_size(d), 0);
		assert_non_null(kvmm_dtype_name(d));
		for (size_t i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
			assert_string_not_equal(kvmm_dtype_name(d), kvmm_dtype_name(all_dtypes[i]));
	}
	assert_int_equal(kvmm_dtype_size(UINT32_MAX), 0);
}

/* A real model: Llama-3-8B-like, 32 layers, 8 kv heads, head dim 128, 2 MiB pages. */
static void test_llama_like(void **state)
{
	struct kvmm_fmt f;

	(void)state;
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_FP16}, 2u << 20), 0);
	assert_int_equal(f.token_bytes, 32 * 2 * 8 * 128 * 2);
	assert_int_equal(f.tokens_per_page, 16);
	assert_int_equal(f.slab_bytes, 16 * 8 * 128 * 2);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 0, 0), 0);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 0, 1), 8 * 128 * 2);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 1, 0), 16 * 8 * 128 * 2);
	assert_int_equal(kvmm_fmt_offset(&f, 31, 1, 15), (2u << 20) - 8 * 128 * 2);

	/* int8 with groups of 32: 8 * (128 + 4 * 4) bytes per token per slab */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){32, 8, 128, KVMM_DTYPE_INT8, 32}, 2u << 20),
		0);
	assert_int_equal(f.token_bytes, 32 * 2 * 8 * 144);
	assert_int_equal(f.tokens_per_page, (2u << 20) / (32 * 2 * 8 * 144));
	assert_int_equal(f.tokens_per_page, 28);
	assert_int_equal(f.scale_off, 28 * 8 * 128);
	assert_int_equal(f.slab_bytes, 28 * 8 * 144);
	assert_int_equal(kvmm_fmt_offset(&f, 1, 0, 2), 2 * 28 * 8 * 144 + 2 * 8 * 128);
	assert_int_equal(kvmm_fmt_scale_offset(&f, 1, 1, 3),
			 3 * 28 * 8 * 144 + 28 * 8 * 128 + 3 * 8 * 4 * 4);

	/* the format the benchmark uses: 16 tokens in a 4 KiB page */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, 4096),
			 0);
	assert_int_equal(f.tokens_per_page, 16);
}

/* Exhaustive over small formats and a few page sizes, odd ones included. */
static void test_exhaustive_small(void **state)
{
	static const uint64_t pages[] = {1, 7, 10, 16, 20, 64, 100, 257, 1000, 4096};

	(void)state;
	for (uint32_t layers = 1; layers <= 3; layers++)
		for (uint32_t heads = 1; heads <= 3; heads++)
			for (uint32_t dim = 1; dim <= 8; dim++)
				for (size_t d = 0; d < 4; d++)
					for (size_t p = 0; p < sizeof(pages) / sizeof(pages[0]);
					     p++) {
						uint32_t dt = all_dtypes[d];

						if (dt != KVMM_DTYPE_INT8) {
							check_format(layers, heads, dim, dt, 0,
								     pages[p]);
							continue;
						}
						for (uint32_t g = 1; g <= dim; g++)
							if (dim % g == 0)
								check_format(layers, heads, dim, dt,
									     g, pages[p]);
					}
}

/* Larger, realistic-shaped formats in the same comparison. */
static void test_reference_larger(void **state)
{
	(void)state;
	check_format(4, 2, 64, KVMM_DTYPE_FP16, 0, 65536);
	check_format(4, 2, 64, KVMM_DTYPE_BF16, 0, 65536);
	check_format(3, 3, 96, KVMM_DTYPE_FP32, 0, 100000);
	check_format(4, 2, 64, KVMM_DTYPE_INT8, 16, 65536);
	check_format(2, 3, 30, KVMM_DTYPE_INT8, 5, 65536); /* 3 * 30 bytes: padding needed */
	check_format(5, 1, 7, KVMM_DTYPE_INT8, 7, 4099);
}

/* int8 padding: a slab's data is padded to 4 bytes before its fp32 scales. */
static void test_int8_padding(void **state)
{
	struct kvmm_fmt f;

	(void)state;
	/* 1 layer, 1 head, dim 1, group 1: 10 bytes per token, but a page needs 16 for one */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_INT8, 1}, 10),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_INT8, 1}, 15),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_INT8, 1}, 16),
			 0);
	assert_int_equal(f.tokens_per_page, 1);
	assert_int_equal(f.scale_off, 4);
	assert_int_equal(f.slab_bytes, 8);
	assert_int_equal(kvmm_fmt_scale_offset(&f, 0, 1, 0), 12);
	/* 20 bytes hold 2 tokens unpadded, but padding leaves room for 1 */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_INT8, 1}, 20),
			 0);
	assert_int_equal(f.tokens_per_page, 1);
	/* 4 tokens: data is 4 bytes, no padding, 2 * (4 + 16) = 40 */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_INT8, 1}, 40),
			 0);
	assert_int_equal(f.tokens_per_page, 4);
	assert_int_equal(f.scale_off, 4);
}

static void test_einval(void **state)
{
	struct kvmm_fmt f, saved;

	(void)state;
	memset(&f, 0xab, sizeof(f));
	saved = f;
	assert_int_equal(
		kvmm_fmt_init(NULL, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, 4096),
		-EINVAL);
	/* zero sizes */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){0, 1, 64, KVMM_DTYPE_FP16}, 4096),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 0, 64, KVMM_DTYPE_FP16}, 4096),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 0, KVMM_DTYPE_FP16}, 4096),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, 0),
			 -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_INT8}, 4096),
			 -EINVAL);
	/* bad dtype */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, 0x7777}, 4096), -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, UINT32_MAX}, 4096),
			 -EINVAL);
	/* group size: for a non-int8 dtype, not dividing head_dim, larger than head_dim */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16, 32}, 4096),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP32, 1}, 4096),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_BF16, 64}, 4096),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_INT8, 48}, 4096),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_INT8, 128}, 4096),
		-EINVAL);
	assert_int_equal(kvmm_fmt_init(&f,
				       &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_INT8, UINT32_MAX},
				       4096),
			 -EINVAL);
	/* a token larger than a page, by one byte */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, 64, KVMM_DTYPE_FP16},
				       2 * 2 * 2 * 64 * 2 - 1),
			 -EINVAL);
	/* nothing was written on any error */
	assert_memory_equal(&f, &saved, sizeof(f));
	/* exactly one token */
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, 64, KVMM_DTYPE_FP16},
				       2 * 2 * 2 * 64 * 2),
			 0);
	assert_int_equal(f.tokens_per_page, 1);
	assert_int_equal(kvmm_fmt_offset(&f, 1, 1, 0), 3 * 2 * 64 * 2);
	/* a non-int8 format has no scales */
	assert_int_equal(kvmm_fmt_scale_offset(&f, 0, 0, 0), KVMM_FMT_BAD_OFFSET);
	assert_int_equal(f.scale_row_bytes, 0);
	assert_int_equal(f.scale_off, 0);
}

static void test_overflow(void **state)
{
	struct kvmm_fmt f;
	uint32_t m = UINT32_MAX;

	(void)state;
	/* token_bytes overflows 64 bits */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){m, m, m, KVMM_DTYPE_FP32}, UINT64_MAX),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){m, m, m, KVMM_DTYPE_INT8, 1}, UINT64_MAX),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, m, m, KVMM_DTYPE_INT8, 1}, UINT64_MAX),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1u << 31, 1u << 31, 1, KVMM_DTYPE_FP32},
			      UINT64_MAX),
		-EINVAL); /* 2 * 2^31 * 2^31 * 4 = 2^65 */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1u << 30, 1u << 31, 1, KVMM_DTYPE_FP32},
			      UINT64_MAX),
		-EINVAL); /* 2^64 exactly */
	/* just under: 2 * 2^29 * 2^30 * 4 = 2^62 bytes per token, 3 tokens in UINT64_MAX */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1u << 29, 1u << 30, 1, KVMM_DTYPE_FP32},
			      UINT64_MAX),
		0);
	assert_int_equal(f.token_bytes, UINT64_C(1) << 62);
	assert_int_equal(f.tokens_per_page, 3);
	assert_int_equal(kvmm_fmt_offset(&f, (1u << 29) - 1, 1, 2),
			 ((UINT64_C(1) << 30) - 1) * 3 * (UINT64_C(1) << 32) +
				 2 * (UINT64_C(1) << 32));
	assert_true(kvmm_fmt_offset(&f, (1u << 29) - 1, 1, 2) + f.row_bytes <= UINT64_MAX - 1);

	/* huge layer count, small token per layer */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){m, 1, 1, KVMM_DTYPE_FP16}, UINT64_MAX), 0);
	assert_int_equal(f.token_bytes, (uint64_t)m * 4);
	assert_int_equal(f.tokens_per_page, UINT64_MAX / ((uint64_t)m * 4));
	assert_true(kvmm_fmt_offset(&f, m - 1, 1, f.tokens_per_page - 1) + f.row_bytes <=
		    UINT64_MAX);

	/* int8 with a huge group: one scale per head of 2^32 - 1 elements */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, m, KVMM_DTYPE_INT8, m}, UINT64_MAX),
		0);
	assert_int_equal(f.token_bytes, 2 * ((uint64_t)m + 4));
	assert_int_equal(f.scale_row_bytes, 4);
	assert_true(kvmm_fmt_scale_offset(&f, 0, 1, f.tokens_per_page - 1) + 4 <= UINT64_MAX);
	assert_int_equal(kvmm_fmt_scale_offset(&f, 0, 1, f.tokens_per_page - 1) % 4, 0);

	/* tokens per page past UINT32_MAX is refused, at exactly UINT32_MAX accepted */
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_FP16}, UINT64_MAX),
		-EINVAL);
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_FP16}, 4 * (uint64_t)m),
		0);
	assert_int_equal(f.tokens_per_page, m);
	assert_int_equal(kvmm_fmt_offset(&f, 0, 1, m - 1), 4 * (uint64_t)m - 2);
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 1, KVMM_DTYPE_FP16},
				       4 * (uint64_t)m + 4),
			 -EINVAL);
}

/* The derived struct embeds the wire struct: fmt->format is what the client registered. */
static void test_embeds_wire_format(void **state)
{
	const struct kvmm_format in = {4, 2, 64, KVMM_DTYPE_INT8, 16, 0};
	struct kvmm_fmt f, saved;
	struct kvmm_format bad;

	(void)state;
	assert_int_equal(kvmm_fmt_init(&f, &in, 64u << 10), 0);
	assert_memory_equal(&f.format, &in, sizeof(in));
	assert_int_equal(f.layers, in.layers);
	assert_int_equal(f.quant_group, in.quant_group);
	assert_int_equal(offsetof(struct kvmm_fmt, head_dim),
			 offsetof(struct kvmm_fmt, format.head_dim));
	/* the uapi rule that the reserved word is zero holds here too; NULL is refused */
	memset(&f, 0xab, sizeof(f));
	saved = f;
	bad = in;
	bad.reserved = 1;
	assert_int_equal(kvmm_fmt_init(&f, &bad, 64u << 10), -EINVAL);
	assert_int_equal(kvmm_fmt_init(&f, NULL, 64u << 10), -EINVAL);
	assert_memory_equal(&f, &saved, sizeof(f));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtype_helpers),	 cmocka_unit_test(test_llama_like),
		cmocka_unit_test(test_exhaustive_small), cmocka_unit_test(test_reference_larger),
		cmocka_unit_test(test_int8_padding),	 cmocka_unit_test(test_einval),
		cmocka_unit_test(test_overflow),	 cmocka_unit_test(test_embeds_wire_format),
	};

	return cmocka_run_group_tests_name("format", tests, NULL, NULL);
}
