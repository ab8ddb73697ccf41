// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/attn.c - paged decode and prefill attention on the CPU.
 *
 * Both kernels reduce to one routine, attend(): a tile of query vectors, each with its KV
 * head and causal limit (it sees tokens [0, limit)), walks the sequence's tokens once, in
 * chunks that never cross a page, all heads per chunk: a chunk's K (and V) rows are one
 * contiguous range of the slab, read from memory once and then from cache by every head.
 * For each run of queries sharing a head and a limit (a GQA group) the ISA code scores the
 * chunk's K rows, softmax_step() updates each query's running max and sum (online softmax:
 * when the max grows the sum and accumulator are scaled by exp(old - new), so no exponent is
 * positive and nothing overflows), and the ISA code adds the exp-weighted V rows.  The next
 * chunk (another frame, which no hardware prefetcher can guess) is prefetched meanwhile.
 * Decode makes one tile of all query heads of a sequence; prefill makes tiles of all query
 * heads of a few consecutive new tokens, with limits position + 1.
 * Arguments are checked before anything is read: every block a sequence needs must be in its
 * table, present and below nr_frames (when given).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "kernels/cpu/cpu.h"

#define TILE_Q 32		/* prefill: query vectors at least, per pass over the KV */
#define CHUNK 64		/* tokens scored before their V rows are summed */
#define CHUNK_BYTES (64u << 10) /* ... and at most this much of a K slab, to stay in L2 */

struct attn_ctx {
	const struct kvmm_attn_batch *b;
	const struct kvmm_fmt *f;
	const struct kvmm_cpu_ops *ops;
	const char *base;
	uint64_t k_off, v_off;	 /* this layer's K and V slabs inside a page */
	uint64_t ks_off, vs_off; /* their scales (int8) */
	uint32_t dim, gs, group; /* head dim, int8 group (else dim), q heads per kv head */
	uint32_t dpad;		 /* floats per scratch row */
	float scale;

	uint32_t chunk; /* tokens per chunk */
	uint32_t tile;	/* query vectors per pass */

	/* scratch, tile rows each */
	float *qs;  /* scaled queries */
	float *acc; /* weighted V sums */
	float *s;   /* chunk scores, then weights */
	float *m, *l;
	uint32_t *limit, *head;
	float **out;
};

static int check_batch(const struct kvmm_attn_batch *b, bool prefill)
{
	const struct kvmm_kv_pages *kv = &b->kv;
	const struct kvmm_fmt *f = kv->fmt;

	if (!f || !kv->base || kv->layer >= f->layers || !f->tokens_per_page)
		return -EINVAL;
	if (kvmm_dtype_size(f->dtype) == 0 || (f->dtype == KVMM_DTYPE_INT8 && !f->group_size))
		return -EINVAL;
	if (!b->num_q_heads || b->num_q_heads % f->kv_heads)
		return -EINVAL;
	if (b->nr_seqs && (!b->block_tables || !b->ctx_lens || (prefill && !b->q_lens)))
		return -EINVAL;
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		const int32_t *table = b->block_tables + (uint64_t)i * b->max_blocks;
		uint64_t ctx = b->ctx_lens[i];
		uint64_t nblocks = (ctx + f->tokens_per_page - 1) / f->tokens_per_page;

		if (nblocks > b->max_blocks)
			return -EINVAL;
		if (prefill && b->q_lens[i] > ctx)
			return -EINVAL;
		for (uint64_t j = 0; j < nblocks; j++)
			if (table[j] < 0 || (kv->nr_frames && (uint32_t)table[j] >= kv->nr_frames))
				return -EINVAL;
	}
	return 0;
}

static int ctx_init(struct attn_ctx *c, const struct kvmm_attn_batch *b, uint32_t tile)
{
	const struct kvmm_fmt *f = b->kv.fmt;
	size_t floats;

	memset(c, 0, sizeof(*c));
	c->b = b;
	c->f = f;
	c->ops = kvmm_cpu_ops(f->dtype);
	c->base = b->kv.base;
	c->k_off = kvmm_fmt_offset(f, b->kv.layer, 0, 0);
	c->v_off = kvmm_fmt_offset(f, b->kv.layer, 1, 0);
	if (f->dtype == KVMM_DTYPE_INT8) {
		c->ks_off = kvmm_fmt_scale_offset(f, b->kv.layer, 0, 0);
		c->vs_off = kvmm_fmt_scale_offset(f, b->kv.layer, 1, 0);
	}
	c->dim = f->head_dim;
	c->gs = f->dtype == KVMM_DTYPE_INT8 ? f->group_size : f->head_dim;
	c->group = b->num_q_heads / f->kv_heads;
	c->scale = b->scale != 0.0f ? b->scale : 1.0f / sqrtf((float)f->head_dim);
	c->chunk = (uint32_t)min_t(uint64_t, CHUNK, max_t(uint64_t, 1, CHUNK_BYTES / f->row_bytes));
	c->tile = tile;
	/* a whole vector past the last element: group tails may start a vector near the end */
	c->dpad = (f->head_dim + KVMM_CPU_PAD - 1) / KVMM_CPU_PAD * KVMM_CPU_PAD + KVMM_CPU_PAD;
	/* aligned_alloc wants a multiple of the alignment: 16 floats */
	floats = ((size_t)tile * (2 * c->dpad + c->chunk + 2) + 15) / 16 * 16;
	c->qs = aligned_alloc(64, floats * sizeof(float));
	c->limit = malloc((size_t)tile * 2 * sizeof(uint32_t));
	c->out = malloc((size_t)tile * sizeof(float *));
	if (!c->qs || !c->limit || !c->out) {
		free(c->qs);
		free(c->limit);
		free(c->out);
		return -ENOMEM;
	}
	memset(c->qs, 0, floats * sizeof(float));
	c->acc = c->qs + (size_t)tile * c->dpad;
	c->s = c->acc + (size_t)tile * c->dpad;
	c->m = c->s + (size_t)tile * c->chunk;
	c->l = c->m + tile;
	c->head = c->limit + tile;
	return 0;
}

static void ctx_fini(struct attn_ctx *c)
{
	free(c->qs);
	free(c->limit);
	free(c->out);
}

/* Tile slot j: query q (fp32, dim) of kv head h, seeing tokens [0, limit), result to out. */
static void tile_set(struct attn_ctx *c, uint32_t j, const float *q, uint32_t h, uint32_t limit,
		     float *out)
{
	float *qs = c->qs + (size_t)j * c->dpad;

	for (uint32_t d = 0; d < c->dim; d++)
		qs[d] = q[d] * c->scale;
	memset(c->acc + (size_t)j * c->dpad, 0, c->dpad * sizeof(float));
	c->m[j] = -INFINITY;
	c->l[j] = 0.0f;
	c->limit[j] = limit;
	c->head[j] = h;
	c->out[j] = out;
}

/*
 * Ask for the next chunk's K and V rows while this one is computed: the next page of a
 * sequence is anywhere in the pool, so no hardware prefetcher can guess it, but the block
 * table says where it is.  The range is requested a slice at a time, between the heads'
 * computations, so the prefetches never pile up beyond what the core can keep in flight.
 */
struct prefetch {
	const char *k, *v;
	uint64_t bytes, done, slice;
};

static void prefetch_some(struct prefetch *pf)
{
	uint64_t end = min_t(uint64_t, pf->done + pf->slice, pf->bytes);

	for (uint64_t o = pf->done; o < end; o += 64) {
		__builtin_prefetch(pf->k + o, 0, 2);
		__builtin_prefetch(pf->v + o, 0, 2);
	}
	pf->done = end;
}

/*
 * Online softmax for slot j over nj new scores: fold them into the running max and sum and
 * turn them into weights against the (new) max.
 */
static void softmax_step(struct attn_ctx *c, uint32_t j, uint32_t nj)
{
	float *s = c->s + (size_t)j * c->chunk, *acc = c->acc + (size_t)j * c->dpad;
	float cm = s[0], mnew;

	for (uint32_t t = 1; t < nj; t++)
		cm = s[t] > cm ? s[t] : cm;
	mnew = cm > c->m[j] ? cm : c->m[j];
	if (mnew > c->m[j] && c->l[j] > 0.0f) {
		/* the max grew: rescale what was summed against the old one */
		float corr = expf(c->m[j] - mnew);

		c->l[j] *= corr;
		for (uint32_t d = 0; d < c->dim; d++)
			acc[d] *= corr;
	}
	c->m[j] = mnew;
	c->l[j] += c->ops->expsum(s, nj, mnew);
}

/* Run nq tile slots over the sequence with block table table. */
static void attend(struct attn_ctx *c, const int32_t *table, uint32_t nq)
{
	const struct kvmm_fmt *f = c->f;
	const struct kvmm_cpu_ops *ops = c->ops;
	uint64_t head_bytes = (uint64_t)c->dim * f->elem_bytes;
	uint64_t head_sbytes = (uint64_t)(c->dim / c->gs) * KVMM_FMT_SCALE_BYTES;
	uint32_t tpp = f->tokens_per_page, maxlim = 0, t0, j;
	struct prefetch pf = {0};

	for (j = 0; j < nq; j++)
		maxlim = max_t(uint32_t, maxlim, c->limit[j]);

	/*
	 * Chunks of one page, all heads: the chunk's K (and V) rows are one contiguous range of
	 * the slab, read once from memory, then from cache by every head and query.
	 */
	for (t0 = 0; t0 < maxlim;) {
		uint32_t row = t0 % tpp;
		uint32_t n = min_t(uint32_t, min_t(uint32_t, c->chunk, tpp - row), maxlim - t0);
		const char *page = c->base + (uint64_t)table[t0 / tpp] * f->page_size;
		const char *k = page + c->k_off + row * f->row_bytes;
		const char *v = page + c->v_off + row * f->row_bytes;
		const char *ks = NULL, *vs = NULL;
		uint32_t t1 = t0 + n;

		pf.bytes = pf.done = 0;
		if (t1 < maxlim) {
			uint32_t nrow = t1 % tpp;
			const char *np = c->base + (uint64_t)table[t1 / tpp] * f->page_size;
			uint32_t nn =
				min_t(uint32_t, min_t(uint32_t, c->chunk, tpp - nrow), maxlim - t1);

			pf.k = np + c->k_off + nrow * f->row_bytes;
			pf.v = np + c->v_off + nrow * f->row_bytes;
			pf.bytes = (uint64_t)nn * f->row_bytes;
			/* spread over the kv heads' runs, whole cache lines */
			pf.slice = (pf.bytes / f->kv_heads + 127) / 64 * 64;
		}
		if (f->dtype == KVMM_DTYPE_INT8) {
			ks = page + c->ks_off + row * f->scale_row_bytes;
			vs = page + c->vs_off + row * f->scale_row_bytes;
		}
		/* runs of slots with the same head and limit: the queries of one GQA group */
		for (j = 0; j < nq;) {
			uint32_t h = c->head[j], lim = c->limit[j], e = j + 1, nj;

			while (e < nq && c->head[e] == h && c->limit[e] == lim)
				e++;
			if (lim <= t0) {
				j = e;
				continue;
			}
			nj = min_t(uint32_t, n, lim - t0);
			ops->qk(c->qs + (size_t)j * c->dpad, c->dpad, e - j, k + h * head_bytes,
				f->row_bytes, ks ? (const float *)(ks + h * head_sbytes) : NULL,
				f->scale_row_bytes, nj, c->dim, c->gs, c->s + (size_t)j * c->chunk,
				c->chunk);
			for (uint32_t i = j; i < e; i++)
				softmax_step(c, i, nj);
			ops->pv(c->acc + (size_t)j * c->dpad, c->dpad, c->s + (size_t)j * c->chunk,
				c->chunk, e - j, v + h * head_bytes, f->row_bytes,
				vs ? (const float *)(vs + h * head_sbytes) : NULL,
				f->scale_row_bytes, nj, c->dim, c->gs);
			prefetch_some(&pf);
			j = e;
		}
		while (pf.done < pf.bytes) /* runs fewer than heads (a causal tail) */
			prefetch_some(&pf);
		t0 = t1;
	}

	for (j = 0; j < nq; j++) {
		const float *acc = c->acc + (size_t)j * c->dpad;
		float inv = c->l[j] > 0.0f ? 1.0f / c->l[j] : 0.0f;

		for (uint32_t d = 0; d < c->dim; d++)
			c->out[j][d] = acc[d] * inv;
	}
}

int kvmm_cpu_paged_decode(const struct kvmm_attn_batch *b, const float *q, float *out)
{
	struct attn_ctx c;
	int err;

	if (!b || (b->nr_seqs && (!q || !out)))
		return -EINVAL;
	err = check_batch(b, false);
	if (err)
		return err;
	/* one pass per sequence: all its query heads share each chunk of its KV */
	err = ctx_init(&c, b, b->num_q_heads);
	if (err)
		return err;
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		const int32_t *table = b->block_tables + (uint64_t)i * b->max_blocks;

		for (uint32_t hq = 0; hq < b->num_q_heads; hq++) {
			size_t off = ((size_t)i * b->num_q_heads + hq) * c.dim;

			tile_set(&c, hq, q + off, hq / c.group, b->ctx_lens[i], out + off);
		}
		attend(&c, table, b->num_q_heads);
	}
	ctx_fini(&c);
	return 0;
}

int kvmm_cpu_paged_prefill(const struct kvmm_attn_batch *b, const float *q, float *out)
{
	struct attn_ctx c;
	size_t tok = 0; /* first query row of sequence i */
	uint32_t per_tile;
	int err;

	if (!b || (b->nr_seqs && (!q || !out)))
		return -EINVAL;
	err = check_batch(b, true);
	if (err)
		return err;
	/* all query heads of several consecutive new tokens per pass */
	per_tile = max_t(uint32_t, 1, TILE_Q / b->num_q_heads);
	err = ctx_init(&c, b, per_tile * b->num_q_heads);
	if (err)
		return err;
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		const int32_t *table = b->block_tables + (uint64_t)i * b->max_blocks;
		uint32_t qlen = b->q_lens[i], first = b->ctx_lens[i] - qlen;

		for (uint32_t r0 = 0; r0 < qlen; r0 += per_tile) {
			uint32_t nr = min_t(uint32_t, per_tile, qlen - r0), nq = 0;

			for (uint32_t r = r0; r < r0 + nr; r++) {
				for (uint32_t hq = 0; hq < b->num_q_heads; hq++) {
					size_t off = ((tok + r) * b->num_q_heads + hq) * c.dim;

					tile_set(&c, nq++, q + off, hq / c.group, first + r + 1,
						 out + off);
				}
			}
			attend(&c, table, nq);
		}
		tok += qlen;
	}
	ctx_fini(&c);
	return 0;
}
