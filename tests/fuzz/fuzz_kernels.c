// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_kernels.c - libFuzzer harness: the CPU kernels' public API
 * (kernels/kernels.h: paged decode and prefill, reshape_and_cache, copy_pages) and the format
 * they address (kvmm_fmt_init()).
 *
 * The input is decoded into the kernels' settings (ISA, threads, split and prefetch knobs), a
 * format (dtype incl. int8 groups, layers, KV heads, head dim, tokens per page), a small pool
 * of frames filled with finite values and then a list of calls with arbitrary block tables,
 * context and query lengths, slots and frame lists.  Every buffer is allocated at exactly the
 * size the API documents, so ASan catches any access outside it.  The harness knows the
 * documented argument checks (Documentation/kernels/cpu.md): a call that passes them must
 * succeed, one that does not must return -EINVAL and leave every output byte as it was; a
 * successful attention writes every output element, a finite one (inputs are finite), zeros
 * for a sequence without context.  Sizes are capped so one input runs well under a
 * millisecond or so.  Built and run by tools/fuzz (Documentation/dev-tools/fuzzing.md).
 *
 * fuzz-libs: kernels/cpu/built-in.a lib/built-in.a
 * fuzz-ldlibs: -lpthread -lm
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h" /* kvmm_cpu_split_min_bytes, kvmm_cpu_prefetch_chunks */
#include "kernels/kernels.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PAGE (16u << 10) /* bytes per frame */
#define MAX_FRAMES 5
#define MAX_OPS 8
#define MAX_WORK (1u << 18)  /* multiply-adds of one attention call, roughly */
#define SENTINEL 0x7fc0beefu /* a NaN no kernel computes */

static uint64_t rng;

static uint64_t rnd64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* uniform in [-a, a) */
static float rndf(float a)
{
	return (float)(((double)(rnd64() >> 11) * 0x1p-53 * 2.0 - 1.0) * a);
}

#define FAIL(...)                                  \
	do {                                       \
		fprintf(stderr, "fuzz_kernels: "); \
		fprintf(stderr, __VA_ARGS__);      \
		fprintf(stderr, "\n");             \
		abort();                           \
	} while (0)

/* exactly n bytes, never NULL (malloc(0) may be: ASan gives a unique pointer anyway) */
static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		abort();
	return p;
}

static float *floats(size_t n)
{
	float *f = xmalloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		f[i] = rndf(1.0f);
	return f;
}

static void fill_sentinel(float *f, size_t n)
{
	uint32_t s = SENTINEL;

	for (size_t i = 0; i < n; i++)
		memcpy(&f[i], &s, sizeof(s));
}

struct pool {
	struct kvmm_fmt f;
	char *base;
	uint32_t nr_frames;
	size_t bytes;
};

/* kvmm_fmt_init() with raw values: on success the layout must fit the page */
static void check_fmt(const struct kvmm_fmt *f)
{
	uint64_t used = (uint64_t)f->layers * 2 * f->slab_bytes;

	if (!f->tokens_per_page || used > f->page_size)
		FAIL("format: %u tokens per page, %llu bytes used of %llu", f->tokens_per_page,
		     (unsigned long long)used, (unsigned long long)f->page_size);
	if (f->scale_row_bytes) {
		if (f->scale_off % 4 ||
		    f->scale_off < (uint64_t)f->tokens_per_page * f->row_bytes ||
		    f->scale_off + (uint64_t)f->tokens_per_page * f->scale_row_bytes >
			    f->slab_bytes)
			FAIL("format: int8 scales outside the slab");
	} else if ((uint64_t)f->tokens_per_page * f->row_bytes > f->slab_bytes) {
		FAIL("format: rows outside the slab");
	}
	if (f->row_bytes != (uint64_t)f->kv_heads * f->head_dim * f->elem_bytes)
		FAIL("format: row bytes");
}

static void op_fmt(struct in *in)
{
	struct kvmm_fmt f, old;
	uint32_t layers = u8(in), kvh = u8(in), dim = u16(in), dt = u8(in) % 6, gs = u16(in);
	uint64_t page = (uint64_t)u32(in) << (u8(in) % 32);
	int ret;

	memset(&f, 0x5a, sizeof(f));
	old = f;
	ret = kvmm_fmt_init(&f, &(struct kvmm_format){layers, kvh, dim, dt, gs}, page);
	if (ret == 0)
		check_fmt(&f);
	else if (ret != -EINVAL)
		FAIL("kvmm_fmt_init returned %d", ret);
	else if (memcmp(&f, &old, sizeof(f)))
		FAIL("kvmm_fmt_init changed the format on error");
}

static const uint32_t dims[] = {1,  2,	3,  4,	5,  7,	8,  12,	 15,  16,  17,	24,  31,  32,
				33, 48, 63, 64, 65, 80, 96, 127, 128, 129, 136, 160, 192, 256};

static int pool_init(struct pool *pl, struct in *in)
{
	static const uint32_t dtypes[] = {KVMM_DTYPE_FP32, KVMM_DTYPE_FP16, KVMM_DTYPE_BF16,
					  KVMM_DTYPE_INT8};
	uint32_t dt = dtypes[u8(in) % 4], layers = 1 + u8(in) % 3, kvh = 1 + u8(in) % 4;
	uint32_t dim = dims[u8(in) % (sizeof(dims) / sizeof(dims[0]))], gs = 0, tpp, extra;
	uint32_t divs[32], nd = 0;
	uint64_t tb;

	if (dt == KVMM_DTYPE_INT8) {
		for (uint32_t d = 1; d <= dim; d++)
			if (dim % d == 0)
				divs[nd++] = d;
		gs = divs[u8(in) % nd];
	}
	if (kvmm_fmt_init(&pl->f, &(struct kvmm_format){layers, kvh, dim, dt, gs}, 1u << 30))
		FAIL("format %u/%u/%u/%u/%u refused", layers, kvh, dim, dt, gs);
	tb = pl->f.token_bytes;
	tpp = 1 + u8(in) % 24;
	extra = u8(in);
	if (extra == 0xff) /* a big page: thousands of small tokens */
		extra = u16(in) % MAX_PAGE;
	if (tb > MAX_PAGE)
		return -1;
	while (tpp > 1 && tb * tpp + extra > MAX_PAGE)
		tpp--;
	if (tb * tpp + extra > MAX_PAGE)
		extra = 0;
	/* int8 slabs pad their data to 4 bytes before the scales: up to 3 bytes each */
	if (dt == KVMM_DTYPE_INT8 && tb * tpp + extra + 6 * layers <= MAX_PAGE)
		extra += 6 * layers;
	/*
	 * The kernels access elements and scales in place: frames must be aligned for fp32
	 * (every pool's page size is a power of two, at least 4 KiB).
	 */
	extra += (uint32_t)(-(tb * tpp + extra) & 3);
	if (tb * tpp + extra > MAX_PAGE)
		return -1;
	if (kvmm_fmt_init(&pl->f, &(struct kvmm_format){layers, kvh, dim, dt, gs},
			  tb * tpp + extra))
		FAIL("format %u/%u/%u/%u/%u of %llu bytes refused", layers, kvh, dim, dt, gs,
		     (unsigned long long)(tb * tpp + extra));
	check_fmt(&pl->f);

	pl->nr_frames = 1 + u8(in) % MAX_FRAMES;
	pl->bytes = pl->nr_frames * pl->f.page_size;
	pl->base = xmalloc(pl->bytes);
	/*
	 * Bytes with bit 6 clear: every fp32, fp16 and bf16 they make is finite and below 2 in
	 * magnitude, and so is every int8 scale.
	 */
	for (size_t i = 0; i < pl->bytes; i++)
		pl->base[i] = (char)(rnd64() & 0xbf);
	return 0;
}

/* frame entry of a block table or a copy list: mostly valid, sometimes not */
static int32_t frame_of(struct in *in, uint32_t nr_frames)
{
	uint32_t e = u8(in);

	if (e < 0xe0)
		return (int32_t)(e % nr_frames);
	if (e < 0xf0)
		return (int32_t)(nr_frames + (e & 3));
	if (e < 0xfe)
		return KVMM_BLOCK_NONE;
	return e == 0xfe ? INT32_MIN : INT32_MAX;
}

static void op_attn(struct pool *pl, struct in *in, bool prefill)
{
	const struct kvmm_fmt *f = &pl->f;
	uint32_t nr_seqs = u8(in) % 5, g = u8(in), hq, max_blocks = u8(in) % 9, layer, sc;
	uint32_t tpp = f->tokens_per_page, dim = f->head_dim;
	uint32_t *ctx, *qlen = NULL, huge = UINT32_MAX, stride = u8(in) | 1;
	int32_t *table;
	uint64_t rows = 0, work = 0;
	bool valid;
	struct kvmm_attn_batch b;
	float *q, *out, *out0;
	size_t nout;
	int ret;

	hq = g & 0x80 ? g & 0x1f : f->kv_heads * (1 + g % 4);
	layer = u8(in) % (f->layers + 1);
	sc = u8(in);
	valid = layer < f->layers && hq && hq % f->kv_heads == 0;
	/*
	 * A context of nearly 2^32 tokens (big pages of small tokens keep its table to a few
	 * MiB): prefill with no new tokens in it, so nothing is computed over it.
	 */
	if (prefill && nr_seqs && tpp >= 1024 && (sc & 0x7f) == 0x7f) {
		huge = nr_seqs - 1;
		max_blocks = (uint32_t)(((uint64_t)UINT32_MAX + tpp - 1) / tpp);
	}

	table = xmalloc((size_t)nr_seqs * max_blocks * sizeof(*table));
	for (uint32_t i = 0; i < nr_seqs; i++)
		for (uint32_t j = 0; j < max_blocks; j++)
			table[(size_t)i * max_blocks + j] =
				j < 9 ? frame_of(in, pl->nr_frames)
				      : (int32_t)((j * stride + i) % pl->nr_frames);
	ctx = xmalloc(nr_seqs * sizeof(*ctx));
	if (prefill)
		qlen = xmalloc(nr_seqs * sizeof(*qlen));
	for (uint32_t i = 0; i < nr_seqs; i++) {
		uint64_t nb;

		ctx[i] = u16(in) % (min_t(uint32_t, max_blocks, 8) * tpp + 3);
		if (i == huge)
			ctx[i] = UINT32_MAX - u8(in) % tpp;
		nb = ((uint64_t)ctx[i] + tpp - 1) / tpp;
		if (nb > max_blocks)
			valid = false;
		for (uint64_t j = 0; j < nb && j < max_blocks; j++) {
			int32_t e = table[(size_t)i * max_blocks + j];

			if (e < 0 || (uint32_t)e >= pl->nr_frames)
				valid = false;
		}
		if (prefill) {
			qlen[i] = i == huge ? 0 : u8(in) % (ctx[i] + 2);
			if (qlen[i] > ctx[i])
				valid = false;
			rows += qlen[i];
			work += (uint64_t)qlen[i] * ctx[i] * hq * dim;
		} else {
			rows++;
			work += (uint64_t)ctx[i] * hq * dim;
		}
	}
	if (work > MAX_WORK || rows * hq * dim > MAX_WORK) {
		free(table);
		free(ctx);
		free(qlen);
		return;
	}

	nout = rows * hq * dim;
	q = floats(nout);
	out = xmalloc(nout * sizeof(float));
	out0 = xmalloc(nout * sizeof(float));
	fill_sentinel(out, nout);
	memcpy(out0, out, nout * sizeof(float));
	b = (struct kvmm_attn_batch){
		.kv = {pl->base, f, layer, pl->nr_frames},
		.nr_seqs = nr_seqs,
		.num_q_heads = hq,
		.block_tables = table,
		.max_blocks = max_blocks,
		.ctx_lens = ctx,
		.q_lens = qlen,
		.scale = sc ? (float)(int8_t)sc / 16.0f : 0.0f,
	};
	ret = prefill ? kvmm_cpu_paged_prefill(&b, q, out) : kvmm_cpu_paged_decode(&b, q, out);
	if (ret == -ENOMEM)
		goto out_free;
	if (valid != (ret == 0) || (ret && ret != -EINVAL))
		FAIL("%s: returned %d for a%s batch", prefill ? "prefill" : "decode", ret,
		     valid ? " valid" : "n invalid");
	if (ret) {
		if (memcmp(out, out0, nout * sizeof(float)))
			FAIL("%s: -EINVAL but the output changed", prefill ? "prefill" : "decode");
		goto out_free;
	}
	for (size_t i = 0, r = 0; i < nr_seqs; i++) {
		uint64_t n = prefill ? qlen[i] : 1;

		for (uint64_t e = r * hq * dim; e < (r + n) * hq * dim; e++) {
			if (!isfinite(out[e]))
				FAIL("%s: seq %zu element %llu not finite (%g)",
				     prefill ? "prefill" : "decode", i, (unsigned long long)e,
				     (double)out[e]);
			if (!ctx[i] && out[e] != 0.0f)
				FAIL("decode: a sequence without context got %g", (double)out[e]);
		}
		r += n;
	}
out_free:
	free(q);
	free(out);
	free(out0);
	free(table);
	free(ctx);
	free(qlen);
}

static void op_reshape(struct pool *pl, struct in *in)
{
	const struct kvmm_fmt *f = &pl->f;
	uint32_t n = u8(in) % 9, layer = u8(in) % (f->layers + 1), tpp = f->tokens_per_page;
	size_t nelem = (size_t)f->kv_heads * f->head_dim;
	struct kvmm_kv_pages kv = {pl->base, f, layer, pl->nr_frames};
	int64_t *slots = xmalloc(n * sizeof(*slots));
	bool valid = layer < f->layers;
	float *k, *v;
	char *before = NULL;
	int ret;

	for (uint32_t t = 0; t < n; t++) {
		uint32_t e = u8(in);

		if (e < 0xd0) {
			slots[t] = kvmm_kv_slot(f, (int32_t)(e % pl->nr_frames), u8(in) % tpp);
		} else if (e < 0xe0) {
			slots[t] = kvmm_kv_slot(f, (int32_t)(pl->nr_frames + (e & 7)), 0);
			valid = false;
		} else if (e < 0xf0) {
			slots[t] = e & 1 ? -1 : INT64_MIN + (e & 7);
		} else {
			static const int64_t big[] = {INT64_MAX, (int64_t)UINT32_MAX,
						      (int64_t)INT32_MAX, (int64_t)1 << 40};

			slots[t] = big[e & 3];
			valid = false;
		}
	}
	k = floats(n * nelem);
	v = floats(n * nelem);
	if (!valid) {
		before = xmalloc(pl->bytes);
		memcpy(before, pl->base, pl->bytes);
	}
	ret = kvmm_cpu_reshape_and_cache(&kv, n, slots, k, v);
	if (valid != (ret == 0) || (ret && ret != -EINVAL))
		FAIL("reshape: returned %d for %s arguments", ret, valid ? "valid" : "invalid");
	if (ret && memcmp(before, pl->base, pl->bytes))
		FAIL("reshape: -EINVAL but the pool changed");
	if (!ret && f->dtype == KVMM_DTYPE_FP32) {
		/* the last write of each slot is there, exactly */
		for (uint32_t t = 0; t < n; t++) {
			uint32_t u;

			if (slots[t] < 0)
				continue;
			for (u = t + 1; u < n && slots[u] != slots[t]; u++)
				;
			if (u < n)
				continue;
			for (uint32_t kvi = 0; kvi < 2; kvi++) {
				const char *page =
					pl->base + (uint64_t)slots[t] / tpp * f->page_size;
				uint64_t off = kvmm_fmt_offset(f, layer, kvi, slots[t] % tpp);

				if (memcmp(page + off, (kvi ? v : k) + t * nelem,
					   nelem * sizeof(float)))
					FAIL("reshape: slot %lld does not hold its row",
					     (long long)slots[t]);
			}
		}
	}
	free(before);
	free(k);
	free(v);
	free(slots);
}

static void op_copy(struct pool *pl, struct in *in)
{
	const struct kvmm_fmt *f = &pl->f;
	uint32_t nr = u8(in) % 5, mode = u8(in) % 3, ntok = u8(in) % (f->tokens_per_page + 2);
	uint32_t nstage = 1 + u8(in) % 3, dn, sn;
	int32_t *dst = xmalloc(nr * sizeof(*dst)), *src = xmalloc(nr * sizeof(*src));
	char *stage = NULL, *db, *sb, *before;
	size_t dbytes;
	bool valid = ntok <= f->tokens_per_page;
	int ret;

	/* 0: within the pool (copy-on-write); 1: pool to staging (swap out); 2: back (swap in) */
	if (mode) {
		stage = xmalloc(nstage * f->page_size);
		for (size_t i = 0; i < nstage * f->page_size; i++)
			stage[i] = (char)(rnd64() & 0xbf);
	}
	db = mode == 1 ? stage : pl->base;
	sb = mode == 2 ? stage : pl->base;
	dn = mode == 1 ? nstage : pl->nr_frames;
	sn = mode == 2 ? nstage : pl->nr_frames;
	dbytes = (size_t)dn * f->page_size;
	for (uint32_t i = 0; i < nr; i++) {
		/* the API has no frame counts: only negative frames are the caller's to try */
		dst[i] = frame_of(in, dn);
		src[i] = frame_of(in, sn);
		if (dst[i] >= (int32_t)dn)
			dst[i] %= (int32_t)dn;
		if (src[i] >= (int32_t)sn)
			src[i] %= (int32_t)sn;
		if (dst[i] < 0 || src[i] < 0 || (db == sb && dst[i] == src[i]))
			valid = false;
	}
	before = xmalloc(dbytes);
	memcpy(before, db, dbytes);
	ret = kvmm_cpu_copy_pages(f, db, sb, dst, src, nr, ntok);
	if (valid != (ret == 0) || (ret && ret != -EINVAL))
		FAIL("copy_pages: returned %d for %s arguments", ret, valid ? "valid" : "invalid");
	if (ret && memcmp(before, db, dbytes))
		FAIL("copy_pages: -EINVAL but the destination changed");
	if (!ret && nr == 1) {
		const char *d = db + (uint64_t)dst[0] * f->page_size;
		const char *s = sb + (uint64_t)src[0] * f->page_size;

		for (uint64_t slab = 0; slab < 2ull * f->layers; slab++) {
			uint64_t off = slab * f->slab_bytes;
			uint64_t rows = ntok ? ntok : f->tokens_per_page;

			if (memcmp(d + off, s + off, rows * f->row_bytes) ||
			    (f->scale_row_bytes &&
			     memcmp(d + off + f->scale_off, s + off + f->scale_off,
				    rows * f->scale_row_bytes)))
				FAIL("copy_pages: slab %llu not copied", (unsigned long long)slab);
		}
	}
	free(before);
	free(stage);
	free(dst);
	free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t split[] = {512u << 10, 0, 64, 1024, 4096, 1u << 16};
	static uint32_t threads = 1;
	struct in in = {data, size};
	struct pool pl;
	uint32_t t, knobs;

	if (size > 4096)
		return -1;
	rng = 0;
	for (size_t i = 0; i < size && i < 8; i++)
		rng = rng << 8 | data[i];

	knobs = u8(&in);
	(void)kvmm_cpu_isa_set((enum kvmm_cpu_isa)(knobs % KVMM_CPU_ISA_COUNT));
	t = knobs & 0x80 ? 2 + (knobs >> 6 & 1) : 1;
	if (t != threads && kvmm_cpu_set_threads(t) == 0)
		threads = t;
	kvmm_cpu_split_min_bytes = split[(knobs >> 2) % 6];
	kvmm_cpu_prefetch_chunks = (knobs >> 4) & 3;
	kvmm_cpu_decode_by_address = !(knobs & 0x40);

	if (pool_init(&pl, &in))
		return -1;
	for (uint32_t i = 0; i < MAX_OPS && in.n; i++) {
		switch (u8(&in) % 6) {
		case 0:
		case 1:
			op_attn(&pl, &in, false);
			break;
		case 2:
			op_attn(&pl, &in, true);
			break;
		case 3:
			op_reshape(&pl, &in);
			break;
		case 4:
			op_copy(&pl, &in);
			break;
		case 5:
			op_fmt(&in);
			break;
		}
	}
	free(pl.base);
	return 0;
}
