// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_reattach.c - runtime/reattach.c without a daemon: the set of sequence ids a
 * handle holds (random adds and removes against a plain reference, through growth and
 * deleted slots), the GONE event queued once per loss and never while attaching, and a
 * reattach to a socket where nobody listens (-ETIMEDOUT after about the timeout, the set
 * kept for the next try). itest_reattach does the rest against the real kvmmd.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/libkvmm.h"

#define NR_IDS 5000

/* A detached handle as a dead daemon leaves it: no socket, the loss seen. */
static struct kvmm_client *dead_client(const char *sock)
{
	struct kvmm_client *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	pthread_mutex_init(&c->lock, NULL);
	c->fd = -1;
	c->err = -ENOTCONN;
	c->pid = getpid();
	c->next_seq = 1;
	c->rx = malloc(KVMM_MSG_MAX);
	assert_non_null(c->rx);
	snprintf(c->sock_path, sizeof(c->sock_path), "%s", sock);
	memcpy(c->ns, "alpha", 6);
	return c;
}

static void free_client(struct kvmm_client *c)
{
	kvmm_reattach_free(c);
	pthread_mutex_destroy(&c->lock);
	free(c->cq);
	free(c->inflight);
	free(c->rx);
	free(c);
}

static bool live_has(const struct kvmm_client *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->live_cap; i++)
		if (c->live[i] == id)
			return true;
	return false;
}

static void test_live_set_model(void **state)
{
	struct kvmm_client *c = dead_client("/nonexistent");
	static bool ref[NR_IDS + 1];
	uint32_t nr = 0, seed = 12345;

	(void)state;
	memset(ref, 0, sizeof(ref));
	for (int op = 0; op < 200000; op++) {
		uint64_t id;

		seed = seed * 1103515245u + 12345u;
		id = 1 + (seed >> 8) % NR_IDS;
		if ((seed >> 4) % 3) {
			kvmm_live_add(c, id);
			nr += !ref[id];
			ref[id] = true;
		} else {
			kvmm_live_del(c, id);
			nr -= ref[id];
			ref[id] = false;
		}
		assert_int_equal(c->nr_live, nr);
	}
	assert_false(c->live_incomplete);
	for (uint64_t id = 1; id <= NR_IDS; id++)
		assert_int_equal(live_has(c, id), ref[id]);
	/* ids that are not sequences are never recorded */
	kvmm_live_add(c, 0);
	kvmm_live_add(c, UINT64_MAX);
	assert_int_equal(c->nr_live, nr);
	/* a completion records only a new sequence, only when it succeeded */
	kvmm_live_cqe(c, KVMM_OP_SEQ_CREATE, &(struct kvmm_cqe){.res = -ENOMEM, .seq = 1u << 30});
	kvmm_live_cqe(c, KVMM_OP_SEQ_FREE, &(struct kvmm_cqe){.seq = (1u << 30) + 1});
	kvmm_live_cqe(c, KVMM_OP_SEQ_FORK, &(struct kvmm_cqe){.seq = (1u << 30) + 2});
	assert_false(live_has(c, 1u << 30));
	assert_false(live_has(c, (1u << 30) + 1));
	assert_true(live_has(c, (1u << 30) + 2));
	free_client(c);
}

static void test_gone_event_once(void **state)
{
	struct kvmm_client *c = dead_client("/nonexistent");

	(void)state;
	c->reattaching = true; /* attaching: a hang-up is the attach's error, not an event */
	kvmm_client_gone(c);
	assert_int_equal(c->cq_count, 0);
	c->reattaching = false;
	kvmm_client_gone(c);
	kvmm_client_gone(c);
	assert_int_equal(c->cq_count, 1);
	assert_int_equal(c->cq[c->cq_head].flags, KVMM_CQE_F_EVENT | KVMM_CQE_F_GONE);
	assert_int_equal(c->cq[c->cq_head].res, -ENOTCONN);
	assert_int_equal(kvmm_connected(c), 0);
	free_client(c);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_reattach_nobody_there(void **state)
{
	struct kvmm_client *c = dead_client("/nonexistent/kvmmd.sock");
	uint64_t t0, dt, seqs[4];

	(void)state;
	c->gone = true;
	kvmm_live_add(c, 7);
	kvmm_live_add(c, 9);
	t0 = now_ms();
	assert_int_equal(kvmm_reattach(c, 200), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
	assert_int_equal(kvmm_reattach(c, 0), -ETIMEDOUT); /* one try */
	/* nothing reattached: nothing reported lost yet, the set kept for the next try */
	assert_int_equal(kvmm_lost_seqs(c, seqs, 4), 0);
	assert_int_equal(c->nr_live, 2);
	assert_int_equal(kvmm_connected(c), 0);
	/* the automatic mode on a handle without the flag: nothing tried */
	assert_int_equal(kvmm_client_usable(c), -ENOTCONN);
	c->opt_flags = KVMM_ATTACH_REATTACH;
	assert_int_equal(kvmm_client_usable(c), -ENOTCONN); /* tried: nobody there */
	assert_int_equal(kvmm_client_usable(c), -ENOTCONN); /* within the backoff: no try */
	free_client(c);
}

static void test_bad_arguments(void **state)
{
	struct kvmm_client *c = dead_client("/nonexistent");

	(void)state;
	assert_int_equal(kvmm_reattach(NULL, 0), -EINVAL);
	assert_int_equal(kvmm_lost_seqs(NULL, NULL, 0), -EINVAL);
	assert_int_equal(kvmm_lost_seqs(c, NULL, 1), -EINVAL);
	assert_int_equal(kvmm_lost_seqs(c, NULL, 0), 0);
	assert_int_equal(kvmm_connected(NULL), 0);
	c->pid = getpid() + 1; /* as in a child after fork() */
	assert_int_equal(kvmm_reattach(c, 0), -EINVAL);
	free_client(c);
}

/* kvmm_conn_error's arguments, and the daemon deadline's option: reserved bits stay zero. */
static void test_conn_error_args(void **state)
{
	struct kvmm_format fmt = {
		.layers = 1, .kv_heads = 1, .head_dim = 64, .dtype = KVMM_DTYPE_FP16};
	struct kvmm_attach_opts o = {.reserved32 = 1};
	struct kvmm_client *c = dead_client("/nonexistent");
	kvmm_client_t *out = NULL;
	char buf[64] = "x";

	(void)state;
	assert_int_equal(kvmm_conn_error(NULL, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(kvmm_conn_error(c, NULL, 1), -EINVAL);
	assert_int_equal(kvmm_conn_error(c, NULL, 0), 0);
	assert_int_equal(kvmm_conn_error(c, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	/* a failed attempt leaves its cause, cut to the buffer, always terminated */
	assert_int_equal(kvmm_reattach(c, 0), -ETIMEDOUT);
	assert_int_equal(kvmm_conn_error(c, buf, 8), -ENOENT);
	assert_int_equal(strlen(buf), 7);
	assert_int_equal(kvmm_conn_error(c, buf, sizeof(buf)), -ENOENT);
	assert_non_null(strstr(buf, "cannot connect"));
	free_client(c);
	assert_int_equal(kvmm_attach_ex("/nonexistent", "a", &fmt, &o, &out), -EINVAL);
	assert_null(out);
	o.reserved32 = 0;
	o.daemon_timeout_ms = 50;
	assert_int_equal(kvmm_attach_ex("/nonexistent", "a", &fmt, &o, &out), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_live_set_model),
		cmocka_unit_test(test_gone_event_once),
		cmocka_unit_test(test_reattach_nobody_there),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_conn_error_args),
	};

	return cmocka_run_group_tests_name("test_reattach", tests, NULL, NULL);
}
