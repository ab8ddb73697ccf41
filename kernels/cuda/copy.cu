// SPDX-License-Identifier: MIT
/*
 * kernels/cuda/copy.cu - copy_pages on the GPU (included by module.cu): frame src[i] of
 * src_base to frame dst[i] of dst_base, the whole used part of the page (ntokens 0) or the
 * first ntokens rows and scales of every slab, as kernels/cpu/copy.c does.
 *
 * Grid (blocks per page, nr): for a whole copy the blocks of one page split its used bytes
 * evenly; for a partial copy block x takes slabs x, x + gridDim.x, ...  Copies go 16 bytes a
 * thread when both ends are 16-byte aligned (frames are, and so are slabs in every common
 * format), else a byte at a time.  A negative frame number skips its pair: the device cannot
 * return an error, so the host wrapper documents it.
 */

__device__ __forceinline__ void copy_bytes(char *d, const char *s, uint64_t n)
{
	uint64_t i = 0;

	if ((((uintptr_t)d | (uintptr_t)s) & 15) == 0) {
		uint64_t n16 = n / 16;

		for (uint64_t j = threadIdx.x; j < n16; j += blockDim.x)
			((uint4 *)d)[j] = ((const uint4 *)s)[j];
		i = n16 * 16;
	}
	for (uint64_t j = i + threadIdx.x; j < n; j += blockDim.x)
		d[j] = s[j];
}

extern "C" __global__ void kvmm_copy_pages(const struct kvmm_cuda_copy_args a)
{
	const uint32_t i = blockIdx.y;
	int32_t df, sf;
	char *d;
	const char *s;

	if (i >= a.nr)
		return;
	df = ((const int32_t *)a.dst)[i];
	sf = ((const int32_t *)a.src)[i];
	if (df < 0 || sf < 0)
		return;
	d = (char *)(a.dst_base + (uint64_t)df * a.page_size);
	s = (const char *)(a.src_base + (uint64_t)sf * a.page_size);
	if (!a.ntokens) {
		/* this block's share, in whole 16-byte units so every share stays aligned */
		uint64_t units = (a.used + 15) / 16;
		uint64_t per = (units + gridDim.x - 1) / gridDim.x;
		uint64_t lo = min((uint64_t)blockIdx.x * per * 16, a.used);
		uint64_t hi = min(lo + per * 16, a.used);

		copy_bytes(d + lo, s + lo, hi - lo);
		return;
	}
	for (uint32_t slab = blockIdx.x; slab < a.nslabs; slab += gridDim.x) {
		uint64_t off = (uint64_t)slab * a.slab_bytes;

		copy_bytes(d + off, s + off, a.ntokens * a.row_bytes);
		if (a.scale_row_bytes)
			copy_bytes(d + off + a.scale_off, s + off + a.scale_off,
				   a.ntokens * a.scale_row_bytes);
	}
}
