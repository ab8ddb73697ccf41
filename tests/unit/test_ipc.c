// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ipc.c - the control-plane server (kvmm/ipc/) driven over a real socket.
 * The payload checks of proto.c are tested directly; everything else runs a server in a
 * thread (a fresh one per test, socket in a mkdtemp directory, mmap backend, a fake chunk
 * list of two memfds so the SCM_RIGHTS path is exercised) and talks to it with raw records
 * from a client written here, as a hostile or careless peer would.  Pool state is checked
 * through kvmm_server_ns_pool() under the pool lock.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/server.h"
#include "kvmm/mm.h"
#include "uapi/kvmm.h"

#define PAGE 4096u
#define CHUNK_SIZE (64u * PAGE)

struct fixture {
	char dir[64];
	char path[128];
	struct kvmm_server *srv;
	pthread_t thread;
	int run_ret;
	bool joined;
};

static int chunk_fds[2] = {-1, -1};

static int fake_chunks(struct kvmm_backend_ctx *be, const int **fds, uint32_t *nr,
		       uint64_t *chunk_size)
{
	(void)be;
	*fds = chunk_fds;
	*nr = 2;
	*chunk_size = CHUNK_SIZE;
	return 0;
}

static void *server_thread(void *arg)
{
	struct fixture *f = arg;

	f->run_ret = kvmm_server_run(f->srv);
	return NULL;
}

static int setup(void **state)
{
	static struct kvmm_ns_config ns[3];
	struct kvmm_server_config cfg;
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	memset(ns, 0, sizeof(ns));
	strcpy(ns[0].name, "alpha");
	ns[0].nframes = 256;
	strcpy(ns[1].name, "beta");
	ns[1].nframes = 128;
	strcpy(ns[2].name, "locked");
	ns[2].nframes = 64;
	ns[2].uids[0] = 12345; /* nobody we run as */
	ns[2].nr_uids = 1;

	strcpy(f->dir, "/tmp/kvmm-test-ipc.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	/* others may reach the socket (the permission test connects as nobody) */
	if (chmod(f->dir, 0755))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/kvmmd.sock", f->dir);
	memset(&cfg, 0, sizeof(cfg));
	cfg.socket_path = f->path;
	cfg.page_size = PAGE;
	cfg.chunk_size = CHUNK_SIZE;
	cfg.chunks = fake_chunks;
	cfg.backend = &kvmm_mmap_backend_ops;
	cfg.ns = ns;
	cfg.nr_ns = 3;
	if (kvmm_server_create(&cfg, &f->srv))
		return -1;
	if (pthread_create(&f->thread, NULL, server_thread, f))
		return -1;
	*state = f;
	return 0;
}

static void join(struct fixture *f)
{
	if (f->joined)
		return;
	kvmm_server_stop(f->srv);
	pthread_join(f->thread, NULL);
	f->joined = true;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	struct kvmm_server_stats st;
	int ret;

	join(f);
	kvmm_server_get_stats(f->srv, &st);
	kvmm_server_destroy(f->srv);
	rmdir(f->dir);
	/* the loop returned 0 and no teardown broke an invariant */
	ret = (f->run_ret || st.invariant_failures) ? -1 : 0;
	free(f);
	return ret;
}

static int group_setup(void **state)
{
	(void)state;
	chunk_fds[0] = memfd_create("kvmm-test-chunk0", MFD_CLOEXEC);
	chunk_fds[1] = memfd_create("kvmm-test-chunk1", MFD_CLOEXEC);
	return chunk_fds[0] < 0 || chunk_fds[1] < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	close(chunk_fds[0]);
	close(chunk_fds[1]);
	return 0;
}

/* ---- a raw client ------------------------------------------------------------------------ */

static int cli_connect(struct fixture *f)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(addr.sun_path, f->path);
	assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	return fd;
}

static uint64_t next_tag = 1;

static void send_raw(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

/*
 * Receive one record: header into *hdr, payload into @pl (up to @cap), fds into @fds (closed
 * when NULL).  Returns the record length, 0 at EOF.
 */
static ssize_t recv_rec(int fd, struct kvmm_msg_hdr *hdr, void *pl, size_t cap, int *fds,
			unsigned int *nfds)
{
	static uint8_t buf[KVMM_MSG_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr a;
	} cb;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cb.b,
			     .msg_controllen = sizeof(cb.b)};
	struct cmsghdr *c;
	unsigned int n = 0;
	ssize_t len = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);

	assert_true(len >= 0);
	if (len == 0)
		return 0;
	assert_true((size_t)len >= sizeof(*hdr));
	memcpy(hdr, buf, sizeof(*hdr));
	assert_int_equal(hdr->magic, KVMM_MAGIC);
	assert_int_equal(hdr->len, (uint32_t)len);
	if (pl)
		memcpy(pl, buf + sizeof(*hdr), min_t(size_t, cap, (size_t)len - sizeof(*hdr)));
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		size_t i, k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (i = 0; i < k; i++, n++) {
			int x;

			memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds)
				fds[n] = x;
			else
				close(x);
		}
	}
	if (nfds)
		*nfds = n;
	return len;
}

/* One request/reply: returns the status; the reply payload goes to @rep (@rlen its size). */
static int xfer_full(int fd, unsigned int op, const void *pl, size_t plen, void *rep, size_t cap,
		     size_t *rlen, int *fds, unsigned int *nfds)
{
	static uint8_t buf[KVMM_MSG_MAX];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf, r;
	uint64_t tag = next_tag++;
	ssize_t n;

	kvmm_msg_hdr_init(h, op, (uint32_t)(sizeof(*h) + plen), tag);
	if (plen)
		memcpy(h + 1, pl, plen);
	send_raw(fd, buf, sizeof(*h) + plen);
	n = recv_rec(fd, &r, rep, cap, fds, nfds);
	assert_true(n > 0);
	assert_int_equal(r.op, op | KVMM_OP_REPLY);
	assert_int_equal(r.seq, tag);
	if (rlen)
		*rlen = (size_t)n - sizeof(r);
	return r.status;
}

static int xfer(int fd, unsigned int op, const void *pl, size_t plen, void *rep, size_t cap)
{
	return xfer_full(fd, op, pl, plen, rep, cap, NULL, NULL, NULL);
}

static int hello(int fd, uint16_t ver, uint16_t min, struct kvmm_hello_rep *rep)
{
	struct kvmm_hello_req req;

	memset(&req, 0, sizeof(req));
	req.abi_version = ver;
	req.abi_min = min;
	req.pid = (uint32_t)getpid();
	req.features = KVMM_FEAT_ALL_V0;
	strcpy(req.name, "test");
	return xfer(fd, KVMM_OP_HELLO, &req, sizeof(req), rep, rep ? sizeof(*rep) : 0);
}

static const struct kvmm_format fmt_small = {
	.layers = 2,
	.kv_heads = 2,
	.head_dim = 64,
	.dtype = KVMM_DTYPE_FP16,
};

static int attach(int fd, const char *ns, struct kvmm_attach_rep *rep, unsigned int *nfds)
{
	struct kvmm_attach_req req;
	struct kvmm_attach_rep r;
	int fds[16];
	unsigned int i, n = 0;
	int ret;

	memset(&req, 0, sizeof(req));
	strncpy(req.ns, ns, sizeof(req.ns) - 1);
	req.fmt = fmt_small;
	ret = xfer_full(fd, KVMM_OP_ATTACH, &req, sizeof(req), &r, sizeof(r), NULL, fds, &n);
	for (i = 0; i < n; i++)
		close(fds[i]);
	if (rep)
		*rep = r;
	if (nfds)
		*nfds = n;
	return ret;
}

/* A connected, HELLOed client; attached to @ns unless NULL. */
static int client(struct fixture *f, const char *ns)
{
	int fd = cli_connect(f);

	assert_int_equal(hello(fd, KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, NULL), 0);
	if (ns)
		assert_int_equal(attach(fd, ns, NULL, NULL), 0);
	return fd;
}

static uint64_t seq_create(int fd)
{
	struct kvmm_seq_create_req req = {0};
	struct kvmm_seq_create_rep rep;

	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &req, sizeof(req), &rep, sizeof(rep)), 0);
	assert_true(rep.seq != 0);
	return rep.seq;
}

static int seq_append(int fd, uint64_t seq, const uint32_t *tokens, uint32_t n)
{
	uint8_t buf[sizeof(struct kvmm_seq_append_req) + 64 * sizeof(uint32_t)];
	struct kvmm_seq_append_req req = {.seq = seq, .nr_tokens = n};
	struct kvmm_seq_append_rep rep;

	assert_true(n <= 64);
	memcpy(buf, &req, sizeof(req));
	memcpy(buf + sizeof(req), tokens, n * sizeof(uint32_t));
	return xfer(fd, KVMM_OP_SEQ_APPEND, buf, sizeof(req) + n * sizeof(uint32_t), &rep,
		    sizeof(rep));
}

static int seq_op(int fd, unsigned int op, uint64_t seq, uint64_t ntok)
{
	struct kvmm_seq_truncate_req req = {.seq = seq, .nr_tokens = ntok};

	if (op == KVMM_OP_SEQ_FREE)
		return xfer(fd, op, &req, sizeof(struct kvmm_seq_free_req), NULL, 0);
	return xfer(fd, op, &req, sizeof(req), NULL, 0);
}

static int seal(int fd, uint64_t seq, uint32_t block, uint32_t nr)
{
	struct kvmm_seal_req req = {.seq = seq, .block = block, .nr_blocks = nr};

	return xfer(fd, KVMM_OP_SEAL, &req, sizeof(req), NULL, 0);
}

static int lookup(int fd, uint64_t seq, const uint32_t *tokens, uint32_t n,
		  struct kvmm_prefix_lookup_rep *rep)
{
	uint8_t buf[sizeof(struct kvmm_prefix_lookup_req) + 64 * sizeof(uint32_t)];
	struct kvmm_prefix_lookup_req req = {.seq = seq, .nr_tokens = n};

	memcpy(buf, &req, sizeof(req));
	memcpy(buf + sizeof(req), tokens, n * sizeof(uint32_t));
	return xfer(fd, KVMM_OP_PREFIX_LOOKUP, buf, sizeof(req) + n * sizeof(uint32_t), rep,
		    sizeof(*rep));
}

/* The block table of a sequence: returns the status, entries in @out (up to 64). */
static int blocks(int fd, uint64_t seq, int32_t *out, uint32_t *count)
{
	struct kvmm_seq_blocks_req req = {.seq = seq};
	struct {
		struct kvmm_seq_blocks_rep rep;
		int32_t b[64];
	} r;
	size_t rlen;
	int ret;

	memset(&r, 0, sizeof(r));
	ret = xfer_full(fd, KVMM_OP_SEQ_BLOCKS, &req, sizeof(req), &r, sizeof(r), &rlen, NULL,
			NULL);
	if (ret)
		return ret;
	assert_int_equal(rlen, sizeof(r.rep) + r.rep.count * sizeof(int32_t));
	memcpy(out, r.b, r.rep.count * sizeof(int32_t));
	*count = r.rep.count;
	return 0;
}

static int pin(int fd, unsigned int op, const uint64_t *ids, uint32_t n, uint32_t *frames)
{
	uint8_t buf[sizeof(struct kvmm_pin_req) + 8 * sizeof(uint64_t)];
	struct kvmm_pin_req req = {.nr_seqs = n};
	struct kvmm_pin_rep rep = {0};
	int ret;

	memcpy(buf, &req, sizeof(req));
	memcpy(buf + sizeof(req), ids, n * sizeof(uint64_t));
	ret = xfer(fd, op, buf, sizeof(req) + n * sizeof(uint64_t), &rep, sizeof(rep));
	if (frames)
		*frames = rep.nr_frames;
	return ret;
}

static int pin_range(int fd, unsigned int op, uint64_t seq, uint32_t block, uint32_t nr,
		     uint32_t flags, struct kvmm_pin_rep *out)
{
	struct kvmm_pin_range_req req = {
		.seq = seq, .block = block, .nr_blocks = nr, .flags = flags};
	struct kvmm_pin_rep rep = {0};
	int ret;

	ret = xfer(fd, op, &req, sizeof(req), &rep, sizeof(rep));
	if (out)
		*out = rep;
	return ret;
}

/* An admin read verb's whole text (records joined). */
static int admin_text(int fd, unsigned int op, const char *ns, char *out, size_t cap)
{
	struct kvmm_admin_req req;
	static uint8_t buf[KVMM_MSG_MAX];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf, r;
	uint64_t tag = next_tag++;
	size_t off = 0;

	memset(&req, 0, sizeof(req));
	if (ns)
		strcpy(req.ns, ns);
	kvmm_msg_hdr_init(h, op, sizeof(*h) + sizeof(req), tag);
	memcpy(h + 1, &req, sizeof(req));
	send_raw(fd, buf, sizeof(*h) + sizeof(req));
	do {
		ssize_t n = recv_rec(fd, &r, out + off, cap - 1 - off, NULL, NULL);

		assert_true(n > 0);
		assert_int_equal(r.seq, tag);
		if (r.status)
			return r.status;
		off += min_t(size_t, (size_t)n - sizeof(r), cap - 1 - off);
	} while (r.flags & KVMM_MSG_F_MORE);
	out[off] = '\0';
	return 0;
}

static uint32_t pool_state(struct fixture *f, const char *ns, enum kvmm_page_state st)
{
	struct kvmm_pool *pool = kvmm_server_ns_pool(f->srv, ns);
	uint32_t n;

	assert_non_null(pool);
	pthread_mutex_lock(&pool->lock);
	n = pool->nr_state[st];
	pthread_mutex_unlock(&pool->lock);
	return n;
}

static uint32_t pincount(struct fixture *f, const char *ns, uint32_t frame)
{
	struct kvmm_pool *pool = kvmm_server_ns_pool(f->srv, ns);
	uint32_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->pages[frame].pincount;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

static int check_invariants(struct fixture *f, const char *ns)
{
	struct kvmm_pool *pool = kvmm_server_ns_pool(f->srv, ns);
	char why[256];
	int ret;

	pthread_mutex_lock(&pool->lock);
	ret = kvmm_check_invariants(pool, why, sizeof(why));
	pthread_mutex_unlock(&pool->lock);
	if (ret)
		print_error("invariants: %s\n", why);
	return ret;
}

/* Wait (bounded, 10 s) until the server has no client left: hang-ups are asynchronous. */
static void wait_no_clients(struct fixture *f)
{
	struct kvmm_server_stats st;
	int i;

	for (i = 0; i < 10000; i++) {
		kvmm_server_get_stats(f->srv, &st);
		if (!st.clients)
			return;
		usleep(1000);
	}
	fail_msg("clients never went away");
}

/* ---- proto.c, directly ------------------------------------------------------------------ */

static void test_proto_payload_sizes(void **state)
{
	uint8_t buf[256];
	struct kvmm_seq_append_req ar = {.seq = 1, .nr_tokens = 3};
	struct kvmm_pin_req pr = {.nr_seqs = 2};
	struct kvmm_prefix_lookup_req lr = {.seq = 1, .nr_tokens = 4};

	(void)state;
	memset(buf, 0, sizeof(buf));
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_CREATE, buf, 16), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_CREATE, buf, 15), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_CREATE, buf, 17), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_BYE, buf, 0), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_BYE, buf, 1), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_HELLO, buf, 47), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_HELLO, buf, 64), 0); /* newer client */
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PING, buf, 7), 0);

	memcpy(buf, &ar, sizeof(ar));
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, 16 + 12), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, 16 + 8), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, 16 + 16), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, 8), -EBADMSG);
	ar.nr_tokens = UINT64_MAX / 2; /* a count that would overflow a size computation */
	memcpy(buf, &ar, sizeof(ar));
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND, buf, 16 + 12), -EBADMSG);

	{
		/* SEQ_APPEND_FRAMES: the token ids, then the frames, exactly */
		struct kvmm_seq_append_frames_req fr = {.seq = 1, .nr_tokens = 3, .nr_frames = 2};

		memcpy(buf, &fr, sizeof(fr));
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND_FRAMES, buf, 16 + 20),
				 0);
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND_FRAMES, buf, 16 + 12),
				 -EBADMSG);
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND_FRAMES, buf, 16 + 24),
				 -EBADMSG);
		assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_APPEND_FRAMES, buf, 12),
				 -EBADMSG);
	}

	memcpy(buf, &pr, sizeof(pr));
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PIN, buf, 8 + 16), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_UNPIN, buf, 8 + 8), -EBADMSG);
	memcpy(buf, &lr, sizeof(lr));
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PREFIX_LOOKUP, buf, 16 + 16), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PREFIX_LOOKUP, buf, 16 + 12), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEAL, buf, 16), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEAL, buf, 20), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SEQ_BLOCKS, buf, 16), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_STATUS, buf, 48), 0);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_STATUS, buf, 0), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_LIMIT, buf, 56), 0);

	/* unknown opcodes, replies and events are not requests */
	assert_int_equal(kvmm_ipc_check_payload(0x0177, buf, 0), -EOPNOTSUPP);
	assert_int_equal(kvmm_ipc_check_payload(0x0400, buf, 0), -EOPNOTSUPP);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_PING | KVMM_OP_REPLY, buf, 0), -EBADMSG);
	assert_int_equal(kvmm_ipc_check_payload(KVMM_OP_SHUTDOWN, buf, 8), -EBADMSG);
}

static void test_proto_request_header(void **state)
{
	uint8_t buf[64];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf, rep;

	(void)state;
	kvmm_msg_hdr_init(h, KVMM_OP_PING, 40, 7);
	memset(h + 1, 0, 8);
	assert_int_equal(kvmm_ipc_check_request(buf, 40), 0);
	assert_int_equal(kvmm_ipc_check_request(buf, 39), -EBADMSG); /* len field != record */
	assert_int_equal(kvmm_ipc_check_request(buf, 16), -EBADMSG); /* truncated header */
	h->flags = KVMM_MSG_F_FDS;
	assert_int_equal(kvmm_ipc_check_request(buf, 40), -EBADMSG); /* we take no fds */
	h->flags = KVMM_MSG_F_MORE;
	assert_int_equal(kvmm_ipc_check_request(buf, 40), -EBADMSG);
	h->flags = 0;
	h->abi = KVMM_ABI_VERSION + 1;
	assert_int_equal(kvmm_ipc_check_request(buf, 40), -EPROTO);
	h->abi = KVMM_ABI_VERSION;
	h->op = KVMM_OP_NONE;
	assert_int_equal(kvmm_ipc_check_request(buf, 40), -EOPNOTSUPP);
	h->op = KVMM_OP_PING;
	h->magic = 0x12345678;
	assert_int_equal(kvmm_ipc_check_request(buf, 40), -EBADMSG);

	/* an error reply echoes what it can read of a broken record */
	kvmm_ipc_error_hdr(&rep, buf, 40, -EBADMSG);
	assert_int_equal(rep.op, KVMM_OP_PING | KVMM_OP_REPLY);
	assert_int_equal(rep.seq, 7);
	assert_int_equal(rep.status, -EBADMSG);
	assert_int_equal(rep.magic, KVMM_MAGIC);
	kvmm_ipc_error_hdr(&rep, buf, 10, -EBADMSG);
	assert_int_equal(rep.seq, 0);
	assert_int_equal(rep.len, sizeof(rep));
}

/* ---- the server over a socket ------------------------------------------------------------ */

static void test_hello_ok(void **state)
{
	struct fixture *f = *state;
	struct kvmm_hello_rep rep;
	char ping[5] = "abcd", echo[5] = {0};
	int fd = cli_connect(f);

	assert_int_equal(hello(fd, KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, &rep), 0);
	assert_int_equal(rep.abi_agreed, KVMM_ABI_VERSION);
	assert_int_equal(rep.abi_version, KVMM_ABI_VERSION);
	assert_int_equal(rep.page_size, PAGE);
	assert_int_equal(rep.nr_frames, 256 + 128 + 64);
	assert_int_equal(rep.max_msg, KVMM_MSG_MAX);
	assert_true(rep.features & KVMM_FEAT_PREFIX_CACHE);
	assert_true(rep.features & KVMM_FEAT_FD_PASSING);
	assert_true(rep.features & KVMM_FEAT_RINGS); /* used only with KVMM_ATTACH_F_RINGS */
	assert_int_equal(rep.features & ~rep.features_supported, 0);
	assert_true(rep.client_id > 0);
	assert_int_equal(xfer(fd, KVMM_OP_PING, ping, sizeof(ping), echo, sizeof(echo)), 0);
	assert_string_equal(echo, "abcd");
	/* the largest record there is goes through; one byte more does not */
	{
		static uint8_t big[KVMM_MSG_MAX + 1];
		struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)big, r;

		memset(big, 0x11, sizeof(big));
		assert_int_equal(xfer(fd, KVMM_OP_PING, big, KVMM_MSG_PAYLOAD_MAX, NULL, 0), 0);
		kvmm_msg_hdr_init(h, KVMM_OP_PING, KVMM_MSG_MAX + 1, 99);
		send_raw(fd, big, KVMM_MSG_MAX + 1);
		assert_true(recv_rec(fd, &r, NULL, 0, NULL, NULL) > 0);
		assert_int_equal(r.status, -EBADMSG);
		assert_int_equal(r.seq, 99);
	}
	/* a second HELLO is a protocol error */
	assert_int_equal(hello(fd, KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, NULL), -EPROTO);
	close(fd);
}

static void test_version_mismatch(void **state)
{
	struct fixture *f = *state;
	struct kvmm_hello_rep rep;
	struct kvmm_msg_hdr h;
	int fd = cli_connect(f);

	memset(&rep, 0xff, sizeof(rep));
	assert_int_equal(hello(fd, KVMM_ABI_VERSION + 7, KVMM_ABI_VERSION + 5, &rep), -EPROTO);
	/* the -EPROTO reply still says which versions the daemon speaks */
	assert_int_equal(rep.abi_version, KVMM_ABI_VERSION);
	assert_int_equal(rep.abi_min, KVMM_ABI_MIN_COMPAT);
	/* and then the daemon hangs up */
	assert_int_equal(recv_rec(fd, &h, NULL, 0, NULL, NULL), 0);
	close(fd);

	/* the server still serves a new client */
	fd = client(f, "alpha");
	close(fd);
}

static void expect_error(int fd, const void *rec, size_t len, uint64_t seq, int status)
{
	struct kvmm_msg_hdr r;

	send_raw(fd, rec, len);
	assert_true(recv_rec(fd, &r, NULL, 0, NULL, NULL) > 0);
	assert_int_equal(r.status, status);
	assert_int_equal(r.seq, seq);
	assert_true(kvmm_op_is_reply(r.op));
}

static void test_malformed(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[128];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)buf;
	struct kvmm_server_stats st;
	int fd = cli_connect(f);

	/* before HELLO, only HELLO */
	kvmm_msg_hdr_init(h, KVMM_OP_PING, sizeof(*h), 11);
	expect_error(fd, buf, sizeof(*h), 11, -EPROTO);
	assert_int_equal(hello(fd, KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, NULL), 0);

	/* truncated header */
	expect_error(fd, buf, 20, 0, -EBADMSG);
	/* bad magic */
	h->magic = 0xdeadbeef;
	expect_error(fd, buf, sizeof(*h), 11, -EBADMSG);
	/* len field that is not the record's */
	kvmm_msg_hdr_init(h, KVMM_OP_PING, sizeof(*h) + 8, 12);
	expect_error(fd, buf, sizeof(*h), 12, -EBADMSG);
	/* unknown opcode */
	kvmm_msg_hdr_init(h, 0x0177, sizeof(*h), 13);
	expect_error(fd, buf, sizeof(*h), 13, -EOPNOTSUPP);
	/* payload of the wrong size */
	kvmm_msg_hdr_init(h, KVMM_OP_SEQ_CREATE, sizeof(*h) + 8, 14);
	memset(h + 1, 0, 8);
	expect_error(fd, buf, sizeof(*h) + 8, 14, -EBADMSG);
	/* an append whose count does not match the ids that follow */
	{
		struct kvmm_seq_append_req ar = {.seq = 1, .nr_tokens = 5};

		kvmm_msg_hdr_init(h, KVMM_OP_SEQ_APPEND, sizeof(*h) + sizeof(ar) + 8, 15);
		memcpy(h + 1, &ar, sizeof(ar));
		expect_error(fd, buf, sizeof(*h) + sizeof(ar) + 8, 15, -EBADMSG);
	}
	/* a reserved header field set */
	kvmm_msg_hdr_init(h, KVMM_OP_PING, sizeof(*h), 16);
	h->reserved = 1;
	expect_error(fd, buf, sizeof(*h), 16, -EBADMSG);
	/* a request with a status */
	kvmm_msg_hdr_init(h, KVMM_OP_PING, sizeof(*h), 17);
	h->status = -1;
	expect_error(fd, buf, sizeof(*h), 17, -EBADMSG);
	/* memory op before ATTACH */
	{
		struct kvmm_seq_create_req cr = {0};

		assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), NULL, 0), -ENOTCONN);
	}
	/* a record with descriptors attached: refused, and the fds closed, not leaked */
	{
		int pfd[2];
		union {
			char b[CMSG_SPACE(sizeof(int) * 2)];
			struct cmsghdr a;
		} cb;
		struct iovec iov;
		struct msghdr msg = {0};
		struct cmsghdr *c;
		struct kvmm_msg_hdr r;

		assert_int_equal(pipe(pfd), 0);
		kvmm_msg_hdr_init(h, KVMM_OP_PING, sizeof(*h), 18);
		iov.iov_base = buf;
		iov.iov_len = sizeof(*h);
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cb.b;
		msg.msg_controllen = sizeof(cb.b);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * 2);
		memcpy(CMSG_DATA(c), pfd, sizeof(pfd));
		assert_int_equal(sendmsg(fd, &msg, 0), (ssize_t)sizeof(*h));
		assert_true(recv_rec(fd, &r, NULL, 0, NULL, NULL) > 0);
		assert_int_equal(r.status, 0); /* a valid PING; the fds were dropped */
		close(pfd[0]);
		close(pfd[1]);
		kvmm_server_get_stats(f->srv, &st);
		assert_int_equal(st.fds_dropped, 2);
	}
	/* and the session still works */
	assert_int_equal(xfer(fd, KVMM_OP_PING, NULL, 0, NULL, 0), 0);
	assert_int_equal(attach(fd, "alpha", NULL, NULL), 0);
	close(fd);

	kvmm_server_get_stats(f->srv, &st);
	assert_true(st.bad_msgs >= 9);
	assert_int_equal(st.disconnect_bad, 0);
}

static void test_garbage_disconnects(void **state)
{
	struct fixture *f = *state;
	struct kvmm_msg_hdr h, r;
	struct kvmm_server_stats st;
	int i, fd = client(f, NULL);

	for (i = 0; i < KVMM_SERVER_MAX_BAD_MSGS; i++) {
		kvmm_msg_hdr_init(&h, 0x0177, sizeof(h), (uint64_t)i + 1);
		send_raw(fd, &h, sizeof(h));
		assert_true(recv_rec(fd, &r, NULL, 0, NULL, NULL) > 0);
		assert_int_equal(r.status, -EOPNOTSUPP);
	}
	/* past the limit the daemon hangs up */
	assert_int_equal(recv_rec(fd, &r, NULL, 0, NULL, NULL), 0);
	close(fd);
	kvmm_server_get_stats(f->srv, &st);
	assert_int_equal(st.disconnect_bad, 1);
	fd = client(f, "beta");
	close(fd);
}

static void test_attach(void **state)
{
	struct fixture *f = *state;
	struct kvmm_attach_req req;
	struct kvmm_attach_rep rep;
	unsigned int nfds = 0;
	int fd = cli_connect(f);

	/* ATTACH before HELLO */
	memset(&req, 0, sizeof(req));
	strcpy(req.ns, "alpha");
	req.fmt = fmt_small;
	assert_int_equal(xfer(fd, KVMM_OP_ATTACH, &req, sizeof(req), NULL, 0), -EPROTO);
	assert_int_equal(hello(fd, KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, NULL), 0);

	assert_int_equal(attach(fd, "nosuch", NULL, NULL), -ENOENT);
	assert_int_equal(attach(fd, "bad name!", NULL, NULL), -EINVAL);
	req.fmt.dtype = 99;
	assert_int_equal(xfer(fd, KVMM_OP_ATTACH, &req, sizeof(req), NULL, 0), -EINVAL);
	req.fmt = fmt_small;
	req.fmt.layers = 1024; /* a token larger than a page */
	req.fmt.kv_heads = 64;
	assert_int_equal(xfer(fd, KVMM_OP_ATTACH, &req, sizeof(req), NULL, 0), -EINVAL);
	req.fmt = fmt_small;
	req.flags = 1U << 31; /* not a KVMM_ATTACH_F_* bit */
	assert_int_equal(xfer(fd, KVMM_OP_ATTACH, &req, sizeof(req), NULL, 0), -EINVAL);
	/* naming a device: its UUID must follow, and host memory is on no device */
	req.flags = KVMM_ATTACH_F_DEVICE;
	assert_int_equal(xfer(fd, KVMM_OP_ATTACH, &req, sizeof(req), NULL, 0), -EBADMSG);
	{
		uint8_t buf[sizeof(req) + sizeof(struct kvmm_attach_device) + 1] = {0};

		memcpy(buf, &req, sizeof(req));
		assert_int_equal(xfer(fd, KVMM_OP_ATTACH, buf, sizeof(buf), NULL, 0), -EBADMSG);
		assert_int_equal(xfer(fd, KVMM_OP_ATTACH, buf, sizeof(buf) - 1, NULL, 0), -ENODEV);
	}
	req.flags = 0;

	assert_int_equal(attach(fd, "alpha", &rep, &nfds), 0);
	assert_int_equal(nfds, 2); /* the chunk memfds rode along */
	assert_int_equal(rep.nr_fds, 2);
	assert_int_equal(rep.nr_chunks, 2);
	assert_int_equal(rep.chunk_size, CHUNK_SIZE);
	assert_int_equal(rep.tokens_per_page, 4);
	assert_int_equal(rep.bytes_per_token, 1024);
	assert_int_equal(rep.nr_frames, 256);
	assert_int_equal(rep.ns_id, 1);
	assert_int_equal(rep.shm_size, 0);
	assert_int_equal(rep.device_index, 0);
	assert_int_equal(rep.nr_devices, 1);
	assert_int_equal(attach(fd, "alpha", NULL, NULL), -EEXIST);

	/* DETACH, then attach elsewhere */
	assert_int_equal(xfer(fd, KVMM_OP_DETACH, NULL, 0, NULL, 0), 0);
	assert_int_equal(xfer(fd, KVMM_OP_DETACH, NULL, 0, NULL, 0), -ENOTCONN);
	assert_int_equal(attach(fd, "beta", &rep, NULL), 0);
	assert_int_equal(rep.ns_id, 2);
	/* BYE: replied, then closed */
	assert_int_equal(xfer(fd, KVMM_OP_BYE, NULL, 0, NULL, 0), 0);
	{
		struct kvmm_msg_hdr r;

		assert_int_equal(recv_rec(fd, &r, NULL, 0, NULL, NULL), 0);
	}
	close(fd);
}

/*
 * Access: root may attach anywhere and use admin verbs.  Any other uid needs to be listed
 * (or, with empty lists, be the daemon's owner).  As root, the denied path runs in a child
 * that drops to nobody before connecting (SO_PEERCRED is taken at connect).
 */
static void test_attach_permission(void **state)
{
	struct fixture *f = *state;
	pid_t pid;
	int status;

	if (geteuid() != 0) {
		int fd = client(f, NULL);
		char text[4096];

		assert_int_equal(attach(fd, "locked", NULL, NULL), -EACCES);
		assert_int_equal(attach(fd, "alpha", NULL, NULL), 0); /* owner: us */
		assert_int_equal(admin_text(fd, KVMM_OP_STATUS, NULL, text, sizeof(text)), -EACCES);
		close(fd);
		return;
	}
	/* root: everything allowed */
	{
		int fd = client(f, "locked");

		close(fd);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sockaddr_un addr = {.sun_family = AF_UNIX};
		struct kvmm_hello_req hr;
		struct kvmm_attach_req ar;
		struct kvmm_admin_req adm;
		struct {
			struct kvmm_msg_hdr h;
			uint8_t p[64];
		} m;
		int fd, code = 0;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(10);
		fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		strcpy(addr.sun_path, f->path);
		if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)))
			_exit(11);
		memset(&hr, 0, sizeof(hr));
		hr.abi_version = KVMM_ABI_VERSION;
		kvmm_msg_hdr_init(&m.h, KVMM_OP_HELLO, sizeof(m.h) + sizeof(hr), 1);
		memcpy(m.p, &hr, sizeof(hr));
		if (send(fd, &m, m.h.len, 0) != (ssize_t)m.h.len ||
		    recv(fd, &m, sizeof(m), 0) <= 0 || m.h.status != 0)
			_exit(12);
		memset(&ar, 0, sizeof(ar));
		strcpy(ar.ns, "locked");
		ar.fmt = fmt_small;
		kvmm_msg_hdr_init(&m.h, KVMM_OP_ATTACH, sizeof(m.h) + sizeof(ar), 2);
		memcpy(m.p, &ar, sizeof(ar));
		if (send(fd, &m, m.h.len, 0) != (ssize_t)m.h.len || recv(fd, &m, sizeof(m), 0) <= 0)
			_exit(13);
		if (m.h.status != -EACCES)
			code = 20;
		/* empty id lists: only the owner (root here) */
		strcpy(ar.ns, "alpha");
		kvmm_msg_hdr_init(&m.h, KVMM_OP_ATTACH, sizeof(m.h) + sizeof(ar), 3);
		memcpy(m.p, &ar, sizeof(ar));
		if (send(fd, &m, m.h.len, 0) != (ssize_t)m.h.len || recv(fd, &m, sizeof(m), 0) <= 0)
			_exit(14);
		if (m.h.status != -EACCES)
			code = 21;
		memset(&adm, 0, sizeof(adm));
		kvmm_msg_hdr_init(&m.h, KVMM_OP_STATUS, sizeof(m.h) + sizeof(adm), 4);
		memcpy(m.p, &adm, sizeof(adm));
		if (send(fd, &m, m.h.len, 0) != (ssize_t)m.h.len || recv(fd, &m, sizeof(m), 0) <= 0)
			_exit(15);
		if (m.h.status != -EACCES)
			code = 22;
		_exit(code);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_share_prefix(void **state)
{
	struct fixture *f = *state;
	uint32_t tok[12], na, nb, i;
	int32_t fa[64], fb[64];
	struct kvmm_prefix_lookup_rep lr;
	uint64_t sa, sb, sc, child;
	int a = client(f, "alpha"), b = client(f, "alpha"), c = client(f, "beta");

	for (i = 0; i < 12; i++)
		tok[i] = 1000 + i;
	sa = seq_create(a);
	assert_int_equal(seq_append(a, sa, tok, 10), 0);
	assert_int_equal(seq_append(a, sa, tok + 10, 2), 0); /* 12 tokens: 3 full pages */
	assert_int_equal(seal(a, sa, 1, 0), -EINVAL); /* block 0 not sealed yet: keys chain */
	assert_int_equal(seal(a, sa, 0, 4), -EINVAL); /* only 3 full blocks */
	assert_int_equal(seal(a, sa, 0, 2), 0);
	assert_int_equal(seal(a, sa, 0, 0), 0); /* the rest */
	assert_int_equal(blocks(a, sa, fa, &na), 0);
	assert_int_equal(na, 3);

	/*
	 * A second client of the namespace hits the first's sealed pages: same frames.  The
	 * prompt comes in two lookups, as a long one split over records does.
	 */
	sb = seq_create(b);
	assert_int_equal(lookup(b, sb, tok, 8, &lr), 0);
	assert_int_equal(lr.nr_tokens, 8);
	assert_int_equal(lr.nr_blocks, 2);
	assert_int_equal(lookup(b, sb, tok + 8, 4, &lr), 0);
	assert_int_equal(lr.nr_tokens, 12);
	assert_int_equal(lr.nr_blocks, 1);
	assert_int_equal(blocks(b, sb, fb, &nb), 0);
	assert_int_equal(nb, 3);
	for (i = 0; i < 3; i++) {
		assert_true(fa[i] >= 0);
		assert_int_equal(fa[i], fb[i]);
	}
	/* a continuation that misses maps nothing more */
	assert_int_equal(lookup(b, sb, tok, 12, &lr), 0);
	assert_int_equal(lr.nr_tokens, 12);
	assert_int_equal(lr.nr_blocks, 0);
	assert_int_equal(check_invariants(f, "alpha"), 0);
	/* only a whole, sealed prefix can be continued */
	assert_int_equal(seq_append(b, sb, tok, 1), 0);
	assert_int_equal(lookup(b, sb, tok, 12, &lr), -EINVAL);
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_TRUNCATE, sb, 12), 0);

	/* another namespace: nothing */
	sc = seq_create(c);
	assert_int_equal(lookup(c, sc, tok, 12, &lr), 0);
	assert_int_equal(lr.nr_tokens, 0);

	/* ids are per client: b cannot touch a's sequence by guessing */
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_FREE, sa + 100, 0), -ENOENT);
	assert_int_equal(seq_op(c, KVMM_OP_SEQ_TRUNCATE, 12345, 0), -ENOENT);

	/* fork shares, truncate and free work on b's own */
	{
		struct kvmm_seq_fork_req fr = {.seq = sb, .nr_tokens = 6};
		struct kvmm_seq_fork_rep frep;
		int32_t fc[64];
		uint32_t nc;

		assert_int_equal(xfer(b, KVMM_OP_SEQ_FORK, &fr, sizeof(fr), &frep, sizeof(frep)),
				 0);
		child = frep.seq;
		assert_int_equal(frep.nr_blocks, 2);
		assert_int_equal(blocks(b, child, fc, &nc), 0);
		assert_int_equal(nc, 2);
		assert_int_equal(fc[0], fb[0]);
		fr.nr_tokens = 13;
		assert_int_equal(xfer(b, KVMM_OP_SEQ_FORK, &fr, sizeof(fr), NULL, 0), -EINVAL);
	}
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_TRUNCATE, sb, 4), 0);
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_TRUNCATE, sb, 5), -EINVAL);
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_FREE, child, 0), 0);
	assert_int_equal(seq_op(b, KVMM_OP_SEQ_FREE, child, 0), -ENOENT);

	close(a);
	close(b);
	close(c);
	wait_no_clients(f);
	/* sealed pages stay cached after their clients are gone; nothing stays mapped */
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 0);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_CACHED), 3);
	assert_int_equal(pool_state(f, "beta", KVMM_PAGE_MAPPED), 0);
}

static void test_pin(void **state)
{
	struct fixture *f = *state;
	uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, frames, n;
	int32_t fr[64];
	uint64_t s1, s2, ids[3], bogus = 999;
	int fd = client(f, "alpha");

	s1 = seq_create(fd);
	s2 = seq_create(fd);
	assert_int_equal(seq_append(fd, s1, tok, 8), 0); /* 2 blocks */
	assert_int_equal(seq_append(fd, s2, tok, 3), 0); /* 1 block */
	assert_int_equal(blocks(fd, s1, fr, &n), 0);
	assert_int_equal(n, 2);

	ids[0] = s1;
	ids[1] = s2;
	ids[2] = s1; /* pins nest */
	assert_int_equal(pin(fd, KVMM_OP_PIN, ids, 3, &frames), 0);
	assert_int_equal(frames, 2 + 1 + 2);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 2);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[1]), 2);

	/* a pinned sequence's frames cannot change */
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, s1, 0), -EBUSY);
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_TRUNCATE, s1, 0), -EBUSY);
	assert_int_equal(seq_append(fd, s1, tok, 1), -EBUSY);
	assert_int_equal(seal(fd, s1, 0, 0), -EBUSY);
	/* an unknown id fails the whole batch */
	assert_int_equal(pin(fd, KVMM_OP_PIN, &bogus, 1, NULL), -ENOENT);
	ids[1] = bogus;
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, ids, 2, NULL), -ENOENT);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 2);

	ids[0] = s1;
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, ids, 1, &frames), 0);
	assert_int_equal(frames, 2);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 1);
	ids[1] = s1;
	/* more UNPINs than PINs: refused, nothing changed */
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, ids, 2, NULL), -EINVAL);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 1);
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, ids, 1, NULL), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 0);
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, s1, 0), 0);

	/* s2 stays pinned: hanging up drops the pin and frees everything */
	assert_int_equal(blocks(fd, s2, fr, &n), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 1);
	close(fd);
	wait_no_clients(f);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 0);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 0);
}

static void test_disconnect_frees(void **state)
{
	struct fixture *f = *state;
	struct kvmm_server_stats st;
	struct kvmm_seq_create_req cr = {.nr_tokens = 40};
	struct kvmm_seq_create_rep rep;
	int i, fd[4];

	for (i = 0; i < 4; i++) {
		fd[i] = client(f, "alpha");
		assert_int_equal(
			xfer(fd[i], KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
		assert_int_equal(rep.nr_blocks, 10);
	}
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 40);
	for (i = 0; i < 4; i++)
		close(fd[i]);
	wait_no_clients(f);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 0);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAGAZINE), 0);
	kvmm_server_get_stats(f->srv, &st);
	assert_int_equal(st.detached, 4);
	assert_int_equal(st.hangups, 4);
	assert_int_equal(st.invariant_failures, 0);
}

static void test_admin(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	struct kvmm_drop_caches_req dr = {.flags = KVMM_DROP_F_DEVICE};
	struct kvmm_reclaim_req rr = {.nr_frames = 100};
	struct kvmm_reclaim_rep rrep;
	struct kvmm_limit_req lr;
	uint32_t tok[8] = {9, 9, 9, 9, 8, 8, 8, 8};
	uint64_t s;
	int fd = client(f, "beta");

	if (geteuid() != 0)
		skip(); /* admin verbs need root or the admin group */
	assert_int_equal(admin_text(fd, KVMM_OP_STATUS, NULL, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "Clients:          1\n"));
	assert_non_null(strstr(text, "Frames:           448 frames\n"));
	assert_int_equal(admin_text(fd, KVMM_OP_MEMINFO, "beta", text, sizeof(text)), 0);
	assert_non_null(strstr(text, "Namespace:        beta\n"));
	assert_non_null(strstr(text, "Total:            128 frames\n"));
	assert_null(strstr(text, "alpha"));
	assert_int_equal(admin_text(fd, KVMM_OP_MEMINFO, "nosuch", text, sizeof(text)), -ENOENT);
	assert_int_equal(admin_text(fd, KVMM_OP_BUDDYINFO, NULL, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "Namespace: locked\n"));
	assert_int_equal(admin_text(fd, KVMM_OP_CLIENTS, NULL, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "state=attached ns=beta"));
	assert_int_equal(admin_text(fd, KVMM_OP_NAMESPACES, NULL, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "Namespace: alpha id=1 frames=256"));
	assert_int_equal(admin_text(fd, KVMM_OP_SEQS, NULL, text, sizeof(text)), 0);

	/* seal two pages, drop them from the cache, and see vmstat count it */
	s = seq_create(fd);
	assert_int_equal(seq_append(fd, s, tok, 8), 0);
	assert_int_equal(seal(fd, s, 0, 0), 0);
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, s, 0), 0);
	assert_int_equal(pool_state(f, "beta", KVMM_PAGE_CACHED), 2);
	assert_int_equal(xfer(fd, KVMM_OP_DROP_CACHES, &dr, sizeof(dr), &rrep, sizeof(rrep)), 0);
	assert_int_equal(rrep.nr_frames, 2);
	assert_int_equal(pool_state(f, "beta", KVMM_PAGE_CACHED), 0);
	assert_int_equal(xfer(fd, KVMM_OP_RECLAIM, &rr, sizeof(rr), &rrep, sizeof(rrep)), 0);
	assert_int_equal(rrep.nr_frames, 0);
	dr.flags = 0;
	assert_int_equal(xfer(fd, KVMM_OP_DROP_CACHES, &dr, sizeof(dr), NULL, 0), -EINVAL);
	assert_int_equal(admin_text(fd, KVMM_OP_VMSTAT, "beta", text, sizeof(text)), 0);
	assert_non_null(strstr(text, ": 2\n")); /* seal and pgsteal both 2 */

	memset(&lr, 0, sizeof(lr));
	strcpy(lr.ns, "beta");
	lr.valid = KVMM_LIMIT_SET_MAX;
	lr.max_frames = 50;
	assert_int_equal(xfer(fd, KVMM_OP_LIMIT, &lr, sizeof(lr), NULL, 0), 0);
	assert_int_equal(admin_text(fd, KVMM_OP_MEMINFO, "beta", text, sizeof(text)), 0);
	assert_non_null(strstr(text, "Limit:            50 frames\n"));
	strcpy(lr.ns, "nosuch");
	assert_int_equal(xfer(fd, KVMM_OP_LIMIT, &lr, sizeof(lr), NULL, 0), -ENOENT);
	close(fd);
}

static void test_shutdown(void **state)
{
	struct fixture *f = *state;
	struct kvmm_shutdown_event ev;
	struct kvmm_msg_hdr h;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = client(f, "alpha"), fd2;

	seq_create(fd);
	join(f); /* kvmm_server_stop + wait for run() */
	assert_int_equal(f->run_ret, 0);
	assert_true(recv_rec(fd, &h, &ev, sizeof(ev), NULL, NULL) > 0);
	assert_int_equal(h.op, KVMM_OP_SHUTDOWN);
	assert_int_equal(h.seq, 0);
	assert_int_equal(ev.reason, KVMM_SHUTDOWN_SIGNAL);
	assert_int_equal(recv_rec(fd, &h, NULL, 0, NULL, NULL), 0);
	close(fd);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 0);
	/* no longer accepting */
	fd2 = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	strcpy(addr.sun_path, f->path);
	assert_int_not_equal(connect(fd2, (struct sockaddr *)&addr, sizeof(addr)), 0);
	close(fd2);
}

static void test_create_errors(void **state)
{
	struct fixture *f = *state;
	struct kvmm_ns_config ns;
	struct kvmm_server_config cfg;
	struct kvmm_server *srv;

	memset(&ns, 0, sizeof(ns));
	strcpy(ns.name, "x");
	ns.nframes = 16;
	memset(&cfg, 0, sizeof(cfg));
	cfg.socket_path = f->path;
	cfg.page_size = PAGE;
	cfg.ns = &ns;
	cfg.nr_ns = 1;
	cfg.backend = &kvmm_mmap_backend_ops;
	/* a live daemon listens on the path */
	assert_int_equal(kvmm_server_create(&cfg, &srv), -EADDRINUSE);
	/* bad namespace */
	strcpy(ns.name, "a b");
	assert_int_equal(kvmm_server_create(&cfg, &srv), -EINVAL);
	memset(ns.name, 0, sizeof(ns.name));
	strcpy(ns.name, "x");
	ns.limit = 17;
	assert_int_equal(kvmm_server_create(&cfg, &srv), -EINVAL);
	ns.limit = 0;
	/* a stale socket (nobody listening) is replaced */
	join(f);
	{
		char path[160];
		struct sockaddr_un addr = {.sun_family = AF_UNIX};
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

		snprintf(path, sizeof(path), "%s/stale.sock", f->dir);
		strcpy(addr.sun_path, path);
		assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
		close(fd); /* the file stays, nobody listens */
		cfg.socket_path = path;
		assert_int_equal(kvmm_server_create(&cfg, &srv), 0);
		kvmm_server_stop(srv);
		assert_int_equal(kvmm_server_run(srv), 0);
		kvmm_server_destroy(srv);
		assert_int_not_equal(access(path, F_OK), 0); /* unlinked at destroy */
	}
}

/*
 * SEQ_CREATE of more blocks than the pool has frames is refused before anything is sized
 * for it (found by tests/fuzz/fuzz_session.c: UINT32_MAX tokens made the daemon allocate
 * gigabytes of page-table arrays before it ran out of frames).
 */
static void test_create_too_big(void **state)
{
	struct fixture *f = *state;
	struct kvmm_seq_create_req cr = {0};
	struct kvmm_seq_create_rep rep;
	int fd = client(f, "beta"); /* 128 frames, 4 tokens per page */

	cr.nr_tokens = 129 * 4;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), -E2BIG);
	cr.nr_tokens = UINT32_MAX;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), -E2BIG);
	/* nothing was taken, nobody was preempted, and a sequence that fits still does */
	assert_int_equal(pool_state(f, "beta", KVMM_PAGE_MAPPED), 0);
	cr.nr_tokens = 8;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	assert_int_equal(rep.nr_blocks, 2);
	assert_int_equal(check_invariants(f, "beta"), 0);
	close(fd);
}

/*
 * A request that can never succeed fails at once with -E2BIG against the namespace's limit
 * (plus its swap slots, none here), before reclaim or OOM preemption touch anyone: a create
 * or an append of more new blocks than the limit (issue 26, defect 4).
 */
static void test_too_big_for_limit(void **state)
{
	struct fixture *f = *state;
	struct kvmm_pool *pool = kvmm_server_ns_pool(f->srv, "beta");
	struct kvmm_seq_create_req cr = {0};
	struct kvmm_seq_create_rep rep;
	uint32_t tok[64] = {0};
	int fd = client(f, "beta"); /* 128 frames, 4 tokens per page */
	uint64_t seq;

	pthread_mutex_lock(&pool->lock);
	assert_int_equal(kvmm_ns_set_limit(kvmm_ns_find(pool, "beta"), 8), 0);
	pthread_mutex_unlock(&pool->lock);
	cr.nr_tokens = 9 * 4;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), -E2BIG);
	seq = seq_create(fd);
	/* 9 new blocks in one append: refused whole, nothing allocated */
	assert_int_equal(seq_append(fd, seq, tok, 9 * 4), -E2BIG);
	assert_int_equal(pool_state(f, "beta", KVMM_PAGE_MAPPED), 0);
	/* 8 fit; then one more is an ordinary -ENOMEM (the limit, after reclaim) */
	assert_int_equal(seq_append(fd, seq, tok, 8 * 4), 0);
	assert_int_equal(seq_append(fd, seq, tok, 1), -ENOMEM);
	assert_int_equal(check_invariants(f, "beta"), 0);
	close(fd);
}

/* ---- swap: a 16-frame pool with a host swap tier, no kvswapd ------------------------------ */

/* A server of one namespace @name of @nframes frames; the cfg's other fields as given. */
static int setup_one(void **state, const char *name, uint32_t nframes,
		     struct kvmm_server_config *cfg)
{
	static struct kvmm_ns_config ns;
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	memset(&ns, 0, sizeof(ns));
	strcpy(ns.name, name);
	ns.nframes = nframes;
	strcpy(f->dir, "/tmp/kvmm-test-ipc.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/kvmmd.sock", f->dir);
	cfg->socket_path = f->path;
	cfg->page_size = PAGE;
	cfg->ns = &ns;
	cfg->nr_ns = 1;
	if (kvmm_server_create(cfg, &f->srv))
		return -1;
	if (pthread_create(&f->thread, NULL, server_thread, f))
		return -1;
	*state = f;
	return 0;
}

static int setup_swap(void **state)
{
	struct kvmm_server_config cfg = {
		.backend = &kvmm_mmap_backend_ops,
		.swap.host_size = 32 * PAGE,
		.swap.no_kswapd = true,
	};

	return setup_one(state, "small", 16, &cfg);
}

/*
 * SEAL of blocks that reclaim swapped out since the append brings them back first (found by
 * tests/fuzz/fuzz_session.c: the daemon sealed the swap PTE's "frame" and hit a BUG).
 */
static void test_seal_swapped(void **state)
{
	struct fixture *f = *state;
	struct kvmm_seq_create_req cr = {.priority = -10}; /* reclaim's first choice */
	struct kvmm_seq_create_rep rep;
	uint32_t tok[12], n;
	int32_t b[64];
	uint64_t a;
	int fd = client(f, "small");

	for (unsigned int i = 0; i < 12; i++)
		tok[i] = 100 + i;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	a = rep.seq;
	assert_int_equal(seq_append(fd, a, tok, 12), 0); /* 3 full blocks */
	assert_int_equal(seal(fd, a, 0, 1), 0);		 /* block 0 sealed, 1 and 2 not */
	/* a sequence that needs nearly every frame: reclaim swaps the low-priority one out */
	cr.priority = 0;
	cr.nr_tokens = 14 * 4;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(b[0], KVMM_BLOCK_NONE);
	assert_int_equal(b[1], KVMM_BLOCK_NONE);
	/* room for it to come back, then seal the rest: its blocks (and block 0) fault in */
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, rep.seq, 0), 0);
	assert_int_equal(seal(fd, a, 1, 0), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	for (unsigned int i = 0; i < 3; i++)
		assert_true(b[i] >= 0);
	assert_int_equal(check_invariants(f, "small"), 0);
	close(fd);
	wait_no_clients(f);
	assert_int_equal(pool_state(f, "small", KVMM_PAGE_MAPPED), 0);
}

/*
 * APPEND to a sequence whose partial last block was swapped out: the block comes back, and
 * the reclaim that the new blocks' allocation runs must not swap it out again before it is
 * written (found by tests/fuzz/fuzz_ring.c: the core then read the swap PTE as a frame and
 * hit a BUG).
 */
static void test_append_swapped(void **state)
{
	struct fixture *f = *state;
	struct kvmm_seq_create_req cr = {.priority = -10}; /* reclaim's first choice */
	struct kvmm_seq_create_rep rep;
	uint32_t tok[8], n;
	int32_t b[64];
	uint64_t a;
	int fd = client(f, "small");

	for (unsigned int i = 0; i < 8; i++)
		tok[i] = 200 + i;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	a = rep.seq;
	assert_int_equal(seq_append(fd, a, tok, 5), 0); /* a full block and one token */
	cr.priority = 0;
	cr.nr_tokens = 15 * 4;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(b[1], KVMM_BLOCK_NONE);
	/* the tail faults in, then two new frames need reclaim: the tail must stay */
	assert_int_equal(seq_append(fd, a, tok, 8), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	assert_int_equal(n, 4);
	for (unsigned int i = 1; i < 4; i++)
		assert_true(b[i] >= 0);
	assert_int_equal(check_invariants(f, "small"), 0);
	close(fd);
	wait_no_clients(f);
	assert_int_equal(pool_state(f, "small", KVMM_PAGE_MAPPED), 0);
}

/*
 * SEQ_PIN_RANGE / SEQ_UNPIN_RANGE: part of a sequence pinned, ranges nest and overlap (with
 * each other and with PIN), each unpin ends a pin of exactly that range, the sequence cannot
 * change meanwhile, bad ranges are refused, and hanging up drops what is left.
 */
static void test_pin_range(void **state)
{
	struct fixture *f = *state;
	uint32_t tok[16], n;
	struct kvmm_pin_rep rep;
	int32_t fr[64];
	uint64_t s1;
	int fd = client(f, "alpha");

	for (unsigned int i = 0; i < 16; i++)
		tok[i] = 300 + i;
	s1 = seq_create(fd);
	assert_int_equal(seq_append(fd, s1, tok, 14), 0); /* 4 blocks, the last partial */
	assert_int_equal(blocks(fd, s1, fr, &n), 0);
	assert_int_equal(n, 4);

	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 1, 2, 0, &rep), 0);
	assert_int_equal(rep.nr_frames, 2);
	assert_int_equal(rep.nr_swapin, 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[1]), 1);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[2]), 1);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[3]), 0);
	/* overlapping, and beside a whole-sequence PIN */
	assert_int_equal(
		pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 2, 2, KVMM_PIN_RANGE_F_PREFETCH, &rep), 0);
	assert_int_equal(pin(fd, KVMM_OP_PIN, &s1, 1, NULL), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 1);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[2]), 3);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[3]), 2);
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, &s1, 1, NULL), 0);

	/* range-pinned: the sequence cannot change */
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, s1, 0), -EBUSY);
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_TRUNCATE, s1, 4), -EBUSY);
	assert_int_equal(seq_append(fd, s1, tok, 1), -EBUSY);
	assert_int_equal(seal(fd, s1, 0, 0), -EBUSY);

	/* bad requests change nothing */
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 0, 0, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 3, 2, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 5, 1, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, UINT32_MAX, 2, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 0, 1, 1U << 5, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, 999, 0, 1, 0, NULL), -ENOENT);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, s1, 1, 3, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, s1, 1, 2, 1, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, 999, 1, 2, 0, NULL), -ENOENT);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[1]), 1);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[2]), 2);

	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, s1, 1, 2, 0, &rep), 0);
	assert_int_equal(rep.nr_frames, 2);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[1]), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[2]), 1);
	/* once: a second unpin of the range is refused */
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, s1, 1, 2, 0, NULL), -EINVAL);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, s1, 2, 2, 0, NULL), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[2]), 0);
	assert_int_equal(seq_append(fd, s1, tok, 2), 0); /* free to change again */

	/* a range left pinned: hanging up drops it and frees everything */
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 0, 4, 0, NULL), 0);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, s1, 0, 4, 0, NULL), 0);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 2);
	close(fd);
	wait_no_clients(f);
	assert_int_equal(pincount(f, "alpha", (uint32_t)fr[0]), 0);
	assert_int_equal(pool_state(f, "alpha", KVMM_PAGE_MAPPED), 0);
	assert_int_equal(check_invariants(f, "alpha"), 0);
}

/*
 * A sequence bigger than what is left of the pool: reclaim swaps out its blocks outside a
 * pinned range, never those inside, and pinning another range brings its blocks back
 * (making room by swapping out the blocks no range holds any more).
 */
static void test_pin_range_swapped(void **state)
{
	struct fixture *f = *state;
	struct kvmm_seq_create_req cr = {.priority = -10}; /* reclaim's first choice */
	struct kvmm_seq_create_rep rep;
	struct kvmm_pin_rep pr;
	uint32_t tok[48], n, i, out = 0;
	int32_t b[64];
	uint64_t a;
	int fd = client(f, "small");

	for (i = 0; i < 48; i++)
		tok[i] = 400 + i;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	a = rep.seq;
	assert_int_equal(seq_append(fd, a, tok, 48), 0); /* 12 of the 16 frames */
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, a, 0, 4, 0, NULL), 0);
	/* 10 frames for another sequence: 6 of a's must go, none of blocks 0..3 */
	cr.priority = 0;
	cr.nr_tokens = 10 * 4;
	assert_int_equal(xfer(fd, KVMM_OP_SEQ_CREATE, &cr, sizeof(cr), &rep, sizeof(rep)), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	assert_int_equal(n, 12);
	for (i = 0; i < 4; i++)
		assert_true(b[i] >= 0);
	for (i = 4; i < 12; i++)
		out += b[i] == KVMM_BLOCK_NONE;
	assert_true(out >= 6);
	/* the whole sequence cannot come back beside the other one; a range can */
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, a, 0, 4, 0, NULL), 0);
	assert_int_equal(
		pin_range(fd, KVMM_OP_SEQ_PIN_RANGE, a, 8, 4, KVMM_PIN_RANGE_F_PREFETCH, &pr), 0);
	assert_int_equal(pr.nr_frames, 4);
	assert_true(pr.nr_swapin >= 1);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	for (i = 8; i < 12; i++)
		assert_true(b[i] >= 0);
	assert_int_equal(check_invariants(f, "small"), 0);
	assert_int_equal(pin_range(fd, KVMM_OP_SEQ_UNPIN_RANGE, a, 8, 4, 0, NULL), 0);
	/* the other sequence gone, the whole of a pins again, every block as it was */
	assert_int_equal(seq_op(fd, KVMM_OP_SEQ_FREE, rep.seq, 0), 0);
	assert_int_equal(pin(fd, KVMM_OP_PIN, &a, 1, NULL), 0);
	assert_int_equal(blocks(fd, a, b, &n), 0);
	for (i = 0; i < 12; i++)
		assert_true(b[i] >= 0);
	assert_int_equal(pin(fd, KVMM_OP_UNPIN, &a, 1, NULL), 0);
	assert_int_equal(check_invariants(f, "small"), 0);
	close(fd);
	wait_no_clients(f);
	assert_int_equal(pool_state(f, "small", KVMM_PAGE_MAPPED), 0);
}

/* ---- the real host backend: chunk memfds over SCM_RIGHTS -------------------------------- */

static int setup_host(void **state)
{
	struct kvmm_server_config cfg = {
		.chunk_size = 16 * PAGE, /* 4 chunks; backend NULL: the host backend */
	};

	return setup_one(state, "host", 64, &cfg);
}

/* ATTACH with the chunk fds kept: map them back to back, as libkvmm does. */
static uint8_t *attach_map(int fd, struct kvmm_attach_rep *rep)
{
	struct kvmm_attach_req req;
	int fds[16];
	unsigned int i, n = 0;
	uint8_t *base;

	memset(&req, 0, sizeof(req));
	strcpy(req.ns, "host");
	req.fmt = fmt_small;
	assert_int_equal(
		xfer_full(fd, KVMM_OP_ATTACH, &req, sizeof(req), rep, sizeof(*rep), NULL, fds, &n),
		0);
	assert_int_equal(n, rep->nr_fds);
	assert_int_equal(n, 4);
	assert_int_equal(rep->chunk_size, 16 * PAGE);
	base = mmap(NULL, n * rep->chunk_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(base != MAP_FAILED);
	for (i = 0; i < n; i++) {
		void *p = mmap(base + i * rep->chunk_size, rep->chunk_size, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_FIXED, fds[i], 0);

		assert_true(p != MAP_FAILED);
		close(fds[i]);
	}
	return base;
}

static void test_host_backend_fds(void **state)
{
	struct fixture *f = *state;
	struct kvmm_attach_rep ra, rb;
	struct kvmm_prefix_lookup_rep lr;
	struct kvmm_pool *pool = kvmm_server_ns_pool(f->srv, "host");
	uint32_t tok[4] = {7, 7, 7, 7}, n;
	int32_t fa[64], fb[64];
	uint8_t *ba, *bb, *daemon_view;
	uint64_t sa, sb;
	int a = client(f, NULL), b = client(f, NULL);

	ba = attach_map(a, &ra);
	bb = attach_map(b, &rb);
	sa = seq_create(a);
	assert_int_equal(seq_append(a, sa, tok, 4), 0);
	assert_int_equal(blocks(a, sa, fa, &n), 0);
	assert_int_equal(n, 1);
	/* the client writes its KV through its own mapping of frame fa[0] */
	memset(ba + (size_t)fa[0] * PAGE, 0x5a, PAGE);
	assert_int_equal(seal(a, sa, 0, 0), 0);

	/* the daemon sees the bytes at the same frame */
	pthread_mutex_lock(&pool->lock);
	daemon_view = kvmm_pool_frame_addr(pool, (uint32_t)fa[0]);
	pthread_mutex_unlock(&pool->lock);
	assert_non_null(daemon_view);
	assert_int_equal(daemon_view[0], 0x5a);
	assert_int_equal(daemon_view[PAGE - 1], 0x5a);

	/* and so does the second client, after a prefix hit on the same frame */
	sb = seq_create(b);
	assert_int_equal(lookup(b, sb, tok, 4, &lr), 0);
	assert_int_equal(lr.nr_blocks, 1);
	assert_int_equal(blocks(b, sb, fb, &n), 0);
	assert_int_equal(fb[0], fa[0]);
	assert_int_equal(bb[(size_t)fb[0] * PAGE + 100], 0x5a);

	munmap(ba, ra.nr_chunks * ra.chunk_size);
	munmap(bb, rb.nr_chunks * rb.chunk_size);
	close(a);
	close(b);
	wait_no_clients(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_payload_sizes),
		cmocka_unit_test(test_proto_request_header),
		cmocka_unit_test_setup_teardown(test_hello_ok, setup, teardown),
		cmocka_unit_test_setup_teardown(test_version_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_disconnects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attach_permission, setup, teardown),
		cmocka_unit_test_setup_teardown(test_share_prefix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_frees, setup, teardown),
		cmocka_unit_test_setup_teardown(test_admin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_backend_fds, setup_host, teardown),
		cmocka_unit_test_setup_teardown(test_create_too_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_big_for_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_swapped, setup_swap, teardown),
		cmocka_unit_test_setup_teardown(test_append_swapped, setup_swap, teardown),
		cmocka_unit_test_setup_teardown(test_pin_range_swapped, setup_swap, teardown),
	};

	return cmocka_run_group_tests_name("ipc", tests, group_setup, group_teardown);
}
