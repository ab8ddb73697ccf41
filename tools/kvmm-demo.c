// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-demo.c - several agents share one system prompt through the kvmm core.
 *
 * Each agent holds a conversation: every turn is a request whose prompt is the shared
 * system prompt plus the agent's history plus a new user message.  A request looks its
 * prompt up in the prefix page cache, appends what missed (prefill), decodes a reply one
 * token at a time, seals the full pages it wrote and ends; its sealed pages stay cached for
 * the next turn and for the other agents.  Every token's KV bytes are written into the
 * pages and every page mapped from the cache is checked byte for byte, so a wrong hit
 * would be caught, not just counted.
 *
 * The demo prints the frames kvmm holds against the frames the same conversations would
 * hold if each agent kept a private copy of its context, and the prefix hit rate.  It runs
 * the core library inside one process (no daemon, no IPC): the second part of `make demo`,
 * beside tools/kvmm-agent's processes talking to the real kvmmd.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvmm/mm.h"
#include "tools/demo_workload.h"

struct demo_opts {
	unsigned int agents;
	unsigned int turns;
	unsigned int system_tokens;
	unsigned int user_tokens;
	unsigned int reply_tokens;
	unsigned int frames;
};

struct agent {
	struct demo_hist h; /* the conversation so far */
	uint64_t rng;
};

/* Write token @pos's KV bytes (first byte of its K row in layer 0 and the last layer). */
static void write_kv(struct kvmm_pool *pool, const struct kvmm_seq *seq, uint64_t pos, uint32_t tok)
{
	const struct kvmm_fmt *fmt = &seq->as->fmt;
	uint32_t block = (uint32_t)(pos / fmt->tokens_per_page);
	uint32_t slot = (uint32_t)(pos % fmt->tokens_per_page);
	uint8_t *page = kvmm_pool_frame_addr(pool, kvmm_mm_seq_frame(seq, block));

	page[kvmm_fmt_offset(fmt, 0, 0, slot)] = demo_kv_byte(tok, pos);
	page[kvmm_fmt_offset(fmt, fmt->layers - 1, 1, slot)] = demo_kv_byte(tok, pos);
}

static int check_kv(struct kvmm_pool *pool, const struct kvmm_seq *seq, const uint32_t *toks,
		    uint64_t n)
{
	const struct kvmm_fmt *fmt = &seq->as->fmt;

	for (uint64_t pos = 0; pos < n; pos++) {
		uint32_t block = (uint32_t)(pos / fmt->tokens_per_page);
		uint32_t slot = (uint32_t)(pos % fmt->tokens_per_page);
		uint8_t *page = kvmm_pool_frame_addr(pool, kvmm_mm_seq_frame(seq, block));

		if (page[kvmm_fmt_offset(fmt, 0, 0, slot)] != demo_kv_byte(toks[pos], pos) ||
		    page[kvmm_fmt_offset(fmt, fmt->layers - 1, 1, slot)] !=
			    demo_kv_byte(toks[pos], pos)) {
			fprintf(stderr, "kvmm-demo: wrong KV bytes at token %llu\n",
				(unsigned long long)pos);
			return -EIO;
		}
	}
	return 0;
}

/* One request: look up the prompt, prefill the miss, decode the reply, seal, end. */
static int run_turn(struct kvmm_pool *pool, struct kvmm_aspace *as, struct agent *a,
		    const struct demo_opts *o, uint64_t *looked_up, uint64_t *hit)
{
	struct kvmm_seq *seq;
	uint64_t prompt_len;
	int ret, mapped;

	for (unsigned int i = 0; i < o->user_tokens; i++) {
		ret = demo_hist_push(&a->h, demo_next_token(&a->rng));
		if (ret)
			return ret;
	}
	prompt_len = a->h.len;

	ret = kvmm_mm_seq_create(as, &seq);
	if (ret)
		return ret;
	mapped = kvmm_mm_prefix_lookup(seq, a->h.tok, prompt_len);
	if (mapped < 0) {
		ret = mapped;
		goto out_free;
	}
	*looked_up += prompt_len;
	*hit += (uint64_t)mapped;
	ret = check_kv(pool, seq, a->h.tok, (uint64_t)mapped);
	if (ret)
		goto out_free;

	/* prefill: the part of the prompt that missed, in one append */
	ret = kvmm_mm_seq_append(seq, (uint32_t)(prompt_len - (uint64_t)mapped), a->h.tok + mapped);
	if (ret)
		goto out_free;
	for (uint64_t pos = (uint64_t)mapped; pos < prompt_len; pos++)
		write_kv(pool, seq, pos, a->h.tok[pos]);

	/* decode: one token per step */
	for (unsigned int i = 0; i < o->reply_tokens; i++) {
		uint32_t tok = demo_next_token(&a->rng);

		ret = demo_hist_push(&a->h, tok);
		if (ret)
			goto out_free;
		ret = kvmm_mm_seq_append(seq, 1, &tok);
		if (ret)
			goto out_free;
		write_kv(pool, seq, a->h.len - 1, tok);
	}
	ret = kvmm_mm_seq_seal(seq);
	if (ret > 0)
		ret = 0;
out_free:
	kvmm_mm_seq_free(seq);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvmm-demo [--agents N] [--turns N] [--system N] [--user N] [--reply N]\n"
		   "                 [--frames N]\n"
		   "Several agents share a system prompt through the kvmm prefix cache.\n");
}

static int parse_uint(const char *s, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0 || v > 1000000)
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"agents", required_argument, NULL, 'a'}, {"turns", required_argument, NULL, 't'},
		{"system", required_argument, NULL, 's'}, {"user", required_argument, NULL, 'u'},
		{"reply", required_argument, NULL, 'r'},  {"frames", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},	  {NULL, 0, NULL, 0},
	};
	struct demo_opts o = {.agents = 8,
			      .turns = 4,
			      .system_tokens = 2000,
			      .user_tokens = 120,
			      .reply_tokens = 160,
			      .frames = 4096};
	struct kvmm_pool_params pp = {0};
	struct kvmm_pool *pool = NULL;
	struct kvmm_ns *ns = NULL;
	struct kvmm_fmt fmt;
	struct kvmm_aspace **as = NULL;
	struct agent *agents = NULL;
	uint32_t *system = NULL;
	uint64_t looked_up = 0, hit = 0, private_frames = 0, seed = 0x6b766d6dull;
	char why[256];
	int c, ret = 1;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		unsigned int *dst = c == 'a'   ? &o.agents
				    : c == 't' ? &o.turns
				    : c == 's' ? &o.system_tokens
				    : c == 'u' ? &o.user_tokens
				    : c == 'r' ? &o.reply_tokens
				    : c == 'f' ? &o.frames
					       : NULL;

		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (!dst || parse_uint(optarg, dst)) {
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	/* a small model: 4 layers, 2 KV heads of 64, fp16: 2 KiB per token, 16 per page */
	pp.page_size = 32768;
	pp.nframes = o.frames;
	ret = kvmm_pool_create(&pp, &pool);
	if (ret) {
		fprintf(stderr, "kvmm-demo: pool: %s\n", strerror(-ret));
		return 1;
	}
	ret = kvmm_fmt_init(&fmt, &(struct kvmm_format){4, 2, 64, KVMM_DTYPE_FP16}, pp.page_size);
	if (!ret)
		ret = kvmm_ns_create(pool, "agents", 0, 0, &ns);
	if (ret) {
		fprintf(stderr, "kvmm-demo: setup: %s\n", strerror(-ret));
		goto out;
	}

	as = calloc(o.agents, sizeof(*as));
	agents = calloc(o.agents, sizeof(*agents));
	system = malloc(o.system_tokens * sizeof(*system));
	if (!as || !agents || !system) {
		fprintf(stderr, "kvmm-demo: out of memory\n");
		goto out;
	}
	for (unsigned int i = 0; i < o.system_tokens; i++)
		system[i] = demo_next_token(&seed);

	printf("kvmm-demo: %u agents, %u turns each, system prompt %u tokens, %u user + %u reply "
	       "tokens per turn\n",
	       o.agents, o.turns, o.system_tokens, o.user_tokens, o.reply_tokens);
	printf("kvmm-demo: pool %u frames of %llu KiB, %u tokens per page (core library, "
	       "in-process, no daemon)\n",
	       o.frames, (unsigned long long)pp.page_size / 1024, fmt.tokens_per_page);

	for (unsigned int i = 0; i < o.agents; i++) {
		ret = kvmm_aspace_create(pool, ns, &fmt, NULL, &as[i]);
		if (ret)
			goto out_err;
		agents[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
		for (unsigned int t = 0; t < o.system_tokens; t++) {
			ret = demo_hist_push(&agents[i].h, system[t]);
			if (ret)
				goto out_err;
		}
	}

	/* the agents take turns, round robin, as a serving loop would interleave them */
	for (unsigned int turn = 0; turn < o.turns; turn++) {
		for (unsigned int i = 0; i < o.agents; i++) {
			ret = run_turn(pool, as[i], &agents[i], &o, &looked_up, &hit);
			if (ret)
				goto out_err;
		}
		ret = kvmm_check_invariants(pool, why, sizeof(why));
		if (ret) {
			fprintf(stderr, "kvmm-demo: invariant broken: %s\n", why);
			goto out;
		}
	}

	for (unsigned int i = 0; i < o.agents; i++)
		private_frames += (agents[i].h.len + fmt.tokens_per_page - 1) / fmt.tokens_per_page;

	{
		uint64_t used = pool->nr_state[KVMM_PAGE_MAPPED] + pool->nr_state[KVMM_PAGE_CACHED];

		printf("\n%-44s %10s\n", "", "frames");
		printf("%-44s %10llu\n", "needed without sharing (private copies)",
		       (unsigned long long)private_frames);
		printf("%-44s %10llu\n", "held by kvmm (mapped + cached)",
		       (unsigned long long)used);
		printf("%-44s %9.1f%%\n", "saved",
		       100.0 * (1.0 - (double)used / (double)private_frames));
		printf("%-44s %9.1f%%  (%llu of %llu prompt tokens)\n", "prefix hit rate",
		       looked_up ? 100.0 * (double)hit / (double)looked_up : 0.0,
		       (unsigned long long)hit, (unsigned long long)looked_up);
		printf("%-44s %10llu\n", "pages sealed",
		       (unsigned long long)pool->stat[KVMM_STAT_SEAL]);
		printf("%-44s %10llu\n", "hit tokens whose KV bytes were verified",
		       (unsigned long long)hit);
	}
	ret = 0;
	goto out;
out_err:
	fprintf(stderr, "kvmm-demo: %s\n", strerror(-ret));
	ret = 1;
out:
	for (unsigned int i = 0; as && i < o.agents; i++)
		if (as[i])
			kvmm_aspace_destroy(as[i]);
	for (unsigned int i = 0; agents && i < o.agents; i++)
		free(agents[i].h.tok);
	free(agents);
	free(as);
	free(system);
	if (ns) {
		kvmm_reclaim(pool, NULL, UINT32_MAX);
		kvmm_ns_destroy(ns);
	}
	kvmm_pool_destroy(pool);
	return ret ? 1 : 0;
}
