/* SPDX-License-Identifier: MIT */
/*
 * kernels/kernels.h - the attention and page-copy kernels an engine runs over kvmm's pages.
 *
 * Every kernel reads or writes KV in the page layout of include/format.h (lib/format.c),
 * [layer][K|V][token][head][dim] (int8 slabs followed by their fp32 per-group scales), through
 * block tables: frame n is at base + n * page_size, a block table row holds the int32 frame numbers of a
 * sequence's logical blocks (KVMM_BLOCK_NONE for an absent one), and token t of a sequence is
 * row t % tokens_per_page of frame table[t / tokens_per_page].  Queries, outputs and new K/V
 * rows are fp32 whatever the page dtype: the kernels convert on read and write.
 *
 * The CPU implementations (kvmm_cpu_*, kernels/cpu/) are reentrant and single-threaded by
 * default (an engine may split a batch over its own threads); kvmm_cpu_set_threads() lets
 * the attention kernels split a batch, and a long context, over a persistent thread pool.
 * Each picks its vector code (scalar, AVX2, AVX-512) once, at first use, from what the CPU
 * supports, or from KVMM_KERNEL_ISA.  A CUDA implementation (kernels/cuda/, kvmm_cuda_*)
 * takes the same argument structs.
 * All return 0 or a negative errno (-EINVAL for bad arguments, -ENOMEM, -ENOTSUP).
 * Documentation/kernels/cpu.md has the details, the error bounds and the benchmark.
 */
#ifndef KVMM_KERNELS_H
#define KVMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libkvmm.so exports what is declared from here on (runtime/libkvmm.map, -fvisibility=hidden) */
#pragma GCC visibility push(default)

/*
 * The pages a kernel works on: one layer of the frames of one pool mapping.  base and
 * fmt->page_size must be multiples of 4 bytes (frames hold fp32 elements and scales read as
 * floats); a pool's mapping and page size always are.
 */
struct kvmm_kv_pages {
	void *base;		    /* frame n at base + n * fmt->page_size */
	const struct kvmm_fmt *fmt; /* from kvmm_fmt_init() */
	uint32_t layer;		    /* < fmt->layers */
	uint32_t nr_frames;	    /* frames mapped at base, for bounds checks; 0 = unchecked */
};

/*
 * One batch of attention.  Sequence i has ctx_lens[i] tokens in its pages (for prefill these
 * include its q_lens[i] new tokens, already written by kvmm_cpu_reshape_and_cache) and its
 * block table at block_tables + i * max_blocks.  Query head j reads KV head
 * j / (num_q_heads / kv_heads) (grouped-query attention; num_q_heads a multiple of kv_heads).
 */
struct kvmm_attn_batch {
	struct kvmm_kv_pages kv;
	uint32_t nr_seqs;
	uint32_t num_q_heads;
	const int32_t *block_tables; /* nr_seqs rows of max_blocks */
	uint32_t max_blocks;
	const uint32_t *ctx_lens; /* tokens per sequence, <= max_blocks * tokens_per_page */
	const uint32_t *q_lens;	  /* prefill: new tokens per sequence (<= ctx_lens); decode: NULL */
	float scale;		  /* softmax scale; 0 means 1 / sqrt(head_dim) */
};

/*
 * Decode: one query per sequence.  q and out are fp32 [nr_seqs][num_q_heads][head_dim]; a
 * sequence with ctx_len 0 gets zeros.  A sequence's full pages are read in ascending frame
 * order, not the table's (the result is the same sum, rounded in that order).
 */
int kvmm_cpu_paged_decode(const struct kvmm_attn_batch *b, const float *q, float *out);

/*
 * Prefill, causal: the q_lens[i] queries of sequence i are its tokens at positions
 * ctx_lens[i] - q_lens[i] .. ctx_lens[i] - 1 and each attends to the tokens at or before its
 * position.  q and out are fp32 [token][num_q_heads][head_dim] with the sequences' queries one
 * after the other (sum of q_lens rows).  The full pages before the first new token are read
 * in ascending frame order, as decode reads all full pages.
 */
int kvmm_cpu_paged_prefill(const struct kvmm_attn_batch *b, const float *q, float *out);

/*
 * Slot of a token for reshape_and_cache: frame * tokens_per_page + row; a negative slot is
 * skipped (padding tokens of a batch).
 */
static inline int64_t kvmm_kv_slot(const struct kvmm_fmt *fmt, int32_t frame, uint32_t row)
{
	return (int64_t)frame * fmt->tokens_per_page + row;
}

/*
 * Write nr_tokens new K and V rows (fp32 [token][kv_heads][head_dim]) at their slots, converting
 * to the page dtype (round to nearest even); int8 groups are quantized with
 * scale = max|x| / 127 and round to nearest.
 */
int kvmm_cpu_reshape_and_cache(const struct kvmm_kv_pages *kv, uint32_t nr_tokens,
			       const int64_t *slots, const float *k, const float *v);

/*
 * Copy nr pages: frame src[i] of src_base to frame dst[i] of dst_base (the same base for
 * copy-on-write, a staging buffer for swap).  ntokens 0 copies the used part of each page
 * (every layer, K and V, scales); otherwise only the first ntokens rows (and their scales) of
 * every slab, what a partial last block holds.  Pages must not overlap.
 */
int kvmm_cpu_copy_pages(const struct kvmm_fmt *fmt, void *dst_base, const void *src_base,
			const int32_t *dst, const int32_t *src, uint32_t nr, uint32_t ntokens);

/* Vector code of the CPU kernels. */
enum kvmm_cpu_isa {
	KVMM_CPU_ISA_SCALAR,
	KVMM_CPU_ISA_AVX2,   /* AVX2 + FMA + F16C */
	KVMM_CPU_ISA_AVX512, /* AVX-512 F + BW + VL */
	KVMM_CPU_ISA_COUNT,
};

const char *kvmm_cpu_isa_name(enum kvmm_cpu_isa isa);
/* Whether this CPU (and this build) can run isa. */
bool kvmm_cpu_isa_supported(enum kvmm_cpu_isa isa);
/* The ISA in use: KVMM_KERNEL_ISA=scalar|avx2|avx512 if set and supported, else the best. */
enum kvmm_cpu_isa kvmm_cpu_isa_get(void);
/* Force an ISA (tests, benchmarks); -ENOTSUP if unsupported.  Not for use while kernels run. */
int kvmm_cpu_isa_set(enum kvmm_cpu_isa isa);

/*
 * Threads the attention kernels use, the caller included (default 1, or KVMM_KERNEL_THREADS
 * at first use; 0 there means one per online CPU).  With n > 1 a decode batch is split over a
 * persistent pool of n - 1 workers: sequences among threads, and a long context's blocks among
 * threads as well (each part's softmax state (max, sum, weighted V) is merged exactly
 * afterwards); prefill splits its query tiles.  The results do not depend on n beyond fp32
 * rounding of the merge.  A caller that finds the pool busy (another thread is running a
 * kernel on it) runs alone, so the kernels stay reentrant.
 * kvmm_cpu_set_threads(0) picks one per online CPU; 1 stops and joins the workers.  Returns 0
 * or -EAGAIN (fewer workers could be created).  Not for use while kernels run.
 */
#define KVMM_CPU_MAX_THREADS 64
int kvmm_cpu_set_threads(uint32_t n);
uint32_t kvmm_cpu_get_threads(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* KVMM_KERNELS_H */
