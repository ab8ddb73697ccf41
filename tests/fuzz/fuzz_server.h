/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz_server.h - what the kvmmd harnesses (fuzz_session.c, fuzz_ring.c) share: one
 * real server made once per process (two namespace pools on the host backend, one with a
 * host swap tier and one with a limit, no kvswapd thread so runs are deterministic), a
 * session on one end of a socketpair as server.c would make it for an accepted client, the
 * drain of its replies (descriptors closed), and the check after every input that the
 * session's teardown gave back every frame and swap slot: after the cache is dropped each
 * pool must be entirely free and consistent, or the harness aborts.
 */
#ifndef KVMM_TESTS_FUZZ_SERVER_H
#define KVMM_TESTS_FUZZ_SERVER_H

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
#include "kvmm/ipc/server.h"
#include "kvmm/mm.h"
#include "kvmm/swap.h"
#include "uapi/kvmm.h"
#include "tests/fuzz/fuzz_tmp.h"

#define FZ_PAGE 4096u
#define FZ_UID 4242	/* the fuzz client: allowed in both namespaces, not an admin */
#define FZ_NS_A "alpha" /* 64 frames, 32 frames of host swap */
#define FZ_NS_B "beta"	/* 32 frames, limit 24 */

static struct kvmm_server *fz_srv;

/* Formats a preamble ATTACH picks from: 4, 1, 16 and 3 tokens per page. */
static const struct kvmm_format fz_fmts[4] = {
	{.layers = 2, .kv_heads = 2, .head_dim = 64, .dtype = KVMM_DTYPE_FP16},
	{.layers = 1, .kv_heads = 1, .head_dim = 1024, .dtype = KVMM_DTYPE_FP16},
	{.layers = 1, .kv_heads = 1, .head_dim = 64, .dtype = KVMM_DTYPE_FP16},
	{.layers = 3, .kv_heads = 2, .head_dim = 128, .dtype = KVMM_DTYPE_INT8, .quant_group = 32},
};

static struct kvmm_server *fz_server(void)
{
	static struct kvmm_ns_config ns[2];
	struct kvmm_server_config cfg;
	char path[128];
	int ret;

	if (fz_srv)
		return fz_srv;
	kvmm_log_set_level(KVMM_LOG_ERR);
	snprintf(path, sizeof(path), "%s/kvmmd.sock", fz_tmp("kvmm-fuzz"));
	memset(ns, 0, sizeof(ns));
	strcpy(ns[0].name, FZ_NS_A);
	ns[0].nframes = 64;
	strcpy(ns[1].name, FZ_NS_B);
	ns[1].nframes = 32;
	ns[1].limit = 24;
	for (int i = 0; i < 2; i++) {
		ns[i].uids[0] = FZ_UID;
		ns[i].nr_uids = 1;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.socket_path = path;
	cfg.page_size = FZ_PAGE;
	cfg.chunk_size = 16 * FZ_PAGE;
	cfg.ns = ns;
	cfg.nr_ns = 2;
	cfg.swap.host_size = 32 * FZ_PAGE;
	cfg.swap.no_kswapd = true;
	ret = kvmm_server_create(&cfg, &fz_srv);
	if (ret) {
		fprintf(stderr, "fuzz: kvmm_server_create: %d\n", ret);
		abort();
	}
	return fz_srv;
}

/* A session as accept_one() makes it; *peer is the client's end of the connection. */
static struct kvmm_session *fz_session_new(int *peer)
{
	struct kvmm_server *srv = fz_server();
	struct kvmm_session *s;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		abort();
	s = kvmm_calloc(1, sizeof(*s));
	if (!s || kvmm_session_init(s))
		abort();
	s->srv = srv;
	s->fd = sv[0];
	s->id = ++srv->next_client_id;
	s->cred.pid = getpid();
	s->cred.uid = FZ_UID;
	s->cred.gid = FZ_UID;
	s->groups[0] = FZ_UID;
	s->nr_groups = 1;
	list_add_tail(&s->node, &srv->sessions);
	*peer = sv[1];
	return s;
}

/*
 * Read every record queued for the client; close the descriptors that came with them, but
 * the first one when @keep points at -1 (an ATTACH reply's shared region): that goes there.
 */
static void fz_drain_keep(int peer, int *keep)
{
	static uint8_t buf[KVMM_MSG_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int) * KVMM_SERVER_MAX_CHUNKS)];
		struct cmsghdr a;
	} cb;

	for (;;) {
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
		struct msghdr msg = {.msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cb.b,
				     .msg_controllen = sizeof(cb.b)};
		struct cmsghdr *c;

		if (recvmsg(peer, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0)
			return;
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t i, k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (i = 0; i < k; i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (keep && *keep < 0)
					*keep = fd;
				else
					close(fd);
			}
		}
	}
}

static void fz_drain(int peer)
{
	fz_drain_keep(peer, NULL);
}

/* One record as session_read() handles it: checked, then handled or answered with an error. */
static void fz_deliver(struct kvmm_session *s, const void *rec, size_t len)
{
	struct kvmm_server *srv = s->srv;
	int ret;

	if (s->dead || len > KVMM_MSG_MAX)
		return;
	memcpy(srv->rx, rec, len);
	ret = kvmm_ipc_check_request(srv->rx, len);
	if (ret) {
		struct kvmm_msg_hdr hdr;

		kvmm_ipc_error_hdr(&hdr, srv->rx, len, ret);
		kvmm_session_send(s, &hdr, sizeof(hdr), NULL, 0);
		if (++s->nr_bad >= KVMM_SERVER_MAX_BAD_MSGS)
			s->dead = true;
		return;
	}
	kvmm_ipc_dispatch(s, (const struct kvmm_msg_hdr *)srv->rx);
}

/* A well-formed request: header then @plen payload bytes. */
static void fz_request(struct kvmm_session *s, unsigned int op, uint64_t tag, const void *pl,
		       size_t plen)
{
	static uint8_t rec[KVMM_MSG_MAX];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)rec;

	if (plen > KVMM_MSG_PAYLOAD_MAX)
		plen = KVMM_MSG_PAYLOAD_MAX;
	kvmm_msg_hdr_init(h, op, (uint32_t)(sizeof(*h) + plen), tag);
	if (plen)
		memcpy(h + 1, pl, plen);
	fz_deliver(s, rec, sizeof(*h) + plen);
}

/*
 * HELLO and ATTACH to namespace @b ? beta : alpha with format @fmt (0..3), rings or not; the
 * shared region's descriptor goes to *shm_fd when that is not NULL (-1: none came).
 */
static void fz_attach(struct kvmm_session *s, int peer, bool b, unsigned int fmt, bool rings,
		      uint32_t ring_entries, int *shm_fd)
{
	struct kvmm_hello_req hello = {.abi_version = KVMM_ABI_VERSION,
				       .abi_min = KVMM_ABI_MIN_COMPAT,
				       .features = KVMM_FEAT_ALL_V0};
	struct kvmm_attach_req att;

	strcpy(hello.name, "fuzz");
	fz_request(s, KVMM_OP_HELLO, 1, &hello, sizeof(hello));
	memset(&att, 0, sizeof(att));
	strcpy(att.ns, b ? FZ_NS_B : FZ_NS_A);
	att.fmt = fz_fmts[fmt & 3];
	att.flags = rings ? KVMM_ATTACH_F_RINGS : 0;
	att.ring_entries = ring_entries;
	fz_request(s, KVMM_OP_ATTACH, 2, &att, sizeof(att));
	if (shm_fd)
		*shm_fd = -1;
	fz_drain_keep(peer, shm_fd);
}

/* The end of a session (session_close()): detach, unlink, close. */
static void fz_session_close(struct kvmm_session *s, int peer)
{
	kvmm_session_fini(s);
	list_del(&s->node);
	close(s->fd);
	kvmm_free(s);
	fz_drain(peer);
	close(peer);
}

/*
 * With no session left, every frame of every pool must come back once the page cache (and
 * its demoted copies in swap) is dropped, every swap slot must be free, and the pool must be
 * consistent.  Leaves the pools empty, so no input sees what an earlier one cached.
 */
static void fz_check_pools(void)
{
	struct kvmm_server *srv = fz_server();

	for (unsigned int i = 0; i < srv->nr_ns; i++) {
		struct kvmm_pool *pool = srv->ns[i]->pool;
		struct kvmm_ns *ns = srv->ns[i]->ns;
		unsigned int tiers[KVMM_SWAP_TIER_MAX];
		unsigned int nt;
		char why[256];

		pthread_mutex_lock(&pool->lock);
		kvmm_swap_poll(pool, true);
		while (kvmm_shrink(pool, pool->nframes, 0))
			;
		kvmm_swap_drop_cached(pool);
		if (ns->used || pool->nr_state[KVMM_PAGE_MAPPED] ||
		    pool->nr_state[KVMM_PAGE_MAGAZINE] || pool->nr_state[KVMM_PAGE_CACHED] ||
		    kvmm_pool_nr_free(pool) != pool->nframes) {
			fprintf(stderr,
				"fuzz: namespace %s leaked frames: used %u cached %u, mapped %u "
				"magazine %u cached %u, free %u of %u\n",
				srv->ns[i]->cfg.name, ns->used, ns->cached,
				pool->nr_state[KVMM_PAGE_MAPPED],
				pool->nr_state[KVMM_PAGE_MAGAZINE],
				pool->nr_state[KVMM_PAGE_CACHED], kvmm_pool_nr_free(pool),
				pool->nframes);
			abort();
		}
		nt = kvmm_swap_tiers(pool, tiers, KVMM_SWAP_TIER_MAX);
		for (unsigned int t = 0; t < nt; t++) {
			struct kvmm_swap_tier_info info;

			if (kvmm_swap_tier_info(pool, tiers[t], &info))
				abort();
			if (info.used || info.kept) {
				fprintf(stderr, "fuzz: namespace %s tier %u leaked %llu slots\n",
					srv->ns[i]->cfg.name, tiers[t],
					(unsigned long long)(info.used + info.kept));
				abort();
			}
		}
		if (kvmm_check_invariants(pool, why, sizeof(why))) {
			fprintf(stderr, "fuzz: namespace %s: %s\n", srv->ns[i]->cfg.name, why);
			abort();
		}
		pthread_mutex_unlock(&pool->lock);
	}
	if (srv->stats.invariant_failures)
		abort();
}

#endif /* KVMM_TESTS_FUZZ_SERVER_H */
