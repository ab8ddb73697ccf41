/* SPDX-License-Identifier: MIT */
/*
 * tests/fakecuda/fakecuda.h - what tests may ask of libcuda-fake.so, kvmm's own test double of
 * the CUDA driver (fakecuda.c, Documentation/dev-tools/fake-cuda.md) beyond the driver entry
 * points: its live-object counts, so a test can assert that nothing leaked, the races and
 * refused calls it saw, and fault injection.  A test reaches these with dlopen of the same
 * path it gave kvmm in $KVMM_LIBCUDA (the library is then loaded once) and dlsym of the names
 * below; nothing in kvmm itself knows the fake exists.
 */
#ifndef KVMM_TESTS_FAKECUDA_H
#define KVMM_TESTS_FAKECUDA_H

#include <stdint.h>

/* The fake's allocation granularity (cuMemGetAllocationGranularity): 2 MiB, as on real GPUs. */
#define KVMM_FAKECUDA_GRANULARITY (UINT64_C(2) << 20)

struct kvmm_fakecuda_stats {
	/* live objects: all zero once a well-behaved process has torn everything down */
	uint64_t allocs;      /* physical allocations (cuMemCreate, imports) still alive */
	uint64_t alloc_bytes; /* their bytes */
	uint64_t handles;     /* of those, handles not yet cuMemRelease'd */
	uint64_t reservations;
	uint64_t mappings;
	uint64_t dev_allocs;  /* cuMemAlloc */
	uint64_t host_allocs; /* cuMemHostAlloc */
	uint64_t streams;
	uint64_t events;
	uint64_t ctx_refs; /* primary context retains not yet released */
	uint64_t pending;  /* asynchronous operations not yet carried out */
	uint64_t modules;  /* loaded (KVMM_FAKECUDA_SIMT=1 only) */
	/* counters since the library was loaded */
	uint64_t races;		 /* unordered operations of two streams on overlapping memory */
	uint64_t pageable_async; /* async copies whose host side is not cuMemHostAlloc memory */
	uint64_t refused;	 /* calls answered with an error (injected faults excluded) */
	uint64_t injected;	 /* faults injected */
	uint64_t copies;	 /* copies and memsets carried out */
	uint64_t copy_bytes;
	uint64_t launches;     /* kernels run (KVMM_FAKECUDA_SIMT=1) */
	uint64_t staged_bytes; /* global memory they staged into shared memory with cp.async */
	/*
	 * the kernels' declared shared-memory loads (KVMM_SMEM_LOAD), warp-wide: how many, the
	 * wavefronts the 32 banks needed for them and the fewest possible (equal: no bank
	 * conflict), and loads a warp's lanes did not make together (not counted)
	 */
	uint64_t smem_requests, smem_wavefronts, smem_ideal, smem_unpaired;
	char last_error[256]; /* why the last refused call was refused */
};

/* Fill @st (under the fake's lock).  0. */
typedef int (*kvmm_fakecuda_stats_fn)(struct kvmm_fakecuda_stats *st);
#define KVMM_FAKECUDA_STATS "kvmm_fakecuda_stats"

/*
 * Make the @nth next call (1 = the next one) of the entry point @call (its cuda.h name, e.g.
 * "cuMemMap", no _v2) return @result without doing anything; @nth 0 cancels.  One fault is
 * armed at a time.  The same from the environment, for a whole process (kvmmd):
 * KVMM_FAKECUDA_FAIL=CALL:NTH[:RESULT] (RESULT defaults to 2, out of memory).
 */
typedef void (*kvmm_fakecuda_fail_fn)(const char *call, unsigned int nth, int result);
#define KVMM_FAKECUDA_FAIL "kvmm_fakecuda_fail"

/*
 * Environment:
 *   KVMM_FAKECUDA_REPORT=FILE   at exit, append one line of this process's live counts:
 *                               "fakecuda pid=N allocs=N ... races=N refused=N"
 *   KVMM_FAKECUDA_VERBOSE=1     say each refused call on stderr
 *   KVMM_FAKECUDA_MEM=BYTES     device memory size (default 8 GiB): beyond it, out of memory
 *   KVMM_FAKECUDA_SIMT=1        cuModuleLoadData succeeds and kernels/cuda's kernels run on
 *                               the host (simt.h); a kernel that faults makes the context
 *                               unusable (error 719) and says why on stderr
 */

#endif /* KVMM_TESTS_FAKECUDA_H */
