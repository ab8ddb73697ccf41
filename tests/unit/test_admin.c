// SPDX-License-Identifier: MIT
/*
 * test_admin.c - unit tests for libkvmm's admin calls (runtime/admin.c) against a scripted
 * fake daemon on a Unix socket in a temporary directory: HELLO and the failures of
 * kvmm_admin_open (no socket, a refusal, a hang-up, a malformed status) with the words of
 * kvmm_admin_why; a read verb's answer reassembled from several records with events and a
 * stale reply in between; the namespace and swap-tier records as arrays; write verbs' requests
 * as the daemon sees them; a trace subscription
 * ended by SHUTDOWN; the tagged-text helpers; and the trace event names, which must be the
 * daemon's (kvmm/trace.c) because clients send them as mask bits.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvmm/trace.h"
#include "runtime/kvmm.h"

/* ---- a scripted daemon ------------------------------------------------------------------ */

enum script {
	S_HELLO_OK,	 /* HELLO answered, then the verbs below as they come */
	S_HELLO_EPROTO,	 /* HELLO refused */
	S_HELLO_HANGUP,	 /* the connection closed without an answer */
	S_HELLO_BADSTAT, /* a positive status: not a kvmm reply */
};

struct fake {
	char dir[64], path[108];
	int lfd;
	enum script script;
	pthread_t thr;
	/* what the daemon saw: the last request's op and payload */
	unsigned int last_op;
	unsigned char last_req[512] __attribute__((aligned(8)));
	size_t last_len;
};

static void reply(int fd, const struct kvmm_msg_hdr *req, int status, uint32_t flags, const void *p,
		  size_t len)
{
	unsigned char buf[KVMM_MSG_HDR_SIZE + 512] __attribute__((aligned(8)));
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf;

	assert_true(len <= 512);
	kvmm_msg_hdr_init_reply(h, req, (uint32_t)(KVMM_MSG_HDR_SIZE + len), status);
	h->flags |= (uint16_t)flags;
	if (len)
		memcpy(buf + KVMM_MSG_HDR_SIZE, p, len);
	assert_int_equal(send(fd, buf, KVMM_MSG_HDR_SIZE + len, MSG_NOSIGNAL),
			 (ssize_t)(KVMM_MSG_HDR_SIZE + len));
}

static void event(int fd, unsigned int op)
{
	struct kvmm_msg_hdr h;

	kvmm_msg_hdr_init(&h, op, sizeof(h), 0);
	send(fd, &h, sizeof(h), MSG_NOSIGNAL);
}

static void *fake_run(void *arg)
{
	struct fake *f = arg;
	unsigned char buf[KVMM_MSG_MAX] __attribute__((aligned(8)));
	const struct kvmm_msg_hdr *h = (const void *)buf;
	struct kvmm_hello_rep hello = {.abi_version = KVMM_ABI_VERSION,
				       .abi_min = KVMM_ABI_MIN_COMPAT,
				       .abi_agreed = KVMM_ABI_VERSION,
				       .page_size = 16384,
				       .client_id = 42};
	int fd = accept(f->lfd, NULL, NULL);
	ssize_t n;

	if (fd < 0)
		return NULL;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		if (kvmm_msg_hdr_check(h, (size_t)n))
			break;
		f->last_op = h->op;
		f->last_len = (size_t)n - KVMM_MSG_HDR_SIZE;
		if (f->last_len > sizeof(f->last_req))
			f->last_len = sizeof(f->last_req);
		memcpy(f->last_req, buf + KVMM_MSG_HDR_SIZE, f->last_len);
		switch (h->op) {
		case KVMM_OP_HELLO:
			if (f->script == S_HELLO_HANGUP)
				goto out;
			if (f->script == S_HELLO_EPROTO)
				reply(fd, h, -EPROTO, 0, &hello, sizeof(hello));
			else if (f->script == S_HELLO_BADSTAT)
				reply(fd, h, 5, 0, NULL, 0);
			else
				reply(fd, h, 0, 0, &hello, sizeof(hello));
			break;
		case KVMM_OP_STATUS: {
			struct kvmm_msg_hdr stale = *h;

			/* an event, a reply to another seq, then the answer in three records */
			event(fd, KVMM_OP_PREEMPT);
			stale.seq += 1000;
			reply(fd, &stale, 0, 0, "Stale: 1\n", 9);
			reply(fd, h, 0, KVMM_MSG_F_MORE, "Frames:  256\nFree", 17);
			event(fd, KVMM_OP_PREEMPT);
			reply(fd, h, 0, KVMM_MSG_F_MORE, "Frames:    200\n", 15);
			reply(fd, h, 0, 0, "Client: 3 name=x pid=7\n", 23);
			break;
		}
		case KVMM_OP_VMSTAT:
			reply(fd, h, -EACCES, 0, NULL, 0);
			break;
		case KVMM_OP_NAMESPACES: {
			const struct kvmm_admin_req *r = (const void *)(h + 1);
			static const char good[] =
				"Namespace: alpha id=1 frames=256 limit=- "
				"used=3 "
				"cached=2 priority=-4 clients=1 chunks=1 shared=0 hits=5 misses=7 "
				"pgsteal=9\n"
				"Namespace: beta id=2 frames=64 limit=10 used=0 priority=0\n";
			static const char bad[] = "Namespace: gamma id=x frames=1 limit=1 used=0 "
						  "priority=0\n";

			if (!strcmp(r->ns, "bad"))
				reply(fd, h, 0, 0, bad, sizeof(bad) - 1);
			else
				reply(fd, h, 0, 0, good, sizeof(good) - 1);
			break;
		}
		case KVMM_OP_SWAP: {
			static const char tiers[] =
				"Tier: 1 ns=alpha kind=host priority=10 slots=64 used=3 kept=1 "
				"pages_out=5 clean_out=0 pages_in=2 bytes_out=81920 bytes_in=32768 "
				"failures=0 direct=0\n"
				"Tier: 2 ns=alpha kind=file priority=-1 slots=256 used=0\n"
				"SwapTiers: 2\n";
			static const char none[] = "SwapTiers: 0\n";
			static const char bad[] = "Tier: 99 ns=alpha kind=host priority=1 slots=1 "
						  "used=0\n";
			const struct kvmm_admin_req *r = (const void *)(h + 1);

			if (!strcmp(r->ns, "none"))
				reply(fd, h, 0, 0, none, sizeof(none) - 1);
			else if (!strcmp(r->ns, "bad"))
				reply(fd, h, 0, 0, bad, sizeof(bad) - 1);
			else
				reply(fd, h, 0, 0, tiers, sizeof(tiers) - 1);
			break;
		}
		case KVMM_OP_RECLAIM:
		case KVMM_OP_DROP_CACHES: {
			struct kvmm_reclaim_rep rep = {.nr_frames = 17};

			reply(fd, h, 0, 0, &rep, sizeof(rep));
			break;
		}
		case KVMM_OP_LIMIT:
			reply(fd, h, -ENOENT, 0, NULL, 0);
			break;
		case KVMM_OP_TRACE:
			reply(fd, h, 0, KVMM_MSG_F_MORE, NULL, 0);
			reply(fd, h, 0, KVMM_MSG_F_MORE, "Event: 1 type=alloc\n", 20);
			event(fd, KVMM_OP_SHUTDOWN);
			break;
		default:
			reply(fd, h, 0, 0, NULL, 0);
			break;
		}
	}
out:
	close(fd);
	return NULL;
}

static struct fake *fake_start(enum script script)
{
	struct fake *f = calloc(1, sizeof(*f));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	assert_non_null(f);
	f->script = script;
	strcpy(f->dir, "/tmp/kvmm-test-admin.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	strcpy(sa.sun_path, f->path);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(pthread_create(&f->thr, NULL, fake_run, f), 0);
	return f;
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->thr, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_open_errors(void **state)
{
	char longpath[200];
	kvmm_admin_t *h = (kvmm_admin_t *)&h;
	struct fake *f;

	(void)state;
	assert_int_equal(kvmm_admin_open("/nonexistent/kvmmd.sock", &h), -ENOENT);
	assert_null(h);
	assert_non_null(strstr(kvmm_admin_why(), "connect to /nonexistent/kvmmd.sock"));
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(kvmm_admin_open(longpath, &h), -ENAMETOOLONG);
	assert_int_equal(kvmm_admin_open("/x", NULL), -EINVAL);
	kvmm_admin_close(NULL);

	f = fake_start(S_HELLO_EPROTO);
	assert_int_equal(kvmm_admin_open(f->path, &h), -EPROTO);
	assert_non_null(strstr(kvmm_admin_why(), "HELLO: "));
	fake_stop(f);

	f = fake_start(S_HELLO_HANGUP);
	assert_int_equal(kvmm_admin_open(f->path, &h), -ECONNRESET);
	assert_non_null(strstr(kvmm_admin_why(), "no answer to HELLO (connection closed)"));
	fake_stop(f);

	f = fake_start(S_HELLO_BADSTAT);
	assert_int_equal(kvmm_admin_open(f->path, &h), -EBADMSG);
	fake_stop(f);
}

static void test_read_reassembled(void **state)
{
	struct kvmm_admin_req req = {.flags = KVMM_ADMIN_F_JSON, .id = 9};
	const struct kvmm_hello_req *hr;
	struct fake *f = fake_start(S_HELLO_OK);
	kvmm_admin_t *h;
	int64_t v;
	char *text;

	(void)state;
	assert_int_equal(kvmm_admin_open(f->path, &h), 0);
	/* the HELLO the daemon saw, and the answer we keep */
	hr = (const void *)f->last_req;
	assert_int_equal(f->last_op, KVMM_OP_HELLO);
	assert_int_equal(hr->abi_version, KVMM_ABI_VERSION);
	assert_int_equal(hr->features, 0); /* an admin handle asks for no data plane */
	assert_int_equal(kvmm_admin_hello(h)->client_id, 42);
	assert_int_equal(kvmm_admin_hello(h)->page_size, 16384);

	assert_int_equal(kvmm_admin_read(h, KVMM_OP_STATUS, &req, &text), 0);
	assert_string_equal(text, "Frames:  256\nFreeFrames:    200\nClient: 3 name=x pid=7\n");
	assert_int_equal(f->last_len, sizeof(req));
	assert_memory_equal(f->last_req, &req, sizeof(req));
	assert_int_equal(kvmm_admin_value(text, "Frames", &v), 0);
	assert_int_equal(v, 256);
	free(text);

	/* errors: the daemon's status; a verb that is not a read; FOLLOW belongs elsewhere */
	assert_int_equal(kvmm_admin_read(h, KVMM_OP_VMSTAT, NULL, &text), -EACCES);
	assert_null(text);
	assert_int_equal(kvmm_admin_read(h, KVMM_OP_LIMIT, NULL, &text), -EINVAL);
	req.flags = KVMM_ADMIN_F_FOLLOW;
	assert_int_equal(kvmm_admin_read(h, KVMM_OP_TRACE, &req, &text), -EINVAL);
	assert_int_equal(kvmm_admin_read(h, KVMM_OP_STATUS, NULL, NULL), -EINVAL);
	kvmm_admin_close(h);
	fake_stop(f);
}

static void test_namespaces(void **state)
{
	struct fake *f = fake_start(S_HELLO_OK);
	const struct kvmm_admin_req *req = (const void *)f->last_req;
	struct kvmm_admin_ns *ns = (struct kvmm_admin_ns *)&ns;
	kvmm_admin_t *h;
	unsigned int nr = 99;

	(void)state;
	assert_int_equal(kvmm_admin_open(f->path, &h), 0);
	assert_int_equal(kvmm_admin_namespaces(h, NULL, &ns, &nr), 0);
	assert_int_equal(nr, 2);
	assert_string_equal(ns[0].name, "alpha");
	assert_int_equal(ns[0].id, 1);
	assert_int_equal(ns[0].frames, 256);
	assert_true(ns[0].limit == KVMM_LIMIT_NONE);
	assert_int_equal(ns[0].priority, -4);
	assert_int_equal(ns[0].cached, 2);
	assert_int_equal(ns[0].hits, 5);
	assert_int_equal(ns[0].misses, 7);
	assert_int_equal(ns[0].pgsteal, 9);
	/* counters a daemon does not report read 0 */
	assert_string_equal(ns[1].name, "beta");
	assert_int_equal(ns[1].limit, 10);
	assert_int_equal(ns[1].hits, 0);
	free(ns);
	assert_int_equal(kvmm_admin_namespaces(h, "beta", &ns, &nr), 0);
	assert_string_equal(req->ns, "beta"); /* the filter went out */
	free(ns);
	assert_int_equal(kvmm_admin_namespaces(h, "bad", &ns, &nr), -EBADMSG);
	assert_null(ns);
	assert_int_equal(nr, 0);
	assert_int_equal(kvmm_admin_namespaces(h, NULL, NULL, &nr), -EINVAL);

	/* the swap tiers the same way */
	{
		struct kvmm_admin_tier *t;

		assert_int_equal(kvmm_admin_swap_tiers(h, NULL, &t, &nr), 0);
		assert_int_equal(nr, 2);
		assert_int_equal(t[0].tier, 1);
		assert_string_equal(t[0].ns, "alpha");
		assert_string_equal(t[0].kind, "host");
		assert_int_equal(t[0].priority, 10);
		assert_int_equal(t[0].slots, 64);
		assert_int_equal(t[0].used, 3);
		assert_int_equal(t[0].kept, 1);
		assert_int_equal(t[0].pages_out, 5);
		assert_int_equal(t[0].pages_in, 2);
		assert_int_equal(t[0].bytes_out, 81920);
		assert_int_equal(t[1].priority, -1);
		assert_string_equal(t[1].kind, "file");
		assert_int_equal(t[1].pages_out, 0);
		free(t);
		assert_int_equal(kvmm_admin_swap_tiers(h, "none", &t, &nr), 0);
		assert_int_equal(nr, 0);
		free(t);
		assert_int_equal(kvmm_admin_swap_tiers(h, "bad", &t, &nr), -EBADMSG);
		assert_null(t);
	}
	kvmm_admin_close(h);
	fake_stop(f);
}

static void test_write_verbs(void **state)
{
	struct fake *f = fake_start(S_HELLO_OK);
	struct kvmm_limit_req lim = {.ns = "alpha", .max_frames = 5, .valid = KVMM_LIMIT_SET_MAX};
	struct kvmm_swapon_req on = {.tier = 2, .size = 1 << 20};
	const struct kvmm_fault_inject_req *fi = (const void *)f->last_req;
	const struct kvmm_reclaim_req *rr = (const void *)f->last_req;
	kvmm_admin_t *h;
	uint64_t n = 0;
	char spec[KVMM_FAULT_SPEC_LEN + 1];

	(void)state;
	assert_int_equal(kvmm_admin_open(f->path, &h), 0);
	assert_int_equal(kvmm_admin_reclaim(h, 99, KVMM_RECLAIM_F_NOSWAP, &n), 0);
	assert_int_equal(n, 17);
	assert_int_equal(f->last_op, KVMM_OP_RECLAIM);
	assert_int_equal(rr->nr_frames, 99);
	assert_int_equal(rr->flags, KVMM_RECLAIM_F_NOSWAP);
	n = 0;
	assert_int_equal(kvmm_admin_drop_caches(h, KVMM_DROP_F_SWAP, &n), 0);
	assert_int_equal(n, 17);
	assert_int_equal(kvmm_admin_drop_caches(h, KVMM_DROP_F_DEVICE, NULL), 0);
	assert_int_equal(kvmm_admin_limit(h, &lim), -ENOENT);
	assert_int_equal(f->last_op, KVMM_OP_LIMIT);
	assert_memory_equal(f->last_req, &lim, sizeof(lim));
	assert_int_equal(kvmm_admin_swapon(h, &on), 0);
	assert_int_equal(f->last_op, KVMM_OP_SWAPON);
	assert_memory_equal(f->last_req, &on, sizeof(on));
	assert_int_equal(kvmm_admin_fault_inject(h, "beta", "swap.write nth=2"), 0);
	assert_int_equal(f->last_op, KVMM_OP_FAULT_INJECT);
	assert_string_equal(fi->ns, "beta");
	assert_string_equal(fi->spec, "swap.write nth=2");
	assert_int_equal(kvmm_admin_fault_inject(h, NULL, "swap.read off"), 0);
	assert_string_equal(fi->ns, "");
	/* what does not fit the request is refused before it is sent */
	memset(spec, 'a', sizeof(spec) - 1);
	spec[sizeof(spec) - 1] = '\0';
	assert_int_equal(kvmm_admin_fault_inject(h, NULL, spec), -EINVAL);
	assert_int_equal(kvmm_admin_limit(h, NULL), -EINVAL);
	assert_int_equal(kvmm_admin_swapoff(h, NULL), -EINVAL);
	kvmm_admin_close(h);
	fake_stop(f);
}

static void test_trace_follow(void **state)
{
	struct fake *f = fake_start(S_HELLO_OK);
	const struct kvmm_admin_req *req = (const void *)f->last_req;
	kvmm_admin_t *h;
	char *text;

	(void)state;
	assert_int_equal(kvmm_admin_open(f->path, &h), 0);
	assert_int_equal(kvmm_admin_trace_next(h, 0, &text), -EINVAL); /* not subscribed */
	assert_int_equal(kvmm_admin_trace_follow(h, KVMM_ADMIN_F_CLEAR, 0, 0), -EINVAL);
	assert_int_equal(kvmm_admin_trace_follow(h, KVMM_ADMIN_F_JSON, 5, 1u << 3), 0);
	assert_int_equal(req->flags, KVMM_ADMIN_F_JSON | KVMM_ADMIN_F_FOLLOW);
	assert_int_equal(req->id, 5);
	assert_int_equal(req->reserved, 1u << 3);
	/* the subscription owns the handle */
	assert_int_equal(kvmm_admin_read(h, KVMM_OP_STATUS, NULL, &text), -EBUSY);
	assert_int_equal(kvmm_admin_trace_next(h, 5000, &text), 0);
	assert_string_equal(text, "Event: 1 type=alloc\n");
	free(text);
	assert_int_equal(kvmm_admin_trace_next(h, 5000, &text), -ESHUTDOWN);
	kvmm_admin_close(h);
	fake_stop(f);
}

static void test_tagged_text(void **state)
{
	static const char text[] = "Uptime:  12 s\n"
				   "Bad:     x\n"
				   "Neg:     -3\n"
				   "Client: 1 name=a pid=10 ns=alpha\n"
				   "Client: 2 name=bb pid=11 xpid=9\n"
				   "Clients: 2\n";
	const char *l;
	char b[4];
	int64_t v = 0;

	(void)state;
	assert_int_equal(kvmm_admin_value(text, "Uptime", &v), 0);
	assert_int_equal(v, 12);
	assert_int_equal(kvmm_admin_value(text, "Neg", &v), 0);
	assert_int_equal(v, -3);
	assert_int_equal(kvmm_admin_value(text, "Bad", &v), -ERANGE);
	assert_int_equal(kvmm_admin_value(text, "Up", &v), -ENOENT); /* whole names only */
	assert_int_equal(kvmm_admin_value(text, "Clients", &v), 0);
	assert_int_equal(v, 2);

	l = kvmm_admin_next(text, "Client", NULL);
	assert_ptr_equal(l, strstr(text, "Client: 1"));
	assert_int_equal(kvmm_admin_field(l, "pid", b, sizeof(b)), 2);
	assert_string_equal(b, "10");
	assert_int_equal(kvmm_admin_field(l, "ns", b, sizeof(b)), 3); /* cut to fit */
	assert_string_equal(b, "alp");
	assert_int_equal(kvmm_admin_field(l, "xpid", b, sizeof(b)), -ENOENT); /* on the next line */
	assert_string_equal(b, "");
	l = kvmm_admin_next(text, "Client", l);
	assert_ptr_equal(l, strstr(text, "Client: 2"));
	assert_int_equal(kvmm_admin_field(l, "pid", b, sizeof(b)), 2); /* not xpid's */
	assert_string_equal(b, "11");
	assert_null(kvmm_admin_next(text, "Client", l)); /* "Clients:" is another label */
	assert_null(kvmm_admin_next(NULL, "Client", NULL));
	assert_int_equal(kvmm_admin_value(NULL, "x", &v), -EINVAL);
}

static void test_trace_names(void **state)
{
	unsigned int t;

	(void)state;
	for (t = 0; t < KVMM_TR_TYPE_COUNT; t++) {
		assert_non_null(kvmm_admin_trace_event_name(t));
		assert_string_equal(kvmm_admin_trace_event_name(t), kvmm_trace_type_name(t));
		assert_int_equal(kvmm_admin_trace_event(kvmm_trace_type_name(t)), (int)t);
	}
	assert_null(kvmm_admin_trace_event_name(KVMM_TR_TYPE_COUNT));
	assert_int_equal(kvmm_admin_trace_event("bogus"), -EINVAL);
	assert_int_equal(kvmm_admin_trace_event(NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_errors),  cmocka_unit_test(test_read_reassembled),
		cmocka_unit_test(test_namespaces),   cmocka_unit_test(test_write_verbs),
		cmocka_unit_test(test_trace_follow), cmocka_unit_test(test_tagged_text),
		cmocka_unit_test(test_trace_names),
	};

	return cmocka_run_group_tests_name("test_admin", tests, NULL, NULL);
}
