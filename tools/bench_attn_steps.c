// SPDX-License-Identifier: MIT
/*
 * tools/bench_attn_steps.c - part of `kvmm-bench attn`: the arithmetic efficiency of the CPU
 * decode's three steps, against the core's FMA rate measured in the same run.
 *
 * One chunk of 64 fp16 rows in cache, the attn suite's shape (8 KV heads x dim 128, rows of
 * 2 KiB, 4 query heads per KV head), every head in turn as attend() does, through the ops of
 * the ISA in use (kvmm_cpu_ops()):
 *
 *   attn.steps_scores.t1   ns per K row of one head: the 4 queries' dot products
 *   attn.steps_sums.t1     ns per V row of one head: the 4 queries' weighted sums
 *   attn.steps_all.t1      ns per K and V row of one head: scores, softmax and sums
 *   baseline fma_bound     the same rows' multiply-adds (4 x dim each) at the rate of twelve
 *                          independent chains of the ISA's widest FMA, timed here once per
 *                          round of the steps (the best kept)
 *
 * ratio = value / bound: how many times the FMAs alone the step takes (1 is the ceiling;
 * the softmax and the horizontal sums of the scores are what the bound leaves out).  Best of
 * several batches: the work is in cache and bound by the core, so the fastest batch is the
 * one a neighbour disturbed least.  Documentation/kernels/cpu.md explains the figures.
 *
 * And prefill, whole, through kvmm_cpu_paged_prefill() on one thread: one sequence of
 * PF_NEW new tokens after PF_CACHED cached ones (--quick: a quarter of each) in shuffled
 * frames of the suite's format, against the same bound for all its multiply-adds (each
 * query head and token it sees: 2 x dim, the scores and the sums), the FMA loop timed
 * between the calls:
 *
 *   attn.prefill_<new>x<ctx>.t1   ms per call, baseline fma_bound (ms)
 */
#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kernels/cpu/cpu.h"
#include "kernels/kernels.h"

#define ST_HEADS ATTN_KV_HEADS
#define ST_DIM ATTN_HEAD_DIM
#define ST_NQ (ATTN_Q_HEADS / ATTN_KV_HEADS) /* queries per KV head */
#define ST_ROWS 64			     /* one chunk */
#define ST_STRIDE (ST_HEADS * ST_DIM * 2)
#define FMA_ITERS (1u << 21)
#define PF_NEW 128
#define PF_CACHED 1920
#define PF_TPP 16

/*
 * name(): floats multiplied and added per ns by twelve independent chains of the FMA of
 * vector type vec (lanes floats), in a function compiled for target_ (the ISA's own flags:
 * this file is built without them and calls it only where kvmm_cpu_isa_get() said yes).
 * The chains start apart, or the compiler merges them into one, and their operands come
 * from volatiles, or it folds a chain whose start is a fixed point of the FMA.
 */
static volatile float fma_m = 0.9999999f, fma_c = 1e-7f;

#define FMA_RATE(name, target_, vec, lanes, set1, fmadd, add, storeu)           \
	__attribute__((target(target_))) static double name(void)               \
	{                                                                       \
		vec m = set1(fma_m), c = set1(fma_c), a[12];                    \
		float v[lanes], sum = 0;                                        \
		uint64_t t0, ns;                                                \
                                                                                \
		for (int i = 0; i < 12; i++)                                    \
			a[i] = set1((float)(i + 1));                            \
		t0 = bench_now_ns();                                            \
		for (uint32_t k = 0; k < FMA_ITERS; k++) {                      \
			a[0] = fmadd(a[0], m, c), a[1] = fmadd(a[1], m, c);     \
			a[2] = fmadd(a[2], m, c), a[3] = fmadd(a[3], m, c);     \
			a[4] = fmadd(a[4], m, c), a[5] = fmadd(a[5], m, c);     \
			a[6] = fmadd(a[6], m, c), a[7] = fmadd(a[7], m, c);     \
			a[8] = fmadd(a[8], m, c), a[9] = fmadd(a[9], m, c);     \
			a[10] = fmadd(a[10], m, c), a[11] = fmadd(a[11], m, c); \
		}                                                               \
		ns = bench_now_ns() - t0;                                       \
		for (int i = 1; i < 12; i++)                                    \
			a[0] = add(a[0], a[i]);                                 \
		storeu(v, a[0]);                                                \
		for (int i = 0; i < (lanes); i++)                               \
			sum += v[i];                                            \
		bench_use((uint64_t)sum);                                       \
		return 12.0 * (lanes)*FMA_ITERS / (double)(ns ? ns : 1);        \
	}

FMA_RATE(fma_rate_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps,
	 _mm512_storeu_ps)
FMA_RATE(fma_rate_avx2, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps,
	 _mm256_storeu_ps)

struct steps {
	const struct kvmm_cpu_ops *ops;
	struct kvmm_cpu_seg seg;
	struct kvmm_cpu_chunk ch;
	char *k, *v;
	float *q, *acc, *s, m[ST_NQ], l[ST_NQ], corr[ST_NQ];
};

enum {
	STEP_SCORES,
	STEP_SUMS,
	STEP_ALL,
	STEP_COUNT
};

/* one pass of @what over every head of the chunk */
static void steps_pass(struct steps *st, int what)
{
	for (uint32_t h = 0; h < ST_HEADS; h++) {
		st->ch.hoff = (uint64_t)h * ST_DIM * 2;
		if (what != STEP_SUMS)
			st->ops->qk(&st->ch, st->q, ST_DIM, ST_NQ, st->s, ST_ROWS);
		if (what == STEP_ALL)
			st->ops->softmax(st->s, ST_ROWS, ST_NQ, ST_ROWS, st->m, st->l, st->corr);
		if (what != STEP_SCORES)
			st->ops->pv(&st->ch, st->acc, ST_DIM, st->s, ST_ROWS, ST_NQ, st->corr);
	}
	bench_use_ptr(st->acc);
	bench_use_ptr(st->s);
}

/*
 * Best ns per row (of one head) of each step over @batches rounds of @n passes each, the
 * steps taking turns in every round (so a slow moment of the machine, or the clock settling
 * after the FMA loop, does not land on one step only), and in every round one run of the
 * FMA loop too: *rate is the best of them, so that the bound is taken over the same span of
 * time as the steps (one run, or five in a row, could all fall in a slow moment and put the
 * steps above 100 % of it).
 */
static void steps_time(struct steps *st, double ns[STEP_COUNT], unsigned int batches,
		       unsigned int n, double (*fma_rate)(void), double *rate)
{
	*rate = 0;
	for (int w = 0; w < STEP_COUNT; w++) {
		ns[w] = INFINITY;
		steps_pass(st, w); /* warm-up */
	}
	for (unsigned int b = 0; b < batches; b++) {
		*rate = fmax(*rate, fma_rate());
		for (int w = 0; w < STEP_COUNT; w++) {
			uint64_t t0 = bench_now_ns();

			for (unsigned int i = 0; i < n; i++)
				steps_pass(st, w);
			ns[w] = fmin(ns[w], (double)(bench_now_ns() - t0));
		}
	}
	for (int w = 0; w < STEP_COUNT; w++)
		ns[w] /= (double)n * ST_HEADS * ST_ROWS;
}

/* fp16 values in [0.5, 1) with random mantissas (x: the generator's state) */
static void fill_fp16(uint16_t *p, size_t n, uint64_t *x)
{
	for (size_t i = 0; i < n; i++) {
		*x = *x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint16_t)(0x3800 | ((*x >> 33) & 0x3ff));
	}
}

/* prefill against the FMA bound (see the top of this file); 0 or -ENOMEM */
static int bench_prefill(const struct bench_opts *o, double (*fma_rate)(void))
{
	const uint32_t nnew = o->quick ? PF_NEW / 4 : PF_NEW;
	const uint32_t ctx = nnew + (o->quick ? PF_CACHED / 4 : PF_CACHED);
	const uint32_t nb = (ctx + PF_TPP - 1) / PF_TPP, runs = o->quick ? 3 : 9;
	struct kvmm_attn_batch b;
	struct kvmm_fmt f;
	char name[64];
	int32_t *table = malloc(sizeof(int32_t) * nb);
	float *q = malloc(sizeof(float) * nnew * ATTN_Q_HEADS * ST_DIM);
	float *out = malloc(sizeof(float) * nnew * ATTN_Q_HEADS * ST_DIM);
	char *pool = NULL;
	uint64_t x = 0x2545f4914f6cdd1dull, t0;
	double best = INFINITY, rate = 0, fmas = 0;
	int err = -ENOMEM;

	if (kvmm_fmt_init(&f, &(struct kvmm_format){1, ATTN_KV_HEADS, ST_DIM, KVMM_DTYPE_FP16},
			  (uint64_t)PF_TPP * ST_STRIDE * 2))
		goto out;
	pool = aligned_alloc(64, (size_t)nb * f.page_size);
	if (!table || !q || !out || !pool)
		goto out;
	fill_fp16((uint16_t *)pool, (size_t)nb * f.page_size / 2, &x);
	for (uint32_t i = 0; i < nb; i++)
		table[i] = (int32_t)i;
	for (uint32_t i = nb - 1; i > 0; i--) {
		uint32_t j, t;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		j = (uint32_t)((x >> 33) % (i + 1));
		t = (uint32_t)table[i];
		table[i] = table[j];
		table[j] = (int32_t)t;
	}
	for (size_t i = 0; i < (size_t)nnew * ATTN_Q_HEADS * ST_DIM; i++)
		q[i] = (float)((i * 37) % 101) / 1000.0f;
	memset(&b, 0, sizeof(b));
	b.kv = (struct kvmm_kv_pages){pool, &f, 0, nb};
	b.nr_seqs = 1;
	b.num_q_heads = ATTN_Q_HEADS;
	b.block_tables = table;
	b.max_blocks = nb;
	b.ctx_lens = &ctx;
	b.q_lens = &nnew;
	err = kvmm_cpu_paged_prefill(&b, q, out); /* and the warm-up */
	for (uint32_t r = 0; r < runs && !err; r++) {
		rate = fmax(rate, fma_rate());
		t0 = bench_now_ns();
		err = kvmm_cpu_paged_prefill(&b, q, out);
		best = fmin(best, (double)(bench_now_ns() - t0));
		bench_use_ptr(out);
	}
	if (err) {
		fprintf(stderr, "kvmm-bench attn: prefill: %s\n", strerror(-err));
		goto out;
	}
	/* query head r of new token i sees ctx - nnew + i + 1 tokens: 2 x dim each */
	for (uint32_t i = 0; i < nnew; i++)
		fmas += (double)(ctx - nnew + i + 1) * ATTN_Q_HEADS * 2 * ST_DIM;
	snprintf(name, sizeof(name), "attn.prefill_%ux%u.t1", nnew, ctx);
	bench_report(name, best / 1e6, "ms", "fma_bound", fmas / rate / 1e6);
	bench_note("note: prefill (%u new tokens after %u, GQA %u, one thread) runs at %.0f %% of "
		   "the FMA bound (%.1f G multiply-adds of %.1f G a second)",
		   nnew, ctx - nnew, ST_NQ, fmas / rate / best * 100, fmas / 1e9, rate);
out:
	free(table);
	free(q);
	free(out);
	free(pool);
	return err;
}

int bench_attn_steps(const struct bench_opts *o)
{
	static const char *const names[STEP_COUNT] = {"attn.steps_scores.t1", "attn.steps_sums.t1",
						      "attn.steps_all.t1"};
	enum kvmm_cpu_isa isa = kvmm_cpu_isa_get();
	unsigned int batches = o->quick ? 5 : 40, n = o->quick ? 20 : 100;
	struct steps st = {.ops = kvmm_cpu_ops(KVMM_DTYPE_FP16)};
	double rate, bound, ns[STEP_COUNT];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	int err = 0;

	if (isa != KVMM_CPU_ISA_AVX512 && isa != KVMM_CPU_ISA_AVX2) {
		bench_note("note: no steps rows: the scalar kernels have no FMA bound to compare");
		return 0;
	}
	st.k = aligned_alloc(64, (size_t)ST_ROWS * ST_STRIDE);
	st.v = aligned_alloc(64, (size_t)ST_ROWS * ST_STRIDE);
	st.q = aligned_alloc(64, sizeof(float) * ST_NQ * ST_DIM);
	st.acc = aligned_alloc(64, sizeof(float) * ST_NQ * ST_DIM);
	st.s = aligned_alloc(64, sizeof(float) * ST_NQ * ST_ROWS);
	if (!st.k || !st.v || !st.q || !st.acc || !st.s) {
		fprintf(stderr, "kvmm-bench attn: steps: %s\n", strerror(ENOMEM));
		err = -ENOMEM;
		goto out;
	}
	/* fp16 values in [0.5, 1) with random mantissas; queries small, so no exp overflows */
	fill_fp16((uint16_t *)st.k, (size_t)ST_ROWS * ST_STRIDE / 2, &x);
	fill_fp16((uint16_t *)st.v, (size_t)ST_ROWS * ST_STRIDE / 2, &x);
	for (uint32_t i = 0; i < ST_NQ * ST_DIM; i++) {
		st.q[i] = (float)((i * 37) % 101) / 1000.0f;
		st.acc[i] = 0.0f;
	}
	for (uint32_t i = 0; i < ST_NQ; i++) {
		st.m[i] = -INFINITY;
		st.l[i] = 0.0f;
		st.corr[i] = 1.0f;
	}
	st.seg = (struct kvmm_cpu_seg){.k = st.k, .v = st.v, .n = ST_ROWS};
	st.ch = (struct kvmm_cpu_chunk){.seg = &st.seg,
					.stride = ST_STRIDE,
					.n = ST_ROWS,
					.dim = ST_DIM,
					.gs = ST_DIM,
					.l1 = true};
	/* weights for the sums alone: one softmax step over real scores */
	st.ops->qk(&st.ch, st.q, ST_DIM, ST_NQ, st.s, ST_ROWS);
	st.ops->softmax(st.s, ST_ROWS, ST_NQ, ST_ROWS, st.m, st.l, st.corr);
	steps_time(&st, ns, batches, n,
		   isa == KVMM_CPU_ISA_AVX512 ? fma_rate_avx512 : fma_rate_avx2, &rate);

	/* multiply-adds of one row of one head: ST_NQ queries x ST_DIM elements */
	bound = ST_NQ * ST_DIM / rate;
	bench_report(names[STEP_SCORES], ns[STEP_SCORES], "ns/row", "fma_bound", bound);
	bench_report(names[STEP_SUMS], ns[STEP_SUMS], "ns/row", "fma_bound", bound);
	bench_report(names[STEP_ALL], ns[STEP_ALL], "ns/row", "fma_bound", 2 * bound);
	bench_note("note: in cache (one chunk of %u fp16 rows, GQA %u, dim %u, isa %s) the decode "
		   "steps run at %.0f %% of the FMA bound (%.1f G float multiply-adds a second "
		   "measured here): scores %.0f %%, sums %.0f %%; all - scores - sums = %+.1f ns a "
		   "row (the softmax's share; under 0 when the steps overlap more run together "
		   "than apart)",
		   ST_ROWS, ST_NQ, ST_DIM, kvmm_cpu_isa_name(isa), 2 * bound / ns[STEP_ALL] * 100,
		   rate, bound / ns[STEP_SCORES] * 100, bound / ns[STEP_SUMS] * 100,
		   ns[STEP_ALL] - ns[STEP_SCORES] - ns[STEP_SUMS]);
	{
		uint32_t saved = kvmm_cpu_get_threads();

		err = kvmm_cpu_set_threads(1);
		if (!err)
			err = bench_prefill(o, isa == KVMM_CPU_ISA_AVX512 ? fma_rate_avx512
									  : fma_rate_avx2);
		kvmm_cpu_set_threads(saved);
	}
out:
	free(st.k);
	free(st.v);
	free(st.q);
	free(st.acc);
	free(st.s);
	return err;
}
