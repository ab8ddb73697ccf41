// SPDX-License-Identifier: MIT
/*
 * test_log.c - unit tests for include/log.h and lib/log.c: level names and parsing, level
 * filtering (stderr is pointed at a memfd with dup2 and what was written is read back), the
 * line format, errno preservation and %m, truncation of long messages, whole lines from
 * concurrent threads, and the syslog sink keeping stderr quiet.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

/* ------------------------------------------------------------------------------------ */
/* stderr capture: fd 2 goes to a memfd until capture_end() (or the teardown) */

static int saved_stderr = -1;
static int capture_fd = -1;

static void capture_start(void)
{
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(saved_stderr >= 0);
	capture_fd = memfd_create("kvmm-log-capture", 0);
	assert_true(capture_fd >= 0);
	/* O_APPEND: concurrent writers can never overwrite each other's lines */
	assert_int_equal(fcntl(capture_fd, F_SETFL, O_APPEND), 0);
	assert_true(dup2(capture_fd, STDERR_FILENO) == STDERR_FILENO);
}

static void capture_restore(void)
{
	if (saved_stderr >= 0) {
		dup2(saved_stderr, STDERR_FILENO);
		close(saved_stderr);
		saved_stderr = -1;
	}
}

/* Stop capturing and return everything written meanwhile (NUL-terminated, caller frees). */
static char *capture_end(size_t *lenp)
{
	off_t size;
	char *buf;

	capture_restore();
	size = lseek(capture_fd, 0, SEEK_END);
	assert_true(size >= 0);
	buf = malloc((size_t)size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(capture_fd, buf, (size_t)size, 0), size);
	buf[size] = '\0';
	close(capture_fd);
	capture_fd = -1;
	if (lenp)
		*lenp = (size_t)size;
	return buf;
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static int setup(void **state)
{
	(void)state;
	kvmm_log_close();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	capture_restore(); /* a failed assertion may have left stderr redirected */
	if (capture_fd >= 0) {
		close(capture_fd);
		capture_fd = -1;
	}
	kvmm_log_close();
	return 0;
}

/* ------------------------------------------------------------------------------------ */

static void test_level_from_string(void **state)
{
	static const struct {
		const char *s;
		int level;
	} cases[] = {
		{"err", KVMM_LOG_ERR},
		{"error", KVMM_LOG_ERR},
		{"ERR", KVMM_LOG_ERR},
		{"warn", KVMM_LOG_WARN},
		{"warning", KVMM_LOG_WARN},
		{"Warn", KVMM_LOG_WARN},
		{"notice", KVMM_LOG_NOTICE},
		{"info", KVMM_LOG_INFO},
		{"INFO", KVMM_LOG_INFO},
		{"debug", KVMM_LOG_DEBUG},
		{"3", KVMM_LOG_ERR},
		{"7", KVMM_LOG_DEBUG},
		{"5", KVMM_LOG_NOTICE},
		{"", -EINVAL},
		{"foo", -EINVAL},
		{"errx", -EINVAL},
		{"er", -EINVAL},
		{"debug ", -EINVAL},
		{"2", -EINVAL},
		{"8", -EINVAL},
		{"33", -EINVAL},
		{"-1", -EINVAL},
		{"crit", -EINVAL},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		assert_int_equal(kvmm_log_level_from_string(cases[i].s), cases[i].level);
	assert_int_equal(kvmm_log_level_from_string(NULL), -EINVAL);
}

static void test_level_name(void **state)
{
	(void)state;
	assert_string_equal(kvmm_log_level_name(KVMM_LOG_ERR), "err");
	assert_string_equal(kvmm_log_level_name(KVMM_LOG_WARN), "warn");
	assert_string_equal(kvmm_log_level_name(KVMM_LOG_NOTICE), "notice");
	assert_string_equal(kvmm_log_level_name(KVMM_LOG_INFO), "info");
	assert_string_equal(kvmm_log_level_name(KVMM_LOG_DEBUG), "debug");
	assert_string_equal(kvmm_log_level_name((enum kvmm_log_level)2), "?");
	assert_string_equal(kvmm_log_level_name((enum kvmm_log_level)8), "?");
	/* names round-trip through the parser */
	for (int l = KVMM_LOG_ERR; l <= KVMM_LOG_DEBUG; l++)
		assert_int_equal(
			kvmm_log_level_from_string(kvmm_log_level_name((enum kvmm_log_level)l)), l);
}

static void test_set_level(void **state)
{
	(void)state;
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_DEFAULT_LEVEL);
	assert_int_equal(kvmm_log_set_level(KVMM_LOG_DEBUG), 0);
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_DEBUG);
	assert_true(kvmm_log_enabled(KVMM_LOG_DEBUG));
	assert_int_equal(kvmm_log_set_level((enum kvmm_log_level)8), -EINVAL);
	assert_int_equal(kvmm_log_set_level((enum kvmm_log_level)2), -EINVAL);
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_DEBUG); /* unchanged */
	assert_int_equal(kvmm_log_set_level(KVMM_LOG_ERR), 0);
	assert_true(kvmm_log_enabled(KVMM_LOG_ERR));
	assert_false(kvmm_log_enabled(KVMM_LOG_WARN));

	assert_int_equal(kvmm_log_init("x", (enum kvmm_log_level)9, 0), -EINVAL);
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_ERR);
	assert_int_equal(kvmm_log_init("x", KVMM_LOG_INFO, 0), 0);
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_INFO);
	kvmm_log_close();
	assert_int_equal(kvmm_log_get_level(), KVMM_LOG_DEFAULT_LEVEL);
}

static void emit_all_levels(void)
{
	kvmm_err("m-err %d", 1);
	kvmm_warn("m-warn %d", 2);
	kvmm_notice("m-notice %d", 3);
	kvmm_info("m-info %d", 4);
	kvmm_debug("m-debug %d", 5);
}

static void test_filtering(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_WARN, 0), 0);
	capture_start();
	emit_all_levels();
	out = capture_end(NULL);
	assert_int_equal(count_lines(out), 2);
	assert_non_null(strstr(out, ": err: m-err 1\n"));
	assert_non_null(strstr(out, ": warn: m-warn 2\n"));
	assert_null(strstr(out, "m-notice"));
	assert_null(strstr(out, "m-info"));
	assert_null(strstr(out, "m-debug"));
	free(out);

	for (int level = KVMM_LOG_ERR; level <= KVMM_LOG_DEBUG; level++) {
		assert_int_equal(kvmm_log_set_level((enum kvmm_log_level)level), 0);
		capture_start();
		emit_all_levels();
		out = capture_end(NULL);
		assert_int_equal(count_lines(out), (size_t)(level - KVMM_LOG_ERR + 1));
		assert_int_equal(strstr(out, ": debug: m-debug 5\n") != NULL,
				 level == KVMM_LOG_DEBUG);
		assert_int_equal(strstr(out, ": notice: m-notice 3\n") != NULL,
				 level >= KVMM_LOG_NOTICE);
		free(out);
	}

	/* kvmm_log_write itself does not filter */
	assert_int_equal(kvmm_log_set_level(KVMM_LOG_ERR), 0);
	capture_start();
	kvmm_log_write(KVMM_LOG_DEBUG, "forced %s", "out");
	kvmm_log(KVMM_LOG_DEBUG, "filtered");
	out = capture_end(NULL);
	assert_int_equal(count_lines(out), 1);
	assert_non_null(strstr(out, ": debug: forced out\n"));
	free(out);
}

static int side_effects;

static int side_effect(void)
{
	return ++side_effects;
}

static void test_args_not_evaluated_when_filtered(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_INFO, 0), 0);
	side_effects = 0;
	capture_start();
	kvmm_debug("value %d", side_effect());
	kvmm_info("value %d", side_effect());
	out = capture_end(NULL);
	assert_int_equal(side_effects, 1);
	assert_non_null(strstr(out, "info: value 1\n"));
	free(out);
}

static void test_format(void **state)
{
	regex_t re;
	char pattern[256], *out;
	regmatch_t m[1];

	(void)state;
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_DEBUG, 0), 0);
	capture_start();
	kvmm_err("hello %d %s %.2f", 42, "world", 1.5);
	kvmm_info("newline is not doubled\n");
	kvmm_notice("%s", "");
	out = capture_end(NULL);

	snprintf(
		pattern, sizeof(pattern),
		"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z tlog\\[%ld\\]: "
		"err: hello 42 world 1\\.50\n"
		"[0-9T:.Z-]{24} tlog\\[%ld\\]: info: newline is not doubled\n"
		"[0-9T:.Z-]{24} tlog\\[%ld\\]: notice: \n$",
		(long)getpid(), (long)getpid(), (long)getpid());
	assert_int_equal(regcomp(&re, pattern, REG_EXTENDED), 0);
	if (regexec(&re, out, 1, m, 0))
		fail_msg("log output does not match:\n%s", out);
	regfree(&re);
	free(out);

	/* ident: NULL means "kvmm"; long identities are cut, not overflowed */
	assert_int_equal(kvmm_log_init(NULL, KVMM_LOG_DEBUG, 0), 0);
	capture_start();
	kvmm_err("a");
	out = capture_end(NULL);
	assert_non_null(strstr(out, "Z kvmm["));
	free(out);
	{
		char ident[200];

		memset(ident, 'i', sizeof(ident) - 1);
		ident[sizeof(ident) - 1] = '\0';
		assert_int_equal(kvmm_log_init(ident, KVMM_LOG_DEBUG, 0), 0);
		capture_start();
		kvmm_err("b");
		out = capture_end(NULL);
		ident[63] = '\0';
		assert_non_null(strstr(out, ident));
		ident[63] = 'i';
		ident[64] = '\0';
		assert_null(strstr(out, ident));
		assert_non_null(strstr(out, "]: err: b\n"));
		free(out);
	}
}

static void test_errno_and_percent_m(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_DEBUG, 0), 0);
	capture_start();
	errno = ENOENT;
	kvmm_err("open failed: %m");
	assert_int_equal(errno, ENOENT);
	errno = EBUSY;
	kvmm_debug("x");
	assert_int_equal(errno, EBUSY);
	errno = EIO;
	kvmm_log_set_level(KVMM_LOG_ERR);
	kvmm_debug("filtered");
	assert_int_equal(errno, EIO);
	out = capture_end(NULL);
	assert_non_null(strstr(out, "err: open failed: No such file or directory\n"));
	free(out);
}

static void test_truncation(void **state)
{
	char *big, *out;
	size_t len;

	(void)state;
	big = malloc(3 * KVMM_LOG_LINE_MAX);
	assert_non_null(big);
	memset(big, 'x', 3 * KVMM_LOG_LINE_MAX - 1);
	big[3 * KVMM_LOG_LINE_MAX - 1] = '\0';
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_DEBUG, 0), 0);
	capture_start();
	kvmm_err("%s", big);
	kvmm_err("after");
	out = capture_end(&len);
	assert_int_equal(count_lines(out), 2);
	/* one line of at most KVMM_LOG_LINE_MAX bytes including its newline, ending in "..." */
	{
		char *nl = strchr(out, '\n');
		size_t first = (size_t)(nl - out) + 1;

		assert_true(first <= KVMM_LOG_LINE_MAX);
		assert_true(first > KVMM_LOG_LINE_MAX - 8);
		assert_memory_equal(nl - 4, "x...", 4);
		assert_non_null(strstr(nl + 1, "err: after\n"));
	}
	free(out);
	free(big);
}

/* ------------------------------------------------------------------------------------ */

#define NTHREADS 4
#define MSGS_PER_THREAD 500

static void *log_worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	char pad[201];

	memset(pad, 'a' + id, 200);
	pad[200] = '\0';
	for (int i = 0; i < MSGS_PER_THREAD; i++)
		kvmm_info("thread %d msg %d %s end", id, i, pad);
	return NULL;
}

/* Lines from concurrent threads must never interleave: each arrives whole. */
static void test_threads_whole_lines(void **state)
{
	pthread_t th[NTHREADS];
	int seen[NTHREADS] = {0};
	char *out, *line, *save = NULL;

	(void)state;
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_INFO, 0), 0);
	capture_start();
	for (intptr_t i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, log_worker, (void *)i), 0);
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	out = capture_end(NULL);
	assert_int_equal(count_lines(out), NTHREADS * MSGS_PER_THREAD);

	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *body = strstr(line, "]: info: thread ");
		int id, msg, n = 0;
		char pad[256];

		assert_non_null(body);
		assert_int_equal(
			sscanf(body, "]: info: thread %d msg %d %255s end%n", &id, &msg, pad, &n),
			3);
		assert_true(n > 0 && body[n] == '\0');
		assert_true(id >= 0 && id < NTHREADS);
		assert_int_equal(strlen(pad), 200);
		assert_int_equal(strspn(pad, (char[]){(char)('a' + id), 0}), 200);
		/* each thread's lines arrive in its own order */
		assert_int_equal(msg, seen[id]);
		seen[id]++;
	}
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(seen[i], MSGS_PER_THREAD);
	free(out);
}

static void test_syslog_sink(void **state)
{
	char *out;

	(void)state;
	assert_int_equal(kvmm_log_init("kvmm-unit-test", KVMM_LOG_DEBUG, 1), 0);
	capture_start();
	kvmm_debug("to syslog only (unit test, ignore)");
	out = capture_end(NULL);
	assert_string_equal(out, "");
	free(out);

	/* re-init back to stderr */
	assert_int_equal(kvmm_log_init("tlog", KVMM_LOG_DEBUG, 0), 0);
	capture_start();
	kvmm_debug("back");
	out = capture_end(NULL);
	assert_non_null(strstr(out, "tlog["));
	assert_non_null(strstr(out, "debug: back\n"));
	free(out);
}

/* one storm site */
static void storm(unsigned int i)
{
	kvmm_notice_ratelimited("storm %u", i);
}

/*
 * A storm from one call site yields KVMM_LOG_RL_BURST lines per window; another site has its
 * own window; once a window is over, one line reports how many were held back.
 */
static void test_ratelimit(void **state)
{
	struct kvmm_log_ratelimit rl = {0};
	char *out;
	size_t lines;

	(void)state;
	capture_start();
	for (unsigned int i = 0; i < 1000; i++)
		storm(i);
	kvmm_notice_ratelimited("another site");
	out = capture_end(NULL);
	assert_int_equal(count_lines(out), KVMM_LOG_RL_BURST + 1);
	assert_non_null(strstr(out, "storm 0\n"));
	assert_null(strstr(out, "storm 10\n"));
	assert_non_null(strstr(out, "another site"));
	free(out);

	/* a window of our own, aged by hand instead of waiting 5 s */
	capture_start();
	for (unsigned int i = 0; i < KVMM_LOG_RL_BURST; i++)
		assert_true(kvmm_log_ratelimit(&rl, KVMM_LOG_WARN, "site_a"));
	for (unsigned int i = 0; i < 25; i++)
		assert_false(kvmm_log_ratelimit(&rl, KVMM_LOG_WARN, "site_a"));
	assert_int_equal(rl.missed, 25);
	rl.begin_ms -= KVMM_LOG_RL_INTERVAL_MS;
	assert_true(kvmm_log_ratelimit(&rl, KVMM_LOG_WARN, "site_a"));
	assert_int_equal(rl.missed, 0);
	assert_int_equal(rl.passed, 1);
	out = capture_end(NULL);
	lines = count_lines(out);
	assert_int_equal(lines, 1);
	assert_non_null(strstr(out, "warn: site_a: 25 similar messages suppressed"));
	free(out);

	/* a filtered level neither passes nor counts */
	kvmm_log_set_level(KVMM_LOG_ERR);
	capture_start();
	for (unsigned int i = 0; i < 100; i++)
		kvmm_notice_ratelimited("filtered %u", i);
	out = capture_end(NULL);
	assert_string_equal(out, "");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_level_from_string, setup, teardown),
		cmocka_unit_test_setup_teardown(test_level_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_level, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filtering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_args_not_evaluated_when_filtered, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_format, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errno_and_percent_m, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads_whole_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_syslog_sink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ratelimit, setup, teardown),
	};

	return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
