// SPDX-License-Identifier: MIT
/*
 * tools/bench_ipc.c - kvmm-bench-ipc: what talking to kvmmd costs a client process, beside
 * the raw mechanisms measured in the same run. It starts ./kvmm/kvmmd (or $KVMM_KVMMD) in a
 * temporary directory, as the integration tests do, and measures from this process: one
 * synchronous operation's round trip over the socket (a PING), one engine step of 64
 * sequences appending a token each through the shared rings (and the same over the socket
 * only, $KVMM_NO_RINGS style), block tables read from the page-table mirror, and magazine
 * allocation per page (refills included, amortized). Baselines: SOCK_SEQPACKET ping-pong and
 * futex ping-pong in shared memory between two processes, each process blocking in the
 * kernel for its turn. Targets are printed, never asserted: magazine allocation <= 100 ns per
 * page, and a 64-sequence step <= 2x one futex round trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "bench.h"
#include "runtime/kvmm.h"

#define STEP_SEQS 64

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static const struct kvmm_format fmt = {
	.layers = 4, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};

int bench_kvmmd_start(struct bench_kvmmd *d, const char *page_size, const char *frames)
{
	char ns[64];
	const char *bin = getenv("KVMM_KVMMD"), *extra = getenv("KVMM_BENCH_CONFIG");
	char conf[128];
	int fd;

	if (!bin || !bin[0])
		bin = "./kvmm/kvmmd";
	if (access(bin, X_OK)) {
		bench_note("ipc: %s not built (run from the top of the build tree): skipped", bin);
		return -ENOENT;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/kvmm-bench.XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/kvmmd.sock", d->dir);
	snprintf(ns, sizeof(ns), "bench:%s", frames);
	snprintf(conf, sizeof(conf), "%s/kvmmd.conf", d->dir);
	fd = open(conf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	/* $KVMM_BENCH_CONFIG: kvmmd.conf lines for an experiment ("kswapd = no") */
	if (extra && dprintf(fd, "%s\n", extra) < 0) {
		close(fd);
		return -EIO;
	}
	close(fd);
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		char ns2[64], total[32];

		/* two namespaces of @frames each: a pool_size of both, so no overcommit */
		snprintf(ns2, sizeof(ns2), "%s:%s", d->ns2 ? d->ns2 : "", frames);
		snprintf(total, sizeof(total), "%llu", 2 * strtoull(frames, NULL, 10));
		if (d->ns2)
			execl(bin, bin, "--foreground", "--config", conf, "--socket", d->sock,
			      "--page-size", page_size, "--frames", total, "--namespace", ns,
			      "--namespace", ns2, (char *)NULL);
		else
			execl(bin, bin, "--foreground", "--config", conf, "--socket", d->sock,
			      "--page-size", page_size, "--frames", frames, "--namespace", ns,
			      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		kvmm_client_t *c;

		if (kvmm_attach(d->sock, "bench", &fmt, &c) == 0) {
			kvmm_detach(c);
			return 0;
		}
		sleep_ms(10);
	}
	return -ETIMEDOUT;
}

void bench_kvmmd_stop(struct bench_kvmmd *d)
{
	char path[160];

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	snprintf(path, sizeof(path), "%s/kvmmd.conf", d->dir);
	unlink(path);
	unlink(d->sock);
	rmdir(d->dir);
}

/* ---- baselines -------------------------------------------------------------------------- */

static double seqpacket_pingpong(unsigned int n)
{
	int sv[2];
	char b = 0;
	pid_t pid;
	uint64_t t0, t1;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 0;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		for (unsigned int i = 0; i < n + 1; i++)
			if (read(sv[1], &b, 1) != 1 || write(sv[1], &b, 1) != 1)
				_exit(1);
		_exit(0);
	}
	close(sv[1]);
	/* one warm-up exchange, then the timed ones */
	if (write(sv[0], &b, 1) != 1 || read(sv[0], &b, 1) != 1)
		return 0;
	t0 = bench_now_ns();
	for (unsigned int i = 0; i < n; i++)
		if (write(sv[0], &b, 1) != 1 || read(sv[0], &b, 1) != 1)
			break;
	t1 = bench_now_ns();
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return (double)(t1 - t0) / n;
}

static void futex_wait_for(uint32_t *w, uint32_t want)
{
	uint32_t v;

	while ((v = __atomic_load_n(w, __ATOMIC_ACQUIRE)) != want)
		syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}

/* Two processes take turns on one shared word, each sleeping in FUTEX_WAIT for its turn. */
static double futex_pingpong(unsigned int n)
{
	uint32_t *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;
	uint64_t t0, t1;

	if (w == MAP_FAILED)
		return 0;
	*w = 0;
	pid = fork();
	if (pid == 0) {
		for (uint32_t i = 0; i < n + 1; i++) {
			futex_wait_for(w, 2 * i + 1);
			__atomic_store_n(w, 2 * i + 2, __ATOMIC_RELEASE);
			syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
		}
		_exit(0);
	}
	t0 = 0;
	for (uint32_t i = 0; i < n + 1; i++) {
		if (i == 1)
			t0 = bench_now_ns(); /* the first exchange warms up */
		__atomic_store_n(w, 2 * i + 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
		futex_wait_for(w, 2 * i + 2);
	}
	t1 = bench_now_ns();
	waitpid(pid, NULL, 0);
	munmap(w, 4096);
	return (double)(t1 - t0) / n;
}

/* ---- kvmmd ---------------------------------------------------------------------------------- */

static double op_round_trip(kvmm_client_t *c, unsigned int n)
{
	uint64_t seq, t0, t1;

	/* a synchronous call over the socket: create + free would be two; time seq_truncate */
	if (kvmm_seq_create(c, 0, &seq))
		return 0;
	t0 = bench_now_ns();
	for (unsigned int i = 0; i < n; i++)
		kvmm_seq_truncate(c, seq, 0);
	t1 = bench_now_ns();
	kvmm_seq_free(c, seq);
	return (double)(t1 - t0) / n;
}

/* One engine step: 64 sequences append one token each; submit all, wait for all. */
static double step(kvmm_client_t *c, unsigned int steps)
{
	struct kvmm_sqe sqes[STEP_SEQS];
	struct kvmm_cqe cqes[STEP_SEQS];
	uint64_t seqs[STEP_SEQS], t0, t1;
	uint32_t tok[STEP_SEQS];
	unsigned int s;

	for (unsigned int i = 0; i < STEP_SEQS; i++) {
		if (kvmm_seq_create(c, 0, &seqs[i]))
			return 0;
		tok[i] = i;
	}
	t0 = 0;
	t1 = 0;
	for (s = 0; s < steps + 8; s++) {
		unsigned int got = 0;

		if (s == 8)
			t0 = bench_now_ns(); /* 8 warm-up steps */
		if (s % 256 == 255) {
			/* untimed: keep the sequences short, a steady state rather than a full pool */
			uint64_t p = bench_now_ns();

			for (unsigned int i = 0; i < STEP_SEQS; i++)
				kvmm_seq_truncate(c, seqs[i], 0);
			t1 += bench_now_ns() - p;
		}
		for (unsigned int i = 0; i < STEP_SEQS; i++)
			sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
						    .seq = seqs[i],
						    .nr = 1,
						    .data = &tok[i],
						    .user_data = i};
		if (kvmm_submit(c, sqes, STEP_SEQS) != STEP_SEQS)
			return 0;
		while (got < STEP_SEQS) {
			int r = kvmm_complete(c, cqes + got, STEP_SEQS - got, STEP_SEQS - got);

			if (r <= 0)
				return 0;
			got += (unsigned int)r;
		}
	}
	t1 = bench_now_ns() - t1;
	for (unsigned int i = 0; i < STEP_SEQS; i++)
		kvmm_seq_free(c, seqs[i]);
	return (double)(t1 - t0) / steps;
}

static double block_tables(kvmm_client_t *c, unsigned int n)
{
	static int32_t table[STEP_SEQS * 64];
	uint64_t seqs[STEP_SEQS], t0, t1;
	uint32_t tok[100] = {0};

	for (unsigned int i = 0; i < STEP_SEQS; i++)
		if (kvmm_seq_create(c, 0, &seqs[i]) || kvmm_seq_append(c, seqs[i], tok, 100, NULL))
			return 0;
	t0 = bench_now_ns();
	for (unsigned int i = 0; i < n; i++)
		kvmm_block_table(c, seqs, STEP_SEQS, table, 64);
	t1 = bench_now_ns();
	for (unsigned int i = 0; i < STEP_SEQS; i++)
		kvmm_seq_free(c, seqs[i]);
	return (double)(t1 - t0) / n;
}

/*
 * ns per frame taken from the magazine, everything timed: rounds of @batch frames taken
 * @per_call at a time and given back (one kvmm_mag_free), the first refill's round trip and
 * any wait for the daemon's top-up included.  The frames go back into the client's magazine,
 * which is how an engine that allocates and frees scratch pages uses it.
 */
static double mag_alloc(kvmm_client_t *c, unsigned int rounds, unsigned int per_call,
			unsigned int batch)
{
	static uint32_t frames[4096];
	uint64_t t0, pages = 0;

	t0 = bench_now_ns();
	for (unsigned int r = 0; r < rounds; r++) {
		uint32_t got = 0;

		while (got < batch) {
			int k = kvmm_mag_alloc(c, frames + got,
					       per_call < batch - got ? per_call : batch - got);

			if (k <= 0) {
				fprintf(stderr, "ipc: kvmm_mag_alloc: %s\n", kvmm_strerror(k));
				return 0;
			}
			got += (uint32_t)k;
		}
		pages += got;
		kvmm_mag_free(c, frames, got);
	}
	return (double)(bench_now_ns() - t0) / (double)pages;
}

/*
 * The engine's step with client-chosen pages: 64 sequences append one token each; a
 * sequence whose token opens a new page takes a frame from the magazine, writes the token's
 * KV into it at once and names it in its APPEND (lengths staggered: 8 of the 64 each step
 * with tokens_per_page 8 here).  Pops, the KV write of those pages' first token and the ring round trip are timed.
 */
static double step_frames(kvmm_client_t *c, unsigned int steps)
{
	struct kvmm_sqe sqes[STEP_SEQS];
	struct kvmm_cqe cqes[STEP_SEQS];
	uint64_t seqs[STEP_SEQS], len[STEP_SEQS], t0 = 0, t1 = 0;
	uint32_t tok[STEP_SEQS], fr[STEP_SEQS];
	uint32_t tpp = kvmm_tokens_per_page(c), bpt = kvmm_bytes_per_token(c);
	unsigned int s;

	for (unsigned int i = 0; i < STEP_SEQS; i++) {
		/* stagger the lengths so that page boundaries spread over the steps */
		uint32_t pre[64] = {0};

		len[i] = i % tpp;
		tok[i] = i;
		if (len[i] > 64 || kvmm_seq_create(c, 0, &seqs[i]) ||
		    kvmm_seq_append(c, seqs[i], pre, (uint32_t)len[i], NULL))
			return 0;
	}
	for (s = 0; s < steps + 8; s++) {
		unsigned int got = 0;

		if (s == 8)
			t0 = bench_now_ns();
		if (s % 256 == 255) {
			uint64_t p = bench_now_ns();

			for (unsigned int i = 0; i < STEP_SEQS; i++) {
				len[i] = i % tpp;
				kvmm_seq_truncate(c, seqs[i], len[i]);
			}
			t1 += bench_now_ns() - p;
		}
		for (unsigned int i = 0; i < STEP_SEQS; i++) {
			sqes[i] = (struct kvmm_sqe){.op = KVMM_SQE_SEQ_APPEND,
						    .seq = seqs[i],
						    .nr = 1,
						    .data = &tok[i],
						    .user_data = i};
			if (len[i] % tpp == 0) {
				if (kvmm_mag_alloc(c, &fr[i], 1) != 1)
					return 0;
				/* the token's KV goes straight into the new page */
				memset(kvmm_frame_addr(c, fr[i]), (int)i, bpt);
				sqes[i].arg = 1;
				sqes[i].frames = &fr[i];
			}
			len[i]++;
		}
		if (kvmm_submit(c, sqes, STEP_SEQS) != STEP_SEQS)
			return 0;
		while (got < STEP_SEQS) {
			int r = kvmm_complete(c, cqes + got, STEP_SEQS - got, STEP_SEQS - got);

			if (r <= 0)
				return 0;
			for (int j = 0; j < r; j++)
				if (cqes[got + j].res)
					return 0;
			got += (unsigned int)r;
		}
	}
	t1 = bench_now_ns() - t1;
	for (unsigned int i = 0; i < STEP_SEQS; i++)
		kvmm_seq_free(c, seqs[i]);
	return (double)(t1 - t0) / steps;
}

int bench_suite_ipc(const struct bench_opts *o)
{
	unsigned int n = o->quick ? 2000 : 20000, steps = o->quick ? 200 : 2000;
	struct kvmm_attach_opts unprotected = {.flags = KVMM_ATTACH_NO_WPROTECT};
	struct bench_kvmmd d = {0};
	kvmm_client_t *c = NULL, *cs = NULL;
	double sp, fx, rt, st, st_sock, st_fr, bt, m1, m64;
	int err;

	sp = seqpacket_pingpong(n);
	fx = futex_pingpong(n);
	err = bench_kvmmd_start(&d, "16384", "8192");
	if (err == -ENOENT)
		return 0;
	if (err) {
		fprintf(stderr, "ipc: kvmmd did not start: %s\n", strerror(-err));
		bench_kvmmd_stop(&d);
		return err;
	}
	/*
	 * The control plane alone: pages not write-protected (each page a magazine hands out
	 * would cost an mprotect pair); the wprotect suite measures that cost.
	 */
	err = kvmm_attach_ex(d.sock, "bench", &fmt, &unprotected, &c);
	if (!err) {
		setenv("KVMM_NO_RINGS", "1", 1);
		err = kvmm_attach_ex(d.sock, "bench", &fmt, &unprotected, &cs);
		unsetenv("KVMM_NO_RINGS");
	}
	if (err || !kvmm_has_rings(c)) {
		fprintf(stderr, "ipc: attach: %s\n", err ? kvmm_strerror(err) : "no data plane");
		kvmm_detach(c);
		kvmm_detach(cs);
		bench_kvmmd_stop(&d);
		return err ? err : -EOPNOTSUPP;
	}
	rt = op_round_trip(c, n);
	st = step(c, steps);
	st_sock = step(cs, steps);
	bt = block_tables(c, n);
	m1 = mag_alloc(c, o->quick ? 200 : 2000, 1, 64);
	m64 = mag_alloc(c, o->quick ? 200 : 2000, 64, 64);
	st_fr = step_frames(c, steps);
	kvmm_detach(c);
	kvmm_detach(cs);
	bench_kvmmd_stop(&d);

	bench_report("ipc baseline: SEQPACKET ping-pong", sp, "ns/rtt", "", 0);
	bench_report("ipc baseline: futex ping-pong", fx, "ns/rtt", "", 0);
	bench_report("ipc op round trip (socket)", rt, "ns/op", "SEQPACKET ping-pong", sp);
	bench_report("ipc step 64 seqs x 1 token (rings)", st, "ns/step", "futex ping-pong", fx);
	bench_report("ipc step 64 seqs x 1 token (socket)", st_sock, "ns/step", "futex ping-pong",
		     fx);
	bench_report("ipc step 64 seqs x 1 token, new pages from the magazine (rings)", st_fr,
		     "ns/step", "futex ping-pong", fx);
	bench_report("ipc block table 64 seqs (mirror)", bt, "ns/batch", "SEQPACKET ping-pong", sp);
	bench_report("ipc magazine alloc, 1 per call", m1, "ns/page", "futex ping-pong", fx);
	bench_report("ipc magazine alloc, 64 per call", m64, "ns/page", "futex ping-pong", fx);
	bench_target("magazine alloc (1 per call, refills amortized)", m1, 100, true, "ns/page");
	bench_target("64-seq step (rings) vs 2x futex round trip", st, 2 * fx, true, "ns");
	return 0;
}
