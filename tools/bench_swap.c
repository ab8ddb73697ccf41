// SPDX-License-Identifier: MIT
/*
 * tools/bench_swap.c - kvmm-bench suite "swap": swap-out and swap-in bandwidth of each tier
 * beside its baseline measured in the same run, and an oversubscribed decode replay.
 *
 * In-process, on the core library (no daemon): a pool over anonymous memory, one sequence of
 * a whole pool's worth of random pages, swapped out with kvmm_mm_seq_swap_out() and brought
 * back with kvmm_mm_seq_fault(), timed, best of a few rounds.
 *   - host tier against memcpy of the same bytes (target: >= 80 % of memcpy);
 *   - NVMe tier (a swap file in the temporary directory, O_DIRECT, io_uring, queue depth 32)
 *     against fio on the same file system with the same block size (= page size) and depth:
 *     a sequential write, then a sequential read, ioengine=io_uring, direct=1, parsed from
 *     --output-format=json (target: >= 90 % of fio).  Without fio that row says skipped.
 *   - the replay: sequences that together hold twice the pool, decoded in batches that fit;
 *     each batch runs a quantum of steps (pin - read every page as attention would - append
 *     one token - unpin) and is then descheduled.  Bringing a batch in (PIN's fault-in, room
 *     made by kvmm_shrink() with the batch held) is what the oversubscribed run pays; the
 *     baseline is the same workload on a pool big enough for all (target: >= 90 %).
 * The temporary directory is $TMPDIR (default /tmp); --quick shrinks every size.  Targets are
 * printed, never asserted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "tools/bench.h"

#define QD 32

struct sw_env {
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	struct kvmm_aspace *as;
	struct kvmm_fmt fmt;
};

static int env_init(struct sw_env *e, uint64_t page, uint32_t nframes)
{
	struct kvmm_pool_params p = {.page_size = page, .nframes = nframes};
	int ret;

	memset(e, 0, sizeof(*e));
	ret = kvmm_pool_create(&p, &e->pool);
	if (!ret)
		ret = kvmm_ns_create(e->pool, "bench", 0, 0, &e->ns);
	/* layers x 8 heads x 128 dims of fp16, K and V: 4 KiB per layer, 16 tokens per page */
	if (!ret)
		ret = kvmm_fmt_init(&e->fmt, (uint32_t)max_t(uint64_t, page / 65536, 1), 8, 128,
				    KVMM_DTYPE_FP16, 0, page);
	if (!ret)
		ret = kvmm_aspace_create(e->pool, e->ns, &e->fmt, NULL, &e->as);
	return ret;
}

static void env_fini(struct sw_env *e)
{
	kvmm_pool_destroy(e->pool);
}

static void fill_random(void *p, size_t len, uint64_t seed)
{
	uint64_t *q = p, z = seed;
	size_t i;

	for (i = 0; i < len / 8; i++) {
		z += 0x9e3779b97f4a7c15ull;
		q[i] = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
	}
}

static struct kvmm_seq *mkseq(struct sw_env *e, uint32_t blocks)
{
	struct kvmm_seq *seq;

	if (kvmm_mm_seq_create(e->as, &seq))
		return NULL;
	if (kvmm_mm_seq_append(seq, blocks * e->fmt.tokens_per_page, NULL)) {
		kvmm_mm_seq_free(seq);
		return NULL;
	}
	return seq;
}

/* Best GB/s out and in of @rounds swap-out + fault-in trips of a whole sequence. */
static int tier_trip(struct sw_env *e, struct kvmm_seq *seq, int rounds, double *out_gbs,
		     double *in_gbs)
{
	double bytes = (double)seq->nblocks * (double)e->pool->page_size;
	int r;

	*out_gbs = *in_gbs = 0;
	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_now_ns(), t1, t2;
		int n = kvmm_mm_seq_swap_out(seq, 0, seq->nblocks);

		t1 = bench_now_ns();
		if (n != (int)seq->nblocks)
			return n < 0 ? n : -EIO;
		n = kvmm_mm_seq_fault(seq, 0, seq->nblocks);
		t2 = bench_now_ns();
		if (n != (int)seq->nblocks)
			return n < 0 ? n : -EIO;
		*out_gbs = max_t(double, *out_gbs, bytes / (double)(t1 - t0));
		*in_gbs = max_t(double, *in_gbs, bytes / (double)(t2 - t1));
	}
	return 0;
}

static double memcpy_gbs(size_t bytes, int rounds)
{
	char *a = malloc(bytes), *b = malloc(bytes);
	double best = 0;
	int r;

	if (!a || !b) {
		free(a);
		free(b);
		return 0;
	}
	fill_random(a, bytes, 1);
	memset(b, 0, bytes);
	for (r = 0; r < rounds + 1; r++) {
		uint64_t t0 = bench_now_ns();

		memcpy(b, a, bytes);
		bench_use_ptr(b);
		if (r) /* the first copy also faults b in */
			best = max_t(double, best, (double)bytes / (double)(bench_now_ns() - t0));
	}
	free(a);
	free(b);
	return best;
}

/* fio's bandwidth (bytes/ns = GB/s) of one job from its JSON, section "read" or "write". */
static double fio_bw(const char *json, const char *section)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), "\"%s\" : {", section);
	p = strstr(json, key);
	if (!p)
		return 0;
	p = strstr(p, "\"bw_bytes\"");
	if (!p || !(p = strchr(p, ':')))
		return 0;
	return strtod(p + 1, NULL) / 1e9;
}

/* Run fio (write then read, sequential, O_DIRECT, io_uring); 0 GB/s when it is missing. */
static int run_fio(const char *dir, uint64_t bs, uint64_t size, double *wr, double *rd)
{
	char cmd[1024], *buf;
	size_t len = 0, cap = 1 << 20;
	FILE *f;
	int st;

	*wr = *rd = 0;
	if (system("fio --version >/dev/null 2>&1"))
		return -ENOENT;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	snprintf(cmd, sizeof(cmd),
		 "fio --output-format=json --ioengine=io_uring --direct=1 --iodepth=%d "
		 "--bs=%llu --size=%llu --filename=%s/fio.dat --name=w --rw=write "
		 "--name=r --stonewall --rw=read 2>/dev/null",
		 QD, (unsigned long long)bs, (unsigned long long)size, dir);
	f = popen(cmd, "r");
	if (!f) {
		free(buf);
		return -errno;
	}
	while (len < cap - 1) {
		size_t n = fread(buf + len, 1, cap - 1 - len, f);

		if (!n)
			break;
		len += n;
	}
	buf[len] = '\0';
	st = pclose(f);
	snprintf(cmd, sizeof(cmd), "%s/fio.dat", dir);
	unlink(cmd);
	if (st) {
		free(buf);
		return -EIO;
	}
	/* job "w" comes first: its write section; job "r" second: its read section */
	*wr = fio_bw(buf, "write");
	{
		const char *r = strstr(buf, "\"jobname\" : \"r\"");

		*rd = r ? fio_bw(r, "read") : 0;
	}
	free(buf);
	return 0;
}

static int bench_tiers(const struct bench_opts *o, const char *dir)
{
	uint64_t page = o->quick ? (256u << 10) : (1u << 20);
	uint32_t nframes = o->quick ? 64 : 256, blocks = nframes - 8;
	int rounds = o->quick ? 2 : 4, ret;
	double out, in, mc, fw, fr;
	char path[512];
	struct sw_env e;
	struct kvmm_seq *seq;
	uint32_t b;

	mc = memcpy_gbs((size_t)blocks * page, rounds);

	/* host tier */
	ret = env_init(&e, page, nframes);
	if (ret)
		return ret;
	{
		struct kvmm_swap_tier_params p = {
			.tier = 1, .priority = 10, .size = page * nframes};

		ret = kvmm_swapon(e.pool, &kvmm_swap_host_ops, &p);
	}
	seq = ret ? NULL : mkseq(&e, blocks);
	if (!seq) {
		env_fini(&e);
		return ret ? ret : -ENOMEM;
	}
	for (b = 0; b < blocks; b++)
		fill_random(kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(seq, b)), page, b);
	ret = tier_trip(&e, seq, rounds, &out, &in);
	env_fini(&e);
	if (ret)
		return ret;
	bench_report("swap host tier: out", out, "GB/s", "memcpy", mc);
	bench_report("swap host tier: in", in, "GB/s", "memcpy", mc);
	bench_target("host tier swap-out >= 80% of memcpy", out / mc * 100, 80, false, "%");
	bench_target("host tier swap-in >= 80% of memcpy", in / mc * 100, 80, false, "%");

	/* NVMe tier: a swap file beside fio's file */
	ret = env_init(&e, page, nframes);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/swapfile", dir);
	{
		struct kvmm_swap_tier_params p = {.tier = 2,
						  .priority = 5,
						  .size = page * nframes,
						  .path = path,
						  .queue_depth = QD};

		ret = kvmm_swapon(e.pool, &kvmm_swap_nvme_ops, &p);
	}
	seq = ret ? NULL : mkseq(&e, blocks);
	if (!seq) {
		fprintf(stderr, "kvmm-bench swap: NVMe tier in %s: %s\n", dir,
			strerror(ret ? -ret : ENOMEM));
		env_fini(&e);
		unlink(path);
		return 0;
	}
	for (b = 0; b < blocks; b++)
		fill_random(kvmm_pool_frame_addr(e.pool, kvmm_mm_seq_frame(seq, b)), page, b);
	ret = tier_trip(&e, seq, rounds, &out, &in);
	env_fini(&e);
	unlink(path);
	if (ret)
		return ret;
	if (run_fio(dir, page, (uint64_t)blocks * page, &fw, &fr) || !fw || !fr) {
		printf("fio: not available (make deps installs it): NVMe rows without baseline "
		       "(skipped)\n");
		bench_report("swap nvme tier: out (fio skipped)", out, "GB/s", "fio write", 0);
		bench_report("swap nvme tier: in (fio skipped)", in, "GB/s", "fio read", 0);
		return 0;
	}
	bench_report("swap nvme tier: out", out, "GB/s", "fio write", fw);
	bench_report("swap nvme tier: in", in, "GB/s", "fio read", fr);
	bench_target("nvme tier swap-out >= 90% of fio", out / fw * 100, 90, false, "%");
	bench_target("nvme tier swap-in >= 90% of fio", in / fr * 100, 90, false, "%");
	return 0;
}

/* ---- oversubscribed decode replay ---------------------------------------------------------- */

struct replay {
	uint32_t nseqs, blocks, batch, quantum, turns;
};

/* What PIN does in kvmmd (session.c): make room holding the batch, fault in, then pin. */
static int bring_in(struct sw_env *e, struct kvmm_seq **b, uint32_t n)
{
	uint32_t i, k, need = 0;
	int ret;

	for (i = 0; i < n; i++)
		need += kvmm_mm_seq_nr_swapped(b[i]);
	if (need && kvmm_pool_nr_free(e->pool) < need + e->pool->wmark_min) {
		for (i = 0; i < n; i++)
			for (k = 0; k < b[i]->nblocks; k++)
				if (kvmm_mm_seq_frame(b[i], k) != KVMM_FRAME_NONE)
					kvmm_frame_to_page(e->pool, kvmm_mm_seq_frame(b[i], k))
						->pincount++;
		kvmm_shrink(e->pool, need + e->pool->wmark_min - kvmm_pool_nr_free(e->pool), 0);
		for (i = 0; i < n; i++)
			for (k = 0; k < b[i]->nblocks; k++)
				if (kvmm_mm_seq_frame(b[i], k) != KVMM_FRAME_NONE)
					kvmm_frame_to_page(e->pool, kvmm_mm_seq_frame(b[i], k))
						->pincount--;
	}
	for (i = 0; i < n; i++) {
		ret = kvmm_mm_seq_fault(b[i], 0, b[i]->nblocks);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static void pin_batch(struct sw_env *e, struct kvmm_seq **b, uint32_t n, int d)
{
	uint32_t i, k;

	for (i = 0; i < n; i++)
		for (k = 0; k < b[i]->nblocks; k++)
			kvmm_frame_to_page(e->pool, kvmm_mm_seq_frame(b[i], k))->pincount += d;
}

/* Tokens per second of the replay on a pool of @nframes (with a host tier when @swap). */
static double replay_run(const struct replay *r, uint64_t page, uint32_t nframes, bool swap)
{
	struct kvmm_seq **seqs;
	struct sw_env e;
	uint64_t t0, tokens = 0, sum = 0;
	uint32_t i, t, s, k, q;
	double tps = 0;

	if (env_init(&e, page, nframes))
		return 0;
	if (swap) {
		struct kvmm_swap_tier_params p = {.tier = 1,
						  .priority = 10,
						  .size = page * (uint64_t)r->nseqs *
							  (r->blocks + 16)};

		if (kvmm_swapon(e.pool, &kvmm_swap_host_ops, &p))
			goto out;
	}
	seqs = calloc(r->nseqs, sizeof(*seqs));
	if (!seqs)
		goto out;
	for (i = 0; i < r->nseqs; i++) {
		seqs[i] = mkseq(&e, r->blocks);
		if (!seqs[i])
			goto out_seqs;
	}
	t0 = bench_now_ns();
	for (t = 0; t < r->turns; t++) {
		struct kvmm_seq **b = seqs + (size_t)(t % (r->nseqs / r->batch)) * r->batch;

		if (bring_in(&e, b, r->batch))
			goto out_seqs;
		/* the batch stays pinned for its quantum, as an engine keeps its running batch */
		pin_batch(&e, b, r->batch, 1);
		for (q = 0; q < r->quantum; q++) {
			/* the step's attention reads every page of the batch once */
			for (s = 0; s < r->batch; s++)
				for (k = 0; k < b[s]->nblocks; k++) {
					const uint64_t *p = kvmm_pool_frame_addr(
						e.pool, kvmm_mm_seq_frame(b[s], k));
					size_t w;

					for (w = 0; w < page / 8; w += 8)
						sum += p[w];
				}
			/* each sequence of the batch decodes one token (a new page is pinned too) */
			for (s = 0; s < r->batch; s++) {
				uint32_t nb = b[s]->nblocks;

				if (kvmm_mm_seq_append(b[s], 1, NULL))
					goto out_seqs;
				if (b[s]->nblocks != nb)
					kvmm_frame_to_page(e.pool, kvmm_mm_seq_frame(b[s], nb))
						->pincount++;
				tokens++;
			}
		}
		pin_batch(&e, b, r->batch, -1);
	}
	bench_use(sum);
	tps = (double)tokens / ((double)(bench_now_ns() - t0) / 1e9);
out_seqs:
	free(seqs);
out:
	env_fini(&e);
	return tps;
}

static int bench_replay(const struct bench_opts *o)
{
	uint64_t page = 64u << 10;
	/*
	 * 16 sequences of 32 pages (16 tokens each) = 512 pages over a 256-frame pool; batches
	 * of 4 (128 pages) run a quantum of 16 steps each turn: one new page per sequence a turn.
	 */
	struct replay r = {
		.nseqs = 16, .blocks = 32, .batch = 4, .quantum = 16, .turns = o->quick ? 16 : 32};
	uint32_t grow = r.turns / (r.nseqs / r.batch) + 2, all = r.nseqs * (r.blocks + grow);
	double over, full;

	full = replay_run(&r, page, all + all / 8, false);
	over = replay_run(&r, page, r.nseqs * r.blocks / 2, true);
	if (!full || !over) {
		fprintf(stderr, "kvmm-bench swap: the replay failed\n");
		return -EIO;
	}
	bench_report("replay 2x oversubscribed (host tier)", over, "tok/s", "pool holds all", full);
	bench_target("oversubscribed replay >= 90% of unconstrained", over / full * 100, 90, false,
		     "%");
	return 0;
}

int bench_suite_swap(const struct bench_opts *o)
{
	const char *tmp = getenv("TMPDIR");
	char dir[256];
	int ret;

	snprintf(dir, sizeof(dir), "%s/kvmm-bench-swap.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "kvmm-bench swap: mkdtemp %s: %s\n", dir, strerror(errno));
		return -errno;
	}
	ret = bench_tiers(o, dir);
	if (!ret)
		ret = bench_replay(o);
	rmdir(dir);
	if (ret)
		fprintf(stderr, "kvmm-bench swap: %s\n", strerror(-ret));
	return ret;
}
