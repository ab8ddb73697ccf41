// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/admin.c - the admin verbs of the protocol (kvmmctl's), for root or the admin
 * group (session.c checks before calling here).  Read verbs answer tagged text, one
 * "Name:  value unit" line per fact (/proc style), built whole and then sent in as many
 * records as it needs (all but the last with KVMM_MSG_F_MORE).  The numbers come from the
 * pools (frames per state, namespace charges, vmstat counters, buddy free lists) and from the
 * server's own counters.  Write verbs (LIMIT, DROP_CACHES, RECLAIM) act on the namespaces'
 * pools under their locks.  Verbs whose subsystem does not exist yet (SEQS, PAGETABLE, LRU,
 * SWAP, TRACE, SWAPON, SWAPOFF) and JSON output answer -EOPNOTSUPP.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"

struct text {
	char *buf;
	size_t len, cap;
	int err;
};

static __printf(2, 3) void tprintf(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->err = -EINVAL;
			return;
		}
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t cap = max_t(size_t, t->cap * 2, t->len + (size_t)n + 1);
			char *b = realloc(t->buf, cap);

			if (!b) {
				t->err = -ENOMEM;
				return;
			}
			t->buf = b;
			t->cap = cap;
		}
	}
}

/* Send the text in records of at most KVMM_MSG_PAYLOAD_MAX bytes, split at line ends. */
static void send_text(struct kvmm_session *s, const struct kvmm_msg_hdr *req, struct text *t)
{
	struct kvmm_msg_hdr *rep = (struct kvmm_msg_hdr *)s->srv->tx;
	size_t off = 0;

	if (t->err) {
		kvmm_session_reply(s, req, t->err, NULL, 0);
		return;
	}
	do {
		size_t n = t->len - off;
		bool more = false;

		if (n > KVMM_MSG_PAYLOAD_MAX) {
			n = KVMM_MSG_PAYLOAD_MAX;
			while (n > 1 && t->buf[off + n - 1] != '\n')
				n--;
			if (n <= 1)
				n = KVMM_MSG_PAYLOAD_MAX;
			more = true;
		}
		kvmm_msg_hdr_init_reply(rep, req, (uint32_t)(sizeof(*rep) + n), 0);
		if (more)
			rep->flags |= KVMM_MSG_F_MORE;
		memcpy(rep + 1, t->buf + off, n);
		if (kvmm_session_send(s, rep, sizeof(*rep) + n, NULL, 0))
			return;
		off += n;
	} while (off < t->len);
}

/* The namespaces a request selects: all, or the one named (NULL, -ENOENT if unknown). */
static int select_ns(struct kvmm_server *srv, const char *name, struct kvmm_ipc_ns **one)
{
	unsigned int i;

	*one = NULL;
	if (!name[0])
		return 0;
	if (kvmm_name_check(name))
		return -EINVAL;
	for (i = 0; i < srv->nr_ns; i++) {
		if (!memcmp(srv->ns[i].cfg.name, name, KVMM_NAME_LEN)) {
			*one = &srv->ns[i];
			return 0;
		}
	}
	return -ENOENT;
}

#define for_each_selected(srv, n, one)                                        \
	for ((n) = (one) ? (one) : (srv)->ns; (n) < (srv)->ns + (srv)->nr_ns; \
	     (n) = (one) ? (srv)->ns + (srv)->nr_ns : (n) + 1)

static void status_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct text *t)
{
	struct kvmm_server_stats st;
	struct kvmm_ipc_ns *n;
	struct timespec ts;
	uint64_t frames = 0, nfree = 0, used = 0, cached = 0, now;

	kvmm_server_get_stats(srv, &st);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	for_each_selected(srv, n, one)
	{
		pthread_mutex_lock(&n->pool->lock);
		frames += n->pool->nframes;
		nfree += kvmm_pool_nr_free(n->pool);
		used += n->ns->used;
		cached += n->ns->cached;
		pthread_mutex_unlock(&n->pool->lock);
	}
	tprintf(t, "ABI:              %u (min %u)\n", KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT);
	tprintf(t, "Uptime:           %" PRIu64 " s\n", (now - srv->start_ns) / 1000000000u);
	tprintf(t, "Namespaces:       %u\n", one ? 1 : srv->nr_ns);
	tprintf(t, "PageSize:         %" PRIu64 " bytes\n", srv->cfg.page_size);
	tprintf(t, "Frames:           %" PRIu64 " frames\n", frames);
	tprintf(t, "FramesFree:       %" PRIu64 " frames\n", nfree);
	tprintf(t, "FramesUsed:       %" PRIu64 " frames\n", used);
	tprintf(t, "FramesCached:     %" PRIu64 " frames\n", cached);
	tprintf(t, "Clients:          %" PRIu64 "\n", st.clients);
	tprintf(t, "Accepted:         %" PRIu64 "\n", st.accepted);
	tprintf(t, "Refused:          %" PRIu64 "\n", st.refused);
	tprintf(t, "Hellos:           %" PRIu64 "\n", st.hellos);
	tprintf(t, "VersionMismatch:  %" PRIu64 "\n", st.version_mismatch);
	tprintf(t, "Attached:         %" PRIu64 "\n", st.attached);
	tprintf(t, "Detached:         %" PRIu64 "\n", st.detached);
	tprintf(t, "Requests:         %" PRIu64 "\n", st.requests);
	tprintf(t, "Errors:           %" PRIu64 "\n", st.errors);
	tprintf(t, "BadMessages:      %" PRIu64 "\n", st.bad_msgs);
	tprintf(t, "Denied:           %" PRIu64 "\n", st.denied);
	tprintf(t, "Hangups:          %" PRIu64 "\n", st.hangups);
	tprintf(t, "DisconnectBad:    %" PRIu64 "\n", st.disconnect_bad);
	tprintf(t, "DisconnectSlow:   %" PRIu64 "\n", st.disconnect_slow);
	tprintf(t, "Events:           %" PRIu64 "\n", st.events);
	tprintf(t, "FdsPassed:        %" PRIu64 "\n", st.fds_passed);
	tprintf(t, "FdsDropped:       %" PRIu64 "\n", st.fds_dropped);
	tprintf(t, "InvariantFailures: %" PRIu64 "\n", st.invariant_failures);
}

static void meminfo_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct text *t)
{
	struct kvmm_ipc_ns *n;

	for_each_selected(srv, n, one)
	{
		struct kvmm_pool *pool = n->pool;

		pthread_mutex_lock(&pool->lock);
		tprintf(t, "Namespace:        %s\n", n->cfg.name);
		tprintf(t, "Total:            %u frames\n", pool->nframes);
		tprintf(t, "Free:             %u frames\n", pool->nr_free);
		tprintf(t, "Magazines:        %u frames\n", pool->nr_state[KVMM_PAGE_MAGAZINE]);
		tprintf(t, "Mapped:           %u frames\n", pool->nr_state[KVMM_PAGE_MAPPED]);
		tprintf(t, "Cached:           %u frames\n", pool->nr_state[KVMM_PAGE_CACHED]);
		tprintf(t, "Used:             %u frames\n", n->ns->used);
		tprintf(t, "Limit:            %u frames\n",
			n->ns->limit ? n->ns->limit : pool->nframes);
		tprintf(t, "Active:           %u frames\n", pool->lru.nr_active);
		tprintf(t, "Inactive:         %u frames\n", pool->lru.nr_inactive);
		tprintf(t, "PageCache:        %u pages\n", kvmm_pagecache_count(pool));
		tprintf(t, "WmarkMin:         %u frames\n", pool->wmark_min);
		tprintf(t, "WmarkLow:         %u frames\n", pool->wmark_low);
		tprintf(t, "WmarkHigh:        %u frames\n", pool->wmark_high);
		tprintf(t, "PageSize:         %" PRIu64 " bytes\n", pool->page_size);
		pthread_mutex_unlock(&pool->lock);
	}
}

static void vmstat_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct text *t)
{
	uint64_t sum[KVMM_STAT_COUNT] = {0};
	struct kvmm_ipc_ns *n;
	unsigned int i;

	/* the sum over the selected namespaces: one namespace when filtered */
	for_each_selected(srv, n, one)
	{
		pthread_mutex_lock(&n->pool->lock);
		for (i = 0; i < KVMM_STAT_COUNT; i++)
			sum[i] += n->pool->stat[i];
		pthread_mutex_unlock(&n->pool->lock);
	}
	for (i = 0; i < KVMM_STAT_COUNT; i++)
		tprintf(t, "%s: %" PRIu64 "\n", kvmm_stat_name(i), sum[i]);
}

static void buddyinfo_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct text *t)
{
	char buf[KVMM_BUDDYINFO_SIZE];
	struct kvmm_ipc_ns *n;

	for_each_selected(srv, n, one)
	{
		int ret;

		pthread_mutex_lock(&n->pool->lock);
		ret = kvmm_buddyinfo(n->pool, buf, sizeof(buf));
		pthread_mutex_unlock(&n->pool->lock);
		tprintf(t, "Namespace: %s\n", n->cfg.name);
		if (ret < 0)
			t->err = ret;
		else
			tprintf(t, "%s", buf);
	}
}

static void clients_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t id,
			 struct text *t)
{
	struct kvmm_session *c;

	list_for_each_entry (c, &srv->sessions, node) {
		if ((one && c->ns != one) || (id && c->id != id))
			continue;
		tprintf(t,
			"Client: %u name=%s pid=%d uid=%u gid=%u state=%s ns=%s seqs=%u "
			"requests=%" PRIu64 " bad=%u\n",
			c->id, c->name[0] ? c->name : "-", (int)c->cred.pid,
			(unsigned int)c->cred.uid, (unsigned int)c->cred.gid,
			kvmm_session_state_name(c->state), c->ns ? c->ns->cfg.name : "-",
			c->nr_seqs, c->nr_requests, c->nr_bad);
	}
}

static void namespaces_text(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct text *t)
{
	struct kvmm_ipc_ns *n;

	for_each_selected(srv, n, one)
	{
		pthread_mutex_lock(&n->pool->lock);
		tprintf(t,
			"Namespace: %s id=%u frames=%u limit=%u used=%u cached=%u priority=%d "
			"clients=%u chunks=%u\n",
			n->cfg.name, n->id, n->pool->nframes,
			n->ns->limit ? n->ns->limit : n->pool->nframes, n->ns->used, n->ns->cached,
			n->ns->priority, n->nr_clients, n->nr_chunks);
		pthread_mutex_unlock(&n->pool->lock);
	}
}

static void do_read_verb(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_admin_req req;
	struct kvmm_ipc_ns *one;
	struct text t = {0};
	int ret;

	memcpy(&req, hdr + 1, sizeof(req));
	if ((req.flags & ~KVMM_ADMIN_F_ALL_V0) || req.reserved ||
	    ((req.flags & KVMM_ADMIN_F_CLEAR) && hdr->op != KVMM_OP_TRACE)) {
		ret = -EINVAL;
		goto out_err;
	}
	if (req.flags & KVMM_ADMIN_F_JSON) {
		ret = -EOPNOTSUPP;
		goto out_err;
	}
	ret = select_ns(srv, req.ns, &one);
	if (ret)
		goto out_err;
	t.cap = 4096;
	t.buf = malloc(t.cap);
	if (!t.buf) {
		ret = -ENOMEM;
		goto out_err;
	}
	t.buf[0] = '\0';
	switch (hdr->op) {
	case KVMM_OP_STATUS:
		status_text(srv, one, &t);
		break;
	case KVMM_OP_MEMINFO:
		meminfo_text(srv, one, &t);
		break;
	case KVMM_OP_VMSTAT:
		vmstat_text(srv, one, &t);
		break;
	case KVMM_OP_BUDDYINFO:
		buddyinfo_text(srv, one, &t);
		break;
	case KVMM_OP_CLIENTS:
		clients_text(srv, one, req.id, &t);
		break;
	case KVMM_OP_NAMESPACES:
		namespaces_text(srv, one, &t);
		break;
	default:
		t.err = -EOPNOTSUPP;
		break;
	}
	send_text(s, hdr, &t);
	free(t.buf);
	return;

out_err:
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}

static int do_limit(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_limit_req req;
	struct kvmm_ipc_ns *n;
	int ret = 0;

	memcpy(&req, hdr + 1, sizeof(req));
	if (!req.valid ||
	    (req.valid & ~(KVMM_LIMIT_SET_MAX | KVMM_LIMIT_SET_LOW | KVMM_LIMIT_SET_PRIORITY)))
		return -EINVAL;
	if (!req.ns[0])
		return -EINVAL;
	ret = select_ns(s->srv, req.ns, &n);
	if (ret)
		return ret;
	if (req.valid & KVMM_LIMIT_SET_LOW)
		return -EOPNOTSUPP; /* no low protection in the core yet */
	if ((req.valid & KVMM_LIMIT_SET_MAX) && req.max_frames != KVMM_LIMIT_NONE &&
	    (req.max_frames == 0 || req.max_frames > UINT32_MAX))
		return -EINVAL;
	pthread_mutex_lock(&n->pool->lock);
	if (req.valid & KVMM_LIMIT_SET_MAX) {
		uint32_t lim = req.max_frames == KVMM_LIMIT_NONE ? 0 : (uint32_t)req.max_frames;

		if (lim >= n->pool->nframes)
			lim = 0;
		ret = kvmm_ns_set_limit(n->ns, lim);
	}
	if (!ret && (req.valid & KVMM_LIMIT_SET_PRIORITY))
		n->ns->priority = req.priority;
	pthread_mutex_unlock(&n->pool->lock);
	if (!ret)
		kvmm_notice("ipc: client %u set limits of %s", s->id, n->cfg.name);
	return ret;
}

/* Reclaim up to @want cached frames over every pool; the count freed. */
static uint64_t reclaim_all(struct kvmm_server *srv, uint64_t want)
{
	uint64_t done = 0;
	unsigned int i;

	for (i = 0; i < srv->nr_ns && done < want; i++) {
		struct kvmm_pool *pool = srv->ns[i].pool;

		pthread_mutex_lock(&pool->lock);
		while (done < want) {
			uint32_t n = kvmm_reclaim(
				pool, NULL, (uint32_t)min_t(uint64_t, want - done, UINT32_MAX));

			if (!n)
				break;
			done += n;
		}
		pthread_mutex_unlock(&pool->lock);
	}
	return done;
}

void kvmm_admin_handle(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_reclaim_rep rep;
	int ret;

	switch (hdr->op) {
	case KVMM_OP_STATUS:
	case KVMM_OP_MEMINFO:
	case KVMM_OP_VMSTAT:
	case KVMM_OP_BUDDYINFO:
	case KVMM_OP_CLIENTS:
	case KVMM_OP_NAMESPACES:
		do_read_verb(s, hdr);
		return;
	case KVMM_OP_LIMIT:
		kvmm_session_reply(s, hdr, do_limit(s, hdr), NULL, 0);
		return;
	case KVMM_OP_DROP_CACHES: {
		struct kvmm_drop_caches_req req;

		memcpy(&req, hdr + 1, sizeof(req));
		if (!req.flags || (req.flags & ~(KVMM_DROP_F_DEVICE | KVMM_DROP_F_SWAP)) ||
		    req.reserved) {
			kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
			return;
		}
		rep.nr_frames = 0;
		/* no swap tiers yet: KVMM_DROP_F_SWAP alone drops nothing */
		if (req.flags & KVMM_DROP_F_DEVICE)
			rep.nr_frames = reclaim_all(s->srv, UINT64_MAX);
		kvmm_notice("ipc: client %u dropped %" PRIu64 " cached frames", s->id,
			    rep.nr_frames);
		kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
		return;
	}
	case KVMM_OP_RECLAIM: {
		struct kvmm_reclaim_req req;

		memcpy(&req, hdr + 1, sizeof(req));
		if ((req.flags & ~KVMM_RECLAIM_F_NOSWAP) || req.reserved) {
			kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
			return;
		}
		rep.nr_frames = reclaim_all(s->srv, req.nr_frames);
		kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
		return;
	}
	default:
		ret = -EOPNOTSUPP;
		break;
	}
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}
