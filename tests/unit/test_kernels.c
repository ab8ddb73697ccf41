// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_kernels.c - unit tests for the CPU kernels (kernels/cpu/).
 *
 * Every attention case is built from fresh random inputs: a format (layers, KV heads, head
 * dim 64/128/odd, dtype, int8 group, tokens per page from 1 up), a ragged batch of sequences
 * whose blocks are shuffled frames of a pool filled with random garbage (so a wrong address
 * reads NaNs or noise), K and V written with kvmm_cpu_reshape_and_cache in a shuffled order
 * with padding slots.  The reference is contiguous fp64 attention over the values read back
 * from the pages by this file's own layout arithmetic and conversions; every ISA the CPU runs
 * is compared with it.  Two bounds per output element (DESIGN in Documentation/kernels/cpu.md):
 *
 *   kernel   |out - ref(stored values)| <= TOL_KERNEL * vmax      (any dtype: the kernel's
 *            fp32 arithmetic; vmax = max |v| over the tokens the query sees)
 *   storage  |out - ref(unrounded fp32 inputs)| <= dv + (exp(2 ds) - 1) * vmax + kernel bound
 *            where each stored element is within e(x) of its input (fp32 0, fp16 2^-11 |x| +
 *            2^-25, bf16 2^-8 |x|, int8 scale/2), dv = max e(v) and
 *            ds = max_t scale * sum_i |q_i| e(k_ti) (a softmax of scores perturbed by at most
 *            ds moves each weight by a factor within exp(+-2 ds)).
 *
 * Seeds: KVMM_TEST_SEED=<n> reruns a failure; every failure message prints the seed and case.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h" /* kvmm_cpu_split_min_bytes, kvmm_cpu_prefetch_chunks */
#include "kernels/kernels.h"

/* kernel bound relative to vmax, in fp32 (scores up to a few hundred in the large-q cases) */
#define TOL_KERNEL 2e-6

static uint64_t base_seed;
static uint32_t extra_frames; /* build_case: spare frames in the pool, to spread the tables */
static uint64_t rng_state;
static char case_desc[256];

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rnd(uint32_t n)
{
	return (uint32_t)(rng_next() % n);
}

/* uniform in [-a, a) */
static float rndf(float a)
{
	return (float)(((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0) * a);
}

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			print_error("seed %llu case %s: ", (unsigned long long)base_seed, \
				    case_desc);                                           \
			print_error(__VA_ARGS__);                                         \
			print_error("\n");                                                \
			fail_msg("%s", #cond);                                            \
		}                                                                         \
	} while (0)

static int group_setup(void **state)
{
	const char *env = getenv("KVMM_TEST_SEED");

	(void)state;
	base_seed =
		env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	print_message("test_kernels: seed %llu (KVMM_TEST_SEED to repeat)\n",
		      (unsigned long long)base_seed);
	return 0;
}

/* ---- this file's own view of the page layout and the element formats ---------------- */

static uint32_t esize(uint32_t dt)
{
	return dt == KVMM_DTYPE_FP32 ? 4 : dt == KVMM_DTYPE_INT8 ? 1 : 2;
}

static double half_to_double(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 0x1f)
		return m ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY);
	v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return (h & 0x8000) ? -v : v;
}

static double bf16_to_double(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

struct layout {
	uint64_t slab, row, soff, srow; /* slab bytes, row bytes, scale offset, scale row bytes */
};

static struct layout layout_of(const struct kvmm_fmt *f)
{
	struct layout l;
	uint64_t data;

	l.row = (uint64_t)f->kv_heads * f->head_dim * esize(f->dtype);
	l.srow = f->dtype == KVMM_DTYPE_INT8
			 ? (uint64_t)f->kv_heads * (f->head_dim / f->quant_group) * 4
			 : 0;
	data = l.row * f->tokens_per_page;
	l.soff = l.srow ? (data + 3) / 4 * 4 : 0;
	l.slab = l.soff ? l.soff + l.srow * f->tokens_per_page : data;
	return l;
}

/* stored element (layer, kv, row, head, dim) of the page at pg, as a double */
static double stored(const struct kvmm_fmt *f, const struct layout *l, const char *pg,
		     uint32_t layer, uint32_t kv, uint32_t row, uint32_t h, uint32_t d)
{
	const char *slab = pg + ((uint64_t)layer * 2 + kv) * l->slab;
	uint64_t i = (uint64_t)h * f->head_dim + d;
	const char *p = slab + row * l->row + i * esize(f->dtype);
	uint16_t u16;
	float f32, sc;

	switch (f->dtype) {
	case KVMM_DTYPE_FP32:
		memcpy(&f32, p, 4);
		return f32;
	case KVMM_DTYPE_FP16:
		memcpy(&u16, p, 2);
		return half_to_double(u16);
	case KVMM_DTYPE_BF16:
		memcpy(&u16, p, 2);
		return bf16_to_double(u16);
	default:
		memcpy(&sc,
		       slab + l->soff + row * l->srow +
			       ((uint64_t)h * (f->head_dim / f->quant_group) + d / f->quant_group) *
				       4,
		       4);
		return (double)*(const int8_t *)p * sc;
	}
}

/* most an input x may move when stored (fp16/bf16 round to nearest; int8 half a step) */
static double elem_err(uint32_t dt, double x, double int8_scale)
{
	switch (dt) {
	case KVMM_DTYPE_FP32:
		return 0;
	case KVMM_DTYPE_FP16:
		return fabs(x) * 0x1p-11 + 0x1p-25;
	case KVMM_DTYPE_BF16:
		return fabs(x) * 0x1p-8 + 0x1p-134;
	default:
		/* half a step, plus the fp32 rounding of x / scale (127 * 2^-24 steps at most) */
		return int8_scale * (0.5 + 1e-5) + 1e-30;
	}
}

/* ---- a random attention case ---------------------------------------------------------- */

struct tcase {
	struct kvmm_fmt fmt;
	struct layout lay;
	uint32_t layer, hq, nseqs, max_blocks, nframes;
	char *pool;
	int32_t *tables;
	uint32_t *ctx, *qlen;
	float *kx, *vx; /* unrounded inputs, [seq][token][head][dim] (max_ctx tokens each) */
	double *kmax;	/* int8: max |x| of each input group: [seq][token][kv][head][group] */
	uint32_t max_ctx;
	float qamp;
};

static size_t tok_index(const struct tcase *c, uint32_t s, uint32_t t)
{
	return ((size_t)s * c->max_ctx + t) * c->fmt.kv_heads * c->fmt.head_dim;
}

static void make_fmt(struct tcase *c, uint32_t layers, uint32_t kvh, uint32_t dim, uint32_t dt,
		     uint32_t gs, uint32_t tpp)
{
	struct kvmm_fmt big;
	uint64_t page;

	assert_int_equal(
		kvmm_fmt_init(&big, &(struct kvmm_format){layers, kvh, dim, dt, gs}, 1ull << 30),
		0);
	/* room for tpp tokens plus the int8 padding (under 4 bytes a slab) */
	page = (tpp * big.token_bytes + 8ull * layers + 63) / 64 * 64;
	assert_int_equal(
		kvmm_fmt_init(&c->fmt, &(struct kvmm_format){layers, kvh, dim, dt, gs}, page), 0);
	/* rounding the page to 64 bytes (as real pools are aligned) may fit a token or two more */
	assert_true(c->fmt.tokens_per_page >= tpp);
	c->lay = layout_of(&c->fmt);
}

/* Build the pool, tables and inputs, and write K/V through reshape_and_cache. */
static void build_case(struct tcase *c, uint32_t nseqs, const uint32_t *ctx, const uint32_t *qlen)
{
	const struct kvmm_fmt *f = &c->fmt;
	uint32_t tpp = f->tokens_per_page, nblk = 0, *perm, i, t, s;
	size_t row = (size_t)f->kv_heads * f->head_dim, ntok = 0, n;
	struct kvmm_kv_pages kv;
	int64_t *slots;
	float *kb, *vb;
	uint32_t *order;

	c->nseqs = nseqs;
	c->ctx = calloc(nseqs, sizeof(uint32_t));
	c->qlen = calloc(nseqs, sizeof(uint32_t));
	c->max_ctx = 1;
	c->max_blocks = 1;
	for (s = 0; s < nseqs; s++) {
		c->ctx[s] = ctx[s];
		c->qlen[s] = qlen ? qlen[s] : 0;
		c->max_ctx = c->max_ctx > ctx[s] ? c->max_ctx : ctx[s];
		nblk += (ctx[s] + tpp - 1) / tpp;
		ntok += ctx[s];
	}
	c->max_blocks = (c->max_ctx + tpp - 1) / tpp + rnd(3);
	c->nframes = nblk + 1 + rnd(4) + extra_frames;
	c->pool = aligned_alloc(64, c->nframes * f->page_size);
	assert_non_null(c->pool);
	for (n = 0; n < c->nframes * f->page_size; n++)
		c->pool[n] = (char)rng_next();
	/* shuffled frames: no sequence's blocks are consecutive or in order */
	perm = malloc(c->nframes * sizeof(uint32_t));
	for (i = 0; i < c->nframes; i++)
		perm[i] = i;
	for (i = c->nframes - 1; i > 0; i--) {
		uint32_t j = rnd(i + 1), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	c->tables = malloc((size_t)nseqs * c->max_blocks * sizeof(int32_t));
	for (i = 0; i < nseqs * c->max_blocks; i++)
		c->tables[i] = KVMM_BLOCK_NONE;
	nblk = 0;
	for (s = 0; s < nseqs; s++)
		for (i = 0; i < (ctx[s] + tpp - 1) / tpp; i++)
			c->tables[s * c->max_blocks + i] = (int32_t)perm[nblk++];
	free(perm);

	c->kx = malloc((size_t)nseqs * c->max_ctx * row * sizeof(float));
	c->vx = malloc((size_t)nseqs * c->max_ctx * row * sizeof(float));
	c->kmax = calloc((size_t)nseqs * c->max_ctx * 2 * row, sizeof(double));
	for (n = 0; n < (size_t)nseqs * c->max_ctx * row; n++) {
		/* a few exact zeros and tiny values exercise fp16 subnormals and zero groups */
		uint32_t r = rnd(64);

		c->kx[n] = r == 0 ? 0.0f : r == 1 ? rndf(1e-6f) : rndf(1.0f);
		r = rnd(64);
		c->vx[n] = r == 0 ? 0.0f : r == 1 ? rndf(1e-6f) : rndf(1.0f);
	}
	if (f->dtype == KVMM_DTYPE_INT8) {
		for (s = 0; s < nseqs; s++)
			for (t = 0; t < c->max_ctx; t++)
				for (i = 0; i < row; i++) {
					size_t g = i / f->quant_group;
					size_t base = (((size_t)s * c->max_ctx + t) * 2) * row;
					double *km = &c->kmax[base + g];
					double *vm = &c->kmax[base + row + g];

					*km = fmax(*km, fabs(c->kx[tok_index(c, s, t) + i]));
					*vm = fmax(*vm, fabs(c->vx[tok_index(c, s, t) + i]));
				}
	}

	/* write every token once, in a shuffled order, in batches with padding slots */
	order = malloc(ntok * 2 * sizeof(uint32_t));
	n = 0;
	for (s = 0; s < nseqs; s++)
		for (t = 0; t < ctx[s]; t++) {
			order[2 * n] = s;
			order[2 * n + 1] = t;
			n++;
		}
	for (i = ntok > 1 ? (uint32_t)ntok - 1 : 0; i > 0; i--) {
		uint32_t j = rnd(i + 1), a = order[2 * i], b = order[2 * i + 1];

		order[2 * i] = order[2 * j];
		order[2 * i + 1] = order[2 * j + 1];
		order[2 * j] = a;
		order[2 * j + 1] = b;
	}
	kv = (struct kvmm_kv_pages){c->pool, f, c->layer, c->nframes};
	slots = malloc(40 * sizeof(int64_t));
	kb = malloc(40 * row * sizeof(float));
	vb = malloc(40 * row * sizeof(float));
	for (n = 0; n < ntok;) {
		uint32_t cnt = 0, want = 1 + rnd(32);

		while (cnt < want && n < ntok) {
			if (rnd(8) == 0) {
				slots[cnt] = -1; /* padding: skipped */
				memset(kb + cnt * row, 0x7f, row * sizeof(float));
				memset(vb + cnt * row, 0x7f, row * sizeof(float));
			} else {
				s = order[2 * n];
				t = order[2 * n + 1];
				slots[cnt] = kvmm_kv_slot(f, c->tables[s * c->max_blocks + t / tpp],
							  t % tpp);
				memcpy(kb + cnt * row, c->kx + tok_index(c, s, t),
				       row * sizeof(float));
				memcpy(vb + cnt * row, c->vx + tok_index(c, s, t),
				       row * sizeof(float));
				n++;
			}
			cnt++;
		}
		assert_int_equal(kvmm_cpu_reshape_and_cache(&kv, cnt, slots, kb, vb), 0);
	}
	free(order);
	free(slots);
	free(kb);
	free(vb);
}

static void free_case(struct tcase *c)
{
	free(c->pool);
	free(c->tables);
	free(c->ctx);
	free(c->qlen);
	free(c->kx);
	free(c->vx);
	free(c->kmax);
}

static const char *frame_of(const struct tcase *c, uint32_t s, uint32_t t)
{
	return c->pool + (uint64_t)c->tables[s * c->max_blocks + t / c->fmt.tokens_per_page] *
				 c->fmt.page_size;
}

/*
 * Reference for query q of sequence s, query head hq, seeing tokens [0, limit): out_ref from
 * the stored values, out_exact from the unrounded inputs, the two bounds of the file comment.
 */
static void reference(const struct tcase *c, uint32_t s, uint32_t hq, const float *q,
		      uint32_t limit, double *out_ref, double *out_exact, double *tol_kernel,
		      double *tol_store, double scale)
{
	const struct kvmm_fmt *f = &c->fmt;
	uint32_t D = f->head_dim, h = hq / (c->hq / f->kv_heads), tpp = f->tokens_per_page;
	uint32_t G = f->dtype == KVMM_DTYPE_INT8 ? f->quant_group : D;
	double *sr = malloc(limit * sizeof(double)), *sx = malloc(limit * sizeof(double));
	double mr = -INFINITY, mx = -INFINITY, lr = 0, lx = 0, vmax = 0, ds = 0, dv = 0, sabs = 0;
	size_t row = (size_t)f->kv_heads * D;

	for (uint32_t d = 0; d < D; d++)
		out_ref[d] = out_exact[d] = 0;
	for (uint32_t t = 0; t < limit; t++) {
		const char *pg = frame_of(c, s, t);
		const float *kx = c->kx + tok_index(c, s, t) + (size_t)h * D;
		const double *km = c->kmax + ((size_t)s * c->max_ctx + t) * 2 * row;
		double a = 0, b = 0, e = 0, ab = 0;

		for (uint32_t d = 0; d < D; d++) {
			double ks = stored(f, &c->lay, pg, c->layer, 0, t % tpp, h, d);

			a += (double)q[d] * ks;
			ab += fabs((double)q[d] * ks);
			b += (double)q[d] * kx[d];
			e += fabs(q[d]) * elem_err(f->dtype, kx[d], km[(h * D + d) / G] / 127);
		}
		sr[t] = a * scale;
		sx[t] = b * scale;
		ds = fmax(ds, e * scale);
		sabs = fmax(sabs, ab * scale);
		mr = fmax(mr, sr[t]);
		mx = fmax(mx, sx[t]);
	}
	for (uint32_t t = 0; t < limit; t++) {
		const char *pg = frame_of(c, s, t);
		const float *vx = c->vx + tok_index(c, s, t) + (size_t)h * D;
		const double *vm = c->kmax + ((size_t)s * c->max_ctx + t) * 2 * row + row;
		double pr = exp(sr[t] - mr), px = exp(sx[t] - mx);

		lr += pr;
		lx += px;
		for (uint32_t d = 0; d < D; d++) {
			double vs = stored(f, &c->lay, pg, c->layer, 1, t % tpp, h, d);

			out_ref[d] += pr * vs;
			out_exact[d] += px * vx[d];
			vmax = fmax(vmax, fmax(fabs(vs), fabs(vx[d])));
			dv = fmax(dv, elem_err(f->dtype, vx[d], vm[(h * D + d) / G] / 127));
		}
	}
	for (uint32_t d = 0; d < D; d++) {
		out_ref[d] = limit ? out_ref[d] / lr : 0;
		out_exact[d] = limit ? out_exact[d] / lx : 0;
	}
	/* fp32 scores: error about sqrt(D) u sum |q k| (u = 2^-24), with a factor 2 of margin */
	*tol_kernel = (TOL_KERNEL + expm1(2 * 2 * sqrt(D) * 0x1p-24 * sabs)) * vmax + 1e-30;
	*tol_store = dv + expm1(2 * ds) * vmax + *tol_kernel;
	free(sr);
	free(sx);
}

/* Compare out (nq query rows [row][hq][D]) with the reference for every supported ISA. */
static void check_rows(const struct tcase *c, const float *q, float *out, bool prefill,
		       double scale, double *worst)
{
	const struct kvmm_fmt *f = &c->fmt;
	uint32_t D = f->head_dim, qrow = 0;
	double *ref = malloc(D * sizeof(double)), *ex = malloc(D * sizeof(double));
	struct kvmm_attn_batch b = {
		.kv = {c->pool, f, c->layer, c->nframes},
		.nr_seqs = c->nseqs,
		.num_q_heads = c->hq,
		.block_tables = c->tables,
		.max_blocks = c->max_blocks,
		.ctx_lens = c->ctx,
		.q_lens = prefill ? c->qlen : NULL,
		.scale = scale == 1.0 / sqrt(D) ? 0.0f : (float)scale,
	};
	size_t nrows = 0;
	float **outs = calloc(KVMM_CPU_ISA_COUNT, sizeof(float *));

	for (uint32_t s = 0; s < c->nseqs; s++)
		nrows += prefill ? c->qlen[s] : 1;
	for (int isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++) {
		if (!kvmm_cpu_isa_supported(isa))
			continue;
		assert_int_equal(kvmm_cpu_isa_set(isa), 0);
		outs[isa] = malloc(nrows * c->hq * D * sizeof(float) + 1);
		for (size_t i = 0; i < nrows * c->hq * D; i++)
			outs[isa][i] = NAN;
		if (prefill)
			assert_int_equal(kvmm_cpu_paged_prefill(&b, q, outs[isa]), 0);
		else
			assert_int_equal(kvmm_cpu_paged_decode(&b, q, outs[isa]), 0);
	}
	for (uint32_t s = 0; s < c->nseqs; s++) {
		uint32_t nq = prefill ? c->qlen[s] : 1;

		for (uint32_t r = 0; r < nq; r++, qrow++) {
			uint32_t limit = prefill ? c->ctx[s] - c->qlen[s] + r + 1 : c->ctx[s];

			for (uint32_t hq = 0; hq < c->hq; hq++) {
				size_t off = ((size_t)qrow * c->hq + hq) * D;
				double tk, ts;

				reference(c, s, hq, q + off, limit, ref, ex, &tk, &ts, scale);
				for (int isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++) {
					if (!outs[isa])
						continue;
					for (uint32_t d = 0; d < D; d++) {
						double o = outs[isa][off + d];

						CHECK(fabs(o - ref[d]) <= tk,
						      "%s isa %s seq %u row %u head %u dim %u: out "
						      "%.9g ref %.9g (bound %.3g)",
						      prefill ? "prefill" : "decode",
						      kvmm_cpu_isa_name(isa), s, r, hq, d, o,
						      ref[d], tk);
						CHECK(fabs(o - ex[d]) <= ts,
						      "%s isa %s seq %u row %u head %u dim %u: out "
						      "%.9g exact %.9g (storage bound %.3g)",
						      prefill ? "prefill" : "decode",
						      kvmm_cpu_isa_name(isa), s, r, hq, d, o, ex[d],
						      ts);
						*worst = fmax(*worst, fabs(o - ref[d]) / tk);
					}
				}
			}
		}
	}
	if (out) /* hand back the chosen ISA's result */
		memcpy(out, outs[kvmm_cpu_isa_get()], nrows * c->hq * D * sizeof(float));
	for (int isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++)
		free(outs[isa]);
	free(outs);
	free(ref);
	free(ex);
}

static const uint32_t dtypes[] = {KVMM_DTYPE_FP32, KVMM_DTYPE_FP16, KVMM_DTYPE_BF16,
				  KVMM_DTYPE_INT8};
static const uint32_t tpps[] = {1, 2, 3, 5, 8, 16, 17, 33, 64, 100};
static const uint32_t gqa[] = {1, 2, 4, 8};

/* a random shape: dims 64, 128 and odd ones; int8 groups that divide them */
static void random_shape(struct tcase *c, uint32_t dt, uint32_t max_kvh)
{
	static const uint32_t dims[] = {64, 128, 40, 17, 8, 96};
	uint32_t dim = dims[rnd(6)], gs = 0, layers = 1 + rnd(3), kvh = 1 + rnd(max_kvh);
	uint32_t tpp = tpps[rnd(10)];

	if (dt == KVMM_DTYPE_INT8) {
		uint32_t cand[8], nc = 0;

		for (uint32_t g = 1; g <= dim; g++)
			if (dim % g == 0 && nc < 8 && (g >= 8 || rnd(4) == 0))
				cand[nc++] = g;
		gs = nc ? cand[rnd(nc)] : dim;
	}
	memset(c, 0, sizeof(*c));
	make_fmt(c, layers, kvh, dim, dt, gs, tpp);
	c->layer = rnd(layers);
	c->hq = kvh * gqa[rnd(4)];
	c->qamp = rnd(4) == 0 ? 60.0f : rnd(3) == 0 ? 8.0f : 1.0f;
	snprintf(case_desc, sizeof(case_desc),
		 "%s layers %u layer %u kv_heads %u q_heads %u dim %u group %u tpp %u qamp %g",
		 kvmm_dtype_name(dt), layers, c->layer, kvh, c->hq, dim, gs, c->fmt.tokens_per_page,
		 c->qamp);
}

static void test_decode_random(void **state)
{
	double worst = 0;

	(void)state;
	for (uint32_t i = 0; i < 96; i++) {
		uint32_t dt = dtypes[i % 4], nseqs = 1 + rnd(5), ctx[5];
		struct tcase c;
		float *q;
		size_t nq;

		rng_state = base_seed + i;
		random_shape(&c, dt, 4);
		for (uint32_t s = 0; s < nseqs; s++) {
			uint32_t r = rnd(8), tpp = c.fmt.tokens_per_page;

			/* ragged: empty, one token, whole pages, and anything up to a few hundred */
			ctx[s] = r == 0	  ? 0
				 : r == 1 ? 1
				 : r == 2 ? tpp * (1 + rnd(4))
					  : 1 + rnd(300);
		}
		build_case(&c, nseqs, ctx, NULL);
		nq = (size_t)nseqs * c.hq * c.fmt.head_dim;
		q = malloc(nq * sizeof(float));
		for (size_t j = 0; j < nq; j++)
			q[j] = rndf(c.qamp);
		check_rows(&c, q, NULL, false,
			   rnd(4) == 0 ? (float)(0.05 + rnd(100) / 100.0)
				       : 1.0 / sqrt(c.fmt.head_dim),
			   &worst);
		free(q);
		free_case(&c);
	}
	print_message("decode: worst kernel error %.3g of its bound\n", worst);
}

/*
 * Decode walks a sequence's full pages in frame order, prefill those below its first new
 * token (kvmm_cpu_decode_by_address): with the tables spread over a pool of some 70000 frames
 * (frame numbers of one, two and three bytes, so every pass of the radix sort runs), ragged
 * lengths (the partial last page must stay last), split over threads or not, and with tables
 * already in order (used as they are), the results are within the same bounds of the fp64
 * reference as in table order.
 */
static void test_decode_address_order(void **state)
{
	uint32_t saved = kvmm_cpu_decode_by_address, saved_split = kvmm_cpu_split_min_bytes;
	uint32_t saved_threads = kvmm_cpu_get_threads();
	double worst = 0;

	(void)state;
	kvmm_cpu_split_min_bytes = 0;
	for (uint32_t i = 0; i < 24; i++) {
		uint32_t nseqs = 1 + rnd(3), ctx[3], qlen[3], nrows = 0;
		struct tcase c;
		float *q;
		size_t nq;

		rng_state = base_seed + 1000 + i;
		memset(&c, 0, sizeof(c));
		/* a small format, so that a pool of 70000 frames is a few tens of MB */
		make_fmt(&c, 1, 2, 16, dtypes[i % 4], dtypes[i % 4] == KVMM_DTYPE_INT8 ? 8 : 0,
			 1 + rnd(5));
		c.hq = 2 * gqa[rnd(4)];
		c.qamp = 1.0f;
		snprintf(case_desc, sizeof(case_desc), "address order: %s tpp %u",
			 kvmm_dtype_name(c.fmt.dtype), c.fmt.tokens_per_page);
		for (uint32_t s = 0; s < nseqs; s++) {
			ctx[s] = 1 + rnd(400);
			qlen[s] = 1 + rnd(ctx[s] < 40 ? ctx[s] : 40);
			nrows += qlen[s];
		}
		extra_frames = 70000;
		build_case(&c, nseqs, ctx, qlen);
		extra_frames = 0;
		if (i % 3 == 2) {
			/*
			 * full pages already in order: the table is used as it is.  (This moves
			 * tokens between positions, which decode's sum does not mind; prefill's
			 * causal limits would, so prefill is not checked on these.)
			 */
			for (uint32_t s = 0; s < nseqs; s++) {
				int32_t *t = c.tables + (size_t)s * c.max_blocks;
				uint32_t nfull = ctx[s] / c.fmt.tokens_per_page;

				for (uint32_t a = 1; a < nfull; a++)
					for (uint32_t b = a; b > 0 && t[b] < t[b - 1]; b--) {
						int32_t x = t[b];

						t[b] = t[b - 1];
						t[b - 1] = x;
					}
			}
		}
		/* rows for prefill's queries, decode's are the first nseqs */
		nq = (size_t)nrows * c.hq * c.fmt.head_dim;
		q = malloc(nq * sizeof(float));
		for (size_t j = 0; j < nq; j++)
			q[j] = rndf(c.qamp);
		kvmm_cpu_set_threads(1 + i % 3);
		for (uint32_t by = 0; by < 2; by++) {
			kvmm_cpu_decode_by_address = by;
			check_rows(&c, q, NULL, false, 1.0 / sqrt(c.fmt.head_dim), &worst);
			if (i % 3 != 2)
				check_rows(&c, q, NULL, true, 1.0 / sqrt(c.fmt.head_dim), &worst);
		}
		free(q);
		free_case(&c);
	}
	kvmm_cpu_set_threads(saved_threads);
	kvmm_cpu_decode_by_address = saved;
	kvmm_cpu_split_min_bytes = saved_split;
	print_message("address order: worst kernel error %.3g of its bound\n", worst);
}

/*
 * Threads: contexts split over 1, 2 and 3 threads (the split minimum lowered so a few hundred
 * tokens make several parts whose page-aligned boundaries do not divide them evenly), ragged
 * batches beside them, decode and prefill, every ISA, against the same fp64 reference and
 * bounds: the merge of partial softmax states must be exact up to fp32 rounding.
 */
static void test_threads_random(void **state)
{
	static const uint32_t small_tpp[] = {1, 3, 5, 7, 16, 17};
	uint32_t saved = kvmm_cpu_split_min_bytes;
	double worst = 0;

	(void)state;
	kvmm_cpu_split_min_bytes = 0;
	for (uint32_t nt = 1; nt <= 3; nt++) {
		assert_int_equal(kvmm_cpu_set_threads(nt), 0);
		assert_int_equal(kvmm_cpu_get_threads(), nt);
		for (uint32_t i = 0; i < 16; i++) {
			uint32_t dt = dtypes[i % 4], nseqs = 1 + rnd(3), ctx[3], qlen[3];
			bool prefill = i % 4 == 3;
			size_t rows = 0, nq;
			struct tcase c;
			float *q;

			rng_state = base_seed + 3000 + nt * 100 + i;
			random_shape(&c, dt, 2);
			make_fmt(&c, c.fmt.layers, c.fmt.kv_heads, c.fmt.head_dim, dt,
				 c.fmt.quant_group, small_tpp[rnd(6)]);
			for (uint32_t s = 0; s < nseqs; s++) {
				/* one long context, the others anything (empty included) */
				ctx[s] = s == 0 ? 97 + rnd(500) : rnd(3) ? rnd(200) : 0;
				qlen[s] = prefill ? min_t(uint32_t, ctx[s], rnd(20)) : 0;
				rows += prefill ? qlen[s] : 1;
			}
			snprintf(case_desc + strlen(case_desc),
				 sizeof(case_desc) - strlen(case_desc),
				 " threads %u tpp %u ctx %u%s", nt, c.fmt.tokens_per_page, ctx[0],
				 prefill ? " prefill" : "");
			build_case(&c, nseqs, ctx, prefill ? qlen : NULL);
			nq = rows * c.hq * c.fmt.head_dim;
			q = malloc(nq * sizeof(float) + 1);
			for (size_t j = 0; j < nq; j++)
				q[j] = rndf(c.qamp);
			check_rows(&c, q, NULL, prefill, 1.0 / sqrt(c.fmt.head_dim), &worst);
			free(q);
			free_case(&c);
		}
	}
	kvmm_cpu_split_min_bytes = saved;
	assert_int_equal(kvmm_cpu_set_threads(1), 0); /* joins the workers */
	print_message("threads: worst kernel error %.3g of its bound\n", worst);
}

/*
 * The prefetch queue (how far ahead, and across the end of a pass into the next unit a thread
 * runs) only asks for lines: results must be bit-identical whatever its distance, on every
 * ISA, with chunks spanning several small pages and contexts split over two threads.
 */
static void test_prefetch_distance(void **state)
{
	static const uint32_t dist[] = {0, 2, 5};
	uint32_t saved = kvmm_cpu_split_min_bytes, saved_pf = kvmm_cpu_prefetch_chunks;
	enum kvmm_cpu_isa saved_isa = kvmm_cpu_isa_get();

	(void)state;
	kvmm_cpu_split_min_bytes = 0;
	assert_int_equal(kvmm_cpu_set_threads(2), 0);
	for (uint32_t i = 0; i < 8; i++) {
		uint32_t dt = dtypes[i % 4], ctx[3] = {150 + rnd(300), rnd(100), 1 + rnd(40)};
		struct tcase c;
		float *q, *want, *got;
		size_t nq;

		rng_state = base_seed + 5000 + i;
		random_shape(&c, dt, 2);
		make_fmt(&c, c.fmt.layers, c.fmt.kv_heads, c.fmt.head_dim, dt, c.fmt.quant_group,
			 1 + rnd(9));
		build_case(&c, 3, ctx, NULL);
		struct kvmm_attn_batch b = {
			.kv = {c.pool, &c.fmt, c.layer, c.nframes},
			.nr_seqs = 3,
			.num_q_heads = c.hq,
			.block_tables = c.tables,
			.max_blocks = c.max_blocks,
			.ctx_lens = c.ctx,
		};
		nq = 3 * (size_t)c.hq * c.fmt.head_dim;
		q = malloc(nq * sizeof(float));
		want = malloc(nq * sizeof(float));
		got = malloc(nq * sizeof(float));
		assert_non_null(q);
		assert_non_null(want);
		assert_non_null(got);
		for (size_t j = 0; j < nq; j++)
			q[j] = rndf(c.qamp);
		for (int isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++) {
			if (!kvmm_cpu_isa_supported(isa))
				continue;
			assert_int_equal(kvmm_cpu_isa_set(isa), 0);
			kvmm_cpu_prefetch_chunks = 1;
			assert_int_equal(kvmm_cpu_paged_decode(&b, q, want), 0);
			for (uint32_t k = 0; k < 3; k++) {
				kvmm_cpu_prefetch_chunks = dist[k];
				assert_int_equal(kvmm_cpu_paged_decode(&b, q, got), 0);
				CHECK(!memcmp(got, want, nq * sizeof(float)),
				      "isa %s prefetch %u chunks: results differ",
				      kvmm_cpu_isa_name(isa), dist[k]);
			}
		}
		free(q);
		free(want);
		free(got);
		free_case(&c);
	}
	kvmm_cpu_prefetch_chunks = saved_pf;
	kvmm_cpu_split_min_bytes = saved;
	assert_int_equal(kvmm_cpu_isa_set(saved_isa), 0);
	assert_int_equal(kvmm_cpu_set_threads(1), 0);
}

struct racer {
	const struct kvmm_attn_batch *b;
	const float *q, *want;
	size_t n;
	int bad;
};

static void *race_decode(void *arg)
{
	struct racer *r = arg;
	float *out = malloc(r->n * sizeof(float));

	for (int i = 0; i < 20 && out; i++) {
		if (kvmm_cpu_paged_decode(r->b, r->q, out) || memcmp(out, r->want, r->n * 4))
			r->bad++;
	}
	if (!out)
		r->bad++;
	free(out);
	return NULL;
}

/*
 * Two callers at once with threads on: one owns the pool, the other runs alone; the units do
 * not depend on who ran them, so both must get bit-identical results.
 */
static void test_threads_concurrent(void **state)
{
	uint32_t ctx[2] = {400, 150}, saved = kvmm_cpu_split_min_bytes;
	struct racer r[2];
	pthread_t t;
	struct tcase c;
	float *q, *want;
	size_t nq;

	(void)state;
	rng_state = base_seed + 4000;
	random_shape(&c, KVMM_DTYPE_FP16, 2);
	make_fmt(&c, c.fmt.layers, c.fmt.kv_heads, c.fmt.head_dim, KVMM_DTYPE_FP16, 0, 5);
	build_case(&c, 2, ctx, NULL);
	struct kvmm_attn_batch b = {
		.kv = {c.pool, &c.fmt, c.layer, c.nframes},
		.nr_seqs = 2,
		.num_q_heads = c.hq,
		.block_tables = c.tables,
		.max_blocks = c.max_blocks,
		.ctx_lens = c.ctx,
	};
	nq = 2 * (size_t)c.hq * c.fmt.head_dim;
	q = malloc(nq * sizeof(float));
	want = malloc(nq * sizeof(float));
	for (size_t j = 0; j < nq; j++)
		q[j] = rndf(1.0f);
	kvmm_cpu_split_min_bytes = 0;
	assert_int_equal(kvmm_cpu_set_threads(2), 0);
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, want), 0);
	for (int i = 0; i < 2; i++)
		r[i] = (struct racer){.b = &b, .q = q, .want = want, .n = nq};
	assert_int_equal(pthread_create(&t, NULL, race_decode, &r[1]), 0);
	race_decode(&r[0]);
	pthread_join(t, NULL);
	kvmm_cpu_split_min_bytes = saved;
	assert_int_equal(kvmm_cpu_set_threads(1), 0);
	assert_int_equal(r[0].bad + r[1].bad, 0);
	free(q);
	free(want);
	free_case(&c);
}

static void test_prefill_random(void **state)
{
	double worst = 0;

	(void)state;
	for (uint32_t i = 0; i < 48; i++) {
		uint32_t dt = dtypes[i % 4], nseqs = 1 + rnd(3), ctx[3], qlen[3];
		size_t rows = 0, nq;
		struct tcase c;
		float *q;

		rng_state = base_seed + 1000 + i;
		random_shape(&c, dt, 2);
		for (uint32_t s = 0; s < nseqs; s++) {
			uint32_t r = rnd(4);

			/* a fresh prompt (no cache), a prompt after a cached prefix, an empty step */
			qlen[s] = r == 0 ? 0 : 1 + rnd(24);
			ctx[s] = qlen[s] + (r == 1 ? 0 : rnd(120));
			rows += qlen[s];
		}
		build_case(&c, nseqs, ctx, qlen);
		nq = rows * c.hq * c.fmt.head_dim;
		q = malloc(nq * sizeof(float) + 1);
		for (size_t j = 0; j < nq; j++)
			q[j] = rndf(c.qamp);
		check_rows(&c, q, NULL, true, 1.0 / sqrt(c.fmt.head_dim), &worst);
		free(q);
		free_case(&c);
	}
	print_message("prefill: worst kernel error %.3g of its bound\n", worst);
}

/* Decode of the last token must equal the last row of a prefill over the same pages. */
static void test_prefill_matches_decode(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < 8; i++) {
		uint32_t dt = dtypes[i % 4], ctx[2], qlen[2];
		struct tcase c;
		float *q, *qd, *op, *od;
		size_t row;
		double worst = 0;

		rng_state = base_seed + 2000 + i;
		random_shape(&c, dt, 2);
		row = (size_t)c.hq * c.fmt.head_dim;
		qlen[0] = 5;
		qlen[1] = 3;
		ctx[0] = 40 + rnd(40);
		ctx[1] = 3;
		build_case(&c, 2, ctx, qlen);
		q = malloc(8 * row * sizeof(float));
		op = malloc(8 * row * sizeof(float));
		qd = malloc(2 * row * sizeof(float));
		od = malloc(2 * row * sizeof(float));
		for (size_t j = 0; j < 8 * row; j++)
			q[j] = rndf(1.0f);
		check_rows(&c, q, op, true, 1.0 / sqrt(c.fmt.head_dim), &worst);
		memcpy(qd, q + 4 * row, row * sizeof(float));
		memcpy(qd + row, q + 7 * row, row * sizeof(float));
		check_rows(&c, qd, od, false, 1.0 / sqrt(c.fmt.head_dim), &worst);
		for (size_t j = 0; j < row; j++) {
			CHECK(fabsf(od[j] - op[4 * row + j]) <= 1e-6f, "seq 0 elem %zu", j);
			CHECK(fabsf(od[row + j] - op[7 * row + j]) <= 1e-6f, "seq 1 elem %zu", j);
		}
		free(q);
		free(qd);
		free(op);
		free(od);
		free_case(&c);
	}
}

/* ---- reshape_and_cache ------------------------------------------------------------------ */

/* Known conversions, through the public API: one head of n elements, fp16 or bf16. */
static void check_known(uint32_t dt, const float *x, const uint16_t *want, uint32_t n)
{
	struct kvmm_fmt f;
	struct kvmm_kv_pages kv;
	int64_t slot = 0;
	char *page;

	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, n, dt}, 4096), 0);
	page = calloc(1, 4096);
	kv = (struct kvmm_kv_pages){page, &f, 0, 1};
	assert_int_equal(kvmm_cpu_reshape_and_cache(&kv, 1, &slot, x, x), 0);
	for (uint32_t i = 0; i < n; i++) {
		uint16_t k, v;

		memcpy(&k, page + i * 2, 2);
		memcpy(&v, page + f.slab_bytes + i * 2, 2);
		snprintf(case_desc, sizeof(case_desc), "%s known value %u", kvmm_dtype_name(dt), i);
		CHECK(k == want[i] && v == want[i], "x %a: got %#x want %#x", x[i], k, want[i]);
	}
	free(page);
}

static void test_convert_known(void **state)
{
	const float h_in[] = {1.0f,
			      -2.0f,
			      65504.0f,
			      65519.0f,
			      65520.0f,
			      0x1p-24f,
			      0x1p-25f,
			      0x1.8p-25f,
			      0x1p-14f,
			      1.0f + 0x1p-11f,
			      1.0f + 3 * 0x1p-11f,
			      0x1.ffcp-15f,
			      INFINITY,
			      -0.0f,
			      1e-8f,
			      0.1f};
	const uint16_t h_want[] = {0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0001,
				   0x0400, 0x3c00, 0x3c02, 0x0400, 0x7c00, 0x8000, 0x0000, 0x2e66};
	const float b_in[] = {1.0f,    -2.0f,	 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
			      3.0e38f, INFINITY, 0x1p-130f,	 0.1f};
	const uint16_t b_want[] = {0x3f80, 0xc000, 0x3f80, 0x3f82, 0x7f62, 0x7f80, 0x0008, 0x3dcd};
	float nan_in[2] = {NAN, -NAN};
	struct kvmm_fmt f;
	struct kvmm_kv_pages kv;
	int64_t slot = 0;
	char page[256] = {0};

	(void)state;
	check_known(KVMM_DTYPE_FP16, h_in, h_want, 16);
	check_known(KVMM_DTYPE_BF16, b_in, b_want, 8);
	/* NaN stays NaN in both */
	for (uint32_t dt = KVMM_DTYPE_FP16; dt <= KVMM_DTYPE_BF16; dt++) {
		assert_int_equal(
			kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 2, dt}, sizeof(page)), 0);
		kv = (struct kvmm_kv_pages){page, &f, 0, 1};
		assert_int_equal(kvmm_cpu_reshape_and_cache(&kv, 1, &slot, nan_in, nan_in), 0);
		for (int i = 0; i < 2; i++) {
			uint16_t u;

			memcpy(&u, page + i * 2, 2);
			assert_true(isnan(dt == KVMM_DTYPE_FP16 ? half_to_double(u)
								: bf16_to_double(u)));
		}
	}
}

/*
 * Random rows through reshape_and_cache: each stored element within its rounding of the input
 * (and exactly the nearest for fp16/bf16), the int8 scale max|x|/127, and no byte outside the
 * written rows (and scales) changed.
 */
static void test_reshape_roundtrip(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < 24; i++) {
		uint32_t dt = dtypes[i % 4], ntok;
		struct tcase c;
		struct kvmm_kv_pages kv;
		const struct kvmm_fmt *f;
		size_t row, psz;
		char *before, *written;
		int64_t *slots;
		float *k, *v;

		rng_state = base_seed + 3000 + i;
		random_shape(&c, dt, 3);
		f = &c.fmt;
		row = (size_t)f->kv_heads * f->head_dim;
		c.nframes = 1 + rnd(4);
		psz = c.nframes * f->page_size;
		c.pool = malloc(psz);
		for (size_t j = 0; j < psz; j++)
			c.pool[j] = (char)rng_next();
		before = malloc(psz);
		memcpy(before, c.pool, psz);
		written = calloc(psz, 1);
		ntok = 1 + rnd(c.nframes * f->tokens_per_page);
		slots = malloc(ntok * sizeof(int64_t));
		k = malloc(ntok * row * sizeof(float));
		v = malloc(ntok * row * sizeof(float));
		/* distinct slots (a slot written twice keeps only the last row) */
		for (uint32_t t = 0; t < ntok; t++) {
			slots[t] = (int64_t)t * (c.nframes * f->tokens_per_page) / ntok;
			if (rnd(10) == 0)
				slots[t] = -1 - (int64_t)rnd(5);
		}
		for (uint32_t t = ntok - 1; t > 0; t--) {
			uint32_t j = rnd(t + 1);
			int64_t x = slots[t];

			slots[t] = slots[j];
			slots[j] = x;
		}
		for (size_t j = 0; j < ntok * row; j++) {
			uint32_t r = rnd(16);

			k[j] = r == 0 ? 0.0f : rndf(r == 1 ? 1e-5f : r == 2 ? 1000.0f : 1.0f);
			v[j] = rndf(1.0f);
		}
		if (dt == KVMM_DTYPE_INT8) /* an all-zero group gets scale 0 and zeros */
			memset(k, 0, f->quant_group * sizeof(float));
		kv = (struct kvmm_kv_pages){c.pool, f, c.layer, c.nframes};
		CHECK(kvmm_cpu_reshape_and_cache(&kv, ntok, slots, k, v) == 0,
		      "reshape %u tokens into %u frames", ntok, c.nframes);

		for (uint32_t t = 0; t < ntok; t++) {
			uint32_t tpp = f->tokens_per_page, r;
			char *pg;

			if (slots[t] < 0)
				continue;
			pg = c.pool + (uint64_t)slots[t] / tpp * f->page_size;
			r = (uint32_t)(slots[t] % tpp);
			for (uint32_t kvi = 0; kvi < 2; kvi++) {
				const float *x = (kvi ? v : k) + t * row;
				char *slab = pg + ((uint64_t)c.layer * 2 + kvi) * c.lay.slab;

				memset(written + (slab - c.pool) + r * c.lay.row, 1, c.lay.row);
				if (c.lay.srow)
					memset(written + (slab - c.pool) + c.lay.soff +
						       r * c.lay.srow,
					       1, c.lay.srow);
				for (uint32_t j = 0; j < row; j++) {
					uint32_t h = j / f->head_dim, d = j % f->head_dim;
					double s = stored(f, &c.lay, pg, c.layer, kvi, r, h, d);
					double amax = 0, err = fabs(s - x[j]), bound;

					if (dt == KVMM_DTYPE_INT8) {
						uint32_t g0 = j / f->quant_group * f->quant_group;

						for (uint32_t e = g0; e < g0 + f->quant_group; e++)
							amax = fmax(amax, fabs(x[e]));
					}
					bound = elem_err(dt, x[j], amax / 127);
					/* fp16/bf16: half an ulp at x, i.e. the nearest value */
					if (dt == KVMM_DTYPE_FP16)
						bound = x[j] == 0 ? 0
								  : ldexp(1, max_t(int, ilogb(x[j]),
										   -14) -
										     11);
					if (dt == KVMM_DTYPE_BF16)
						bound = x[j] == 0 ? 0 : ldexp(1, ilogb(x[j]) - 8);
					CHECK(err <= bound * (1 + 1e-9),
					      "reshape slot %lld %s elem %u: in %.9g stored %.9g "
					      "err %.3g bound %.3g",
					      (long long)slots[t], kvi ? "V" : "K", j, x[j], s, err,
					      bound);
				}
			}
		}
		for (size_t j = 0; j < psz; j++)
			CHECK(written[j] || c.pool[j] == before[j],
			      "byte %zu outside the rows changed", j);
		free(before);
		free(written);
		free(slots);
		free(k);
		free(v);
		free(c.pool);
	}
}

/* ---- copy_pages ------------------------------------------------------------------------- */

static void test_copy_pages(void **state)
{
	(void)state;
	for (uint32_t i = 0; i < 16; i++) {
		uint32_t dt = dtypes[i % 4], n = 8, ntok;
		struct tcase c;
		const struct kvmm_fmt *f;
		char *src, *dst, *before;
		int32_t sf[4], df[4], bad[2];
		size_t psz;

		rng_state = base_seed + 4000 + i;
		random_shape(&c, dt, 3);
		f = &c.fmt;
		psz = n * f->page_size;
		src = malloc(psz);
		dst = malloc(psz);
		before = malloc(psz);
		for (size_t j = 0; j < psz; j++) {
			src[j] = (char)rng_next();
			dst[j] = (char)rng_next();
		}
		/* frames 0..3 of src to a permutation of 4..7 of dst, or within src (COW) */
		for (int j = 0; j < 4; j++) {
			sf[j] = j;
			df[j] = 4 + (j + 1) % 4;
		}
		ntok = rnd(2) ? 0 : rnd(f->tokens_per_page + 1);
		bool cow = rnd(2);
		char *to = cow ? src : dst;

		memcpy(before, to, psz);
		assert_int_equal(kvmm_cpu_copy_pages(f, to, src, df, sf, 4, ntok), 0);
		for (int j = 0; j < 4; j++) {
			const char *s = src + (uint64_t)sf[j] * f->page_size;
			const char *d = to + (uint64_t)df[j] * f->page_size;
			const char *b = before + (uint64_t)df[j] * f->page_size;

			for (uint64_t o = 0; o < f->page_size; o++) {
				uint64_t slab = o / c.lay.slab, in = o % c.lay.slab;
				bool copied;

				if (slab >= 2ull * f->layers)
					copied = false; /* the unused tail is not copied */
				else if (!ntok)
					copied = true;
				else
					copied = in < ntok * c.lay.row ||
						 (c.lay.srow && in >= c.lay.soff &&
						  in < c.lay.soff + ntok * c.lay.srow);
				CHECK(d[o] == (copied ? s[o] : b[o]),
				      "copy %s ntok %u pair %d byte %llu (copied %d)",
				      cow ? "cow" : "stage", ntok, j, (unsigned long long)o,
				      copied);
			}
		}
		/* frames not in the list are untouched */
		for (int fr = 0; fr < 4; fr++)
			assert_memory_equal(to + (uint64_t)fr * f->page_size,
					    before + (uint64_t)fr * f->page_size, f->page_size);
		/* a bad pair anywhere copies nothing */
		memcpy(before, dst, psz);
		bad[0] = 5;
		bad[1] = -1;
		assert_int_equal(kvmm_cpu_copy_pages(f, dst, src, bad, sf, 2, 0), -EINVAL);
		bad[1] = 5;
		assert_int_equal(kvmm_cpu_copy_pages(f, dst, dst, bad, bad, 2, 0), -EINVAL);
		assert_int_equal(
			kvmm_cpu_copy_pages(f, dst, src, df, sf, 1, f->tokens_per_page + 1),
			-EINVAL);
		assert_memory_equal(dst, before, psz);
		free(src);
		free(dst);
		free(before);
	}
}

/* ---- argument checks and ISA selection --------------------------------------------------- */

static void test_bad_args(void **state)
{
	struct kvmm_fmt f;
	int32_t table[4] = {0, 1, KVMM_BLOCK_NONE, 3};
	uint32_t ctx = 3 * 4, qlen = 1;
	float q[4 * 8], out[4 * 8];
	char *pool;
	struct kvmm_attn_batch b;
	int64_t slot;

	(void)state;
	assert_int_equal(kvmm_fmt_init(&f, &(struct kvmm_format){2, 1, 8, KVMM_DTYPE_FP32},
				       4 * 2 * 2 * 32 + 64),
			 0);
	assert_int_equal(f.tokens_per_page, 4);
	pool = calloc(4, f.page_size);
	memset(q, 0, sizeof(q));
	b = (struct kvmm_attn_batch){{pool, &f, 0, 4}, 1, 2, table, 4, &ctx, NULL, 0};
	snprintf(case_desc, sizeof(case_desc), "bad args");
	/* a hole (KVMM_BLOCK_NONE) inside the context */
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL);
	ctx = 8;
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), 0);
	ctx = 4 * 4 + 1; /* past max_blocks */
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL);
	ctx = 8;
	table[1] = 4; /* past nr_frames */
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL);
	table[1] = 1;
	b.num_q_heads = 3; /* q heads: a multiple of kv heads, fine; 0 is not */
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), 0);
	b.num_q_heads = 0;
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL);
	b.num_q_heads = 2;
	b.kv.layer = 2;
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL);
	b.kv.layer = 1;
	assert_int_equal(kvmm_cpu_paged_prefill(&b, q, out), -EINVAL); /* no q_lens */
	b.q_lens = &qlen;
	assert_int_equal(kvmm_cpu_paged_prefill(&b, q, out), 0);
	qlen = 9; /* more new tokens than the context */
	assert_int_equal(kvmm_cpu_paged_prefill(&b, q, out), -EINVAL);

	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 2, 8, KVMM_DTYPE_FP32}, 4 * 2 * 64), 0);
	b = (struct kvmm_attn_batch){{pool, &f, 0, 4}, 1, 3, table, 4, &ctx, NULL, 0};
	assert_int_equal(kvmm_cpu_paged_decode(&b, q, out), -EINVAL); /* 3 % 2 */

	/* reshape: a slot past nr_frames writes nothing */
	slot = kvmm_kv_slot(&f, 4, 0);
	memset(pool, 0, 4 * f.page_size);
	assert_int_equal(kvmm_cpu_reshape_and_cache(&b.kv, 1, &slot, q, q), -EINVAL);
	b.kv.layer = 1;
	slot = 0;
	assert_int_equal(kvmm_cpu_reshape_and_cache(&b.kv, 1, &slot, q, q), -EINVAL);
	free(pool);
}

/*
 * A context of nearly 2^32 tokens beside an ordinary one (tables out of frame order, so both
 * are sorted into one scratch buffer): its block count must be computed in 64 bits.  Prefill
 * with no new tokens in it, so nothing is computed over it; the other sequence must get what
 * it gets alone.  Found by tests/fuzz/fuzz_kernels.c: the count wrapped to 0 and the copy of
 * the rows after the sorted pages ran for 2^32 entries.
 */
static void test_prefill_huge_ctx(void **state)
{
	uint32_t saved = kvmm_cpu_decode_by_address;
	uint32_t ctx[2], qlen[2] = {2, 0}, tpp, mb;
	float q[2 * 2 * 2], out[2 * 2 * 2], alone[2 * 2 * 2];
	struct kvmm_attn_batch b;
	struct kvmm_fmt f;
	uint16_t *pool;
	int32_t *tables;

	(void)state;
	snprintf(case_desc, sizeof(case_desc), "prefill beside a context of 2^32 - 1 tokens");
	assert_int_equal(
		kvmm_fmt_init(&f, &(struct kvmm_format){1, 1, 2, KVMM_DTYPE_FP16}, 64u << 10), 0);
	tpp = f.tokens_per_page;
	ctx[0] = 3 * tpp + 5;
	ctx[1] = UINT32_MAX;
	mb = (uint32_t)(((uint64_t)UINT32_MAX + tpp - 1) / tpp);
	pool = malloc(4 * f.page_size);
	tables = malloc(2 * (size_t)mb * sizeof(*tables));
	assert_non_null(pool);
	assert_non_null(tables);
	rng_state = base_seed + 77;
	for (size_t i = 0; i < 4 * f.page_size / 2; i++)
		pool[i] = kvmm_f32_to_fp16(rndf(1.0f));
	for (size_t i = 0; i < 2 * (size_t)mb; i++)
		tables[i] = (int32_t)(3 - i % 4); /* descending: not in frame order */
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		q[i] = rndf(1.0f);
	kvmm_cpu_decode_by_address = 1;
	b = (struct kvmm_attn_batch){{pool, &f, 0, 4}, 1, 2, tables, mb, ctx, qlen, 0};
	assert_int_equal(kvmm_cpu_paged_prefill(&b, q, alone), 0);
	b.nr_seqs = 2;
	assert_int_equal(kvmm_cpu_paged_prefill(&b, q, out), 0);
	assert_memory_equal(out, alone, 2 * 2 * 2 * sizeof(float));
	kvmm_cpu_decode_by_address = saved;
	free(tables);
	free(pool);
}

static void test_isa(void **state)
{
	(void)state;
	assert_true(kvmm_cpu_isa_supported(KVMM_CPU_ISA_SCALAR));
	assert_int_equal(kvmm_cpu_isa_set(KVMM_CPU_ISA_COUNT), -ENOTSUP);
	assert_string_equal(kvmm_cpu_isa_name(KVMM_CPU_ISA_AVX512), "avx512");
	for (int isa = 0; isa < KVMM_CPU_ISA_COUNT; isa++) {
		print_message("isa %s: %s\n", kvmm_cpu_isa_name(isa),
			      kvmm_cpu_isa_supported(isa) ? "tested" : "not supported here");
		if (kvmm_cpu_isa_supported(isa)) {
			assert_int_equal(kvmm_cpu_isa_set(isa), 0);
			assert_int_equal(kvmm_cpu_isa_get(), isa);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isa),
		cmocka_unit_test(test_convert_known),
		cmocka_unit_test(test_reshape_roundtrip),
		cmocka_unit_test(test_copy_pages),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_prefill_huge_ctx),
		cmocka_unit_test(test_decode_random),
		cmocka_unit_test(test_decode_address_order),
		cmocka_unit_test(test_prefill_random),
		cmocka_unit_test(test_prefill_matches_decode),
		cmocka_unit_test(test_threads_random),
		cmocka_unit_test(test_threads_concurrent),
		cmocka_unit_test(test_prefetch_distance),
	};

	return cmocka_run_group_tests_name("kernels", tests, group_setup, NULL);
}
