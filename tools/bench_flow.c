// SPDX-License-Identifier: MIT
/*
 * tools/bench_flow.c - kvmm-bench suite "flow": an engine's request flow on the core library,
 * in process, with no daemon.  It is the baseline of kvmm-bench-ipc's flow suite
 * (bench_flow_ipc.c), which runs the same workload from client processes of kvmmd and reads
 * this suite's rate from a `kvmm-bench --json flow` it starts in the same run.
 *
 * The workload (issue 25): each request is a prompt of 1024 tokens, the first 512 shared by
 * every request (a system prompt) and 512 of its own; pages of 16 tokens.  A request creates
 * a sequence, looks its prompt up in the prefix cache (the shared 32 blocks hit), appends the
 * tokens that missed (32 new blocks), seals its full blocks (they enter the cache) and frees
 * the sequence (its own pages stay cached until reclaim takes them: the pool soon is full of
 * cache, the steady state of a server).  The pool and format are the daemon's in the ipc
 * suite: 8192 frames of 4 KiB, a format of 16 tokens per page, the default watermarks.
 *
 *   flow.inproc        ns per request on the core library (kvmm_mm_*), baseline: XXH3-64 of
 *                      the request's 64 blocks chained (hashing alone)
 *   flow.inproc_rate   the same in requests per second
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bench.h"
#include "kvmm/mm.h"

struct flow_ctx {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_magazine mag;
	struct kvmm_fmt fmt;
	struct kvmm_aspace *as;
	uint32_t tok[FLOW_TOKENS];
	uint32_t next; /* request counter: every request's own tokens are new */
	int err;
	bool count_runs;	  /* run_flow counts the runs of frames its appends got */
	uint64_t nr_runs, nr_own; /* runs of consecutive frames, and the frames in them */
};

static void run_flow(void *arg, uint64_t n)
{
	struct flow_ctx *x = arg;

	for (uint64_t i = 0; i < n; i++) {
		struct kvmm_seq *seq;
		int hit, ret;

		bench_flow_prompt(x->tok, 0, x->next++);
		ret = kvmm_mm_seq_create(x->as, &seq);
		if (__builtin_expect(ret, 0))
			goto fail;
		hit = kvmm_mm_prefix_lookup(seq, x->tok, FLOW_TOKENS);
		ret = hit < 0 ? hit
			      : kvmm_mm_seq_append(seq, FLOW_TOKENS - (uint32_t)hit, x->tok + hit);
		if (!ret && x->count_runs) {
			for (uint32_t b = (uint32_t)hit / FLOW_TPP; b < seq->nblocks; b++) {
				uint32_t f = kvmm_mm_seq_frame(seq, b);

				x->nr_runs += b == (uint32_t)hit / FLOW_TPP ||
					      f != kvmm_mm_seq_frame(seq, b - 1) + 1;
				x->nr_own++;
			}
		}
		if (!ret)
			ret = kvmm_mm_seq_seal(seq);
		kvmm_mm_seq_free(seq);
		if (__builtin_expect(ret < 0, 0))
			goto fail;
		continue;
fail:
		if (!x->err)
			x->err = ret;
		return;
	}
}

static void run_hash(void *arg, uint64_t n)
{
	struct flow_ctx *x = arg;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t h = 0;

		bench_flow_prompt(x->tok, 0, x->next++);
		for (uint32_t b = 0; b < FLOW_TOKENS / FLOW_TPP; b++)
			h = XXH3_64bits_withSeed(x->tok + b * FLOW_TPP, FLOW_TPP * sizeof(uint32_t),
						 h);
		bench_use(h);
	}
}

int bench_suite_flow(const struct bench_opts *o)
{
	struct kvmm_pool_params params = {.page_size = FLOW_PAGE_SIZE, .nframes = FLOW_FRAMES};
	struct flow_ctx *x = calloc(1, sizeof(*x));
	struct bench_case c;
	double flow_ns, hash_ns;
	char why[256];
	int ret;

	if (!x)
		return -ENOMEM;
	ret = kvmm_pool_create(&params, &x->pool);
	if (ret)
		goto out;
	/* as kvmmd runs this pool (no swap tier): reclaim in batches by the allocating thread */
	x->pool->reclaim_inline = true;
	ret = kvmm_ns_create(x->pool, "bench", 0, 0, &x->ns);
	if (ret)
		goto out_pool;
	ret = kvmm_magazine_init(x->pool, &x->mag, 1, 64, 32);
	if (ret)
		goto out_ns;
	ret = kvmm_fmt_init(&x->fmt, &(struct kvmm_format)FLOW_FORMAT, params.page_size);
	if (ret)
		goto out_mag;
	ret = -EINVAL;
	if (x->fmt.tokens_per_page != FLOW_TPP)
		goto out_mag;
	ret = kvmm_aspace_create(x->pool, x->ns, &x->fmt, &x->mag, &x->as);
	if (ret)
		goto out_mag;

	/* a full pool of cache first: the steady state is measured, not the filling */
	c = (struct bench_case){.name = "flow", .run = run_flow, .arg = x};
	run_flow(x, 2 * FLOW_FRAMES / (FLOW_TOKENS / FLOW_TPP / 2));
	flow_ns = bench_measure(o, &c);
	ret = x->err;
	if (ret) {
		fprintf(stderr, "kvmm-bench flow: a request failed: %s\n", strerror(-ret));
		goto out_as;
	}
	/* untimed: how the appended pages lie (runs of consecutive frames, Documentation/mm) */
	x->count_runs = true;
	run_flow(x, 4096);
	x->count_runs = false;
	c = (struct bench_case){.name = "hash", .run = run_hash, .arg = x};
	hash_ns = bench_measure(o, &c);

	bench_report("flow.inproc", flow_ns, "ns/request", "xxh3_64_blocks", hash_ns);
	bench_report("flow.inproc_rate", 1e9 / flow_ns, "requests/s", "xxh3_64_blocks",
		     1e9 / hash_ns);
	bench_note("flow: 1024-token prompts (512 shared + 512 own), 16-token pages: lookup, "
		   "append the misses, seal, free; %u frames, cache-full steady state; the "
		   "appended pages lay in runs of %.2f frames on average (of 4096 requests)",
		   FLOW_FRAMES, x->nr_runs ? (double)x->nr_own / (double)x->nr_runs : 0.0);
	ret = kvmm_check_invariants(x->pool, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvmm-bench flow: invariants: %s\n", why);

out_as:
	kvmm_aspace_destroy(x->as);
out_mag:
	kvmm_magazine_drain_all(&x->mag);
out_ns:
	while (kvmm_reclaim(x->pool, NULL, UINT32_MAX))
		;
	kvmm_ns_destroy(x->ns);
out_pool:
	kvmm_pool_destroy(x->pool);
out:
	free(x);
	return ret;
}
