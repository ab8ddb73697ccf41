/* SPDX-License-Identifier: MIT */
/*
 * tests/fakecuda/simt.h - the SIMT emulator of the fake CUDA driver: kernels/cuda's kernels,
 * compiled for the host from the very .cu files nvcc compiles (simt_kernels.cc), run by one
 * host thread with every CUDA thread of a block a fiber of its own (simt.c), so that
 * __syncthreads, warp shuffles and cp.async behave as the GPU's do and their misuse is an
 * error instead of a silently wrong result (Documentation/dev-tools/fake-cuda.md, "Running
 * the kernels").
 *
 * Two sides share this header: the scheduler (C, simt.c) and the host build of the device code
 * (C++, simt_kernels.cc with simt_device.h).  Launches are not reentrant: libcuda-fake.so runs
 * them under its one lock, so the state below is plain globals.
 */
#ifndef KVMM_TESTS_FAKECUDA_SIMT_H
#define KVMM_TESTS_FAKECUDA_SIMT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct simt_dim3 {
	unsigned int x, y, z;
};

/* one kernel of the module: its name as cuModuleGetFunction sees it */
struct simt_kernel {
	const char *name;
	void (*entry)(const void *args); /* runs the kernel body with a copy of its argument */
	size_t arg_size;		 /* the one argument, a struct passed by value */
	unsigned int max_threads;	 /* __launch_bounds__, else 1024 */
};

/* The kernels of kernels/cuda/module.cu (simt_kernels.cc). */
extern const struct simt_kernel simt_kernels[];
extern const unsigned int simt_nr_kernels;

/* dynamic shared memory the emulator provides: the driver's default limit, 48 KiB */
#define SIMT_DYN_SMEM_MAX (48u << 10)
#define SIMT_WARP 32u
#define SIMT_MAX_THREADS 1024u

/*
 * Run @k over @grid blocks of @block threads with @smem bytes of dynamic shared memory, the
 * blocks one after another.  0, or -1 with the reason in @err: a deadlock (threads waiting
 * at barriers that can never all be reached, e.g. __syncthreads in a branch some threads do
 * not take), a warp shuffle that not all 32 lanes of the warp reach together, a cp.async that
 * is misaligned, outside shared memory or reading outside device memory.  The launch stops
 * at the first error.  Argument limits (dimensions, launch bounds) are the caller's to check.
 */
int simt_launch(const struct simt_kernel *k, struct simt_dim3 grid, struct simt_dim3 block,
		unsigned int smem, const void *args, char *err, size_t errlen);

/* the warp order's seed (the same seed, the same schedules); 0: the default */
void simt_seed(uint64_t seed);

/*
 * Set by the driver: whether [p, p + n) is device memory a kernel may read (0) or not (-1);
 * NULL accepts everything.  Called for every cp.async source.
 */
extern int (*simt_check_global)(const void *p, size_t n);

/* ---- what the host build of the device code calls (simt_device.h) ---- */
extern struct simt_dim3 simt_thread_idx, simt_block_idx, simt_block_dim, simt_grid_dim;
/* bytes of global memory all launches so far staged with cp.async (what a kernel reads) */
extern uint64_t simt_staged_bytes;
extern char simt_dyn_smem[SIMT_DYN_SMEM_MAX];

void simt_syncthreads(void);
/* __shfl_xor_sync of a 32-bit word (simt_device.h gives it CUDA's typed overloads) */
uint32_t simt_shfl_xor(unsigned int mask, uint32_t v, int lane_mask);
/*
 * A warp collective for what the GPU's warp-wide instructions exchange (mma.sync): every lane
 * gives n (at most SIMT_GATHER_MAX) words at in and gets back all 32 lanes' words, lane 0's
 * first (words[l * n + i]: word i of lane l), in one buffer the warp's lanes share and read
 * until their next shuffle, gather or barrier (it is written once per exchange, not copied to
 * every lane).  serial is a number no other exchange of the process has, warp the warp's
 * index in its block: what a lane needs to tell whether another lane of its warp has already
 * worked on these words (mma16816's decoded fragments, simt_kernels.cc).  All 32 lanes must
 * call it together with the same n.
 */
#define SIMT_GATHER_MAX 8u
struct simt_gathered {
	uint64_t serial;
	unsigned int warp;
	uint32_t words[SIMT_WARP * SIMT_GATHER_MAX];
};
const struct simt_gathered *simt_warp_gather(const uint32_t *in, unsigned int n);
/*
 * A shared-memory load of n (1, 2, 4, 8 or 16) bytes at p, declared by the kernel at the place
 * site (KVMM_SMEM_LOAD in kernels/cuda/common.cuh; nothing on a GPU): misaligned or outside
 * the dynamic shared memory is a fault; otherwise its bank conflicts are counted (per
 * warp-wide load: requests, the wavefronts the banks need, the fewest possible, and loads
 * the lanes made at one site with different sizes, not counted).
 */
void simt_smem_load(const void *p, unsigned int n, const void *site);
extern uint64_t simt_smem_requests, simt_smem_wavefronts, simt_smem_ideal, simt_smem_unpaired;
/* cp.async of n (4, 8 or 16) bytes: carried out at the thread's next wait */
void simt_cp_async(void *dst, const void *src, unsigned int n);
void simt_cp_async_commit(void);
void simt_cp_async_wait_all(void);
/* a fault inside a kernel: the launch fails with this reason; does not return */
void simt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#ifdef __cplusplus
}
#endif

#endif /* KVMM_TESTS_FAKECUDA_SIMT_H */
