/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/abi.h - the contract between the host wrappers (cuda.c, C) and the device code
 * (module.cu, CUDA C++): kernel names and the one argument struct each kernel takes by value.
 *
 * Every field is fixed width and every pointer a 64-bit device address, so the C compiler and
 * nvcc agree on the layout without sharing anything else; the sizes are asserted on both
 * sides.  The host wrapper derives the byte offsets from struct kvmm_fmt (kvmm/format.c), so
 * the device code never needs the format code: it only adds offsets.  A kernel name is its
 * role followed by the dtype's name as in uapi (fp32, fp16, bf16, int8).
 */
#ifndef KVMM_KERNELS_CUDA_ABI_H
#define KVMM_KERNELS_CUDA_ABI_H

#include <stdint.h>

/* warps per thread block of the attention kernels */
#define KVMM_CUDA_ATTN_WARPS 4
/* largest head_dim the attention kernels take: 32 lanes times this many dims per lane */
#define KVMM_CUDA_MAX_DIM_PER_LANE 8
#define KVMM_CUDA_MAX_HEAD_DIM (32 * KVMM_CUDA_MAX_DIM_PER_LANE)

/* The page geometry of one layer, as the kernels see it. */
struct kvmm_cuda_pages {
	uint64_t base;		  /* device address of frame 0 */
	uint64_t page_size;	  /* frame n at base + n * page_size */
	uint64_t k_off, v_off;	  /* the layer's K and V slabs inside a page */
	uint64_t ks_off, vs_off;  /* int8: their scales, else 0 */
	uint64_t row_bytes;	  /* one token's [head][dim] */
	uint64_t scale_row_bytes; /* int8: one token's [head][group] fp32 scales, else 0 */
	uint32_t kv_heads, head_dim;
	uint32_t gs; /* int8 group size, else head_dim */
	uint32_t tokens_per_page;
	uint32_t nr_frames; /* 0 = unchecked */
	uint32_t pad;
};

/* kvmm_decode_<dt>, kvmm_prefill_<dt>: grid (num_q_heads, nr_seqs, z), KVMM_CUDA_ATTN_WARPS */
struct kvmm_cuda_attn_args {
	struct kvmm_cuda_pages pg;
	uint64_t block_tables; /* int32 [nr_seqs][max_blocks] */
	uint64_t ctx_lens;     /* uint32 [nr_seqs] */
	uint64_t q_lens;       /* uint32 [nr_seqs], prefill only */
	uint64_t q, out;       /* fp32 */
	uint32_t nr_seqs, num_q_heads, max_blocks;
	float scale;
};

/* kvmm_cache_<dt>: grid (nr_tokens), 128 threads */
struct kvmm_cuda_cache_args {
	struct kvmm_cuda_pages pg;
	uint64_t slots; /* int64 [nr_tokens] */
	uint64_t k, v;	/* fp32 [nr_tokens][kv_heads][head_dim] */
	uint32_t nr_tokens, pad;
};

/* kvmm_copy_pages: grid (blocks per page, nr), 256 threads */
struct kvmm_cuda_copy_args {
	uint64_t dst_base, src_base;
	uint64_t dst, src; /* int32 [nr] frame numbers */
	uint64_t page_size;
	uint64_t slab_bytes, row_bytes, scale_off, scale_row_bytes;
	uint64_t used; /* 2 * layers * slab_bytes */
	uint32_t nslabs, ntokens, nr, pad;
};

#ifdef __cplusplus
#define KVMM_CUDA_ABI_ASSERT static_assert
#else
#define KVMM_CUDA_ABI_ASSERT _Static_assert
#endif
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_pages) == 88, "kvmm_cuda_pages layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_attn_args) == 144, "kvmm_cuda_attn_args layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_cache_args) == 120, "kvmm_cuda_cache_args layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_copy_args) == 96, "kvmm_cuda_copy_args layout");

#endif /* KVMM_KERNELS_CUDA_ABI_H */
