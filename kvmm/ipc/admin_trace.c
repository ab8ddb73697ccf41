// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/admin_trace.c - the TRACE verb: a dump of the trace ring (kvmm/trace.h) as text
 * lines or JSON Lines, optionally emptying it (KVMM_ADMIN_F_CLEAR), or, with
 * KVMM_ADMIN_F_FOLLOW, a subscription: the connection then gets new records pushed by
 * kvmm_admin_trace_pump(), which metrics.c's timer ticks while anyone is subscribed.  A push
 * never waits: what does not fit in a subscriber's socket is dropped and counted, and the
 * subscriber is told how many records it lost or had dropped.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "compiler.h"
#include "kvmm/ipc/admin_emit.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/trace.h"

static const char *pool_ns_name(struct kvmm_server *srv, uint64_t pool)
{
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++)
		if ((uint64_t)(uintptr_t)srv->ns[i]->pool == pool)
			return srv->ns[i]->cfg.name;
	return "";
}

static bool trace_wanted(const struct kvmm_trace_rec *r, uint32_t mask, uint64_t client,
			 uint64_t pool)
{
	if (mask && !(mask & (1u << r->type)))
		return false;
	if (client && r->client != client)
		return false;
	return !pool || r->pool == pool;
}

/* One event as one line: a text record or a JSON object (JSON Lines). */
static void trace_line(struct kvmm_server *srv, struct kvmm_text *t, bool json,
		       const struct kvmm_trace_rec *r)
{
	struct kvmm_out o = {.json = json, .rec = -1, .width = 18};

	o.t = *t;
	if (json)
		kvmm_out_push(&o, '{');
	else
		kvmm_out_rec(&o, "Event");
	kvmm_out_u64(&o, "seqno", r->seqno, NULL);
	if (json)
		kvmm_out_u64(&o, "ts_ns", r->ts_ns, NULL);
	else
		kvmm_tprintf(&o.t, " ts=%" PRIu64 ".%06" PRIu64, r->ts_ns / 1000000000u,
			     r->ts_ns / 1000u % 1000000u);
	kvmm_out_str(&o, "type", kvmm_trace_type_name(r->type));
	kvmm_out_u64(&o, "client", r->client, NULL);
	kvmm_out_str(&o, "ns", pool_ns_name(srv, r->pool));
	kvmm_out_u64(&o, "seq", r->seq, NULL);
	kvmm_out_frame(&o, "frame", r->frame);
	kvmm_out_u64(&o, "count", r->count, NULL);
	if (json) {
		kvmm_out_pop(&o, '}');
		kvmm_tprintf(&o.t, "\n");
	} else {
		kvmm_out_rec_end(&o);
	}
	*t = o.t;
}

static uint64_t trace_oldest(const struct kvmm_trace *tr, uint64_t head)
{
	uint64_t nr = (uint64_t)tr->mask + 1;

	return head > nr ? head - nr + 1 : 1;
}

static void trace_dump(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		       const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	struct kvmm_trace *tr = kvmm_obs_trace(srv);
	uint64_t head, from, s, shown = 0, gone = 0;
	uint64_t pool = one ? (uint64_t)(uintptr_t)one->pool : 0;

	if (!tr)
		return;
	head = kvmm_trace_head(tr);
	from = max_t(uint64_t, trace_oldest(tr, head), srv->obs->trace_floor + 1);
	if (srv->obs->trace_floor + 1 < from)
		gone = from - srv->obs->trace_floor - 1;
	for (s = from; s <= head; s++) {
		struct kvmm_trace_rec r;

		if (!kvmm_trace_read(tr, s, &r)) {
			gone++;
			continue;
		}
		if (!trace_wanted(&r, req->reserved, req->id, pool))
			continue;
		trace_line(srv, &o->t, o->json, &r);
		shown++;
	}
	if (req->flags & KVMM_ADMIN_F_CLEAR)
		srv->obs->trace_floor = head;
	(void)shown;
	(void)gone;
}

int kvmm_admin_trace_follow(struct kvmm_session *s, const struct kvmm_admin_req *req,
			    const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_trace *tr = kvmm_obs_trace(srv);

	if (!tr)
		return -EOPNOTSUPP;
	if (req->ns[0])
		return -EINVAL; /* subscriptions filter by event and client only */
	if (!s->trace_follow)
		srv->obs->trace_subscribers++;
	/* trace = follow: the ring records from the first follower on */
	if (srv->cfg.trace_mode == KVMM_SERVER_TRACE_FOLLOW)
		kvmm_obs_trace_arm(srv, true);
	s->trace_follow = true;
	s->trace_json = req->flags & KVMM_ADMIN_F_JSON;
	s->trace_mask = req->reserved;
	s->trace_client = (uint32_t)req->id;
	s->trace_req_seq = hdr->seq;
	s->trace_next = kvmm_trace_head(tr) + 1;
	s->trace_lost = s->trace_dropped = 0;
	kvmm_obs_trace_wake(srv);
	return 0;
}

/* Send one pushed record; never waits: a full socket drops it. */
static bool trace_push(struct kvmm_session *s, struct kvmm_text *t)
{
	struct {
		struct kvmm_msg_hdr hdr;
	} *rep = (void *)s->srv->tx;
	ssize_t n;

	if (!t->len || t->err)
		return true;
	kvmm_msg_hdr_init(&rep->hdr, KVMM_OP_TRACE | KVMM_OP_REPLY,
			  (uint32_t)(sizeof(rep->hdr) + t->len), s->trace_req_seq);
	rep->hdr.abi = s->abi;
	rep->hdr.flags = KVMM_MSG_F_MORE;
	memcpy(&rep->hdr + 1, t->buf, t->len);
	do {
		n = send(s->fd, rep, sizeof(rep->hdr) + t->len, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	return n >= 0;
}

static void pump_one(struct kvmm_server *srv, struct kvmm_trace *tr, struct kvmm_session *s)
{
	struct kvmm_text t = {0};
	uint64_t head = kvmm_trace_head(tr), oldest = trace_oldest(tr, head);
	uint64_t batch = 0, lost0 = s->trace_lost, dropped0 = s->trace_dropped;
	bool full = false;

	if (s->trace_next < oldest) {
		s->trace_lost += oldest - s->trace_next;
		s->trace_next = oldest;
	}
	if (s->trace_next > head)
		return;
	t.cap = 16384;
	t.buf = malloc(t.cap);
	if (!t.buf)
		return;
	for (; s->trace_next <= head; s->trace_next++) {
		struct kvmm_trace_rec r;
		size_t before = t.len;

		if (!kvmm_trace_read(tr, s->trace_next, &r)) {
			if (!kvmm_trace_overwritten(tr, s->trace_next))
				break; /* claimed, not yet published: the next tick sends it */
			s->trace_lost++;
			continue;
		}
		if (!trace_wanted(&r, s->trace_mask, s->trace_client, 0))
			continue;
		trace_line(srv, &t, s->trace_json, &r);
		if (t.len > KVMM_MSG_PAYLOAD_MAX - 256) {
			/* send what fits; the last line starts the next record */
			size_t tail = t.len - before;

			t.len = before;
			if (full || !trace_push(s, &t)) {
				full = true;
				s->trace_dropped += batch;
			} else {
				srv->obs->trace_sent += batch;
			}
			memmove(t.buf, t.buf + before, tail);
			t.len = tail;
			batch = 0;
		}
		batch++;
	}
	if (full || !trace_push(s, &t))
		s->trace_dropped += batch;
	else
		srv->obs->trace_sent += batch;
	srv->obs->trace_lost += s->trace_lost - lost0;
	srv->obs->trace_dropped += s->trace_dropped - dropped0;
	if (s->trace_lost != lost0 || s->trace_dropped != dropped0) {
		/* tell the reader what it missed, in its own format; this too may not fit */
		t.len = 0;
		if (s->trace_json)
			kvmm_tprintf(&t, "{\"lost\":%" PRIu64 ",\"dropped\":%" PRIu64 "}\n",
				     s->trace_lost, s->trace_dropped);
		else
			kvmm_tprintf(&t, "Lost: lost=%" PRIu64 " dropped=%" PRIu64 "\n",
				     s->trace_lost, s->trace_dropped);
		trace_push(s, &t);
	}
	free(t.buf);
}

bool kvmm_admin_trace_pump(struct kvmm_server *srv)
{
	struct kvmm_trace *tr = kvmm_obs_trace(srv);
	struct kvmm_session *s;
	uint32_t subs = 0;

	list_for_each_entry (s, &srv->sessions, node) {
		if (!s->trace_follow || kvmm_session_dead(s))
			continue;
		subs++;
		if (tr)
			pump_one(srv, tr, s);
	}
	/* sessions that closed took their subscription with them */
	srv->obs->trace_subscribers = subs;
	/* trace = follow: the last follower gone, tracepoints stop writing */
	if (!subs && srv->cfg.trace_mode == KVMM_SERVER_TRACE_FOLLOW)
		kvmm_obs_trace_arm(srv, false);
	return subs != 0;
}

/* TRACE without FOLLOW: the ring's records the request selects, as lines. */
int kvmm_admin_trace(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		     const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	if (!kvmm_obs_trace(srv))
		return -EOPNOTSUPP;
	trace_dump(srv, one, req, o);
	return 0;
}
