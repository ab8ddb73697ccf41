// SPDX-License-Identifier: MIT
/*
 * kernels/cpu/attn.c - paged decode and prefill attention on the CPU.
 *
 * Both kernels reduce to one routine, attend(): a tile of query vectors, each with its KV
 * head and causal limit (it sees tokens [0, limit)), walks the sequence's tokens once, in
 * chunks of up to 64 tokens and 32 KiB of K rows, 128 KiB where the arithmetic binds (a list
 * of page runs; chunk_tokens() says why), all heads per
 * chunk: the chunk's K (and V) rows are read from memory once and then from cache by every
 * head.  For each run of queries sharing a head and a limit (a GQA group) the ISA code
 * scores the chunk's K rows, takes the online-softmax step (running max and sum; when the
 * max grows the accumulator is rescaled by exp(old - new) as the weighted sum loads it, so
 * no exponent is positive and nothing overflows) and adds the exp-weighted V rows.  The next
 * chunk (other frames, which no hardware prefetcher can guess) is prefetched by the inner
 * loops, each line they load naming the same line of the next chunk (struct kvmm_cpu_seg).
 * Decode makes one tile of all query heads of a sequence; prefill makes tiles of all query
 * heads of a few consecutive new tokens, with limits position + 1.  Both walk the pages every
 * query sees whole in address order (by_address()).
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
#define CHUNK 64		/* tokens scored before their V rows are summed, over pages */
#define CHUNK_BYTES (32u << 10) /* ... and at most this much of K (4x: chunk_tokens()) */

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
	uint32_t begin; /* first token of the pass (a split context's part) */
	bool l1;	/* L1 prefetch of the next step's lines (decode; struct kvmm_cpu_chunk) */
	float *part;	/* NULL: finish into out; else the part's state: acc rows, m, l */
	/* the pass this thread runs next (NULL table: none), prefetched at the end of this one */
	const int32_t *next_table;
	uint32_t next_begin, next_end;

	/* scratch, tile rows each */
	float *qs;  /* scaled queries */
	float *acc; /* weighted V sums */
	float *s;   /* chunk scores, then weights */
	float *m, *l;
	float *corr; /* per slot: the factor of the last softmax step */
	uint32_t *limit, *head;
	float **out;
	struct kvmm_cpu_seg *seg;  /* the chunk's runs (chunk of them: one per token at worst) */
	struct kvmm_cpu_seg *pseg; /* the runs of the chunk to prefetch, as many */
};

static int check_batch(const struct kvmm_attn_batch *b, bool prefill)
{
	const struct kvmm_kv_pages *kv = &b->kv;
	const struct kvmm_fmt *f = kv->fmt;

	if (!f || !kv->base || kv->layer >= f->layers || !f->tokens_per_page)
		return -EINVAL;
	if (kvmm_dtype_size(f->dtype) == 0 || (f->dtype == KVMM_DTYPE_INT8 && !f->quant_group))
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

/*
 * Tokens per chunk for a tile of tile query vectors: at most CHUNK, and at most CHUNK_BYTES of
 * K rows, or four times that where every KV byte feeds at least two multiply-adds (queries
 * per KV head in the tile over the element size: GQA 4 and up in fp16 and bf16, GQA 2 in
 * int8, GQA 8 in fp32, prefill's tiles of fp16).  The softmax step and the accumulators'
 * load and store are paid per chunk and query, so where the arithmetic binds a longer chunk
 * pays (GQA 4 fp16: 16 of 96 cycles a row pair at 16 tokens, 6 of 86 at 64); where memory
 * binds it loses (MHA 10 %, GQA 2 fp16 5 %, GQA 4 fp32 9 % slower at 32k: the V lines that
 * the scores prefetch into L1 are evicted again before the sums reach them).  Measured in
 * Documentation/kernels/cpu.md, Chunk length.
 */
static uint32_t chunk_tokens(const struct kvmm_fmt *f, uint32_t tile)
{
	uint64_t per_byte2 = (uint64_t)tile / f->kv_heads * 2 / f->elem_bytes;
	uint64_t bytes = per_byte2 >= 4 ? 4 * CHUNK_BYTES : CHUNK_BYTES;

	return (uint32_t)min_t(uint64_t, CHUNK, max_t(uint64_t, 1, bytes / f->row_bytes));
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
	c->gs = f->dtype == KVMM_DTYPE_INT8 ? f->quant_group : f->head_dim;
	c->group = b->num_q_heads / f->kv_heads;
	c->scale = b->scale != 0.0f ? b->scale : 1.0f / sqrtf((float)f->head_dim);
	c->chunk = chunk_tokens(f, tile);
	c->tile = tile;
	/* a whole vector past the last element: group tails may start a vector near the end */
	c->dpad = (f->head_dim + KVMM_CPU_PAD - 1) / KVMM_CPU_PAD * KVMM_CPU_PAD + KVMM_CPU_PAD;
	/* aligned_alloc wants a multiple of the alignment: 16 floats */
	floats = ((size_t)tile * (2 * c->dpad + c->chunk + 3) + 15) / 16 * 16;
	c->qs = aligned_alloc(64, floats * sizeof(float));
	c->limit = malloc((size_t)tile * 2 * sizeof(uint32_t));
	c->out = malloc((size_t)tile * sizeof(float *));
	c->seg = malloc((size_t)c->chunk * 2 * sizeof(*c->seg));
	if (!c->qs || !c->limit || !c->out || !c->seg) {
		free(c->qs);
		free(c->limit);
		free(c->out);
		free(c->seg);
		return -ENOMEM;
	}
	memset(c->qs, 0, floats * sizeof(float));
	c->acc = c->qs + (size_t)tile * c->dpad;
	c->s = c->acc + (size_t)tile * c->dpad;
	c->m = c->s + (size_t)tile * c->chunk;
	c->l = c->m + tile;
	c->corr = c->l + tile;
	c->head = c->limit + tile;
	c->pseg = c->seg + c->chunk;
	return 0;
}

static void ctx_fini(struct attn_ctx *c)
{
	free(c->qs);
	free(c->limit);
	free(c->out);
	free(c->seg);
}

/* Tile slot j: query q (fp32, dim) of kv head h, seeing tokens [0, limit), result to out. */
static void tile_set(struct attn_ctx *c, uint32_t j, const float *q, uint32_t h, uint32_t limit,
		     float *out)
{
	/* locals: stores through qs cannot change them, so the loop vectorises */
	float *qs = c->qs + (size_t)j * c->dpad, scale = c->scale;
	uint32_t dim = c->dim;

	for (uint32_t d = 0; d < dim; d++)
		qs[d] = q[d] * scale;
	memset(c->acc + (size_t)j * c->dpad, 0, c->dpad * sizeof(float));
	c->m[j] = -INFINITY;
	c->l[j] = 0.0f;
	c->limit[j] = limit;
	c->head[j] = h;
	c->out[j] = out;
}

/*
 * The runs of tokens [t0, t0 + n) of the sequence with block table table (n <= c->chunk):
 * one per page; returns how many.
 */
static uint32_t chunk_segs(const struct attn_ctx *c, const int32_t *table, uint32_t t0, uint32_t n,
			   struct kvmm_cpu_seg *seg)
{
	const struct kvmm_fmt *f = c->f;
	uint32_t tpp = f->tokens_per_page, t, r = 0;

	for (t = t0; t < t0 + n; r++) {
		uint32_t row = t % tpp, k = min_t(uint32_t, tpp - row, t0 + n - t);
		const char *page = c->base + (uint64_t)table[t / tpp] * f->page_size;

		seg[r].k = page + c->k_off + row * f->row_bytes;
		seg[r].v = page + c->v_off + row * f->row_bytes;
		seg[r].ks = seg[r].vs = NULL;
		if (f->dtype == KVMM_DTYPE_INT8) {
			seg[r].ks = page + c->ks_off + row * f->scale_row_bytes;
			seg[r].vs = page + c->vs_off + row * f->scale_row_bytes;
		}
		seg[r].pf = seg[r].pfs = 0;
		seg[r].n = k;
		t += k;
	}
	return r;
}

/*
 * Where to prefetch while the chunk at t0 (its nr runs in c->seg) is computed: the next page
 * of a sequence is anywhere in the pool, so no hardware prefetcher can guess it, but the block
 * table says where it is.  The chunk kvmm_cpu_prefetch_chunks chunks ahead (past the end of
 * this pass, the pass this thread runs next: a worker claims its next unit before it starts
 * the current one) has runs like this one's in all but the last chunk of a sequence, so run r
 * is prefetched at the distance between the two runs r (struct kvmm_cpu_seg).  One 64-byte
 * line per line loaded, into L2: the requests go out at the rate the rows are consumed, and
 * in the order the heads will want them, with no queue to keep (cpu.md, Prefetch).
 */
uint32_t kvmm_cpu_prefetch_chunks = 1; /* measured best of 0..4 on the dev VM (cpu.md) */

static void prefetch_plan(struct attn_ctx *c, const int32_t *table, uint32_t t0, uint32_t n,
			  uint32_t maxlim, uint32_t nr)
{
	uint64_t d = kvmm_cpu_prefetch_chunks, left, p;
	uint32_t pn, pr, r;

	if (!d)
		return;
	/* chunks of this pass after this one */
	left = (maxlim - t0 - n + c->chunk - 1) / c->chunk;
	if (d <= left) {
		p = t0 + d * c->chunk;
		pn = (uint32_t)min_t(uint64_t, c->chunk, maxlim - p);
		pr = chunk_segs(c, table, (uint32_t)p, pn, c->pseg);
	} else {
		/* into the pass this thread runs next: its chunk d - left - 1 */
		p = c->next_begin + (d - left - 1) * c->chunk;
		if (!c->next_table || p >= c->next_end)
			return;
		pn = (uint32_t)min_t(uint64_t, c->chunk, c->next_end - p);
		pr = chunk_segs(c, c->next_table, (uint32_t)p, pn, c->pseg);
	}
	for (r = 0; r < nr && r < pr; r++) {
		c->seg[r].pf = c->pseg[r].k - c->seg[r].k;
		if (c->seg[r].ks)
			c->seg[r].pfs = c->pseg[r].ks - c->seg[r].ks;
	}
}

/* Run nq tile slots over the sequence with block table table. */
static void attend(struct attn_ctx *c, const int32_t *table, uint32_t nq)
{
	const struct kvmm_fmt *f = c->f;
	const struct kvmm_cpu_ops *ops = c->ops;
	uint32_t maxlim = 0, t0, j;
	struct kvmm_cpu_chunk ch = {
		.seg = c->seg,
		.stride = f->row_bytes,
		.sstride = f->scale_row_bytes,
		.dim = c->dim,
		.gs = c->gs,
		.l1 = c->l1,
	};

	for (j = 0; j < nq; j++)
		maxlim = max_t(uint32_t, maxlim, c->limit[j]);

	/*
	 * Chunks of up to c->chunk tokens over consecutive pages, all heads: the chunk's K (and
	 * V) rows are one contiguous range of each page's slab, read once from memory, then from
	 * cache by every head and query.
	 */
	for (t0 = c->begin; t0 < maxlim;) {
		uint32_t n = min_t(uint32_t, c->chunk, maxlim - t0);

		prefetch_plan(c, table, t0, n, maxlim, chunk_segs(c, table, t0, n, c->seg));
		/* runs of slots with the same head and limit: the queries of one GQA group */
		for (j = 0; j < nq;) {
			uint32_t h = c->head[j], lim = c->limit[j], e = j + 1;
			float *s = c->s + (size_t)j * c->chunk;

			while (e < nq && c->head[e] == h && c->limit[e] == lim)
				e++;
			if (lim <= t0) {
				j = e;
				continue;
			}
			ch.n = min_t(uint32_t, n, lim - t0);
			ch.hoff = (uint64_t)h * c->dim * f->elem_bytes;
			ch.hsoff = (uint64_t)h * (c->dim / c->gs) * KVMM_FMT_SCALE_BYTES;
			ops->qk(&ch, c->qs + (size_t)j * c->dpad, c->dpad, e - j, s, c->chunk);
			ops->softmax(s, c->chunk, e - j, ch.n, c->m + j, c->l + j, c->corr + j);
			ops->pv(&ch, c->acc + (size_t)j * c->dpad, c->dpad, s, c->chunk, e - j,
				c->corr + j);
			j = e;
		}
		t0 += n;
	}

	if (c->part) {
		/* one part of a split context: its state, for merge_parts() */
		float *pm = c->part + (size_t)nq * c->dim, *pl = pm + nq;

		for (j = 0; j < nq; j++) {
			memcpy(c->part + (size_t)j * c->dim, c->acc + (size_t)j * c->dpad,
			       c->dim * sizeof(float));
			pm[j] = c->m[j];
			pl[j] = c->l[j];
		}
		return;
	}
	for (j = 0; j < nq; j++) {
		const float *acc = c->acc + (size_t)j * c->dpad;
		/* locals, as in tile_set, so the loop vectorises */
		float inv = c->l[j] > 0.0f ? 1.0f / c->l[j] : 0.0f, *out = c->out[j];
		uint32_t dim = c->dim;

		for (uint32_t d = 0; d < dim; d++)
			out[d] = acc[d] * inv;
	}
}

/*
 * Threads.  A decode batch becomes units: a whole sequence, or one part of a long context
 * (consecutive whole pages), sized so that the threads get about two units each and no part
 * reads less than kvmm_cpu_split_min_bytes of KV, 512 KiB (below that the merge and the
 * thread hand-off cost more than they save).  The participants take units off an atomic
 * counter, each with scratch of its own; a part leaves its unnormalised state (acc, running
 * max m, sum l) and the caller merges a sequence's parts afterwards, exactly as the online
 * softmax would have: M = max m_k, out = sum_k exp(m_k - M) acc_k / sum_k exp(m_k - M) l_k.
 * Prefill's units are its query tiles, which are independent already.  The units depend on
 * the thread setting only, not on how many threads took part, so a result is the same
 * whether the pool ran it or a caller that found the pool busy ran it alone.
 */
uint32_t kvmm_cpu_split_min_bytes = 512u << 10;

struct attn_unit {
	uint32_t seq, begin, end; /* decode: tokens [begin, end); prefill: query rows */
	uint64_t tok;		  /* prefill: the sequence's first query row in q and out */
	float *part;		  /* decode: where a part's state goes; NULL for a whole sequence */
};

struct attn_job {
	const struct kvmm_attn_batch *b;
	const int32_t **tables; /* each sequence's table as walked (by_address()) */
	const float *q;
	float *out;
	struct attn_unit *units;
	uint32_t nr_units;
	uint32_t next; /* the next unit to take */
	uint32_t tile; /* query vectors per pass */
	bool prefill;
	int err;
};

static void decode_unit(struct attn_ctx *c, const struct attn_job *job, const struct attn_unit *u)
{
	const struct kvmm_attn_batch *b = job->b;
	uint32_t hq = b->num_q_heads;

	for (uint32_t j = 0; j < hq; j++) {
		size_t off = ((size_t)u->seq * hq + j) * c->dim;

		tile_set(c, j, job->q + off, j / c->group, u->end, job->out + off);
	}
	c->begin = u->begin;
	c->part = u->part;
	c->l1 = true;
	attend(c, job->tables[u->seq], hq);
}

/* all query heads of up to tile / num_q_heads consecutive new tokens per pass */
static void prefill_unit(struct attn_ctx *c, const struct attn_job *job, const struct attn_unit *u)
{
	const struct kvmm_attn_batch *b = job->b;
	uint32_t hq = b->num_q_heads, first = b->ctx_lens[u->seq] - b->q_lens[u->seq], nq = 0;

	for (uint32_t r = u->begin; r < u->end; r++) {
		for (uint32_t j = 0; j < hq; j++) {
			size_t off = ((u->tok + r) * hq + j) * c->dim;

			tile_set(c, nq++, job->q + off, j / c->group, first + r + 1,
				 job->out + off);
		}
	}
	c->begin = 0;
	c->part = NULL;
	c->l1 = false;
	attend(c, job->tables[u->seq], nq);
}

static void attn_worker(void *arg, uint32_t w)
{
	struct attn_job *job = arg;
	struct attn_ctx c;
	uint32_t i;

	(void)w;
	if (__atomic_load_n(&job->next, __ATOMIC_RELAXED) >= job->nr_units)
		return; /* nothing left: do not even allocate */
	if (ctx_init(&c, job->b, job->tile)) {
		/* the others still finish every unit; the caller reports the error */
		__atomic_store_n(&job->err, -ENOMEM, __ATOMIC_RELAXED);
		return;
	}
	/* claim one unit ahead, so the end of each prefetches the start of the next */
	i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
	while (i < job->nr_units) {
		uint32_t nx = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);

		c.next_table = NULL;
		if (nx < job->nr_units) {
			const struct attn_unit *u = &job->units[nx];
			const struct kvmm_attn_batch *b = job->b;

			c.next_table = job->tables[u->seq];
			c.next_begin = job->prefill ? 0 : u->begin;
			c.next_end = job->prefill ? b->ctx_lens[u->seq] - b->q_lens[u->seq] + u->end
						  : u->end;
		}
		if (job->prefill)
			prefill_unit(&c, job, &job->units[i]);
		else
			decode_unit(&c, job, &job->units[i]);
		i = nx;
	}
	ctx_fini(&c);
}

/* Run a job's units on the configured threads; 0 or -ENOMEM. */
static int run_job(struct attn_job *job, uint32_t nthreads)
{
	kvmm_cpu_pool_run(attn_worker, job, min_t(uint32_t, nthreads, job->nr_units));
	if (__atomic_load_n(&job->next, __ATOMIC_RELAXED) < job->nr_units)
		return -ENOMEM; /* every participant failed to allocate */
	/* (a participant that claimed a unit runs it: claims past the end are harmless) */
	return __atomic_load_n(&job->err, __ATOMIC_RELAXED);
}

/* Merge the nparts states at part into sequence seq's outputs (see the comment above). */
static void merge_parts(const struct kvmm_attn_batch *b, const float *part, uint32_t nparts,
			float *out)
{
	uint32_t hq = b->num_q_heads, dim = b->kv.fmt->head_dim;
	size_t stride = (size_t)hq * (dim + 2);

	for (uint32_t j = 0; j < hq; j++) {
		float *o = out + (size_t)j * dim;
		float mx = -INFINITY, l = 0.0f;

		for (uint32_t k = 0; k < nparts; k++) {
			const float *p = part + k * stride;

			if (p[(size_t)hq * dim + hq + j] > 0.0f)
				mx = fmaxf(mx, p[(size_t)hq * dim + j]);
		}
		memset(o, 0, dim * sizeof(float));
		for (uint32_t k = 0; k < nparts; k++) {
			const float *p = part + k * stride;
			float pl = p[(size_t)hq * dim + hq + j], w;

			if (!(pl > 0.0f))
				continue;
			w = expf(p[(size_t)hq * dim + j] - mx);
			l += w * pl;
			for (uint32_t d = 0; d < dim; d++)
				o[d] += w * p[(size_t)j * dim + d];
		}
		if (l > 0.0f) {
			float inv = 1.0f / l;

			for (uint32_t d = 0; d < dim; d++)
				o[d] *= inv;
		}
	}
}

/*
 * Decode in address order.  A decode query sees every token of its sequence, and attention
 * is a sum over tokens: the order the pages are visited in changes only the rounding.  So
 * decode visits a sequence's full pages in ascending frame order (the partial last page, whose
 * row count depends on its place, stays last), and prefill those below its first new token
 * (every query of the sequence sees them whole), as an elevator serves a disk: a sequence whose
 * pages the allocator scattered is read in one sweep through the pool, from lower to higher
 * addresses, rather than jumping back and forth.  One core reading 2048 64 KiB frames taken at
 * random from a pool two to eight times as large ran 8-15 % faster in address order than in a
 * random one (a stand-alone read, 2026-12-03, cpu.md); a table already in order is used as it
 * is, and the sort is a radix sort of the frame numbers' bytes (2048 pages: about 10 us).
 */
uint32_t kvmm_cpu_decode_by_address = 1;

/* frames ascending or not */
static bool frames_sorted(const int32_t *t, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (t[i] < t[i - 1])
			return false;
	return true;
}

/* sort n frame numbers (>= 0) of src into dst, LSD radix by bytes; tmp holds n */
static void sort_frames(int32_t *dst, const int32_t *src, int32_t *tmp, uint32_t n)
{
	uint32_t hi = 0, cnt[256];
	const int32_t *from = src;
	int32_t *to;
	int passes = 0;

	for (uint32_t i = 0; i < n; i++)
		hi |= (uint32_t)src[i];
	for (uint32_t v = hi; v; v >>= 8)
		passes++;
	if (!passes) {
		memcpy(dst, src, n * sizeof(*dst));
		return;
	}
	/* an odd number of passes ends in dst when the first goes to dst */
	to = passes & 1 ? dst : tmp;
	for (int p = 0; p < passes; p++) {
		uint32_t sh = 8 * (uint32_t)p, sum = 0;

		memset(cnt, 0, sizeof(cnt));
		for (uint32_t i = 0; i < n; i++)
			cnt[((uint32_t)from[i] >> sh) & 0xff]++;
		for (uint32_t d = 0; d < 256; d++) {
			uint32_t c = cnt[d];

			cnt[d] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < n; i++)
			to[cnt[((uint32_t)from[i] >> sh) & 0xff]++] = from[i];
		from = to;
		to = to == dst ? tmp : dst;
	}
}

/*
 * The pages of sequence i that may be read in any order: decode's full pages; prefill's full
 * pages below its first new token, which every query of the sequence sees whole (the kernel
 * compares limits with positions, and these pages keep their range of positions).
 */
static uint32_t sortable(const struct attn_job *job, uint32_t i)
{
	const struct kvmm_attn_batch *b = job->b;
	uint32_t seen = job->prefill ? b->ctx_lens[i] - b->q_lens[i] : b->ctx_lens[i];

	return seen / b->kv.fmt->tokens_per_page;
}

/*
 * job->tables: each sequence's own table, or a copy with its sortable pages in frame order
 * (by_address above) in *scratch (freed by the caller).  0 or -ENOMEM.
 */
static int by_address(struct attn_job *job, int32_t **scratch)
{
	const struct kvmm_attn_batch *b = job->b;
	const uint32_t tpp = b->kv.fmt->tokens_per_page;
	uint64_t need = 0, maxn = 0;
	int32_t *buf, *tmp;

	*scratch = NULL;
	if (!b->nr_seqs)
		return 0;
	job->tables = malloc(b->nr_seqs * sizeof(*job->tables));
	if (!job->tables)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		const int32_t *t = b->block_tables + (uint64_t)i * b->max_blocks;
		uint32_t nfull = sortable(job, i);

		job->tables[i] = t;
		if (kvmm_cpu_decode_by_address && nfull > 1 && !frames_sorted(t, nfull)) {
			need += ((uint64_t)b->ctx_lens[i] + tpp - 1) / tpp;
			maxn = max_t(uint64_t, maxn, nfull);
			job->tables[i] = NULL; /* to sort */
		}
	}
	if (!need)
		return 0;
	buf = malloc((need + maxn) * sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	tmp = buf + need;
	*scratch = buf;
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		const int32_t *t = b->block_tables + (uint64_t)i * b->max_blocks;
		uint32_t nfull = sortable(job, i);
		uint64_t nb = ((uint64_t)b->ctx_lens[i] + tpp - 1) / tpp; /* ctx_len near 2^32 */

		if (job->tables[i])
			continue;
		sort_frames(buf, t, tmp, nfull);
		/* the rest in the table's order: the partial page, prefill's new tokens */
		memcpy(buf + nfull, t + nfull, (nb - nfull) * sizeof(*buf));
		job->tables[i] = buf;
		buf += nb;
	}
	return 0;
}

int kvmm_cpu_paged_decode(const struct kvmm_attn_batch *b, const float *q, float *out)
{
	uint32_t nthreads = kvmm_cpu_get_threads(), tpp, hq, dim, per = UINT32_MAX, n = 0;
	struct attn_job job = {.b = b, .q = q, .out = out};
	uint64_t total = 0, nparts = 0;
	float *parts = NULL;
	int32_t *sorted = NULL;
	int err;

	if (!b || (b->nr_seqs && (!q || !out)))
		return -EINVAL;
	err = check_batch(b, false);
	if (err || !b->nr_seqs)
		return err;
	err = by_address(&job, &sorted);
	if (err)
		goto out_free;
	tpp = b->kv.fmt->tokens_per_page;
	hq = b->num_q_heads;
	dim = b->kv.fmt->head_dim;
	if (nthreads > 1) {
		/* part length: about two units per thread, whole pages, not too little KV */
		uint64_t min_tok = kvmm_cpu_split_min_bytes / (2 * b->kv.fmt->row_bytes) + 1, p;

		for (uint32_t i = 0; i < b->nr_seqs; i++)
			total += b->ctx_lens[i];
		p = max_t(uint64_t, min_tok, (total + 2 * nthreads - 1) / (2 * nthreads));
		p = (p + tpp - 1) / tpp * tpp;
		per = (uint32_t)min_t(uint64_t, p, UINT32_MAX / 2);
	}
	for (uint32_t i = 0; i < b->nr_seqs; i++) {
		/* 64 bits: a context near 2^32 tokens */
		uint32_t k = b->ctx_lens[i] > per
				     ? (uint32_t)(((uint64_t)b->ctx_lens[i] + per - 1) / per)
				     : 1;

		n += k;
		if (k > 1)
			nparts += k;
	}
	job.units = malloc((size_t)n * sizeof(*job.units));
	if (nparts)
		parts = malloc(nparts * hq * (dim + 2) * sizeof(float));
	if (!job.units || (nparts && !parts)) {
		err = -ENOMEM;
		goto out_free;
	}
	nparts = 0;
	for (uint32_t i = 0, u = 0; i < b->nr_seqs; i++) {
		uint32_t ctx = b->ctx_lens[i];

		if (ctx <= per) {
			job.units[u++] = (struct attn_unit){.seq = i, .end = ctx};
			continue;
		}
		for (uint64_t t = 0; t < ctx; t += per) {
			float *p = parts + nparts++ * hq * (dim + 2);

			job.units[u++] =
				(struct attn_unit){.seq = i,
						   .begin = (uint32_t)t,
						   .end = (uint32_t)min_t(uint64_t, ctx, t + per),
						   .part = p};
		}
	}
	job.nr_units = n;
	job.tile = hq; /* one pass per unit: all query heads share each chunk of its KV */
	err = run_job(&job, nthreads);
	if (err)
		goto out_free;
	for (uint32_t u = 0; u < n;) {
		uint32_t i = job.units[u].seq, e = u + 1;

		while (e < n && job.units[e].seq == i)
			e++;
		if (job.units[u].part)
			merge_parts(b, job.units[u].part, e - u, out + (size_t)i * hq * dim);
		u = e;
	}
out_free:
	free(job.units);
	free(parts);
	free(sorted);
	free(job.tables);
	return err;
}

int kvmm_cpu_paged_prefill(const struct kvmm_attn_batch *b, const float *q, float *out)
{
	struct attn_job job = {.b = b, .q = q, .out = out, .prefill = true};
	int32_t *sorted = NULL;
	uint32_t per_tile, n = 0;
	uint64_t tok = 0;
	int err;

	if (!b || (b->nr_seqs && (!q || !out)))
		return -EINVAL;
	err = check_batch(b, true);
	if (err)
		return err;
	err = by_address(&job, &sorted);
	if (err)
		goto out_free;
	per_tile = max_t(uint32_t, 1, TILE_Q / b->num_q_heads);
	for (uint32_t i = 0; i < b->nr_seqs; i++)
		n += (b->q_lens[i] + per_tile - 1) / per_tile;
	if (!n)
		goto out_free;
	job.units = malloc((size_t)n * sizeof(*job.units));
	if (!job.units) {
		err = -ENOMEM;
		goto out_free;
	}
	for (uint32_t i = 0, u = 0; i < b->nr_seqs; i++) {
		uint32_t qlen = b->q_lens[i];

		for (uint32_t r0 = 0; r0 < qlen; r0 += per_tile)
			job.units[u++] = (struct attn_unit){
				.seq = i,
				.begin = r0,
				.end = min_t(uint32_t, qlen, r0 + per_tile),
				.tok = tok,
			};
		tok += qlen;
	}
	job.nr_units = n;
	job.tile = per_tile * b->num_q_heads;
	err = run_job(&job, kvmm_cpu_get_threads());
out_free:
	free(job.units);
	free(sorted);
	free(job.tables);
	return err;
}
