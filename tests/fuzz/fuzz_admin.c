// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_admin.c - libFuzzer harness: kvmmd's admin verbs (kvmm/ipc/admin.c, the
 * trace pump and /metrics text of metrics.c), as kvmmctl sends them.
 *
 * Each input gets a fresh server (kvmm_server_create(): host backend, two small namespace
 * pools, a host swap tier, a short trace ring, no kswapd, no metrics socket) and two sessions
 * built as the accept path builds them, on socketpairs: a root admin and a client.  The
 * client says HELLO, attaches with a small format and makes some state from the input
 * (sequences, appends, forks that share pages, seals, pins), so that the dumps have things
 * to walk.  Then the input's admin requests (and a few more client ops) go through the same
 * path a received record takes (kvmm_ipc_check_request(), then kvmm_ipc_dispatch()); every
 * reply is read back and checked: whole records, the stated length, the request's op and
 * seq.  SWAPON and SWAPOFF name no file but one in the harness's own directory.  Built and
 * run by tools/fuzz (Documentation/dev-tools/fuzzing.md).
 *
 * fuzz-libs: kvmm/ipc/built-in.a kvmm/built-in.a kvmm/backend/built-in.a lib/built-in.a
 * fuzz-ldlibs: -lxxhash -luring -lpthread -lhiredis -lssl -lcrypto
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kmalloc.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/ipc/server.h"
#include "uapi/kvmm.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * SEQ_APPEND into a partial last block under memory pressure once let reclaim swap that block
 * out (seed crash-append-swapped-tail; fixed in kvmm/pgtable.c).  0 gives no input a swap
 * tier, should such a bug come back and need to be kept out of the way.
 */
#define APPEND_KEEPS_TAIL 1

#define PAGE 4096u
#define MAX_OPS 24

#define FAIL(...)                                \
	do {                                     \
		fprintf(stderr, "fuzz_admin: "); \
		fprintf(stderr, __VA_ARGS__);    \
		fprintf(stderr, "\n");           \
		abort();                         \
	} while (0)

static void bytes(struct in *in, void *dst, size_t n)
{
	size_t k = n < in->n ? n : in->n;

	memcpy(dst, in->p, k);
	memset((char *)dst + k, 0, n - k);
	in->p += k;
	in->n -= k;
}

struct conn {
	struct kvmm_session *s;
	int peer;
};

static char swapfile[128], sockpath[128];
static uint64_t next_seq;
static union {
	struct kvmm_msg_hdr hdr;
	uint8_t buf[KVMM_MSG_MAX];
} rec, rep;

/* a session as server.c's accept_one() makes one, for a peer that is root */
static int conn_open(struct kvmm_server *srv, struct conn *c)
{
	int sv[2], big = 4 << 20;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	/* room for any dump: a reply that does not fit would only end the session */
	(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	(void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	c->s = kvmm_calloc(1, sizeof(*c->s));
	if (!c->s || kvmm_session_init(c->s)) {
		kvmm_free(c->s);
		close(sv[0]);
		close(sv[1]);
		return -ENOMEM;
	}
	c->s->srv = srv;
	c->s->fd = sv[0];
	c->s->id = ++srv->next_client_id;
	c->s->cred.pid = getpid();
	c->s->cred.uid = 0;
	c->s->cred.gid = 0;
	c->s->groups[0] = 0;
	c->s->nr_groups = 1;
	list_add_tail(&c->s->node, &srv->sessions);
	KVMM_STAT_INC(srv, clients);
	c->peer = sv[1];
	return 0;
}

/* Read every record waiting for the peer and check it; the last status, or 1 for none. */
static int drain(struct conn *c, unsigned int op, uint64_t seq)
{
	int status = 1;

	for (;;) {
		char cbuf[CMSG_SPACE(sizeof(int) * KVMM_SERVER_MAX_CHUNKS)];
		struct iovec iov = {rep.buf, sizeof(rep.buf)};
		struct msghdr msg = {.msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf)};
		struct cmsghdr *cm;
		ssize_t n = recvmsg(c->peer, &msg, MSG_DONTWAIT | MSG_TRUNC);

		if (n < 0)
			break;
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				int *fds = (int *)CMSG_DATA(cm);
				size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < nfd; i++)
					close(fds[i]);
			}
		}
		if (n == 0)
			break;
		if ((size_t)n > sizeof(rep.buf) || (msg.msg_flags & MSG_TRUNC))
			FAIL("a record of %zd bytes, over KVMM_MSG_MAX", n);
		if ((size_t)n < sizeof(rep.hdr))
			FAIL("a record of %zd bytes, shorter than a header", n);
		if (rep.hdr.magic != KVMM_MAGIC || rep.hdr.len != (uint32_t)n)
			FAIL("op %#x: a record of %zd bytes says %u", rep.hdr.op, n, rep.hdr.len);
		if (rep.hdr.op == (KVMM_OP_PREEMPT) || rep.hdr.op == KVMM_OP_SHUTDOWN)
			continue; /* events */
		if (rep.hdr.op != (op | KVMM_OP_REPLY) || rep.hdr.seq != seq) {
			/* a trace subscription's pushes carry their TRACE request's seq */
			if (rep.hdr.op == (KVMM_OP_TRACE | KVMM_OP_REPLY) &&
			    (rep.hdr.flags & KVMM_MSG_F_MORE))
				continue;
			FAIL("reply op %#x seq %llu to op %#x seq %llu", rep.hdr.op,
			     (unsigned long long)rep.hdr.seq, op, (unsigned long long)seq);
		}
		if (rep.hdr.status > 0 || rep.hdr.status < -KVMM_ERRNO_MAX)
			FAIL("op %#x: status %d", op, rep.hdr.status);
		if (rep.hdr.status && (size_t)n != sizeof(rep.hdr))
			FAIL("op %#x: an error reply with a payload", op);
		if (kvmm_op_is_admin(op) && op <= KVMM_OP_TRACE &&
		    memchr(rep.buf + sizeof(rep.hdr), '\0', (size_t)n - sizeof(rep.hdr)))
			FAIL("op %#x: a NUL inside the text", op);
		status = rep.hdr.status;
	}
	return status;
}

/* One request through the receive path's checks and the session's dispatch. */
static int request(struct conn *c, unsigned int op, const void *pl, size_t plen)
{
	uint64_t seq = ++next_seq;
	int ret;

	if (c->s->dead || sizeof(rec.hdr) + plen > sizeof(rec.buf))
		return -EPIPE;
	kvmm_msg_hdr_init(&rec.hdr, op, (uint32_t)(sizeof(rec.hdr) + plen), seq);
	rec.hdr.abi = c->s->abi;
	if (plen)
		memcpy(rec.buf + sizeof(rec.hdr), pl, plen);
	ret = kvmm_ipc_check_request(rec.buf, sizeof(rec.hdr) + plen);
	if (ret)
		return ret;
	kvmm_ipc_dispatch(c->s, &rec.hdr);
	kvmm_swapd_preempt_run(c->s->srv);
	ret = drain(c, op, seq);
	if (getenv("FUZZ_ADMIN_DEBUG")) {
		fprintf(stderr, "op %#x (%zu bytes):", op, plen);
		for (size_t i = 0; i < plen && i < 48; i++)
			fprintf(stderr, " %02x", ((const uint8_t *)pl)[i]);
		fprintf(stderr, " -> %d\n", ret);
	}
	return ret;
}

static void hello(struct conn *c)
{
	struct kvmm_hello_req h = {.abi_version = KVMM_ABI_VERSION,
				   .abi_min = KVMM_ABI_MIN_COMPAT,
				   .pid = (uint32_t)getpid()};

	strcpy(h.name, "fuzz");
	if (request(c, KVMM_OP_HELLO, &h, sizeof(h)))
		FAIL("HELLO refused");
}

static const char *const ns_names[] = {"", "alpha", "beta", "nope"};

static void name_of(struct in *in, char *ns)
{
	uint32_t e = u8(in);

	memset(ns, 0, KVMM_NAME_LEN);
	if (e < 0xf0)
		strcpy(ns, ns_names[e % 4]);
	else
		bytes(in, ns, KVMM_NAME_LEN); /* anything, unterminated too */
}

/* the client's state: sequences (ids from 1), tokens, forks sharing blocks, seals, pins */
static void client_op(struct conn *c, struct in *in, uint32_t *nr)
{
	uint32_t e = u8(in), nseqs = *nr, id = 1 + u8(in) % (nseqs + 1);
	union {
		struct kvmm_seq_create_req create;
		struct kvmm_seq_append_req append;
		struct kvmm_seq_fork_req fork;
		struct kvmm_seq_truncate_req trunc;
		struct kvmm_seq_free_req free;
		struct kvmm_seal_req seal;
		struct kvmm_pin_req pin;
		uint8_t raw[sizeof(struct kvmm_seq_append_req) + 64 * sizeof(uint32_t)];
	} r;
	uint32_t n;

	memset(&r, 0, sizeof(r));
	switch (e % 8) {
	case 0:
		r.create.nr_tokens = u8(in) % 40;
		r.create.priority = (int8_t)u8(in);
		if (!request(c, KVMM_OP_SEQ_CREATE, &r, sizeof(r.create)))
			(*nr)++;
		break;
	case 1:
	case 2:
		n = u8(in) % 64;
		r.append.seq = id;
		r.append.nr_tokens = n;
		/* tokens mostly alike, so that seals find shared prefixes */
		for (uint32_t i = 0; i < n; i++) {
			uint32_t t = i % 7 ? i : u8(in) % 4;

			memcpy(r.raw + sizeof(r.append) + i * 4, &t, 4);
		}
		request(c, KVMM_OP_SEQ_APPEND, &r, sizeof(r.append) + n * 4);
		break;
	case 3:
		r.fork.seq = id;
		r.fork.nr_tokens = u8(in) & 0x80 ? KVMM_SEQ_ALL_TOKENS : u8(in);
		if (!request(c, KVMM_OP_SEQ_FORK, &r, sizeof(r.fork)))
			(*nr)++;
		break;
	case 4:
		r.seal.seq = id;
		r.seal.block = u8(in) % 4;
		r.seal.nr_blocks = u8(in) % 8;
		request(c, KVMM_OP_SEAL, &r, sizeof(r.seal));
		break;
	case 5: {
		uint64_t ids[2] = {id, 1 + u8(in) % (nseqs + 1)};

		r.pin.nr_seqs = 1 + (e >> 3) % 2;
		memcpy(r.raw + sizeof(r.pin), ids, sizeof(ids));
		request(c, e & 0x80 ? KVMM_OP_UNPIN : KVMM_OP_PIN, &r,
			sizeof(r.pin) + r.pin.nr_seqs * sizeof(uint64_t));
		break;
	}
	case 6:
		r.trunc.seq = id;
		r.trunc.nr_tokens = u8(in) % 64;
		request(c, KVMM_OP_SEQ_TRUNCATE, &r, sizeof(r.trunc));
		break;
	case 7:
		if (e & 0x80) {
			r.free.seq = id;
			request(c, KVMM_OP_SEQ_FREE, &r, sizeof(r.free));
		} else {
			request(c, e & 0x40 ? KVMM_OP_DETACH : KVMM_OP_PING, NULL, 0);
		}
		break;
	}
}

static void admin_op(struct conn *c, struct in *in)
{
	uint32_t e = u8(in),
		 op = KVMM_OP_ADMIN_BASE + e % (KVMM_OP_ADMIN_LAST - KVMM_OP_ADMIN_BASE + 2);
	union {
		struct kvmm_admin_req admin;
		struct kvmm_limit_req limit;
		struct kvmm_drop_caches_req drop;
		struct kvmm_reclaim_req reclaim;
		struct kvmm_swapon_req swapon;
		struct kvmm_swapoff_req swapoff;
		struct kvmm_fault_inject_req fault;
		uint8_t raw[512];
	} r;
	size_t len;

	memset(&r, 0, sizeof(r));
	if (e & 0x80 && !(e & 0x40)) {
		/* raw payload of any length: the checks must refuse what does not fit */
		len = u8(in) % sizeof(r.raw);
		bytes(in, r.raw, len);
		if (op == KVMM_OP_SWAPON || op == KVMM_OP_SWAPOFF) {
			/* no swap file anywhere but in our directory */
			memset(op == KVMM_OP_SWAPON ? r.swapon.path : r.swapoff.path, 0,
			       KVMM_PATH_LEN);
			if (!APPEND_KEEPS_TAIL && op == KVMM_OP_SWAPON)
				r.swapon.tier = 0;
		}
		request(c, op, &r, len);
		return;
	}
	switch (op) {
	case KVMM_OP_LIMIT:
		name_of(in, r.limit.ns);
		r.limit.max_frames = u8(in) & 1 ? KVMM_LIMIT_NONE : u64(in) % 80;
		r.limit.low_frames = u64(in) % 80;
		r.limit.priority = (int8_t)u8(in);
		r.limit.valid = u8(in) % 16;
		len = sizeof(r.limit);
		break;
	case KVMM_OP_DROP_CACHES:
		r.drop.flags = u8(in) % 8;
		r.drop.reserved = u8(in) < 8;
		len = sizeof(r.drop);
		break;
	case KVMM_OP_RECLAIM:
		r.reclaim.nr_frames = u8(in) & 1 ? u64(in) : u8(in);
		r.reclaim.flags = u8(in) % 4;
		len = sizeof(r.reclaim);
		break;
	case KVMM_OP_SWAPON:
		r.swapon.tier = APPEND_KEEPS_TAIL ? u8(in) % 4 : 0 * u8(in);
		r.swapon.priority = (int8_t)u8(in);
		r.swapon.size = (uint64_t)(u8(in) % 20) * PAGE + (u8(in) < 16 ? u8(in) : 0);
		if (u8(in) & 1) /* nothing outside our directory */
			strcpy(r.swapon.path, swapfile);
		name_of(in, r.swapon.ns);
		len = sizeof(r.swapon);
		break;
	case KVMM_OP_SWAPOFF:
		r.swapoff.tier = u8(in) % 4;
		r.swapoff.reserved = u8(in) < 8;
		if (u8(in) & 1)
			strcpy(r.swapoff.path, swapfile);
		name_of(in, r.swapoff.ns);
		len = sizeof(r.swapoff);
		break;
	case KVMM_OP_FAULT_INJECT:
		name_of(in, r.fault.ns);
		bytes(in, r.fault.spec, u8(in) % (KVMM_FAULT_SPEC_LEN + 1));
		len = sizeof(r.fault);
		break;
	default:
		/* the read verbs, and one past the last verb */
		r.admin.flags = u8(in);
		r.admin.flags &= u8(in) & 1 ? 0xff : KVMM_ADMIN_F_ALL;
		r.admin.reserved = u8(in) & 1 ? u32(in) : u8(in) % 4;
		r.admin.id = u8(in) & 1 ? u64(in) : u8(in) % 8;
		name_of(in, r.admin.ns);
		len = sizeof(r.admin);
		break;
	}
	request(c, op, &r, len);
}

static void metrics(struct kvmm_server *srv)
{
	char *buf = NULL;
	size_t len = 0;

	if (kvmm_obs_metrics_text(srv, &buf, &len))
		return;
	if (!buf || strlen(buf) != len)
		FAIL("metrics: %zu bytes said, %zu written", len, buf ? strlen(buf) : 0);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool once;
	struct kvmm_ns_config ns[2];
	struct kvmm_server_config cfg;
	struct kvmm_server *srv;
	struct conn adm, cli;
	struct kvmm_attach_req att;
	struct in in = {data, size};
	uint32_t knobs, nseqs = 0;
	int ret;

	if (size > 4096)
		return -1;
	if (!once) {
		kvmm_log_set_level(KVMM_LOG_ERR);
		snprintf(swapfile, sizeof(swapfile), "%s/swap", fz_tmp("kvmm-fuzz-admin"));
		snprintf(sockpath, sizeof(sockpath), "%s/kvmmd.sock", fz_tmp("kvmm-fuzz-admin"));
		once = true;
	}
	unlink(swapfile);

	knobs = u8(&in);
	memset(ns, 0, sizeof(ns));
	strcpy(ns[0].name, "alpha");
	ns[0].nframes = 32;
	strcpy(ns[1].name, "beta");
	ns[1].nframes = 16;
	ns[1].limit = knobs & 1 ? 8 : 0;
	memset(&cfg, 0, sizeof(cfg));
	cfg.socket_path = sockpath;
	cfg.page_size = PAGE;
	cfg.chunk_size = 16 * PAGE;
	cfg.ns = ns;
	cfg.nr_ns = 1 + (knobs >> 1 & 1);
	cfg.trace_entries = knobs & 4 ? 8 : 256; /* a short ring wraps */
	cfg.swap.host_size = APPEND_KEEPS_TAIL && (knobs & 8) ? 16 * PAGE : 0;
	cfg.swap.no_kswapd = true;
	ret = kvmm_server_create(&cfg, &srv);
	if (ret)
		FAIL("kvmm_server_create: %d", ret);
	if (conn_open(srv, &adm) || conn_open(srv, &cli))
		FAIL("sessions");
	hello(&adm);
	hello(&cli);

	memset(&att, 0, sizeof(att));
	strcpy(att.ns, knobs & 16 && cfg.nr_ns > 1 ? "beta" : "alpha");
	att.fmt.layers = 1 + (knobs >> 5 & 1);
	att.fmt.kv_heads = 1;
	att.fmt.head_dim = 64;
	att.fmt.dtype = KVMM_DTYPE_FP16;
	if (request(&cli, KVMM_OP_ATTACH, &att, sizeof(att)))
		FAIL("ATTACH refused");

	for (uint32_t i = 0; i < MAX_OPS && in.n; i++) {
		uint32_t e = u8(&in);

		if (e < 0x60) {
			client_op(&cli, &in, &nseqs);
		} else if (e < 0xf0) {
			admin_op(&adm, &in);
		} else if (e < 0xf8) {
			kvmm_admin_trace_pump(srv);
			drain(&adm, KVMM_OP_TRACE, 0);
		} else {
			metrics(srv);
		}
	}
	kvmm_admin_trace_pump(srv);
	drain(&adm, KVMM_OP_TRACE, 0);
	metrics(srv);

	close(adm.peer);
	close(cli.peer);
	kvmm_server_destroy(srv);
	return 0;
}
