/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/abi.h - the contract between the host wrappers (cuda.c, C) and the device code
 * (module.cu, CUDA C++): kernel names and the one argument struct each kernel takes by value.
 *
 * Every field is fixed width and every pointer a 64-bit device address, so the C compiler and
 * nvcc agree on the layout without sharing anything else; the sizes are asserted on both
 * sides.  The host wrapper derives the byte offsets from struct kvmm_fmt (include/format.h), so
 * the device code never needs the format code: it only adds offsets.  A kernel name is its
 * role followed by the dtype's name as in uapi (fp32, fp16, bf16, int8).
 */
#ifndef KVMM_KERNELS_CUDA_ABI_H
#define KVMM_KERNELS_CUDA_ABI_H

#include <stdint.h>

/* largest head_dim the attention kernels take: lpr (at most 32) lanes of EPL elements */
#define KVMM_CUDA_MAX_HEAD_DIM 256

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

/* a batch of paged attention, as struct kvmm_attn_batch says it (uapi/kvmm.h) */
struct kvmm_cuda_attn_args {
	struct kvmm_cuda_pages pg;
	uint64_t block_tables; /* int32 [nr_seqs][max_blocks] */
	uint64_t ctx_lens;     /* uint32 [nr_seqs] */
	uint64_t q_lens;       /* uint32 [nr_seqs], prefill only */
	uint64_t q, out;       /* fp32 */
	uint32_t nr_seqs, num_q_heads, max_blocks;
	float scale;
};

/*
 * Split-K decode and prefill (attn.cu, Documentation/kernels/cuda.md "decode" and "prefill").
 * kvmm_decode_<dt> and kvmm_prefill_<dt>: grid (nsplit * row_tiles * nqg, kv_heads, nr_seqs),
 * KVMM_CUDA_DECODE_THREADS threads, smem_bytes of dynamic shared memory.  Block (x, h, s),
 * x = (split * row_tiles + row tile) * nqg + query group, attends query heads h * group +
 * (x % nqg) * gb ... (at most gb of them, all of KV head h) of rows row tile * rows ... (at
 * most rows of them; decode: the one query of sequence s) over tokens [split * split_tokens,
 * + split_tokens) of sequence s.  With nsplit 1 it writes out; otherwise it writes its part
 * (the unnormalised accumulator and the running max and sum) and kvmm_decode_merge, grid
 * (num_q_heads, nr_seqs), or kvmm_prefill_merge, grid (num_q_heads, nr_seqs, z), both
 * KVMM_CUDA_DECODE_THREADS threads, combines the parts into out.  Every size and shared-memory
 * offset is computed by the host (kvmm_cuda_decode_plan, kvmm_cuda_prefill_plan) so that the
 * two sides cannot disagree.
 */
#define KVMM_CUDA_DECODE_THREADS 128
#define KVMM_CUDA_DECODE_WARPS (KVMM_CUDA_DECODE_THREADS / 32)
/* query slots (heads x rows) one block serves (its accumulators: 8 per slot per thread) */
#define KVMM_CUDA_DECODE_GMAX 8
/*
 * the softmax state in shared memory, in 32-bit words: max, sum, correction and limit per
 * slot, then a 64-bit word per warp (prefill's row sums)
 */
#define KVMM_CUDA_DECODE_ST_WORDS (4 * KVMM_CUDA_DECODE_GMAX + 2 * KVMM_CUDA_DECODE_WARPS)
/* elements of a V row one thread accumulates (a lane of a row) */
#define KVMM_CUDA_DECODE_EPL 8
/*
 * Dynamic shared memory: the budget the tile size is chosen for, and the hard limit (48 KiB
 * needs no opt-in; registers hold an SM to 4 blocks anyway, which 4 x 48 KiB fits on sm_90)
 */
#define KVMM_CUDA_DECODE_SMEM_BUDGET (48u << 10)
#define KVMM_CUDA_DECODE_SMEM_MAX (48u << 10)

struct kvmm_cuda_decode_args {
	struct kvmm_cuda_attn_args a;
	uint64_t part_acc; /* fp32 [part rows][nsplit][head_dim], nsplit > 1 only; part rows are */
	uint64_t part_ml;  /* [nr_seqs][num_q_heads], prefill [nr_seqs][max_q][num_q_heads]; ml: */
			   /* fp32 [part rows][nsplit][2], the running max and sum */
	uint32_t split_tokens; /* tokens per split, a multiple of tile */
	uint32_t nsplit;       /* splits per sequence (1: no parts, no merge) */
	uint32_t group;	       /* query heads per KV head */
	uint32_t gb, nqg;      /* query heads per block, blocks per KV head */
	uint32_t rows;	       /* query rows per block: decode 1, prefill up to GMAX / gb */
	uint32_t row_tiles;    /* blocks along the rows: ceil(max_q / rows), decode 1 */
	uint32_t max_q;	       /* prefill: max_q_len; rows past it are not computed */
	uint32_t tile;	       /* tokens per tile, a power of 2 in [8, 128] */
	uint32_t tpt;	       /* threads per token in the scores: threads / tile */
	uint32_t lpr;	       /* lanes per V row: pow2 >= head_dim / EPL, <= 32 */
	uint32_t vk;	       /* V rows of one shared-memory phase this many apart (banks) */
	uint32_t sl;	       /* staging lanes per row: pow2 >= chunks, <= 32 */
	uint32_t chunks;       /* 16-byte chunks of one head's row: ceil(dim * elem / 16) */
	uint32_t row_stride;   /* bytes between rows of a staged tile (16 * chunks + pad) */
	uint32_t ngroups;      /* int8: scale groups per head row, else 0 */
	uint32_t gmagic;       /* int8: ceil(65536 / gs): d * gmagic >> 16 == d / gs for d < 256 */
	uint32_t vec;	       /* 1: 16-byte aligned rows, cp.async; 0: byte-wise staging */
	uint32_t stage_bytes;  /* one stage: K rows, V rows, K scales, V scales, ok flags */
	uint32_t v_soff, ks_soff, vs_soff, ok_soff; /* inside a stage */
	uint32_t q_soff;			    /* scaled queries: slots of qstride floats */
	uint32_t qstride;    /* chunks * qcs floats (qcs: 16 / elem rounded to an odd number of */
			     /* 4-float units), zero past head_dim and in the padding */
	uint32_t s_soff;     /* scores, then weights: slots rows of tile floats */
	uint32_t st_soff;    /* the softmax state: KVMM_CUDA_DECODE_ST_WORDS words */
	uint32_t smem_bytes; /* all of it; the final sums alias the stages at 0 */
	uint32_t tc;	     /* 1: kvmm_prefill_tc_<dt>'s plan (below), 0: the kernel above */
	uint32_t pad;
};

/*
 * Prefill on the tensor cores (attn_tc.cu, Documentation/kernels/cuda.md "Prefill on the
 * tensor cores"): kvmm_prefill_tc_fp16, _bf16 and _int8 take the same arguments, grid and merge
 * as kvmm_prefill_<dt> with a plan of their own (tc 1): KVMM_CUDA_DECODE_THREADS threads, each
 * warp 16 of the block's KVMM_CUDA_TC_SLOTS slots (rows x query heads), tiles of
 * KVMM_CUDA_TC_TILE tokens, head_dim a multiple of 16 up to KVMM_CUDA_TC_MAX_DIM (int8: scale
 * groups of a multiple of 16 elements).  The scores and the weighted sums are mma.sync
 * m16n8k16 products with fp32 accumulators; the fp32 queries and weights enter as the sum of
 * two 16-bit numbers (the rounded value and its rounding error), so the result is as close to
 * the fp32 kernels' as theirs is to the CPU's.  kvmm_decode_tc_<dt>: the decode kernels'
 * arguments, grid and merge, a block's gb (at most 16) query heads one fragment, the four
 * warps taking 8 tokens each of every tile, combined at the end (plan: tc 1, rows 1).
 */
#define KVMM_CUDA_TC_SLOTS 64
#define KVMM_CUDA_TC_TILE 32
#define KVMM_CUDA_TC_MAX_DIM 128

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

#ifndef __CUDACC__
/*
 * Host side (cuda.c), exposed for the tests: fill d for decode args a of dtype dtype (enum
 * kvmm_dtype): tile geometry and shared-memory layout, and the splits for resident blocks
 * running at once (0: no split).  0, -EINVAL or -ENOTSUP.
 */
int kvmm_cuda_decode_plan(const struct kvmm_cuda_attn_args *a, uint32_t dtype, uint32_t resident,
			  struct kvmm_cuda_decode_args *d);
/* the same for prefill of at most max_q_len new tokens per sequence */
int kvmm_cuda_prefill_plan(const struct kvmm_cuda_attn_args *a, uint32_t dtype, uint32_t max_q_len,
			   uint32_t resident, struct kvmm_cuda_decode_args *d);
/*
 * The unsplit plan a launch for batch b starts from (max_q_len 0: decode, else prefill), for
 * tests and benchmarks that must know a block's rows or tile; the batch is checked as a launch
 * checks it (q and out aside).  struct kvmm_attn_batch comes from kernels/kernels.h.
 */
struct kvmm_attn_batch;
int kvmm_cuda_batch_plan(const struct kvmm_attn_batch *b, uint32_t max_q_len,
			 struct kvmm_cuda_decode_args *d);
#endif

#ifdef __cplusplus
#define KVMM_CUDA_ABI_ASSERT static_assert
#else
#define KVMM_CUDA_ABI_ASSERT _Static_assert
#endif
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_pages) == 88, "kvmm_cuda_pages layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_attn_args) == 144, "kvmm_cuda_attn_args layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_decode_args) == 280, "kvmm_cuda_decode_args layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_cache_args) == 120, "kvmm_cuda_cache_args layout");
KVMM_CUDA_ABI_ASSERT(sizeof(struct kvmm_cuda_copy_args) == 96, "kvmm_cuda_copy_args layout");

#endif /* KVMM_KERNELS_CUDA_ABI_H */
