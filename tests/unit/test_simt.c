// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_simt.c - the fake CUDA driver's SIMT emulator (tests/fakecuda/simt.c) on
 * small kernels of our own, written in C against simt.h, so that what test_cuda_simt says of
 * kernels/cuda's kernels can be trusted: a correct kernel (a block-wide sum through shuffles
 * and __syncthreads) gives the right answer in every block; each class of bug the emulator
 * claims to catch is caught - a missing __syncthreads between warps (deterministically: every
 * warp reads what the next one writes, a cycle no warp order satisfies), lanes of a warp
 * assumed to run in lockstep (the same cycle among lanes), a shuffle that part
 * of a warp skips, a bad shuffle mask, reading a cp.async destination before waiting, a
 * misaligned cp.async, one outside shared memory or from memory the driver says is not device
 * memory - with a reason in words; a failed launch leaves the emulator usable; threads that
 * exit before a __syncthreads do not block it (Volta's rule); the same seed gives the same
 * schedule.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/fakecuda/simt.h"

#define TID (simt_thread_idx.x)
#define LANE (simt_thread_idx.x % SIMT_WARP)
#define WARP (simt_thread_idx.x / SIMT_WARP)
#define NWARPS (simt_block_dim.x / SIMT_WARP)

/* every kernel's argument: an output array and a few knobs */
struct args {
	float *out;
	const char *src;
	unsigned int knob;
};

static char err[256];

static int launch(void (*entry)(const void *), unsigned int blocks, unsigned int threads,
		  unsigned int smem, struct args *a)
{
	struct simt_kernel k = {"test_kernel", entry, sizeof(*a), SIMT_MAX_THREADS};

	int ret;

	err[0] = 0;
	ret = simt_launch(&k, (struct simt_dim3){blocks, 1, 1}, (struct simt_dim3){threads, 1, 1},
			  smem, a, err, sizeof(err));
	if (ret)
		print_message("launch failed as it should: %s\n", err);
	return ret;
}

static float warp_sum(float v, unsigned int mask)
{
	float w;

	for (int o = 16; o > 0; o >>= 1) {
		uint32_t u;

		memcpy(&u, &v, sizeof(u));
		u = simt_shfl_xor(mask, u, o);
		memcpy(&w, &u, sizeof(w));
		v += w;
	}
	return v;
}

/* ---- a correct kernel ----------------------------------------------------------------------- */

/* out[block] = sum over threads of (tid + 1) * (block + 1): shuffles, then warps via smem */
static void k_sum(const void *p)
{
	const struct args *a = p;
	float *part = (float *)simt_dyn_smem;
	float v = warp_sum((float)(TID + 1) * (float)(simt_block_idx.x + 1), 0xffffffffu);

	if (LANE == 0)
		part[WARP] = v;
	simt_syncthreads();
	if (TID == 0) {
		float s = 0;

		for (unsigned int w = 0; w < NWARPS; w++)
			s += part[w];
		a->out[simt_block_idx.x] = s;
	}
}

static void test_correct_kernel(void **state)
{
	float out[8];
	struct args a = {out, NULL, 0};

	(void)state;
	for (unsigned int threads = 32; threads <= 1024; threads *= 2) {
		memset(out, 0, sizeof(out));
		assert_int_equal(launch(k_sum, 8, threads, 4 * SIMT_WARP, &a), 0);
		for (unsigned int b = 0; b < 8; b++)
			assert_true(out[b] == (float)threads * (threads + 1) / 2 * (b + 1));
	}
}

/* ---- barriers -------------------------------------------------------------------------------- */

/*
 * Warp w writes slot w, then reads slot w + 1 (mod the warps): with the barrier right, without
 * it some warp always reads before the next one writes (a cycle no order satisfies), and
 * gets the shared memory's poison.
 */
static void k_ring(const void *p)
{
	const struct args *a = p;
	float *slot = (float *)simt_dyn_smem;

	if (LANE == 0)
		slot[WARP] = (float)WARP;
	if (a->knob)
		simt_syncthreads();
	if (LANE == 0)
		a->out[simt_block_idx.x * NWARPS + WARP] = slot[(WARP + 1) % NWARPS];
}

static unsigned int ring_wrong(unsigned int with_barrier)
{
	float out[16 * 4];
	struct args a = {out, NULL, with_barrier};
	unsigned int wrong = 0;

	assert_int_equal(launch(k_ring, 16, 4 * SIMT_WARP, 64, &a), 0);
	for (unsigned int b = 0; b < 16; b++)
		for (unsigned int w = 0; w < 4; w++)
			wrong += out[b * 4 + w] != (float)((w + 1) % 4);
	return wrong;
}

static void test_missing_barrier_caught(void **state)
{
	(void)state;
	assert_int_equal(ring_wrong(1), 0);
	/* at least one wrong read in every one of the 16 blocks */
	assert_true(ring_wrong(0) >= 16);
}

/* within a warp: lane i writes slot i, then reads slot i + 1, after a shuffle or not */
static void k_lane_ring(const void *p)
{
	const struct args *a = p;
	float *slot = (float *)simt_dyn_smem;

	slot[TID] = (float)TID;
	if (a->knob)
		simt_shfl_xor(0xffffffffu, 0, 1); /* every lane has written */
	a->out[TID] = slot[WARP * SIMT_WARP + (LANE + 1) % SIMT_WARP];
}

static void test_lockstep_assumption_caught(void **state)
{
	float out[64];
	struct args a = {out, NULL, 1};
	unsigned int wrong = 0;

	(void)state;
	assert_int_equal(launch(k_lane_ring, 1, 64, 64 * sizeof(float), &a), 0);
	for (unsigned int t = 0; t < 64; t++)
		assert_true(out[t] == (float)((t / 32) * 32 + (t + 1) % 32));
	/* no shuffle: lanes run in some order, and in every warp one reads before its write */
	a.knob = 0;
	assert_int_equal(launch(k_lane_ring, 1, 64, 64 * sizeof(float), &a), 0);
	for (unsigned int t = 0; t < 64; t++)
		wrong += out[t] != (float)((t / 32) * 32 + (t + 1) % 32);
	assert_true(wrong >= 2);
}

/* half the block exits at once, the rest meet at two barriers */
static void k_early_exit(const void *p)
{
	const struct args *a = p;
	float *slot = (float *)simt_dyn_smem;

	if (TID % 2)
		return;
	slot[TID] = 1.0f;
	simt_syncthreads();
	simt_syncthreads();
	if (TID == 0) {
		float s = 0;

		for (unsigned int i = 0; i < simt_block_dim.x; i += 2)
			s += slot[i];
		a->out[0] = s;
	}
}

static void test_exited_threads_do_not_block(void **state)
{
	float out[1] = {0};
	struct args a = {out, NULL, 0};

	(void)state;
	assert_int_equal(launch(k_early_exit, 1, 128, 128 * sizeof(float), &a), 0);
	assert_true(out[0] == 64.0f);
}

/* lane 0 of warp 1 goes to __syncthreads while its other lanes shuffle */
static void k_barrier_in_warp(const void *p)
{
	(void)p;
	if (WARP == 1 && LANE == 0)
		simt_syncthreads();
	else
		warp_sum(1.0f, 0xffffffffu);
}

/* ---- shuffles --------------------------------------------------------------------------------- */

/* only lanes below knob shuffle */
static void k_divergent_shuffle(const void *p)
{
	const struct args *a = p;

	if (LANE < a->knob)
		a->out[TID] = warp_sum(1.0f, 0xffffffffu);
}

static void k_bad_mask(const void *p)
{
	const struct args *a = p;

	a->out[TID] = warp_sum(1.0f, 0xffffu);
}

static void test_shuffle_errors(void **state)
{
	float out[128];
	struct args a = {out, NULL, 32};

	(void)state;
	/* all lanes: fine, each lane has the warp's sum */
	assert_int_equal(launch(k_divergent_shuffle, 2, 128, 0, &a), 0);
	for (unsigned int i = 0; i < 128; i++)
		assert_true(out[i] == 32.0f);
	a.knob = 16;
	assert_int_equal(launch(k_divergent_shuffle, 2, 128, 0, &a), -1);
	assert_non_null(strstr(err, "deadlock"));
	assert_non_null(strstr(err, "a shuffle (16)")); /* lanes 0-15 of the first warp run */
	assert_int_equal(launch(k_bad_mask, 1, 64, 0, &a), -1);
	assert_non_null(strstr(err, "mask 0xffff"));
	assert_int_equal(launch(k_barrier_in_warp, 1, 64, 0, &a), -1);
	assert_non_null(strstr(err, "deadlock"));
	assert_non_null(strstr(err, "__syncthreads (1)"));
	/* a partial warp cannot take part in a full-warp shuffle */
	a.knob = 32;
	assert_int_equal(launch(k_divergent_shuffle, 1, 48, 0, &a), -1);
	assert_non_null(strstr(err, "deadlock"));
	/* and after all that the emulator still runs a good kernel */
	test_correct_kernel(state);
}

/* ---- warp gathers (mma.sync) ---------------------------------------------------------------- */

/*
 * Every lane gathers knob words from all lanes (word i of lane l: l * 100 + i + 1000 * warp),
 * twice in a row into the same buffer (the second must not see the first's words), and
 * out[tid] counts the words that came back wrong.  knob 0: lanes below 16 shuffle while the
 * others gather; knob 9: more words than a gather takes.
 */
static void k_gather(const void *p)
{
	const struct args *a = p;
	uint32_t in[SIMT_GATHER_MAX + 1] = {0};
	unsigned int n = a->knob, bad = 0;
	uint64_t serial = 0;

	if (!n) {
		if (LANE < 16)
			warp_sum(1.0f, 0xffffffffu);
		else
			simt_warp_gather(in, 1);
		return;
	}
	for (unsigned int round = 0; round < 2; round++) {
		const struct simt_gathered *g;

		for (unsigned int i = 0; i < n; i++)
			in[i] = LANE * 100 + i + 1000 * WARP + 77777 * round;
		g = simt_warp_gather(in, n);
		/* a new exchange, and the warp it says */
		bad += g->serial <= serial || g->warp != WARP;
		serial = g->serial;
		for (unsigned int l = 0; l < SIMT_WARP; l++)
			for (unsigned int i = 0; i < n; i++)
				bad += g->words[l * n + i] !=
				       l * 100 + i + 1000 * WARP + 77777 * round;
	}
	a->out[TID] = (float)bad;
}

static void test_warp_gather(void **state)
{
	float out[96];
	struct args a = {out, NULL, 6};

	(void)state;
	for (unsigned int n = 1; n <= SIMT_GATHER_MAX; n += 5) {
		a.knob = n;
		memset(out, 0xff, sizeof(out));
		assert_int_equal(launch(k_gather, 2, 96, 0, &a), 0);
		for (unsigned int i = 0; i < 96; i++)
			assert_true(out[i] == 0.0f);
	}
	a.knob = 0;
	assert_int_equal(launch(k_gather, 1, 64, 0, &a), -1);
	assert_non_null(strstr(err, "warp gather"));
	assert_non_null(strstr(err, "shuffle"));
	a.knob = SIMT_GATHER_MAX + 1;
	assert_int_equal(launch(k_gather, 1, 32, 0, &a), -1);
	assert_non_null(strstr(err, "warp gather of 9 words"));
	test_correct_kernel(state);
}

/* ---- cp.async --------------------------------------------------------------------------------- */

static const char *global_lo, *global_hi; /* what the test's "driver" calls device memory */

static int check_global(const void *p, size_t n)
{
	const char *c = p;

	return c >= global_lo && c + n <= global_hi ? 0 : -1;
}

/* thread t stages 16 bytes from src + 16 t + knob; waits unless knob is 1000 */
static void k_stage(const void *p)
{
	const struct args *a = p;
	unsigned int off = a->knob == 1000 ? 0 : a->knob;
	char *dst = simt_dyn_smem + 16 * TID;

	simt_cp_async(dst, a->src + 16 * TID + off, 16);
	simt_cp_async_commit();
	if (a->knob != 1000)
		simt_cp_async_wait_all();
	simt_syncthreads();
	/* each thread reports a float of its neighbour's chunk */
	memcpy(&a->out[TID], simt_dyn_smem + 16 * ((TID + 1) % simt_block_dim.x), sizeof(float));
}

static void k_stage_outside(const void *p)
{
	const struct args *a = p;

	simt_cp_async(simt_dyn_smem + a->knob, a->src, 16);
	simt_cp_async_wait_all();
}

static void test_cp_async(void **state)
{
	static float src[64 * 4 + 4] __attribute__((aligned(16)));
	float out[64] __attribute__((aligned(16)));
	struct args a = {out, (const char *)src, 0};

	(void)state;
	for (unsigned int i = 0; i < 64 * 4 + 4; i++)
		src[i] = (float)i;
	global_lo = (const char *)src;
	global_hi = (const char *)(src + 64 * 4 + 4);
	simt_check_global = check_global;

	assert_int_equal(launch(k_stage, 1, 64, 64 * 16, &a), 0);
	for (unsigned int t = 0; t < 64; t++)
		assert_true(out[t] == (float)(4 * ((t + 1) % 64)));
	/* no wait: the tile is still the poison (NaN) */
	a.knob = 1000;
	assert_int_equal(launch(k_stage, 1, 64, 64 * 16, &a), 0);
	for (unsigned int t = 0; t < 64; t++)
		assert_true(isnan(out[t]));
	/* misaligned source */
	a.knob = 4;
	assert_int_equal(launch(k_stage, 1, 64, 64 * 16, &a), -1);
	assert_non_null(strstr(err, "aligned"));
	/* past the launch's shared memory */
	a.knob = 64 * 16;
	assert_int_equal(launch(k_stage_outside, 1, 32, 64 * 16, &a), -1);
	assert_non_null(strstr(err, "outside"));
	/* from memory that is not the driver's */
	a.knob = 0;
	a.src = (const char *)out;
	assert_int_equal(launch(k_stage_outside, 1, 32, 64 * 16, &a), -1);
	assert_non_null(strstr(err, "not device memory"));
	simt_check_global = NULL;
}

/*
 * Shared-memory loads (simt_smem_load): lane l of each warp declares a load of knob / 100
 * bytes at word (l * (knob % 100)) of its warp's region (knob % 100: the lanes' stride in
 * 4-byte words), then every thread meets at a barrier.  knob 999: only even lanes load;
 * 998: lane l loads l % 2 + 1 times at one place (a loop of two trips for odd lanes), then
 * once at another, 32 words apart each time (32-way conflicts where all lanes take part).
 * 997 and 996: one 4-byte load at each of 64 (65) places, in a row of its own and a bank that
 * depends on lane and place, the odd lanes visiting the places in the reverse order (the emulator takes 64 places between two
 * meetings of a warp, and fails the launch beyond).
 */
static const char site_a, site_b, sites[65];

static void k_smem(const void *p)
{
	const struct args *a = p;
	unsigned int lane = TID % 32, n = a->knob / 100, stride = a->knob % 100;

	if (a->knob == 999) {
		if (lane % 2 == 0)
			simt_smem_load(simt_dyn_smem + 4 * lane, 4, &site_a);
	} else if (a->knob == 998) {
		for (unsigned int i = 0; i <= lane % 2; i++)
			simt_smem_load(simt_dyn_smem + 128 * lane, 4, &site_a);
		simt_smem_load(simt_dyn_smem + 128 * lane, 4, &site_b);
	} else if (a->knob == 997 || a->knob == 996) {
		unsigned int places = a->knob == 997 ? 64 : 65;

		for (unsigned int i = 0; i < places; i++) {
			unsigned int at = lane % 2 ? places - 1 - i : i;

			/* bank (lane + at) % 32: conflict-free unless places are mispaired */
			simt_smem_load(simt_dyn_smem + 4 * ((lane + at) % 32 + 32 * at), 4,
				       &sites[at]);
		}
	} else {
		simt_smem_load(simt_dyn_smem + 4 * stride * lane, n, &site_a);
	}
	simt_syncthreads();
}

/* the requests, wavefronts, fewest wavefronts and unpaired loads of one launch */
static void smem_counts(unsigned int knob, unsigned int threads, uint64_t want[4])
{
	uint64_t r = simt_smem_requests, w = simt_smem_wavefronts, i = simt_smem_ideal,
		 u = simt_smem_unpaired;
	struct args a = {NULL, NULL, knob};

	assert_int_equal(launch(k_smem, 1, threads, 48 << 10, &a), 0);
	assert_int_equal(simt_smem_requests - r, want[0]);
	assert_int_equal(simt_smem_wavefronts - w, want[1]);
	assert_int_equal(simt_smem_ideal - i, want[2]);
	assert_int_equal(simt_smem_unpaired - u, want[3]);
}

static void test_smem_banks(void **state)
{
	struct args a = {NULL, NULL, 0};

	(void)state;
	/* 4 bytes, consecutive words: 32 banks once; per warp of 64 threads */
	smem_counts(401, 64, (uint64_t[4]){2, 2, 2, 0});
	/* the same word for all: a broadcast */
	smem_counts(400, 32, (uint64_t[4]){1, 1, 1, 0});
	/* 2 words apart: 2-way; 32 apart: every lane in bank 0, 32-way */
	smem_counts(402, 32, (uint64_t[4]){1, 2, 1, 0});
	smem_counts(432, 32, (uint64_t[4]){1, 32, 1, 0});
	/* 2-byte loads of adjacent halves share words: 16 words, one wavefront */
	smem_counts(200, 32, (uint64_t[4]){1, 1, 1, 0});
	/* 16 bytes, consecutive: four phases of 8 lanes, each 128 bytes, conflict-free */
	smem_counts(1604, 32, (uint64_t[4]){1, 4, 4, 0});
	/* 16 bytes 32 bytes apart: each phase spans 256 bytes, 2-way */
	smem_counts(1608, 32, (uint64_t[4]){1, 8, 4, 0});
	/* 8 bytes consecutive: two phases of 16 lanes */
	smem_counts(802, 32, (uint64_t[4]){1, 2, 2, 0});
	/* only even lanes load: one instruction with 16 lanes active, 16 words, 1 wavefront */
	smem_counts(999, 32, (uint64_t[4]){1, 1, 1, 0});
	/*
	 * loops of different trips: the first trip of all 32 lanes (32-way), the second of the
	 * odd ones (16-way), then the other place's load of all 32 (32-way), not its first
	 * lanes' second trip paired with the others' next load
	 */
	smem_counts(998, 32, (uint64_t[4]){3, 80, 3, 0});
	/* 64 places, visited in two orders: one conflict-free instruction each; 65: a failure */
	smem_counts(997, 32, (uint64_t[4]){64, 64, 64, 0});
	a.knob = 996;
	assert_int_equal(launch(k_smem, 1, 32, 48 << 10, &a), -1);
	assert_non_null(strstr(err, "more than 64 shared-memory load sites"));
	/* misaligned, outside the launch's shared memory, a size no load has */
	a.knob = 403; /* 4 bytes at 12 l: aligned */
	assert_int_equal(launch(k_smem, 1, 32, 48 << 10, &a), 0);
	a.knob = 801; /* 8 bytes at 4 l: lane 1 misaligned */
	assert_int_equal(launch(k_smem, 1, 32, 48 << 10, &a), -1);
	assert_non_null(strstr(err, "aligned"));
	a.knob = 499; /* 4 bytes at 396 l: past 4 KiB for lane 11 */
	assert_int_equal(launch(k_smem, 1, 32, 4 << 10, &a), -1);
	assert_non_null(strstr(err, "outside"));
	a.knob = 300;
	assert_int_equal(launch(k_smem, 1, 32, 48 << 10, &a), -1);
	assert_non_null(strstr(err, "3 bytes"));
}

/* ---- launches and schedules ------------------------------------------------------------------ */

static unsigned int order_next;

/* the order the warps ran in */
static void k_order(const void *p)
{
	const struct args *a = p;

	if (LANE == 0)
		a->out[simt_block_idx.x * NWARPS + WARP] = (float)order_next++;
}

static void test_seed_and_dims(void **state)
{
	float o1[32], o2[32], o3[32];
	struct args a = {o1, NULL, 0};
	struct simt_kernel k = {"k", k_sum, sizeof(a), SIMT_MAX_THREADS};

	(void)state;
	simt_seed(42);
	order_next = 0;
	assert_int_equal(launch(k_order, 4, 256, 0, &a), 0);
	a.out = o2;
	simt_seed(42);
	order_next = 0;
	assert_int_equal(launch(k_order, 4, 256, 0, &a), 0);
	assert_memory_equal(o1, o2, sizeof(o1));
	/* another seed, another order of the warps (8 warps a block: 4 orders agreeing is 1e-18) */
	a.out = o3;
	simt_seed(43);
	order_next = 0;
	assert_int_equal(launch(k_order, 4, 256, 0, &a), 0);
	assert_memory_not_equal(o1, o3, sizeof(o1));

	/* the emulator's own limits */
	assert_int_equal(simt_launch(&k, (struct simt_dim3){1, 1, 1},
				     (struct simt_dim3){2048, 1, 1}, 0, &a, err, sizeof(err)),
			 -1);
	assert_int_equal(simt_launch(&k, (struct simt_dim3){0, 1, 1}, (struct simt_dim3){32, 1, 1},
				     0, &a, err, sizeof(err)),
			 -1);
	assert_int_equal(simt_launch(&k, (struct simt_dim3){1, 1, 1}, (struct simt_dim3){32, 1, 1},
				     SIMT_DYN_SMEM_MAX + 1, &a, err, sizeof(err)),
			 -1);
	assert_non_null(strstr(err, "bad launch"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_correct_kernel),
		cmocka_unit_test(test_missing_barrier_caught),
		cmocka_unit_test(test_exited_threads_do_not_block),
		cmocka_unit_test(test_lockstep_assumption_caught),
		cmocka_unit_test(test_shuffle_errors),
		cmocka_unit_test(test_warp_gather),
		cmocka_unit_test(test_cp_async),
		cmocka_unit_test(test_smem_banks),
		cmocka_unit_test(test_seed_and_dims),
	};

	return cmocka_run_group_tests_name("simt", tests, NULL, NULL);
}
