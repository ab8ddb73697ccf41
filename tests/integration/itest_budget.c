// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_budget.c - the daemon-wide frame budget against the real kvmmd
 * (issue 26, kvmm/budget.c): the test namespaces' pools (alpha 256 and beta 4096 frames)
 * overcommit a budget of BUDGET (4096) frames.  Beta's cache fills the budget and beta goes on
 * allocating: alpha, at its low, keeps every cached page while beta's own are reclaimed; the
 * memory of the daemon's memfds (their allocated blocks, fstat of /proc/PID/fd) never holds
 * more than the budget and falls when pages are dropped (punched holes); a min is never
 * reclaimed; every namespace under low is reclaimed down to min with a low event shown by
 * kvmmctl; a namespace under its min gets its frames by preempting another's sequence; max is resized live, down (reclaimed down to it) and up, and a max below what is
 * mapped and cannot go is refused; mins past the budget are refused; meminfo, namespaces,
 * their JSON and Prometheus show the budget; kvswapd brings a budget under its low point back
 * to its high point (background reclaim).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "itest.h"
#include "runtime/kvmm.h"

/* alpha (256) + beta (4096) frames of pools on a budget of 4096: overcommitted */
#define BUDGET 4096
#define STR_(x) #x
#define STR(x) STR_(x)
#define TPP 16 /* itest_fmt's tokens per page */

static void ctl_ok(const char *a, const char *b, const char *c, const char *d)
{
	char *out = NULL;
	int ret = itest_ctl(&out, a, b, c, d, NULL);

	if (ret)
		fail_msg("kvmmctl %s %s %s %s: %d: %s", a, b, c, d ? d : "", ret, out);
	free(out);
}

/* A number of @ns's raw NAMESPACES record (" key=value"), -1 when absent or "-". */
static long long ns_value(const char *ns, const char *key)
{
	char *out, needle[64], pat[40], *p, *end;
	long long v = -1;

	assert_int_equal(itest_ctl(&out, "--raw", "namespaces", NULL), 0);
	snprintf(needle, sizeof(needle), "Namespace: %s ", ns);
	p = strstr(out, needle);
	if (p) {
		end = p + strcspn(p, "\n");
		snprintf(pat, sizeof(pat), " %s=", key);
		p = strstr(p, pat);
		/* "-" alone: none */
		if (p && p < end &&
		    (p[strlen(pat)] != '-' ||
		     (p[strlen(pat) + 1] >= '0' && p[strlen(pat) + 1] <= '9')))
			v = strtoll(p + strlen(pat), NULL, 10);
	}
	free(out);
	return v;
}

static long long charged(const char *ns)
{
	return ns_value(ns, "used") + ns_value(ns, "cached");
}

/* Bytes the daemon's memfds really hold (their allocated blocks). */
static long long memfd_bytes(void)
{
	char dir[64], path[320], link[256];
	long long sum = 0;
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)itest_d.pid);
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d))) {
		struct stat st;
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strstr(link, "memfd:kvmm-chunk") || stat(path, &st))
			continue;
		sum += (long long)st.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

/*
 * @nblocks full pages of prompt @p in a new sequence of @c, every page written (so its memory
 * is really there), sealed unless @keep, then freed (cached) unless @keep.  Returns the
 * sequence (0 when freed).
 */
static uint64_t fill(kvmm_client_t *c, unsigned int p, uint32_t nblocks, bool keep)
{
	uint32_t n = nblocks * TPP, *tok = malloc(n * sizeof(*tok)), b;
	int32_t *table = malloc((nblocks + 1) * sizeof(*table));
	uint64_t seq;

	assert_non_null(tok);
	assert_non_null(table);
	itest_tokens(tok, n, p);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tok, n, NULL), 0);
	assert_int_equal(kvmm_block_table(c, &seq, 1, table, nblocks + 1), 0);
	for (b = 0; b < nblocks; b++) {
		char *a = kvmm_frame_addr(c, (uint32_t)table[b]);

		assert_non_null(a);
		memset(a, (int)(p + b) | 1, (size_t)kvmm_page_size(c));
	}
	if (!keep) {
		assert_int_equal(kvmm_seal(c, seq, 0, 0), 0);
		assert_int_equal(kvmm_seq_free(c, seq), 0);
		seq = 0;
	}
	free(tok);
	free(table);
	return seq;
}

static void drop_all(void)
{
	char *out;

	assert_int_equal(itest_ctl(&out, "drop-caches", NULL), 0);
	free(out);
}

/* ---- memcg semantics over the real daemon ------------------------------------------------- */

static void test_low_protects_cache(void **state)
{
	kvmm_client_t *a, *b;
	long long before, reclaimed;
	uint64_t s;
	char *out;

	(void)state;
	itest_need_daemon();
	drop_all();
	ctl_ok("ns", "set", ITEST_NS_A, "low=200");
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	fill(a, 1, 200, false);
	assert_int_equal(ns_value(ITEST_NS_A, "cached"), 200);
	/* beta: cache up to the budget, then more than is left: its own cache pays */
	fill(b, 100, BUDGET - 300, false);
	before = ns_value(ITEST_NS_B, "budget_reclaimed");
	s = fill(b, 200, 400, true);
	reclaimed = ns_value(ITEST_NS_B, "budget_reclaimed") - before;
	assert_true(reclaimed >= 100);
	assert_int_equal(ns_value(ITEST_NS_A, "cached"), 200);
	assert_int_equal(ns_value(ITEST_NS_A, "low_events"), 0);
	assert_int_equal(ns_value(ITEST_NS_A, "budget_reclaimed"), 0);
	/* the pools span 4352 frames but never hold more than the budget */
	assert_true(ns_value(ITEST_NS_A, "resident") + ns_value(ITEST_NS_B, "resident") <= BUDGET);
	assert_true(memfd_bytes() <= (long long)BUDGET * ITEST_PAGE_SIZE);
	/* and alpha's prefix still hits, all of it */
	{
		uint32_t tok[200 * TPP];
		uint64_t seq, hit = 0;

		itest_tokens(tok, 200 * TPP, 1);
		assert_int_equal(kvmm_seq_create(a, 0, &seq), 0);
		assert_int_equal(kvmm_prefix_lookup(a, seq, tok, 200 * TPP, &hit), 0);
		assert_int_equal(hit, 200 * TPP);
		assert_int_equal(kvmm_seq_free(a, seq), 0);
	}
	/* meminfo and namespaces show it */
	assert_int_equal(itest_ctl(&out, "meminfo", NULL), 0);
	assert_non_null(strstr(out, "(overcommitted)"));
	assert_non_null(strstr(out, "resident"));
	free(out);
	assert_int_equal(itest_ctl(&out, "namespaces", NULL), 0);
	assert_non_null(strstr(out, "RESIDENT"));
	assert_non_null(strstr(out, "LOWEV"));
	free(out);
	assert_int_equal(itest_ctl(&out, "--json", "meminfo", NULL), 0);
	assert_true(itest_json_ok(out));
	assert_non_null(strstr(out, "\"budget\":" STR(BUDGET)));
	assert_non_null(strstr(out, "\"budget_overcommit\":1"));
	free(out);
	assert_int_equal(kvmm_seq_free(b, s), 0);
	kvmm_detach(a);
	kvmm_detach(b);
	ctl_ok("ns", "set", ITEST_NS_A, "low=0");
}

/* Dropped pages give their memory back: the memfds' blocks fall. */
static void test_memory_returned(void **state)
{
	long long full, after;
	kvmm_client_t *b;

	(void)state;
	itest_need_daemon();
	drop_all();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	fill(b, 300, 1000, false);
	full = memfd_bytes();
	assert_true(full >= 1000LL * ITEST_PAGE_SIZE);
	drop_all();
	after = memfd_bytes();
	fprintf(stderr, "memfds: %lld KiB with 1000 cached pages, %lld KiB after drop-caches\n",
		full >> 10, after >> 10);
	assert_true(after <= full - 900LL * ITEST_PAGE_SIZE);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "budget_discard") >= 1000);
	kvmm_detach(b);
}

/* Every namespace at or under its low: best effort down to min, a low event; a min stays. */
static void test_min_and_low_events(void **state)
{
	kvmm_client_t *a, *b;
	uint32_t *tok;
	uint64_t s;

	(void)state;
	itest_need_daemon();
	drop_all();
	ctl_ok("ns", "set", ITEST_NS_A, "min=150");
	ctl_ok("ns", "set", ITEST_NS_A, "low=250");
	ctl_ok("ns", "set", ITEST_NS_B, "low=4000");
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	fill(a, 400, 250, false);
	fill(b, 500, BUDGET - 400, false);
	/* beta wants more: both are at or under their low: down to min, with low events */
	s = fill(b, 600, 200, true);
	assert_true(charged(ITEST_NS_A) >= 150);
	assert_true(ns_value(ITEST_NS_A, "low_events") + ns_value(ITEST_NS_B, "low_events") >= 1);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetLowEvents") >= 1);
	assert_int_equal(kvmm_seq_free(b, s), 0);
	/* beta asks for more than the budget leaves beside alpha's min: refused, alpha keeps it */
	drop_all();
	fill(a, 700, 150, false);
	tok = malloc((size_t)(BUDGET - 100) * TPP * sizeof(*tok));
	assert_non_null(tok);
	itest_tokens(tok, (size_t)(BUDGET - 100) * TPP, 800);
	assert_int_equal(kvmm_seq_create(b, 0, &s), 0);
	assert_true(kvmm_seq_append(b, s, tok, (BUDGET - 100) * TPP, NULL) < 0);
	free(tok);
	assert_int_equal(ns_value(ITEST_NS_A, "cached"), 150);
	kvmm_seq_free(b, s);
	kvmm_detach(a);
	kvmm_detach(b);
	ctl_ok("ns", "set", ITEST_NS_A, "low=0");
	ctl_ok("ns", "set", ITEST_NS_A, "min=0");
	ctl_ok("ns", "set", ITEST_NS_B, "low=0");
}

/* A namespace under its min gets its frames: another namespace's sequence is preempted. */
static void test_min_preempts(void **state)
{
	uint32_t *tok = malloc(200 * TPP * sizeof(*tok));
	kvmm_client_t *a, *b;
	uint64_t big, seq;
	int i, ret = -1;

	(void)state;
	itest_need_daemon();
	assert_non_null(tok);
	drop_all();
	ctl_ok("ns", "set", ITEST_NS_A, "min=200");
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	/* beta maps nearly all of the budget: nothing of it can be reclaimed (no swap tier) */
	big = fill(b, 1100, BUDGET - 150, true);
	itest_tokens(tok, 200 * TPP, 1200);
	/* alpha's 200 are guaranteed: the first try may fail while beta's victim goes */
	for (i = 0; i < 200 && ret; i++) {
		assert_int_equal(kvmm_seq_create(a, 0, &seq), 0);
		ret = kvmm_seq_append(a, seq, tok, 200 * TPP, NULL);
		if (ret) {
			assert_int_equal(kvmm_seq_free(a, seq), 0);
			itest_sleep_ms(10);
		}
	}
	assert_int_equal(ret, 0);
	assert_int_equal(ns_value(ITEST_NS_A, "used"), 200);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetPreempted") >= 1);
	/* beta's sequence was the victim */
	assert_true(kvmm_seq_append(b, big, tok, TPP, NULL) < 0);
	kvmm_seq_free(b, big);
	assert_int_equal(kvmm_seq_free(a, seq), 0);
	free(tok);
	kvmm_detach(a);
	kvmm_detach(b);
	ctl_ok("ns", "set", ITEST_NS_A, "min=0");
}

/* ---- live resize ------------------------------------------------------------------------ */

static void test_resize(void **state)
{
	kvmm_client_t *b;
	uint64_t s;
	char *out;

	(void)state;
	itest_need_daemon();
	drop_all();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	fill(b, 900, 1500, false);
	assert_true(charged(ITEST_NS_B) >= 1500);
	/* down: reclaimed down to it at once (the option form of max=500) */
	assert_int_equal(
		itest_ctl(&out, "ns", "set", ITEST_NS_B, "--max", "500", "--priority", "-2", NULL),
		0);
	free(out);
	assert_int_equal(ns_value(ITEST_NS_B, "priority"), -2);
	assert_int_equal(ns_value(ITEST_NS_B, "limit"), 500);
	assert_true(charged(ITEST_NS_B) <= 500);
	/* and held: a sequence past it fails, nothing of beta's grows past it */
	{
		uint32_t tok[600 * TPP];
		uint64_t seq;

		itest_tokens(tok, 600 * TPP, 950);
		assert_int_equal(kvmm_seq_create(b, 0, &seq), 0);
		assert_true(kvmm_seq_append(b, seq, tok, 600 * TPP, NULL) < 0);
		assert_int_equal(kvmm_seq_free(b, seq), 0);
	}
	/* up: the same sequence fits */
	ctl_ok("ns", "set", ITEST_NS_B, "max=1800");
	assert_int_equal(ns_value(ITEST_NS_B, "limit"), 1800);
	s = fill(b, 960, 1000, true);
	/* below what is mapped, and no swap tier to take it: refused, max unchanged */
	assert_int_equal(itest_ctl(&out, "ns", "set", ITEST_NS_B, "max=100", NULL), 1);
	assert_non_null(strstr(out, "still holds more than that max"));
	free(out);
	assert_int_equal(ns_value(ITEST_NS_B, "limit"), 1800);
	assert_int_equal(kvmm_seq_free(b, s), 0);
	ctl_ok("ns", "set", ITEST_NS_B, "max=none");
	ctl_ok("ns", "set", ITEST_NS_B, "priority=0");
	assert_int_equal(ns_value(ITEST_NS_B, "limit"), -1); /* "-" */
	/* a namespace created with only a max spans the budget: its max can grow to it */
	ctl_ok("ns", "create", "gamma", "max=100");
	assert_int_equal(ns_value("gamma", "frames"), BUDGET);
	ctl_ok("ns", "set", "gamma", "max=2000");
	assert_int_equal(ns_value("gamma", "limit"), 2000);
	/* mins past the budget: refused, with a message naming the cause */
	ctl_ok("ns", "set", "gamma", "max=none");
	ctl_ok("ns", "set", "gamma", "min=4000");
	assert_int_equal(itest_ctl(&out, "ns", "set", ITEST_NS_A, "min=200", NULL), 1);
	assert_non_null(strstr(out, "min"));
	free(out);
	assert_int_equal(ns_value(ITEST_NS_A, "min"), -1);
	assert_int_equal(
		itest_ctl(&out, "ns", "create", "delta", "frames=128", "min=100", "low=100", NULL),
		1);
	assert_non_null(strstr(out, "no room"));
	free(out);
	ctl_ok("ns", "delete", "gamma", NULL);
	kvmm_detach(b);
	assert_true(itest_daemon_alive(&itest_d));
}

/* ---- Prometheus ------------------------------------------------------------------------- */

/*
 * Background reclaim: cache brings the budget under its low point (2%: 81 frames free) while
 * each pool has free frames above its own watermarks; kvswapd, woken by that charge, takes
 * cache across the namespaces until the budget's high point (3%: 122) is free again, with no
 * allocation waiting for it (kvmm_budget_balance).
 */
static void test_background(void **state)
{
	long long runs0, freed0, bfree = 0;
	kvmm_client_t *a, *b;
	int i;

	(void)state;
	itest_need_daemon();
	drop_all();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &a), 0);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_B, &itest_fmt, &b), 0);
	runs0 = itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackground");
	freed0 = itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackgroundFreed");
	assert_true(runs0 >= 0 && freed0 >= 0);
	fill(a, 300, 200, false);
	/* prompts of 200 pages, cached one after the other: beta's pool keeps 200 free */
	for (i = 0; i < (BUDGET - 200 - 40) / 200; i++)
		fill(b, 400 + i, 200, false);
	fill(b, 500, (BUDGET - 200 - 40) % 200, false);
	for (i = 0; i < 500; i++) {
		bfree = itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetFree");
		if (bfree >= BUDGET * 3 / 100)
			break;
		itest_sleep_ms(10);
	}
	print_message(
		"budget free %lld frames after %d ms; %lld background runs freed %lld\n", bfree,
		i * 10, itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackground") - runs0,
		itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackgroundFreed") - freed0);
	assert_true(bfree >= BUDGET * 3 / 100);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackground") > runs0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_MEMINFO, "BudgetBackgroundFreed") > freed0);
	assert_true(itest_admin_value(&itest_d, KVMM_OP_VMSTAT, "budget_background") >= 0);
	drop_all();
	kvmm_detach(a);
	kvmm_detach(b);
}

static void test_metrics(void **state)
{
	char *out;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_ctl(&out, "--json", "namespaces", NULL), 0);
	assert_true(itest_json_ok(out));
	assert_non_null(strstr(out, "\"resident\":"));
	assert_non_null(strstr(out, "\"low_events\":"));
	free(out);
	assert_int_equal(itest_ctl(&out, "vmstat", NULL), 0);
	assert_non_null(strstr(out, "budget_reclaim"));
	free(out);
}

static int setup(void **state)
{
	static const char *const extra[] = {"--frames", STR(BUDGET), NULL};

	(void)state;
	if (!itest_have_ctl("itest_budget")) {
		itest_no_daemon = true;
		return 0;
	}
	return itest_group_start(extra);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_low_protects_cache),
		cmocka_unit_test(test_memory_returned),
		cmocka_unit_test(test_min_and_low_events),
		cmocka_unit_test(test_min_preempts),
		cmocka_unit_test(test_resize),
		cmocka_unit_test(test_background),
		cmocka_unit_test(test_metrics),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);
	failed = cmocka_run_group_tests_name("itest_budget", tests, setup, itest_group_teardown);
	if (itest_no_daemon)
		return 77;
	return failed;
}
