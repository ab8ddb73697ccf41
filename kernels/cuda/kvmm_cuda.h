/* SPDX-License-Identifier: MIT */
/*
 * kernels/cuda/kvmm_cuda.h - the CUDA kernels (kvmm_cuda_*): the same paged attention,
 * reshape_and_cache and copy_pages as kernels/kernels.h, on a GPU, with the same argument
 * structs, page layout, dtypes and rounding.
 *
 * Differences from the CPU API, all because the data is on the device:
 *   - Every pointer an argument struct or call carries (kv.base, block_tables, ctx_lens, q_lens,
 *     q, out, slots, k, v, the frame lists) is a device address (pool memory from the cuda
 *     backend mapped with kvmm_cuda_map_fds(), or kvmm_cuda_malloc()); fmt stays on the host.
 *   - Calls are asynchronous on @stream (NULL: the legacy default stream) and return once the
 *     kernel is queued; kvmm_cuda_sync() or the engine's own stream sync waits.
 *   - The host checks what it can see (format, heads, pointers); what lives in device arrays
 *     cannot be checked before the launch, so the kernels make it harmless instead: a
 *     negative or out-of-range (>= nr_frames when set) block-table entry, slot or frame number
 *     is skipped, lengths past the block table are clamped, and q_lens past ctx_lens are
 *     clamped.  copy_pages does not check that a pair copies a frame onto itself.
 *   - Prefill takes max_q_len, the largest q_lens[i] (the host does not read q_lens).
 *   - head_dim is at most KVMM_CUDA_MAX_HEAD_DIM (256): -ENOTSUP beyond.
 * All return 0 or a negative errno: -EINVAL, -ENOTSUP, -ENODEV (kvmm_cuda_init not done or
 * failed), -EIO (a launch failed; kvmm_cuda_why() has the driver's words).
 * Documentation/kernels/cuda.md has the details.
 */
#ifndef KVMM_KERNELS_CUDA_KVMM_CUDA_H
#define KVMM_KERNELS_CUDA_KVMM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libkvmm.so exports what is declared from here on (runtime/libkvmm.map, -fvisibility=hidden) */
#pragma GCC visibility push(default)

/* A CUstream of the driver API (opaque); NULL is the legacy default stream. */
typedef struct CUstream_st *kvmm_cuda_stream_t;

/*
 * Open the driver, make device @device's primary context current in this thread and load the
 * embedded module.  Idempotent for the same device; another device while one is loaded is
 * -EBUSY (call kvmm_cuda_fini first).  -ENODEV without a driver or GPU, -EIO when the module
 * does not load (e.g. a GPU older than sm_80): kvmm_cuda_why() says why.
 */
int kvmm_cuda_init(int device);
/* Unload the module and release the context.  No kernel may be running. */
void kvmm_cuda_fini(void);
/* Why the last init or call failed, in words; "" when nothing failed. */
const char *kvmm_cuda_why(void);
/* The device kvmm_cuda_init() set up, or -1. */
int kvmm_cuda_device(void);

int kvmm_cuda_paged_decode(const struct kvmm_attn_batch *b, const float *q, float *out,
			   kvmm_cuda_stream_t stream);
/*
 * Decode and prefill split each sequence's context over enough blocks to fill the GPU this
 * many times (resident blocks x waves); 0 never splits.  Default 1.  A tuning knob for
 * benchmarks and tests, like kvmm_cpu_split_min_bytes; set it before launching, not while
 * launches run.
 */
extern uint32_t kvmm_cuda_decode_waves;
/*
 * max_q_len: at least every sequence's q_lens (clamped to its ctx_lens); it sizes the grid
 * and the split scratch, and rows past it are not computed (left as they were in out), though
 * they still count in the row offsets of the sequences after them.  0: nothing is computed.
 */
int kvmm_cuda_paged_prefill(const struct kvmm_attn_batch *b, uint32_t max_q_len, const float *q,
			    float *out, kvmm_cuda_stream_t stream);
/*
 * Prefill of fp16, bf16 and int8 KV (int8: scale groups of a multiple of 16 elements) with
 * head_dim a multiple of 16 up to 128 runs on the tensor cores (kvmm_prefill_tc_<dt>,
 * attn_tc.cu) while this is non-zero (the default); 0 uses the FMA kernel for every prefill.
 * Both meet the same error bound; fp16's range applies to the scaled queries (|q * scale| <
 * 65504).  KVMM_CUDA_PREFILL_TC=0 in the environment at kvmm_cuda_init() clears it.  Set it
 * before launching, not while launches run.
 */
extern uint32_t kvmm_cuda_prefill_tc;
/*
 * Decode of the same formats runs on the tensor cores (kvmm_decode_tc_<dt>) when its GQA group
 * would make the FMA kernel do 4 or more multiply-adds per KV byte (fp16 and bf16: 8 or more
 * query heads per KV head; int8: 4 or more) and this is 1 (the default); 0 keeps every decode
 * on the FMA kernel, 2 puts every decode of those formats on the tensor cores, whatever its
 * group (for measuring where they start to pay: cuda-bench's crossover rows).
 * KVMM_CUDA_DECODE_TC=0, 1 or 2 at kvmm_cuda_init() sets it (another value: 1).
 */
extern uint32_t kvmm_cuda_decode_tc;
int kvmm_cuda_reshape_and_cache(const struct kvmm_kv_pages *kv, uint32_t nr_tokens,
				const int64_t *slots, const float *k, const float *v,
				kvmm_cuda_stream_t stream);
int kvmm_cuda_copy_pages(const struct kvmm_fmt *fmt, void *dst_base, const void *src_base,
			 const int32_t *dst, const int32_t *src, uint32_t nr, uint32_t ntokens,
			 kvmm_cuda_stream_t stream);

/*
 * Small conveniences over the driver for engines, tests and benchmarks, in the current
 * device's context: device memory, synchronous copies, a wait for all work.
 */
int kvmm_cuda_malloc(void **dptr, size_t bytes);
void kvmm_cuda_free(void *dptr);
int kvmm_cuda_memcpy_htod(void *dst, const void *src, size_t bytes);
int kvmm_cuda_memcpy_dtoh(void *dst, const void *src, size_t bytes);
int kvmm_cuda_memcpy_dtod(void *dst, const void *src, size_t bytes);
int kvmm_cuda_memset(void *dst, int byte, size_t bytes);
int kvmm_cuda_sync(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* KVMM_KERNELS_CUDA_KVMM_CUDA_H */
