// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_admin.c - libkvmm's admin calls (runtime/kvmm_admin.h) against the
 * real kvmmd: the default socket from $KVMM_SOCKET, what HELLO says and how the daemon lists
 * the handle, every read verb as text and as JSON, a namespace limit set and read back
 * (kvmm_admin_limit, kvmm_admin_namespaces), the
 * page table of a libkvmm client's sequence, reclaim and drop-caches, and a trace
 * subscription that sees a client attach. (kvmmctl, their main user, is itest_ctl's.)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/kvmm.h"
#include "tests/integration/itest.h"

static kvmm_admin_t *open_admin(void)
{
	kvmm_admin_t *a = NULL;

	assert_int_equal(itest_admin_open(&itest_d, &a), 0);
	return a;
}

static void test_hello(void **state)
{
	const struct kvmm_hello_rep *h;
	kvmm_admin_t *a;
	const char *l = NULL;
	char *text, b[40];
	bool listed = false;

	(void)state;
	itest_need_daemon();
	/* no path: $KVMM_SOCKET, as for kvmm_attach */
	assert_int_equal(setenv("KVMM_SOCKET", itest_d.sock, 1), 0);
	assert_int_equal(kvmm_admin_open(NULL, &a), 0);
	unsetenv("KVMM_SOCKET");
	h = kvmm_admin_hello(a);
	assert_int_equal(h->abi_agreed, KVMM_ABI_VERSION);
	assert_int_equal(h->page_size, ITEST_PAGE_SIZE);
	assert_true(h->client_id > 0);
	assert_int_equal(h->features, 0); /* an admin handle wants no data plane */
	/* the daemon lists it by id, under the program's name */
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_CLIENTS, NULL, &text), 0);
	while ((l = kvmm_admin_next(text, "Client", l))) {
		if (strtoul(l + strlen("Client:"), NULL, 10) != h->client_id)
			continue;
		assert_true(kvmm_admin_field(l, "name", b, sizeof(b)) > 0);
		assert_string_equal(b, "itest_admin");
		listed = true;
	}
	free(text);
	assert_true(listed);
	kvmm_admin_close(a);
}

static void test_read_verbs(void **state)
{
	static const unsigned int ops[] = {
		KVMM_OP_STATUS,	 KVMM_OP_MEMINFO,    KVMM_OP_VMSTAT, KVMM_OP_BUDDYINFO,
		KVMM_OP_CLIENTS, KVMM_OP_NAMESPACES, KVMM_OP_SEQS,   KVMM_OP_LRU,
		KVMM_OP_SWAP,	 KVMM_OP_TRACE,
	};
	struct kvmm_admin_req json = {.flags = KVMM_ADMIN_F_JSON};
	kvmm_admin_t *a;
	int64_t v;
	char *text;

	(void)state;
	itest_need_daemon();
	a = open_admin();
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		assert_int_equal(kvmm_admin_read(a, ops[i], NULL, &text), 0);
		free(text);
		assert_int_equal(kvmm_admin_read(a, ops[i], &json, &text), 0);
		assert_true(text[0] == '{' || text[0] == '\0'); /* TRACE: JSON Lines, maybe none */
		free(text);
	}
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text), 0);
	assert_int_equal(kvmm_admin_value(text, "PageSize", &v), 0);
	assert_int_equal(v, ITEST_PAGE_SIZE);
	free(text);
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_LIMIT, NULL, &text), -EINVAL);
	kvmm_admin_close(a);
}

/* The limit of namespace ns (kvmm_admin_namespaces with the filter). */
static uint64_t ns_limit(kvmm_admin_t *a, const char *ns)
{
	struct kvmm_admin_ns *list;
	unsigned int nr;
	uint64_t limit;

	assert_int_equal(kvmm_admin_namespaces(a, ns, &list, &nr), 0);
	assert_int_equal(nr, 1);
	assert_string_equal(list[0].name, ns);
	assert_int_equal(list[0].frames, ITEST_NS_B_FRAMES);
	limit = list[0].limit;
	free(list);
	return limit;
}

static void test_write_verbs(void **state)
{
	struct kvmm_limit_req lim = {
		.ns = ITEST_NS_B, .max_frames = 100, .valid = KVMM_LIMIT_SET_MAX};
	kvmm_admin_t *a;
	uint64_t n = UINT64_MAX;

	(void)state;
	itest_need_daemon();
	a = open_admin();
	assert_int_equal(kvmm_admin_limit(a, &lim), 0);
	assert_int_equal(ns_limit(a, ITEST_NS_B), 100);
	lim.max_frames = KVMM_LIMIT_NONE;
	assert_int_equal(kvmm_admin_limit(a, &lim), 0);
	/* none is none (issue 26), never the pool's size */
	assert_true(ns_limit(a, ITEST_NS_B) == KVMM_LIMIT_NONE);
	strcpy(lim.ns, "nosuch");
	assert_int_equal(kvmm_admin_limit(a, &lim), -ENOENT);
	assert_int_equal(kvmm_admin_drop_caches(a, KVMM_DROP_F_DEVICE, &n), 0);
	assert_int_not_equal(n, UINT64_MAX);
	n = UINT64_MAX;
	assert_int_equal(kvmm_admin_reclaim(a, 8, KVMM_RECLAIM_F_NOSWAP, &n), 0);
	assert_true(n <= 8);
	/* a tier of a daemon without swap tiers: nothing to remove */
	{
		struct kvmm_swapoff_req off = {.tier = 3};

		assert_int_equal(kvmm_admin_swapoff(a, &off), -ENOENT);
	}
	kvmm_admin_close(a);
}

static void test_pagetable(void **state)
{
	uint32_t tokens[48];
	struct kvmm_admin_req req = {0};
	const struct kvmm_hello_rep *h;
	kvmm_admin_t *a;
	kvmm_client_t *c;
	const char *l = NULL;
	unsigned int ptes = 0;
	uint64_t seq;
	int64_t v;
	char *text, *seqs, b[16];

	(void)state;
	itest_need_daemon();
	a = open_admin();
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	itest_tokens(tokens, 48, 3);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, 48, NULL), 0); /* 3 pages of 16 */
	/* the client's id: its sequence's record in SEQS */
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_SEQS, NULL, &seqs), 0);
	while ((l = kvmm_admin_next(seqs, "Seq", l)))
		if (strtoull(l + strlen("Seq:"), NULL, 10) == seq)
			break;
	assert_non_null(l);
	assert_true(kvmm_admin_field(l, "client", b, sizeof(b)) > 0);
	req.id = seq;
	req.reserved = (uint32_t)strtoul(b, NULL, 10);
	free(seqs);
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_PAGETABLE, &req, &text), 0);
	assert_int_equal(kvmm_admin_value(text, "Blocks", &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(kvmm_admin_value(text, "Tokens", &v), 0);
	assert_int_equal(v, 48);
	for (l = NULL; (l = kvmm_admin_next(text, "Pte", l));) {
		assert_true(kvmm_admin_field(l, "type", b, sizeof(b)) > 0);
		assert_string_equal(b, "present");
		ptes++;
	}
	assert_int_equal(ptes, 3);
	free(text);
	/* another client's number for the same sequence: not found */
	h = kvmm_admin_hello(a);
	req.reserved = h->client_id;
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_PAGETABLE, &req, &text), -ENOENT);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
	kvmm_admin_close(a);
}

static void test_trace_follow(void **state)
{
	kvmm_admin_t *a;
	kvmm_client_t *c;
	bool seen = false;
	char *text;
	int tries;

	(void)state;
	itest_need_daemon();
	a = open_admin();
	assert_true(kvmm_admin_trace_event("attach") >= 0);
	assert_int_equal(kvmm_admin_trace_follow(a, 0, 0, 1u << kvmm_admin_trace_event("attach")),
			 0);
	assert_int_equal(kvmm_admin_read(a, KVMM_OP_STATUS, NULL, &text), -EBUSY);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	for (tries = 0; tries < 50 && !seen; tries++) {
		int ret = kvmm_admin_trace_next(a, 200, &text);

		if (ret == -ETIMEDOUT)
			continue;
		assert_int_equal(ret, 0);
		/* only the events asked for */
		for (const char *l = NULL; (l = kvmm_admin_next(text, "Event", l));) {
			char type[16];

			assert_true(kvmm_admin_field(l, "type", type, sizeof(type)) > 0);
			assert_string_equal(type, "attach");
			seen = true;
		}
		free(text);
	}
	assert_true(seen);
	kvmm_detach(c);
	kvmm_admin_close(a);
}

/* STATUS's TraceRecords */
static long long trace_records(void)
{
	return itest_admin_value(&itest_d, KVMM_OP_STATUS, "TraceRecords");
}

/* a client that takes a page and gives it back: alloc, free, attach, detach events */
static void some_work(void)
{
	uint32_t tokens[64];
	kvmm_client_t *c;
	uint64_t seq;

	itest_tokens(tokens, 64, 3);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, 64, NULL), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

/* until no follower is left (the pump notices one gone at its next tick) */
static void no_followers(void)
{
	for (int i = 0; i < 100 && itest_admin_value(&itest_d, KVMM_OP_STATUS, "TraceSubscribers");
	     i++)
		itest_sleep_ms(20);
	assert_int_equal(itest_admin_value(&itest_d, KVMM_OP_STATUS, "TraceSubscribers"), 0);
}

/* trace = follow (kvmmd's default): the ring records only while someone follows */
static void test_trace_follow_mode(void **state)
{
	long long before;
	kvmm_admin_t *a;
	char *text = NULL;

	(void)state;
	itest_need_daemon();
	assert_int_equal(itest_admin_text(&itest_d, KVMM_OP_STATUS, &text), 0);
	assert_non_null(strstr(text, "follow"));
	free(text);
	no_followers(); /* test_trace_follow's */
	before = trace_records();
	some_work();
	assert_int_equal(trace_records(), before); /* nobody follows: nothing recorded */
	a = open_admin();
	assert_int_equal(kvmm_admin_trace_follow(a, 0, 0, 0), 0);
	some_work();
	assert_true(trace_records() > before);
	kvmm_admin_close(a);
	/* the follower gone, recording stops */
	no_followers();
	before = trace_records();
	some_work();
	assert_int_equal(trace_records(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello),	     cmocka_unit_test(test_read_verbs),
		cmocka_unit_test(test_write_verbs),  cmocka_unit_test(test_pagetable),
		cmocka_unit_test(test_trace_follow), cmocka_unit_test(test_trace_follow_mode),
	};
	int ret = cmocka_run_group_tests_name("itest_admin", tests, itest_group_setup,
					      itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
