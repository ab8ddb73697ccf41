// SPDX-License-Identifier: MIT
/*
 * tools/cuda-bench.c - timing of the CUDA kernels beside the device's own copy bandwidth,
 * measured in the same run (run by tools/gpu-check).
 *
 * The baseline is cuMemcpyDtoD of a 1 GiB buffer (bytes read + bytes written per second, the
 * usual figure of a GPU's memory bandwidth).  Each kernel then runs on a pool of 2 MiB frames
 * in a shuffled order (a paged layout, as kvmmd hands out), and its achieved bandwidth is the
 * bytes it must move divided by its time: decode reads every K and V row (and scale) of its
 * sequences' layer once; reshape_and_cache reads fp32 K and V rows and writes them into their
 * pages (8 sequences of 8k tokens); copy_pages reads and writes whole pages.  The target is
 * decode at >= 80 % of the copy bandwidth.  Decode shapes: short contexts (512 sequences of
 * 32 tokens), one 32k-token sequence, and 8 sequences of 8k, 32 query / 8 KV heads, dim 128;
 * and one 32k-token sequence with 64 query heads (GQA 8) in fp16 and bf16.  A decode the plan
 * puts on the tensor cores ("decode tc": int8 GQA 4, fp16 and bf16 GQA 8) is timed on the FMA
 * kernel too (kvmm_cuda_decode_tc 0), with the ratio; and a crossover table times both kernels
 * at GQA 1, 2, 4, 8 and 16 (one 32k sequence, 8 KV heads, fp16, bf16, int8; the tensor cores
 * forced with kvmm_cuda_decode_tc 2) and says from which group the tensor cores win.
 * Prefill (fp16 and int8): a 4096-token prompt, and 512 new tokens over 8192 cached (chunked
 * prefill), each both on the tensor cores ("prefill tc") and on the FMA kernel
 * (kvmm_cuda_prefill_tc 0) with the ratio of their times; its bandwidth is the K/V bytes its blocks stage (each block the tokens its last
 * row sees, once for all its rows and heads: mostly L2 hits, so it may pass the copy's), and
 * its arithmetic rate, 4 * head_dim flops per query head and visible token, is printed too.
 * After the table, a "target:" line per dtype and long-context decode shape says whether it
 * reached 80 % of the copy bandwidth.  Every working set is larger than the L2 cache, and
 * before each timed run a 256 MiB device-to-device copy evicts what the previous run left
 * there, so no run is served from L2.
 * Times come from CUDA events around the kernel alone (queued behind the eviction copy, so
 * the launch itself is not in them); the median of RUNS runs after a warm-up is reported,
 * with the fastest.  Without a GPU the program says why and exits 77 (skipped).
 *
 *   cuda-bench [--quick] [WAVES]
 *
 * WAVES sets kvmm_cuda_decode_waves (default 1; 0: unsplit).  --quick: contexts 16 times
 * shorter, 3 runs, 64 MiB copies: for checking the program's paths (tools/gpu-check --fake runs
 * it on the fake driver's SIMT emulator, whose times are a model's), not for numbers.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/abi.h"
#include "kernels/cuda/cuda_drv.h"
#include "kernels/cuda/kvmm_cuda.h"

#define RUNS_MAX 11

static int runs = RUNS_MAX;
static size_t flush_bytes = (size_t)256 << 20, copy_bytes = (size_t)1 << 30;

static const struct kvmm_cuda_drv *drv;
static kvmm_cu_event ev0, ev1;
static void *flush_a, *flush_b;

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

static void drv_check(kvmm_cu_result r, const char *what)
{
	if (r) {
		fprintf(stderr, "cuda-bench: %s: %s (CUDA error %d)\n", what,
			kvmm_cuda_result_str(r), r);
		exit(1);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * What the kernels are timed with: evict L2 (a copy of FLUSH_BYTES), then events around
 * fn(arg) on the legacy stream.  Median and fastest of runs after one warm-up, in seconds.
 */
static void timed(void (*fn)(void *), void *arg, double *median, double *best)
{
	double t[RUNS_MAX];
	float ms;

	for (int i = 0; i <= runs; i++) {
		drv_check(drv->cuMemcpyDtoDAsync((kvmm_cu_ptr)(uintptr_t)flush_b,
						 (kvmm_cu_ptr)(uintptr_t)flush_a, flush_bytes,
						 NULL),
			  "L2 eviction copy");
		drv_check(drv->cuEventRecord(ev0, NULL), "cuEventRecord");
		fn(arg);
		drv_check(drv->cuEventRecord(ev1, NULL), "cuEventRecord");
		drv_check(drv->cuEventSynchronize(ev1), "cuEventSynchronize (a kernel failed)");
		drv_check(drv->cuEventElapsedTime(&ms, ev0, ev1), "cuEventElapsedTime");
		if (i) /* the first run is the warm-up */
			t[i - 1] = ms * 1e-3;
	}
	qsort(t, (size_t)runs, sizeof(t[0]), cmp_double);
	*median = t[runs / 2];
	*best = t[0];
}

static void run_copy(void *arg)
{
	void **ab = arg;

	drv_check(drv->cuMemcpyDtoDAsync((kvmm_cu_ptr)(uintptr_t)ab[1],
					 (kvmm_cu_ptr)(uintptr_t)ab[0], copy_bytes, NULL),
		  "cuMemcpyDtoDAsync");
}

static double copy_bw(void)
{
	size_t n = copy_bytes;
	void *ab[2];
	double med, best;

	CHECK(kvmm_cuda_malloc(&ab[0], n));
	CHECK(kvmm_cuda_malloc(&ab[1], n));
	CHECK(kvmm_cuda_memset(ab[0], 1, n));
	timed(run_copy, ab, &med, &best);
	kvmm_cuda_free(ab[0]);
	kvmm_cuda_free(ab[1]);
	return 2.0 * (double)n / med;
}

static void *dev_from(const void *h, size_t n)
{
	void *d;

	CHECK(kvmm_cuda_malloc(&d, n));
	CHECK(kvmm_cuda_memcpy_htod(d, h, n));
	return d;
}

static void row(const char *name, const char *dt, const char *shape, double med, double best,
		double bytes, double base)
{
	double bw = bytes / med;

	printf("%-11s %-5s %-28s %9.1f us %9.1f us %8.1f GB/s %6.1f %%\n", name, dt, shape,
	       med * 1e6, best * 1e6, bw / 1e9, 100.0 * bw / base);
}

/* frames 0 .. n - 1 in a shuffled order (seeded: the same every run), malloc'd */
static int32_t *shuffled(uint32_t n, unsigned int seed)
{
	int32_t *perm = malloc(sizeof(int32_t) * (n ? n : 1));

	if (!perm)
		die("malloc", -ENOMEM);
	for (uint32_t i = 0; i < n; i++)
		perm[i] = (int32_t)i;
	srand(seed);
	for (uint32_t i = n ? n - 1 : 0; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1);
		int32_t x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	return perm;
}

struct decode_run {
	struct kvmm_attn_batch *b;
	float *q, *out;
};

static void run_decode(void *arg)
{
	struct decode_run *r = arg;

	CHECK(kvmm_cuda_paged_decode(r->b, r->q, r->out, NULL));
}

struct prefill_run {
	struct kvmm_attn_batch *b;
	uint32_t max_q;
	float *q, *out;
};

static void run_prefill(void *arg)
{
	struct prefill_run *r = arg;

	CHECK(kvmm_cuda_paged_prefill(r->b, r->max_q, r->q, r->out, NULL));
}

struct cache_run {
	struct kvmm_kv_pages *kv;
	uint32_t ntok;
	int64_t *slots;
	float *k, *v;
};

static void run_cache(void *arg)
{
	struct cache_run *r = arg;

	CHECK(kvmm_cuda_reshape_and_cache(r->kv, r->ntok, r->slots, r->k, r->v, NULL));
}

struct copy_run {
	struct kvmm_fmt *f;
	char *pool;
	int32_t *table;
	uint32_t half;
};

static void run_copy_pages(void *arg)
{
	struct copy_run *r = arg;

	CHECK(kvmm_cuda_copy_pages(r->f, r->pool, r->pool, r->table, r->table + r->half, r->half, 0,
				   NULL));
}

/*
 * The decode target's verdicts, printed after the table: one per dtype for the long contexts
 * (one 32k sequence, 8 of 8k), where decode is bound by memory; the short ones (32 tokens a
 * sequence: a single tile per block) are reported but not judged.
 */
#define TARGET_PCT 80.0
static char targets[16][160];
static unsigned int nr_targets;

/* a decode batch on the device: nseq sequences of ctx tokens, nqh query heads over 8 KV heads */
struct dsetup {
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	uint32_t blocks, nframes, *hlens, *lens;
	int32_t *table, *perm;
	char *pool;
	float *q, *out;
	double bytes; /* what one decode must read: every K and V row (and scale) once */
};

static void decode_setup(struct dsetup *s, uint32_t dt, uint32_t nseq, uint32_t ctx, uint32_t nqh)
{
	const uint32_t layers = 4, kvh = 8, dim = 128;
	struct kvmm_fmt *f = &s->f;

	memset(s, 0, sizeof(*s));
	CHECK(kvmm_fmt_init(
		f, &(struct kvmm_format){layers, kvh, dim, dt, dt == KVMM_DTYPE_INT8 ? 32 : 0},
		UINT64_C(2) << 20));
	s->blocks = (ctx + f->tokens_per_page - 1) / f->tokens_per_page;
	s->nframes = nseq * s->blocks;
	CHECK(kvmm_cuda_malloc((void **)&s->pool, (size_t)s->nframes * f->page_size));
	/* 0x3c bytes: small finite values in every dtype (and int8 scales) */
	CHECK(kvmm_cuda_memset(s->pool, 0x3c, (size_t)s->nframes * f->page_size));
	s->perm = shuffled(s->nframes, 1);
	s->hlens = malloc(sizeof(uint32_t) * nseq);
	if (!s->hlens)
		die("malloc", -ENOMEM);
	for (uint32_t i = 0; i < nseq; i++)
		s->hlens[i] = ctx;
	s->table = dev_from(s->perm, sizeof(int32_t) * s->nframes);
	s->lens = dev_from(s->hlens, sizeof(uint32_t) * nseq);
	CHECK(kvmm_cuda_malloc((void **)&s->q, sizeof(float) * nseq * nqh * dim));
	CHECK(kvmm_cuda_malloc((void **)&s->out, sizeof(float) * nseq * nqh * dim));
	CHECK(kvmm_cuda_memset(s->q, 0, sizeof(float) * nseq * nqh * dim));
	s->b.kv.base = s->pool;
	s->b.kv.fmt = f;
	s->b.kv.nr_frames = s->nframes;
	s->b.nr_seqs = nseq;
	s->b.num_q_heads = nqh;
	s->b.block_tables = s->table;
	s->b.max_blocks = s->blocks;
	s->b.ctx_lens = s->lens;
	s->bytes = 2.0 * nseq * ctx * (double)(f->row_bytes + f->scale_row_bytes);
}

static void decode_free(struct dsetup *s)
{
	kvmm_cuda_free(s->q);
	kvmm_cuda_free(s->out);
	kvmm_cuda_free(s->table);
	kvmm_cuda_free(s->lens);
	kvmm_cuda_free(s->pool);
	free(s->perm);
	free(s->hlens);
}

/* decode over nseq sequences of ctx tokens each, and copy_pages on the same pool */
static void bench_dtype(uint32_t dt, uint32_t nseq, uint32_t ctx, uint32_t nqh, double base,
			bool with_copy)
{
	const uint32_t layers = 4, kvh = 8, dim = 128;
	struct dsetup s;
	struct kvmm_fmt *f = &s.f;
	uint32_t tpp, blocks, nframes, tc;
	double med, best, bytes;
	char shape[64];

	decode_setup(&s, dt, nseq, ctx, nqh);
	tpp = f->tokens_per_page;
	blocks = s.blocks;
	nframes = s.nframes;
	bytes = s.bytes;
	{
		struct decode_run r = {.b = &s.b, .q = s.q, .out = s.out};
		struct kvmm_cuda_decode_args d;

		CHECK(kvmm_cuda_batch_plan(&s.b, 0, &d));
		tc = d.tc;
		timed(run_decode, &r, &med, &best);
		snprintf(shape, sizeof(shape), "%u seq x %u tok, %u/%u h", nseq, ctx, nqh, kvh);
		row(tc ? "decode tc" : "decode", kvmm_dtype_name(dt), shape, med, best, bytes,
		    base);
		if (tc) {
			/* the same on the FMA kernel, and the ratio */
			double fmed, fbest;
			uint32_t was = kvmm_cuda_decode_tc;

			kvmm_cuda_decode_tc = 0;
			timed(run_decode, &r, &fmed, &fbest);
			kvmm_cuda_decode_tc = was;
			row("decode", kvmm_dtype_name(dt), shape, fmed, fbest, bytes, base);
			printf("%-11s %-5s %-28s %9.2fx the FMA kernel's speed on the tensor "
			       "cores\n",
			       "", "", "", fmed / med);
		}
	}
	if (ctx >= 1024 && nr_targets < sizeof(targets) / sizeof(targets[0])) {
		double pct = 100.0 * bytes / med / base;

		snprintf(targets[nr_targets++], sizeof(targets[0]),
			 "target: decode >= %.0f %% of the copy bandwidth (%s, %s): %s (%.1f %%)",
			 TARGET_PCT, kvmm_dtype_name(dt), shape,
			 pct >= TARGET_PCT ? "met" : "NOT met", pct);
	}

	if (with_copy) {
		/*
		 * reshape_and_cache: every token of the batch written into its page (the
		 * sequences' shuffled frames), from fp32 K and V; bytes read and written
		 */
		uint32_t ntok = nseq * ctx;
		size_t in = sizeof(float) * (size_t)ntok * kvh * dim;
		int64_t *hslots = malloc(sizeof(int64_t) * ntok);
		struct cache_run c = {.kv = &s.b.kv, .ntok = ntok};

		if (!hslots)
			die("malloc", -ENOMEM);
		for (uint32_t i = 0; i < nseq; i++)
			for (uint32_t t = 0; t < ctx; t++)
				hslots[(size_t)i * ctx + t] = kvmm_kv_slot(
					f, s.perm[(size_t)i * blocks + t / tpp], t % tpp);
		c.slots = dev_from(hslots, sizeof(int64_t) * ntok);
		CHECK(kvmm_cuda_malloc((void **)&c.k, in));
		CHECK(kvmm_cuda_malloc((void **)&c.v, in));
		CHECK(kvmm_cuda_memset(c.k, 0, in));
		CHECK(kvmm_cuda_memset(c.v, 0, in));
		timed(run_cache, &c, &med, &best);
		snprintf(shape, sizeof(shape), "%u tokens, %u h x %u", ntok, kvh, dim);
		row("reshape", kvmm_dtype_name(dt), shape, med, best,
		    2.0 * in + 2.0 * ntok * (double)(f->row_bytes + f->scale_row_bytes), base);
		kvmm_cuda_free(c.slots);
		kvmm_cuda_free(c.k);
		kvmm_cuda_free(c.v);
		free(hslots);
	}
	if (with_copy) {
		/* copy_pages: half the pool onto the other half, whole pages */
		struct copy_run r = {.f = f, .pool = s.pool, .table = s.table, .half = nframes / 2};

		timed(run_copy_pages, &r, &med, &best);
		snprintf(shape, sizeof(shape), "%u pages of 2 MiB", nframes / 2);
		row("copy_pages", kvmm_dtype_name(dt), shape, med, best,
		    2.0 * (nframes / 2) * (double)(2 * layers * f->slab_bytes), base);
	}
	decode_free(&s);
}

/*
 * Where decode on the tensor cores starts to pay: one sequence of ctx tokens, 8 KV heads, GQA
 * groups 1 to 16, each decode timed on the tensor cores (kvmm_cuda_decode_tc 2: whatever the
 * group) and on the FMA kernel (0); per dtype, the smallest group from which the tensor cores
 * are faster at every larger group measured, beside the group the plan's rule picks them from
 * (kvmm_cuda_decode_tc 1: 4 x the element size).  The numbers a session with a GPU needs to
 * set that rule.
 */
static void bench_crossover(uint32_t ctx)
{
	static const uint32_t groups[] = {1, 2, 4, 8, 16};
	const uint32_t ng = sizeof(groups) / sizeof(groups[0]);

	printf("decode on the tensor cores against the FMA kernel, 1 seq x %u tok, 8 KV heads "
	       "(median times, us):\n",
	       ctx);
	printf("%-5s", "dtype");
	for (uint32_t i = 0; i < ng; i++)
		printf("  GQA %-2u tc / fma  ", groups[i]);
	printf("\n");
	for (uint32_t dt = KVMM_DTYPE_FP16; dt < KVMM_DTYPE_COUNT; dt++) {
		uint32_t was = kvmm_cuda_decode_tc, from = 0;
		double ratio[sizeof(groups) / sizeof(groups[0])];

		printf("%-5s", kvmm_dtype_name(dt));
		for (uint32_t i = 0; i < ng; i++) {
			struct dsetup s;
			struct decode_run r;
			double tc, fma, best;

			decode_setup(&s, dt, 1, ctx, 8 * groups[i]);
			r = (struct decode_run){.b = &s.b, .q = s.q, .out = s.out};
			kvmm_cuda_decode_tc = 2;
			timed(run_decode, &r, &tc, &best);
			kvmm_cuda_decode_tc = 0;
			timed(run_decode, &r, &fma, &best);
			kvmm_cuda_decode_tc = was;
			decode_free(&s);
			ratio[i] = fma / tc;
			printf("  %7.1f / %-7.1f", tc * 1e6, fma * 1e6);
		}
		printf("\n");
		for (uint32_t i = ng; i > 0 && ratio[i - 1] > 1.0; i--)
			from = groups[i - 1];
		if (from)
			printf("%-5s tensor cores faster from GQA %u (the plan's rule: from %u)\n",
			       kvmm_dtype_name(dt), from, 4 * kvmm_dtype_size(dt));
		else
			printf("%-5s tensor cores not faster at GQA %u (the plan's rule: from "
			       "%u)\n",
			       kvmm_dtype_name(dt), groups[ng - 1], 4 * kvmm_dtype_size(dt));
	}
}

/*
 * prefill of qlen new tokens over ctx - qlen cached ones, one sequence, with the kernel
 * kvmm_cuda_prefill_tc picks (row name: "prefill tc" on the tensor cores); the median time
 */
static double bench_prefill(uint32_t dt, uint32_t ctx, uint32_t qlen, double base)
{
	const uint32_t kvh = 8, dim = 128, nqh = 32;
	struct kvmm_fmt f;
	struct kvmm_attn_batch b;
	uint32_t blocks, rows, tc, first = ctx - qlen, *lens, *qlens;
	int32_t *table, *perm;
	char *pool;
	float *q, *out;
	double med, best, staged = 0, visible = 0;
	size_t qbytes = sizeof(float) * (size_t)qlen * nqh * dim;
	char shape[64];

	CHECK(kvmm_fmt_init(&f,
			    &(struct kvmm_format){4, kvh, dim, dt, dt == KVMM_DTYPE_INT8 ? 32 : 0},
			    UINT64_C(2) << 20));
	blocks = (ctx + f.tokens_per_page - 1) / f.tokens_per_page;
	CHECK(kvmm_cuda_malloc((void **)&pool, (size_t)blocks * f.page_size));
	CHECK(kvmm_cuda_memset(pool, 0x3c, (size_t)blocks * f.page_size));
	perm = shuffled(blocks, 2);
	table = dev_from(perm, sizeof(int32_t) * blocks);
	lens = dev_from(&ctx, sizeof(ctx));
	qlens = dev_from(&qlen, sizeof(qlen));
	CHECK(kvmm_cuda_malloc((void **)&q, qbytes));
	CHECK(kvmm_cuda_malloc((void **)&out, qbytes));
	CHECK(kvmm_cuda_memset(q, 0, qbytes));

	memset(&b, 0, sizeof(b));
	b.kv.base = pool;
	b.kv.fmt = &f;
	b.kv.nr_frames = blocks;
	b.nr_seqs = 1;
	b.num_q_heads = nqh;
	b.block_tables = table;
	b.max_blocks = blocks;
	b.ctx_lens = lens;
	b.q_lens = qlens;
	{
		struct prefill_run r = {.b = &b, .max_q = qlen, .q = q, .out = out};

		timed(run_prefill, &r, &med, &best);
	}
	{
		struct kvmm_cuda_decode_args d;

		CHECK(kvmm_cuda_batch_plan(&b, qlen, &d));
		rows = d.rows;
		tc = d.tc;
	}
	for (uint32_t r0 = 0; r0 < qlen; r0 += rows)
		staged += first + (qlen - r0 < rows ? qlen : r0 + rows);
	staged *= 2.0 * (double)(f.row_bytes + f.scale_row_bytes);
	for (uint32_t r = 0; r < qlen; r++)
		visible += first + r + 1;
	snprintf(shape, sizeof(shape), "%u new + %u, %u/%u h", qlen, first, nqh, kvh);
	row(tc ? "prefill tc" : "prefill", kvmm_dtype_name(dt), shape, med, best, staged, base);
	printf("%-11s %-5s %-28s %9.2f TFLOP/s (4 x head_dim per query head and token seen)\n", "",
	       "", "", 4.0 * dim * nqh * visible / med / 1e12);

	kvmm_cuda_free(q);
	kvmm_cuda_free(out);
	kvmm_cuda_free(table);
	kvmm_cuda_free(lens);
	kvmm_cuda_free(qlens);
	kvmm_cuda_free(pool);
	free(perm);
	return med;
}

/* prefill on the tensor cores and on the FMA kernel, the same shape, and their ratio */
static void bench_prefill_tc(uint32_t dt, uint32_t ctx, uint32_t qlen, double base)
{
	double tc, fma;

	kvmm_cuda_prefill_tc = 1;
	tc = bench_prefill(dt, ctx, qlen, base);
	kvmm_cuda_prefill_tc = 0;
	fma = bench_prefill(dt, ctx, qlen, base);
	kvmm_cuda_prefill_tc = 1;
	printf("%-11s %-5s %-28s %9.2fx the FMA kernel's speed on the tensor cores\n", "", "", "",
	       fma / tc);
}

int main(int argc, char **argv)
{
	const char *e = getenv("KVMM_CUDA_DEVICE");
	int dev = e ? atoi(e) : 0, ret, a = 1;
	uint32_t div = 1;
	double base;

	if (a < argc && !strcmp(argv[a], "--quick")) {
		div = 16;
		runs = 3;
		flush_bytes = copy_bytes = (size_t)64 << 20;
		a++;
	}
	if (a < argc) {
		char *end;
		unsigned long w = strtoul(argv[a], &end, 10);

		if (*end || end == argv[a] || w > 64 || a + 1 < argc) {
			fprintf(stderr, "usage: cuda-bench [--quick] [WAVES (0-64)]\n");
			return 2;
		}
		kvmm_cuda_decode_waves = (uint32_t)w;
	}
	ret = kvmm_cuda_init(dev);
	if (ret) {
		printf("cuda-bench: no GPU: %s (skipped)\n", kvmm_cuda_why());
		return 77;
	}
	drv = kvmm_cuda_drv_load();
	if (!drv)
		die("kvmm_cuda_drv_load", -ENODEV);
	drv_check(drv->cuEventCreate(&ev0, KVMM_CU_EVENT_DEFAULT), "cuEventCreate");
	drv_check(drv->cuEventCreate(&ev1, KVMM_CU_EVENT_DEFAULT), "cuEventCreate");
	CHECK(kvmm_cuda_malloc(&flush_a, flush_bytes));
	CHECK(kvmm_cuda_malloc(&flush_b, flush_bytes));
	CHECK(kvmm_cuda_memset(flush_a, 0, flush_bytes));
	base = copy_bw();
	printf("device %d copy bandwidth (cuMemcpyDtoD, %zu MiB, read+write): %.1f GB/s\n", dev,
	       copy_bytes >> 20, base / 1e9);
	if (div > 1)
		printf("--quick: contexts / %u, %d runs: a check of the program, not numbers\n",
		       div, runs);
	printf("decode split waves: %u (0: unsplit)\n", kvmm_cuda_decode_waves);
	printf("%-11s %-5s %-28s %12s %12s %13s %8s\n", "kernel", "dtype", "shape", "median",
	       "fastest", "bandwidth", "of copy");
	for (uint32_t dt = KVMM_DTYPE_FP32; dt < KVMM_DTYPE_COUNT; dt++) {
		bench_dtype(dt, 512 / div, 32, 32, base, false);  /* short contexts */
		bench_dtype(dt, 1, 32768 / div, 32, base, false); /* one long context */
		bench_dtype(dt, 8 / (div > 1 ? 4 : 1), 8192 / div, 32, base,
			    true); /* a batch of long ones; and copy_pages */
	}
	/* GQA 8: fp16 and bf16 decode on the tensor cores (and the FMA kernel beside) */
	for (uint32_t dt = KVMM_DTYPE_FP16; dt <= KVMM_DTYPE_BF16; dt++)
		bench_dtype(dt, 1, 32768 / div, 64, base, false);
	bench_crossover(32768 / (div > 1 ? 16 * div : 1)); /* --quick: 128 tokens */
	/* (--quick: prompts 32 times shorter, their cost is quadratic) */
	for (uint32_t dt = KVMM_DTYPE_FP16; dt < KVMM_DTYPE_COUNT; dt += 2) {
		bench_prefill_tc(dt, 4096 / (2 * div - 1), 4096 / (2 * div - 1),
				 base); /* a prompt */
		bench_prefill_tc(dt, 8704 / (2 * div - 1), 512 / (2 * div - 1), base); /* a chunk */
	}
	for (unsigned int i = 0; i < nr_targets; i++)
		printf("%s%s\n", targets[i], div > 1 ? " [--quick: not a measurement]" : "");
	drv->cuEventDestroy(ev0);
	drv->cuEventDestroy(ev1);
	kvmm_cuda_free(flush_a);
	kvmm_cuda_free(flush_b);
	kvmm_cuda_fini();
	return 0;
}
