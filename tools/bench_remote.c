// SPDX-License-Identifier: MIT
/*
 * tools/bench_remote.c - kvmm-bench remote: the time to bring a prompt's prefix (4096 tokens,
 * 1024 with --quick) back from the remote tier against bringing it back from the NVMe swap
 * tier and against a memcpy of the same bytes, all in one run on one pool.  When
 * /usr/bin/python3 has torch (KVMM_BENCH_PREFILL=0 turns it off), the time kvmm.llm's engine
 * takes to recompute the prefill of a random-weight model with the same KV geometry is
 * measured too (tools/bench_prefill.py), on a short prefix (64 tokens, or
 * $KVMM_BENCH_PREFILL_TOKENS: the CPU engine takes tens of seconds for that) whose cluster
 * and NVMe times are measured again in the same run, so its rows compare the same bytes.
 *
 * The remote path timed is what kvmmd does for a lookup that misses locally: every block's
 * content key and prefix digest computed, one pipelined batch of GETs through the tier's worker
 * (one round trip per node), each value's header and checksum verified on the worker, the
 * completion collected through the eventfd, each frame copied into a pool frame.  Only the
 * daemon's socket round trip is left out (kvmm-bench-ipc measures that).  The NVMe path is
 * kvmm_mm_seq_fault() of the same blocks swapped out to an O_DIRECT swap file.
 *
 * The cluster: $KVMM_BENCH_REDIS ("host:port,..."), or 3 redis-server masters started on free
 * loopback ports in a temporary directory (the suite is skipped, with a note, without
 * redis-server).  Loopback is the best case for the network: on a real fleet add the RTT and
 * the bytes over the link (a 25 Gb/s link moves the 128 MiB prefix in ~45 ms).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/remote.h"
#include "kvmm/swap.h"
#include "tools/bench.h"
#include "tools/cluster/redis_cluster.h"

#define NODES 3

static void fill(void *p, size_t len, uint64_t seed)
{
	uint64_t *q = p, z = seed;

	for (size_t i = 0; i < len / 8; i++) {
		z += 0x9e3779b97f4a7c15ull;
		q[i] = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
	}
}

struct env {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_aspace *as;
	struct kvmm_fmt fmt;
	struct kvmm_remote *r;
	uint32_t blocks;
	uint32_t *tokens;
};

/* The lookup of blocks [0, blocks) of the prompt: keys and what each value must say. */
static struct kvmm_remote_req *make_req(struct env *e)
{
	struct kvmm_remote_req *req = kvmm_remote_req_alloc(e->blocks);
	uint32_t tpp = e->fmt.tokens_per_page;
	struct kvmm_remote_digest d;
	uint64_t parent = 0;

	if (!req)
		return NULL;
	kvmm_remote_digest_init(&d, e->ns->secret, e->ns->hash_seed, e->as->fmt_id);
	for (uint32_t b = 0; b < e->blocks; b++) {
		const uint32_t *t = e->tokens + (size_t)b * tpp;
		struct kvmm_remote_blk *k = &req->blk[b];

		k->key = kvmm_cache_key(e->ns, parent, e->as->fmt_id, t, tpp);
		kvmm_remote_digest_update(&d, t, tpp);
		kvmm_remote_digest_get(&d, k->want.digest);
		k->want.fmt_id = e->as->fmt_id;
		k->want.payload_len = e->pool->page_size;
		k->want.ntokens = tpp;
		k->want.depth = b;
		parent = k->key;
	}
	req->owner = e;
	return req;
}

/* One remote fetch of the whole prefix into @seq's frames: ns, or -errno. */
static int64_t remote_fetch(struct env *e, struct kvmm_seq *seq)
{
	uint64_t t0 = bench_now_ns(), t;
	struct kvmm_remote_req *req = make_req(e), *done;
	struct pollfd pfd = {.fd = kvmm_remote_fd(e->r), .events = POLLIN};
	uint32_t found;

	if (!req)
		return -ENOMEM;
	kvmm_remote_lookup(e->r, req);
	for (done = NULL; !done;) {
		if (poll(&pfd, 1, 10000) <= 0)
			return -ETIMEDOUT;
		done = kvmm_remote_complete(e->r);
	}
	for (uint32_t b = 0; b < done->found; b++)
		memcpy(kvmm_pool_frame_addr(e->pool, kvmm_mm_seq_frame(seq, b)),
		       (uint8_t *)done->blk[b].val + KVMM_REMOTE_HDR_LEN, e->pool->page_size);
	t = bench_now_ns() - t0;
	found = done->found;
	kvmm_remote_req_free(done);
	return found == e->blocks ? (int64_t)t : -EIO;
}

/*
 * Whether kvmm.llm's engine can run here: /usr/bin/python3 with torch, and the script.
 * $KVMM_BENCH_PREFILL=0 turns the recompute rows off.
 */
static bool have_engine(void)
{
	const char *env = getenv("KVMM_BENCH_PREFILL");

	if (env && !strcmp(env, "0"))
		return false;
	return !access("/usr/bin/python3", X_OK) && !access("tools/bench_prefill.py", R_OK) &&
	       !system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1");
}

/* tools/bench_prefill.py: seconds of the engine's prefill of @tokens tokens, or < 0. */
static double prefill_seconds(const struct env *e, uint32_t tokens)
{
	char cmd[1024], line[256];
	double s = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 tools/bench_prefill.py --tokens %u --layers %u --kv-heads %u "
		 "--head-dim %u --reps 1 2>/dev/null",
		 tokens, e->fmt.layers, e->fmt.kv_heads, e->fmt.head_dim);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		sscanf(line, "prefill_seconds %lf", &s);
	if (pclose(f))
		return -1;
	return s;
}

/*
 * The recompute baseline, on a prefix short enough for the CPU engine (it takes tens of
 * seconds per 64 tokens on a small machine): that prefix's first @blocks blocks are fetched
 * from the cluster and faulted from the NVMe tier again, so all three rows are of the same
 * bytes, in this run.  $KVMM_BENCH_PREFILL_TOKENS sets the prefix (a multiple of a page).
 */
static int recompute_rows(struct env *e, struct kvmm_seq *src, struct kvmm_seq *dst,
			  uint32_t rounds)
{
	uint32_t tpp = e->fmt.tokens_per_page, all = e->blocks, blocks = 4, tokens;
	const char *env = getenv("KVMM_BENCH_PREFILL_TOKENS");
	double vr[8], vn[8], pre;
	char name[128];
	int ret = 0;

	if (env && *env)
		blocks = (uint32_t)strtoul(env, NULL, 10) / tpp;
	blocks = blocks ? min_t(uint32_t, blocks, all) : 1;
	tokens = blocks * tpp;
	e->blocks = blocks;
	for (uint32_t r = 0; r < rounds && !ret; r++) {
		int64_t t = remote_fetch(e, dst);
		uint64_t t0;
		int n;

		if (t < 0) {
			ret = (int)t;
			break;
		}
		vr[r] = (double)t / 1e6;
		n = kvmm_mm_seq_swap_out(src, 0, blocks);
		if (n != (int)blocks) {
			ret = n < 0 ? n : -EIO;
			break;
		}
		t0 = bench_now_ns();
		n = kvmm_mm_seq_fault(src, 0, blocks);
		vn[r] = (double)(bench_now_ns() - t0) / 1e6;
		if (n != (int)blocks)
			ret = n < 0 ? n : -EIO;
	}
	e->blocks = all;
	if (ret)
		return ret;
	pre = prefill_seconds(e, tokens);
	if (pre <= 0) {
		bench_note("remote: recompute not measured: tools/bench_prefill.py failed");
		return 0;
	}
	/* the recompute as the value: the ratio says how many times a hit is faster */
	snprintf(name, sizeof(name),
		 "remote: engine prefill recomputing a %u-token prefix (random weights)", tokens);
	bench_report(name, pre * 1e3, "ms", "the same from the cluster", bench_median(vr, rounds));
	bench_report(name, pre * 1e3, "ms", "the same from the NVMe tier",
		     bench_median(vn, rounds));
	return 0;
}

int bench_suite_remote(const struct bench_opts *o)
{
	uint32_t tokens = o->quick ? 1024 : 4096, rounds = o->quick ? 3 : 7, tpp, b;
	/* a 1B-class model: 16 layers x 8 KV heads x 64 dims, fp16: 32 KiB per token */
	struct kvmm_format f = {16, 8, 64, KVMM_DTYPE_FP16};
	uint64_t page = 512u << 10;
	double vr[8], vn[8], vm[8], bytes;
	struct kvmm_remote_config rc = {0};
	struct kvmm_seq *src = NULL, *dst = NULL;
	const char *seeds = getenv("KVMM_BENCH_REDIS");
	char path[256];
	static const char *const redis_args[] = {"--maxmemory", "2gb", NULL};
	struct rcluster cl = {.extra = redis_args};
	struct env e = {0};
	int ret;

	if (!seeds || !*seeds) {
		ret = rcluster_start(&cl, NODES);
		if (ret == -ENOENT) {
			bench_note("remote: skipped: no /usr/bin/redis-server (make deps) and no "
				   "$KVMM_BENCH_REDIS");
			return 0;
		}
		if (ret)
			goto out;
		seeds = cl.seeds;
	}
	{
		struct kvmm_pool_params p = {.page_size = page, .nframes = 0};

		ret = kvmm_fmt_init(&e.fmt, &f, page);
		if (ret)
			goto out;
		tpp = e.fmt.tokens_per_page;
		e.blocks = tokens / tpp;
		p.nframes = 2 * e.blocks + 16;
		ret = kvmm_pool_create(&p, &e.pool);
	}
	if (!ret)
		ret = kvmm_ns_create(e.pool, "bench", 0, 0, &e.ns);
	if (!ret)
		ret = kvmm_aspace_create(e.pool, e.ns, &e.fmt, NULL, &e.as);
	if (ret)
		goto out;
	e.tokens = malloc((size_t)tokens * sizeof(*e.tokens));
	if (!e.tokens) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < tokens; i++)
		e.tokens[i] = (i * 2654435761u) % 128000;
	ret = kvmm_mm_seq_create(e.as, &src);
	if (!ret)
		ret = kvmm_mm_seq_append(src, tokens, e.tokens);
	if (!ret)
		ret = kvmm_mm_seq_create(e.as, &dst);
	if (!ret)
		ret = kvmm_mm_seq_append(dst, tokens, e.tokens);
	if (ret)
		goto out;
	for (b = 0; b < e.blocks; b++)
		fill(kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(src, b)), page, b);
	bytes = (double)e.blocks * (double)page;

	/* the tier, and the prefix stored in it */
	snprintf(rc.redis.seeds, sizeof(rc.redis.seeds), "%s", seeds);
	/*
	 * Generous: a 128 MiB batch on a loaded 2-core machine (three redis-server, the worker
	 * and the benchmark on it) once waited more than 5 s for a read and failed the suite.
	 */
	rc.redis.timeout_ms = 30000;
	rc.max_queued_bytes = (uint64_t)bytes + (64u << 20);
	ret = kvmm_remote_create(&rc, &e.r);
	if (ret)
		goto out;
	{
		struct kvmm_remote_req *req = make_req(&e);

		if (!req) {
			ret = -ENOMEM;
			goto out;
		}
		for (b = 0; b < e.blocks && !ret; b++)
			ret = kvmm_remote_store(
				e.r, req->blk[b].key, &req->blk[b].want,
				kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(src, b)));
		kvmm_remote_req_free(req);
		kvmm_remote_flush(e.r);
		if (ret)
			goto out;
	}
	for (uint32_t r = 0; r < rounds; r++) {
		int64_t t = remote_fetch(&e, dst);

		if (t < 0) {
			ret = (int)t;
			bench_note("remote: the fetch failed (%s): is the cluster up?",
				   strerror((int)-t));
			goto out;
		}
		vr[r] = (double)t / 1e6;
	}
	if (memcmp(kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(src, e.blocks - 1)),
		   kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(dst, e.blocks - 1)), page)) {
		ret = -EIO;
		goto out;
	}
	/* memcpy of the same bytes, frame to frame */
	for (uint32_t r = 0; r < rounds; r++) {
		uint64_t t0 = bench_now_ns();

		for (b = 0; b < e.blocks; b++)
			memcpy(kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(dst, b)),
			       kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(src, b)), page);
		vm[r] = (double)(bench_now_ns() - t0) / 1e6;
	}
	/* the NVMe tier: the same blocks swapped out to an O_DIRECT file and faulted back */
	{
		const char *dir = getenv("KVMM_BENCH_DIR");
		struct kvmm_swap_tier_params p = {
			.tier = 2, .priority = 5, .size = page * (e.blocks + 8), .queue_depth = 32};

		snprintf(path, sizeof(path), "%s/kvmm-bench-remote.swap",
			 dir && *dir ? dir : "/var/tmp");
		unlink(path);
		p.path = path;
		ret = kvmm_swapon(e.pool, &kvmm_swap_nvme_ops, &p);
		if (ret)
			goto out;
		for (uint32_t r = 0; r < rounds && !ret; r++) {
			uint64_t t0;
			int n = kvmm_mm_seq_swap_out(src, 0, e.blocks);

			if (n != (int)e.blocks) {
				ret = n < 0 ? n : -EIO;
				break;
			}
			t0 = bench_now_ns();
			n = kvmm_mm_seq_fault(src, 0, e.blocks);
			vn[r] = (double)(bench_now_ns() - t0) / 1e6;
			if (n != (int)e.blocks)
				ret = n < 0 ? n : -EIO;
		}
		if (ret) {
			unlink(path);
			goto out;
		}
	}
	{
		double rm = bench_median(vr, rounds), nv = bench_median(vn, rounds),
		       mc = bench_median(vm, rounds);
		char name[96];

		snprintf(name, sizeof(name), "remote: %u-token prefix (%u pages) from the cluster",
			 tokens, e.blocks);
		bench_report(name, rm, "ms", "the same from the NVMe tier", nv);
		bench_report("remote: the same prefix", rm, "ms", "memcpy of the same bytes", mc);
		bench_note(
			"remote: %.0f MiB in %u pages of %llu KiB (16 layers x 8 KV heads x 64 "
			"dims fp16), cluster %s; %.2f GB/s from the cluster, %.2f GB/s from NVMe",
			bytes / (1 << 20), e.blocks, (unsigned long long)(page >> 10),
			cl.seeds[0] ? "of 3 local redis-server masters" : seeds, bytes / (rm * 1e6),
			bytes / (nv * 1e6));
		if (have_engine()) {
			/* the NVMe tier is still on: the short prefix goes through it again */
			ret = recompute_rows(&e, src, dst, rounds);
		} else {
			bench_note("remote: recompute not measured: no /usr/bin/python3 with torch "
				   "(kvmm.llm's engine), or KVMM_BENCH_PREFILL=0");
		}
		unlink(path);
	}
out:
	if (e.r)
		kvmm_remote_destroy(e.r);
	if (e.pool)
		kvmm_pool_destroy(e.pool);
	free(e.tokens);
	rcluster_stop(&cl);
	return ret;
}
