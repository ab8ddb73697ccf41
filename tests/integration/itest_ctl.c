// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_ctl.c - kvmmctl against the real kvmmd: every read verb in text and
 * JSON (the JSON checked by a small validator here), the admin verbs, trace (a live
 * subscription and the ring dump), top under tmux, the Prometheus /metrics endpoint scraped
 * with curl (format checked by our own parser, and by promtool when it is installed), and the
 * exit codes: 3 without a daemon, 2 for bad arguments, 4 for a caller without permission.
 * The daemon is started once for the group with --metrics 127.0.0.1:0.  kvmmctl is
 * ./tools/kvmmctl or $KVMM_KVMMCTL; tests whose helper program (tmux, curl) is missing skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

/* ---- fixtures ------------------------------------------------------------------------ */

static int setup(void **state)
{
	/* trace --dump reads what was recorded before anyone followed: a flight recorder */
	static const char *const extra[] = {"--metrics", "127.0.0.1:0", "--trace", "always", NULL};

	(void)state;
	if (!itest_have_ctl("itest_ctl") || !itest_daemon_find(&itest_d)) {
		itest_no_daemon = true;
		return 0;
	}
	if (itest_daemon_start(&itest_d, extra))
		return -1;
	itest_have_daemon = true;
	return 0;
}

/* A client of alpha with one sequence of 3 sealed pages + 5 tokens; its ids in *cid, *sid. */
static kvmm_client_t *client_with_seq(unsigned long long *cid, uint64_t *sid)
{
	kvmm_client_t *c;
	uint32_t tokens[64];
	uint64_t len = 0;
	char *out, *l;

	itest_tokens(tokens, 64, 7);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, sid), 0);
	assert_int_equal(kvmm_seq_append(c, *sid, tokens, 3 * kvmm_tokens_per_page(c) + 5, &len),
			 0);
	assert_int_equal(kvmm_seal(c, *sid, 0, 0), 0);
	/* the client id, from the daemon's own table */
	assert_int_equal(itest_ctl(&out, "--raw", "seqs", NULL), 0);
	l = strstr(out, "Seq: ");
	assert_non_null(l);
	l = strstr(l, " client=");
	assert_non_null(l);
	*cid = strtoull(l + 8, NULL, 10);
	assert_true(*cid > 0);
	free(out);
	return c;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_exit_codes(void **state)
{
	const char *argv[] = {itest_ctl_bin(), "--socket", "/nonexistent/kvmmd.sock", "status",
			      NULL};
	char *out;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_run(&out, (uid_t)-1, argv), 3);
	assert_non_null(strstr(out, "no daemon"));
	free(out);
	assert_int_equal(itest_ctl(NULL, "frobnicate", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "pagetable", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "pagetable", "7", NULL), 2); /* no client */
	assert_int_equal(itest_ctl(NULL, "pagetable", "x:1", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "limit", "alpha", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "reclaim", "lots", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "--event", "bogus", "trace", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "--bogus-option", "status", NULL), 2);
	assert_int_equal(itest_ctl(NULL, "status", "extra", NULL), 2);
	/* a daemon error is 1 */
	assert_int_equal(itest_ctl(&out, "limit", "nosuch", "10", NULL), 1);
	assert_non_null(strstr(out, "no namespace"));
	free(out);
	assert_int_equal(itest_ctl(NULL, "pagetable", "999:1", NULL), 1);
}

static void test_permission(void **state)
{
	const char *argv[] = {itest_ctl_bin(), "--socket", itest_d.sock, "status", NULL};
	char *out;
	int rc;

	(void)state;
	itest_need_daemon();
	if (geteuid() == 0) {
		/* nobody must reach the socket to be refused by the daemon, not by the file system */
		assert_int_equal(chmod(itest_d.dir, 0755), 0);
		rc = itest_run(&out, 65534, argv);
	} else {
		rc = itest_run(&out, (uid_t)-1, argv);
	}
	assert_int_equal(rc, 4);
	assert_non_null(strstr(out, "permission denied"));
	free(out);
}

static void test_read_verbs(void **state)
{
	static const char *const verbs[] = {"status",	 "meminfo", "vmstat",
					    "buddyinfo", "clients", "namespaces",
					    "seqs",	 "lru",	    "swap"};
	unsigned long long cid;
	kvmm_client_t *c;
	char *out, arg[64];
	uint64_t sid;

	(void)state;
	itest_need_daemon();
	c = client_with_seq(&cid, &sid);
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		assert_int_equal(itest_ctl(&out, verbs[i], NULL), 0);
		assert_true(strlen(out) > 0);
		free(out);
		assert_int_equal(itest_ctl(&out, "--json", verbs[i], NULL), 0);
		if (!itest_json_ok(out))
			fail_msg("%s --json is not JSON:\n%s", verbs[i], out);
		free(out);
	}
	/* the tables say what is there */
	assert_int_equal(itest_ctl(&out, "meminfo", "--frames", NULL), 0);
	assert_non_null(strstr(out, "namespace"));
	assert_non_null(strstr(out, "alpha"));
	free(out);
	assert_int_equal(itest_ctl(&out, "status", NULL), 0);
	assert_non_null(strstr(out, "FramesUsed:       4 frames"));
	free(out);
	assert_int_equal(itest_ctl(&out, "clients", NULL), 0);
	assert_non_null(strstr(out, "attached"));
	assert_non_null(strstr(out, "REQUESTS"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--ns", "alpha", "seqs", NULL), 0);
	assert_non_null(strstr(out, "alpha"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--ns", "beta", "--raw", "seqs", NULL), 0);
	assert_null(strstr(out, "Seq:"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--json", "seqs", NULL), 0);
	assert_non_null(strstr(out, "\"sealed\":3"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--json", "vmstat", NULL), 0);
	assert_non_null(strstr(out, "\"seal\":"));
	free(out);
	assert_int_equal(itest_ctl(&out, "swap", NULL), 0);
	assert_non_null(strstr(out, "no swap tiers"));
	free(out);

	/* pagetable CLIENT:SEQ and --client ID SEQ */
	snprintf(arg, sizeof(arg), "%llu:%llu", cid, (unsigned long long)sid);
	assert_int_equal(itest_ctl(&out, "pagetable", arg, NULL), 0);
	assert_non_null(strstr(out, "present"));
	assert_non_null(strstr(out, "BLOCK"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--json", "pagetable", arg, NULL), 0);
	assert_true(itest_json_ok(out));
	assert_non_null(strstr(out, "\"blocks\":4"));
	assert_non_null(strstr(out, "\"sealed\":3"));
	free(out);
	snprintf(arg, sizeof(arg), "%llu", cid);
	{
		char s[32];

		snprintf(s, sizeof(s), "%llu", (unsigned long long)sid);
		assert_int_equal(itest_ctl(&out, "--client", arg, "--raw", "pagetable", s, NULL),
				 0);
		assert_non_null(strstr(out, "Pte: 0 type=present"));
		free(out);
	}
	/* free the sequence: its sealed pages go to the LRU, which lru shows */
	assert_int_equal(kvmm_seq_free(c, sid), 0);
	assert_int_equal(itest_ctl(&out, "--raw", "lru", NULL), 0);
	assert_non_null(strstr(out, "Inactive:         3 pages"));
	assert_non_null(strstr(out, "list=inactive age=0"));
	free(out);
	assert_int_equal(itest_ctl(&out, "namespaces", NULL), 0);
	assert_non_null(strstr(out, "HIT%"));
	free(out);
	kvmm_detach(c);
}

static void test_admin_verbs(void **state)
{
	unsigned long long cid;
	kvmm_client_t *c;
	uint64_t sid;
	char *out;
	int rc;

	(void)state;
	itest_need_daemon();
	c = client_with_seq(&cid, &sid);
	assert_int_equal(kvmm_seq_free(c, sid), 0);
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "200", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "--raw", "--ns", "alpha", "meminfo", NULL), 0);
	assert_non_null(strstr(out, "Limit:            200 frames"));
	free(out);
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "none", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "reclaim", "1", NULL), 0);
	assert_non_null(strstr(out, "reclaimed 1 of 1"));
	free(out);
	assert_int_equal(itest_ctl(&out, "drop-caches", NULL), 0);
	assert_non_null(strstr(out, "dropped"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--raw", "--ns", "alpha", "meminfo", NULL), 0);
	assert_non_null(strstr(out, "Cached:           0 frames"));
	free(out);
	/* swapon / swapoff: done, or a clear "not supported" from a daemon without it */
	rc = itest_ctl(&out, "swapon", "1", "1048576", NULL);
	assert_true(rc == 0 || (rc == 1 && strstr(out, "no swap support")));
	free(out);
	rc = itest_ctl(&out, "swapoff", "1", NULL);
	assert_true(rc == 0 ||
		    (rc == 1 && (strstr(out, "no swap support") || strstr(out, "No such"))));
	free(out);
	kvmm_detach(c);
}

/*
 * swapon/swapoff --ns: a tier added to alpha is not in beta; drop-caches swap drops alpha's
 * demoted cache (and only that: the tier then holds nothing).
 */
static void test_swap_ns(void **state)
{
	unsigned long long cid, dropped = 0;
	long long demoted, drops;
	kvmm_client_t *c;
	uint64_t sid;
	char *out, *p;
	int rc;

	(void)state;
	itest_need_daemon();
	rc = itest_ctl(&out, "swapon", "1", "1048576", "host", "5", "--ns", "alpha", NULL);
	if (rc == 1 && strstr(out, "no swap support")) {
		free(out);
		skip();
	}
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "in alpha"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--json", "swap", NULL), 0);
	assert_true(itest_json_ok(out));
	assert_non_null(strstr(out, "\"alpha\""));
	assert_null(strstr(out, "\"beta\""));
	free(out);
	assert_int_equal(itest_ctl(&out, "--ns", "beta", "swap", NULL), 0);
	assert_non_null(strstr(out, "no swap tiers"));
	free(out);
	/* an unknown namespace; a tier beta does not have */
	assert_int_equal(itest_ctl(&out, "swapon", "2", "1048576", "--ns", "nosuch", NULL), 1);
	free(out);
	assert_int_equal(itest_ctl(&out, "swapoff", "1", "--ns", "beta", NULL), 1);
	assert_non_null(strstr(out, "no tier 1 in namespace beta"));
	free(out);

	/* alpha's cache is demoted to the tier by reclaim, then dropped from it */
	c = client_with_seq(&cid, &sid);
	assert_int_equal(kvmm_seq_free(c, sid), 0); /* 3 sealed pages stay cached */
	demoted = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote");
	drops = itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_drop");
	assert_int_equal(itest_ctl(&out, "--noswap", "reclaim", "100000", NULL), 0);
	free(out);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_demote") >= demoted + 3);
	assert_int_equal(itest_ctl(&out, "drop-caches", "swap", NULL), 0);
	p = strstr(out, "dropped ");
	assert_non_null(p);
	dropped = strtoull(p + 8, NULL, 10);
	free(out);
	assert_true(dropped >= 3);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "swap_drop"),
			 drops + (long long)dropped);
	assert_int_equal(itest_ctl(&out, "--raw", "--ns", "alpha", "swap", NULL), 0);
	p = strstr(out, " used=");
	assert_non_null(p);
	assert_int_equal(strtoull(p + 6, NULL, 10), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "drop-caches", "swap", NULL), 0);
	assert_non_null(strstr(out, "dropped 0 "));
	free(out);
	kvmm_detach(c);

	assert_int_equal(itest_ctl(&out, "swapoff", "1", "--ns", "alpha", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "swap", NULL), 0);
	assert_non_null(strstr(out, "no swap tiers"));
	free(out);
}

/* Wait until the daemon reports @n trace subscribers (5 s). */
static void wait_subscribers(long long n)
{
	for (int i = 0; i < 500; i++) {
		char *t;

		assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &t), 0);
		if (itest_text_value(t, "TraceSubscribers") == n) {
			free(t);
			return;
		}
		free(t);
		itest_sleep_ms(10);
	}
	fail_msg("never saw %lld trace subscribers", n);
}

static void test_trace(void **state)
{
	const char *argv[] = {itest_ctl_bin(), "--socket",   itest_d.sock, "trace", "--json",
			      "--event",       "alloc,seal", "--count",	   "3",	    "--timeout",
			      "10000",	       NULL};
	unsigned long long cid;
	kvmm_client_t *c;
	int pfd[2], status;
	char buf[16384];
	size_t len = 0;
	uint64_t sid;
	pid_t pid;
	char *out;

	(void)state;
	itest_need_daemon();
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(pfd[1], 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	wait_subscribers(1);
	c = client_with_seq(&cid, &sid); /* allocates 4 frames, seals 3 */
	for (;;) {
		ssize_t n = read(pfd[0], buf + len, sizeof(buf) - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(itest_json_lines_ok(buf));
	assert_non_null(strstr(buf, "\"type\":\"alloc\""));
	assert_null(strstr(buf, "\"type\":\"attach\"")); /* filtered out */
	wait_subscribers(0);

	/* the ring still holds them: dump, text and JSON Lines, filtered by client */
	{
		char id[24];

		snprintf(id, sizeof(id), "%llu", cid);
		assert_int_equal(itest_ctl(&out, "trace", "--dump", "--client", id, NULL), 0);
		assert_non_null(strstr(out, "attach"));
		assert_non_null(strstr(out, "seal"));
		free(out);
		assert_int_equal(
			itest_ctl(&out, "trace", "--dump", "--json", "--event", "seal", NULL), 0);
		assert_true(itest_json_lines_ok(out));
		assert_non_null(strstr(out, "\"type\":\"seal\""));
		assert_null(strstr(out, "\"type\":\"alloc\""));
		free(out);
	}
	kvmm_detach(c);
	assert_int_equal(itest_ctl(&out, "trace", "--dump", "--event", "detach", NULL), 0);
	assert_non_null(strstr(out, "detach"));
	free(out);
	/* --clear forgets what it showed */
	assert_int_equal(itest_ctl(NULL, "trace", "--clear", NULL), 0);
	assert_int_equal(itest_ctl(&out, "trace", "--dump", "--event", "seal", NULL), 0);
	assert_null(strstr(out, "seal"));
	free(out);
}

/* trace = off: no ring; kvmmctl trace says so in one line */
static void test_trace_off(void **state)
{
	static const char *const extra[] = {"--trace", "off", NULL};
	struct itest_daemon d = {0};
	const char *argv[] = {itest_ctl_bin(), "--socket", NULL, "trace", "--dump", NULL};
	char *out = NULL;

	(void)state;
	itest_need_daemon();
	assert_true(itest_daemon_find(&d));
	assert_int_equal(itest_daemon_start(&d, extra), 0);
	argv[2] = d.sock;
	assert_int_equal(itest_run(&out, (uid_t)-1, argv), 1);
	assert_non_null(strstr(out, "trace = off"));
	free(out);
	argv[4] = NULL; /* following: the same */
	assert_int_equal(itest_run(&out, (uid_t)-1, argv), 1);
	assert_non_null(strstr(out, "trace = off"));
	free(out);
	assert_int_equal(itest_admin_value(&d, KVMM_OP_STATUS, "TraceRecords"), 0);
	assert_int_equal(itest_daemon_stop(&d), 0);
}

static bool have_prog(const char *name)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
	return system(cmd) == 0;
}

static int __attribute__((format(printf, 2, 3))) sh(char **out, const char *fmt, ...)
{
	const char *argv[] = {"/bin/sh", "-c", NULL, NULL};
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	argv[2] = cmd;
	return itest_run(out, (uid_t)-1, argv);
}

static void test_top(void **state)
{
	char tsock[128], *out = NULL;
	bool seen = false, gone = false;

	(void)state;
	itest_need_daemon();
	if (!have_prog("tmux"))
		skip();
	snprintf(tsock, sizeof(tsock), "%s/tmux.sock", itest_d.dir);
	assert_int_equal(sh(NULL,
			    "tmux -S %s new-session -d -s top -x 132 -y 40 '%s --socket %s top'",
			    tsock, itest_ctl_bin(), itest_d.sock),
			 0);
	for (int i = 0; i < 500 && !seen; i++) {
		free(out);
		out = NULL;
		if (sh(&out, "tmux -S %s capture-pane -p -t top", tsock) == 0)
			seen = strstr(out, "kvmmctl top") && strstr(out, "NAMESPACE") &&
			       strstr(out, "alpha") && strstr(out, "hit rate");
		if (!seen)
			itest_sleep_ms(10);
	}
	if (!seen)
		fprintf(stderr, "pane:\n%s\n", out ? out : "");
	free(out);
	assert_true(seen);
	assert_int_equal(sh(NULL, "tmux -S %s send-keys -t top q", tsock), 0);
	for (int i = 0; i < 500 && !gone; i++) {
		gone = sh(NULL, "tmux -S %s has-session -t top", tsock) != 0;
		if (!gone)
			itest_sleep_ms(10);
	}
	sh(NULL, "tmux -S %s kill-server", tsock);
	unlink(tsock); /* tmux leaves it, and the daemon's directory could not be removed */
	assert_true(gone);
}

/* Wait until the tmux pane shows every one of the strings (NULL-terminated); the pane. */
static bool pane_shows(const char *tsock, char **pane, ...)
{
	bool seen = false;

	for (int i = 0; i < 1000 && !seen; i++) {
		const char *want;
		va_list ap;

		free(*pane);
		*pane = NULL;
		if (sh(pane, "tmux -S %s capture-pane -p -t top", tsock))
			continue;
		seen = true;
		va_start(ap, pane);
		while ((want = va_arg(ap, const char *)))
			seen = seen && strstr(*pane, want);
		va_end(ap);
		if (!seen)
			itest_sleep_ms(10);
	}
	if (!seen)
		fprintf(stderr, "pane:\n%s\n", *pane ? *pane : "");
	return seen;
}

/*
 * top outlives its daemon: kvmmd stopped, top says it is gone and keeps trying; a new kvmmd
 * on the same socket (another namespace) is shown without restarting top.
 */
static void test_top_follows_restart(void **state)
{
	char dir[64] = "/tmp/kvmm-top.XXXXXX", tsock[128], sock[128], *out = NULL;
	bool gone = false;

	(void)state;
	itest_need_daemon();
	if (!have_prog("tmux"))
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(tsock, sizeof(tsock), "%s/tmux.sock", dir);
	snprintf(sock, sizeof(sock), "%s/kvmmd.sock", dir);
	assert_int_equal(sh(NULL, ": > %s/kvmmd.conf", dir), 0);
	for (int round = 0; round < 2; round++) {
		/* a kvmmd of our own, on the same path each time, with another namespace */
		assert_int_equal(sh(NULL,
				    "%s --foreground --config %s/kvmmd.conf --socket %s "
				    "--page-size 16384 --namespace %s:64 >>%s/kvmmd.log 2>&1 & "
				    "echo $! > %s/kvmmd.pid",
				    itest_d.bin, dir, sock, round ? "second" : "first", dir, dir),
				 0);
		if (!round)
			assert_int_equal(
				sh(NULL,
				   "for i in $(seq 500); do [ -S %s ] && break; sleep 0.01; "
				   "done; tmux -S %s new-session -d -s top -x 132 -y 40 "
				   "'%s --socket %s top'",
				   sock, tsock, itest_ctl_bin(), sock),
				0);
		assert_true(pane_shows(tsock, &out, "NAMESPACE", round ? "second" : "first", NULL));
		assert_true(!round || !strstr(out, "first"));
		/* stopped: top stays and says so */
		assert_int_equal(sh(NULL,
				    "kill $(cat %s/kvmmd.pid); for i in $(seq 500); do "
				    "kill -0 $(cat %s/kvmmd.pid) 2>/dev/null || break; sleep 0.01; "
				    "done; rm -f %s",
				    dir, dir, sock),
				 0);
		assert_true(pane_shows(tsock, &out, "is gone", sock, NULL));
	}
	free(out);
	assert_int_equal(sh(NULL, "tmux -S %s send-keys -t top q", tsock), 0);
	for (int i = 0; i < 500 && !gone; i++) {
		gone = sh(NULL, "tmux -S %s has-session -t top", tsock) != 0;
		if (!gone)
			itest_sleep_ms(10);
	}
	sh(NULL, "tmux -S %s kill-server; rm -rf %s", tsock, dir);
	assert_true(gone);
}

/* Our check of the text exposition format (the subset we emit). */
static void check_exposition(const char *text)
{
	char *dup = strdup(text), *line, *save = NULL, typed[128] = "";
	unsigned int samples = 0;

	assert_non_null(dup);
	for (line = strtok_r(dup, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128], type[32];
		const char *p = line;
		size_t n;

		if (sscanf(line, "# TYPE %127s %31s", name, type) == 2) {
			assert_true(!strcmp(type, "gauge") || !strcmp(type, "counter"));
			if (!strcmp(type, "counter"))
				assert_non_null(strstr(name, "_total"));
			strcpy(typed, name);
			continue;
		}
		if (line[0] == '#') {
			assert_true(!strncmp(line, "# HELP ", 7));
			continue;
		}
		n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:0123456789");
		assert_true(n > 0);
		/* a sample belongs to the family declared just before it */
		assert_true(strlen(typed) == n && !strncmp(p, typed, n));
		p += n;
		if (*p == '{') {
			p++;
			while (*p != '}') {
				n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
				assert_true(n > 0 && p[n] == '=' && p[n + 1] == '"');
				p = strchr(p + n + 2, '"');
				assert_non_null(p);
				p++;
				if (*p == ',')
					p++;
				else
					assert_int_equal(*p, '}');
			}
			p++;
		}
		assert_int_equal(*p, ' ');
		{
			char *end;

			strtod(p + 1, &end);
			assert_true(end > p + 1 && *end == '\0');
		}
		samples++;
	}
	assert_true(samples > 20);
	free(dup);
}

static void test_metrics(void **state)
{
	char *out, *st;
	long long port;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &st), 0);
	port = itest_text_value(st, "MetricsPort");
	free(st);
	assert_true(port > 0);
	if (!have_prog("curl"))
		skip();
	assert_int_equal(sh(&out, "curl -sS -f http://127.0.0.1:%lld/metrics", port), 0);
	assert_non_null(strstr(out, "kvmm_frames{namespace=\"alpha\",state=\"cached\"}"));
	assert_non_null(strstr(out, "kvmm_prefix_cache_hits_total{namespace=\"alpha\"}"));
	assert_non_null(strstr(out, "kvmm_pgscan_total{namespace=\"beta\"}"));
	/* the daemon-wide frame budget (kvmm/budget.c) */
	assert_non_null(strstr(out, "\nkvmm_budget_frames 4352\n"));
	assert_non_null(strstr(out, "# TYPE kvmm_budget_low_events_total counter\n"));
	assert_non_null(strstr(out, "\nkvmm_budget_background_runs_total "));
	assert_non_null(strstr(out, "# TYPE kvmm_budget_background_frames_total counter\n"));
	assert_non_null(strstr(out, "kvmm_namespace_resident_frames{namespace=\"alpha\"}"));
	assert_non_null(strstr(out, "kvmm_namespace_low_events_total{namespace=\"beta\"} 0"));
	check_exposition(out);
	free(out);
	if (have_prog("promtool")) {
		assert_int_equal(sh(&out,
				    "curl -sS -f http://127.0.0.1:%lld/metrics | promtool "
				    "check metrics",
				    port),
				 0);
		free(out);
	}
	assert_int_equal(sh(&out,
			    "curl -s -o /dev/null -w '%%{http_code}' "
			    "http://127.0.0.1:%lld/nothing",
			    port),
			 0);
	assert_string_equal(out, "404");
	free(out);
	assert_int_equal(sh(&out,
			    "curl -s -o /dev/null -w '%%{http_code}' -X POST "
			    "http://127.0.0.1:%lld/metrics",
			    port),
			 0);
	assert_string_equal(out, "405");
	free(out);
	/* the daemon is still fine */
	assert_int_equal(itest_ctl(NULL, "status", NULL), 0);
}

/* Attach to ns as uid 65534 in a child: the error (negated), or 0. */
static int attach_as_nobody(const char *ns)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (!pid) {
		kvmm_client_t *c;
		int err;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(126);
		err = kvmm_attach(itest_d.sock, ns, &itest_fmt, &c);
		if (!err)
			kvmm_detach(c);
		_exit(-err & 0x7f);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return -WEXITSTATUS(status);
}

/*
 * Issue 26's kvmmctl and daemon fixes, one assertion each: priorities outside -1000..1000,
 * a negative number is an argument (not an option), unknown namespaces, sequences and fault
 * points are named, the pagetable header names the namespace, swapon takes kvmmd's size
 * suffixes and its default priority, a failed swapon leaves no file, root sees the daemon's
 * errno for a swapon it refused, meminfo shows no limit when there is none, and an
 * unauthorised uid gets EACCES for missing and existing namespaces alike.
 */
static void test_ctl_fixes(void **state)
{
	unsigned long long cid;
	char *out, path[200], arg[32];
	kvmm_client_t *c;
	struct statvfs vfs;
	struct stat st;
	uint64_t sid;
	int rc;

	(void)state;
	itest_need_daemon();
	/* limit: the priority range; a negative number is parsed as one, not as an option */
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "none", "1001", NULL), 2);
	assert_non_null(strstr(out, "not in -1000..1000"));
	free(out);
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "none", "-1001", NULL), 2);
	assert_non_null(strstr(out, "not in -1000..1000"));
	free(out);
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "none", "-5", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "limit", "alpha", "-5", NULL), 2);
	assert_non_null(strstr(out, "not a size: '-5'"));
	assert_null(strstr(out, "invalid option"));
	free(out);

	/* meminfo without a limit: no Limit line, "none" in the table */
	assert_int_equal(itest_ctl(&out, "--raw", "--ns", "alpha", "meminfo", NULL), 0);
	assert_null(strstr(out, "Limit:"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--ns", "alpha", "meminfo", NULL), 0);
	assert_non_null(strstr(out, " none "));
	free(out);

	/* unknown names are named */
	assert_int_equal(itest_ctl(&out, "--ns", "nosuch", "meminfo", NULL), 1);
	assert_non_null(strstr(out, "no namespace 'nosuch'"));
	free(out);
	assert_int_equal(itest_ctl(&out, "fault", "swap.nosuch", "nth=1", NULL), 1);
	assert_non_null(strstr(out, "no fault point 'swap.nosuch'"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--ns", "nosuch", "fault", "swap.read", "off", NULL), 1);
	assert_non_null(strstr(out, "no namespace 'nosuch'"));
	free(out);
	assert_int_equal(itest_ctl(&out, "pagetable", "999:1", NULL), 1);
	assert_non_null(strstr(out, "no sequence 1 of client 999"));
	free(out);
	assert_int_equal(itest_ctl(&out, "swapoff", "9", NULL), 1);
	assert_non_null(strstr(out, "no tier 9"));
	free(out);

	/* the pagetable header names the namespace */
	c = client_with_seq(&cid, &sid);
	snprintf(arg, sizeof(arg), "%llu:%llu", cid, (unsigned long long)sid);
	assert_int_equal(itest_ctl(&out, "pagetable", arg, NULL), 0);
	assert_non_null(strstr(out, "(namespace alpha)"));
	assert_null(strstr(out, "namespace..."));
	free(out);
	assert_int_equal(kvmm_seq_free(c, sid), 0);
	kvmm_detach(c);

	/* swapon: kvmmd's size suffixes and default priorities (host 10) */
	rc = itest_ctl(&out, "swapon", "3", "1M", "--ns", "beta", NULL);
	if (rc == 1 && strstr(out, "no swap support")) {
		free(out);
		skip();
	}
	assert_int_equal(rc, 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "--raw", "--ns", "beta", "swap", NULL), 0);
	assert_non_null(strstr(out, "priority=10"));
	free(out);
	assert_int_equal(itest_ctl(&out, "swapoff", "3", "--ns", "beta", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "swapon", "3", "1Q", NULL), 2);
	free(out);

	/*
	 * A swapon that fails leaves no file behind: a swap file larger than /dev/shm (tmpfs
	 * refuses such an fallocate at once, before allocating anything) is created, then its
	 * fallocate fails.
	 */
	if (statvfs("/dev/shm", &vfs) == 0 && vfs.f_blocks) {
		unsigned long long too_big = (unsigned long long)vfs.f_blocks * vfs.f_frsize * 2;

		snprintf(path, sizeof(path), "/dev/shm/kvmm-itest-%d.swap", (int)getpid());
		snprintf(arg, sizeof(arg), "%llu", too_big);
		assert_int_equal(itest_ctl(&out, "swapon", "4", arg, path, "--ns", "beta", NULL),
				 1);
		free(out);
		assert_int_equal(stat(path, &st), -1);
		assert_int_equal(errno, ENOENT);
		/* the pool's own file, PATH.NS (kvmmctl.md) */
		strncat(path, ".beta", sizeof(path) - strlen(path) - 1);
		assert_int_equal(stat(path, &st), -1);
		assert_int_equal(errno, ENOENT);
	}

	/* root: a swapon the daemon cannot do shows the daemon's errno, not "need root" */
	if (geteuid() == 0) {
		assert_int_equal(
			itest_ctl(&out, "swapon", "4", "1M", "/proc/version", "--ns", "beta", NULL),
			1);
		assert_null(strstr(out, "admin verbs need root"));
		free(out);

		/* an unauthorised uid: EACCES whether the namespace exists or not */
		assert_int_equal(chmod(itest_d.dir, 0755), 0);
		assert_int_equal(attach_as_nobody("alpha"), -EACCES);
		assert_int_equal(attach_as_nobody("nosuch"), -EACCES);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_codes),  cmocka_unit_test(test_read_verbs),
		cmocka_unit_test(test_admin_verbs), cmocka_unit_test(test_swap_ns),
		cmocka_unit_test(test_trace),	    cmocka_unit_test(test_trace_off),
		cmocka_unit_test(test_top),	    cmocka_unit_test(test_top_follows_restart),
		cmocka_unit_test(test_metrics),	    cmocka_unit_test(test_permission),
		cmocka_unit_test(test_ctl_fixes),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);
	failed = cmocka_run_group_tests_name("itest_ctl", tests, setup, itest_group_teardown);
	if (itest_no_daemon)
		return 77;
	return failed;
}
