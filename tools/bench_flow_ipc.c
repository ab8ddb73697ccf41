// SPDX-License-Identifier: MIT
/*
 * tools/bench_flow_ipc.c - kvmm-bench-ipc suite "flow": an engine's request flow from client
 * processes of kvmmd, beside the same flow on the core library in process, measured in the
 * same run (kvmm-bench's flow suite, bench_flow.c, started as `kvmm-bench --json flow`:
 * this program links libkvmm only, Documentation/userspace-api/layering.md).
 *
 * The workload is bench.h's FLOW_*: 1024-token prompts, 512 shared by all requests and 512
 * of their own, 16-token pages, 8192 frames of 4 KiB, so the pool is soon full of cached
 * pages and every request's allocations reclaim.  A request: create a sequence, look the
 * prompt up, append what missed (the daemon allocates the frames), seal, free.
 *
 *   sync   each step is one call of libkvmm's synchronous API (kvmm_seq_create,
 *          kvmm_prefix_lookup, kvmm_seq_append, kvmm_seal, kvmm_seq_free)
 *   async  FLOW_BATCH requests at a time through kvmm_submit / kvmm_complete: their
 *          creates, then their lookups, then append + seal + free of all of them, one
 *          submission (and one wait) each
 *   compound_sync   the compound ops: kvmm_seq_prompt (with the block table), then
 *          kvmm_seq_seal_free: two calls per request
 *   compound_async  a step of FLOW_BATCH requests in one submission: the previous step's
 *          SEQ_SEAL_FREEs and this step's SEQ_PROMPTs behind one doorbell, one wait
 *
 * each from 1, 2, 4 and 8 client processes started together, each running for the same
 * time, their pool pages not write-protected (the control plane alone); then one client with
 * libkvmm's default protection (flow.MODE.1c.wprotect, against flow.MODE.1c: what issue 26's
 * read-only pages cost the flow).  A row is the sum of the processes' rates, its baseline the
 * in-process rate (the median
 * of runs before, between and after the client runs).  Targets (issue 25): sync from one process
 * >= 0.5x in process, async >= 0.8x, 2 processes >= 1.8x one, 8 >= 2 (no collapse).
 * $KVMM_BENCH names kvmm-bench (default ./tools/kvmm-bench), $KVMM_KVMMD the daemon.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "runtime/kvmm.h"

#define FLOW_BATCH 16
#define FLOW_MAX_CLIENTS 8
/* the second namespace of the 2ns rows: clients of two namespaces share no pool lock */
#define FLOW_NS2 "bench2"

static const struct kvmm_format flow_fmt = FLOW_FORMAT;

struct flow_result {
	uint64_t reqs, ns;
	int err;
};

static int flow_sync(kvmm_client_t *c, uint32_t *tok, uint32_t client, uint32_t req)
{
	uint64_t s, hit = 0;
	int ret;

	bench_flow_prompt(tok, client, req);
	ret = kvmm_seq_create(c, 0, &s);
	if (ret)
		return ret;
	ret = kvmm_prefix_lookup(c, s, tok, FLOW_TOKENS, &hit);
	if (!ret)
		ret = kvmm_seq_append(c, s, tok + hit, (uint32_t)(FLOW_TOKENS - hit), NULL);
	if (!ret)
		ret = kvmm_seal(c, s, 0, 0);
	if (!ret)
		return kvmm_seq_free(c, s);
	kvmm_seq_free(c, s);
	return ret;
}

/* Submit n entries, reap their n completions; the first failed entry's res, else 0. */
static int flow_round(kvmm_client_t *c, struct kvmm_sqe *sqe, struct kvmm_cqe *cqe, unsigned int n)
{
	unsigned int got = 0;
	int ret = kvmm_submit(c, sqe, n);

	if (ret < 0)
		return ret;
	if ((unsigned int)ret != n)
		return -EAGAIN;
	while (got < n) {
		ret = kvmm_complete(c, cqe + got, n - got, n - got);
		if (ret <= 0)
			return ret ? ret : -EIO;
		got += (unsigned int)ret;
	}
	for (unsigned int i = 0; i < n; i++)
		if (cqe[i].res)
			return cqe[i].res;
	return 0;
}

static int flow_async(kvmm_client_t *c, uint32_t (*tok)[FLOW_TOKENS], uint32_t client, uint32_t req)
{
	struct kvmm_sqe sqe[3 * FLOW_BATCH];
	struct kvmm_cqe cqe[3 * FLOW_BATCH];
	uint64_t seq[FLOW_BATCH], hit[FLOW_BATCH];
	int ret;

	for (unsigned int i = 0; i < FLOW_BATCH; i++) {
		bench_flow_prompt(tok[i], client, req + i);
		sqe[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_CREATE, .user_data = i};
	}
	ret = flow_round(c, sqe, cqe, FLOW_BATCH);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < FLOW_BATCH; i++) {
		seq[cqe[i].user_data] = cqe[i].seq;
		sqe[i] = (struct kvmm_sqe){
			.op = KVMM_SQE_PREFIX_LOOKUP, .nr = FLOW_TOKENS, .user_data = i};
	}
	for (unsigned int i = 0; i < FLOW_BATCH; i++) {
		sqe[i].seq = seq[i];
		sqe[i].data = tok[i];
	}
	ret = flow_round(c, sqe, cqe, FLOW_BATCH);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < FLOW_BATCH; i++)
		hit[cqe[i].user_data] = cqe[i].nr_tokens;
	for (unsigned int i = 0; i < FLOW_BATCH; i++) {
		sqe[3 * i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
					       .seq = seq[i],
					       .nr = (uint32_t)(FLOW_TOKENS - hit[i]),
					       .data = tok[i] + hit[i]};
		sqe[3 * i + 1] = (struct kvmm_sqe){.op = KVMM_SQE_SEAL, .seq = seq[i]};
		sqe[3 * i + 2] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_FREE, .seq = seq[i]};
	}
	return flow_round(c, sqe, cqe, 3 * FLOW_BATCH);
}

/* The same request in the compound ops: kvmm_seq_prompt, then kvmm_seq_seal_free. */
static int flow_sync_compound(kvmm_client_t *c, uint32_t *tok, uint32_t client, uint32_t req)
{
	int32_t table[FLOW_TOKENS / FLOW_TPP];
	uint64_t s, hit;
	int ret;

	bench_flow_prompt(tok, client, req);
	ret = kvmm_seq_prompt(c, tok, FLOW_TOKENS, 0, &s, &hit, table, FLOW_TOKENS / FLOW_TPP);
	if (ret)
		return ret;
	bench_use((uint64_t)table[0] + hit);
	return kvmm_seq_seal_free(c, s, 0, 0);
}

/*
 * FLOW_BATCH requests per step, the whole step in one submission: the previous step's
 * SEQ_SEAL_FREEs and this step's SEQ_PROMPTs behind one doorbell, then one wait for all.
 * @seq carries the step's sequences to the next call (0: none yet).
 */
static int flow_async_compound(kvmm_client_t *c, uint32_t (*tok)[FLOW_TOKENS], uint32_t client,
			       uint32_t req, uint64_t *seq)
{
	struct kvmm_sqe sqe[2 * FLOW_BATCH];
	struct kvmm_cqe cqe[2 * FLOW_BATCH];
	unsigned int n = 0;
	int ret;

	for (unsigned int i = 0; i < FLOW_BATCH; i++)
		if (seq[i])
			sqe[n++] = (struct kvmm_sqe){
				.op = KVMM_SQE_SEQ_SEAL_FREE, .seq = seq[i], .user_data = ~0ull};
	for (unsigned int i = 0; i < FLOW_BATCH; i++) {
		bench_flow_prompt(tok[i], client, req + i);
		sqe[n++] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_PROMPT,
					     .nr = FLOW_TOKENS,
					     .data = tok[i],
					     .user_data = i};
	}
	ret = flow_round(c, sqe, cqe, n);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < n; i++)
		if (cqe[i].user_data < FLOW_BATCH)
			seq[cqe[i].user_data] = cqe[i].seq;
	return 0;
}

enum flow_mode {
	FLOW_SYNC,
	FLOW_ASYNC,
	FLOW_SYNC_COMPOUND,
	FLOW_ASYNC_COMPOUND,
	FLOW_MODES
};

static const char *const flow_mode_name[FLOW_MODES] = {"sync", "async", "compound_sync",
						       "compound_async"};

/* One request (or FLOW_BATCH of them, returned in *done) in @mode. */
static int flow_step(kvmm_client_t *c, enum flow_mode mode, uint32_t (*tok)[FLOW_TOKENS],
		     uint32_t client, uint32_t req, uint64_t *seq, unsigned int *done)
{
	switch (mode) {
	case FLOW_SYNC:
		*done = 1;
		return flow_sync(c, tok[0], client, req);
	case FLOW_ASYNC:
		*done = FLOW_BATCH;
		return flow_async(c, tok, client, req);
	case FLOW_SYNC_COMPOUND:
		*done = 1;
		return flow_sync_compound(c, tok[0], client, req);
	default:
		*done = FLOW_BATCH;
		return flow_async_compound(c, tok, client, req, seq);
	}
}

/*
 * One client process: attach, warm up, wait for the start, run @dur_ns, report, exit.  The
 * pool's pages are write-protected only with @protect: the mode rows measure the control
 * plane; the wprotect rows what the protection adds to it (libkvmm.md, "Read-only pages").
 */
static void flow_client(const char *sock, const char *ns, uint32_t idx, enum flow_mode mode,
			uint64_t dur_ns, bool protect, int go_fd, int ready_fd, int res_fd)
{
	static const struct kvmm_attach_opts unprotected = {.flags = KVMM_ATTACH_NO_WPROTECT};
	static uint32_t tok[FLOW_BATCH][FLOW_TOKENS];
	uint64_t seq[FLOW_BATCH] = {0}, t0;
	struct flow_result r = {0};
	unsigned int done = 0;
	kvmm_client_t *c;
	uint32_t req = 0;
	char b = 0;

	r.err = kvmm_attach_ex(sock, ns, &flow_fmt, protect ? NULL : &unprotected, &c);
	for (int i = 0; !r.err && i < 4; i++, req += done)
		r.err = flow_step(c, mode, tok, idx, req, seq, &done);
	if (write(ready_fd, &b, 1) != 1 || read(go_fd, &b, 1) < 0)
		r.err = r.err ? r.err : -EIO;
	t0 = bench_now_ns();
	while (!r.err && (r.ns = bench_now_ns() - t0) < dur_ns) {
		r.err = flow_step(c, mode, tok, idx, req, seq, &done);
		req += done;
		r.reqs += done;
	}
	if (write(res_fd, &r, sizeof(r)) != sizeof(r))
		_exit(1);
	if (!r.err)
		kvmm_detach(c);
	_exit(0);
}

/*
 * @n processes at once for @dur_ns: the sum of their rates in requests/s, or a -errno.  With
 * @two_ns every other process attaches to the second namespace (FLOW_NS2).
 */
static double flow_clients_ns(const char *sock, unsigned int n, enum flow_mode mode,
			      uint64_t dur_ns, bool protect, bool two_ns)
{
	int go[2], ready[2], res[2];
	pid_t pids[FLOW_MAX_CLIENTS];
	double rate = 0;
	int err = 0;
	char b;

	if (pipe(go) || pipe(ready) || pipe(res))
		return -errno;
	for (unsigned int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(go[1]);
			flow_client(sock, two_ns && (i & 1) ? FLOW_NS2 : "bench", i, mode, dur_ns,
				    protect, go[0], ready[1], res[1]);
		}
	}
	close(go[0]);
	close(ready[1]);
	close(res[1]);
	for (unsigned int i = 0; i < n; i++)
		if (read(ready[0], &b, 1) != 1)
			err = -EIO;
	close(go[1]); /* all ready: EOF on go starts every one of them */
	for (unsigned int i = 0; i < n; i++) {
		struct flow_result r;

		if (read(res[0], &r, sizeof(r)) != sizeof(r)) {
			err = err ? err : -EIO;
			continue;
		}
		if (r.err) {
			fprintf(stderr, "flow: a %s client failed: %s\n", flow_mode_name[mode],
				kvmm_strerror(r.err));
			err = err ? err : r.err;
		}
		if (r.ns)
			rate += (double)r.reqs * 1e9 / (double)r.ns;
	}
	for (unsigned int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
	close(ready[0]);
	close(res[0]);
	return err ? err : rate;
}

static double flow_clients(const char *sock, unsigned int n, enum flow_mode mode, uint64_t dur_ns,
			   bool protect)
{
	return flow_clients_ns(sock, n, mode, dur_ns, protect, false);
}

/* The in-process rate: `kvmm-bench --json [--quick] flow`, its flow.inproc_rate row. */
static double flow_inproc(const struct bench_opts *o)
{
	const char *bin = getenv("KVMM_BENCH");
	static const char key[] = "\"name\": \"flow.inproc_rate\", \"value\": ";
	char cmd[512], buf[8192], *p;
	size_t len;
	FILE *f;

	if (!bin || !bin[0])
		bin = "./tools/kvmm-bench";
	if (access(bin, X_OK)) {
		fprintf(stderr, "flow: %s not built (run from the top of the build tree)\n", bin);
		return -ENOENT;
	}
	/* its notes (stderr with --json) are this suite's to print */
	snprintf(cmd, sizeof(cmd), "'%s' --json %s flow 2>/dev/null", bin,
		 o->quick ? "--quick" : "");
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	buf[len] = 0;
	if (pclose(f) != 0 || !(p = strstr(buf, key))) {
		fprintf(stderr, "flow: %s gave no in-process rate\n", cmd);
		return -EIO;
	}
	return strtod(p + sizeof(key) - 1, NULL);
}

/*
 * $KVMM_FLOW_SOLO="MODE CLIENTS SECONDS": that row alone, for a profiler to watch kvmmd and
 * the clients (no in-process baseline, no targets).  CLIENTS may be a list, "1,2,4,8": the
 * rows one after the other on one daemon, as the full suite runs them.
 */
static int flow_solo(const char *spec)
{
	char mode[32], list[64], name[96], page[16], frames[16], *tok, *save = NULL;
	struct bench_kvmmd d = {0};
	double secs, rate;
	int m, err = 0;
	bool two_ns, wprotect;

	if (sscanf(spec, "%31s %63s %lf", mode, list, &secs) != 3 || secs <= 0) {
		fprintf(stderr,
			"flow: KVMM_FLOW_SOLO=\"%s\": want \"MODE CLIENTS[,CLIENTS...] SECONDS\"\n",
			spec);
		return -EINVAL;
	}
	for (m = 0; m < FLOW_MODES && strcmp(mode, flow_mode_name[m]); m++)
		;
	if (m == FLOW_MODES) {
		fprintf(stderr, "flow: KVMM_FLOW_SOLO: no mode \"%s\"\n", mode);
		return -EINVAL;
	}
	snprintf(page, sizeof(page), "%u", FLOW_PAGE_SIZE);
	snprintf(frames, sizeof(frames), "%u", FLOW_FRAMES);
	/* $KVMM_FLOW_NS=2: the clients in two namespaces, alternating (the 2ns rows) */
	two_ns = getenv("KVMM_FLOW_NS") && !strcmp(getenv("KVMM_FLOW_NS"), "2");
	/* $KVMM_FLOW_WPROTECT=1: the clients' pool pages write-protected (the wprotect rows) */
	wprotect = getenv("KVMM_FLOW_WPROTECT") && !strcmp(getenv("KVMM_FLOW_WPROTECT"), "1");
	d.ns2 = FLOW_NS2;
	err = bench_kvmmd_start(&d, page, frames);
	if (err) {
		fprintf(stderr, "flow: kvmmd did not start: %s\n", strerror(-err));
		bench_kvmmd_stop(&d);
		return err;
	}
	fprintf(stderr, "flow: kvmmd pid %d\n", (int)d.pid);
	for (tok = strtok_r(list, ",", &save); tok && !err; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long n = strtoul(tok, &end, 10);

		if (*end || !n || n > FLOW_MAX_CLIENTS) {
			fprintf(stderr, "flow: KVMM_FLOW_SOLO: \"%s\" is not 1..%u clients\n", tok,
				FLOW_MAX_CLIENTS);
			err = -EINVAL;
			break;
		}
		rate = flow_clients_ns(d.sock, (unsigned int)n, (enum flow_mode)m,
				       (uint64_t)(secs * 1e9), wprotect, two_ns);
		if (rate < 0) {
			err = (int)rate;
			break;
		}
		snprintf(name, sizeof(name), "flow.%s.%luc%s%s", flow_mode_name[m], n,
			 two_ns ? ".2ns" : "", wprotect ? ".wprotect" : "");
		bench_report(name, rate, "requests/s", "", 0);
	}
	bench_kvmmd_stop(&d);
	return err;
}

int bench_suite_flow_ipc(const struct bench_opts *o)
{
	static const unsigned int nr[] = {1, 2, 4, 8};
	uint64_t dur = o->quick ? 250000000ull : 1000000000ull;
	double rate[FLOW_MODES][4], inp[FLOW_MODES + 1], in, wp[FLOW_MODES] = {0};
	double ns2[FLOW_MODES] = {0};
	struct bench_kvmmd d = {0};
	char name[96], page[16], frames[16];
	int err;

	if (getenv("KVMM_FLOW_SOLO"))
		return flow_solo(getenv("KVMM_FLOW_SOLO"));
	snprintf(page, sizeof(page), "%u", FLOW_PAGE_SIZE);
	snprintf(frames, sizeof(frames), "%u", FLOW_FRAMES);
	d.ns2 = FLOW_NS2;
	err = bench_kvmmd_start(&d, page, frames);
	if (err == -ENOENT)
		return 0;
	if (err) {
		fprintf(stderr, "flow: kvmmd did not start: %s\n", strerror(-err));
		bench_kvmmd_stop(&d);
		return err;
	}
	/* in process before each mode and after the last (a shared machine drifts) */
	for (int m = 0; m < FLOW_MODES; m++) {
		inp[m] = flow_inproc(o);
		if (inp[m] < 0) {
			bench_kvmmd_stop(&d);
			return (int)inp[m];
		}
		for (unsigned int i = 0; i < 4; i++) {
			rate[m][i] = flow_clients(d.sock, nr[i], (enum flow_mode)m, dur, false);
			if (rate[m][i] < 0) {
				bench_kvmmd_stop(&d);
				return (int)rate[m][i];
			}
		}
		/* one client again, its pool pages write-protected (libkvmm's default) */
		wp[m] = flow_clients(d.sock, 1, (enum flow_mode)m, dur, true);
		if (wp[m] < 0) {
			bench_kvmmd_stop(&d);
			return (int)wp[m];
		}
		/* two clients in two namespaces: what the ring workers run in parallel */
		ns2[m] = flow_clients_ns(d.sock, 2, (enum flow_mode)m, dur, false, true);
		if (ns2[m] < 0) {
			bench_kvmmd_stop(&d);
			return (int)ns2[m];
		}
	}
	bench_kvmmd_stop(&d);
	inp[FLOW_MODES] = flow_inproc(o);
	if (inp[FLOW_MODES] < 0)
		return (int)inp[FLOW_MODES];
	bench_note("flow: in process %.0f, %.0f, %.0f, %.0f and %.0f requests/s before each mode "
		   "and after the last (the median is the baseline); each client row sums its "
		   "processes' rates over %.2f s; async batches %u requests",
		   inp[0], inp[1], inp[2], inp[3], inp[4], (double)dur / 1e9, FLOW_BATCH);
	in = bench_median(inp, FLOW_MODES + 1);

	bench_report("flow.inproc_rate", in, "requests/s", "", 0);
	for (int m = 0; m < FLOW_MODES; m++)
		for (unsigned int i = 0; i < 4; i++) {
			snprintf(name, sizeof(name), "flow.%s.%uc", flow_mode_name[m], nr[i]);
			bench_report(name, rate[m][i], "requests/s", "flow.inproc_rate", in);
		}
	for (int m = 0; m < FLOW_MODES; m++) {
		char base[96];

		snprintf(base, sizeof(base), "flow.%s.1c", flow_mode_name[m]);
		snprintf(name, sizeof(name), "flow.%s.1c.wprotect", flow_mode_name[m]);
		bench_report(name, wp[m], "requests/s", base, rate[m][0]);
		snprintf(name, sizeof(name), "flow.%s.2c.2ns", flow_mode_name[m]);
		bench_report(name, ns2[m], "requests/s", base, rate[m][0]);
	}
	for (int m = 0; m < FLOW_MODES; m++) {
		bool async = m == FLOW_ASYNC || m == FLOW_ASYNC_COMPOUND;

		snprintf(name, sizeof(name), "flow %s, 1 client / in process", flow_mode_name[m]);
		bench_target(name, rate[m][0] / in, async ? 0.8 : 0.5, false, "x");
		snprintf(name, sizeof(name), "flow %s, 2 clients / 1 client", flow_mode_name[m]);
		bench_target(name, rate[m][1] / rate[m][0], 1.8, false, "x");
		snprintf(name, sizeof(name), "flow %s, 8 clients / 2 clients", flow_mode_name[m]);
		bench_target(name, rate[m][3] / rate[m][1], 1.0, false, "x");
	}
	return 0;
}
