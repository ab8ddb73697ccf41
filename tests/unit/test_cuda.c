// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_cuda.c - unit tests for the CUDA kernels (kernels/cuda/), the cuda backend
 * (kvmm/backend/cuda.c) and libkvmm's mapping of its chunks (runtime/cuda_map.c).
 *
 * Everywhere (no GPU needed): the embedded fatbin is there, aligned and well formed; the driver
 * loader fails with -ENODEV and a reason in words when libcuda is missing, and, when the
 * toolkit's stub libcuda is installed, resolves every entry point from it (so a misspelt or
 * wrongly versioned symbol name fails here, not on the first GPU machine) before cuInit says
 * "stub"; every call checks its host-side arguments before touching the driver.  Each of
 * those runs in a child process, since the driver state is process-wide.
 *
 * With a GPU (device $KVMM_CUDA_DEVICE, default 0): every kernel against the CPU kernels of
 * kernels/cpu on random inputs (attention within a relative 1e-4 of the CPU result,
 * reshape_and_cache and copy_pages bit for bit), the backend round trip (staging copies in and
 * out, copy, scrub) and the chunk fds exported by the backend, imported and mapped in a freshly
 * exec'd process (CUDA does not survive fork) that checks the pattern and writes back.  Without
 * a GPU these cases are skipped and say why.  Built as test_cuda_simt (KVMM_TEST_SIMT), the
 * "GPU" is the fake driver's SIMT emulator (tests/fakecuda/simt.h): the GPU cases run on every
 * machine, plus test_simt_driver (the fake's refusals in SIMT mode, a faulting kernel).
 *
 * Seeds: the random shapes and inputs are fresh every run (each test reseeded from the run's
 * seed and its place in the list); the seed is printed first, KVMM_TEST_SEED=<n> repeats it.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#ifdef KVMM_TEST_SIMT
#include <dlfcn.h>

#include "tests/fakecuda/fakecuda.h"
#endif

#include "kernels/cuda/abi.h"
#include "kernels/cuda/cuda_drv.h"
#include "kernels/cuda/fatbin.h"
#include "kernels/cuda/kvmm_cuda.h"
#include "kvmm/backend/cuda.h"
#include "runtime/kvmm.h"

#define STUB_LIBCUDA "/usr/local/cuda/lib64/stubs/libcuda.so"
/* random prefill shapes a run checks (one-off: more, by -DKVMM_PREFILL_RANDOM=N) */
#ifndef KVMM_PREFILL_RANDOM
#define KVMM_PREFILL_RANDOM 6
#endif
/* the same for the tensor-core prefill's shapes */
#ifndef KVMM_PREFILL_TC_RANDOM
#define KVMM_PREFILL_TC_RANDOM 4
#endif
/* and for the decode forced onto the tensor cores (kvmm_cuda_decode_tc 2) */
#ifndef KVMM_DECODE_TC_RANDOM
#define KVMM_DECODE_TC_RANDOM 4
#endif

static int gpu_state; /* 0 unknown, 1 usable, -1 not */
static char gpu_why[512];
static int device;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t base_seed;
static unsigned int test_no;

/* before each test: its own stream of the run's seed (xorshift must not start at 0) */
static int reseed(void **state)
{
	uint64_t z = base_seed + 0x9e3779b97f4a7c15ull * ++test_no;

	(void)state;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	rng = (z ^ (z >> 31)) | 1;
	return 0;
}

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

static float frand(void)
{
	return (float)rnd(1u << 24) / (float)(1u << 23) - 1.0f;
}

/* ---- without a GPU ---------------------------------------------------------------------- */

static void test_fatbin_embedded(void **state)
{
	unsigned char *copy;

	(void)state;
	assert_true(kvmm_cuda_fatbin_size > 1024);
	assert_int_equal((uintptr_t)kvmm_cuda_fatbin % 64, 0);
	assert_true(kvmm_cuda_fatbin_valid(kvmm_cuda_fatbin, kvmm_cuda_fatbin_size));
	/* the checker is real: a flipped magic, a short buffer, a lying size all fail */
	copy = malloc(kvmm_cuda_fatbin_size);
	assert_non_null(copy);
	memcpy(copy, kvmm_cuda_fatbin, kvmm_cuda_fatbin_size);
	assert_false(kvmm_cuda_fatbin_valid(copy, 15));
	assert_false(kvmm_cuda_fatbin_valid(copy, kvmm_cuda_fatbin_size / 2));
	copy[0] ^= 1;
	assert_false(kvmm_cuda_fatbin_valid(copy, kvmm_cuda_fatbin_size));
	free(copy);
	assert_false(kvmm_cuda_fatbin_valid(NULL, 100));
}

/* Run fn in a child with KVMM_LIBCUDA=lib; the child's exit status is the result. */
static int in_child(const char *lib, int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("KVMM_LIBCUDA", lib, 1);
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int child_missing_driver(void)
{
	char why[256];

	if (kvmm_cuda_init(0) != -ENODEV || !strstr(kvmm_cuda_why(), "no CUDA driver"))
		return 1;
	if (kvmm_cuda_device() != -1)
		return 2;
	if (kvmm_cuda_backend_probe(0, why, sizeof(why)) != -ENODEV || !why[0])
		return 3;
	/* asked again: the same answer, remembered */
	if (kvmm_cuda_init(0) != -ENODEV || kvmm_cuda_drv_load() != NULL || errno != ENODEV)
		return 4;
	return 0;
}

static void test_init_without_driver(void **state)
{
	(void)state;
	assert_int_equal(in_child("/nonexistent/libcuda.so.1", child_missing_driver), 0);
}

static int child_stub_driver(void)
{
	/* every symbol resolves from the stub; only cuInit fails (error 34, "stub") */
	if (kvmm_cuda_init(0) != -ENODEV)
		return 1;
	if (!strstr(kvmm_cuda_why(), "cuInit"))
		return 2;
	if (strstr(kvmm_cuda_why(), "lacks"))
		return 3;
	return 0;
}

static void test_stub_driver_symbols(void **state)
{
	(void)state;
	if (access(STUB_LIBCUDA, R_OK)) {
		print_message("skipped: no stub libcuda at %s\n", STUB_LIBCUDA);
		skip();
	}
	assert_int_equal(in_child(STUB_LIBCUDA, child_stub_driver), 0);
}

static int child_arg_checks(void)
{
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	struct kvmm_kv_pages kv;
	int32_t tbl[1] = {0};
	uint32_t len[1] = {1};
	int64_t slot[1] = {0};
	float x[8];
	char base[1];
	int fds[1] = {3};
	struct kvmm_cuda_map *m;
	uint64_t dp;

	if (kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, 8, KVMM_DTYPE_FP16}, 4096))
		return 1;
	memset(&b, 0, sizeof(b));
	b.kv.base = base;
	b.kv.fmt = &f;
	b.nr_seqs = 1;
	b.num_q_heads = 3; /* not a multiple of kv_heads */
	b.block_tables = tbl;
	b.max_blocks = 1;
	b.ctx_lens = len;
	if (kvmm_cuda_paged_decode(&b, x, x, NULL) != -EINVAL)
		return 2;
	b.num_q_heads = 4;
	if (kvmm_cuda_paged_prefill(&b, 1, x, x, NULL) != -EINVAL) /* no q_lens */
		return 3;
	b.kv.layer = 2;
	if (kvmm_cuda_paged_decode(&b, x, x, NULL) != -EINVAL)
		return 4;
	b.kv.layer = 0;
	/* all good: only now does the missing driver show */
	if (kvmm_cuda_paged_decode(&b, x, x, NULL) != -ENODEV)
		return 5;
	kv = b.kv;
	if (kvmm_cuda_reshape_and_cache(&kv, 1, NULL, x, x, NULL) != -EINVAL)
		return 6;
	if (kvmm_cuda_reshape_and_cache(&kv, 1, slot, x, x, NULL) != -ENODEV)
		return 7;
	if (kvmm_cuda_copy_pages(&f, base, base, tbl, tbl, 1, f.tokens_per_page + 1, NULL) !=
	    -EINVAL)
		return 8;
	if (kvmm_cuda_copy_pages(&f, base, base, tbl, tbl, 0, 0, NULL) != 0) /* nothing to do */
		return 9;
	if (kvmm_cuda_map_fds(0, fds, 0, 4096, &m, &dp) != -EINVAL)
		return 10;
	if (kvmm_cuda_map_fds(0, fds, 1, 4096, &m, &dp) != -ENODEV || !kvmm_cuda_map_why()[0])
		return 11;
	return 0;
}

static void test_arg_checks(void **state)
{
	(void)state;
	assert_int_equal(in_child("/nonexistent/libcuda.so.1", child_arg_checks), 0);
}

/* the FMA kernel's thread layouts and shared memory (attn.cu), for check_plan() */
static void check_fma_layout(const struct kvmm_cuda_decode_args *dp, uint32_t dim, uint32_t elem,
			     uint32_t slots)
{
	const struct kvmm_cuda_decode_args d = *dp;

	/* thread layouts: powers of 2 that cover a row */
	assert_true(d.tile >= 8 && d.tile <= 64 && !(d.tile & (d.tile - 1)));
	assert_int_equal(d.tile * d.tpt, KVMM_CUDA_DECODE_THREADS);
	assert_true(d.lpr <= 32 && !(d.lpr & (d.lpr - 1)) && d.lpr * KVMM_CUDA_DECODE_EPL >= dim);
	/* a chunk's queries an odd number of 16-byte units apart: fp32 4, fp16 12, int8 20 */
	assert_true(d.qstride == d.chunks * ((16 / elem / 4) | 1) * 4 && d.qstride >= dim);
	/* shared rows: 16-byte aligned, padded against bank conflicts, everything inside */
	assert_true(d.row_stride % 16 == 0 && d.row_stride >= d.chunks * 16);
	if (d.tpt < 8)
		assert_true(d.row_stride / 16 % d.tpt == 0 && (d.row_stride / 16 / d.tpt) % 2 == 1);
	assert_int_equal(d.v_soff, d.tile * d.row_stride);
	assert_int_equal(d.ks_soff, 2 * d.tile * d.row_stride);
	assert_true(d.vs_soff == d.ks_soff + d.tile * d.ngroups * 4 &&
		    d.ok_soff == d.vs_soff + d.tile * d.ngroups * 4);
	assert_true(d.ok_soff + 4 * d.tile <= d.stage_bytes && d.stage_bytes % 16 == 0);
	assert_true(2 * d.stage_bytes <= d.q_soff && slots * dim * 4 <= d.q_soff);
	assert_true(d.q_soff % 16 == 0 && d.s_soff % 16 == 0 && d.st_soff % 16 == 0);
	assert_true(d.s_soff >= d.q_soff + slots * d.qstride * 4);
	assert_true(d.st_soff >= d.s_soff + slots * d.tile * 4);
	assert_int_equal(d.smem_bytes, d.st_soff + KVMM_CUDA_DECODE_ST_WORDS * 4);
	assert_true(d.smem_bytes <= KVMM_CUDA_DECODE_SMEM_MAX);
	if (d.tile > 8)
		assert_true(d.smem_bytes <= KVMM_CUDA_DECODE_SMEM_BUDGET);
}

/*
 * The split decode's and prefill's host plans (kernels/cuda/cuda.c) on many formats: every
 * size and offset the kernel relies on (Documentation/kernels/cuda.md, "decode") holds.  The
 * kernel indexes shared memory with these numbers unchecked, so this is its bounds check.
 * max_q 0 plans decode, else prefill of up to max_q new tokens a sequence.
 */
static uint32_t check_plan(uint32_t dt, uint32_t dim, uint32_t gs, uint32_t kvh, uint32_t group,
			   uint64_t page_size, uint64_t base, uint32_t nr_seqs, uint32_t max_blocks,
			   uint32_t resident, uint32_t max_q)
{
	struct kvmm_fmt f;
	struct kvmm_cuda_attn_args a;
	struct kvmm_cuda_decode_args d;
	uint32_t elem = kvmm_dtype_size(dt), layer, slots, smax;
	uint64_t cap, align;
	bool tc;

	if (kvmm_fmt_init(&f, &(struct kvmm_format){3, kvh, dim, dt, gs}, page_size))
		return 0; /* a token larger than the page: not a format */
	layer = rnd(3);
	memset(&a, 0, sizeof(a));
	a.pg.base = base;
	a.pg.page_size = f.page_size;
	a.pg.k_off = (uint64_t)layer * 2 * f.slab_bytes;
	a.pg.v_off = a.pg.k_off + f.slab_bytes;
	if (dt == KVMM_DTYPE_INT8) {
		a.pg.ks_off = a.pg.k_off + f.scale_off;
		a.pg.vs_off = a.pg.v_off + f.scale_off;
	}
	a.pg.row_bytes = f.row_bytes;
	a.pg.scale_row_bytes = f.scale_row_bytes;
	a.pg.kv_heads = kvh;
	a.pg.head_dim = dim;
	a.pg.gs = dt == KVMM_DTYPE_INT8 ? gs : dim;
	a.pg.tokens_per_page = f.tokens_per_page;
	a.nr_seqs = nr_seqs;
	a.num_q_heads = kvh * group;
	a.max_blocks = max_blocks;
	a.scale = 1.0f;
	if (max_q)
		assert_int_equal(kvmm_cuda_prefill_plan(&a, dt, max_q, resident, &d), 0);
	else
		assert_int_equal(kvmm_cuda_decode_plan(&a, dt, resident, &d), 0);

	/*
	 * head_dim a multiple of 16 up to 128, fp16, bf16 or int8 in groups of 16k: prefill on the
	 * tensor cores; decode too when the group is 4 per byte of an element or more
	 */
	tc = dim % 16 == 0 && dim <= KVMM_CUDA_TC_MAX_DIM &&
	     (dt == KVMM_DTYPE_FP16 || dt == KVMM_DTYPE_BF16 ||
	      (dt == KVMM_DTYPE_INT8 && gs % 16 == 0)) &&
	     (max_q ? kvmm_cuda_prefill_tc : kvmm_cuda_decode_tc && group >= 4 * elem);
	assert_int_equal(d.tc, tc);
	smax = !tc ? KVMM_CUDA_DECODE_GMAX : max_q ? KVMM_CUDA_TC_SLOTS : 16;
	/* query heads: all of a group, spread evenly, at most smax per block */
	assert_int_equal(d.group, group);
	assert_true(d.gb >= 1 && d.gb <= smax);
	assert_true(d.gb * d.nqg >= group && (d.nqg - 1) * d.gb < group);
	/* rows: decode one; prefill as many as fill the slots, no more than max_q */
	slots = d.gb * d.rows;
	assert_true(slots <= smax && d.rows >= 1);
	/* (a bound past what the block tables hold is that) */
	cap = (uint64_t)max_blocks * f.tokens_per_page;
	cap = cap > UINT32_MAX ? UINT32_MAX : cap;
	max_q = max_q > cap ? (uint32_t)cap : max_q;
	assert_int_equal(d.max_q, max_q);
	if (!max_q) {
		assert_true(d.rows == 1 && d.row_tiles == 1);
	} else {
		assert_true(d.rows <= max_q);
		/* only a shared-memory squeeze (tile 8 at the hard limit) halves the rows */
		if ((tc || d.tile > 8) && d.rows < max_q)
			assert_true(2 * slots > smax);
		assert_int_equal(d.row_tiles, (max_q + d.rows - 1) / d.rows);
	}
	assert_true(d.sl <= 32 && !(d.sl & (d.sl - 1)) && d.sl >= (d.chunks < 32 ? d.chunks : 32));
	assert_true(d.chunks * 16 >= dim * elem && (d.chunks - 1) * 16 < dim * elem);
	if (tc) {
		/* tiles of TC_TILE tokens; rows padded to a word stride of 4 mod 8 (banks) */
		assert_int_equal(d.tile, KVMM_CUDA_TC_TILE);
		assert_true(d.row_stride > d.chunks * 16 && d.row_stride <= d.chunks * 16 + 32);
		assert_int_equal(d.row_stride / 4 % 8, 4);
		assert_int_equal(d.v_soff, d.tile * d.row_stride);
		assert_int_equal(d.ks_soff, 2 * d.tile * d.row_stride);
		assert_true(d.vs_soff == d.ks_soff + d.tile * d.ngroups * 4 &&
			    d.ok_soff == d.vs_soff + d.tile * d.ngroups * 4);
		assert_true(d.ok_soff + 4 * d.tile <= d.stage_bytes && d.stage_bytes % 16 == 0);
		assert_true(d.st_soff >= 2 * d.stage_bytes && d.st_soff % 8 == 0);
		if (max_q) {
			/* then rows_before()'s words */
			assert_int_equal(d.smem_bytes, d.st_soff + 8 * KVMM_CUDA_DECODE_WARPS);
		} else {
			/* the warps' states after the loop: 16 rows of max, sum and head_dim sums */
			assert_true(d.smem_bytes >= KVMM_CUDA_DECODE_WARPS * 16 * (2 + dim) * 4);
		}
		assert_true(d.smem_bytes <= KVMM_CUDA_DECODE_SMEM_MAX);
	} else {
		check_fma_layout(&d, dim, elem, slots);
	}
	/* the vector path only when every row start is 16-byte aligned */
	align = base | f.page_size | a.pg.k_off | a.pg.v_off | f.row_bytes | (dim * elem);
	if (dt == KVMM_DTYPE_INT8)
		align |= (a.pg.ks_off | a.pg.vs_off | f.scale_row_bytes) & 3;
	assert_int_equal(d.vec, !(align & 15));
	/* int8 scale index: (e * gmagic) >> 16 is e / gs for every element */
	if (dt == KVMM_DTYPE_INT8) {
		assert_int_equal(d.ngroups, dim / gs);
		for (uint32_t e = 0; e < dim; e++)
			assert_int_equal((e * d.gmagic) >> 16, e / gs);
	}
	/* splits: whole tiles, at least two, covering the longest context exactly */
	if (!resident)
		assert_int_equal(d.nsplit, 1);
	if (d.nsplit > 1) {
		assert_true(d.split_tokens % d.tile == 0 && d.split_tokens >= 2 * d.tile);
		assert_true((uint64_t)d.nsplit * d.split_tokens >= cap);
		assert_true((uint64_t)(d.nsplit - 1) * d.split_tokens < cap);
		assert_true((uint64_t)d.nsplit * nr_seqs * kvh * d.nqg * d.row_tiles <=
			    (uint64_t)resident * kvmm_cuda_decode_waves +
				    (uint64_t)nr_seqs * kvh * d.nqg * d.row_tiles);
	}
	return d.nsplit;
}

static void test_decode_plan(void **state)
{
	static const uint32_t dims[] = {128, 64, 256, 80, 96, 72, 100, 17, 1, 32, 160, 250};
	static const uint32_t groups[] = {1, 2, 4, 5, 7, 8, 9, 12, 16, 32, 64, 96};

	(void)state;
	for (int i = 0; i < 3000; i++) {
		uint32_t dt = KVMM_DTYPE_FP32 + rnd(4), dim = dims[rnd(12)], gs = 0;
		uint64_t page = (uint64_t)(1 + rnd(64)) * 4096;
		uint64_t base = UINT64_C(0x7f0000000000);

		if (dt == KVMM_DTYPE_INT8) {
			/* a random divisor of dim */
			do
				gs = 1 + rnd(dim);
			while (dim % gs);
		}
		if (rnd(4) == 0)
			page += 4 * (1 + rnd(3)); /* frames not 16-byte aligned: the byte path */
		if (rnd(8) == 0)
			base += 8;
		kvmm_cuda_prefill_tc = rnd(4) != 0;
		kvmm_cuda_decode_tc = rnd(4) != 0;
		check_plan(dt, dim, gs, 1 + rnd(8), groups[rnd(12)], page, base, 1 + rnd(600),
			   1 + rnd(600), rnd(3) ? 132 * (1 + rnd(8)) : 0,
			   rnd(2) ? 0 : 1 + rnd(rnd(2) ? 8 : 3000));
	}
	kvmm_cuda_prefill_tc = 1;
	kvmm_cuda_decode_tc = 1;
	/* the benchmark's shapes, fp16, 2 MiB pages, 132 SMs x 4 blocks: they split */
	{
		struct kvmm_fmt f;

		assert_int_equal(kvmm_fmt_init(&f,
					       &(struct kvmm_format){4, 8, 128, KVMM_DTYPE_FP16},
					       2u << 20),
				 0);
		assert_true(check_plan(KVMM_DTYPE_FP16, 128, 0, 8, 4, 2u << 20,
				       UINT64_C(0x7f0000000000), 1, 32768 / f.tokens_per_page, 528,
				       0) > 1);
		/* a few new tokens over a long context split too; a long prompt does not */
		assert_true(check_plan(KVMM_DTYPE_FP16, 128, 0, 8, 4, 2u << 20,
				       UINT64_C(0x7f0000000000), 1, 32768 / f.tokens_per_page, 528,
				       4) > 1);
		assert_int_equal(check_plan(KVMM_DTYPE_FP16, 128, 0, 8, 4, 2u << 20,
					    UINT64_C(0x7f0000000000), 1, 32768 / f.tokens_per_page,
					    528, 2048),
				 1);
	}
	/* the plan of a batch, as a launch would start it: its checks, then the same plan */
	{
		struct kvmm_fmt f;
		struct kvmm_attn_batch b;
		struct kvmm_cuda_decode_args d;
		uint32_t ctx = 100, ql = 5;
		int32_t table[8] = {0};

		assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, 64, KVMM_DTYPE_BF16},
					       16 << 10),
				 0);
		memset(&b, 0, sizeof(b));
		assert_int_equal(kvmm_cuda_batch_plan(NULL, 0, &d), -EINVAL);
		assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), -EINVAL); /* no format */
		b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)0x10000, &f, 1, 8};
		b.nr_seqs = 1;
		b.num_q_heads = 6;
		b.max_blocks = 8;
		b.block_tables = table;
		b.ctx_lens = &ctx;
		assert_int_equal(kvmm_cuda_batch_plan(&b, 5, &d), -EINVAL); /* prefill, no q_lens */
		b.q_lens = &ql;
		assert_int_equal(kvmm_cuda_batch_plan(&b, 5, &d), 0);
		/* on the tensor cores: all 5 rows x 3 heads in one block */
		assert_true(d.tc && d.rows == 5 && d.gb == 3 && d.max_q == 5 && d.row_tiles == 1);
		kvmm_cuda_prefill_tc = 0; /* the FMA kernel: 2 rows of 3 heads */
		assert_int_equal(kvmm_cuda_batch_plan(&b, 5, &d), 0);
		assert_true(!d.tc && d.rows == 2 && d.gb == 3 && d.max_q == 5 && d.row_tiles == 3);
		kvmm_cuda_prefill_tc = 1;
		assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), 0);
		assert_true(d.rows == 1 && d.gb == 3 && d.nsplit == 1);
		b.num_q_heads = 5; /* not a multiple of the KV heads */
		assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), -EINVAL);
	}
}

#ifdef KVMM_TEST_SIMT
/*
 * The fake driver in SIMT mode refuses what a GPU's driver refuses (a module image that is not
 * a fatbin, an unknown kernel name, more threads than __launch_bounds__, more than 48 KiB of
 * dynamic shared memory, an empty grid, no argument) and answers occupancy as a 9.0 device
 * would; a kernel that faults (here: decode over pages that are host memory, not device
 * memory, which its cp.async checks) is accepted at launch, as on a GPU, and fails the next
 * synchronisation, after which the context is unusable (every call fails).  In a child: the
 * failure is for the rest of the process.
 */
static int child_simt_driver(void)
{
	static const uint32_t junk[64] = {0x12345678u};
	const struct kvmm_cuda_drv *d;
	struct kvmm_cuda_decode_args a;
	struct kvmm_attn_batch b;
	struct kvmm_fmt f;
	kvmm_cu_module mod;
	kvmm_cu_function fn;
	void *params[] = {&a}, *host, *dtab, *dctx, *dq, *dout, *more;
	int32_t tab[2] = {0, 1};
	uint32_t ctx = 20;
	float q[64] = {1.0f};
	int occ = 0;

	if (kvmm_cuda_init(0))
		return 1;
	d = kvmm_cuda_drv_load();
	if (d->cuModuleLoadData(&mod, junk) != KVMM_CUDA_ERROR_INVALID_VALUE)
		return 2;
	if (d->cuModuleLoadData(&mod, kvmm_cuda_fatbin))
		return 3;
	if (d->cuModuleGetFunction(&fn, mod, "kvmm_no_such_kernel") != 500)
		return 4;
	if (d->cuModuleGetFunction(&fn, mod, "kvmm_decode_fp16"))
		return 5;
	if (d->cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, KVMM_CUDA_DECODE_THREADS,
							   48u << 10) ||
	    occ != 4)
		return 6;
	memset(&a, 0, sizeof(a));
	if (d->cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL) != 701 ||
	    d->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 64u << 10, NULL, params, NULL) !=
		    KVMM_CUDA_ERROR_INVALID_VALUE ||
	    d->cuLaunchKernel(fn, 0, 1, 1, 128, 1, 1, 0, NULL, params, NULL) !=
		    KVMM_CUDA_ERROR_INVALID_VALUE ||
	    d->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) !=
		    KVMM_CUDA_ERROR_INVALID_VALUE)
		return 7;
	if (d->cuModuleUnload(mod) || d->cuModuleUnload(NULL) != 400)
		return 8;

	/* decode over host pages: launched fine, fails at the synchronisation */
	if (kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16}, 4096) ||
	    posix_memalign(&host, 4096, 2 * f.page_size))
		return 9;
	memset(host, 0, 2 * f.page_size);
	if (kvmm_cuda_malloc(&dtab, sizeof(tab)) || kvmm_cuda_memcpy_htod(dtab, tab, sizeof(tab)) ||
	    kvmm_cuda_malloc(&dctx, sizeof(ctx)) ||
	    kvmm_cuda_memcpy_htod(dctx, &ctx, sizeof(ctx)) || kvmm_cuda_malloc(&dq, sizeof(q)) ||
	    kvmm_cuda_memcpy_htod(dq, q, sizeof(q)) || kvmm_cuda_malloc(&dout, sizeof(q)))
		return 10;
	memset(&b, 0, sizeof(b));
	b.kv.base = host;
	b.kv.fmt = &f;
	b.kv.nr_frames = 2;
	b.nr_seqs = 1;
	b.num_q_heads = 1;
	b.block_tables = dtab;
	b.max_blocks = 2;
	b.ctx_lens = dctx;
	if (kvmm_cuda_paged_decode(&b, dq, dout, NULL))
		return 11;
	if (kvmm_cuda_sync() != -EIO || !strstr(kvmm_cuda_why(), "launch failure"))
		return 12;
	if (kvmm_cuda_malloc(&more, 64) != -EIO)
		return 13;
	free(host);
	return 0;
}

static void test_simt_driver(void **state)
{
	(void)state;
	assert_int_equal(in_child(getenv("KVMM_LIBCUDA"), child_simt_driver), 0);
}
#endif

/* ---- with a GPU ------------------------------------------------------------------------- */

static bool need_gpu(void)
{
	if (!gpu_state) {
		const char *e = getenv("KVMM_CUDA_DEVICE");
		int ret;

		device = e ? atoi(e) : 0;
		ret = kvmm_cuda_init(device);
		gpu_state = ret ? -1 : 1;
		snprintf(gpu_why, sizeof(gpu_why), "%s", kvmm_cuda_why());
#ifdef KVMM_TEST_SIMT
		/* the fake driver is always there: failing to start it is a failure */
		if (ret)
			fail_msg("the fake CUDA driver in SIMT mode did not start: %s", gpu_why);
		print_message("GPU cases on the fake driver's SIMT emulator (logic, not speed)\n");
#else
		if (ret)
			print_message("GPU cases skipped: %s\n", gpu_why);
#endif
	}
	return gpu_state == 1;
}

#define NEED_GPU()               \
	do {                     \
		if (!need_gpu()) \
			skip();  \
	} while (0)

/* a device copy of n bytes at h (h NULL: uninitialised device memory) */
static void *dev_from(const void *h, size_t n)
{
	void *d = NULL;

	assert_int_equal(kvmm_cuda_malloc(&d, n ? n : 1), 0);
	if (h && n)
		assert_int_equal(kvmm_cuda_memcpy_htod(d, h, n), 0);
	return d;
}

struct kcase {
	struct kvmm_fmt fmt;
	uint32_t nframes, nr_seqs, max_blocks, num_q_heads;
	char *pages; /* host pool, written by the CPU kernels */
	int32_t *tables;
	uint32_t *ctx, *qlen;
	float *k, *v; /* the new rows of every token of every sequence */
	int64_t *slots;
	uint32_t ntok;
};

static void kcase_make(struct kcase *c, uint32_t dt)
{
	static const uint32_t dims[] = {64, 128, 80, 32};
	uint32_t dim = dims[rnd(4)], kvh = 1 + rnd(3), gs = dt == KVMM_DTYPE_INT8 ? 16 : 0;
	uint32_t tpp, nelem, *perm, t = 0;

	assert_int_equal(kvmm_fmt_init(&c->fmt, &(struct kvmm_format){2, kvh, dim, dt, gs},
				       (uint64_t)(2 + rnd(8)) * 4096),
			 0);
	tpp = c->fmt.tokens_per_page;
	c->num_q_heads = kvh * (1 + rnd(4));
	c->nr_seqs = 1 + rnd(5);
	c->max_blocks = 1 + rnd(6);
	c->nframes = c->nr_seqs * c->max_blocks + 3;
	c->pages = calloc(c->nframes, c->fmt.page_size);
	c->tables = malloc(sizeof(int32_t) * c->nr_seqs * c->max_blocks);
	c->ctx = malloc(sizeof(uint32_t) * c->nr_seqs);
	c->qlen = malloc(sizeof(uint32_t) * c->nr_seqs);
	perm = malloc(sizeof(uint32_t) * c->nframes);
	assert_true(c->pages && c->tables && c->ctx && c->qlen && perm);
	/* shuffled frames for the tables; the last 3 stay spare for copy_pages */
	for (uint32_t i = 0; i < c->nframes; i++)
		perm[i] = i;
	for (uint32_t i = c->nframes - 4; i > 0; i--) {
		uint32_t j = rnd(i + 1), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (uint32_t i = 0; i < c->nr_seqs * c->max_blocks; i++)
		c->tables[i] = (int32_t)perm[i];
	c->ntok = 0;
	for (uint32_t s = 0; s < c->nr_seqs; s++) {
		c->ctx[s] = rnd(c->max_blocks * tpp + 1);
		c->qlen[s] = c->ctx[s] ? 1 + rnd(c->ctx[s]) : 0;
		c->ntok += c->ctx[s];
	}
	nelem = kvh * dim;
	c->k = malloc(sizeof(float) * (c->ntok + 1) * nelem);
	c->v = malloc(sizeof(float) * (c->ntok + 1) * nelem);
	c->slots = malloc(sizeof(int64_t) * (c->ntok + 1));
	assert_true(c->k && c->v && c->slots);
	for (uint64_t i = 0; i < (uint64_t)(c->ntok + 1) * nelem; i++) {
		c->k[i] = frand();
		c->v[i] = frand();
	}
	for (uint32_t s = 0; s < c->nr_seqs; s++)
		for (uint32_t p = 0; p < c->ctx[s]; p++)
			c->slots[t++] = kvmm_kv_slot(
				&c->fmt, c->tables[s * c->max_blocks + p / tpp], p % tpp);
	c->slots[c->ntok] = -1; /* a padding token */
	free(perm);
}

static void kcase_free(struct kcase *c)
{
	free(c->pages);
	free(c->tables);
	free(c->ctx);
	free(c->qlen);
	free(c->k);
	free(c->v);
	free(c->slots);
}

/* within 1e-4 relative, or 1e-4 of scale (the inputs' magnitude) where the result is small */
static void assert_close_s(const float *got, const float *want, size_t n, double scale,
			   const char *what)
{
	for (size_t i = 0; i < n; i++) {
		double tol = 1e-4 * (scale + fabs(want[i]));

		if (!(fabs((double)got[i] - want[i]) <= tol))
			fail_msg("%s: element %zu: GPU %g, CPU %g", what, i, got[i], want[i]);
	}
}

static void assert_close(const float *got, const float *want, size_t n, const char *what)
{
	assert_close_s(got, want, n, 1.0, what);
}

static void check_kernels(uint32_t dt, uint32_t layer)
{
	struct kcase c;
	struct kvmm_kv_pages kv;
	struct kvmm_attn_batch b;
	uint64_t pool, nq_dec, nq_pre = 0;
	char *dpages, *back;
	float *q, *out_cpu, *out_gpu, *dq, *dout;
	uint32_t maxq = 0;

	kcase_make(&c, dt);
	pool = (uint64_t)c.nframes * c.fmt.page_size;
	memset(&kv, 0, sizeof(kv));
	kv.fmt = &c.fmt;
	kv.layer = layer;
	kv.nr_frames = c.nframes;

	/* reshape_and_cache: the same bytes from both */
	kv.base = c.pages;
	assert_int_equal(kvmm_cpu_reshape_and_cache(&kv, c.ntok + 1, c.slots, c.k, c.v), 0);
	dpages = dev_from(NULL, pool);
	assert_int_equal(kvmm_cuda_memset(dpages, 0, pool), 0);
	{
		int64_t *dslots = dev_from(c.slots, sizeof(int64_t) * (c.ntok + 1));
		size_t kb = sizeof(float) * (c.ntok + 1) * c.fmt.kv_heads * c.fmt.head_dim;
		float *dk = dev_from(c.k, kb), *dv = dev_from(c.v, kb);

		kv.base = dpages;
		assert_int_equal(kvmm_cuda_reshape_and_cache(&kv, c.ntok + 1, dslots, dk, dv, NULL),
				 0);
		assert_int_equal(kvmm_cuda_sync(), 0);
		kvmm_cuda_free(dslots);
		kvmm_cuda_free(dk);
		kvmm_cuda_free(dv);
	}
	back = malloc(pool);
	assert_non_null(back);
	assert_int_equal(kvmm_cuda_memcpy_dtoh(back, dpages, pool), 0);
	assert_memory_equal(back, c.pages, pool);

	/* decode and prefill against the CPU on the same pages */
	memset(&b, 0, sizeof(b));
	b.kv = kv;
	b.nr_seqs = c.nr_seqs;
	b.num_q_heads = c.num_q_heads;
	b.max_blocks = c.max_blocks;
	for (uint32_t s = 0; s < c.nr_seqs; s++) {
		nq_pre += c.qlen[s];
		maxq = c.qlen[s] > maxq ? c.qlen[s] : maxq;
	}
	nq_dec = c.nr_seqs;
	{
		uint64_t rows = (nq_pre > nq_dec ? nq_pre : nq_dec) + 1;
		size_t qb = sizeof(float) * rows * c.num_q_heads * c.fmt.head_dim;
		int32_t *dt_ = dev_from(c.tables, sizeof(int32_t) * c.nr_seqs * c.max_blocks);
		uint32_t *dctx = dev_from(c.ctx, sizeof(uint32_t) * c.nr_seqs);
		uint32_t *dql = dev_from(c.qlen, sizeof(uint32_t) * c.nr_seqs);

		q = malloc(qb);
		out_cpu = calloc(1, qb);
		out_gpu = calloc(1, qb);
		assert_true(q && out_cpu && out_gpu);
		for (size_t i = 0; i < qb / sizeof(float); i++)
			q[i] = 2.0f * frand();
		dq = dev_from(q, qb);
		dout = dev_from(out_gpu, qb);

		for (int pre = 0; pre < 2; pre++) {
			size_t n = (pre ? nq_pre : nq_dec) * c.num_q_heads * c.fmt.head_dim;

			b.kv.base = c.pages;
			b.block_tables = c.tables;
			b.ctx_lens = c.ctx;
			b.q_lens = pre ? c.qlen : NULL;
			assert_int_equal(pre ? kvmm_cpu_paged_prefill(&b, q, out_cpu)
					     : kvmm_cpu_paged_decode(&b, q, out_cpu),
					 0);
			b.kv.base = dpages;
			b.block_tables = dt_;
			b.ctx_lens = dctx;
			b.q_lens = pre ? dql : NULL;
			assert_int_equal(pre ? kvmm_cuda_paged_prefill(&b, maxq, dq, dout, NULL)
					     : kvmm_cuda_paged_decode(&b, dq, dout, NULL),
					 0);
			assert_int_equal(kvmm_cuda_sync(), 0);
			assert_int_equal(kvmm_cuda_memcpy_dtoh(out_gpu, dout, n * sizeof(float)),
					 0);
			assert_close(out_gpu, out_cpu, n, pre ? "prefill" : "decode");
		}

		/* copy_pages, whole and partial, into the spare frames */
		for (uint32_t nt = 0; nt < 2; nt++) {
			uint32_t ntokens = nt ? 1 + rnd(c.fmt.tokens_per_page) : 0;
			int32_t src[3], dst[3];
			int32_t *dsrc, *ddst;

			for (int i = 0; i < 3; i++) {
				src[i] = c.tables[rnd(c.nr_seqs * c.max_blocks)];
				dst[i] = (int32_t)(c.nframes - 3 + i);
				/* a destination of the CPU-side pool must not be a source */
				for (uint32_t j = 0; j < c.nr_seqs * c.max_blocks; j++)
					if (c.tables[j] == dst[i])
						fail_msg("test bug: spare frame in a table");
			}
			dsrc = dev_from(src, sizeof(src));
			ddst = dev_from(dst, sizeof(dst));
			assert_int_equal(
				kvmm_cpu_copy_pages(&c.fmt, c.pages, c.pages, dst, src, 3, ntokens),
				0);
			assert_int_equal(kvmm_cuda_copy_pages(&c.fmt, dpages, dpages, ddst, dsrc, 3,
							      ntokens, NULL),
					 0);
			assert_int_equal(kvmm_cuda_sync(), 0);
			assert_int_equal(kvmm_cuda_memcpy_dtoh(back, dpages, pool), 0);
			assert_memory_equal(back, c.pages, pool);
			kvmm_cuda_free(dsrc);
			kvmm_cuda_free(ddst);
		}
		kvmm_cuda_free(dt_);
		kvmm_cuda_free(dctx);
		kvmm_cuda_free(dql);
	}
	kvmm_cuda_free(dq);
	kvmm_cuda_free(dout);
	kvmm_cuda_free(dpages);
	free(q);
	free(out_cpu);
	free(out_gpu);
	free(back);
	kcase_free(&c);
}

static void test_kernels_vs_cpu(void **state)
{
	(void)state;
	NEED_GPU();
	for (int round = 0; round < 6; round++)
		for (uint32_t dt = KVMM_DTYPE_FP32; dt < KVMM_DTYPE_COUNT; dt++)
			check_kernels(dt, (uint32_t)round & 1);
}

/*
 * Decode alone on chosen shapes, against the CPU kernel on the same pages, with the split
 * path forced on (waves 1 and 4: many splits) and off (waves 0: a block per sequence and
 * KV head writes out directly): long single sequences, ragged batches with empty sequences,
 * GQA groups above KVMM_CUDA_DECODE_GMAX (several blocks per KV head), head_dim 256 and
 * dims that make rows unaligned (the byte-wise staging), frames not 16-byte aligned, int8
 * scale groups that do and do not divide a vector.  Then a bad block table (an absent and a
 * too large frame) must neither fault nor produce anything but finite numbers.
 */
#ifdef KVMM_TEST_SIMT
static unsigned int checked_once; /* decodes and prefills whose staged bytes were checked */
/* prefill: the bytes staged, and what one warp per query row and head would have read */
static uint64_t prefill_staged, prefill_per_row;
/* the kernels' declared shared-memory loads this test: [FMA, tensor cores][loads, wavefronts,
 * conflict-free wavefronts] */
static uint64_t smem_count[2][3];
#endif

struct dshape {
	uint32_t dt, dim, gs, kvh, group;
	uint64_t page;
	uint32_t nr_seqs, max_ctx;
	uint32_t max_new; /* prefill: new tokens a sequence at most (0: its context) */
	float kmul, vmul; /* K and V drawn times these (0: 1); the bound scales with vmul */
	float vadd;	  /* and V shifted by this (a mean far from 0) */
};

#ifdef KVMM_TEST_SIMT
/* what the SIMT emulator's kernels have staged with cp.async so far */
static struct kvmm_fakecuda_stats fake_stats(void)
{
	struct kvmm_fakecuda_stats st;
	void *lib = dlopen(getenv("KVMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	kvmm_fakecuda_stats_fn fn;

	assert_non_null(lib);
	fn = (kvmm_fakecuda_stats_fn)dlsym(lib, KVMM_FAKECUDA_STATS);
	assert_non_null(fn);
	fn(&st);
	dlclose(lib);
	return st;
}

static uint64_t staged_bytes(void)
{
	return fake_stats().staged_bytes;
}
#endif

/* a sequence's new tokens in prefill: the whole prompt, a few, none or any number, <= cap */
static uint32_t pick_qlen(uint32_t ctx, uint32_t cap)
{
	uint32_t n;

	switch (rnd(4)) {
	case 0:
		n = ctx;
		break;
	case 1:
		n = ctx ? 1 + rnd(ctx < 4 ? ctx : 4) : 0;
		break;
	case 2:
		n = 0;
		break;
	default:
		n = rnd(ctx + 1);
		break;
	}
	return cap && n > cap ? cap : n;
}

#ifdef KVMM_TEST_SIMT
/* the plan a launch of b starts from (max_q 0: decode) */
static struct kvmm_cuda_decode_args batch_plan(const struct kvmm_attn_batch *b, uint32_t max_q)
{
	struct kvmm_cuda_decode_args d;

	assert_int_equal(kvmm_cuda_batch_plan(b, max_q, &d), 0);
	return d;
}
#endif

/*
 * Decode (pre false) or prefill on shape sh against the CPU kernel on the same pages, split
 * (waves 1 and 4) and unsplit (waves 0); in SIMT mode the K/V bytes the kernel stages are
 * counted.  Prefill: each sequence's new tokens are pick_qlen()'s, max_q_len is their maximum
 * or a little more, and a second run with max_q_len one less than the maximum must leave the
 * rows past it untouched.  Then a bad table.
 */
static void check_attn(const struct dshape *sh, bool pre)
{
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	uint32_t tpp, max_blocks, nframes, *ctx, *qlen, *perm, nelem, ntok = 0, t = 0, maxq = 0;
	int32_t *tables;
	int64_t *slots;
	char *pages, *dpages;
	float *k, *v, *q, *out_cpu, *out_gpu, *dq, *dout;
	int32_t *dtab;
	uint32_t *dctx, *dql = NULL;
	size_t nq, nrows = 0;
	const float vscale = (sh->vmul ? sh->vmul : 1.0f) + fabsf(sh->vadd);

	assert_int_equal(kvmm_fmt_init(&f,
				       &(struct kvmm_format){2, sh->kvh, sh->dim, sh->dt, sh->gs},
				       sh->page),
			 0);
	tpp = f.tokens_per_page;
	max_blocks = (sh->max_ctx + tpp - 1) / tpp;
	nframes = sh->nr_seqs * max_blocks + 1;
	pages = calloc(nframes, f.page_size);
	tables = malloc(sizeof(int32_t) * sh->nr_seqs * max_blocks);
	ctx = malloc(sizeof(uint32_t) * sh->nr_seqs);
	qlen = malloc(sizeof(uint32_t) * sh->nr_seqs);
	perm = malloc(sizeof(uint32_t) * nframes);
	assert_true(pages && tables && ctx && qlen && perm);
	for (uint32_t i = 0; i < nframes; i++)
		perm[i] = i;
	for (uint32_t i = nframes - 1; i > 0; i--) {
		uint32_t j = rnd(i + 1), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (uint32_t i = 0; i < sh->nr_seqs * max_blocks; i++)
		tables[i] = (int32_t)perm[i];
	for (uint32_t i = 0; i < sh->nr_seqs; i++) {
		/* the first sequence is as long as allowed, one may be empty, the rest ragged */
		ctx[i] = i == 0 ? sh->max_ctx : rnd(sh->max_ctx + 1);
		qlen[i] = pre ? pick_qlen(ctx[i], sh->max_new) : 1;
		ntok += ctx[i];
		nrows += qlen[i];
		maxq = qlen[i] > maxq ? qlen[i] : maxq;
	}
	if (!pre)
		nrows = sh->nr_seqs;
	nelem = sh->kvh * sh->dim;
	k = malloc(sizeof(float) * (ntok + 1) * nelem);
	v = malloc(sizeof(float) * (ntok + 1) * nelem);
	slots = malloc(sizeof(int64_t) * (ntok + 1));
	assert_true(k && v && slots);
	for (uint64_t i = 0; i < (uint64_t)ntok * nelem; i++) {
		k[i] = 2.0f * frand() * (sh->kmul ? sh->kmul : 1.0f);
		v[i] = frand() * vscale + sh->vadd;
	}
	for (uint32_t s = 0; s < sh->nr_seqs; s++)
		for (uint32_t p = 0; p < ctx[s]; p++)
			slots[t++] = kvmm_kv_slot(&f, tables[s * max_blocks + p / tpp], p % tpp);
	memset(&b, 0, sizeof(b));
	b.kv.base = pages;
	b.kv.fmt = &f;
	b.kv.layer = 1;
	b.kv.nr_frames = nframes;
	assert_int_equal(kvmm_cpu_reshape_and_cache(&b.kv, ntok, slots, k, v), 0);

	nq = nrows * sh->kvh * sh->group * sh->dim;
	q = malloc(sizeof(float) * (nq + 1));
	out_cpu = malloc(sizeof(float) * (nq + 1));
	out_gpu = malloc(sizeof(float) * (nq + 1));
	assert_true(q && out_cpu && out_gpu);
	for (size_t i = 0; i < nq; i++)
		q[i] = 2.0f * frand();
	b.nr_seqs = sh->nr_seqs;
	b.num_q_heads = sh->kvh * sh->group;
	b.block_tables = tables;
	b.max_blocks = max_blocks;
	b.ctx_lens = ctx;
	b.q_lens = pre ? qlen : NULL;
	assert_int_equal(pre ? kvmm_cpu_paged_prefill(&b, q, out_cpu)
			     : kvmm_cpu_paged_decode(&b, q, out_cpu),
			 0);

	dpages = dev_from(pages, (size_t)nframes * f.page_size);
	dtab = dev_from(tables, sizeof(int32_t) * sh->nr_seqs * max_blocks);
	dctx = dev_from(ctx, sizeof(uint32_t) * sh->nr_seqs);
	if (pre)
		dql = dev_from(qlen, sizeof(uint32_t) * sh->nr_seqs);
	dq = dev_from(q, sizeof(float) * (nq + 1));
	dout = dev_from(NULL, sizeof(float) * (nq + 1));
	b.kv.base = dpages;
	b.block_tables = dtab;
	b.ctx_lens = dctx;
	b.q_lens = dql;
	for (uint32_t waves = 0; waves <= 4; waves += waves ? 3 : 1) {
		/* prefill: max_q_len the longest, or more (only a bound; 4 waves: far more) */
		uint32_t mq = waves == 4 ? UINT32_MAX : maxq + (rnd(3) ? 0 : 1 + rnd(20));
#ifdef KVMM_TEST_SIMT
		uint64_t staged = staged_bytes();
		struct kvmm_fakecuda_stats st0 = fake_stats(), st1;
#endif

		kvmm_cuda_decode_waves = waves;
		assert_int_equal(kvmm_cuda_memset(dout, 0xff, sizeof(float) * nq), 0); /* NaNs */
		assert_int_equal(pre ? kvmm_cuda_paged_prefill(&b, mq, dq, dout, NULL)
				     : kvmm_cuda_paged_decode(&b, dq, dout, NULL),
				 0);
		assert_int_equal(kvmm_cuda_sync(), 0);
#ifdef KVMM_TEST_SIMT
		/*
		 * Bandwidth, as far as it can be seen without a GPU: with one block per KV head
		 * (GQA groups up to KVMM_CUDA_DECODE_GMAX, on the tensor cores up to
		 * KVMM_CUDA_TC_SLOTS) and 16-byte aligned rows (cp.async: the plan's vec),
		 * decode reads every K and V row (and scale) of the layer exactly once, split or
		 * not: no row twice, none skipped.  Prefill's block reads the tokens its last row
		 * sees, once, for all its rows and query heads.
		 */
		struct kvmm_cuda_decode_args pd = batch_plan(&b, pre ? mq : 0);

		/*
		 * Shared-memory banks: the tensor-core kernels' fragment loads are conflict-free
		 * by design (rows an odd number of 16-byte units apart) and are made by all lanes
		 * together (mma.sync); the FMA kernels' loads are counted and reported.
		 */
		st1 = fake_stats();
		if (pd.tc &&
		    (st1.smem_wavefronts - st0.smem_wavefronts != st1.smem_ideal - st0.smem_ideal ||
		     st1.smem_unpaired != st0.smem_unpaired))
			fail_msg(
				"%s on the tensor cores (%s, dim %u, group %u): %llu shared-memory "
				"wavefronts where %llu would do, %llu loads not made together",
				pre ? "prefill" : "decode", kvmm_dtype_name(sh->dt), sh->dim,
				sh->group,
				(unsigned long long)(st1.smem_wavefronts - st0.smem_wavefronts),
				(unsigned long long)(st1.smem_ideal - st0.smem_ideal),
				(unsigned long long)(st1.smem_unpaired - st0.smem_unpaired));
		smem_count[pd.tc][0] += st1.smem_requests - st0.smem_requests;
		smem_count[pd.tc][1] += st1.smem_wavefronts - st0.smem_wavefronts;
		smem_count[pd.tc][2] += st1.smem_ideal - st0.smem_ideal;
		if (pd.nqg == 1 && pd.vec) {
			uint64_t seen = ntok, per_row = 0, want;

			if (pre) {
				uint32_t rows = pd.rows;

				seen = 0;
				for (uint32_t i = 0; i < sh->nr_seqs; i++) {
					uint32_t first = ctx[i] - qlen[i];

					for (uint32_t r0 = 0; r0 < qlen[i]; r0 += rows)
						seen += first +
							(qlen[i] - r0 < rows ? qlen[i] : r0 + rows);
					for (uint32_t r = 0; r < qlen[i]; r++)
						per_row += first + r + 1;
				}
			}
			want = seen * 2 * (f.row_bytes + f.scale_row_bytes);
			if (staged_bytes() - staged != want)
				fail_msg("%s (%s, dim %u, group %u, waves %u) staged %llu bytes, "
					 "want %llu",
					 pre ? "prefill" : "decode", kvmm_dtype_name(sh->dt),
					 sh->dim, sh->group, waves,
					 (unsigned long long)(staged_bytes() - staged),
					 (unsigned long long)want);
			if (pre) {
				prefill_staged += want;
				prefill_per_row +=
					per_row * 2 * (f.row_bytes + f.scale_row_bytes) * sh->group;
			}
			checked_once++;
		}
#endif
		assert_int_equal(kvmm_cuda_memcpy_dtoh(out_gpu, dout, sizeof(float) * nq), 0);
		assert_close_s(out_gpu, out_cpu, nq, vscale,
			       waves ? (pre ? "prefill (split)" : "decode (split)")
				     : (pre ? "prefill (unsplit)" : "decode (unsplit)"));
	}

	/* prefill with max_q_len below the longest: the rows past it are left as they were */
	if (pre && maxq >= 2) {
		size_t row = 0, hd = (size_t)b.num_q_heads * sh->dim;

		assert_int_equal(kvmm_cuda_memset(dout, 0xff, sizeof(float) * nq), 0);
		assert_int_equal(kvmm_cuda_paged_prefill(&b, maxq - 1, dq, dout, NULL), 0);
		assert_int_equal(kvmm_cuda_sync(), 0);
		assert_int_equal(kvmm_cuda_memcpy_dtoh(out_gpu, dout, sizeof(float) * nq), 0);
		for (uint32_t i = 0; i < sh->nr_seqs; i++) {
			for (uint32_t r = 0; r < qlen[i]; r++, row++) {
				const float *g = out_gpu + row * hd;

				if (r < maxq - 1) {
					assert_close_s(g, out_cpu + row * hd, hd, vscale,
						       "prefill (max_q)");
					continue;
				}
				for (size_t e = 0; e < hd; e++)
					if (!isnan(g[e]))
						fail_msg(
							"prefill wrote row %u of sequence %u, past "
							"max_q_len %u",
							r, i, maxq - 1);
			}
		}
	}

	/* a bad table: absent and out-of-range frames are skipped, nothing faults */
	tables[0] = -1;
	tables[max_blocks > 1 ? 1 : 0] = (int32_t)nframes + 7;
	kvmm_cuda_free(dtab);
	dtab = dev_from(tables, sizeof(int32_t) * sh->nr_seqs * max_blocks);
	b.block_tables = dtab;
	for (uint32_t waves = 0; waves <= 1; waves++) {
		kvmm_cuda_decode_waves = waves;
		assert_int_equal(pre ? kvmm_cuda_paged_prefill(&b, maxq ? maxq : 1, dq, dout, NULL)
				     : kvmm_cuda_paged_decode(&b, dq, dout, NULL),
				 0);
		assert_int_equal(kvmm_cuda_sync(), 0);
		assert_int_equal(kvmm_cuda_memcpy_dtoh(out_gpu, dout, sizeof(float) * nq), 0);
		for (size_t i = 0; i < nq; i++)
			if (!isfinite(out_gpu[i]))
				fail_msg("bad table: element %zu is %g", i, out_gpu[i]);
	}
	kvmm_cuda_decode_waves = 1;

	kvmm_cuda_free(dpages);
	kvmm_cuda_free(dtab);
	kvmm_cuda_free(dctx);
	kvmm_cuda_free(dql);
	kvmm_cuda_free(dq);
	kvmm_cuda_free(dout);
	free(pages);
	free(tables);
	free(ctx);
	free(qlen);
	free(perm);
	free(k);
	free(v);
	free(slots);
	free(q);
	free(out_cpu);
	free(out_gpu);
}

static void test_decode_split_vs_cpu(void **state)
{
	static const struct dshape shapes[] = {
		/* dt, dim, gs, kvh, group, page, seqs, max ctx */
		{KVMM_DTYPE_FP16, 128, 0, 2, 4, 64 << 10, 1, 5000},	 /* one long sequence */
		{KVMM_DTYPE_BF16, 128, 0, 2, 8, 16 << 10, 6, 1500},	 /* ragged, tpp 16 */
		{KVMM_DTYPE_FP32, 256, 0, 1, 5, 64 << 10, 3, 2100},	 /* 2 V vectors a lane */
		{KVMM_DTYPE_INT8, 128, 32, 2, 4, 32 << 10, 4, 3000},	 /* scale per vector */
		{KVMM_DTYPE_INT8, 64, 4, 1, 3, 8192, 3, 700},		 /* scales per element */
		{KVMM_DTYPE_FP16, 64, 0, 1, 12, 24 << 10, 2, 2000},	 /* 2 blocks per KV head */
		{KVMM_DTYPE_FP32, 80, 0, 3, 32, 40 << 10, 2, 900},	 /* MQA-like: 4 per head */
		{KVMM_DTYPE_FP16, 100, 0, 2, 2, 32 << 10, 3, 1000},	 /* unaligned rows */
		{KVMM_DTYPE_INT8, 72, 8, 2, 2, 16 << 10, 2, 800},	 /* unaligned int8 rows */
		{KVMM_DTYPE_BF16, 128, 0, 2, 2, (16 << 10) + 8, 3, 600}, /* unaligned frames */
		{KVMM_DTYPE_FP32, 17, 0, 1, 1, 4096, 2, 300},		 /* tiny odd rows */
		{KVMM_DTYPE_FP16, 128, 0, 4, 1, 2 << 20, 40, 300},	 /* a batch, 1 page each */
	};

	(void)state;
	NEED_GPU();
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_attn(&shapes[i], false);
#ifdef KVMM_TEST_SIMT
	/* most of the shapes have aligned rows and groups up to GMAX: their reads were counted */
	print_message("decodes whose reads were counted: %u\n", checked_once);
	assert_true(checked_once >= 15);
	{
		/*
		 * The FMA kernel without bank conflicts: small head dims, where the sums read
		 * fewer than 8 16-byte chunks of a V row at a time (decode_layout()'s vk puts a
		 * bank phase's rows in distinct banks; consecutive rows of the scores' padded
		 * stride would not), and int8 and fp16 rows, whose chunks' queries would share
		 * banks without the padding of dec_shape::qcs
		 */
		static const struct dshape small[] = {
			{KVMM_DTYPE_FP16, 32, 0, 2, 2, 16 << 10, 2, 300},
			{KVMM_DTYPE_INT8, 64, 32, 1, 3, 16 << 10, 2, 300},
			{KVMM_DTYPE_FP32, 16, 0, 2, 4, 16 << 10, 2, 300},
			{KVMM_DTYPE_BF16, 32, 0, 1, 1, 8192, 3, 200},
			{KVMM_DTYPE_INT8, 128, 16, 2, 4, 32 << 10, 2, 400}, /* 32-token tiles */
			{KVMM_DTYPE_FP16, 128, 0, 1, 4, 64 << 10, 1, 500},
		};
		uint64_t wf = smem_count[0][1], ideal = smem_count[0][2];

		kvmm_cuda_decode_tc = 0; /* (int8 GQA 4 would run on the tensor cores) */
		for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++)
			check_attn(&small[i], false);
		kvmm_cuda_decode_tc = 1;
		if (getenv("KVMM_FAKECUDA_BANKS") && !strcmp(getenv("KVMM_FAKECUDA_BANKS"), "0")) {
			print_message("bank conflicts not counted (KVMM_FAKECUDA_BANKS=0)\n");
			return;
		}
		assert_true(smem_count[0][2] > ideal);
		if (smem_count[0][1] - wf != smem_count[0][2] - ideal)
			fail_msg("FMA kernels: %llu shared-memory wavefronts where %llu would "
				 "do",
				 (unsigned long long)(smem_count[0][1] - wf),
				 (unsigned long long)(smem_count[0][2] - ideal));
	}
#endif
}

/*
 * Prefill on chosen shapes, as check_attn() runs it: the slots of a block are rows x query
 * heads (MHA: 8 rows; GQA 3: 2 rows of 3; GQA 12: one row, two blocks per KV head), so the
 * shapes cover each way of filling them, a few new tokens over a long context (which splits),
 * whole prompts over several row tiles, unaligned rows and frames, int8 scale groups, and
 * sequences with no new token.
 */
static void test_prefill_vs_cpu(void **state)
{
	static const struct dshape shapes[] = {
		/* dt, dim, gs, kvh, group, page, seqs, max ctx, max new */
		{KVMM_DTYPE_FP16, 128, 0, 2, 4, 64 << 10, 1, 5000, 6}, /* few over long: split */
		{KVMM_DTYPE_BF16, 128, 0, 2, 8, 16 << 10, 4, 300, 0},  /* GQA 8: 1 row */
		{KVMM_DTYPE_FP32, 64, 0, 2, 1, 16 << 10, 3, 200, 0},   /* MHA: 8 rows */
		{KVMM_DTYPE_FP16, 96, 0, 1, 3, 24 << 10, 3, 250, 0},   /* 2 rows of 3 */
		{KVMM_DTYPE_INT8, 128, 32, 2, 4, 32 << 10, 3, 300, 0}, /* scale per vector */
		{KVMM_DTYPE_INT8, 64, 4, 1, 2, 8192, 3, 200, 0},       /* scales per element */
		{KVMM_DTYPE_FP16, 64, 0, 1, 12, 24 << 10, 2, 200, 0},  /* 2 blocks per KV head */
		{KVMM_DTYPE_FP16, 100, 0, 2, 2, 32 << 10, 3, 200, 0},  /* unaligned rows */
		{KVMM_DTYPE_BF16, 128, 0, 2, 1, (16 << 10) + 8, 2, 150, 0}, /* unaligned frames */
		{KVMM_DTYPE_FP32, 256, 0, 1, 2, 64 << 10, 2, 150, 0},	    /* head_dim 256 */
		{KVMM_DTYPE_FP16, 128, 0, 4, 1, 2 << 20, 12, 200, 0},	    /* a batch */
	};

	(void)state;
	NEED_GPU();
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_attn(&shapes[i], true);
#ifdef KVMM_TEST_SIMT
	/* K/V reuse: a block's rows and heads share each staged byte */
	print_message("prefill staged %llu bytes of K/V; a warp per query row and head would read "
		      "%llu (%.1fx)\n",
		      (unsigned long long)prefill_staged, (unsigned long long)prefill_per_row,
		      prefill_staged ? (double)prefill_per_row / (double)prefill_staged : 0.0);
	assert_true(prefill_staged > 0 && prefill_per_row > 2 * prefill_staged);
#endif
}

/*
 * Decode (or prefill) on random shapes, each as test_decode_split_vs_cpu's (split and unsplit,
 * then a bad table): any dtype, head_dim 1 to 256, int8 groups that divide it, 1 to 4 KV
 * heads, GQA groups of 1 to 20, page sizes from 4 KiB to 2 MiB (some not 16-byte multiples),
 * 1 to 6 sequences of up to 2500 tokens; prefill, whose cost on the emulator grows with the
 * square of the new tokens, 1 to 3 sequences of up to 400 tokens, a third of them whole
 * prompts, the others up to 16 new tokens.  The chosen shapes cover the plans' cases by
 * design; these cover what nobody thought of (test_decode_plan checks 3000 random plans'
 * invariants, this runs a sample of them).
 */
static void random_attn(bool pre, unsigned int n)
{
	static const uint64_t pages[] = {4096,	   8192 + 8, 16 << 10, 24 << 10,
					 40 << 10, 64 << 10, 2 << 20};
	unsigned int done = 0;

	while (done < n) {
		struct dshape sh = {0};
		struct kvmm_fmt f;
		uint32_t gs_try;

		sh.dt = KVMM_DTYPE_FP32 + rnd(KVMM_DTYPE_COUNT - KVMM_DTYPE_FP32);
		sh.dim = 1 + rnd(256);
		sh.gs = 0;
		if (sh.dt == KVMM_DTYPE_INT8) {
			/* a divisor of dim, small or large */
			gs_try = 1 + rnd(sh.dim < 64 ? sh.dim : 64);
			while (sh.dim % gs_try)
				gs_try--;
			sh.gs = gs_try;
		}
		sh.kvh = 1 + rnd(4);
		sh.group = 1 + rnd(20);
		sh.page = pages[rnd(sizeof(pages) / sizeof(pages[0]))];
		sh.nr_seqs = 1 + rnd(pre ? 3 : 6);
		sh.max_ctx = 1 + rnd(pre ? 400 : 2500);
		sh.max_new = pre && rnd(3) ? 1 + rnd(16) : 0;
		if (kvmm_fmt_init(&f, &(struct kvmm_format){2, sh.kvh, sh.dim, sh.dt, sh.gs},
				  sh.page))
			continue; /* no token fits the page: draw again */
		if ((uint64_t)sh.nr_seqs * (sh.max_ctx / f.tokens_per_page + 2) * f.page_size >
		    (UINT64_C(256) << 20))
			continue; /* keep the pool small */
#ifdef KVMM_TEST_SIMT
		/*
		 * The emulator runs every thread of every block on the CPU: the largest draws
		 * (80 query heads x 256 dims x 400 tokens x 3 sequences) took it past the test's
		 * 600 s limit (seed 22631979184660).  Keep the work to a tenth of that tail.
		 */
		if ((uint64_t)sh.kvh * sh.group * sh.dim * sh.nr_seqs * (sh.max_ctx + sh.max_new) >
		    (UINT64_C(3) << 20))
			continue;
#endif
		check_attn(&sh, pre);
		done++;
	}
}

/*
 * A random shape of the tensor-core formats: fp16, bf16 or int8 (scale groups of whole
 * k-steps), head_dim 16-128, 1-2 KV heads, groups 1-8 mostly and up to 64 (their contexts
 * kept short: many query heads make many blocks), 1-3 sequences, a third with up to 16 new
 * tokens (prefill).  false when no token fits the page drawn.
 */
static bool random_tc_shape(struct dshape *sh)
{
	static const uint64_t pages[] = {4096, 8192 + 8, 16 << 10, 64 << 10, 2 << 20};
	uint32_t group = 1 + rnd(rnd(4) ? 8 : 64);
	struct kvmm_fmt f;

	*sh = (struct dshape){KVMM_DTYPE_FP16 + rnd(3), /* fp16, bf16, int8 */
			      16 * (1 + rnd(8)),
			      0,
			      1 + rnd(2),
			      group,
			      pages[rnd(sizeof(pages) / sizeof(pages[0]))],
			      1 + rnd(3),
			      1 + rnd(group > 8 ? 60 : 250),
			      rnd(3) ? 0 : 1 + rnd(16)};
	if (sh->dt == KVMM_DTYPE_INT8) {
		/* groups of whole k-steps: 16 times a divisor of dim / 16 */
		sh->gs = 1 + rnd(sh->dim / 16);
		while ((sh->dim / 16) % sh->gs)
			sh->gs--;
		sh->gs *= 16;
	}
	return kvmm_fmt_init(&f, &(struct kvmm_format){2, sh->kvh, sh->dim, sh->dt, sh->gs},
			     sh->page) == 0;
}

/* whether decode of @sh's format and group is planned on the tensor cores now */
static bool shape_on_tc(const struct dshape *sh)
{
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	struct kvmm_cuda_decode_args d;
	uint32_t ctx = 1;
	int32_t table[1] = {0};

	assert_int_equal(kvmm_fmt_init(&f,
				       &(struct kvmm_format){2, sh->kvh, sh->dim, sh->dt, sh->gs},
				       sh->page),
			 0);
	memset(&b, 0, sizeof(b));
	b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)0x10000, &f, 1, 1};
	b.nr_seqs = 1;
	b.num_q_heads = sh->kvh * sh->group;
	b.max_blocks = 1;
	b.block_tables = table;
	b.ctx_lens = &ctx;
	assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), 0);
	return d.tc;
}

/*
 * Decode on the tensor cores (attn_tc.cu, tcd_body; the decode shapes above that qualify ran
 * there too): GQA 8 over long contexts (split), 16 query heads (a full fragment), 40 (three
 * blocks of 14), int8 in groups of 16 (GQA 4) and of 48 with unaligned frames, and a batch of
 * 5-token contexts (warps with no token), against the CPU; then two of them on the FMA kernel,
 * and three small groups (1, 2, 3) forced onto the tensor cores (kvmm_cuda_decode_tc 2); and
 * which kernel a decode plan picks with each setting (1: groups of 4 per byte of an element
 * and more).
 */
static void test_decode_tc_vs_cpu(void **state)
{
	static const struct dshape shapes[] = {
		/* dt, dim, gs, kvh, group, page, seqs, max ctx */
		{KVMM_DTYPE_FP16, 128, 0, 2, 8, 64 << 10, 2, 2000}, /* split */
		{KVMM_DTYPE_BF16, 64, 0, 1, 16, 16 << 10, 4, 700},  /* 16 rows */
		{KVMM_DTYPE_FP16, 32, 0, 1, 40, 8192, 2, 300},	    /* 3 blocks */
		{KVMM_DTYPE_INT8, 128, 16, 2, 4, 32 << 10, 2, 800}, /* 8 groups */
		{KVMM_DTYPE_INT8, 48, 48, 1, 6, 8192 + 8, 3, 500},  /* unaligned */
		{KVMM_DTYPE_FP16, 128, 0, 4, 8, 2 << 20, 40, 5},
		/* short */
		{KVMM_DTYPE_FP16, 128, 0, 1, 8, 64 << 10, 2, 1500, 0, 8.0f, 0.0f},   /* peaked */
		{KVMM_DTYPE_INT8, 128, 32, 1, 4, 32 << 10, 2, 1500, 0, 0.0f, 1e-4f}, /* small V */
	};
	static const struct dshape small[] = {
		{KVMM_DTYPE_FP16, 128, 0, 2, 1, 64 << 10, 2, 900}, /* MHA, split */
		{KVMM_DTYPE_BF16, 64, 0, 2, 2, 16 << 10, 3, 400},
		{KVMM_DTYPE_INT8, 48, 16, 1, 3, 8192 + 8, 2, 300}, /* unaligned */
	};
	struct kvmm_cuda_decode_args d;

	(void)state;
	NEED_GPU();
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_attn(&shapes[i], false);
	kvmm_cuda_decode_tc = 0;
	check_attn(&shapes[0], false);
	check_attn(&shapes[3], false);
	/* 2: the tensor cores for small groups too (one row of 16 used: MHA; 3 rows, unaligned) */
	kvmm_cuda_decode_tc = 2;
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		assert_true(shape_on_tc(&small[i]));
		check_attn(&small[i], false);
	}
	/* and random shapes of these formats, every group on the tensor cores */
	for (unsigned int done = 0; done < KVMM_DECODE_TC_RANDOM;) {
		struct dshape sh;

		if (!random_tc_shape(&sh))
			continue;
		assert_true(shape_on_tc(&sh));
		check_attn(&sh, false);
		done++;
	}
	kvmm_cuda_decode_tc = 1;
	{
		struct kvmm_fmt f;
		struct kvmm_attn_batch b;
		uint32_t ctx = 40;
		int32_t table[4] = {0};

		memset(&b, 0, sizeof(b));
		b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)0x10000, &f, 1, 8};
		b.nr_seqs = 1;
		b.max_blocks = 4;
		b.block_tables = table;
		b.ctx_lens = &ctx;
		for (uint32_t dt = KVMM_DTYPE_FP32; dt < KVMM_DTYPE_COUNT; dt++)
			for (uint32_t group = 1; group <= 20; group++) {
				uint32_t gs = dt == KVMM_DTYPE_INT8 ? 32 : 0;

				assert_int_equal(
					kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, 128, dt, gs},
						      64 << 10),
					0);
				b.num_q_heads = 2 * group;
				for (uint32_t on = 0; on <= 2; on++) {
					kvmm_cuda_decode_tc = on;
					assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), 0);
					assert_int_equal(
						d.tc, dt != KVMM_DTYPE_FP32 &&
							      (on == 2 ||
							       (on == 1 &&
								group >= 4 * kvmm_dtype_size(dt))));
				}
			}
		kvmm_cuda_decode_tc = 1;
	}
}

#ifndef KVMM_TEST_SIMT
/*
 * Long contexts on a real GPU only (too slow for the emulator): one 32k-token sequence, V with
 * a mean of 0.5 (errors that drift one way add up instead of cancelling), decode (GQA 8 and
 * int8 GQA 4: the tensor cores; fp16 GQA 4: the FMA kernel) and a few new tokens of prefill,
 * unsplit (waves 0: one block walks all 32k tokens, the longest chain of sums) and split.
 * The tensor cores' additions truncate on some GPUs (the emulator rounds once), so this is
 * where a drift in the kernels' accumulation would show.
 */
static void test_long_context_vs_cpu(void **state)
{
	static const struct dshape shapes[] = {
		/* dt, dim, gs, kvh, group, page, seqs, max ctx, max new, kmul, vmul, vadd */
		{KVMM_DTYPE_FP16, 128, 0, 1, 8, 64 << 10, 1, 32768, 4, 0.0f, 0.5f, 0.5f},
		{KVMM_DTYPE_INT8, 128, 32, 1, 4, 64 << 10, 1, 32768, 4, 0.0f, 0.5f, 0.5f},
		{KVMM_DTYPE_FP16, 128, 0, 1, 4, 64 << 10, 1, 32768, 4, 0.0f, 0.5f, 0.5f},
	};

	const char *simt = getenv("KVMM_FAKECUDA_SIMT");

	(void)state;
	NEED_GPU();
	if (simt && !strcmp(simt, "1")) {
		/* tools/gpu-check --fake runs this binary on the emulator: minutes, not seconds */
		print_message("long contexts: skipped on the fake driver's SIMT emulator\n");
		skip();
	}
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		check_attn(&shapes[i], false);
		check_attn(&shapes[i], true);
	}
}
#endif

static void test_decode_random_vs_cpu(void **state)
{
	(void)state;
	NEED_GPU();
	random_attn(false, 10);
}

/*
 * Prefill on the tensor cores (attn_tc.cu; the shapes above that qualify ran there too):
 * shapes that fill its 64 slots every way - MHA (64 rows over the 4 warps), GQA 3 (21 rows,
 * 63 slots: the last warp partly empty), 64 query heads (one row), 96 (two blocks of 48 per KV
 * head), head_dim 16 to 128, unaligned frames (the byte path), a few new tokens over a long
 * context (split) - then random ones, all against the CPU with the fp32 kernels' bound; and
 * the FMA kernel on the first two with kvmm_cuda_prefill_tc cleared.
 */
static void test_prefill_tc_vs_cpu(void **state)
{
	static const struct dshape shapes[] = {
		/* dt, dim, gs, kvh, group, page, seqs, max ctx, max new */
		{KVMM_DTYPE_FP16, 32, 0, 2, 1, 16 << 10, 2, 300, 0},	   /* MHA: 64 rows */
		{KVMM_DTYPE_BF16, 112, 0, 1, 3, 24 << 10, 2, 200, 0},	   /* 21 rows of 3 */
		{KVMM_DTYPE_FP16, 16, 0, 1, 64, 8192, 2, 120, 0},	   /* 1 row of 64 */
		{KVMM_DTYPE_BF16, 80, 0, 1, 96, 40 << 10, 1, 60, 0},	   /* 2 blocks of 48 */
		{KVMM_DTYPE_FP16, 48, 0, 2, 5, (16 << 10) + 8, 3, 150, 0}, /* unaligned */
		{KVMM_DTYPE_BF16, 128, 0, 1, 4, 64 << 10, 1, 3000, 3},	   /* split */
		{KVMM_DTYPE_INT8, 128, 32, 2, 4, 32 << 10, 2, 200, 0},	   /* 4 scale groups */
		{KVMM_DTYPE_INT8, 48, 16, 1, 6, 8192 + 8, 2, 150, 0},	   /* odd rows, unaligned */
		{KVMM_DTYPE_INT8, 64, 64, 1, 1, 16 << 10, 1, 2000, 2},
		/* 1 group, split */ /* weights far below 1 (peaked scores), and int8 V of small scales */
		{KVMM_DTYPE_FP16, 64, 0, 1, 4, 16 << 10, 2, 600, 0, 8.0f, 0.0f},
		{KVMM_DTYPE_INT8, 64, 32, 1, 4, 16 << 10, 2, 600, 0, 0.0f, 1e-4f},
	};
	struct kvmm_cuda_decode_args d;
	unsigned int done = 0;

	(void)state;
	NEED_GPU();
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_attn(&shapes[i], true);
	while (done < KVMM_PREFILL_TC_RANDOM) {
		struct dshape sh;

		if (!random_tc_shape(&sh))
			continue; /* no token fits the page: draw again */
		check_attn(&sh, true);
		done++;
	}
	/* the same batches on the FMA kernel */
	kvmm_cuda_prefill_tc = 0;
	check_attn(&shapes[0], true);
	check_attn(&shapes[1], true);
	kvmm_cuda_prefill_tc = 1;
	/* which kernel a plan picks */
	{
		struct kvmm_fmt f;
		struct kvmm_attn_batch b;
		uint32_t ctx = 40, ql = 40;
		int32_t table[4] = {0};

		memset(&b, 0, sizeof(b));
		b.kv = (struct kvmm_kv_pages){(void *)(uintptr_t)0x10000, &f, 1, 8};
		b.nr_seqs = 1;
		b.num_q_heads = 4;
		b.max_blocks = 4;
		b.block_tables = table;
		b.ctx_lens = &ctx;
		b.q_lens = &ql;
		/* (KVMM_DTYPE_COUNT: int8 in groups of 8, which are not whole k-steps) */
		for (uint32_t dt = KVMM_DTYPE_FP32; dt <= KVMM_DTYPE_COUNT; dt++)
			for (uint32_t dim = 8; dim <= 256; dim += 8) {
				uint32_t t = dt < KVMM_DTYPE_COUNT ? dt : KVMM_DTYPE_INT8;
				uint32_t gs = t != KVMM_DTYPE_INT8 ? 0
					      : dt == t		   ? 8 * (2 - dim % 16 / 8)
								   : 8;
				bool want = t != KVMM_DTYPE_FP32 && dt != KVMM_DTYPE_COUNT &&
					    dim % 16 == 0 && dim <= KVMM_CUDA_TC_MAX_DIM;

				assert_int_equal(
					kvmm_fmt_init(&f, &(struct kvmm_format){2, 2, dim, t, gs},
						      64 << 10),
					0);
				assert_int_equal(kvmm_cuda_batch_plan(&b, 40, &d), 0);
				assert_int_equal(d.tc, want);
				assert_int_equal(kvmm_cuda_batch_plan(&b, 0, &d), 0);
				assert_int_equal(d.tc, 0); /* decode: GQA 2 is FMA's */
			}
	}
}

static void test_prefill_random_vs_cpu(void **state)
{
	(void)state;
	NEED_GPU();
	random_attn(true, KVMM_PREFILL_RANDOM);
}

#define BE_FRAMES 6
#define BE_PAGE (UINT64_C(2) << 20)

static void fill(unsigned char *p, uint64_t n, unsigned seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
}

static void test_backend_round_trip(void **state)
{
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be = {0};
	uint32_t frames[BE_FRAMES] = {0, 1, 2, 3, 4, 5}, two[2] = {1, 4};
	unsigned char *stage, *want;
	const int *fds;
	uint32_t nr;
	uint64_t cs;

	(void)state;
	NEED_GPU();
	kvmm_cuda_backend_init(&cb, device, 0);
	be.ops = &cb.ops;
	assert_true(kvmm_is_cuda_backend(&be));
	assert_int_equal(be.ops->init(&be, BE_PAGE, BE_FRAMES), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&be, &fds, &nr, &cs), 0);
	assert_true(nr >= 1 && cs % BE_PAGE == 0 && (uint64_t)nr * cs >= BE_FRAMES * BE_PAGE);
	assert_true(kvmm_cuda_backend_base(&be) != 0);
	assert_null(be.ops->frame_addr(&be, 0));

	stage = be.ops->host_alloc(&be, BE_FRAMES * BE_PAGE);
	want = malloc(BE_FRAMES * BE_PAGE);
	assert_true(stage && want);
	fill(want, BE_FRAMES * BE_PAGE, 1);
	memcpy(stage, want, BE_FRAMES * BE_PAGE);
	assert_int_equal(be.ops->copy_from_host(&be, frames, stage, BE_FRAMES), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	/* copy-on-write: frame 1 -> 4; scrub frame 2 */
	assert_int_equal(be.ops->copy(&be, 4, 1, BE_PAGE), 0);
	memcpy(want + 4 * BE_PAGE, want + 1 * BE_PAGE, BE_PAGE);
	assert_int_equal(be.ops->scrub(&be, 2), 0);
	memset(want + 2 * BE_PAGE, 0, BE_PAGE);
	memset(stage, 0xee, BE_FRAMES * BE_PAGE);
	assert_int_equal(be.ops->copy_to_host(&be, stage, frames, BE_FRAMES), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	assert_memory_equal(stage, want, BE_FRAMES * BE_PAGE);
	/* a frame list in any order lands in list order */
	assert_int_equal(be.ops->copy_to_host(&be, stage, two, 2), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	assert_memory_equal(stage, want + 1 * BE_PAGE, BE_PAGE);
	assert_memory_equal(stage + BE_PAGE, want + 4 * BE_PAGE, BE_PAGE);
	/* bad frames are refused */
	assert_int_equal(be.ops->copy(&be, BE_FRAMES, 0, BE_PAGE), -EINVAL);
	assert_int_equal(be.ops->scrub(&be, BE_FRAMES), -EINVAL);
	frames[0] = BE_FRAMES;
	assert_int_equal(be.ops->copy_to_host(&be, stage, frames, 1), -EINVAL);
	be.ops->host_free(&be, stage, BE_FRAMES * BE_PAGE);
	free(want);
	be.ops->fini(&be);
}

/*
 * The importing side runs in a new program image: test_cuda --import-child DEV NR CS FD...
 * It maps the chunks, checks that every frame holds the daemon's pattern, writes a new one
 * into frame 0 and exits 0, or a small number saying what went wrong.
 */
static int import_child(int argc, char **argv)
{
	int dev = atoi(argv[2]), nr = atoi(argv[3]), fds[64];
	uint64_t cs = strtoull(argv[4], NULL, 10), dp;
	struct kvmm_cuda_map *m;
	unsigned char *want, *got;

	if (nr < 1 || nr > 64 || argc != 5 + nr)
		return 10;
	for (int i = 0; i < nr; i++)
		fds[i] = atoi(argv[5 + i]);
	if (kvmm_cuda_map_fds(dev, fds, (uint32_t)nr, cs, &m, &dp)) {
		fprintf(stderr, "import child: %s\n", kvmm_cuda_map_why());
		return 11;
	}
	if (kvmm_cuda_init(dev))
		return 12;
	want = malloc(BE_FRAMES * BE_PAGE);
	got = malloc(BE_FRAMES * BE_PAGE);
	if (!want || !got)
		return 13;
	fill(want, BE_FRAMES * BE_PAGE, 2);
	if (kvmm_cuda_memcpy_dtoh(got, (void *)(uintptr_t)dp, BE_FRAMES * BE_PAGE))
		return 14;
	if (memcmp(got, want, BE_FRAMES * BE_PAGE))
		return 15;
	fill(want, BE_PAGE, 3);
	if (kvmm_cuda_memcpy_htod((void *)(uintptr_t)dp, want, BE_PAGE) || kvmm_cuda_sync())
		return 16;
	kvmm_cuda_fini();
	kvmm_cuda_unmap(m);
	free(want);
	free(got);
	return 0;
}

static void test_export_import(void **state)
{
	struct kvmm_cuda_backend cb;
	struct kvmm_backend_ctx be = {0};
	uint32_t frames[BE_FRAMES] = {0, 1, 2, 3, 4, 5}, f0 = 0;
	unsigned char *stage, *want;
	const int *fds;
	char *args[5 + 64 + 1], num[5 + 64][24];
	uint32_t nr;
	uint64_t cs;
	int status;
	pid_t pid;

	(void)state;
	NEED_GPU();
	kvmm_cuda_backend_init(&cb, device, 0);
	be.ops = &cb.ops;
	assert_int_equal(be.ops->init(&be, BE_PAGE, BE_FRAMES), 0);
	assert_int_equal(kvmm_cuda_backend_chunks(&be, &fds, &nr, &cs), 0);
	assert_true(nr <= 64);
	stage = be.ops->host_alloc(&be, BE_FRAMES * BE_PAGE);
	want = malloc(BE_FRAMES * BE_PAGE);
	assert_true(stage && want);
	fill(stage, BE_FRAMES * BE_PAGE, 2);
	assert_int_equal(be.ops->copy_from_host(&be, frames, stage, BE_FRAMES), 0);
	assert_int_equal(be.ops->sync(&be), 0);

	args[0] = "/proc/self/exe";
	args[1] = "--import-child";
	snprintf(num[2], sizeof(num[2]), "%d", device);
	snprintf(num[3], sizeof(num[3]), "%u", nr);
	snprintf(num[4], sizeof(num[4]), "%llu", (unsigned long long)cs);
	for (uint32_t i = 0; i < nr; i++)
		snprintf(num[5 + i], sizeof(num[5 + i]), "%d", fds[i]);
	for (uint32_t i = 2; i < 5 + nr; i++)
		args[i] = num[i];
	args[5 + nr] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* the fds are close-on-exec in the daemon; the child gets them on purpose */
		for (uint32_t i = 0; i < nr; i++)
			fcntl(fds[i], F_SETFD, 0);
		execv("/proc/self/exe", args);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the child's write is in our frame 0 */
	assert_int_equal(be.ops->copy_to_host(&be, stage, &f0, 1), 0);
	assert_int_equal(be.ops->sync(&be), 0);
	fill(want, BE_PAGE, 3);
	assert_memory_equal(stage, want, BE_PAGE);
	be.ops->host_free(&be, stage, BE_FRAMES * BE_PAGE);
	free(want);
	be.ops->fini(&be);
}

/* after each test: on the emulator, the bank conflicts of the shared-memory loads it made */
static int after_test(void **state)
{
	(void)state;
#ifdef KVMM_TEST_SIMT
	for (int tc = 0; tc < 2; tc++)
		if (smem_count[tc][0])
			print_message("%s kernels: %llu warp-wide shared-memory loads, %.3fx the "
				      "wavefronts of conflict-free ones\n",
				      tc ? "tensor-core" : "FMA",
				      (unsigned long long)smem_count[tc][0],
				      (double)smem_count[tc][1] / (double)smem_count[tc][2]);
	memset(smem_count, 0, sizeof(smem_count));
#endif
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kvmm_cuda_fini();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fatbin_embedded, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_init_without_driver, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_stub_driver_symbols, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_arg_checks, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_decode_plan, reseed, after_test),
#ifdef KVMM_TEST_SIMT
		cmocka_unit_test_setup_teardown(test_simt_driver, reseed, after_test),
#endif
		cmocka_unit_test_setup_teardown(test_kernels_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_decode_split_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_decode_random_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_prefill_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_prefill_random_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_prefill_tc_vs_cpu, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_decode_tc_vs_cpu, reseed, after_test),
#ifndef KVMM_TEST_SIMT
		cmocka_unit_test_setup_teardown(test_long_context_vs_cpu, reseed, after_test),
#endif
		cmocka_unit_test_setup_teardown(test_backend_round_trip, reseed, after_test),
		cmocka_unit_test_setup_teardown(test_export_import, reseed, after_test),
	};

	const char *seed = getenv("KVMM_TEST_SEED");

	if (argc >= 2 && !strcmp(argv[1], "--import-child"))
		return import_child(argc, argv);
	base_seed = seed && *seed ? strtoull(seed, NULL, 0)
				  : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	print_message("test_cuda: seed %llu (KVMM_TEST_SEED to repeat)\n",
		      (unsigned long long)base_seed);
#ifdef KVMM_TEST_SIMT
	{
		/* the fake in SIMT mode, for this process and the children it execs */
		const char *env = getenv("KVMM_FAKECUDA");
		char fake[4096];

		if (!realpath(env && env[0] ? env : "tests/fakecuda/libcuda-fake.so", fake)) {
			fprintf(stderr,
				"fake CUDA driver not found (run from the top of the object "
				"tree, or set KVMM_FAKECUDA)\n");
			return 1;
		}
		setenv("KVMM_LIBCUDA", fake, 1);
		setenv("KVMM_FAKECUDA_SIMT", "1", 1);
#ifdef KVMM_SANITIZE
		/*
		 * the bank count's logging costs a third more time under ASan+UBSan (131 ->
		 * 173 s, 2026-12-03; once 440 s of the 600 allowed): the plain run counts,
		 * test_simt checks the counter here
		 */
		setenv("KVMM_FAKECUDA_BANKS", "0", 1);
#endif
	}
	return cmocka_run_group_tests_name("cuda_simt", tests, NULL, teardown);
#else
	return cmocka_run_group_tests_name("cuda", tests, NULL, teardown);
#endif
}
