// SPDX-License-Identifier: MIT
/*
 * tools/bench_attn.c - kvmm-bench suite "attn": CPU paged decode attention against its
 * baselines, measured in the same run.
 *
 * The format is one layer of a Llama-3-8B-like model: 8 KV heads, head dim 128, fp16, 16
 * tokens per page (64 KiB pages), 32 query heads (GQA 4).  Two shapes: short, 32 sequences of
 * 512 tokens, and long, one sequence of 32768 tokens (8192 with --quick); each decode step
 * reads every K and V byte of its context once (64 MiB resp. 128 MiB, beyond any cache).
 * Rows, one decode step of the whole batch per iteration, single-threaded:
 *
 *   attn.decode_<ctx>.paged    GB/s of KV read, block tables of shuffled frames (the pages of
 *                              a sequence scattered over the pool, as after churn)
 *   baseline contig            the same kernel with block tables of consecutive frames, so
 *                              the KV of a sequence is one contiguous run of memory (the
 *                              kernel still walks it page by page: this isolates the cost of
 *                              scattered pages, not of the block-table indirection itself)
 *   attn.decode_<ctx>_mha      the long case read by 8 query heads (no GQA): the least
 *                              arithmetic per KV byte, so the closest to a bandwidth test
 *   baseline stream_read       summing a buffer as large as the long case's KV, 64-bit words,
 *                              four accumulators (what one core can pull from memory)
 *
 * Paged and contiguous are measured alternately twice and the faster median of each kept, so
 * a noisy neighbour hurts both alike.  The ISA is the kernels' choice (KVMM_KERNEL_ISA to
 * force one).  Targets, printed never asserted: paged at most 5 % slower than contiguous, and
 * long-context paged decode at least 60 % of the streaming-read bandwidth.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kernels/kernels.h"

#define KV_HEADS 8
#define HEAD_DIM 128
#define Q_HEADS 32
#define TPP 16

struct attn_bench {
	struct kvmm_fmt fmt;
	char *pool;
	uint32_t nframes, nseqs, ctx, max_blocks, hq;
	int32_t *paged, *contig; /* block tables */
	const int32_t *tables;	 /* the one in use */
	uint32_t *ctx_lens;
	float *q, *out;
	int err;
	/* stream-read baseline */
	const uint64_t *buf;
	size_t words;
	uint64_t sink;
};

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void run_decode(void *arg, uint64_t n)
{
	struct attn_bench *a = arg;
	struct kvmm_attn_batch b = {
		.kv = {a->pool, &a->fmt, 0, a->nframes},
		.nr_seqs = a->nseqs,
		.num_q_heads = a->hq,
		.block_tables = a->tables,
		.max_blocks = a->max_blocks,
		.ctx_lens = a->ctx_lens,
	};

	for (uint64_t i = 0; i < n; i++) {
		int err = kvmm_cpu_paged_decode(&b, a->q, a->out);

		if (err && !a->err)
			a->err = err;
		bench_use_ptr(a->out);
	}
}

static void run_stream(void *arg, uint64_t n)
{
	struct attn_bench *a = arg;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

		for (size_t w = 0; w + 4 <= a->words; w += 4) {
			s0 += a->buf[w];
			s1 += a->buf[w + 1];
			s2 += a->buf[w + 2];
			s3 += a->buf[w + 3];
		}
		a->sink += s0 + s1 + s2 + s3;
		bench_use(a->sink);
	}
}

static void free_shape(struct attn_bench *a)
{
	free(a->pool);
	free(a->paged);
	free(a->contig);
	free(a->ctx_lens);
	free(a->q);
	free(a->out);
}

/* A pool holding nseqs sequences of ctx tokens of random KV; both kinds of block table. */
static int make_shape(struct attn_bench *a, uint32_t nseqs, uint32_t ctx, uint32_t hq)
{
	struct kvmm_fmt probe;
	size_t row = (size_t)KV_HEADS * HEAD_DIM, nq = (size_t)nseqs * hq * HEAD_DIM;
	uint32_t *perm = NULL, i, s;
	float *k = NULL, *v = NULL;
	int64_t *slots = NULL;
	int err;

	memset(a, 0, sizeof(*a));
	err = kvmm_fmt_init(&probe, 1, KV_HEADS, HEAD_DIM, KVMM_DTYPE_FP16, 0, 1u << 30);
	if (!err)
		err = kvmm_fmt_init(&a->fmt, 1, KV_HEADS, HEAD_DIM, KVMM_DTYPE_FP16, 0,
				    TPP * probe.token_bytes);
	if (err)
		return err;
	a->nseqs = nseqs;
	a->hq = hq;
	a->ctx = ctx;
	a->max_blocks = (ctx + TPP - 1) / TPP;
	a->nframes = nseqs * a->max_blocks;
	a->pool = aligned_alloc(4096, (size_t)a->nframes * a->fmt.page_size);
	a->paged = malloc((size_t)a->nframes * sizeof(int32_t));
	a->contig = malloc((size_t)a->nframes * sizeof(int32_t));
	a->ctx_lens = malloc(nseqs * sizeof(uint32_t));
	a->q = malloc(nq * sizeof(float));
	a->out = malloc(nq * sizeof(float));
	perm = malloc(a->nframes * sizeof(uint32_t));
	k = malloc(TPP * row * sizeof(float));
	v = malloc(TPP * row * sizeof(float));
	slots = malloc(TPP * sizeof(int64_t));
	err = -ENOMEM;
	if (!a->pool || !a->paged || !a->contig || !a->ctx_lens || !a->q || !a->out || !perm ||
	    !k || !v || !slots)
		goto out_free;

	for (i = 0; i < a->nframes; i++)
		perm[i] = i;
	for (i = a->nframes - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd64() % (i + 1)), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (i = 0; i < a->nframes; i++) {
		a->contig[i] = (int32_t)i;
		a->paged[i] = (int32_t)perm[i];
	}
	for (s = 0; s < nseqs; s++)
		a->ctx_lens[s] = ctx;
	for (i = 0; i < nq; i++)
		a->q[i] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
	/* every frame gets 16 tokens of random K and V, written by the real kernel */
	for (i = 0; i < a->nframes; i++) {
		struct kvmm_kv_pages kv = {a->pool, &a->fmt, 0, a->nframes};

		for (size_t e = 0; e < TPP * row; e++) {
			k[e] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
			v[e] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
		}
		for (uint32_t t = 0; t < TPP; t++)
			slots[t] = kvmm_kv_slot(&a->fmt, (int32_t)i, t);
		err = kvmm_cpu_reshape_and_cache(&kv, TPP, slots, k, v);
		if (err)
			goto out_free;
	}
	err = 0;
out_free:
	free(perm);
	free(k);
	free(v);
	free(slots);
	if (err)
		free_shape(a);
	return err;
}

static double gbps(double bytes, double ns)
{
	return bytes / ns;
}

/* ns per decode step, paged and contiguous, alternately measured, best median of each */
static void measure_pair(const struct bench_opts *o, struct attn_bench *a, double *paged,
			 double *contig)
{
	struct bench_case c = {.name = "attn decode", .run = run_decode, .arg = a};

	*paged = *contig = 0;
	for (int r = 0; r < 2; r++) {
		double t;

		a->tables = a->contig;
		t = bench_measure(o, &c);
		*contig = *contig && *contig < t ? *contig : t;
		a->tables = a->paged;
		t = bench_measure(o, &c);
		*paged = *paged && *paged < t ? *paged : t;
	}
}

int bench_suite_attn(const struct bench_opts *o)
{
	uint32_t long_ctx = o->quick ? 8192 : 32768;
	struct attn_bench sh, lg;
	struct bench_case sc = {.name = "stream read", .run = run_stream};
	double sp, scn, lp, lcn, mp, mcn, stream, sbytes, lbytes;
	char name[64];
	int err;

	err = make_shape(&sh, 32, 512, Q_HEADS);
	if (err) {
		fprintf(stderr, "kvmm-bench attn: short shape: %s\n", strerror(-err));
		return err;
	}
	err = make_shape(&lg, 1, long_ctx, Q_HEADS);
	if (err) {
		fprintf(stderr, "kvmm-bench attn: long shape: %s\n", strerror(-err));
		free_shape(&sh);
		return err;
	}
	printf("attn: isa %s, fp16, %u KV heads x dim %u, %u q heads, %u tokens/page (%llu KiB)\n",
	       kvmm_cpu_isa_name(kvmm_cpu_isa_get()), KV_HEADS, HEAD_DIM, Q_HEADS, TPP,
	       (unsigned long long)(lg.fmt.page_size >> 10));

	/* the stream baseline reads the long case's pool: same size, same pages */
	lg.buf = (const uint64_t *)lg.pool;
	lg.words = (size_t)lg.nframes * lg.fmt.page_size / 8;
	sc.arg = &lg;
	stream = gbps((double)lg.words * 8, bench_measure(o, &sc));

	measure_pair(o, &sh, &sp, &scn);
	measure_pair(o, &lg, &lp, &lcn);
	/* the same pages read by 8 query heads (no GQA): the least compute per byte */
	lg.hq = KV_HEADS;
	measure_pair(o, &lg, &mp, &mcn);
	lg.hq = Q_HEADS;
	err = sh.err ? sh.err : lg.err;
	if (err) {
		fprintf(stderr, "kvmm-bench attn: decode failed: %s\n", strerror(-err));
		goto out;
	}
	/* K and V of every context token, one layer */
	sbytes = (double)sh.nseqs * sh.ctx * 2 * sh.fmt.row_bytes;
	lbytes = (double)lg.ctx * 2 * lg.fmt.row_bytes;

	bench_report("attn.decode_512x32.paged", gbps(sbytes, sp), "GB/s", "contig",
		     gbps(sbytes, scn));
	bench_report("attn.decode_512x32.paged", gbps(sbytes, sp), "GB/s", "stream_read", stream);
	bench_report("attn.decode_512x32.step", sp / 1e3, "us", "contig", scn / 1e3);
	snprintf(name, sizeof(name), "attn.decode_%uk.paged", long_ctx / 1024);
	bench_report(name, gbps(lbytes, lp), "GB/s", "contig", gbps(lbytes, lcn));
	bench_report(name, gbps(lbytes, lp), "GB/s", "stream_read", stream);
	snprintf(name, sizeof(name), "attn.decode_%uk.step", long_ctx / 1024);
	bench_report(name, lp / 1e3, "us", "contig", lcn / 1e3);
	snprintf(name, sizeof(name), "attn.decode_%uk_mha.paged", long_ctx / 1024);
	bench_report(name, gbps(lbytes, mp), "GB/s", "contig", gbps(lbytes, mcn));
	bench_report(name, gbps(lbytes, mp), "GB/s", "stream_read", stream);

	bench_target("attn paged decode slowdown vs contiguous (512x32)", (sp / scn - 1) * 100, 5,
		     true, "%");
	bench_target("attn paged decode slowdown vs contiguous (long)", (lp / lcn - 1) * 100, 5,
		     true, "%");
	bench_target("attn long-context paged decode vs streaming read",
		     gbps(lbytes, lp) / stream * 100, 60, false, "%");
	bench_target("attn long-context paged decode vs streaming read (MHA)",
		     gbps(lbytes, mp) / stream * 100, 60, false, "%");
out:
	free_shape(&sh);
	free_shape(&lg);
	return err;
}
