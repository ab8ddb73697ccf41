// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_model.c - randomized model test of the whole core: allocator, page tables,
 * page cache, LRU and reclaim, namespaces with limits.
 *
 * A seeded generator drives a long run of random operations (create, append, fork, truncate,
 * free, seal, prefix lookup - into a new sequence or continuing a live one -, reclaim,
 * namespace limit changes) on sequences spread over
 * several namespaces and formats, and a plain reference model follows along: each model
 * sequence is an array of token ids plus the number of leading blocks sealed.  After every
 * operation the touched sequences are compared with the model: length, blocks, token ids,
 * sealed blocks, and the KV bytes themselves.  At append the test writes into each new token's
 * slot of the KV page (through kvmm_pool_frame_addr and the format's offsets) a signature that is a
 * hash of the whole prefix up to that token, as real attention KV depends on the whole prefix;
 * every later read of any sequence (after forks, copy-on-write, truncation, sealing with
 * deduplication, cache hits) must find exactly the signatures its model tokens imply, so a
 * wrong hit, a missed copy-on-write or a page freed while mapped shows up as wrong bytes.
 * Lookups are also bounded from both sides: at least the longest sealed prefix that a live
 * sequence of the same namespace and format maps (mapped pages cannot be reclaimed), and only
 * blocks whose whole prefix was sealed in that namespace and format at some point.
 * Periodically everything is checked: every sequence, kvmm_check_invariants(), and the
 * accounting of each namespace recomputed from the page tables.
 *
 * Reproducible: KVMM_SEED=n (default fixed) picks the run, KVMM_MODEL_OPS=n its length
 * (default 1M, 500k under sanitizers); a failure prints the seed and the operation number.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler.h"
#include "kvmm/mm.h"

#if defined(__SANITIZE_ADDRESS__) || defined(KVMM_SANITIZE)
#define MODEL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODEL_SANITIZED 1
#endif
#endif
#ifdef MODEL_SANITIZED
#define DEFAULT_OPS 500000u
#else
#define DEFAULT_OPS 1000000u
#endif
#define DEFAULT_SEED UINT64_C(0x6b766d6d2d6d6f64) /* "kvmm-mod" */

#define NR_NS 3
#define NR_FMT 3
#define NR_AS (NR_NS * NR_FMT)
#define MAX_SEQS 48
#define MAX_BLOCKS 8 /* per sequence: keeps the pool under pressure without huge runs */
#define NR_DOCS 8
#define DOC_LEN 160
#define MAX_PROMPT 512
#define FULL_CHECK_EVERY 128

struct mseq {
	struct kvmm_seq *real;
	int as;	 /* index into model.as[]: ns = as / NR_FMT, format = as % NR_FMT */
	int doc; /* tokens are a prefix of this document, or -1 */
	uint32_t len;
	uint32_t nsealed;
	uint32_t tok[MAX_PROMPT];
	uint64_t sig[MAX_PROMPT]; /* prefix hash through each token: its KV signature */
};

/* open-addressing set of 64-bit keys (0 is never a key) */
struct keyset {
	uint64_t *slot;
	size_t cap, nr;
};

struct model_cfg {
	const char *name;
	uint32_t nframes;
	uint32_t ns_limit[NR_NS];
	bool weak_hash; /* force collisions: every key from a 2-bit hash */
	uint64_t ops;
};

struct model {
	const struct model_cfg *cfg;
	uint64_t seed, rng, op;
	const char *opname;
	struct kvmm_pool *pool;
	struct kvmm_ns *ns[NR_NS];
	struct kvmm_fmt fmt[NR_FMT];
	struct kvmm_magazine mag[NR_AS];
	struct kvmm_aspace *as[NR_AS];
	struct mseq *seqs[MAX_SEQS];
	uint32_t nseqs;
	uint32_t docs[NR_DOCS][DOC_LEN];
	struct keyset sealed; /* (ns, format, prefix signature) of every block ever sealed */
	uint32_t prompt[MAX_PROMPT];
	uint64_t prompt_sig[MAX_PROMPT];
	/* what the run did, printed at the end so a reader sees the coverage */
	uint64_t n_enomem, n_hit_blocks, n_must_hit, n_lookups, n_cow, n_dedup_seal, n_reclaimed;
	uint64_t n_cont_lookups, n_cont_hit_blocks; /* lookups continuing a sequence */
	uint32_t *pte_count;			    /* full check: PTEs per frame */
};

/* ---- failure reporting -------------------------------------------------------------------- */

__printf(4, 5) static void model_fail(struct model *m, int line, const char *expr, const char *fmt,
				      ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	print_error("model %s FAILED: seed %" PRIu64 " (rerun with KVMM_SEED=%" PRIu64
		    "), op %" PRIu64 " (%s), line %d: %s: %s\n",
		    m->cfg->name, m->seed, m->seed, m->op, m->opname, line, expr, msg);
	fail();
}

#define MCHECK(m, cond, ...)                                         \
	do {                                                         \
		if (!(cond))                                         \
			model_fail(m, __LINE__, #cond, __VA_ARGS__); \
	} while (0)

/* ---- randomness and hashing ---------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t rnd(struct model *m)
{
	m->rng += UINT64_C(0x9e3779b97f4a7c15);
	return mix64(m->rng);
}

/* uniform in [0, n) (n > 0; the bias of a modulo of 64 bits is irrelevant here) */
static uint32_t rnd_below(struct model *m, uint32_t n)
{
	return (uint32_t)(rnd(m) % n);
}

static bool chance(struct model *m, uint32_t percent)
{
	return rnd_below(m, 100) < percent;
}

/* The signature of the token at position p given the signature through p - 1. */
static uint64_t sig_next(uint64_t prev, uint32_t token, uint32_t p)
{
	return mix64(prev ^ mix64(((uint64_t)token << 32 | p) + UINT64_C(0x51ed27)));
}

#define SIG_START UINT64_C(0x243f6a8885a308d3)

static void sig_fill(const uint32_t *tok, uint64_t *sig, uint32_t from, uint32_t to)
{
	uint64_t prev = from ? sig[from - 1] : SIG_START;

	for (uint32_t p = from; p < to; p++)
		prev = sig[p] = sig_next(prev, tok[p], p);
}

static uint64_t seal_key(int as, uint64_t sig)
{
	return mix64(sig ^ ((uint64_t)(as + 1) << 56)) | 1;
}

static void keyset_add(struct keyset *s, uint64_t key)
{
	size_t i;

	if (2 * (s->nr + 1) > s->cap) {
		struct keyset bigger = {.cap = s->cap ? 2 * s->cap : 4096};

		bigger.slot = calloc(bigger.cap, sizeof(uint64_t));
		assert_non_null(bigger.slot);
		for (i = 0; i < s->cap; i++)
			if (s->slot[i])
				keyset_add(&bigger, s->slot[i]);
		free(s->slot);
		*s = bigger;
	}
	for (i = key & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
		if (s->slot[i] == key)
			return;
	s->slot[i] = key;
	s->nr++;
}

static bool keyset_has(const struct keyset *s, uint64_t key)
{
	if (!s->cap)
		return false;
	for (size_t i = key & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
		if (s->slot[i] == key)
			return true;
	return false;
}

/* ---- KV signatures in the frames ------------------------------------------------------------ */

static unsigned char *slot_addr(struct model *m, uint32_t frame)
{
	unsigned char *base = kvmm_pool_frame_addr(m->pool, frame);

	MCHECK(m, base != NULL, "frame %u has no address", frame);
	return base;
}

/* Write token @slot's signature into every layer's K and V row (and int8 scales) of @frame. */
static void sig_write(struct model *m, const struct kvmm_fmt *f, uint32_t frame, uint32_t slot,
		      uint64_t sig)
{
	unsigned char *base = slot_addr(m, frame);

	for (uint32_t l = 0; l < f->layers; l++) {
		for (uint32_t kv = 0; kv < 2; kv++) {
			uint64_t v = kv ? ~sig : sig, off = kvmm_fmt_offset(f, l, kv, slot);
			uint32_t s = (uint32_t)(v >> 32) ^ l;

			memcpy(base + off, &v, sizeof(v));
			if (f->scale_row_bytes)
				memcpy(base + kvmm_fmt_scale_offset(f, l, kv, slot), &s, sizeof(s));
		}
	}
}

static void sig_check(struct model *m, const struct kvmm_fmt *f, uint32_t frame, uint32_t slot,
		      uint64_t sig, const struct mseq *s, uint32_t p)
{
	unsigned char *base = slot_addr(m, frame);

	for (uint32_t l = 0; l < f->layers; l++) {
		for (uint32_t kv = 0; kv < 2; kv++) {
			uint64_t v = kv ? ~sig : sig, got, off = kvmm_fmt_offset(f, l, kv, slot);
			uint32_t sc = (uint32_t)(v >> 32) ^ l, gsc;

			memcpy(&got, base + off, sizeof(got));
			MCHECK(m, got == v,
			       "seq %" PRIu64
			       " token %u (block %u, frame %u) layer %u %s: KV bytes "
			       "%016" PRIx64 " where %016" PRIx64 " was written",
			       s->real->id, p, p / f->tokens_per_page, frame, l, kv ? "V" : "K",
			       got, v);
			if (!f->scale_row_bytes)
				continue;
			memcpy(&gsc, base + kvmm_fmt_scale_offset(f, l, kv, slot), sizeof(gsc));
			MCHECK(m, gsc == sc, "seq %" PRIu64 " token %u: int8 scales overwritten",
			       s->real->id, p);
		}
	}
}

/* ---- model sequences ---------------------------------------------------------------------- */

static const struct kvmm_fmt *seq_fmt(struct model *m, const struct mseq *s)
{
	return &m->fmt[s->as % NR_FMT];
}

static struct kvmm_ns *seq_ns(struct model *m, const struct mseq *s)
{
	return m->ns[s->as / NR_FMT];
}

static uint32_t max_len(struct model *m, const struct mseq *s)
{
	return MAX_BLOCKS * seq_fmt(m, s)->tokens_per_page;
}

/* Compare one sequence with its model: shape, tokens, sealing, and every token's KV bytes. */
static void verify_seq(struct model *m, const struct mseq *s)
{
	const struct kvmm_fmt *f = seq_fmt(m, s);
	const struct kvmm_seq *r = s->real;
	uint32_t tpp = f->tokens_per_page, nblocks = (s->len + tpp - 1) / tpp;

	MCHECK(m, r->ntokens == s->len, "seq %" PRIu64 ": %" PRIu64 " tokens, model has %u", r->id,
	       r->ntokens, s->len);
	MCHECK(m, r->nblocks == nblocks, "seq %" PRIu64 ": %u blocks, model has %u", r->id,
	       r->nblocks, nblocks);
	MCHECK(m, r->nsealed == s->nsealed, "seq %" PRIu64 ": %u sealed, model has %u", r->id,
	       r->nsealed, s->nsealed);
	MCHECK(m, !s->len || !memcmp(r->tokens, s->tok, s->len * sizeof(uint32_t)),
	       "seq %" PRIu64 ": token ids differ from the model", r->id);
	for (uint32_t b = 0; b < nblocks; b++) {
		uint32_t frame = kvmm_mm_seq_frame(r, b);
		const struct kvmm_page *pg;

		MCHECK(m, frame < m->pool->nframes, "seq %" PRIu64 " block %u: frame %u", r->id, b,
		       frame);
		pg = &m->pool->pages[frame];
		MCHECK(m, pg->state == KVMM_PAGE_MAPPED && pg->refcount > 0,
		       "seq %" PRIu64 " block %u: frame %u in state %s refcount %u", r->id, b,
		       frame, kvmm_page_state_name(pg->state), pg->refcount);
		MCHECK(m, pg->ns_id == seq_ns(m, s)->id,
		       "seq %" PRIu64 " block %u: frame %u charged to ns %u, not %u", r->id, b,
		       frame, pg->ns_id, seq_ns(m, s)->id);
		if (b < s->nsealed)
			MCHECK(m, pg->flags & KVMM_PG_SEALED,
			       "seq %" PRIu64 " block %u sealed but frame %u is not", r->id, b,
			       frame);
		for (uint32_t p = b * tpp; p < s->len && p < (b + 1) * tpp; p++)
			sig_check(m, f, frame, p % tpp, s->sig[p], s, p);
	}
}

static struct mseq *mseq_new(struct model *m, int as)
{
	struct mseq *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->as = as;
	s->doc = -1;
	m->seqs[m->nseqs++] = s;
	return s;
}

static void mseq_drop(struct model *m, uint32_t i)
{
	free(m->seqs[i]);
	m->seqs[i] = m->seqs[--m->nseqs];
}

/* ---- operations ----------------------------------------------------------------------------- */

static void op_create(struct model *m)
{
	int as = (int)rnd_below(m, NR_AS);
	struct mseq *s;
	struct kvmm_seq *r;
	int ret;

	m->opname = "create";
	ret = kvmm_mm_seq_create(m->as[as], &r);
	MCHECK(m, ret == 0, "kvmm_mm_seq_create: %d", ret);
	s = mseq_new(m, as);
	s->real = r;
	s->doc = chance(m, 60) ? (int)rnd_below(m, NR_DOCS) : -1;
	verify_seq(m, s);
}

static void op_free(struct model *m)
{
	uint32_t i = rnd_below(m, m->nseqs);

	m->opname = "free";
	kvmm_mm_seq_free(m->seqs[i]->real);
	mseq_drop(m, i);
}

/* Frames an append of n tokens needs: new blocks, plus a copy of a shared or sealed tail. */
static uint32_t append_need(struct model *m, const struct mseq *s, uint32_t n, bool *cow)
{
	uint32_t tpp = seq_fmt(m, s)->tokens_per_page;
	uint32_t need = (s->len + n + tpp - 1) / tpp - (s->len + tpp - 1) / tpp;

	*cow = false;
	if (s->len % tpp) {
		const struct kvmm_page *pg =
			&m->pool->pages[kvmm_mm_seq_frame(s->real, s->len / tpp)];

		*cow = pg->refcount > 1 || (pg->flags & KVMM_PG_SEALED);
	}
	return need + *cow;
}

static void op_append(struct model *m)
{
	struct mseq *s = m->seqs[rnd_below(m, m->nseqs)];
	const struct kvmm_fmt *f = seq_fmt(m, s);
	struct kvmm_ns *ns = seq_ns(m, s);
	uint32_t tpp = f->tokens_per_page, room = max_len(m, s) - s->len, n, need, old = s->len;
	uint32_t tok[MAX_PROMPT];
	bool cow;
	int ret;

	m->opname = "append";
	if (!room)
		return;
	n = chance(m, 50) ? 1 : 1 + rnd_below(m, 2 * tpp);
	if (n > room)
		n = room;
	if (s->doc >= 0 && s->len + n <= DOC_LEN && chance(m, 85)) {
		memcpy(tok, &m->docs[s->doc][s->len], n * sizeof(uint32_t));
	} else {
		/* a small alphabet makes identical blocks (deduplication) common */
		bool small = chance(m, 50);

		for (uint32_t i = 0; i < n; i++)
			tok[i] = small ? rnd_below(m, 3) : (uint32_t)rnd(m);
		s->doc = -1;
	}
	need = append_need(m, s, n, &cow);

	ret = kvmm_mm_seq_append(s->real, n, tok);
	if (ret == -ENOMEM) {
		uint32_t nfree = kvmm_pool_nr_free(m->pool);
		bool ns_full = ns->limit && !ns->cached && (uint64_t)ns->used + need > ns->limit;
		bool pool_full = nfree < need && !m->pool->nr_state[KVMM_PAGE_CACHED];

		MCHECK(m, ns_full || pool_full,
		       "-ENOMEM for %u frames with ns %u used %u cached %u limit %u, pool free "
		       "%u cached %u",
		       need, ns->id, ns->used, ns->cached, ns->limit, nfree,
		       m->pool->nr_state[KVMM_PAGE_CACHED]);
		m->n_enomem++;
		verify_seq(m, s); /* unchanged */
		return;
	}
	MCHECK(m, ret == 0, "kvmm_mm_seq_append(%u): %d", n, ret);
	m->n_cow += cow;
	memcpy(&s->tok[old], tok, n * sizeof(uint32_t));
	s->len += n;
	sig_fill(s->tok, s->sig, old, s->len);
	/* the engine's part: write the new tokens' KV into the pages the sequence maps now */
	for (uint32_t p = old; p < s->len; p++)
		sig_write(m, f, kvmm_mm_seq_frame(s->real, p / tpp), p % tpp, s->sig[p]);
	verify_seq(m, s);
}

static void op_fork(struct model *m)
{
	struct mseq *src = m->seqs[rnd_below(m, m->nseqs)], *s;
	struct kvmm_seq *r;
	int ret;

	m->opname = "fork";
	ret = kvmm_mm_seq_fork(src->real, &r);
	MCHECK(m, ret == 0, "kvmm_mm_seq_fork: %d", ret);
	s = mseq_new(m, src->as);
	memcpy(s, src, sizeof(*s));
	s->real = r;
	verify_seq(m, src);
	verify_seq(m, s);
}

static void op_truncate(struct model *m)
{
	struct mseq *s = m->seqs[rnd_below(m, m->nseqs)];
	uint32_t tpp = seq_fmt(m, s)->tokens_per_page, len;
	int ret;

	m->opname = "truncate";
	if (chance(m, 5)) {
		ret = kvmm_mm_seq_truncate(s->real, (uint64_t)s->len + 1 + rnd_below(m, 100));
		MCHECK(m, ret == -EINVAL, "truncate past the end: %d", ret);
		verify_seq(m, s);
		return;
	}
	/* often to a block boundary, often inside a block */
	len = rnd_below(m, s->len + 1);
	if (chance(m, 30))
		len -= len % tpp;
	ret = kvmm_mm_seq_truncate(s->real, len);
	MCHECK(m, ret == 0, "kvmm_mm_seq_truncate(%u of %u): %d", len, s->len, ret);
	s->len = len;
	if (s->nsealed > len / tpp)
		s->nsealed = len / tpp;
	verify_seq(m, s);
}

static void op_seal(struct model *m)
{
	struct mseq *s = m->seqs[rnd_below(m, m->nseqs)];
	uint32_t tpp = seq_fmt(m, s)->tokens_per_page, full = s->len / tpp;
	uint32_t before[MAX_BLOCKS];
	int ret;

	m->opname = "seal";
	for (uint32_t b = s->nsealed; b < full; b++)
		before[b] = kvmm_mm_seq_frame(s->real, b);
	ret = kvmm_mm_seq_seal(s->real);
	MCHECK(m, ret >= 0 && (uint32_t)ret == full - s->nsealed,
	       "kvmm_mm_seq_seal: %d, expected %u", ret, full - s->nsealed);
	for (uint32_t b = s->nsealed; b < full; b++) {
		keyset_add(&m->sealed, seal_key(s->as, s->sig[(b + 1) * tpp - 1]));
		m->n_dedup_seal += kvmm_mm_seq_frame(s->real, b) != before[b];
	}
	s->nsealed = full;
	verify_seq(m, s);
}

/*
 * Build a prompt: a live sequence plus a tail (then *as is, most often, that sequence's
 * address space, where its sealed blocks must hit), a document prefix, or noise.
 */
static uint32_t make_prompt(struct model *m, int *as)
{
	uint32_t n = 0, k = rnd_below(m, 100);

	if (k < 40 && m->nseqs) {
		const struct mseq *src = m->seqs[rnd_below(m, m->nseqs)];
		uint32_t tail = rnd_below(m, 20);

		if (chance(m, 70))
			*as = src->as;
		memcpy(m->prompt, src->tok, src->len * sizeof(uint32_t));
		n = src->len;
		for (uint32_t i = 0; i < tail; i++)
			m->prompt[n++] = chance(m, 50) ? rnd_below(m, 3) : (uint32_t)rnd(m);
	} else if (k < 80) {
		n = rnd_below(m, DOC_LEN + 1);
		memcpy(m->prompt, m->docs[rnd_below(m, NR_DOCS)], n * sizeof(uint32_t));
	} else {
		bool small = chance(m, 70);

		n = rnd_below(m, 120);
		for (uint32_t i = 0; i < n; i++)
			m->prompt[i] = small ? rnd_below(m, 3) : (uint32_t)rnd(m);
	}
	sig_fill(m->prompt, m->prompt_sig, 0, n);
	return n;
}

static void op_lookup(struct model *m)
{
	int as = (int)rnd_below(m, NR_AS);
	uint32_t n = make_prompt(m, &as), tpp = m->fmt[as % NR_FMT].tokens_per_page, lower = 0, got;
	struct kvmm_seq *r;
	struct mseq *s;
	int ret;

	m->opname = "lookup";
	/* mapped sealed blocks cannot be reclaimed: they must be found */
	for (uint32_t i = 0; i < m->nseqs; i++) {
		const struct mseq *o = m->seqs[i];
		uint32_t b = 0;

		if (o->as != as)
			continue;
		while (b < o->nsealed && (b + 1) * tpp <= n &&
		       o->sig[(b + 1) * tpp - 1] == m->prompt_sig[(b + 1) * tpp - 1])
			b++;
		if (b > lower)
			lower = b;
	}

	ret = kvmm_mm_seq_create(m->as[as], &r);
	MCHECK(m, ret == 0, "kvmm_mm_seq_create: %d", ret);
	ret = kvmm_mm_prefix_lookup(r, m->prompt, n);
	MCHECK(m, ret >= 0, "kvmm_mm_prefix_lookup(%u tokens): %d", n, ret);
	got = (uint32_t)ret;
	MCHECK(m, got % tpp == 0 && got <= n, "lookup of %u tokens returned %u (tpp %u)", n, got,
	       tpp);
	MCHECK(m, got >= lower * tpp,
	       "lookup found %u blocks, but a live sequence maps %u sealed blocks of the prompt",
	       got / tpp, lower);
	for (uint32_t b = 0; b < got / tpp; b++)
		MCHECK(m, keyset_has(&m->sealed, seal_key(as, m->prompt_sig[(b + 1) * tpp - 1])),
		       "lookup hit block %u, whose prefix was never sealed in ns %d format %d", b,
		       as / NR_FMT, as % NR_FMT);
	m->n_lookups++;
	m->n_hit_blocks += got / tpp;
	m->n_must_hit += lower;

	s = mseq_new(m, as);
	s->real = r;
	memcpy(s->tok, m->prompt, got * sizeof(uint32_t));
	memcpy(s->sig, m->prompt_sig, got * sizeof(uint64_t));
	s->len = got;
	s->nsealed = got / tpp;
	verify_seq(m, s);
	/* keep it as a sequence that can grow, unless it cannot */
	if (s->len > max_len(m, s)) {
		kvmm_mm_seq_free(r);
		mseq_drop(m, m->nseqs - 1);
	}
}

/*
 * Extend a prompt that starts with @s's tokens: the rest of a live sequence of its address
 * space or of a document that starts the same way, then maybe a little noise; or noise
 * alone.  Returns the prompt's length (at least s->len).
 */
static uint32_t make_continuation(struct model *m, const struct mseq *s)
{
	uint32_t len = s->len, n = len, k = rnd_below(m, 100), tail = rnd_below(m, 8);

	memcpy(m->prompt, s->tok, len * sizeof(uint32_t));
	if (k < 45 && m->nseqs) {
		uint32_t start = rnd_below(m, m->nseqs);

		for (uint32_t i = 0; i < m->nseqs; i++) {
			const struct mseq *o = m->seqs[(start + i) % m->nseqs];

			if (o == s || o->as != s->as || o->len <= len ||
			    memcmp(o->tok, s->tok, len * sizeof(uint32_t)))
				continue;
			memcpy(m->prompt + len, o->tok + len, (o->len - len) * sizeof(uint32_t));
			n = o->len;
			break;
		}
	} else if (k < 85) {
		uint32_t start = rnd_below(m, NR_DOCS);

		for (uint32_t i = 0; i < NR_DOCS && len < DOC_LEN; i++) {
			const uint32_t *doc = m->docs[(start + i) % NR_DOCS];

			if (memcmp(doc, s->tok, len * sizeof(uint32_t)))
				continue;
			n = len + 1 + rnd_below(m, DOC_LEN - len);
			memcpy(m->prompt + len, doc + len, (n - len) * sizeof(uint32_t));
			break;
		}
	} else {
		tail += rnd_below(m, 40);
	}
	for (uint32_t i = 0; i < tail; i++)
		m->prompt[n++] = chance(m, 50) ? rnd_below(m, 3) : (uint32_t)rnd(m);
	sig_fill(m->prompt, m->prompt_sig, 0, n);
	return n;
}

/*
 * Continue a lookup on a live sequence with the ids that follow its own.  A sequence of whole
 * sealed pages must map what one lookup of its tokens and those ids would: the same bounds as
 * op_lookup(), and its blocks so far untouched; any other gets -EINVAL and stays as it was.
 */
static void op_lookup_continue(struct model *m)
{
	struct mseq *s = m->seqs[rnd_below(m, m->nseqs)];
	uint32_t tpp = seq_fmt(m, s)->tokens_per_page, len = s->len, lower = 0, got, n;
	bool whole = len % tpp == 0 && s->nsealed == len / tpp;
	int ret;

	m->opname = "lookup continue";
	n = make_continuation(m, s);
	if (!whole) {
		ret = kvmm_mm_prefix_lookup(s->real, m->prompt + len, n - len);
		MCHECK(m, ret == -EINVAL, "continuing %u tokens, %u sealed (tpp %u): %d", len,
		       s->nsealed, tpp, ret);
		verify_seq(m, s);
		return;
	}
	/* mapped sealed blocks cannot be reclaimed: they must be found (s's own included) */
	for (uint32_t i = 0; i < m->nseqs; i++) {
		const struct mseq *o = m->seqs[i];
		uint32_t b = 0;

		if (o->as != s->as)
			continue;
		while (b < o->nsealed && (b + 1) * tpp <= n &&
		       o->sig[(b + 1) * tpp - 1] == m->prompt_sig[(b + 1) * tpp - 1])
			b++;
		if (b > lower)
			lower = b;
	}

	ret = kvmm_mm_prefix_lookup(s->real, m->prompt + len, n - len);
	MCHECK(m, ret >= 0, "continuing %u tokens with %u: %d", len, n - len, ret);
	got = (uint32_t)ret;
	MCHECK(m, got % tpp == 0 && got >= len && got <= n,
	       "continuing %u tokens with %u returned %u (tpp %u)", len, n - len, got, tpp);
	MCHECK(m, got >= lower * tpp,
	       "continuation reached %u blocks, but a live sequence maps %u sealed blocks of the "
	       "prompt",
	       got / tpp, lower);
	for (uint32_t b = len / tpp; b < got / tpp; b++)
		MCHECK(m, keyset_has(&m->sealed, seal_key(s->as, m->prompt_sig[(b + 1) * tpp - 1])),
		       "continuation hit block %u, whose prefix was never sealed in ns %d format "
		       "%d",
		       b, s->as / NR_FMT, s->as % NR_FMT);
	m->n_cont_lookups++;
	m->n_cont_hit_blocks += (got - len) / tpp;

	memcpy(s->tok + len, m->prompt + len, (got - len) * sizeof(uint32_t));
	memcpy(s->sig + len, m->prompt_sig + len, (got - len) * sizeof(uint64_t));
	s->len = got;
	s->nsealed = got / tpp;
	if (s->doc >= 0 &&
	    (got > DOC_LEN || memcmp(m->docs[s->doc], s->tok, got * sizeof(uint32_t))))
		s->doc = -1;
	verify_seq(m, s);
	/* keep it growable: cut back to whole pages within bounds */
	if (s->len > max_len(m, s)) {
		ret = kvmm_mm_seq_truncate(s->real, max_len(m, s));
		MCHECK(m, ret == 0, "kvmm_mm_seq_truncate(%u): %d", max_len(m, s), ret);
		s->len = max_len(m, s);
		s->nsealed = s->len / tpp;
		verify_seq(m, s);
	}
}

static uint32_t cached_of(struct model *m, struct kvmm_ns *ns)
{
	return ns ? ns->cached : m->pool->nr_state[KVMM_PAGE_CACHED];
}

static void op_reclaim(struct model *m)
{
	uint32_t k = 1 + rnd_below(m, 8), i = rnd_below(m, NR_NS + 1), before, after, got;
	struct kvmm_ns *ns = i < NR_NS ? m->ns[i] : NULL;

	m->opname = "reclaim";
	before = cached_of(m, ns);
	got = kvmm_reclaim(m->pool, ns, k);
	after = cached_of(m, ns);
	MCHECK(m, got <= k, "reclaim(%u) evicted %u", k, got);
	MCHECK(m, after + got == before, "cached %u -> %u after evicting %u", before, after, got);
	MCHECK(m, got == k || after == 0, "reclaim(%u) stopped at %u with %u still cached", k, got,
	       after);
	m->n_reclaimed += got;
}

static void op_set_limit(struct model *m)
{
	struct kvmm_ns *ns = m->ns[1 + rnd_below(m, NR_NS - 1)];
	uint32_t limit = ns->used + 4 + rnd_below(m, m->pool->nframes / 2);
	int ret;

	m->opname = "set_limit";
	ret = kvmm_ns_set_limit(ns, limit);
	MCHECK(m, ret == 0, "kvmm_ns_set_limit(%u): %d", limit, ret);
	MCHECK(m, (uint64_t)ns->used + ns->cached <= limit, "ns %u: used %u + cached %u > limit %u",
	       ns->id, ns->used, ns->cached, limit);
}

/* Everything: sequences, invariants, and each namespace's charges from the page tables. */
static void full_check(struct model *m)
{
	uint32_t used[NR_NS] = {0}, cached[NR_NS] = {0};
	char why[256];
	int ret;

	m->opname = "full check";
	for (uint32_t i = 0; i < m->nseqs; i++)
		verify_seq(m, m->seqs[i]);
	ret = kvmm_check_invariants(m->pool, why, sizeof(why));
	MCHECK(m, ret == 0, "kvmm_check_invariants: %s", why);

	memset(m->pte_count, 0, m->pool->nframes * sizeof(uint32_t));
	for (uint32_t i = 0; i < m->nseqs; i++) {
		const struct mseq *s = m->seqs[i];

		for (uint32_t b = 0; b < s->real->nblocks; b++)
			m->pte_count[kvmm_mm_seq_frame(s->real, b)]++;
	}
	for (uint32_t fr = 0; fr < m->pool->nframes; fr++) {
		const struct kvmm_page *pg = &m->pool->pages[fr];

		MCHECK(m, pg->refcount == m->pte_count[fr], "frame %u: refcount %u, %u PTEs map it",
		       fr, pg->refcount, m->pte_count[fr]);
		for (int n = 0; n < NR_NS; n++) {
			if (pg->ns_id != m->ns[n]->id)
				continue;
			used[n] += pg->state == KVMM_PAGE_MAPPED && m->pte_count[fr];
			cached[n] += pg->state == KVMM_PAGE_CACHED;
		}
	}
	for (int n = 0; n < NR_NS; n++) {
		const struct kvmm_ns *ns = m->ns[n];

		MCHECK(m, ns->used == used[n], "ns %u: used %u, page tables map %u frames", ns->id,
		       ns->used, used[n]);
		MCHECK(m, ns->cached == cached[n], "ns %u: cached %u, %u frames cached", ns->id,
		       ns->cached, cached[n]);
		MCHECK(m, !ns->limit || (uint64_t)ns->used + ns->cached <= ns->limit,
		       "ns %u: used %u + cached %u over limit %u", ns->id, ns->used, ns->cached,
		       ns->limit);
	}
}

/* ---- the run -------------------------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return def;
	x = strtoull(v, &end, 0);
	return *end ? def : (uint64_t)x;
}

/* Every key falls into one of 4 buckets: collisions all the time, verification must hold. */
static uint64_t weak_hash(const struct kvmm_ns *ns, uint64_t parent_key, uint64_t fmt_id,
			  const uint32_t *tokens, uint32_t n)
{
	(void)ns;
	(void)parent_key;
	(void)fmt_id;
	return n ? tokens[0] & 3 : 0;
}

static void model_setup(struct model *m, const struct model_cfg *cfg)
{
	struct kvmm_pool_params params = {
		.page_size = 4096,
		.nframes = cfg->nframes,
		.wmark_min = cfg->nframes / 32,
		.wmark_low = cfg->nframes / 16,
		.wmark_high = cfg->nframes / 10,
	};
	char name[16];
	int ret;

	memset(m, 0, sizeof(*m));
	m->cfg = cfg;
	m->seed = env_u64("KVMM_SEED", DEFAULT_SEED);
	m->rng = m->seed;
	m->opname = "setup";
	assert_int_equal(kvmm_pool_create(&params, &m->pool), 0);
	if (cfg->weak_hash)
		assert_int_equal(kvmm_pagecache_set_hash_fn(m->pool, weak_hash), 0);
	/*
	 * Three formats with 4, 8 and 14 tokens per 4 KiB page: fp32 and fp16 with two layers,
	 * int8 with scales (and tokens per page not a power of two).
	 */
	assert_int_equal(
		kvmm_fmt_init(&m->fmt[0], &(struct kvmm_format){2, 2, 32, KVMM_DTYPE_FP32}, 4096),
		0);
	assert_int_equal(
		kvmm_fmt_init(&m->fmt[1], &(struct kvmm_format){2, 1, 64, KVMM_DTYPE_FP16}, 4096),
		0);
	assert_int_equal(kvmm_fmt_init(&m->fmt[2],
				       &(struct kvmm_format){1, 2, 64, KVMM_DTYPE_INT8, 32}, 4096),
			 0);
	assert_int_equal(m->fmt[0].tokens_per_page, 4);
	assert_int_equal(m->fmt[1].tokens_per_page, 8);
	assert_int_equal(m->fmt[2].tokens_per_page, 14);
	for (int n = 0; n < NR_NS; n++) {
		snprintf(name, sizeof(name), "model%d", n);
		ret = kvmm_ns_create(m->pool, name, cfg->ns_limit[n], 0, &m->ns[n]);
		assert_int_equal(ret, 0);
	}
	/* every other address space allocates through a magazine */
	for (int a = 0; a < NR_AS; a++) {
		struct kvmm_magazine *mag = NULL;

		if (a % 2 == 0) {
			assert_int_equal(
				kvmm_magazine_init(m->pool, &m->mag[a], (uint32_t)a + 1, 8, 4), 0);
			mag = &m->mag[a];
		}
		assert_int_equal(kvmm_aspace_create(m->pool, m->ns[a / NR_FMT], &m->fmt[a % NR_FMT],
						    mag, &m->as[a]),
				 0);
	}
	for (int d = 0; d < NR_DOCS; d++)
		for (int i = 0; i < DOC_LEN; i++)
			m->docs[d][i] = (uint32_t)rnd(m);
	/* documents share beginnings, as prompts share a system prompt */
	for (int d = 1; d < NR_DOCS; d++)
		memcpy(m->docs[d], m->docs[0], (size_t)(d * 4) * sizeof(uint32_t));
	m->pte_count = calloc(cfg->nframes, sizeof(uint32_t));
	assert_non_null(m->pte_count);
}

static void model_teardown(struct model *m)
{
	for (int a = 0; a < NR_AS; a++)
		kvmm_aspace_destroy(m->as[a]);
	while (m->nseqs)
		mseq_drop(m, m->nseqs - 1);
	m->opname = "teardown";
	full_check(m);
	for (int a = 0; a < NR_AS; a++)
		if (a % 2 == 0)
			kvmm_magazine_drain_all(&m->mag[a]);
	kvmm_pool_destroy(m->pool);
	free(m->sealed.slot);
	free(m->pte_count);
}

static void model_run(const struct model_cfg *cfg)
{
	struct model *m = calloc(1, sizeof(*m));
	uint64_t ops;

	assert_non_null(m);
	model_setup(m, cfg);
	ops = cfg->ops;
	print_message("model %s: seed %" PRIu64 " (KVMM_SEED), %" PRIu64
		      " ops (KVMM_MODEL_OPS), %u frames\n",
		      cfg->name, m->seed, ops, cfg->nframes);

	for (m->op = 0; m->op < ops; m->op++) {
		uint32_t k = rnd_below(m, 1000);

		if (!m->nseqs) {
			op_create(m);
		} else if (m->nseqs == MAX_SEQS &&
			   (k < 60 || (k >= 390 && k < 460) || (k >= 860 && k < 930))) {
			op_free(m); /* full: creating ops make room instead */
		} else if (k < 60) {
			op_create(m);
		} else if (k < 360) {
			op_append(m);
		} else if (k < 390) {
			op_free(m);
		} else if (k < 460) {
			op_fork(m);
		} else if (k < 540) {
			op_truncate(m);
		} else if (k < 670) {
			op_seal(m);
		} else if (k < 690) {
			op_reclaim(m);
		} else if (k < 695) {
			op_set_limit(m);
		} else if (k < 860) {
			op_free(m);
		} else if (k < 930) {
			op_lookup(m);
		} else {
			op_lookup_continue(m);
		}
		if (m->op % FULL_CHECK_EVERY == 0)
			full_check(m);
	}
	full_check(m);
	print_message("model %s: %" PRIu64 " lookups hit %" PRIu64 " blocks (%" PRIu64
		      " had to), %" PRIu64 " continued lookups hit %" PRIu64 " blocks, %" PRIu64
		      " cow, %" PRIu64 " dedup seals, %" PRIu64 " reclaimed, %" PRIu64
		      " -ENOMEM, %zu distinct blocks sealed; cow %" PRIu64 " seal %" PRIu64
		      " hit %" PRIu64 " collide %" PRIu64 " steal %" PRIu64 " direct %" PRIu64
		      " ns-limit %" PRIu64 "\n",
		      cfg->name, m->n_lookups, m->n_hit_blocks, m->n_must_hit, m->n_cont_lookups,
		      m->n_cont_hit_blocks, m->n_cow, m->n_dedup_seal, m->n_reclaimed, m->n_enomem,
		      m->sealed.nr, m->pool->stat[KVMM_STAT_COW], m->pool->stat[KVMM_STAT_SEAL],
		      m->pool->stat[KVMM_STAT_CACHE_HIT], m->pool->stat[KVMM_STAT_CACHE_COLLIDE],
		      m->pool->stat[KVMM_STAT_PGSTEAL], m->pool->stat[KVMM_STAT_DIRECT_RECLAIM],
		      m->pool->stat[KVMM_STAT_NS_LIMIT_HIT]);
	/* the run must have reached the interesting paths, or it proved little */
	assert_true(m->n_hit_blocks > 0 && m->n_must_hit > 0);
	assert_true(m->n_cont_lookups > 0 && m->n_cont_hit_blocks > 0);
	assert_true(m->n_cow > 0);
	assert_true(m->n_reclaimed > 0 || m->pool->stat[KVMM_STAT_PGSTEAL] > 0);
	model_teardown(m);
	free(m);
}

static uint64_t model_ops(uint32_t divisor)
{
	uint64_t ops = env_u64("KVMM_MODEL_OPS", DEFAULT_OPS) / divisor;

	return ops ? ops : 1;
}

/*
 * The main run: 1M operations over a 160-frame pool, two of three namespaces limited; the
 * three together can map more than the pool, so the pool reclaims directly too.
 */
static void test_model_main(void **state)
{
	struct model_cfg cfg = {.name = "main", .nframes = 160, .ns_limit = {0, 80, 40}};

	(void)state;
	cfg.ops = model_ops(1);
	model_run(&cfg);
}

/* A pool so small that nearly every append reclaims or fails. */
static void test_model_pressure(void **state)
{
	struct model_cfg cfg = {.name = "pressure", .nframes = 64, .ns_limit = {0, 32, 16}};

	(void)state;
	cfg.ops = model_ops(5);
	model_run(&cfg);
}

/* Every cache key collides with a quarter of all blocks: only verification keeps hits right. */
static void test_model_weak_hash(void **state)
{
	struct model_cfg cfg = {
		.name = "weak-hash", .nframes = 256, .ns_limit = {0, 96, 40}, .weak_hash = true};

	(void)state;
	cfg.ops = model_ops(5);
	model_run(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_main),
		cmocka_unit_test(test_model_pressure),
		cmocka_unit_test(test_model_weak_hash),
	};

	return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
