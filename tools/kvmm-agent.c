// SPDX-License-Identifier: MIT
/*
 * tools/kvmm-agent.c - one agent of `make demo`: an engine process talking to kvmmd.
 *
 * The agent attaches to kvmmd through libkvmm and holds a conversation that starts with a
 * system prompt shared by every agent.  Each turn is a request: look the prompt up in the
 * prefix cache, check the KV bytes of every hit page (another process wrote them), append
 * and write what missed (prefill), decode a reply one token at a time, seal the full pages,
 * end the request.  After its last turn the agent maps its whole conversation once more and
 * reports its block table, then holds it until the demo driver closes the "go" FIFO, so the
 * driver sees every agent's context live at the same time.
 *
 * The report (to --report FILE) is "key value" lines: looked_up, hit, tokens, blocks and
 * one "frame N" line per block.  The KV "values" are a byte pattern of (token, position),
 * written at layer 0's K row and the last layer's V row of each token.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/kvmm.h"
#include "tools/demo_workload.h"

/* The demo model: 4 layers, 2 KV heads of 64, fp16 (2 KiB of KV per token). */
#define AGENT_LAYERS 4
#define AGENT_KV_HEADS 2
#define AGENT_HEAD_DIM 64
#define AGENT_ROW_BYTES (AGENT_KV_HEADS * AGENT_HEAD_DIM * 2)

struct agent {
	kvmm_client_t *c;
	uint32_t tpp;
	struct demo_hist h; /* the conversation so far */
	uint64_t rng;
	uint64_t looked_up, hit;
};

/* Byte offsets of a token's K row in layer 0 and V row in the last layer, in its page. */
static void kv_offsets(const struct agent *a, uint32_t slot, uint64_t off[2])
{
	uint64_t slab = (uint64_t)a->tpp * AGENT_ROW_BYTES;

	off[0] = (uint64_t)slot * AGENT_ROW_BYTES;
	off[1] = ((uint64_t)(AGENT_LAYERS - 1) * 2 + 1) * slab + (uint64_t)slot * AGENT_ROW_BYTES;
}

/* Write (check == 0) or check the KV bytes of tokens [from, to) of seq. */
static int kv_rw(struct agent *a, uint64_t seq, uint64_t from, uint64_t to, int check)
{
	uint32_t nblocks = (uint32_t)((to + a->tpp - 1) / a->tpp);
	int32_t *table;
	int ret;

	if (to <= from)
		return 0;
	table = malloc(nblocks * sizeof(*table));
	if (!table)
		return -ENOMEM;
	ret = kvmm_block_table(a->c, &seq, 1, table, nblocks);
	for (uint64_t pos = from; !ret && pos < to; pos++) {
		uint8_t *page = kvmm_frame_addr(a->c, (uint32_t)table[pos / a->tpp]);
		uint8_t want = demo_kv_byte(a->h.tok[pos], pos);
		uint64_t off[2];

		if (!page) {
			ret = -EFAULT;
			break;
		}
		kv_offsets(a, (uint32_t)(pos % a->tpp), off);
		for (int i = 0; i < 2; i++) {
			if (!check)
				page[off[i]] = want;
			else if (page[off[i]] != want)
				ret = -EILSEQ;
		}
	}
	free(table);
	return ret;
}

/* Start a request over the whole history: lookup, verify the hits, prefill the rest. */
static int open_request(struct agent *a, uint64_t *seq)
{
	uint64_t nhit = 0;
	int ret;

	ret = kvmm_seq_create(a->c, 0, seq);
	if (ret)
		return ret;
	ret = kvmm_prefix_lookup(a->c, *seq, a->h.tok, a->h.len, &nhit);
	if (ret)
		return ret;
	a->looked_up += a->h.len;
	a->hit += nhit;
	ret = kv_rw(a, *seq, 0, nhit, 1);
	if (ret) {
		fprintf(stderr, "kvmm-agent: KV bytes of a cached page are wrong\n");
		return ret;
	}
	ret = kvmm_seq_append(a->c, *seq, a->h.tok + nhit, (uint32_t)(a->h.len - nhit), NULL);
	if (ret)
		return ret;
	return kv_rw(a, *seq, nhit, a->h.len, 0);
}

static int turn(struct agent *a, unsigned int user, unsigned int reply)
{
	uint64_t seq = 0;
	int ret;

	for (unsigned int i = 0; i < user; i++) {
		ret = demo_hist_push(&a->h, demo_next_token(&a->rng));
		if (ret)
			return ret;
	}
	ret = open_request(a, &seq);
	for (unsigned int i = 0; !ret && i < reply; i++) {
		uint32_t tok = demo_next_token(&a->rng);

		ret = demo_hist_push(&a->h, tok);
		if (!ret)
			ret = kvmm_seq_append(a->c, seq, &tok, 1, NULL);
		if (!ret)
			ret = kv_rw(a, seq, a->h.len - 1, a->h.len, 0);
	}
	if (!ret)
		ret = kvmm_seal(a->c, seq, 0, 0);
	kvmm_seq_free(a->c, seq);
	return ret;
}

static int report(struct agent *a, const char *path, uint64_t seq)
{
	uint32_t nblocks = (uint32_t)((a->h.len + a->tpp - 1) / a->tpp);
	int32_t *table = malloc(nblocks * sizeof(*table));
	char tmp[4096];
	FILE *f;
	int ret;

	if (!table)
		return -ENOMEM;
	ret = kvmm_block_table(a->c, &seq, 1, table, nblocks);
	if (ret)
		goto out;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		ret = -errno;
		goto out;
	}
	fprintf(f, "looked_up %llu\nhit %llu\ntokens %llu\nblocks %u\n",
		(unsigned long long)a->looked_up, (unsigned long long)a->hit,
		(unsigned long long)a->h.len, nblocks);
	for (uint32_t i = 0; i < nblocks; i++)
		fprintf(f, "frame %d\n", table[i]);
	if (fclose(f))
		ret = -EIO;
	else if (rename(tmp, path)) /* the driver polls for the file: publish it whole */
		ret = -errno;
out:
	free(table);
	return ret;
}

static int parse_uint(const char *s, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > 1000000)
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvmm-agent --socket PATH --ns NAME --id N --report FILE --go FIFO\n"
		   "                  [--turns N] [--system N] [--user N] [--reply N]\n");
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"socket", required_argument, NULL, 's'},
		{"ns", required_argument, NULL, 'n'},
		{"id", required_argument, NULL, 'i'},
		{"report", required_argument, NULL, 'o'},
		{"go", required_argument, NULL, 'g'},
		{"turns", required_argument, NULL, 't'},
		{"system", required_argument, NULL, 'S'},
		{"user", required_argument, NULL, 'u'},
		{"reply", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *sock = NULL, *ns = "agents", *out = NULL, *go = NULL;
	unsigned int id = 0, turns = 4, system = 2000, user = 120, reply = 160;
	struct kvmm_format fmt = {.layers = AGENT_LAYERS,
				  .kv_heads = AGENT_KV_HEADS,
				  .head_dim = AGENT_HEAD_DIM,
				  .dtype = KVMM_DTYPE_FP16};
	struct agent a = {0};
	uint64_t seed = 0x6b766d6dull, seq = 0;
	char buf[64];
	int c, ret, fd;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'n':
			ns = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'g':
			go = optarg;
			break;
		case 'i':
			bad = parse_uint(optarg, &id);
			break;
		case 't':
			bad = parse_uint(optarg, &turns);
			break;
		case 'S':
			bad = parse_uint(optarg, &system);
			break;
		case 'u':
			bad = parse_uint(optarg, &user);
			break;
		case 'r':
			bad = parse_uint(optarg, &reply);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
		if (bad) {
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !out || !go) {
		usage(stderr);
		return 2;
	}

	ret = kvmm_attach(sock, ns, &fmt, &a.c);
	if (ret) {
		fprintf(stderr, "kvmm-agent %u: attach: %s\n", id, kvmm_strerror(ret));
		return 1;
	}
	a.tpp = kvmm_tokens_per_page(a.c);
	a.rng = 0x9e3779b97f4a7c15ull * (id + 1);
	for (unsigned int i = 0; i < system; i++) {
		ret = demo_hist_push(&a.h, demo_next_token(&seed));
		if (ret)
			goto out;
	}
	for (unsigned int t = 0; t < turns; t++) {
		ret = turn(&a, user, reply);
		if (ret)
			goto out;
	}

	/* the whole conversation, live, until the driver has looked at every agent */
	ret = open_request(&a, &seq);
	if (!ret)
		ret = report(&a, out, seq);
	if (!ret) {
		fd = open(go, O_RDONLY); /* blocks until the driver opens the FIFO */
		if (fd < 0) {
			ret = -errno;
		} else {
			while (read(fd, buf, sizeof(buf)) > 0)
				;
			close(fd);
		}
	}
	kvmm_seq_free(a.c, seq);
out:
	if (ret)
		fprintf(stderr, "kvmm-agent %u: %s\n", id, kvmm_strerror(ret));
	kvmm_detach(a.c);
	free(a.h.tok);
	return ret ? 1 : 0;
}
