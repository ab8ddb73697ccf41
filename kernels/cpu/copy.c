// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/copy.c - copy_pages: whole or partial pages from one frame to another.
 *
 * Copy-on-write (a forked sequence writing into a shared partial last block) copies a page
 * within one pool; swap staging copies between the pool and a host buffer laid out the same
 * way.  A whole copy moves the used part of the page, 2 * layers slabs, in one memcpy, as the
 * layout intends.  A partial copy (only the first ntokens rows are meaningful, as in a
 * partial last block) moves, for each slab, the first ntokens rows and, for int8, their
 * scales: 2 * layers (or 4 * layers) memcpys of a few KiB instead of the whole page.
 * All pairs are checked before the first copy, so a bad list copies nothing.
 */
#include <errno.h>

#include "kernels/cpu/cpu.h"

int kvmm_cpu_copy_pages(const struct kvmm_fmt *f, void *dst_base, const void *src_base,
			const int32_t *dst, const int32_t *src, uint32_t nr, uint32_t ntokens)
{
	uint64_t nslabs, used;

	if (!f || !f->tokens_per_page || ntokens > f->tokens_per_page)
		return -EINVAL;
	if (nr && (!dst_base || !src_base || !dst || !src))
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++) {
		if (dst[i] < 0 || src[i] < 0)
			return -EINVAL;
		if (dst_base == src_base && dst[i] == src[i])
			return -EINVAL;
	}

	nslabs = (uint64_t)f->layers * 2;
	used = nslabs * f->slab_bytes;
	for (uint32_t i = 0; i < nr; i++) {
		char *d = (char *)dst_base + (uint64_t)dst[i] * f->page_size;
		const char *s = (const char *)src_base + (uint64_t)src[i] * f->page_size;

		if (!ntokens) {
			memcpy(d, s, used);
			continue;
		}
		for (uint64_t slab = 0; slab < nslabs; slab++) {
			uint64_t off = slab * f->slab_bytes;

			memcpy(d + off, s + off, ntokens * f->row_bytes);
			if (f->scale_row_bytes)
				memcpy(d + off + f->scale_off, s + off + f->scale_off,
				       ntokens * f->scale_row_bytes);
		}
	}
	return 0;
}
