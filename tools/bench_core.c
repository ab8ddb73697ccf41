// SPDX-License-Identifier: MIT
/*
 * tools/bench_core.c - kvmm-bench suite "core": the allocator and the page cache, in process.
 *
 * One pool of small frames (4 KiB, a format of 16 tokens per page: 1 layer, 1 KV head, head
 * dim 64, fp16) in one namespace, so the numbers are the bookkeeping of kvmm and nothing
 * else: no KV bytes are written and the mmap backend's frames are never touched.  Rows:
 *
 *   core.alloc_free_mag    kvmm_alloc_page + kvmm_free_page through a magazine, ns/page
 *   core.alloc_free_buddy  the same without a magazine (buddy split and merge), ns/page
 *   core.cache_insert      sequence create + append 256 tokens + seal (16 blocks), ns/block
 *   core.prefix_lookup     kvmm_mm_prefix_lookup of a cached 4096-token prompt, ns/block
 *   core.prefix_lookup_rate  the same as M blocks/s
 *   core.cache_key         kvmm_cache_key() alone (the keyed hash insert and lookup compute)
 *   core.touch_free_{buddy,mag}_{budget,overcommit}  alloc, write one byte, free, in a pool
 *                          of the daemon-wide frame budget: one it fits (charging only) and an
 *                          overcommitted one (free frames past the pool's keep discarded,
 *                          refaulted on reuse), against the same pool without a budget,
 *                          ns/page; core.touch_free_churn_overcommit frees 512 at a time,
 *                          past the keep: what giving memory back costs
 *
 * each beside a baseline measured in the same run: malloc + free of 64 bytes (same burst
 * pattern) for the allocator, XXH3-64 of each 16-token block chained through the previous
 * hash ("hashing alone": the least a content-keyed cache must do) for the cache.  Allocations
 * go in bursts of 16 then 16 frees, closer to an engine step than one alloc and one free.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bench.h"
#include "kvmm/mm.h"

#define BURST 16	  /* pages allocated before they are freed again */
#define SEQ_BLOCKS 16	  /* blocks per sequence in the insert case */
#define PROMPT_BLOCKS 256 /* blocks in the cached prompt of the lookup case */
#define BASELINE_OBJ 64	  /* bytes malloc'ed by the allocator baseline */

struct core_ctx {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_magazine mag;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	uint32_t tpp;	/* tokens per page (16) */
	int err;	/* first error inside a timed run; reported after the run */
	uint32_t burst; /* budget cases: pages allocated before they are freed (<= CHURN) */

	/* insert case */
	struct kvmm_seq **seqs; /* one per iteration of a batch (also the lookup case) */
	uint64_t max_seqs;
	uint32_t *ins_tokens; /* max_seqs * SEQ_BLOCKS * tpp token ids */
	uint32_t next_token;  /* fresh ids so every batch inserts new content */

	/* lookup case */
	uint32_t *prompt; /* PROMPT_BLOCKS * tpp token ids */
	uint64_t prompt_len;
};

static void set_err(struct core_ctx *x, int err)
{
	if (!x->err)
		x->err = err;
}

/* ---- (a), (b): alloc + free ---------------------------------------------------------------- */

static void alloc_free(struct core_ctx *x, struct kvmm_magazine *mag, uint64_t n)
{
	struct kvmm_page *pg[BURST];

	for (uint64_t i = 0; i < n; i++) {
		for (int j = 0; j < BURST; j++) {
			pg[j] = kvmm_alloc_page(x->pool, x->ns, mag);
			if (__builtin_expect(!pg[j], 0)) {
				set_err(x, -ENOMEM);
				while (j--)
					kvmm_free_page(x->pool, pg[j], mag);
				return;
			}
		}
		for (int j = 0; j < BURST; j++)
			kvmm_free_page(x->pool, pg[j], mag);
	}
}

static void run_alloc_mag(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;

	alloc_free(x, &x->mag, n);
}

static void run_alloc_buddy(void *arg, uint64_t n)
{
	alloc_free(arg, NULL, n);
}

static void run_malloc(void *arg, uint64_t n)
{
	void *p[BURST];

	(void)arg;
	for (uint64_t i = 0; i < n; i++) {
		for (int j = 0; j < BURST; j++) {
			p[j] = malloc(BASELINE_OBJ);
			/* the compiler must believe the object is used, or it drops the pair */
			bench_use_ptr(p[j]);
		}
		for (int j = 0; j < BURST; j++)
			free(p[j]);
	}
}

/* ---- (c): page-cache insert ---------------------------------------------------------------- */

static void setup_insert(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;
	uint64_t ntok = n * SEQ_BLOCKS * x->tpp;

	for (uint64_t i = 0; i < ntok; i++)
		x->ins_tokens[i] = x->next_token++;
}

static void run_insert(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;
	uint32_t seq_tokens = SEQ_BLOCKS * x->tpp;
	int ret;

	for (uint64_t i = 0; i < n; i++) {
		ret = kvmm_mm_seq_create(x->as, &x->seqs[i]);
		if (ret) {
			x->seqs[i] = NULL;
			set_err(x, ret);
			return;
		}
		ret = kvmm_mm_seq_append(x->seqs[i], seq_tokens, x->ins_tokens + i * seq_tokens);
		if (!ret)
			ret = kvmm_mm_seq_seal(x->seqs[i]);
		if (ret != SEQ_BLOCKS) {
			set_err(x, ret < 0 ? ret : -EPROTO);
			return;
		}
	}
}

/* Free the sequences of a batch (their pages become cached) and evict the whole cache. */
static void teardown_seqs(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;

	for (uint64_t i = 0; i < n; i++) {
		if (x->seqs[i])
			kvmm_mm_seq_free(x->seqs[i]);
		x->seqs[i] = NULL;
	}
}

static void teardown_insert(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;

	teardown_seqs(arg, n);
	while (kvmm_reclaim(x->pool, x->ns, UINT32_MAX))
		;
}

/* ---- (d): prefix lookup -------------------------------------------------------------------- */

static void setup_lookup(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;
	int ret;

	for (uint64_t i = 0; i < n; i++) {
		ret = kvmm_mm_seq_create(x->as, &x->seqs[i]);
		if (ret) {
			x->seqs[i] = NULL;
			set_err(x, ret);
		}
	}
}

static void run_lookup(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;
	int ret;

	for (uint64_t i = 0; i < n; i++) {
		if (__builtin_expect(!x->seqs[i], 0))
			return;
		ret = kvmm_mm_prefix_lookup(x->seqs[i], x->prompt, x->prompt_len);
		if (__builtin_expect((uint64_t)ret != x->prompt_len, 0)) {
			set_err(x, ret < 0 ? ret : -EPROTO);
			return;
		}
	}
}

/* Baseline: what a content-keyed lookup must do at least, hash each block chained. */
static void run_hash(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;
	size_t block_bytes = (size_t)x->tpp * sizeof(uint32_t);

	for (uint64_t i = 0; i < n; i++) {
		uint64_t h = i;

		for (uint32_t b = 0; b < PROMPT_BLOCKS; b++)
			h = XXH3_64bits_withSeed(x->prompt + (size_t)b * x->tpp, block_bytes, h);
		bench_use(h);
	}
}

/* The page cache's own keyed hash of the same blocks, chained the same way. */
static void run_cache_key(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t h = i;

		for (uint32_t b = 0; b < PROMPT_BLOCKS; b++)
			h = kvmm_cache_key(x->ns, h, x->as->fmt_id, x->prompt + (size_t)b * x->tpp,
					   x->tpp);
		bench_use(h);
	}
}

/* ---- the suite ----------------------------------------------------------------------------- */

/* Cache the prompt: one sequence appends it, seals every block and goes away. */
static int cache_prompt(struct core_ctx *x)
{
	struct kvmm_seq *seq;
	int ret;

	x->prompt_len = (uint64_t)PROMPT_BLOCKS * x->tpp;
	x->prompt = malloc(x->prompt_len * sizeof(uint32_t));
	if (!x->prompt)
		return -ENOMEM;
	/* ids unlike the insert case's counter, so the two never share a block */
	for (uint64_t i = 0; i < x->prompt_len; i++)
		x->prompt[i] = 0x80000000u | (uint32_t)(i * 2654435761u >> 1);
	ret = kvmm_mm_seq_create(x->as, &seq);
	if (ret)
		return ret;
	ret = kvmm_mm_seq_append(seq, (uint32_t)x->prompt_len, x->prompt);
	if (!ret)
		ret = kvmm_mm_seq_seal(seq);
	kvmm_mm_seq_free(seq);
	if (ret < 0)
		return ret;
	return ret == PROMPT_BLOCKS ? 0 : -EPROTO;
}

/*
 * The daemon-wide frame budget (kvmm/budget.c) on the allocator's paths: buddy and magazine
 * alloc + free of a pool alone, of one in a budget it fits (charging only), and of one in an
 * overcommitted budget, where every frame going back to the buddy is discarded
 * (MADV_DONTNEED here, a punched hole in kvmmd's memfds) and refaults when used again.  Each
 * burst writes one byte per page, as an engine writes its KV, so the refault is counted.
 */
#define BUDGET_FRAMES 4096
#define CHURN 512 /* the churn rows' burst: past the pool's keep (122 frames here) */

static void touch_free(struct core_ctx *x, struct kvmm_magazine *mag, uint64_t n)
{
	struct kvmm_page *pg[CHURN];
	int burst = (int)x->burst;

	for (uint64_t i = 0; i < n; i++) {
		for (int j = 0; j < burst; j++) {
			pg[j] = kvmm_alloc_page(x->pool, x->ns, mag);
			if (__builtin_expect(!pg[j], 0)) {
				set_err(x, -ENOMEM);
				while (j--)
					kvmm_free_page(x->pool, pg[j], mag);
				return;
			}
			*(volatile char *)kvmm_pool_frame_addr(
				x->pool, kvmm_page_to_frame(x->pool, pg[j])) = 1;
		}
		for (int j = 0; j < burst; j++)
			kvmm_free_page(x->pool, pg[j], mag);
	}
}

static void run_touch_buddy(void *arg, uint64_t n)
{
	touch_free(arg, NULL, n);
}

static void run_touch_mag(void *arg, uint64_t n)
{
	struct core_ctx *x = arg;

	touch_free(x, &x->mag, n);
}

/*
 * mode 0: no budget, 1: a budget the pool fits, 2: an overcommitted one; @kind 0: buddy,
 * 1: magazine, 2: buddy in bursts of CHURN.  ns/page, or < 0.
 */
static int budget_case(const struct bench_opts *o, int mode, int kind, double *ns)
{
	struct kvmm_pool_params params = {.page_size = 4096, .nframes = BUDGET_FRAMES};
	static const char *const names[3][3] = {
		{"touch_free_buddy", "touch_free_buddy_budget", "touch_free_buddy_overcommit"},
		{"touch_free_mag", "touch_free_mag_budget", "touch_free_mag_overcommit"},
		{"touch_free_churn", "touch_free_churn_budget", "touch_free_churn_overcommit"}};
	bool mag = kind == 1;
	struct core_ctx x = {0};
	struct kvmm_budget b;
	struct bench_case c;
	int ret;

	ret = kvmm_pool_create(&params, &x.pool);
	if (ret)
		return ret;
	ret = kvmm_ns_create(x.pool, "bench", 0, 0, &x.ns);
	if (!ret)
		ret = kvmm_magazine_init(x.pool, &x.mag, 1, 64, 32);
	if (!ret && mode) {
		ret = kvmm_budget_init(&b, mode == 1 ? BUDGET_FRAMES : BUDGET_FRAMES / 2);
		if (!ret)
			ret = kvmm_budget_join(&b, x.pool, x.ns);
	}
	if (!ret) {
		x.burst = kind == 2 ? CHURN : BURST;
		c = (struct bench_case){.name = names[kind][mode],
					.run = mag ? run_touch_mag : run_touch_buddy,
					.arg = &x,
					.items_per_iter = x.burst};
		*ns = bench_measure(o, &c);
		ret = x.err;
	}
	kvmm_magazine_drain_all(&x.mag);
	if (x.ns)
		kvmm_ns_destroy(x.ns);
	kvmm_pool_destroy(x.pool);
	if (mode)
		kvmm_budget_fini(&b);
	return ret;
}

static int bench_budget(const struct bench_opts *o)
{
	double ns[3][3];
	int ret = 0;

	for (int kind = 0; kind < 3 && !ret; kind++)
		for (int mode = 0; mode < 3 && !ret; mode++)
			ret = budget_case(o, mode, kind, &ns[kind][mode]);
	if (ret) {
		fprintf(stderr, "kvmm-bench core: budget: %s\n", strerror(-ret));
		return ret;
	}
	bench_report("core.touch_free_buddy_budget", ns[0][1], "ns/page", "touch_free_buddy",
		     ns[0][0]);
	bench_report("core.touch_free_buddy_overcommit", ns[0][2], "ns/page", "touch_free_buddy",
		     ns[0][0]);
	bench_report("core.touch_free_mag_budget", ns[1][1], "ns/page", "touch_free_mag", ns[1][0]);
	bench_report("core.touch_free_mag_overcommit", ns[1][2], "ns/page", "touch_free_mag",
		     ns[1][0]);
	bench_report("core.touch_free_churn_overcommit", ns[2][2], "ns/page", "touch_free_churn",
		     ns[2][0]);
	return 0;
}

static int check_err(struct core_ctx *x, const char *what)
{
	if (!x->err)
		return 0;
	fprintf(stderr, "kvmm-bench core: %s failed: %s\n", what, strerror(-x->err));
	return x->err;
}

int bench_suite_core(const struct bench_opts *o)
{
	struct kvmm_pool_params params = {
		.page_size = 4096,
		.nframes = o->quick ? 16384 : 65536,
	};
	struct core_ctx x = {0};
	struct bench_case c;
	double mag_ns, buddy_ns, malloc_ns, insert_ns, lookup_ns, hash_ns, key_ns;
	char why[256];
	int ret;

	ret = kvmm_pool_create(&params, &x.pool);
	if (ret)
		goto out;
	ret = kvmm_ns_create(x.pool, "bench", 0, 0, &x.ns);
	if (ret)
		goto out_pool;
	ret = kvmm_magazine_init(x.pool, &x.mag, 1, 64, 32);
	if (ret)
		goto out_ns;
	ret = kvmm_fmt_init(&x.fmt, &(struct kvmm_format){1, 1, 64, KVMM_DTYPE_FP16},
			    params.page_size);
	if (ret)
		goto out_mag;
	x.tpp = x.fmt.tokens_per_page;
	ret = kvmm_aspace_create(x.pool, x.ns, &x.fmt, &x.mag, &x.as);
	if (ret)
		goto out_mag;

	/* a batch of inserts may use half the pool, well clear of the watermarks */
	x.max_seqs = params.nframes / 2 / SEQ_BLOCKS;
	x.seqs = calloc(x.max_seqs, sizeof(*x.seqs));
	x.ins_tokens = calloc(x.max_seqs * SEQ_BLOCKS * x.tpp, sizeof(uint32_t));
	ret = -ENOMEM;
	if (!x.seqs || !x.ins_tokens)
		goto out_as;

	/* (a) and (b) against malloc + free */
	c = (struct bench_case){
		.name = "alloc_free_mag", .run = run_alloc_mag, .arg = &x, .items_per_iter = BURST};
	mag_ns = bench_measure(o, &c);
	c.name = "alloc_free_buddy";
	c.run = run_alloc_buddy;
	buddy_ns = bench_measure(o, &c);
	c.name = "malloc_free";
	c.run = run_malloc;
	malloc_ns = bench_measure(o, &c);
	ret = check_err(&x, "alloc+free");
	if (ret)
		goto out_as;

	/* (c) and (d) against hashing alone */
	c = (struct bench_case){.name = "cache_insert",
				.setup = setup_insert,
				.run = run_insert,
				.teardown = teardown_insert,
				.arg = &x,
				.max_batch = x.max_seqs,
				.items_per_iter = SEQ_BLOCKS};
	insert_ns = bench_measure(o, &c);
	ret = check_err(&x, "cache insert");
	if (ret)
		goto out_as;
	/* after the insert case, whose teardown empties the cache */
	ret = cache_prompt(&x);
	if (ret)
		goto out_as;
	c = (struct bench_case){.name = "prefix_lookup",
				.setup = setup_lookup,
				.run = run_lookup,
				.teardown = teardown_seqs,
				.arg = &x,
				.max_batch = x.max_seqs < 2048 ? x.max_seqs : 2048,
				.items_per_iter = PROMPT_BLOCKS};
	lookup_ns = bench_measure(o, &c);
	ret = check_err(&x, "prefix lookup");
	if (ret)
		goto out_as;
	c = (struct bench_case){
		.name = "hash", .run = run_hash, .arg = &x, .items_per_iter = PROMPT_BLOCKS};
	hash_ns = bench_measure(o, &c);
	c.name = "cache_key";
	c.run = run_cache_key;
	key_ns = bench_measure(o, &c);

	bench_report("core.alloc_free_mag", mag_ns, "ns/page", "malloc_free_64B", malloc_ns);
	bench_report("core.alloc_free_buddy", buddy_ns, "ns/page", "malloc_free_64B", malloc_ns);
	bench_report("core.cache_key", key_ns, "ns/block", "xxh3_16tok", hash_ns);
	bench_report("core.cache_insert", insert_ns, "ns/block", "xxh3_16tok", hash_ns);
	bench_report("core.prefix_lookup", lookup_ns, "ns/block", "xxh3_16tok", hash_ns);
	bench_report("core.prefix_lookup_rate", 1e3 / lookup_ns, "M blocks/s", "xxh3_16tok",
		     1e3 / hash_ns);
	bench_target("core magazine alloc+free", mag_ns, 50, true, "ns/page");
	bench_target("core prefix lookup", 1e3 / lookup_ns, 10, false, "M blocks/s");
	ret = bench_budget(o);
	if (ret)
		goto out_as;

	/* the benchmark must leave a consistent pool: a cheap end-to-end check of its own */
	ret = kvmm_check_invariants(x.pool, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvmm-bench core: invariants: %s\n", why);

out_as:
	kvmm_aspace_destroy(x.as);
out_mag:
	kvmm_magazine_drain_all(&x.mag);
out_ns:
	while (kvmm_reclaim(x.pool, NULL, UINT32_MAX))
		;
	if (!ret && x.ns->used + x.ns->cached)
		ret = -EUCLEAN;
	kvmm_ns_destroy(x.ns);
out_pool:
	kvmm_pool_destroy(x.pool);
out:
	free(x.prompt);
	free(x.ins_tokens);
	free(x.seqs);
	return ret;
}
