// SPDX-License-Identifier: MIT
/*
 * tools/cuda-bench.c - timing of the CUDA kernels beside the device's own copy bandwidth,
 * measured in the same run (run by tools/gpu-check).
 *
 * The baseline is cuMemcpyDtoD of a 1 GiB buffer (bytes read + bytes written per second, the
 * usual figure of a GPU's memory bandwidth).  Each kernel then runs on a pool of 2 MiB frames
 * in a shuffled order (a paged layout, as kvmmd hands out), and its achieved bandwidth is the
 * bytes it must move divided by its time: decode reads every K and V row (and scale) of its
 * sequences' layer once; copy_pages reads and writes whole pages; reshape_and_cache writes the
 * new rows.  The target is decode at >= 80 % of the copy bandwidth.  Times are wall
 * clock around a synchronize, best of several runs after a warm-up.  Without a GPU the program
 * says why and exits 77 (skipped).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/kvmm_cuda.h"

#define RUNS 10

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "cuda-bench: %s: %s (%s)\n", what, strerror(-err), kvmm_cuda_why());
	exit(1);
}

#define CHECK(x)                       \
	do {                           \
		int err_ = (x);        \
		if (err_)              \
			die(#x, err_); \
	} while (0)

static double copy_bw(void)
{
	size_t n = (size_t)1 << 30;
	void *a, *b;
	double best = 1e30;

	CHECK(kvmm_cuda_malloc(&a, n));
	CHECK(kvmm_cuda_malloc(&b, n));
	CHECK(kvmm_cuda_memset(a, 1, n));
	for (int i = 0; i < RUNS; i++) {
		double t;

		CHECK(kvmm_cuda_sync());
		t = now();
		CHECK(kvmm_cuda_memcpy_dtod(b, a, n));
		CHECK(kvmm_cuda_sync());
		t = now() - t;
		best = t < best ? t : best;
	}
	kvmm_cuda_free(a);
	kvmm_cuda_free(b);
	return 2.0 * (double)n / best;
}

static void *dev_from(const void *h, size_t n)
{
	void *d;

	CHECK(kvmm_cuda_malloc(&d, n));
	CHECK(kvmm_cuda_memcpy_htod(d, h, n));
	return d;
}

static void row(const char *name, const char *dt, const char *shape, double sec, double bytes,
		double base)
{
	double bw = bytes / sec;

	printf("%-14s %-5s %-26s %10.1f us %9.1f GB/s %6.1f %%\n", name, dt, shape, sec * 1e6,
	       bw / 1e9, 100.0 * bw / base);
}

/* decode over nseq sequences of ctx tokens each, and copy / cache on the same pool */
static void bench_dtype(uint32_t dt, uint32_t nseq, uint32_t ctx, double base)
{
	const uint32_t layers = 4, kvh = 8, dim = 128, nqh = 32;
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	uint32_t tpp, blocks, nframes, *lens;
	int32_t *table, *perm;
	char *pool;
	float *q, *out;
	double best, bytes;
	char shape[64];

	CHECK(kvmm_fmt_init(&f, layers, kvh, dim, dt, dt == KVMM_DTYPE_INT8 ? 32 : 0,
			    UINT64_C(2) << 20));
	tpp = f.tokens_per_page;
	blocks = (ctx + tpp - 1) / tpp;
	nframes = nseq * blocks;
	CHECK(kvmm_cuda_malloc((void **)&pool, (size_t)nframes * f.page_size));
	/* 0x3c bytes: small finite values in every dtype (and int8 scales) */
	CHECK(kvmm_cuda_memset(pool, 0x3c, (size_t)nframes * f.page_size));
	perm = malloc(sizeof(int32_t) * nframes);
	lens = malloc(sizeof(uint32_t) * nseq);
	if (!perm || !lens)
		die("malloc", -ENOMEM);
	for (uint32_t i = 0; i < nframes; i++)
		perm[i] = (int32_t)i;
	srand(1);
	for (uint32_t i = nframes - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1);
		int32_t x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (uint32_t i = 0; i < nseq; i++)
		lens[i] = ctx;
	table = dev_from(perm, sizeof(int32_t) * nframes);
	lens = dev_from(lens, sizeof(uint32_t) * nseq);
	CHECK(kvmm_cuda_malloc((void **)&q, sizeof(float) * nseq * nqh * dim));
	CHECK(kvmm_cuda_malloc((void **)&out, sizeof(float) * nseq * nqh * dim));
	CHECK(kvmm_cuda_memset(q, 0, sizeof(float) * nseq * nqh * dim));

	memset(&b, 0, sizeof(b));
	b.kv.base = pool;
	b.kv.fmt = &f;
	b.kv.nr_frames = nframes;
	b.nr_seqs = nseq;
	b.num_q_heads = nqh;
	b.block_tables = table;
	b.max_blocks = blocks;
	b.ctx_lens = lens;
	best = 1e30;
	for (int i = 0; i <= RUNS; i++) {
		double t;

		CHECK(kvmm_cuda_sync());
		t = now();
		CHECK(kvmm_cuda_paged_decode(&b, q, out, NULL));
		CHECK(kvmm_cuda_sync());
		t = now() - t;
		if (i) /* the first run is the warm-up */
			best = t < best ? t : best;
	}
	bytes = 2.0 * nseq * ctx * (double)(f.row_bytes + f.scale_row_bytes);
	snprintf(shape, sizeof(shape), "%u seq x %u tok, %u/%u h", nseq, ctx, nqh, kvh);
	row("decode", kvmm_dtype_name(dt), shape, best, bytes, base);

	/* copy_pages: half the pool onto the other half, whole pages */
	best = 1e30;
	for (int i = 0; i <= RUNS; i++) {
		uint32_t half = nframes / 2;
		double t;

		CHECK(kvmm_cuda_sync());
		t = now();
		CHECK(kvmm_cuda_copy_pages(&f, pool, pool, table, table + half, half, 0, NULL));
		CHECK(kvmm_cuda_sync());
		t = now() - t;
		if (i)
			best = t < best ? t : best;
	}
	snprintf(shape, sizeof(shape), "%u pages of 2 MiB", nframes / 2);
	row("copy_pages", kvmm_dtype_name(dt), shape, best,
	    2.0 * (nframes / 2) * (double)(2 * layers * f.slab_bytes), base);

	kvmm_cuda_free(q);
	kvmm_cuda_free(out);
	kvmm_cuda_free(table);
	kvmm_cuda_free(lens);
	kvmm_cuda_free(pool);
	free(perm);
}

int main(int argc, char **argv)
{
	const char *e = getenv("KVMM_CUDA_DEVICE");
	int dev = e ? atoi(e) : 0, ret;
	double base;

	(void)argc;
	(void)argv;
	ret = kvmm_cuda_init(dev);
	if (ret) {
		printf("cuda-bench: no GPU: %s (skipped)\n", kvmm_cuda_why());
		return 77;
	}
	base = copy_bw();
	printf("device %d copy bandwidth (cuMemcpyDtoD, 1 GiB, read+write): %.1f GB/s\n", dev,
	       base / 1e9);
	printf("%-14s %-5s %-26s %13s %14s %8s\n", "kernel", "dtype", "shape", "time", "bandwidth",
	       "of copy");
	for (uint32_t dt = KVMM_DTYPE_FP32; dt < KVMM_DTYPE_COUNT; dt++) {
		bench_dtype(dt, 64, 512, base);	  /* short contexts */
		bench_dtype(dt, 16, 16384, base); /* long contexts */
	}
	kvmm_cuda_fini();
	return 0;
}
