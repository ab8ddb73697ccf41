// SPDX-License-Identifier: MIT
/*
 * tests/integration/itest_proto.c - the daemon against what a broken or foreign client sends,
 * over a raw socket: a HELLO of a version it does not speak, a truncated record, bad magic, a
 * length field that lies, reserved bits, an unknown opcode, a payload of the wrong size, a
 * memory op before HELLO or ATTACH. Each gets a clear error (or, for a session beyond
 * repair, a closed connection) and the daemon goes on serving libkvmm clients. Last, the
 * daemon is stopped under a live client: it exits 0, and the client's calls fail with an
 * error code instead of a crash or a SIGPIPE.
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

#include "itest.h"
#include "runtime/kvmm.h"

/* The daemon still serves: a libkvmm client attaches and does a round trip. */
static void assert_daemon_serves(void)
{
	kvmm_client_t *c;
	uint64_t seq;

	assert_true(itest_daemon_alive(&itest_d));
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_free(c, seq), 0);
	kvmm_detach(c);
}

/*
 * Send len bytes of rec on fd and read the answer: its status, or 1 when the daemon closed
 * the connection instead.
 */
static int exchange(int fd, const void *rec, size_t len, struct kvmm_msg_hdr *rep_hdr)
{
	unsigned char rep[KVMM_MSG_MAX];
	ssize_t n;

	assert_int_equal(itest_send(fd, rec, len), 0);
	for (;;) {
		n = itest_recv(fd, rep, sizeof(rep), 10000);
		assert_true(n >= 0); /* an answer or a hang-up, never silence */
		if (n == 0)
			return 1;
		assert_true(n >= KVMM_MSG_HDR_SIZE);
		memcpy(rep_hdr, rep, sizeof(*rep_hdr));
		assert_int_equal(rep_hdr->magic, KVMM_MAGIC);
		if (!kvmm_op_is_event(rep_hdr->op))
			return rep_hdr->status;
	}
}

static void test_version_mismatch(void **state)
{
	struct {
		struct kvmm_msg_hdr hdr;
		struct kvmm_hello_req req;
	} msg = {0};
	unsigned char rep[KVMM_MSG_MAX];
	const struct kvmm_msg_hdr *rh = (const void *)rep;
	struct kvmm_hello_rep hr;
	int fd = itest_connect(&itest_d);
	ssize_t n;

	(void)state;
	itest_need_daemon();
	assert_true(fd >= 0);
	kvmm_msg_hdr_init(&msg.hdr, KVMM_OP_HELLO, sizeof(msg), 7);
	msg.hdr.abi = 200;
	msg.req.abi_version = 200;
	msg.req.abi_min = 150;
	strcpy(msg.req.name, "from-the-future");
	assert_int_equal(itest_send(fd, &msg, sizeof(msg)), 0);
	n = itest_recv(fd, rep, sizeof(rep), 10000);
	assert_true(n >= (ssize_t)(KVMM_MSG_HDR_SIZE + sizeof(hr)));
	assert_int_equal(kvmm_msg_hdr_check(rh, (size_t)n), 0);
	assert_int_equal(rh->op, KVMM_OP_HELLO | KVMM_OP_REPLY);
	assert_int_equal(rh->seq, 7);
	assert_int_equal(rh->status, -EPROTO);
	/* the reply still says which versions the daemon speaks */
	memcpy(&hr, rep + KVMM_MSG_HDR_SIZE, sizeof(hr));
	assert_int_equal(hr.abi_version, KVMM_ABI_VERSION);
	assert_true(hr.abi_min <= hr.abi_version);
	assert_non_null(strstr(kvmm_strerror(rh->status), "version"));
	close(fd);
	assert_daemon_serves();
}

static void test_truncated(void **state)
{
	struct kvmm_msg_hdr hdr, rh;
	int fd = itest_connect(&itest_d);
	int st;

	(void)state;
	itest_need_daemon();
	assert_true(fd >= 0);
	/* a header cut short: not even the length is there */
	kvmm_msg_hdr_init(&hdr, KVMM_OP_HELLO, sizeof(hdr), 1);
	st = exchange(fd, &hdr, 10, &rh);
	assert_true(st == -EBADMSG || st == 1);
	close(fd);

	/* a HELLO without its payload */
	fd = itest_connect(&itest_d);
	assert_true(fd >= 0);
	st = exchange(fd, &hdr, sizeof(hdr), &rh);
	assert_true(st == -EBADMSG || st == -EPROTO || st == 1);
	close(fd);

	/* after HELLO: an APPEND whose ids stop short of nr_tokens */
	fd = itest_connect(&itest_d);
	assert_true(fd >= 0);
	assert_int_equal(itest_hello(fd), 0);
	{
		struct {
			struct kvmm_msg_hdr hdr;
			struct kvmm_seq_append_req req;
			uint32_t ids[3];
		} m = {.req = {.seq = 1, .nr_tokens = 5}};

		kvmm_msg_hdr_init(&m.hdr, KVMM_OP_SEQ_APPEND, sizeof(m), 3);
		st = exchange(fd, &m, sizeof(m), &rh);
		assert_int_equal(st, -EBADMSG);
		assert_int_equal(rh.seq, 3);
	}
	close(fd);
	assert_daemon_serves();
}

static void test_malformed(void **state)
{
	struct kvmm_msg_hdr hdr, rh;
	unsigned char big[KVMM_MSG_HDR_SIZE + 64] = {0};
	int fd = itest_connect(&itest_d);
	int st;

	(void)state;
	itest_need_daemon();
	assert_true(fd >= 0);
	assert_int_equal(itest_hello(fd), 0);

	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr), 10);
	hdr.magic = 0xdeadbeef;
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), -EBADMSG);

	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr) + 8, 11); /* len lies */
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), -EBADMSG);

	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr), 12);
	hdr.reserved = 1;
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), -EBADMSG);

	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr), 13);
	hdr.flags = 0x80;
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), -EBADMSG);

	kvmm_msg_hdr_init(&hdr, 0x0777, sizeof(hdr), 14); /* no such opcode */
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), -EOPNOTSUPP);
	assert_int_equal(rh.seq, 14);

	kvmm_msg_hdr_init(&hdr, KVMM_OP_SEQ_CREATE | KVMM_OP_REPLY, sizeof(hdr), 15);
	st = exchange(fd, &hdr, sizeof(hdr), &rh); /* a reply sent as a request */
	assert_true(st == -EBADMSG || st == -EOPNOTSUPP);

	/* a memory op before ATTACH */
	kvmm_msg_hdr_init((struct kvmm_msg_hdr *)big, KVMM_OP_SEQ_CREATE, KVMM_MSG_HDR_SIZE + 16,
			  16);
	assert_int_equal(exchange(fd, big, KVMM_MSG_HDR_SIZE + 16, &rh), -ENOTCONN);

	/* the session still works after all that */
	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr), 17);
	assert_int_equal(exchange(fd, &hdr, sizeof(hdr), &rh), 0);
	assert_int_equal(rh.seq, 17);
	close(fd);

	/* anything but HELLO first */
	fd = itest_connect(&itest_d);
	assert_true(fd >= 0);
	kvmm_msg_hdr_init(&hdr, KVMM_OP_PING, sizeof(hdr), 20);
	st = exchange(fd, &hdr, sizeof(hdr), &rh);
	assert_true(st == -EPROTO || st == 1);
	close(fd);

	/* a flood of garbage: the daemon gives up on the session, not on the others */
	fd = itest_connect(&itest_d);
	assert_true(fd >= 0);
	assert_int_equal(itest_hello(fd), 0);
	for (unsigned int i = 0; i < 40; i++)
		if (itest_send(fd, "garbage!", 8))
			break;
	close(fd);
	assert_daemon_serves();
}

/* libkvmm's own checks: bad names and formats never reach the wire; no daemon, clear codes */
static void test_client_errors(void **state)
{
	struct kvmm_format bad = itest_fmt;
	kvmm_client_t *c = NULL;
	char path[256];

	(void)state;
	itest_need_daemon();
	bad.dtype = 99;
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &bad, &c), -EINVAL);
	assert_int_equal(kvmm_attach(itest_d.sock, "", &itest_fmt, &c), -EINVAL);
	assert_int_equal(kvmm_attach(itest_d.sock, "no-such-ns", &itest_fmt, &c), -ENOENT);
	snprintf(path, sizeof(path), "%s/none.sock", itest_d.dir);
	assert_int_equal(kvmm_attach(path, ITEST_NS_A, &itest_fmt, &c), -ENOENT);
	assert_null(c);
	assert_non_null(strstr(kvmm_strerror(-KVMM_EPREEMPTED), "preempted"));
	assert_non_null(strstr(kvmm_strerror(KVMM_EPREEMPTED), "preempted"));
	assert_non_null(kvmm_strerror(-ENOMEM));
	assert_non_null(kvmm_strerror(-9999));
	assert_string_equal(kvmm_strerror(0), "success");
}

/* SIGTERM with a client attached: exit 0; the client gets error codes, not a crash */
static void test_daemon_gone(void **state)
{
	uint32_t tokens[64];
	kvmm_client_t *c;
	uint64_t seq, s2;
	int err;

	(void)state;
	itest_need_daemon();
	itest_tokens(tokens, 64, 9);
	assert_int_equal(kvmm_attach(itest_d.sock, ITEST_NS_A, &itest_fmt, &c), 0);
	assert_int_equal(kvmm_seq_create(c, 0, &seq), 0);
	assert_int_equal(kvmm_seq_append(c, seq, tokens, 64, NULL), 0);
	itest_have_daemon = false;
	assert_int_equal(itest_daemon_stop(&itest_d), 0);

	err = kvmm_seq_append(c, seq, tokens, 64, NULL);
	assert_true(err == -ENOTCONN || err == -EPIPE || err == -ECONNRESET);
	err = kvmm_seq_create(c, 0, &s2);
	assert_true(err == -ENOTCONN || err == -EPIPE);
	assert_true(kvmm_seal(c, seq, 0, 0) < 0);
	assert_true(kvmm_block_table(c, &seq, 1, (int32_t[4]){0}, 4) < 0);
	/* the pages stay mapped until detach: reading them does not fault */
	assert_non_null(kvmm_frame_addr(c, 0));
	(void)*(volatile unsigned char *)kvmm_frame_addr(c, 0);
	kvmm_detach(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_mismatch), cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_malformed),	 cmocka_unit_test(test_client_errors),
		cmocka_unit_test(test_daemon_gone),
	};
	int ret = cmocka_run_group_tests_name("itest_proto", tests, itest_group_setup,
					      itest_group_teardown);

	return ret == 0 && itest_no_daemon ? 77 : ret;
}
