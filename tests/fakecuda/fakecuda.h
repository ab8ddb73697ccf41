/* SPDX-License-Identifier: MIT */
/*
 * tests/fakecuda/fakecuda.h - what tests may ask of libcuda-fake.so, kvmm's own test double of
 * the CUDA driver (fakecuda.c, Documentation/dev-tools/fake-cuda.md) beyond the driver entry
 * points: its live-object counts, so a test can assert that nothing leaked, the races and
 * refused calls it saw, fault injection, and the UUIDs of its devices.  A test reaches these
 * with dlopen of the same path it gave kvmm in $KVMM_LIBCUDA (the library is then loaded once)
 * and dlsym of the names below; nothing in kvmm itself knows the fake exists.
 */
#ifndef KVMM_TESTS_FAKECUDA_H
#define KVMM_TESTS_FAKECUDA_H

#include <stdint.h>
#include <string.h>

/* The fake's allocation granularity (cuMemGetAllocationGranularity): 2 MiB, as on real GPUs. */
#define KVMM_FAKECUDA_GRANULARITY (UINT64_C(2) << 20)

/* KVMM_FAKECUDA_DEVICES=N: 1 to this many physical devices */
#define KVMM_FAKECUDA_MAX_DEVICES 8

/*
 * The UUID (cuDeviceGetUuid) of physical device @phys, the same in every process whatever its
 * ordinal there: the 15 ASCII bytes "kvmm-fakecuda-d" followed by the digit '0' + @phys, so
 * physical device 1 is 6b 76 6d 6d 2d 66 61 6b 65 63 75 64 61 2d 64 31.
 */
#define KVMM_FAKECUDA_UUID_PREFIX "kvmm-fakecuda-d"
static inline void kvmm_fakecuda_uuid(int phys, unsigned char out[16])
{
	memcpy(out, KVMM_FAKECUDA_UUID_PREFIX, 15);
	out[15] = (unsigned char)('0' + phys);
}

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
	/* devices: physical (KVMM_FAKECUDA_DEVICES) and seen here (KVMM_FAKECUDA_VISIBLE) */
	uint64_t phys_devices, devices;
	/* bytes this process allocated on each physical device (cuMemCreate, cuMemAlloc) */
	uint64_t dev_bytes[KVMM_FAKECUDA_MAX_DEVICES];
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
 *   KVMM_FAKECUDA_DEVICES=N     N physical devices, 1 to 8 (default 1); a UUID each (above)
 *   KVMM_FAKECUDA_VISIBLE=LIST  the physical devices this process sees, comma-separated, in
 *                               the order of its ordinals (as CUDA_VISIBLE_DEVICES): with
 *                               "1,0", ordinal 0 is physical device 1 (default: all, in order)
 *                               A bad value of either (out of range, a duplicate, an empty
 *                               item) makes cuInit fail with error 1 and say why on stderr.
 *   KVMM_FAKECUDA_REPORT=FILE   at exit, append one line of this process's live counts:
 *                               "fakecuda pid=N allocs=N ... races=N refused=N"
 *   KVMM_FAKECUDA_VERBOSE=1     say each refused call on stderr
 *   KVMM_FAKECUDA_MEM=BYTES     each device's memory size (default 8 GiB): beyond it, out of
 *                               memory
 *   KVMM_FAKECUDA_SIMT=1        cuModuleLoadData succeeds and kernels/cuda's kernels run on
 *                               the host (simt.h); a kernel that faults makes the context
 *                               unusable (error 719) and says why on stderr
 */

#endif /* KVMM_TESTS_FAKECUDA_H */
