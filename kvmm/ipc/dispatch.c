// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/dispatch.c - a checked request to its handler, by the operation table alone
 * (uapi/kvmm.h's KVMM_OPS for the protocol facts, opdef.c for the handlers): the session
 * state and the admin permission come first, then the row's handler.  The memory ops run
 * here under their namespace pool's lock, from the socket or, through kvmm_ipc_ring_exec(),
 * from the data plane, so the ring changes transport, not semantics; after each one the
 * page-table mirror is brought up to date before the op is answered.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "kvmm/ipc/ipc.h"

/*
 * Keep the data plane's page-table mirror in step with an op that ran: the sequence it
 * created or changed is rewritten (an append from its first new block on) before the op is
 * answered, so a client never reads a table older than a reply it holds.
 */
static void mirror_op(struct kvmm_session *s, enum kvmm_ipc_mirror how, const void *p,
		      const void *rp, int ret)
{
	struct kvmm_ipc_seq *is;
	uint32_t from = 0;
	uint64_t id;

	if (!s->dp || how == KVMM_MIRROR_NONE)
		return;
	if (how == KVMM_MIRROR_NEW) {
		if (ret)
			return;
		memcpy(&id, rp, sizeof(id)); /* create and fork replies start with the new id */
	} else {
		if (how == KVMM_MIRROR_APPEND && !ret)
			memcpy(&from,
			       (const uint8_t *)rp +
				       offsetof(struct kvmm_seq_append_rep, first_new_block),
			       sizeof(from));
		memcpy(&id, p, sizeof(id)); /* these requests start with the sequence id */
	}
	is = kvmm_session_seq_find(s, id);
	if (is)
		kvmm_dp_seq_update(s, is, from);
}

int kvmm_ipc_mem_op(struct kvmm_session *s, unsigned int op, const void *p, void *rp, size_t *rlen)
{
	const struct kvmm_ipc_opdef *d = kvmm_ipc_opdef(op);
	int ret;

	if (!d || !d->mem)
		return -EOPNOTSUPP;
	ret = d->mem(s, op, p, rp, rlen);
	mirror_op(s, d->mirror, p, rp, ret);
	return ret;
}

int kvmm_ipc_ring_exec(struct kvmm_session *s, unsigned int op, const void *p, size_t plen,
		       void *rp, size_t *rlen)
{
	int ret = kvmm_ipc_check_payload(op, p, plen);

	if (ret)
		return ret;
	return kvmm_ipc_mem_op(s, op, p, rp, rlen);
}

/* A memory op from the socket; the reply payload is built in place in the tx buffer. */
static void do_mem(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_pool *pool = s->as->pool;
	void *rp = (struct kvmm_msg_hdr *)s->srv->tx + 1;
	size_t rlen = 0;
	int ret;

	pthread_mutex_lock(&pool->lock);
	ret = kvmm_ipc_mem_op(s, hdr->op, hdr + 1, rp, &rlen);
	/* a lookup (or prompt) that stopped short may wait for the remote tier: answered later */
	if (!ret && s->srv->remote && kvmm_ipc_remote_park(s, hdr->op, hdr + 1, rp, hdr, 0)) {
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	pthread_mutex_unlock(&pool->lock);
	kvmm_session_reply(s, hdr, ret, rp, ret ? 0 : rlen);
}

void kvmm_ipc_dispatch(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	const struct kvmm_op_info *info = kvmm_op_info(hdr->op);
	const struct kvmm_ipc_opdef *d = kvmm_ipc_opdef(hdr->op);

	if (hdr->op != KVMM_OP_HELLO && (s->state == KVMM_SESSION_NEW || hdr->abi != s->abi)) {
		/* nothing before HELLO, and nothing in a version we did not agree on */
		kvmm_session_reply(s, hdr, -EPROTO, NULL, 0);
		if (++s->nr_bad >= KVMM_SERVER_MAX_BAD_MSGS && !kvmm_session_dead(s)) {
			KVMM_STAT_INC(s->srv, disconnect_bad);
			kvmm_session_set_dead(s);
		}
		return;
	}
	if (!info || !d || (info->flags & KVMM_OPF_EVENT)) {
		kvmm_session_reply(s, hdr, -EOPNOTSUPP, NULL, 0); /* proto.c let none through */
		return;
	}
	if ((info->flags & KVMM_OPF_ADMIN) && !kvmm_session_is_admin(s)) {
		kvmm_session_reply(s, hdr, -EACCES, NULL, 0);
		return;
	}
	if ((info->flags & KVMM_OPF_ATTACHED) && s->state != KVMM_SESSION_ATTACHED) {
		kvmm_session_reply(s, hdr, -ENOTCONN, NULL, 0);
		return;
	}
	if (d->handle)
		d->handle(s, hdr);
	else if (d->report)
		kvmm_admin_read(s, hdr, d->report);
	else if (d->mem)
		do_mem(s, hdr);
	else
		kvmm_session_reply(s, hdr, -EOPNOTSUPP, NULL, 0);
}
