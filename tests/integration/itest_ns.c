// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_ns.c - live namespaces against the real kvmmd (issue 26): kvmmctl's
 * ns create / set / delete (admin verbs NS_CREATE, NS_SET, NS_DELETE: sizes from what the
 * pool leaves, a busy namespace refused unless --force, which shuts its client out, frames
 * given back), the namespaces table, raw record and JSON showing no limit as "-" / null
 * instead of the pool's size, and the config reload on SIGHUP: namespaces added, changed and
 * removed as the file says, a bad file logged and the old configuration kept.  The daemon is
 * started once for the group with a pool larger than its two namespaces.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

/* the pool: the two test namespaces and 1648 frames no namespace holds */
#define POOL_FRAMES 6000
#define FREE_FRAMES (POOL_FRAMES - ITEST_NS_FRAMES - ITEST_NS_B_FRAMES)
#define STR_(x) #x
#define STR(x) STR_(x)

/* The daemon's NAMESPACES record of @ns (malloc'd line), or NULL when it has none. */
static char *ns_record(const char *ns)
{
	char *out, *line = NULL, *p, needle[64];

	assert_int_equal(itest_ctl(&out, "--raw", "namespaces", NULL), 0);
	snprintf(needle, sizeof(needle), "Namespace: %s ", ns);
	p = strstr(out, needle);
	if (p)
		line = strndup(p, strcspn(p, "\n"));
	free(out);
	return line;
}

/* Whether @ns's record has " key=value". */
static bool ns_has(const char *ns, const char *kv)
{
	char *line = ns_record(ns), pat[64];
	bool yes;

	snprintf(pat, sizeof(pat), " %s", kv);
	yes = line && strstr(line, pat);
	free(line);
	return yes;
}

static void write_config(const char *text)
{
	char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/kvmmd.conf", itest_d.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* SIGHUP, then wait (up to 5 s) until @ns's record has @kv, or (kv NULL) @ns is gone. */
static bool reload_until(const char *ns, const char *kv)
{
	int i;

	assert_int_equal(kill(itest_d.pid, SIGHUP), 0);
	for (i = 0; i < 500; i++) {
		char *line = ns_record(ns);
		bool done = kv ? ns_has(ns, kv) : !line;

		free(line);
		if (done)
			return true;
		itest_sleep_ms(10);
	}
	return false;
}

static bool log_has(const char *what)
{
	char *buf = malloc(1 << 20);
	ssize_t n;
	bool yes;
	int fd;

	assert_non_null(buf);
	fd = open(itest_d.log, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, buf, (1 << 20) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	yes = strstr(buf, what) != NULL;
	free(buf);
	return yes;
}

/* ---- kvmmctl ns ---------------------------------------------------------------------- */

static void test_ns_verbs(void **state)
{
	kvmm_client_t *c;
	uint64_t sid;
	char *out;

	(void)state;
	itest_need_daemon();
	/* bad arguments: exit 2 before any daemon is asked */
	assert_int_equal(itest_ctl(&out, "ns", "create", "gamma", NULL), 2);
	assert_non_null(strstr(out, "give its size"));
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "make", "gamma", NULL), 2);
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "create", "gamma", "frames=x", NULL), 2);
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "set", "alpha", "frames=10", NULL), 2);
	assert_non_null(strstr(out, "size is fixed"));
	free(out);
	assert_int_equal(
		itest_ctl(&out, "ns", "create", "gamma", "frames=10", "priority=1001", NULL), 2);
	free(out);

	/* create: 100 frames from what the pool leaves, with its limit and protections */
	assert_int_equal(itest_ctl(&out, "ns", "create", "gamma", "frames=100", "max=80", "min=10",
				   "low=20", "priority=-3", NULL),
			 0);
	assert_non_null(strstr(out, "gamma: created"));
	free(out);
	assert_true(ns_has("gamma", "frames=100"));
	assert_true(ns_has("gamma", "limit=80"));
	assert_true(ns_has("gamma", "min=10"));
	assert_true(ns_has("gamma", "low=20"));
	assert_true(ns_has("gamma", "priority=-3"));
	assert_int_equal(itest_ctl(&out, "namespaces", NULL), 0);
	assert_non_null(strstr(out, "gamma"));
	assert_non_null(strstr(out, "MIN"));
	free(out);
	/* twice, too big, inconsistent */
	assert_int_equal(itest_ctl(&out, "ns", "create", "gamma", "frames=10", NULL), 1);
	assert_non_null(strstr(out, "exists"));
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "create", "delta", "frames=100000", NULL), 1);
	assert_non_null(strstr(out, "no room"));
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "create", "delta", "frames=10", "min=20", NULL), 1);
	assert_non_null(strstr(out, "refused"));
	free(out);

	/* a client in it: delete is refused, the namespace works */
	assert_int_equal(kvmm_attach(itest_d.sock, "gamma", &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &sid), 0);
	assert_int_equal(itest_ctl(&out, "ns", "delete", "gamma", NULL), 1);
	assert_non_null(strstr(out, "busy"));
	free(out);
	assert_true(ns_has("gamma", "clients=1"));

	/* set: no limit is "-", protections off */
	assert_int_equal(itest_ctl(&out, "ns", "set", "gamma", "max=none", "min=0", "low=0",
				   "priority=5", NULL),
			 0);
	free(out);
	assert_true(ns_has("gamma", "limit=-"));
	assert_true(ns_has("gamma", "min=-"));
	assert_true(ns_has("gamma", "priority=5"));
	assert_int_equal(itest_ctl(&out, "ns", "set", "gamma", "max=5", "min=10", NULL), 1);
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "set", "nosuch", "max=5", NULL), 1);
	assert_non_null(strstr(out, "no namespace 'nosuch'"));
	free(out);

	/* forced: the client is shut out, its namespace and frames go */
	assert_int_equal(itest_ctl(&out, "ns", "delete", "gamma", "--force", NULL), 0);
	assert_non_null(strstr(out, "gamma: deleted"));
	free(out);
	assert_null(ns_record("gamma"));
	itest_sleep_ms(50);
	assert_true(kvmm_seq_create(c, 0, &sid) < 0);
	kvmm_detach(c);
	assert_true(itest_daemon_alive(&itest_d));
	/* the pools may span more than the budget together (overcommit), one alone may not */
	{
		char arg[32];

		snprintf(arg, sizeof(arg), "frames=%d", FREE_FRAMES);
		assert_int_equal(itest_ctl(&out, "ns", "create", "delta", arg, NULL), 0);
		free(out);
		snprintf(arg, sizeof(arg), "frames=%d", POOL_FRAMES);
		assert_int_equal(itest_ctl(&out, "ns", "create", "zeta", arg, NULL), 0);
		free(out);
		snprintf(arg, sizeof(arg), "frames=%d", POOL_FRAMES + 1);
		assert_int_equal(itest_ctl(&out, "ns", "create", "eta", arg, NULL), 1);
		assert_non_null(strstr(out, "no room"));
	}
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "delete", "delta", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "delete", "zeta", NULL), 0);
	free(out);
	assert_int_equal(itest_ctl(&out, "ns", "delete", "nosuch", NULL), 1);
	assert_non_null(strstr(out, "no namespace 'nosuch'"));
	free(out);
}

/* Issue 26 defect 6: no limit shows as none, never as the pool's size. */
static void test_no_limit_shown_as_none(void **state)
{
	char *out;

	(void)state;
	itest_need_daemon();
	assert_true(ns_has(ITEST_NS_A, "limit=-"));
	assert_int_equal(itest_ctl(&out, "--json", "--ns", ITEST_NS_A, "namespaces", NULL), 0);
	assert_true(itest_json_ok(out));
	assert_non_null(strstr(out, "\"limit\":null"));
	free(out);
	assert_int_equal(itest_ctl(&out, "namespaces", NULL), 0);
	/* the table: "-" in the LIMIT column, not 256 twice */
	assert_null(strstr(out, "256       256"));
	free(out);
	assert_int_equal(itest_ctl(&out, "limit", ITEST_NS_A, "200", NULL), 0);
	free(out);
	assert_true(ns_has(ITEST_NS_A, "limit=200"));
	assert_int_equal(itest_ctl(&out, "limit", ITEST_NS_A, "none", NULL), 0);
	free(out);
	assert_true(ns_has(ITEST_NS_A, "limit=-"));
}

/* ---- SIGHUP ------------------------------------------------------------------------------ */

static void test_sighup_reload(void **state)
{
	(void)state;
	itest_need_daemon();
	/* added */
	write_config("[namespace epsilon]\nframes = 64\nmax = 32\nmin = 8\nlow = 16\n");
	assert_true(reload_until("epsilon", "limit=32"));
	assert_true(ns_has("epsilon", "frames=64"));
	assert_true(ns_has("epsilon", "min=8"));
	assert_true(ns_has("epsilon", "low=16"));
	/* the flags' namespaces stay */
	assert_true(ns_has(ITEST_NS_A, "frames=256"));
	/* changed; the old key limit is max */
	write_config("[namespace epsilon]\nframes = 64\nlimit = 40\npriority = 7\n");
	assert_true(reload_until("epsilon", "limit=40"));
	assert_true(ns_has("epsilon", "priority=7"));
	assert_true(ns_has("epsilon", "min=-"));
	/* a bad file changes nothing and says so */
	write_config("[namespace epsilon]\nframes = 64\nlimit = 40\npriority = lots\n");
	assert_int_equal(kill(itest_d.pid, SIGHUP), 0);
	for (int i = 0; i < 500 && !log_has("the configuration is unchanged"); i++)
		itest_sleep_ms(10);
	assert_true(log_has("the configuration is unchanged"));
	assert_true(ns_has("epsilon", "limit=40"));
	/* min that the pool cannot hold: refused as a whole */
	write_config("[namespace epsilon]\nframes = 64\nmin = 60000\n");
	assert_int_equal(kill(itest_d.pid, SIGHUP), 0);
	for (int i = 0; i < 500 && !log_has("min add up to"); i++)
		itest_sleep_ms(10);
	assert_true(log_has("min add up to"));
	assert_true(ns_has("epsilon", "limit=40"));
	/* removed */
	write_config("");
	assert_true(reload_until("epsilon", NULL));
	assert_true(itest_daemon_alive(&itest_d));
}

/*
 * pool_size on SIGHUP: a daemon of its own, sized by its file alone (the group's daemon has
 * --frames, which a file cannot change).  While it runs, itest_d names it (so ns_has,
 * log_has and reload_until see it); own_teardown stops it and gives the group's back.
 */
static struct itest_daemon group_d;
static pid_t own_pid;

static void own_write(const char *pool_size, const char *ns)
{
	char text[256];

	snprintf(text, sizeof(text), "[daemon]\npage_size = 16K\npool_size = %s\n%s", pool_size,
		 ns);
	write_config(text);
}

static int own_teardown(void **state)
{
	(void)state;
	if (own_pid > 0) {
		kill(own_pid, SIGTERM);
		waitpid(own_pid, NULL, 0);
		own_pid = 0;
		itest_d = group_d;
		unlink(itest_d.log);
	}
	return 0;
}

/*
 * A changed pool_size is refused as a whole on SIGHUP (logged: it needs a restart), the
 * namespaces of that file included; set back, the same file's namespaces are applied.
 */
static void test_sighup_pool_size(void **state)
{
	char conf[160], log[sizeof(itest_d.log)], sock[sizeof(itest_d.sock)];
	kvmm_admin_t *a = NULL;
	pid_t pid;
	int i;

	(void)state;
	itest_need_daemon();
	snprintf(sock, sizeof(sock), "%s/own.sock", itest_d.dir);
	snprintf(log, sizeof(log), "%s/own.log", itest_d.dir);
	group_d = itest_d;
	/* write_config writes the group's kvmmd.conf: the own daemon reads that one */
	own_write("4M", "[namespace zeta]\nframes = 64\n");
	snprintf(conf, sizeof(conf), "%s/kvmmd.conf", itest_d.dir);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0 || dup2(fd, 2) < 0 || dup2(fd, 1) < 0)
			_exit(127);
		execl(itest_d.bin, itest_d.bin, "--foreground", "--config", conf, "--socket", sock,
		      (char *)NULL);
		_exit(127);
	}
	own_pid = pid;
	memcpy(itest_d.sock, sock, sizeof(sock));
	memcpy(itest_d.log, log, sizeof(log));
	itest_d.pid = pid;
	for (i = 0; i < 500 && kvmm_admin_open(sock, &a); i++)
		itest_sleep_ms(10);
	assert_non_null(a);
	kvmm_admin_close(a);
	assert_true(ns_has("zeta", "frames=64"));

	/* 4M -> 8M, and a namespace more: nothing of it applied */
	own_write("8M", "[namespace zeta]\nframes = 64\n[namespace eta]\nframes = 32\n");
	assert_int_equal(kill(pid, SIGHUP), 0);
	for (i = 0; i < 500 && !log_has("pool_size changed"); i++)
		itest_sleep_ms(10);
	assert_true(log_has("reload: pool_size changed (256 -> 512 frames, 4 -> 8 MiB): the pool "
			    "size needs a restart; the configuration is unchanged"));
	{
		char *line = ns_record("eta");

		assert_null(line);
	}
	/* set back: applied */
	own_write("4M", "[namespace zeta]\nframes = 64\n[namespace eta]\nframes = 32\n");
	assert_true(reload_until("eta", "frames=32"));
	assert_true(itest_daemon_alive(&itest_d));
	own_teardown(NULL);
	write_config("");
}

static int setup(void **state)
{
	static const char *const extra[] = {"--frames", STR(POOL_FRAMES), NULL};

	(void)state;
	if (!itest_have_ctl("itest_ns")) {
		itest_no_daemon = true;
		return 0;
	}
	return itest_group_start(extra);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ns_verbs),
		cmocka_unit_test(test_no_limit_shown_as_none),
		cmocka_unit_test(test_sighup_reload),
		cmocka_unit_test_teardown(test_sighup_pool_size, own_teardown),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);
	failed = cmocka_run_group_tests_name("itest_ns", tests, setup, itest_group_teardown);
	if (itest_no_daemon)
		return 77;
	return failed;
}
