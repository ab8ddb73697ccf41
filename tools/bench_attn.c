// SPDX-License-Identifier: MIT
/*
 * tools/bench_attn.c - kvmm-bench suite "attn": CPU paged decode attention against its
 * baselines, measured in the same run.
 *
 * The format is one layer of a Llama-3-8B-like model: 8 KV heads, head dim 128, fp16, 16
 * tokens per page (64 KiB pages), 32 query heads (GQA 4).  Two shapes: short, 32 sequences of
 * 512 tokens, and long, one sequence of 32768 tokens (8192 with --quick); each decode step
 * reads every K and V byte of its context once (64 MiB resp. 128 MiB, beyond any cache).
 * Rows, one decode step of the whole batch per iteration, each set measured on one thread
 * (".t1") and on N threads (".tN": N = online CPUs, or KVMM_BENCH_THREADS; the kernels get
 * kvmm_cpu_set_threads(N)):
 *
 *   attn.decode_<ctx>.tN.paged  GB/s of KV read, block tables of shuffled frames (the pages
 *                               of a sequence scattered over the pool, as after churn)
 *   baseline contig             the same kernel with block tables of consecutive frames, so
 *                               the KV of a sequence is one contiguous run of memory (the
 *                               kernel still walks it page by page: this isolates the cost
 *                               of scattered pages, not of the block-table indirection)
 *   attn.decode_<ctx>.tN.runs4  the long case with block tables of shuffled runs of 4
 *                               consecutive frames (256 KiB), as an allocator that gives a
 *                               growing sequence aligned blocks of 4 frames would lay it out;
 *                               no target, against contig like the paged row
 *   attn.decode_<ctx>.tN.sparse  the long case with its frames a random quarter of a pool four
 *                               times as large, in shuffled order (a sequence among others
 *                               after churn), against contig (the first frames of that pool)
 *   attn.decode_<ctx>.tN.table_order  the sparse case walked in block-table order
 *                               (kvmm_cpu_decode_by_address = 0), against contig: what the
 *                               kernel's address order (attn.c) saves.  With that order the
 *                               shuffled frames of the paged rows, which fill their pool, are
 *                               read in the contig row's order exactly; the sparse row is
 *                               the realistic measure of scattered pages
 *   attn.decode_<ctx>_mha...    the long case read by 8 query heads (no GQA): the least
 *                               arithmetic per KV byte, so the closest to a bandwidth test
 *   attn.decode_<ctx>.tN.layers32  the long case in the layout of a model of 32 layers: the
 *                               middle layer of 2 MiB pages (a 64 KiB slice each), pages
 *                               shuffled, against the one-layer contig case (a contiguous
 *                               layer); a note gives consecutive pages too, whose slices are
 *                               still a page apart
 *   attn.decode_hot.tN.paged    one 1024-token sequence per thread decoded over and over, its
 *                               KV in L2/L3: the rate the core's arithmetic allows, against
 *                               the stream (a note says when it is under the 60 % target)
 *   attn.steps_*.t1             the decode's steps on one chunk in cache against the core's
 *                               FMA rate measured in the same run (bench_attn_steps.c)
 *   baseline stream_read_tN     summing a buffer as large as the long case's KV, 64-bit
 *                               words, four accumulators, on the same number of threads as
 *                               the rows it is compared with, through the kernels' own pool
 *                               (what N cores pull from memory, with the same hand-off cost)
 *   attn.read_<ctx>.tN.paged    no attention: the long case's frames summed as the stream
 *                               sums, frame after frame in block-table order, each frame's
 *                               lines in address order while the same line of the next frame
 *                               is prefetched (as the kernels prefetch), against the same
 *                               read of consecutive frames (baseline contig): what scattering
 *                               64 KiB frames costs a reader that does nothing else, beside
 *                               what it costs the kernel (the paged/contig rows)
 *
 * Paged and contiguous are timed as 25 pairs of back-to-back batches of about 20 ms, the order
 * alternating; the rows are the medians of each, and the paged/contig target uses the median
 * of the pairs' ratios, so a noisy neighbour slows both halves of a pair alike (measure_pair);
 * the stream baseline of the rows is measured before and after the kernel rows of its thread
 * count and the faster kept, while the long-context targets pair the kernel with the stream
 * the same way (versus_stream(): the median of 25 pairs' ratios).  The ISA is the kernels' choice
 * (KVMM_KERNEL_ISA to force one).  Targets, printed never asserted: paged at most 5 % slower
 * than contiguous, and long-context paged decode at least 60 % of the streaming-read
 * bandwidth (each thread count against the stream of the same thread count).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "kernels/cpu/cpu.h" /* kvmm_cpu_pool_run: the stream baseline uses the kernels' pool */
#include "kernels/kernels.h"

#define KV_HEADS ATTN_KV_HEADS
#define HEAD_DIM ATTN_HEAD_DIM
#define Q_HEADS ATTN_Q_HEADS
#define TPP 16

struct attn_bench {
	struct kvmm_fmt fmt;
	char *pool;
	size_t pool_bytes;
	uint32_t layer; /* the layer the kernels read and reshape_and_cache wrote */
	uint32_t nframes, nseqs, ctx, max_blocks, hq;
	int32_t *paged, *contig, *runs4; /* block tables */
	const int32_t *tables;		 /* the one in use */
	uint32_t *ctx_lens;
	float *q, *out;
	int err;
	void (*run)(void *arg, uint64_t n); /* what time_steps() times: decode, or the frame read */
	/* stream-read baseline */
	const uint64_t *buf;
	size_t words;
	uint64_t sink;
	uint32_t threads, next; /* threads of the stream baseline, the next block to read */
	/* what run_parts() reads: part() over [first, end) of part_total units */
	uint64_t (*part)(const struct attn_bench *a, uint64_t first, uint64_t end);
	uint64_t part_total, part_block;
};

#define READ_FRAMES 16 /* frames per block of the threaded frame read: 1 MiB */

#define STREAM_BLOCK (1u << 17) /* 64-bit words per block of the threaded stream: 1 MiB */

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
		.kv = {a->pool, &a->fmt, a->layer, a->nframes},
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

static uint64_t sum_words(const uint64_t *buf, size_t words)
{
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t w = 0; w + 4 <= words; w += 4) {
		s0 += buf[w];
		s1 += buf[w + 1];
		s2 += buf[w + 2];
		s3 += buf[w + 3];
	}
	return s0 + s1 + s2 + s3;
}

/* the stream's words [first, end) */
static uint64_t stream_part(const struct attn_bench *a, uint64_t first, uint64_t end)
{
	return sum_words(a->buf + first, end - first);
}

/* frames [first, end) of the block table in use, in its order; the next one's lines prefetched */
static uint64_t read_part(const struct attn_bench *a, uint64_t first, uint64_t end)
{
	size_t words = a->fmt.page_size / 8;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (uint64_t i = first; i < end; i++) {
		const uint64_t *w =
			(const uint64_t *)(a->pool + (size_t)a->tables[i] * a->fmt.page_size);
		int64_t pf = i + 1 < end
				     ? (a->tables[i + 1] - a->tables[i]) * (int64_t)a->fmt.page_size
				     : 0;

		for (size_t k = 0; k + 8 <= words; k += 8) {
			__builtin_prefetch((const char *)(w + k) + pf, 0, 2);
			s0 += w[k] + w[k + 4];
			s1 += w[k + 1] + w[k + 5];
			s2 += w[k + 2] + w[k + 6];
			s3 += w[k + 3] + w[k + 7];
		}
	}
	return s0 + s1 + s2 + s3;
}

/* one participant of a threaded read: blocks of a->part_block units off a shared counter */
static void part_worker(void *arg, uint32_t w)
{
	struct attn_bench *a = arg;
	uint64_t sum = 0, first;

	(void)w;
	while ((first = (uint64_t)__atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED) *
			a->part_block) < a->part_total)
		sum += a->part(a, first, min_t(uint64_t, first + a->part_block, a->part_total));
	__atomic_add_fetch(&a->sink, sum, __ATOMIC_RELAXED);
}

/* n reads of total units by part(), on a->threads threads through the kernels' pool */
static void run_parts(struct attn_bench *a, uint64_t n,
		      uint64_t (*part)(const struct attn_bench *, uint64_t, uint64_t),
		      uint64_t total, uint64_t block)
{
	a->part = part;
	a->part_total = total;
	a->part_block = block;
	for (uint64_t i = 0; i < n; i++) {
		if (a->threads <= 1) {
			a->sink += part(a, 0, total);
		} else {
			a->next = 0;
			kvmm_cpu_pool_run(part_worker, a, a->threads);
		}
		bench_use(a->sink);
	}
}

static void run_stream(void *arg, uint64_t n)
{
	struct attn_bench *a = arg;

	run_parts(a, n, stream_part, a->words, STREAM_BLOCK);
}

static void run_read(void *arg, uint64_t n)
{
	struct attn_bench *a = arg;

	run_parts(a, n, read_part, a->nframes, READ_FRAMES);
}

static void free_shape(struct attn_bench *a)
{
	if (a->pool)
		munmap(a->pool, a->pool_bytes);
	free(a->paged);
	free(a->contig);
	free(a->runs4);
	free(a->ctx_lens);
	free(a->q);
	free(a->out);
	memset(a, 0, sizeof(*a)); /* a second call does nothing */
}

/*
 * A pool holding nseqs sequences of ctx tokens of random KV in a format of @layers layers
 * (16 tokens per page whatever the layers: a page of L layers is L * 64 KiB, each layer's
 * slice 64 KiB), every kind of block table.  The pool is mapped, not allocated, and only the
 * slices of the layer the kernels read (the middle one) are written, so a format of 32
 * layers costs the memory of one.
 */
/*
 * A shape of nseqs sequences of ctx tokens in a pool of spread times the frames they need:
 * paged tables take frames at random from all of it, in shuffled order, contig tables the
 * first ones in order; only the frames some table uses are written.
 */
static int make_shape(struct attn_bench *a, uint32_t nseqs, uint32_t ctx, uint32_t hq,
		      uint32_t layers, uint32_t spread)
{
	struct kvmm_fmt probe;
	size_t row = (size_t)KV_HEADS * HEAD_DIM, nq = (size_t)nseqs * hq * HEAD_DIM;
	uint32_t *perm = NULL, i, s;
	uint8_t *used = NULL;
	float *k = NULL, *v = NULL;
	int64_t *slots = NULL;
	int err;

	memset(a, 0, sizeof(*a));
	a->run = run_decode;
	err = kvmm_fmt_init(&probe,
			    &(struct kvmm_format){layers, KV_HEADS, HEAD_DIM, KVMM_DTYPE_FP16},
			    1u << 30);
	if (!err)
		err = kvmm_fmt_init(
			&a->fmt, &(struct kvmm_format){layers, KV_HEADS, HEAD_DIM, KVMM_DTYPE_FP16},
			TPP * probe.token_bytes);
	if (err)
		return err;
	a->layer = layers / 2;
	a->nseqs = nseqs;
	a->hq = hq;
	a->ctx = ctx;
	a->max_blocks = (ctx + TPP - 1) / TPP;
	a->nframes = nseqs * a->max_blocks * spread;
	a->pool_bytes = (size_t)a->nframes * a->fmt.page_size;
	a->pool = mmap(NULL, a->pool_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->pool == MAP_FAILED)
		a->pool = NULL;
	a->paged = malloc((size_t)a->nframes * sizeof(int32_t));
	a->contig = malloc((size_t)a->nframes * sizeof(int32_t));
	a->runs4 = malloc((size_t)a->nframes * sizeof(int32_t));
	a->ctx_lens = malloc(nseqs * sizeof(uint32_t));
	a->q = malloc(nq * sizeof(float));
	a->out = malloc(nq * sizeof(float));
	perm = malloc(a->nframes * sizeof(uint32_t));
	used = malloc(a->nframes);
	k = malloc(TPP * row * sizeof(float));
	v = malloc(TPP * row * sizeof(float));
	slots = malloc(TPP * sizeof(int64_t));
	err = -ENOMEM;
	if (!a->pool || !a->paged || !a->contig || !a->runs4 || !a->ctx_lens || !a->q || !a->out ||
	    !perm || !used || !k || !v || !slots)
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
	/* frames some table uses: contig's first nframes / spread, and paged's */
	for (i = 0; i < a->nframes; i++)
		used[i] = i < a->nframes / spread;
	for (i = 0; i < a->nframes / spread; i++)
		used[a->paged[i]] = 1;
	/* runs of 4: the first nframes / 4 entries of perm shuffled again as run numbers */
	for (i = 0; i < a->nframes / 4; i++)
		perm[i] = i;
	for (i = a->nframes / 4; i > 1; i--) {
		uint32_t j = (uint32_t)(rnd64() % i), x = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = x;
	}
	for (i = 0; i < a->nframes; i++)
		a->runs4[i] =
			i < a->nframes / 4 * 4 ? (int32_t)(perm[i / 4] * 4 + i % 4) : (int32_t)i;
	for (s = 0; s < nseqs; s++)
		a->ctx_lens[s] = ctx;
	for (i = 0; i < nq; i++)
		a->q[i] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
	/* every frame in use gets 16 tokens of random K and V, written by the real kernel */
	for (i = 0; i < a->nframes; i++) {
		struct kvmm_kv_pages kv = {a->pool, &a->fmt, a->layer, a->nframes};

		if (!used[i])
			continue;
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
	free(used);
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

/* N of the threaded rows: KVMM_BENCH_THREADS, else one per online CPU */
static uint32_t bench_threads(void)
{
	const char *env = getenv("KVMM_BENCH_THREADS");
	long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > KVMM_CPU_MAX_THREADS ? KVMM_CPU_MAX_THREADS : (uint32_t)n;
}

/* ns of one batch of @n decode steps of @a over block tables @tables */
static double time_steps(struct attn_bench *a, const int32_t *tables, uint64_t n)
{
	uint64_t t0;

	a->tables = tables;
	t0 = bench_now_ns();
	a->run(a, n);
	return (double)(bench_now_ns() - t0);
}

#define PAIRS 25 /* batch pairs (7 with --quick) */

/*
 * ns per decode step of @a over block tables @ta and of the baseline @b over @tb (the same
 * shape, or one that reads as many bytes), and the ratio of the two.  They are timed as pairs
 * of back-to-back batches (about 20 ms each, which one goes first alternating), and the ratio
 * is the median of the pairs' ratios: a neighbour that slows the machine for a while slows
 * both halves of the pairs it overlaps, so it moves the times but hardly the ratio.  (Timing
 * each case as a separate run of batches, as before, let such swings land on one case only:
 * on the shared 2-core VM the ratio moved by +-15 % between runs.)
 */
static void measure_pair2(const struct bench_opts *o, struct attn_bench *a, const int32_t *ta,
			  struct attn_bench *b, const int32_t *tb, double *ns_a, double *ns_b,
			  double *ratio)
{
	struct bench_case c = {.name = "attn pair", .run = b->run, .arg = b};
	unsigned int pairs = o->quick ? 7 : PAIRS, i;
	double t_a[PAIRS], t_b[PAIRS], rt[PAIRS];
	uint64_t n;

	/* batch size: what bench_measure() settles on for ~20 ms, from the baseline */
	b->tables = tb;
	n = (uint64_t)(20e6 / bench_measure(o, &c)) + 1;
	time_steps(a, ta, n); /* warm-up of the other case too */
	for (i = 0; i < pairs; i++) {
		if (i % 2) {
			t_a[i] = time_steps(a, ta, n);
			t_b[i] = time_steps(b, tb, n);
		} else {
			t_b[i] = time_steps(b, tb, n);
			t_a[i] = time_steps(a, ta, n);
		}
		rt[i] = t_a[i] / t_b[i];
	}
	*ns_a = bench_median(t_a, pairs) / (double)n;
	*ns_b = bench_median(t_b, pairs) / (double)n;
	*ratio = bench_median(rt, pairs);
}

/* paged against contiguous block tables of the same shape */
static void measure_pair(const struct bench_opts *o, struct attn_bench *a, double *paged,
			 double *contig, double *ratio)
{
	measure_pair2(o, a, a->paged, a, a->contig, paged, contig, ratio);
}

struct attn_result {
	double stream, sp, scn, lp, lcn, mp, mcn; /* GB/s stream; ns per step of each case */
	double sr, lr, mr;			  /* paged/contig, median of pair ratios */
	double rp, rcn, rr;			  /* the frame read: ns per pass, its ratio */
	double up, ucn, ur;			  /* the long case in runs of 4 frames */
	double xp, xcn, xr;			  /* sparse: a quarter of a 4x pool */
	double op, ocn, orr;			  /* the long case in table order */
	double yp, ycn, yr; /* 32 layers, shuffled frames, against one layer contiguous */
	double yc, ycr;	    /* 32 layers, consecutive frames, and its ratio to the same */
	double hot;	    /* ns per step of the hot shape (KV in cache) */
	double ls, ms;	    /* long paged (GQA, MHA) / stream bandwidth, median of pair ratios */
};

/* the shapes: 32x512, the long one, the long one in 32 layers, and one in cache */
struct attn_shapes {
	struct attn_bench sh, lg, ly, hot, sp;
};

/* bytes of KV one decode step of @a reads: K and V of every context token, one layer */
static double step_bytes(const struct attn_bench *a)
{
	return (double)a->nseqs * a->ctx * 2 * a->fmt.row_bytes;
}

/*
 * The long case's paged decode against the stream, timed in pairs as paged and contig are
 * (measure_pair2): its bandwidth over the stream's, the median of the pairs' ratios.  The
 * stream's speed drifts from minute to minute on a shared machine (22 to 32 GB/s within an
 * hour on the dev VM), so a stream measured once before and once after the kernel rows let
 * a single run's figure swing by 14 points (52-66 %).
 */
static double versus_stream(const struct bench_opts *o, struct attn_bench *lg)
{
	struct attn_bench st = *lg;
	double ns_k, ns_s, q;

	st.run = run_stream;
	measure_pair2(o, lg, lg->paged, &st, lg->paged, &ns_k, &ns_s, &q);
	lg->err = lg->err ? lg->err : st.err;
	return step_bytes(lg) / ((double)lg->words * 8) / q;
}

/* Every row on nt threads (the kernels' and the stream baseline's). */
static int measure_all(const struct bench_opts *o, struct attn_shapes *S, uint32_t nt,
		       struct attn_result *r)
{
	struct attn_bench *sh = &S->sh, *lg = &S->lg, *ly = &S->ly, *hot = &S->hot;
	struct bench_case sc = {.name = "stream read", .run = run_stream, .arg = lg};
	struct bench_case hc = {.name = "attn hot", .run = run_decode, .arg = hot};
	int err = kvmm_cpu_set_threads(nt);

	if (err)
		return err;
	/* the stream baseline reads the long case's pool: same size, same pages */
	lg->buf = (const uint64_t *)lg->pool;
	lg->words = (size_t)lg->nframes * lg->fmt.page_size / 8;
	lg->threads = nt;
	r->stream = gbps((double)lg->words * 8, bench_measure(o, &sc));
	measure_pair(o, sh, &r->sp, &r->scn, &r->sr);
	measure_pair(o, lg, &r->lp, &r->lcn, &r->lr);
	/* the same in runs of 4 frames (measure_pair times a->paged against contig) */
	swap(lg->paged, lg->runs4);
	measure_pair(o, lg, &r->up, &r->ucn, &r->ur);
	swap(lg->paged, lg->runs4);
	/* frames a quarter of a pool 4x as large, in address order and in block-table order */
	measure_pair(o, &S->sp, &r->xp, &r->xcn, &r->xr);
	kvmm_cpu_decode_by_address = 0;
	measure_pair(o, &S->sp, &r->op, &r->ocn, &r->orr);
	kvmm_cpu_decode_by_address = 1;
	/* the long-context target: paired with the stream */
	r->ls = versus_stream(o, lg);
	/* the same pages read by 8 query heads (no GQA): the least compute per byte */
	lg->hq = KV_HEADS;
	measure_pair(o, lg, &r->mp, &r->mcn, &r->mr);
	r->ms = versus_stream(o, lg);
	lg->hq = Q_HEADS;
	/* no attention: the frames alone, scattered and consecutive */
	lg->run = run_read;
	measure_pair(o, lg, &r->rp, &r->rcn, &r->rr);
	lg->run = run_decode;
	/*
	 * The real layout of a model of 32 layers: one layer's 64 KiB slice of each 2 MiB page,
	 * the pages shuffled, and consecutive (their slices still 2 MiB apart), each against the
	 * one-layer contiguous case (the KV of the layer in one run of memory).
	 */
	if (ly->pool) {
		measure_pair2(o, ly, ly->paged, lg, lg->contig, &r->yp, &r->ycn, &r->yr);
		measure_pair2(o, ly, ly->contig, lg, lg->contig, &r->yc, &r->ycn, &r->ycr);
	}
	/* KV already in cache: what the core's arithmetic allows */
	hot->tables = hot->paged;
	r->hot = bench_measure(o, &hc);
	/* the stream again, after the kernels, and the faster kept, as for paged and contig */
	r->stream = fmax(r->stream, gbps((double)lg->words * 8, bench_measure(o, &sc)));
	return sh->err	   ? sh->err
	       : lg->err   ? lg->err
	       : ly->err   ? ly->err
	       : S->sp.err ? S->sp.err
			   : hot->err;
}

static void report_all(const struct attn_shapes *S, uint32_t nt, const struct attn_result *r)
{
	const struct attn_bench *sh = &S->sh, *lg = &S->lg, *hot = &S->hot;
	double sbytes = step_bytes(sh), lbytes = step_bytes(lg);
	double hot_gbps = gbps(step_bytes(hot), r->hot);
	char name[64], base[32], what[128];

	snprintf(base, sizeof(base), "stream_read_t%u", nt);
	snprintf(name, sizeof(name), "attn.decode_512x32.t%u.paged", nt);
	bench_report(name, gbps(sbytes, r->sp), "GB/s", "contig", gbps(sbytes, r->scn));
	bench_report(name, gbps(sbytes, r->sp), "GB/s", base, r->stream);
	snprintf(name, sizeof(name), "attn.decode_512x32.t%u.step", nt);
	bench_report(name, r->sp / 1e3, "us", "contig", r->scn / 1e3);
	snprintf(name, sizeof(name), "attn.decode_%uk.t%u.paged", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->lp), "GB/s", "contig", gbps(lbytes, r->lcn));
	bench_report(name, gbps(lbytes, r->lp), "GB/s", base, r->stream);
	snprintf(name, sizeof(name), "attn.decode_%uk.t%u.step", lg->ctx / 1024, nt);
	bench_report(name, r->lp / 1e3, "us", "contig", r->lcn / 1e3);
	snprintf(name, sizeof(name), "attn.decode_%uk.t%u.runs4", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->up), "GB/s", "contig", gbps(lbytes, r->ucn));
	bench_report(name, gbps(lbytes, r->up), "GB/s", base, r->stream);
	snprintf(name, sizeof(name), "attn.decode_%uk.t%u.sparse", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->xp), "GB/s", "contig", gbps(lbytes, r->xcn));
	snprintf(name, sizeof(name), "attn.decode_%uk.t%u.table_order", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->op), "GB/s", "contig", gbps(lbytes, r->ocn));
	snprintf(name, sizeof(name), "attn.decode_%uk_mha.t%u.paged", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->mp), "GB/s", "contig", gbps(lbytes, r->mcn));
	bench_report(name, gbps(lbytes, r->mp), "GB/s", base, r->stream);

	if (S->ly.pool) {
		snprintf(name, sizeof(name), "attn.decode_%uk.t%u.layers32", lg->ctx / 1024, nt);
		bench_report(name, gbps(lbytes, r->yp), "GB/s", "contig", gbps(lbytes, r->ycn));
		bench_report(name, gbps(lbytes, r->yp), "GB/s", base, r->stream);
	}
	snprintf(name, sizeof(name), "attn.decode_hot.t%u.paged", nt);
	bench_report(name, hot_gbps, "GB/s", base, r->stream);

	snprintf(name, sizeof(name), "attn.read_%uk.t%u.paged", lg->ctx / 1024, nt);
	bench_report(name, gbps(lbytes, r->rp), "GB/s", "contig", gbps(lbytes, r->rcn));

	snprintf(what, sizeof(what), "attn paged decode slowdown vs contiguous (512x32, %u thr)",
		 nt);
	bench_target(what, (r->sr - 1) * 100, 5, true, "%");
	snprintf(what, sizeof(what),
		 "attn paged decode slowdown vs contiguous (long, shuffled frames that fill their "
		 "pool, so read in contig's order, %u thr)",
		 nt);
	bench_target(what, (r->lr - 1) * 100, 5, true, "%");
	snprintf(what, sizeof(what),
		 "attn paged decode slowdown vs contiguous (long, frames a quarter of a 4x pool, "
		 "%u thr)",
		 nt);
	bench_target(what, (r->xr - 1) * 100, 5, true, "%");
	bench_note("note: decode reads pages in address order (attn.c); the sparse ones in table "
		   "order are %.1f %% slower than contiguous (%u thr; table_order row); the long "
		   "target's frames fill their pool: in address order they are contig's",
		   (r->orr - 1) * 100, nt);
	if (S->ly.pool) {
		snprintf(what, sizeof(what),
			 "attn paged decode slowdown vs contiguous (long, 32 layers, %u thr)", nt);
		bench_target(what, (r->yr - 1) * 100, 5, true, "%");
		bench_note(
			"note: in 32 layers, consecutive 2 MiB pages are %.1f %% slower than "
			"contiguous (%u thr; their slices of a layer are 2 MiB apart either way)",
			(r->ycr - 1) * 100, nt);
	}
	bench_note("note: in runs of 4 frames the long case is %.1f %% slower than contiguous "
		   "(%u thr; runs4 row)",
		   (r->ur - 1) * 100, nt);
	bench_note(
		"note: for comparison, a pure read of the same frames (no attention, the kernels' "
		"prefetch) is %.1f %% slower scattered than consecutive (%u thr; attn.read row)",
		(r->rr - 1) * 100, nt);
	snprintf(what, sizeof(what),
		 "attn long-context paged decode vs streaming read (%u thr both)", nt);
	bench_target(what, r->ls * 100, 60, false, "%");
	snprintf(what, sizeof(what),
		 "attn long-context paged decode vs streaming read (MHA, %u thr both)", nt);
	bench_target(what, r->ms * 100, 60, false, "%");
	bench_note("note: the two targets above pair each batch of the kernel with one of the "
		   "stream and take the median of the pairs' ratios (%u thr); the rows divide the "
		   "kernel's median by the faster of two stream runs",
		   nt);
	bench_note("note: with its KV in cache the kernel reads %.1f GB/s = %.0f %% of the "
		   "stream (%u thr; decode_hot row): the ceiling this core's arithmetic sets for "
		   "the long-context target%s",
		   hot_gbps, hot_gbps / r->stream * 100, nt,
		   hot_gbps / r->stream < 0.6 ? ", below 60 % on this machine" : "");
}

int bench_suite_attn(const struct bench_opts *o)
{
	uint32_t long_ctx = o->quick ? 8192 : 32768, nt = bench_threads(), saved;
	struct attn_result r1, rn;
	struct attn_shapes S;
	const struct {
		const char *what;
		struct attn_bench *a;
		uint32_t nseqs, ctx, layers, spread;
	} shape[] = {
		{"short", &S.sh, 32, 512, 1, 1},
		{"long", &S.lg, 1, long_ctx, 1, 1},
		{"32-layer", &S.ly, 1, long_ctx, 32, 1},
		{"hot", &S.hot, nt, 1024, 1, 1}, /* 4 MiB of KV a thread, in L2 and L3 */
		{"sparse", &S.sp, 1, long_ctx, 1, 4},
	};
	char thr[32];
	int err = 0;
	size_t i;

	memset(&S, 0, sizeof(S));
	for (i = 0; i < ARRAY_SIZE(shape) && !err; i++) {
		err = make_shape(shape[i].a, shape[i].nseqs, shape[i].ctx, Q_HEADS, shape[i].layers,
				 shape[i].spread);
		if (err == -ENOMEM && shape[i].a == &S.ly) {
			/* its pool is address space (32 x the long case's): optional */
			bench_note("note: no 32-layer rows: %s shape: %s", shape[i].what,
				   strerror(-err));
			err = 0;
		} else if (err) {
			fprintf(stderr, "kvmm-bench attn: %s shape: %s\n", shape[i].what,
				strerror(-err));
		}
	}
	if (err)
		goto out;
	snprintf(thr, sizeof(thr), nt > 1 ? "1 and %u threads" : "1 thread", nt);
	bench_note("attn: isa %s, fp16, %u KV heads x dim %u, %u q heads, %u tokens/page "
		   "(%llu KiB a layer), %s",
		   kvmm_cpu_isa_name(kvmm_cpu_isa_get()), KV_HEADS, HEAD_DIM, Q_HEADS, TPP,
		   (unsigned long long)(S.lg.fmt.page_size >> 10), thr);

	saved = kvmm_cpu_get_threads();
	err = measure_all(o, &S, 1, &r1);
	if (!err && nt > 1)
		err = measure_all(o, &S, nt, &rn);
	kvmm_cpu_set_threads(saved);
	if (err) {
		fprintf(stderr, "kvmm-bench attn: decode failed: %s\n", strerror(-err));
		goto out;
	}
	report_all(&S, 1, &r1);
	if (nt > 1)
		report_all(&S, nt, &rn);
	err = bench_attn_steps(o);
out:
	for (i = 0; i < ARRAY_SIZE(shape); i++)
		free_shape(shape[i].a);
	return err;
}
