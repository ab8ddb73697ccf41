// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_reattach.c - what a libkvmm handle does when kvmmd goes away
 * (runtime/reattach.c), with the real daemon killed with -9 or stopped cleanly and started
 * again at the same socket, its namespace "alpha" backed by a swap file with warm restart:
 *   - the loss is reported once (a GONE event), every later call fails with -ENOTCONN at once
 *     (no hang, no SIGPIPE), kvmm_connected says 0; kvmm_reattach reconnects and lists exactly
 *     the sequences the handle held (made by create, fork, prompt and asynchronous create;
 *     freed ones not), and the handle works again;
 *   - a call blocked on the rings when the daemon dies returns -ENOTCONN;
 *   - a daemon that never comes back: -ETIMEDOUT after the timeout, the handle still usable
 *     for a later reattach or detach; a live handle: -EISCONN;
 *   - KVMM_ATTACH_REATTACH: the first call that finds the daemon back fails with -ESTALE and
 *     the lost list is there;
 *   - a daemon back with a bigger pool: the handle maps it at a new range, with its size;
 *   - the issue's closing test: 4 client processes under load, kvmmd killed with -9 and
 *     restarted; each client reconnects (two with kvmm_reattach, two automatically),
 *     recomputes exactly what was lost, hits the prefixes that survived on the swap file and
 *     produces the same bytes as before the crash; a client killed afterwards leaks no page.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

static void stop_daemon(void);

static struct itest_swapdir sd;
static const char *extra[] = {"--swap", sd.filearg, "--swap", "warm_restart=yes", NULL};

static int setup(void **state)
{
	(void)state;
	if (itest_swapdir_make(&sd, "itreattach", 0, 2048))
		return -1;
	return itest_group_start(extra);
}

static int teardown(void **state)
{
	int ret = itest_group_teardown(state);

	itest_swapdir_remove(&sd);
	return ret;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static kvmm_client_t *attach_flags(uint32_t flags)
{
	struct kvmm_attach_opts o = {.flags = flags};
	kvmm_client_t *c = NULL;

	assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &o, &c), 0);
	return c;
}

/* kvmmd goes away (crash: kill -9) and, unless only_halt, starts again at the same socket. */
static void halt(bool crash)
{
	assert_int_equal(itest_daemon_halt(&itest_d, crash), 0);
}

static void start(void)
{
	assert_int_equal(itest_daemon_start(&itest_d, extra), 0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* kvmm_lost_seqs() of c, sorted, must be exactly want[0..n) (sorted here). */
static void assert_lost(kvmm_client_t *c, uint64_t *want, int n)
{
	uint64_t got[64];
	int k = kvmm_lost_seqs(c, got, 64);

	assert_int_equal(k, n);
	qsort(got, (size_t)n, sizeof(*got), cmp_u64);
	qsort(want, (size_t)n, sizeof(*want), cmp_u64);
	for (int i = 0; i < n; i++)
		assert_true(got[i] == want[i]);
}

/* A page of new KV in seq: appended, its frame written through the (new) pool mapping. */
static void page_roundtrip(kvmm_client_t *c)
{
	uint32_t tpp = kvmm_tokens_per_page(c), t[64];
	int32_t row[4];
	uint64_t s;
	char *p;

	itest_tokens(t, tpp, 77);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_seq_append(c, s, t, tpp, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &s, 1, row, 4), 0);
	assert_true(row[0] >= 0);
	p = kvmm_frame_addr(c, (uint32_t)row[0]);
	assert_non_null(p);
	memset(p, 0x5a, kvmm_page_size(c));
	assert_int_equal(p[kvmm_page_size(c) - 1], 0x5a);
	assert_int_equal(kvmm_seq_free(c, s), 0);
}

/*
 * The daemon killed with -9: one GONE event, -ENOTCONN from every call at once, then a
 * reattach that lists the sequences the handle held however they were made.
 */
static void gone_and_back(bool crash)
{
	uint32_t tpp, t[64];
	uint64_t s[8], want[8], x;
	struct kvmm_cqe cqe[8];
	struct kvmm_sqe sqe[2];
	int32_t row[4];
	kvmm_client_t *c;
	uint64_t t0;
	int n, nw = 0;

	itest_need_daemon();
	c = attach_flags(0);
	tpp = kvmm_tokens_per_page(c);
	itest_tokens(t, 2 * tpp, 5);
	assert_int_equal(kvmm_seq_create(c, 0, &s[0]), 0);
	assert_int_equal(kvmm_seq_append(c, s[0], t, 2 * tpp, NULL), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &s[1]), 0);
	assert_int_equal(kvmm_seq_fork(c, s[0], KVMM_SEQ_ALL_TOKENS, &s[2]), 0);
	assert_int_equal(kvmm_seq_prompt(c, t, tpp + 3, 0, &s[3], NULL, NULL, 0), 0);
	assert_int_equal(kvmm_seq_free(c, s[1]), 0);
	/* asynchronously: one created, one freed */
	memset(sqe, 0, sizeof(sqe));
	sqe[0].op = KVMM_SQE_SEQ_CREATE;
	sqe[0].user_data = 1;
	sqe[1].op = KVMM_SQE_SEQ_FREE;
	sqe[1].seq = s[3];
	sqe[1].user_data = 2;
	assert_int_equal(kvmm_submit(c, sqe, 2), 2);
	assert_int_equal(kvmm_complete(c, cqe, 2, 2), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(cqe[i].res, 0);
		if (cqe[i].user_data == 1)
			s[4] = cqe[i].seq;
	}
	want[nw++] = s[0];
	want[nw++] = s[2];
	want[nw++] = s[4];
	assert_int_equal(kvmm_connected(c), 1);

	halt(crash);
	t0 = now_ms();
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ENOTCONN);
	assert_true(now_ms() - t0 < 2000);
	assert_int_equal(kvmm_connected(c), 0);
	/* said once, as an event */
	n = kvmm_complete(c, cqe, 8, 0);
	assert_int_equal(n, 1);
	assert_int_equal(cqe[0].flags, KVMM_CQE_F_EVENT | KVMM_CQE_F_GONE);
	assert_int_equal(cqe[0].res, -ENOTCONN);
	/* and never again; every kind of call fails at once */
	assert_int_equal(kvmm_seq_append(c, s[0], t, tpp, NULL), -ENOTCONN);
	assert_int_equal(kvmm_block_table(c, s, 1, row, 4), -ENOTCONN);
	assert_int_equal(kvmm_submit(c, sqe, 1), -ENOTCONN);
	assert_int_equal(kvmm_seq_free(c, s[0]), -ENOTCONN);
	assert_int_equal(kvmm_complete(c, cqe, 8, 0), -ENOTCONN);
	assert_true(now_ms() - t0 < 3000);
	/* not back yet: one try, -ETIMEDOUT */
	assert_int_equal(kvmm_reattach(c, 0), -ETIMEDOUT);

	start();
	/* s[0] was freed while the daemon was gone: given up, not lost */
	want[0] = want[--nw];
	t0 = now_ms();
	n = kvmm_reattach(c, 10000);
	print_message("%s: kvmm_reattach to the restarted daemon took %llu ms, %d lost\n",
		      crash ? "kill -9" : "clean stop", (unsigned long long)(now_ms() - t0), n);
	assert_int_equal(n, nw);
	assert_lost(c, want, nw);
	assert_int_equal(kvmm_connected(c), 1);
	assert_int_equal(kvmm_reattach(c, 0), -EISCONN);
	assert_int_equal(kvmm_complete(c, cqe, 8, 0), 0); /* the old session's queue is gone */
	page_roundtrip(c);
	kvmm_detach(c);
}

static void test_gone_kill9(void **state)
{
	(void)state;
	gone_and_back(true);
}

static void test_gone_clean_stop(void **state)
{
	(void)state;
	gone_and_back(false);
}

/* A daemon that never comes back: -ETIMEDOUT after about the timeout, then detach. */
static void test_never_back(void **state)
{
	kvmm_client_t *c, *c2;
	uint64_t s, t0, dt;

	(void)state;
	itest_need_daemon();
	c = attach_flags(0);
	c2 = attach_flags(0);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	assert_int_equal(kvmm_reattach(c, 100), -EISCONN);
	halt(true);
	t0 = now_ms();
	assert_int_equal(kvmm_reattach(c, 300), -ETIMEDOUT);
	dt = now_ms() - t0;
	print_message("reattach to no daemon: -ETIMEDOUT after %llu ms (timeout 300)\n",
		      (unsigned long long)dt);
	assert_true(dt >= 290 && dt < 3000);
	assert_int_equal(kvmm_connected(c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &s), -ENOTCONN);
	assert_int_equal(kvmm_reattach(c, 50), -ETIMEDOUT); /* again: still a clear error */
	kvmm_detach(c);
	start();
	/* the other handle never noticed until now; it reattaches with nothing lost */
	assert_int_equal(kvmm_reattach(c2, 5000), 0);
	page_roundtrip(c2);
	kvmm_detach(c2);
}

struct blocked_call {
	kvmm_client_t *c;
	int err;
};

static void *blocked_create(void *arg)
{
	struct blocked_call *b = arg;
	uint64_t s;

	b->err = kvmm_seq_create(b->c, 0, &s);
	return NULL;
}

/* A call waiting on the rings (or the socket) when the daemon dies returns -ENOTCONN. */
static void test_blocked_call(void **state)
{
	struct blocked_call b = {0};
	kvmm_client_t *c;
	pthread_t th;
	uint64_t t0;

	(void)state;
	itest_need_daemon();
	c = attach_flags(0);
	b.c = c;
	stop_daemon();
	assert_int_equal(pthread_create(&th, NULL, blocked_create, &b), 0);
	itest_sleep_ms(100);
	t0 = now_ms();
	halt(true);
	assert_int_equal(pthread_join(th, NULL), 0);
	print_message("a call blocked on a dead daemon returned %d after %llu ms\n", b.err,
		      (unsigned long long)(now_ms() - t0));
	assert_int_equal(b.err, -ENOTCONN);
	start();
	assert_int_equal(kvmm_reattach(c, 5000), 0); /* the create never completed: nothing */
	page_roundtrip(c);
	kvmm_detach(c);
}

/* KVMM_ATTACH_REATTACH: calls fail with -ENOTCONN while it is gone, -ESTALE when it is back. */
static void test_auto(void **state)
{
	kvmm_client_t *c;
	uint64_t s, x, want[1];
	int err, tries = 0;

	(void)state;
	itest_need_daemon();
	c = attach_flags(KVMM_ATTACH_REATTACH);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	halt(true);
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ENOTCONN);
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ENOTCONN);
	start();
	do {
		err = kvmm_seq_create(c, 0, &x);
		if (err == -ENOTCONN)
			itest_sleep_ms(20); /* the backoff between tries */
	} while (err == -ENOTCONN && ++tries < 200);
	assert_int_equal(err, -ESTALE);
	want[0] = s;
	assert_lost(c, want, 1);
	assert_int_equal(kvmm_connected(c), 1);
	page_roundtrip(c);
	kvmm_detach(c);
}

/* ---- a stopped daemon (SIGSTOP) ------------------------------------------------------------ */

/*
 * SIGSTOP kvmmd and wait until every one of its threads is stopped: kill() returns before a
 * thread spinning on another CPU (a ring worker) has stopped, and it may answer one more call.
 */
/* A test that failed between SIGSTOP and SIGCONT must not leave the next one hanging. */
static int resume_daemon(void **state)
{
	(void)state;
	if (itest_have_daemon && itest_d.pid > 0)
		kill(itest_d.pid, SIGCONT);
	return 0;
}

static void stop_daemon(void)
{
	char path[32], buf[512];

	assert_int_equal(kill(itest_d.pid, SIGSTOP), 0);
	snprintf(path, sizeof(path), "/proc/%d/task", (int)itest_d.pid);
	for (int tries = 0; tries < 500; tries++) {
		struct dirent *de;
		bool all = true;
		DIR *dir = opendir(path);

		assert_non_null(dir);
		while (all && (de = readdir(dir))) {
			char stat[320]; /* path, a tid, "/stat" */
			FILE *f;
			char *p;

			if (de->d_name[0] == '.')
				continue;
			snprintf(stat, sizeof(stat), "%s/%s/stat", path, de->d_name);
			f = fopen(stat, "r");
			if (!f)
				continue;
			p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
			fclose(f);
			if (p && p[1] == ' ' && p[2] != 'T' && p[2] != 't')
				all = false;
		}
		closedir(dir);
		if (all)
			return;
		itest_sleep_ms(2);
	}
	fail_msg("kvmmd did not stop");
}

#define STALL_MS 400

static kvmm_client_t *attach_deadline(uint32_t flags, int32_t deadline_ms, bool socket_only)
{
	struct kvmm_attach_opts o = {.flags = flags, .daemon_timeout_ms = deadline_ms};
	kvmm_client_t *c = NULL;

	if (socket_only)
		setenv("KVMM_NO_RINGS", "1", 1);
	assert_int_equal(kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &o, &c), 0);
	unsetenv("KVMM_NO_RINGS");
	assert_int_equal(kvmm_has_rings(c), !socket_only);
	return c;
}

struct timed_call {
	kvmm_client_t *c;
	uint64_t ms;
	int err;
};

static void *timed_create(void *arg)
{
	struct timed_call *b = arg;
	uint64_t s, t0 = now_ms();

	b->err = kvmm_seq_create(b->c, 0, &s);
	b->ms = now_ms() - t0;
	return NULL;
}

/* After a stall: -ETIMEDOUT at once, the GONE event says -ETIMEDOUT, the cause names kvmmd. */
static void assert_gave_up(kvmm_client_t *c)
{
	struct kvmm_cqe cqe[8];
	char why[256], pid[32];
	uint64_t x;
	int n, gone = 0;

	assert_int_equal(kvmm_connected(c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ETIMEDOUT);
	n = kvmm_complete(c, cqe, 8, 0);
	for (int i = 0; i < n; i++)
		if ((cqe[i].flags & KVMM_CQE_F_EVENT) && (cqe[i].flags & KVMM_CQE_F_GONE)) {
			assert_int_equal(cqe[i].res, -ETIMEDOUT);
			gone++;
		}
	assert_int_equal(gone, 1);
	assert_int_equal(kvmm_conn_error(c, why, sizeof(why)), -ETIMEDOUT);
	snprintf(pid, sizeof(pid), "pid %d", (int)itest_d.pid);
	print_message("cause: %s\n", why);
	assert_non_null(strstr(why, pid));
	assert_non_null(strstr(why, "stopped"));
}

/*
 * kvmmd stopped with SIGSTOP while clients wait on the rings and on the socket: each call
 * returns -ETIMEDOUT about the deadline later (not never), the cause names the stopped
 * daemon; a reattach while it is still stopped times out too; after SIGCONT kvmm_reattach
 * works, reports the sequences the session had (the daemon freed them), and the handle works.
 */
static void test_stopped_daemon(void **state)
{
	struct timed_call b[2] = {0};
	kvmm_client_t *c[2];
	uint64_t s[2], want[1], t0, dt;
	pthread_t th[2];
	char why[256];

	(void)state;
	itest_need_daemon();
	c[0] = attach_deadline(0, STALL_MS, false);
	c[1] = attach_deadline(0, STALL_MS, true);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(kvmm_seq_create(c[i], 0, &s[i]), 0);
		b[i].c = c[i];
	}
	stop_daemon();
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, timed_create, &b[i]), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		print_message(
			"%s: a call to a stopped kvmmd returned %d after %llu ms (deadline %d)\n",
			i ? "socket" : "rings", b[i].err, (unsigned long long)b[i].ms, STALL_MS);
		assert_int_equal(b[i].err, -ETIMEDOUT);
		assert_true(b[i].ms >= STALL_MS - 20 && b[i].ms < STALL_MS + 3000);
		assert_gave_up(c[i]);
	}
	/* still stopped: a reattach gets no answer either, and says so */
	t0 = now_ms();
	assert_int_equal(kvmm_reattach(c[0], 300), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt < 3000);
	assert_int_equal(kvmm_conn_error(c[0], why, sizeof(why)), -ETIMEDOUT);
	assert_non_null(strstr(why, "did not answer"));
	assert_int_equal(kill(itest_d.pid, SIGCONT), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(kvmm_reattach(c[i], 5000), 1);
		want[0] = s[i];
		assert_lost(c[i], want, 1);
		assert_int_equal(kvmm_conn_error(c[i], NULL, 0), 0);
		page_roundtrip(c[i]);
		kvmm_detach(c[i]);
	}
}

/* The same with KVMM_ATTACH_REATTACH: -ETIMEDOUT, -ENOTCONN while stopped, -ESTALE after. */
static void test_stopped_auto(void **state)
{
	kvmm_client_t *c;
	uint64_t s, x, want[1], t0;
	int err, tries = 0;

	(void)state;
	itest_need_daemon();
	c = attach_deadline(KVMM_ATTACH_REATTACH, STALL_MS, false);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	stop_daemon();
	t0 = now_ms();
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ETIMEDOUT);
	assert_true(now_ms() - t0 < STALL_MS + 3000);
	/* an automatic attempt while it is stopped: no answer in its wait, not back yet */
	assert_int_equal(kvmm_seq_create(c, 0, &x), -ENOTCONN);
	assert_int_equal(kvmm_conn_error(c, NULL, 0), -ETIMEDOUT);
	assert_int_equal(kill(itest_d.pid, SIGCONT), 0);
	do {
		err = kvmm_seq_create(c, 0, &x);
		if (err == -ENOTCONN)
			itest_sleep_ms(20);
	} while (err == -ENOTCONN && ++tries < 200);
	assert_int_equal(err, -ESTALE);
	want[0] = s;
	assert_lost(c, want, 1);
	page_roundtrip(c);
	kvmm_detach(c);
}

/* A deadline of -1 waits as long as it takes: the call completes after SIGCONT. */
static void test_stopped_no_deadline(void **state)
{
	struct timed_call b = {0};
	kvmm_client_t *c;
	pthread_t th;

	(void)state;
	itest_need_daemon();
	c = attach_deadline(0, -1, false);
	b.c = c;
	stop_daemon();
	assert_int_equal(pthread_create(&th, NULL, timed_create, &b), 0);
	itest_sleep_ms(STALL_MS + 200);
	assert_int_equal(kill(itest_d.pid, SIGCONT), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(b.err, 0);
	assert_true(b.ms >= STALL_MS);
	assert_int_equal(kvmm_connected(c), 1);
	kvmm_detach(c);
}

/* kvmmctl --socket SOCK @args... (itest_ctl); skipped if not built. */
static int ctl_run(char **out, const char *a, const char *b, const char *c)
{
	if (access(itest_ctl_bin(), X_OK)) {
		print_message("%s not built: skipped\n", itest_ctl_bin());
		skip();
	}
	return itest_ctl(out, a, b, c, NULL);
}

/* @why names the stopped daemon by its pid. */
static void assert_why_stopped(const char *why)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "kvmmd (pid %d)", (int)itest_d.pid);
	print_message("why: %s\n", why);
	assert_non_null(strstr(why, pid));
	assert_non_null(strstr(why, "stopped"));
}

/*
 * Admin handles have the clients' deadline: with kvmmd stopped, a read verb, a write verb and
 * an open each fail with -ETIMEDOUT about the deadline later, kvmm_admin_why() naming the
 * stopped daemon; kvmmctl --timeout (and $KVMM_DAEMON_TIMEOUT_MS) exits 3 with one line saying
 * so, instead of hanging; after SIGCONT the same handle works again.
 */
static void test_stopped_admin(void **state)
{
	kvmm_admin_t *a, *b = NULL;
	char *text = NULL, *out = NULL;
	uint64_t t0, dt, n;
	int rc, i;

	(void)state;
	itest_need_daemon();
	assert_int_equal(kvmm_admin_open_timeout(itest_d.sock, STALL_MS, &a), 0);
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text), 0);
	free(text);
	text = NULL;
	stop_daemon();

	t0 = now_ms();
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text), -ETIMEDOUT);
	dt = now_ms() - t0;
	print_message("read verb: -ETIMEDOUT after %llu ms (deadline %d)\n", (unsigned long long)dt,
		      STALL_MS);
	assert_true(dt >= STALL_MS - 20 && dt < STALL_MS + 3000);
	assert_null(text);
	assert_why_stopped(kvmm_admin_why());
	/* a write verb waits past the deadline only for a daemon that runs */
	t0 = now_ms();
	assert_int_equal(kvmm_admin_reclaim(a, 1, 0, &n), -ETIMEDOUT);
	assert_true(now_ms() - t0 < STALL_MS + 3000);
	assert_why_stopped(kvmm_admin_why());
	/* a new handle: HELLO unanswered */
	t0 = now_ms();
	assert_int_equal(kvmm_admin_open_timeout(itest_d.sock, STALL_MS, &b), -ETIMEDOUT);
	assert_true(now_ms() - t0 < STALL_MS + 3000);
	assert_null(b);
	assert_non_null(strstr(kvmm_admin_why(), "no answer to HELLO"));
	assert_why_stopped(kvmm_admin_why());

	/* kvmmctl: --timeout, then $KVMM_DAEMON_TIMEOUT_MS */
	t0 = now_ms();
	rc = ctl_run(&out, "--timeout", "400", "status");
	dt = now_ms() - t0;
	print_message("kvmmctl --timeout 400 status: %d after %llu ms: %s", rc,
		      (unsigned long long)dt, out);
	assert_int_equal(rc, 3);
	assert_true(dt < 400 + 3000);
	assert_why_stopped(out);
	assert_non_null(strchr(out, '\n'));
	assert_null(strchr(strchr(out, '\n') + 1, '\n')); /* one line */
	free(out);
	setenv("KVMM_DAEMON_TIMEOUT_MS", "400", 1);
	t0 = now_ms();
	rc = ctl_run(&out, "vmstat", NULL, NULL);
	unsetenv("KVMM_DAEMON_TIMEOUT_MS");
	assert_int_equal(rc, 3);
	assert_true(now_ms() - t0 < 400 + 3000);
	assert_why_stopped(out);
	free(out);

	assert_int_equal(kill(itest_d.pid, SIGCONT), 0);
	/* the same handle works again (a loaded machine may take a deadline to resume it) */
	for (rc = -ETIMEDOUT, i = 0; rc == -ETIMEDOUT && i < 20; i++)
		rc = kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(text, "Uptime"));
	free(text);
	kvmm_admin_close(a);
	assert_int_equal(ctl_run(&out, "--timeout", "5000", "status"), 0);
	free(out);
}

/*
 * An engine on the asynchronous rings alone (kvmm_submit + kvmm_complete, no synchronous
 * call) with KVMM_ATTACH_REATTACH: kvmm_complete delivers the GONE event, then fails with
 * -ENOTCONN while the daemon is away and with -ESTALE when it finds it back; the lost list
 * is there and submitting works on the new daemon.
 */
static void test_complete_only_auto(void **state)
{
	struct kvmm_cqe cqe[8];
	struct kvmm_sqe sqe;
	kvmm_client_t *c;
	uint64_t s, want[1];
	int n, err = 0, tries = 0, gone = 0;

	(void)state;
	itest_need_daemon();
	c = attach_flags(KVMM_ATTACH_REATTACH);
	memset(&sqe, 0, sizeof(sqe));
	sqe.op = KVMM_SQE_SEQ_CREATE;
	sqe.user_data = 7;
	assert_int_equal(kvmm_submit(c, &sqe, 1), 1);
	assert_int_equal(kvmm_complete(c, cqe, 1, 1), 1);
	assert_int_equal(cqe[0].res, 0);
	s = cqe[0].seq;
	halt(true);
	/* reaping only: the loss comes as the event, then -ENOTCONN */
	for (tries = 0; tries < 100 && !gone; tries++) {
		n = kvmm_complete(c, cqe, 8, 0);
		for (int i = 0; i < n; i++)
			gone += (cqe[i].flags & KVMM_CQE_F_GONE) != 0;
		if (!gone)
			itest_sleep_ms(10);
	}
	assert_int_equal(gone, 1);
	assert_int_equal(kvmm_complete(c, cqe, 8, 0), -ENOTCONN);
	start();
	tries = 0;
	do {
		err = kvmm_complete(c, cqe, 8, 0);
		if (err == -ENOTCONN)
			itest_sleep_ms(20);
	} while (err == -ENOTCONN && ++tries < 200);
	assert_int_equal(err, -ESTALE);
	want[0] = s;
	assert_lost(c, want, 1);
	assert_int_equal(kvmm_connected(c), 1);
	/* and the rings work on the new daemon */
	assert_int_equal(kvmm_submit(c, &sqe, 1), 1);
	assert_int_equal(kvmm_complete(c, cqe, 1, 1), 1);
	assert_int_equal(cqe[0].res, 0);
	assert_int_equal(kvmm_complete(c, cqe, 8, 0), 0);
	kvmm_detach(c);
}

/*
 * A stand-in for a daemon that answers and refuses: it listens at the socket and answers
 * every HELLO with -EPROTO (another ABI), until told to stop.
 */
struct refuser {
	int fd;
	volatile int stop;
	unsigned int nr;
};

static void *refuser_run(void *arg)
{
	struct refuser *r = arg;

	while (!r->stop) {
		struct kvmm_msg_hdr req, rep;
		int c = accept(r->fd, NULL, NULL);

		if (c < 0) {
			itest_sleep_ms(5);
			continue;
		}
		if (recv(c, &req, sizeof(req), 0) == (ssize_t)sizeof(req)) {
			kvmm_msg_hdr_init_reply(&rep, &req, sizeof(rep), -EPROTO);
			send(c, &rep, sizeof(rep), MSG_NOSIGNAL);
			r->nr++;
		}
		close(c);
	}
	return NULL;
}

static void refuser_start(struct refuser *r, pthread_t *th)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	memset(r, 0, sizeof(*r));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", itest_d.sock);
	unlink(itest_d.sock);
	r->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(r->fd >= 0);
	assert_int_equal(bind(r->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(r->fd, 16), 0);
	assert_int_equal(pthread_create(th, NULL, refuser_run, r), 0);
}

static void refuser_stop(struct refuser *r, pthread_t th)
{
	r->stop = 1;
	assert_int_equal(pthread_join(th, NULL), 0);
	close(r->fd);
	unlink(itest_d.sock);
}

/*
 * Why a reattach fails, said: no socket at all (ENOENT, every try), then a daemon that
 * answers and refuses (-EPROTO).  kvmm_reattach's -ETIMEDOUT comes with the last attempt's
 * cause (kvmm_conn_error), a refusal is returned as itself; the automatic mode's calls
 * return -ENOTCONN while nobody is there (the cause readable) and the refusal's errno
 * itself when a daemon refuses, not -ENOTCONN.
 */
static void test_reattach_cause(void **state)
{
	struct refuser r;
	kvmm_client_t *c, *a;
	pthread_t th;
	char why[256];
	uint64_t x;
	int err, tries = 0;

	(void)state;
	itest_need_daemon();
	c = attach_flags(0);
	a = attach_flags(KVMM_ATTACH_REATTACH);
	assert_int_equal(kvmm_conn_error(c, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	halt(true);
	unlink(itest_d.sock); /* no socket: connect says ENOENT, try after try */
	assert_int_equal(kvmm_reattach(c, 150), -ETIMEDOUT);
	err = kvmm_conn_error(c, why, sizeof(why));
	print_message("no socket: %d %s\n", err, why);
	assert_int_equal(err, -ENOENT);
	assert_non_null(strstr(why, itest_d.sock));
	assert_int_equal(kvmm_seq_create(a, 0, &x), -ENOTCONN); /* the loss itself */
	itest_sleep_ms(20);
	assert_int_equal(kvmm_seq_create(a, 0, &x), -ENOTCONN); /* not back: retryable */
	assert_int_equal(kvmm_conn_error(a, NULL, 0), -ENOENT);

	refuser_start(&r, &th);
	assert_int_equal(kvmm_reattach(c, 2000), -EPROTO);
	err = kvmm_conn_error(c, why, sizeof(why));
	print_message("refused: %d %s\n", err, why);
	assert_int_equal(err, -EPROTO);
	assert_non_null(strstr(why, "refused HELLO"));
	do {
		err = kvmm_seq_create(a, 0, &x);
		if (err == -ENOTCONN)
			itest_sleep_ms(20);
	} while (err == -ENOTCONN && ++tries < 200);
	assert_int_equal(err, -EPROTO);
	assert_int_equal(kvmm_conn_error(a, NULL, 0), -EPROTO);
	assert_int_equal(kvmm_connected(a), 0);
	refuser_stop(&r, th);
	assert_true(r.nr >= 2);

	start();
	assert_int_equal(kvmm_reattach(c, 5000), 0);
	assert_int_equal(kvmm_conn_error(c, NULL, 0), 0);
	tries = 0;
	do {
		err = kvmm_seq_create(a, 0, &x);
		if (err == -ENOTCONN || err == -EPROTO)
			itest_sleep_ms(20);
	} while ((err == -ENOTCONN || err == -EPROTO) && ++tries < 200);
	assert_int_equal(err, -ESTALE);
	page_roundtrip(c);
	page_roundtrip(a);
	kvmm_detach(c);
	kvmm_detach(a);
}

/*
 * The daemon comes back with a bigger pool for the namespace: the handle maps the new one
 * (another address range), reports the new size, and pages of it are usable.
 */
static void test_pool_resized(void **state)
{
	static const char *bigger[] = {"--swap",	   sd.filearg,	  "--swap",
				       "warm_restart=yes", "--namespace", "alpha:512",
				       "--frames",	   "4608",	  NULL};
	kvmm_client_t *c;
	uint64_t s, want[1];
	char *p;

	(void)state;
	itest_need_daemon();
	c = attach_flags(0);
	assert_int_equal(kvmm_nr_frames(c), ITEST_NS_FRAMES);
	assert_int_equal(kvmm_seq_create(c, 0, &s), 0);
	halt(true);
	assert_int_equal(itest_daemon_start(&itest_d, bigger), 0);
	assert_int_equal(kvmm_reattach(c, 10000), 1);
	want[0] = s;
	assert_lost(c, want, 1);
	assert_int_equal(kvmm_nr_frames(c), 512);
	p = kvmm_frame_addr(c, 511);
	assert_non_null(p);
	assert_int_equal(p[0] | p[kvmm_page_size(c) - 1], 0); /* a free frame of the new pool */
	page_roundtrip(c);
	/* and back to the usual size for the next tests */
	halt(false);
	start();
	assert_int_equal(kvmm_reattach(c, 10000), 0);
	assert_int_equal(kvmm_nr_frames(c), ITEST_NS_FRAMES);
	page_roundtrip(c);
	kvmm_detach(c);
}

/* ---- the closing test: 4 clients under load, kill -9, restart ----------------------------- */

#define NR_CLIENTS 4
#define SYS_PAGES 4	/* a system prompt every client's requests start with */
#define OWN_PAGES 3	/* then the client's own full pages */
#define TAIL_TOKENS 5	/* and a partial page */
#define WARM_REQUESTS 4 /* requests done (sealed, freed) before the cache goes to the file */
#define HELD 2		/* requests each client keeps (not freed) through the crash */
#define LOAD_INFLIGHT 3 /* requests in flight at once under load */
#define MAX_REQ 4096
#define MAX_BLOCKS 16

/* Tokens of request r of client i: sys prompt (warm-up or load), own pages, a partial page. */
static uint32_t request_tokens(uint32_t *t, uint32_t tpp, unsigned int i, unsigned int r)
{
	uint32_t nsys = SYS_PAGES * tpp, n = (SYS_PAGES + OWN_PAGES) * tpp + TAIL_TOKENS;

	/*
	 * The held requests and the load use another system prompt: nothing maps the warm-up's
	 * pages when they go to the file, so whole prefixes are there (a page is restored only
	 * under its restored parent), and the load does not bring them back before the crash.
	 */
	itest_tokens(t, nsys, r < WARM_REQUESTS ? 900 : 901);
	itest_tokens(t + nsys, n - nsys, 1000 + i * MAX_REQ + r);
	return n;
}

/* The KV of block b: a function of the tokens up to its end (as a model's would be). */
static void page_bytes(uint8_t *p, size_t size, const uint32_t *t, uint32_t upto)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t k = 0; k < upto; k++)
		h = (h ^ t[k]) * 0x100000001b3ull;
	for (size_t k = 0; k < size; k += 8) {
		h ^= h << 13;
		h ^= h >> 7;
		h ^= h << 17;
		memcpy(p + k, &h, 8);
	}
}

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t k = 0; k < n; k++)
		h = (h ^ p[k]) * 0x100000001b3ull;
	return h;
}

struct req {
	unsigned int r;
	bool done; /* run to the end: digest is its output */
	uint64_t seq;
	uint64_t digest;
};

/*
 * Run request r: create, look the prefix up, append the rest, check the bytes of the pages
 * that hit, write the others, seal the full pages; *digest is the hash of all its KV (the
 * "output"). The sequence is left live in *seq (0 if none was made). 0, -EIO for a page
 * whose bytes are wrong, or the call's error.
 */
static int run_request(kvmm_client_t *c, unsigned int i, unsigned int r, uint64_t *seq,
		       uint64_t *digest, uint64_t *nr_hit)
{
	uint32_t tpp = kvmm_tokens_per_page(c), n, nb, t[(SYS_PAGES + OWN_PAGES + 1) * 64];
	size_t ps = kvmm_page_size(c);
	uint8_t *want = malloc(ps);
	int32_t row[MAX_BLOCKS];
	uint64_t hit = 0, h = 0xcbf29ce484222325ull;
	int err;

	*seq = 0;
	if (!want)
		return -ENOMEM;
	n = request_tokens(t, tpp, i, r);
	nb = (n + tpp - 1) / tpp;
	err = kvmm_seq_create(c, 0, seq);
	if (!err)
		err = kvmm_prefix_lookup(c, *seq, t, n, &hit);
	if (!err)
		err = kvmm_seq_append(c, *seq, t + hit, (uint32_t)(n - hit), NULL);
	if (!err)
		err = kvmm_block_table(c, seq, 1, row, MAX_BLOCKS);
	for (uint32_t b = 0; !err && b < nb; b++) {
		uint8_t *p = kvmm_frame_addr(c, (uint32_t)row[b]);
		uint32_t upto = (b + 1) * tpp < n ? (b + 1) * tpp : n;

		page_bytes(want, ps, t, upto);
		if (!p) {
			err = -EINVAL;
		} else if (b < hit / tpp) {
			if (memcmp(p, want, ps)) {
				fprintf(stderr, "client %u: request %u block %u: wrong bytes\n", i,
					r, b);
				err = -EIO;
			}
		} else {
			memcpy(p, want, ps);
		}
		if (!err)
			h = fnv(h, p, ps);
	}
	if (!err)
		err = kvmm_seal(c, *seq, 0, 0);
	free(want);
	*digest = h;
	if (nr_hit)
		*nr_hit = hit;
	return err;
}

static bool gone_err(int err)
{
	return err == -ENOTCONN || err == -ESTALE;
}

/*
 * Reconnect after the daemon went away: explicitly (kvmm_reattach) or by calling until the
 * automatic reattach says -ESTALE. The lost list must be exactly the live requests; each is
 * recomputed and must give the digest it had. 0 or -1 (a message says why).
 */
static int client_recover(kvmm_client_t *c, unsigned int i, bool automatic, struct req *live,
			  unsigned int nr_live)
{
	uint64_t lost[64], x, seq, digest;
	int n, err;

	if (automatic) {
		uint64_t t0 = now_ms();

		do {
			err = kvmm_seq_create(c, 0, &x);
			if (err == -ENOTCONN)
				itest_sleep_ms(10);
		} while (err == -ENOTCONN && now_ms() - t0 < 30000);
		if (err != -ESTALE) {
			fprintf(stderr, "client %u: automatic reattach: %d\n", i, err);
			return -1;
		}
		n = kvmm_lost_seqs(c, NULL, 0);
	} else {
		n = kvmm_reattach(c, 30000);
	}
	if (n < 0 || (unsigned int)n != nr_live || kvmm_lost_seqs(c, lost, 64) != n) {
		fprintf(stderr, "client %u: reattach: %d lost, %u live\n", i, n, nr_live);
		return -1;
	}
	for (unsigned int k = 0; k < nr_live; k++) {
		bool found = false;

		for (int j = 0; j < n; j++)
			found |= lost[j] == live[k].seq;
		if (!found) {
			fprintf(stderr, "client %u: seq %llu not in the lost list\n", i,
				(unsigned long long)live[k].seq);
			return -1;
		}
	}
	/* recompute what was lost: the same bytes */
	for (unsigned int k = 0; k < nr_live; k++) {
		err = run_request(c, i, live[k].r, &seq, &digest, NULL);
		if (err || (live[k].done && digest != live[k].digest)) {
			fprintf(stderr, "client %u: recompute of request %u: %d, digest %s\n", i,
				live[k].r, err, digest == live[k].digest ? "same" : "differs");
			return -1;
		}
		if (kvmm_seq_free(c, seq))
			return -1;
	}
	return 0;
}

/*
 * One client process: warm-up requests (sealed and freed) and HELD kept live, then (after
 * the parent moved the cache to the swap file) requests under load until the daemon dies;
 * then reconnect, recompute, and replay the warm-up requests, which must hit their prefixes on
 * the file tier with the same bytes. Writes "hits N" to out. Exit 0 or 1.
 */
static int client_main(unsigned int i, int go_fd, int out_fd)
{
	bool automatic = i % 2;
	uint64_t warm[WARM_REQUESTS], seq, digest, hit, hits = 0;
	struct req live[HELD + LOAD_INFLIGHT + 1];
	unsigned int nr_live = 0, r;
	kvmm_client_t *c;
	char buf[64];
	int err, len;
	struct kvmm_attach_opts o = {.flags = automatic ? KVMM_ATTACH_REATTACH : 0};

	if (kvmm_attach_ex(itest_d.sock, ITEST_NS_A, &itest_fmt, &o, &c))
		return 1;
	for (r = 0; r < WARM_REQUESTS; r++) {
		if (run_request(c, i, r, &seq, &warm[r], NULL) || kvmm_seq_free(c, seq))
			return 1;
	}
	for (; r < WARM_REQUESTS + HELD; r++) {
		live[nr_live] = (struct req){.r = r};
		if (run_request(c, i, r, &live[nr_live].seq, &live[nr_live].digest, NULL))
			return 1;
		live[nr_live++].done = true;
	}
	if (write(out_fd, "A", 1) != 1 || read(go_fd, buf, 1) != 1)
		return 1;
	/* under load until the daemon dies */
	for (err = 0; !err; r++) {
		struct req *q = &live[nr_live];

		if (r >= MAX_REQ)
			return 1;
		*q = (struct req){.r = r};
		err = run_request(c, i, r, &q->seq, &q->digest, NULL);
		q->done = !err;
		if (q->seq)
			nr_live++; /* made: lost with the daemon if it dies now */
		if (!err && nr_live > HELD + LOAD_INFLIGHT) {
			/* the oldest load request is done */
			err = kvmm_seq_free(c, live[HELD].seq);
			if (!err || gone_err(err)) {
				memmove(&live[HELD], &live[HELD + 1],
					(nr_live - HELD - 1) * sizeof(live[0]));
				nr_live--;
			}
		}
	}
	if (!gone_err(err)) {
		fprintf(stderr, "client %u: request %u under load: %s\n", i, r - 1,
			kvmm_strerror(err));
		return 1;
	}
	if (client_recover(c, i, automatic, live, nr_live))
		return 1;
	/* the warm-up requests again: prefixes from the file tier, the same bytes */
	for (r = 0; r < WARM_REQUESTS; r++) {
		err = run_request(c, i, r, &seq, &digest, &hit);
		if (err || digest != warm[r]) {
			fprintf(stderr, "client %u: replay of request %u: %d, digest %s\n", i, r,
				err, digest == warm[r] ? "same" : "differs");
			return 1;
		}
		hits += hit;
		if (kvmm_seq_free(c, seq))
			return 1;
	}
	kvmm_detach(c);
	len = snprintf(buf, sizeof(buf), "%llu lost %u\n", (unsigned long long)hits, nr_live);
	return write(out_fd, buf, (size_t)len) == len ? 0 : 1;
}

/* index_restored of alpha's file tier (SWAP: "Tier: 2 ns=alpha ..."). */
static long long index_restored(void)
{
	char *text = NULL, *line, buf[32];
	long long v = -1;

	assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_SWAP, &text), 0);
	line = strstr(text, " ns=" ITEST_NS_A " kind=nvme");
	if (line && kvmm_admin_field(line, "index_restored", buf, sizeof(buf)) > 0)
		v = strtoll(buf, NULL, 10);
	free(text);
	return v;
}

/* Frames alpha's sequences map (NAMESPACES: used). */
static long long ns_used(void)
{
	struct kvmm_admin_ns *ns = NULL;
	kvmm_admin_t *a;
	unsigned int nr = 0;
	long long used = -1;

	if (itest_admin_open(&itest_d, &a))
		return -1;
	if (!kvmm_admin_namespaces(a, ITEST_NS_A, &ns, &nr) && nr == 1)
		used = (long long)ns[0].used;
	free(ns);
	kvmm_admin_close(a);
	return used;
}

static void test_kill9_under_load(void **state)
{
	int go[NR_CLIENTS][2], out[2], status;
	pid_t pid[NR_CLIENTS], victim;
	unsigned long long hits_all = 0, lost_all = 0;
	long long restored;
	uint64_t t0;
	uint32_t tpp = 16;
	kvmm_admin_t *admin;
	uint64_t reclaimed = 0;
	char buf[256];
	size_t got = 0;
	ssize_t n;

	(void)state;
	itest_need_daemon();
	assert_int_equal(pipe(out), 0);
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		assert_int_equal(pipe(go[i]), 0);
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			close(out[0]);
			_exit(client_main(i, go[i][0], out[1]));
		}
		close(go[i][0]);
	}
	close(out[1]);
	/* every client warmed up */
	for (unsigned int i = 0; i < NR_CLIENTS; i++)
		assert_int_equal(read(out[0], buf, 1), 1);
	/* the prefix cache goes to the swap file: only it survives the daemon */
	assert_int_equal(itest_admin_open(&itest_d, &admin), 0);
	assert_int_equal(kvmm_admin_reclaim(admin, ITEST_NS_FRAMES, 0, &reclaimed), 0);
	kvmm_admin_close(admin);
	print_message("reclaim before the crash: %llu frames (sealed prefixes to the file)\n",
		      (unsigned long long)reclaimed);
	assert_true(reclaimed >= NR_CLIENTS * WARM_REQUESTS * OWN_PAGES);
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		assert_int_equal(write(go[i][1], "G", 1), 1);
		close(go[i][1]);
	}
	itest_sleep_ms(300); /* under load */
	halt(true);
	itest_sleep_ms(200);
	start();
	t0 = now_ms();
	restored = index_restored();
	/* every client reconnects, recomputes and replays */
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			itest_daemon_dump_log(&itest_d);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	print_message("%d clients reconnected, recomputed and replayed in %llu ms after the "
		      "restart\n",
		      NR_CLIENTS, (unsigned long long)(now_ms() - t0));
	while (got < sizeof(buf) - 1 && (n = read(out[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(out[0]);
	for (char *line = buf; line && *line;
	     line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		unsigned long long h;
		unsigned int l;

		if (sscanf(line, "%llu lost %u", &h, &l) == 2) {
			hits_all += h;
			lost_all += l;
		}
	}
	print_message("after kill -9: %lld sealed pages restored from the swap file; %llu "
		      "sequences lost and recomputed; replays hit %llu tokens\n",
		      restored, lost_all, hits_all);
	assert_true(lost_all >= NR_CLIENTS * HELD);
	/* the warm-up's prefixes (system prompt and own pages) are all on the file */
	assert_true(restored >= SYS_PAGES + NR_CLIENTS * WARM_REQUESTS * OWN_PAGES);
	/* and every replay hit all its full pages there, with the bytes written before */
	assert_true(hits_all ==
		    (unsigned long long)NR_CLIENTS * WARM_REQUESTS * (SYS_PAGES + OWN_PAGES) * tpp);

	/* a client killed while holding sequences leaks no page */
	assert_int_equal(pipe(out), 0);
	victim = fork();
	assert_true(victim >= 0);
	if (victim == 0) {
		kvmm_client_t *c;
		uint64_t seq, digest;

		close(out[0]);
		if (kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c))
			_exit(1);
		for (unsigned int r = 0; r < 3; r++)
			if (run_request(c, 9, MAX_REQ - 1 - r, &seq, &digest, NULL))
				_exit(1);
		if (write(out[1], "R", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(out[1]);
	assert_int_equal(read(out[0], buf, 1), 1);
	close(out[0]);
	assert_true(ns_used() > 0);
	kill(victim, SIGKILL);
	assert_int_equal(waitpid(victim, NULL, 0), victim);
	for (int tries = 0; tries < 200 && ns_used() != 0; tries++)
		itest_sleep_ms(10);
	assert_int_equal(ns_used(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* each after a test that may have failed with kvmmd stopped: SIGCONT first */
		cmocka_unit_test_setup(test_gone_kill9, resume_daemon),
		cmocka_unit_test_setup(test_gone_clean_stop, resume_daemon),
		cmocka_unit_test_setup(test_never_back, resume_daemon),
		cmocka_unit_test_setup(test_blocked_call, resume_daemon),
		cmocka_unit_test_setup(test_auto, resume_daemon),
		cmocka_unit_test_setup(test_stopped_daemon, resume_daemon),
		cmocka_unit_test_setup(test_stopped_auto, resume_daemon),
		cmocka_unit_test_setup(test_stopped_no_deadline, resume_daemon),
		cmocka_unit_test_setup(test_stopped_admin, resume_daemon),
		cmocka_unit_test_setup(test_complete_only_auto, resume_daemon),
		cmocka_unit_test_setup(test_reattach_cause, resume_daemon),
		cmocka_unit_test_setup(test_pool_resized, resume_daemon),
		cmocka_unit_test_setup(test_kill9_under_load, resume_daemon),
	};
	int ret;

	signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill the test: libkvmm must never raise one */
	ret = cmocka_run_group_tests_name("itest_reattach", tests, setup, teardown);
	return ret == 0 && itest_no_daemon ? 77 : ret;
}
