// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/session.c - one client connection's state machine (ipc.h), sending to it
 * (kvmm_session_send/reply: never blocking), and the requests that act on its own objects,
 * as the operation table's handlers (opdef.c): HELLO (version and feature negotiation),
 * ATTACH (namespace access from SO_PEERCRED, format, address space, chunk fds), DETACH, BYE,
 * PING, and the sequence ops.  Sequence ids are per session and looked up only in the
 * session's own table, so a client can never name another client's sequence (-ENOENT).  PIN
 * raises the pincount of every frame a sequence maps and records those frames; while pinned a
 * sequence's frames cannot change (the ops that would change them get -EBUSY), so UNPIN and
 * teardown drop exactly the pins taken, and a pinned frame always has a mapper and is never
 * on an LRU list, which is what keeps reclaim off it.  Every core call runs under the
 * namespace pool's lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "generated/autoconf.h"
#include "compiler.h"
#include "log.h"
#include "kmalloc.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

static const char *const state_names[KVMM_SESSION_STATE_COUNT] = {
	[KVMM_SESSION_NEW] = "new",
	[KVMM_SESSION_READY] = "ready",
	[KVMM_SESSION_ATTACHED] = "attached",
};

const char *kvmm_session_state_name(enum kvmm_session_state s)
{
	return (unsigned int)s < KVMM_SESSION_STATE_COUNT ? state_names[s] : "?";
}

int kvmm_session_init(struct kvmm_session *s)
{
	s->state = KVMM_SESSION_NEW;
	s->fd = -1;
	s->next_seq = 1;
	return kvmm_htable_init(&s->seqs, 8);
}

/* ---- sending ----------------------------------------------------------------------------- */

int kvmm_session_send(struct kvmm_session *s, const void *rec, size_t len, const int *fds,
		      unsigned int nfds)
{
	struct iovec iov = {.iov_base = (void *)rec, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVMM_SERVER_MAX_CHUNKS)];
		struct cmsghdr align;
	} cbuf;
	ssize_t n;

	if (kvmm_session_dead(s))
		return -EPIPE;
	if (nfds) {
		struct cmsghdr *c;

		if (nfds > KVMM_SERVER_MAX_CHUNKS)
			return -E2BIG;
		memset(&cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do {
		n = sendmsg(s->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n == (ssize_t)len) {
		KVMM_STAT_ADD(s->srv, fds_passed, nfds);
		return 0;
	}
	if (n < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
		/* it does not read its replies: drop it rather than wait for it */
		KVMM_STAT_INC(s->srv, disconnect_slow);
		kvmm_warn_ratelimited("ipc: client %u does not read its replies, disconnecting",
				      s->id);
	}
	kvmm_session_set_dead(s);
	return n < 0 ? -errno : -EIO;
}

int kvmm_session_reply(struct kvmm_session *s, const struct kvmm_msg_hdr *req, int status,
		       const void *payload, size_t plen)
{
	struct kvmm_msg_hdr *rep = (struct kvmm_msg_hdr *)s->srv->tx;

	if (status < 0) {
		KVMM_STAT_INC(s->srv, errors);
		if (status == -EBADMSG || status == -EPROTO || status == -EOPNOTSUPP)
			KVMM_STAT_INC(s->srv, bad_msgs);
		if (status == -EACCES)
			KVMM_STAT_INC(s->srv, denied);
	}
	if (plen > KVMM_MSG_PAYLOAD_MAX)
		return -E2BIG;
	kvmm_msg_hdr_init_reply(rep, req, (uint32_t)(sizeof(*rep) + plen), status);
	if (plen && payload != (const void *)(rep + 1))
		memmove(rep + 1, payload, plen);
	return kvmm_session_send(s, rep, sizeof(*rep) + plen, NULL, 0);
}

/* ---- identity ------------------------------------------------------------------------- */

static bool has_group(const struct kvmm_session *s, gid_t gid)
{
	unsigned int i;

	for (i = 0; i < s->nr_groups; i++)
		if (s->groups[i] == gid)
			return true;
	return false;
}

bool kvmm_session_is_admin(const struct kvmm_session *s)
{
	if (s->cred.uid == 0)
		return true;
	return s->srv->cfg.have_admin_gid && has_group(s, s->srv->cfg.admin_gid);
}

static bool ns_allowed(const struct kvmm_session *s, const struct kvmm_ns_config *c)
{
	unsigned int i;

	if (s->cred.uid == 0)
		return true;
	if (!c->nr_uids && !c->nr_gids)
		return s->cred.uid == s->srv->owner_uid;
	for (i = 0; i < c->nr_uids; i++)
		if (c->uids[i] == s->cred.uid)
			return true;
	for (i = 0; i < c->nr_gids; i++)
		if (has_group(s, c->gids[i]))
			return true;
	return false;
}

/* ---- sequences table ------------------------------------------------------------------ */

struct kvmm_ipc_seq *kvmm_session_seq_find(struct kvmm_session *s, uint64_t id)
{
	struct kvmm_ipc_seq *is;

	kvmm_htable_for_each_possible (&s->seqs, is, node, id)
		if (is->id == id)
			return is;
	return NULL;
}

static struct kvmm_ipc_seq *seq_track(struct kvmm_session *s, struct kvmm_seq *seq)
{
	struct kvmm_ipc_seq *is = kvmm_calloc(1, sizeof(*is));

	if (!is)
		return NULL;
	is->id = s->next_seq++;
	is->seq = seq;
	is->sess = s;
	seq->priv = is; /* reclaim's hooks (swapd.c) find the session through it */
	kvmm_htable_add(&s->seqs, &is->node, is->id);
	s->nr_seqs++;
	return is;
}

static void pins_drop(struct kvmm_pool *pool, struct kvmm_ipc_seq *is, uint32_t times)
{
	uint32_t i;

	for (i = 0; i < is->nr_pinned; i++) {
		struct kvmm_page *pg = kvmm_frame_to_page(pool, is->pinned[i]);

		KVMM_BUG_ON(pg->pincount < times);
		/* the engine's pin window ends: the KV of what it appended before is written */
		kvmm_page_unpin(pg, times);
	}
	is->pin_depth -= times;
	if (!is->pin_depth) {
		kvmm_free(is->pinned);
		is->pinned = NULL;
		is->nr_pinned = 0;
	}
}

/* Drop one range pin (unlinked by the caller): its frames' pins, then the record. */
/* A range pin's record, empty, with room for a frame per block of [block, block + nr). */
static struct kvmm_range_pin *range_pin_alloc(uint32_t block, uint32_t nr_blocks)
{
	struct kvmm_range_pin *r =
		kvmm_malloc(sizeof(*r) + (size_t)nr_blocks * sizeof(r->frames[0]));

	if (r) {
		memset(r, 0, sizeof(*r));
		r->block = block;
		r->nr_blocks = nr_blocks;
	}
	return r;
}

static uint32_t range_pin_drop(struct kvmm_pool *pool, struct kvmm_range_pin *rp)
{
	uint32_t i, n = rp->nr_frames;

	for (i = 0; i < n; i++) {
		struct kvmm_page *pg = kvmm_frame_to_page(pool, rp->frames[i]);

		KVMM_BUG_ON(!pg->pincount);
		kvmm_page_unpin(pg, 1);
	}
	for (i = 0; i < rp->nr_far; i++)
		kvmm_swap_far_unpin(rp->far, rp->slots[i]);
	kvmm_free(rp->slots);
	kvmm_free(rp);
	return n;
}

/* Forget a sequence: unpin, free it in the core, drop the record. */
static void seq_untrack(struct kvmm_session *s, struct kvmm_ipc_seq *is)
{
	if (is->pin_depth)
		pins_drop(s->as->pool, is, is->pin_depth);
	while (is->ranges) {
		struct kvmm_range_pin *rp = is->ranges;

		is->ranges = rp->next;
		range_pin_drop(s->as->pool, rp);
	}
	is->nr_ranges = 0;
	kvmm_mm_seq_free(is->seq);
	kvmm_dp_seq_gone(s, is);
	kvmm_htable_del(&is->node);
	s->nr_seqs--;
	kvmm_free(is);
}

/* Debug builds: the pool must be consistent after every teardown. */
static void check_pool(struct kvmm_server *srv, struct kvmm_ipc_ns *n)
{
#if CONFIG_KVMM_DEBUG
	char why[256];
	int ret;

	pthread_mutex_lock(&n->pool->lock);
	ret = kvmm_check_invariants(n->pool, why, sizeof(why));
	pthread_mutex_unlock(&n->pool->lock);
	if (ret) {
		KVMM_STAT_INC(srv, invariant_failures);
		kvmm_err("ipc: namespace %s: invariants broken after teardown: %s", n->cfg.name,
			 why);
	}
#else
	(void)srv;
	(void)n;
#endif
}

void kvmm_session_detach(struct kvmm_session *s)
{
	struct kvmm_ipc_ns *n = s->ns;

	struct kvmm_ipc_seq *is;
	struct hlist_node *tmp;
	struct kvmm_pool *pool;
	size_t bkt;

	if (s->state != KVMM_SESSION_ATTACHED)
		return;
	/* its ring worker lets go of it first (it takes the pool lock after its own) */
	kvmm_ring_worker_del(s);
	/* a ring's lookup parked on the remote tier (its socket is read meanwhile) */
	kvmm_ipc_remote_cancel(s);
	pool = s->as->pool;
	pthread_mutex_lock(&pool->lock);
	kvmm_dp_destroy(s); /* first: its magazine frames go back with their hidden sequence */
	kvmm_htable_for_each_safe (&s->seqs, bkt, tmp, is, node)
		seq_untrack(s, is);
	/* frees whatever sequence is left (none) and the address space */
	kvmm_aspace_destroy(s->as);
	kvmm_magazine_drain_all(&s->mag);
	kvmm_trace_event(KVMM_TR_DETACH, pool, s->id, s->ns->ns->id, 0, KVMM_TRACE_NONE, 0);
	pthread_mutex_unlock(&pool->lock);
	s->as = NULL;
	s->ns->nr_clients--;
	s->ns = NULL;
	s->state = KVMM_SESSION_READY;
	KVMM_STAT_INC(s->srv, detached);
	check_pool(s->srv, n);
}

void kvmm_session_fini(struct kvmm_session *s)
{
	kvmm_session_detach(s);
	kvmm_htable_destroy(&s->seqs);
}

/* ---- session ops ------------------------------------------------------------------------ */

/*
 * The backend the namespace pools really use (kvmmd gives every pool the same one).  By name,
 * because kvmm/backend/cuda.c is not linked into a build without CUDA; anything else the
 * host can address (host, or mmap in tests) is the host backend to a client.
 */
static enum kvmm_backend pools_backend(const struct kvmm_server *srv)
{
	const struct kvmm_backend_ops *ops = srv->cfg.backend;

	if (ops && ops->name && !strcmp(ops->name, "cuda"))
		return KVMM_BACKEND_CUDA;
	return KVMM_BACKEND_HOST;
}

static uint64_t supported_features(const struct kvmm_server *srv)
{
	uint64_t f = KVMM_FEAT_PREFIX_CACHE | KVMM_FEAT_KEY_DOMAIN | KVMM_FEAT_PIN_RANGE;

	f |= pools_backend(srv) == KVMM_BACKEND_CUDA ? KVMM_FEAT_CUDA_BACKEND
						     : KVMM_FEAT_HOST_BACKEND;

	if (srv->ns[0]->nr_chunks)
		f |= KVMM_FEAT_FD_PASSING | KVMM_FEAT_RINGS | KVMM_FEAT_RING_OUT;
	/* far reads map the pool's chunks and the host tier's arena: host memory only */
	if (srv->ns[0]->nr_chunks && pools_backend(srv) == KVMM_BACKEND_HOST)
		f |= KVMM_FEAT_FAR;
	if (srv->remote)
		f |= KVMM_FEAT_REMOTE;
	return f;
}

void kvmm_session_op_hello(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_hello_req req;
	struct kvmm_hello_rep rep;
	uint64_t frames = 0;
	unsigned int i;
	int agreed, status = 0;

	memcpy(&req, hdr + 1, sizeof(req));
	memset(&rep, 0, sizeof(rep));
	rep.abi_version = KVMM_ABI_VERSION;
	rep.abi_min = KVMM_ABI_MIN_COMPAT;
	rep.backend = pools_backend(srv);
	rep.features_supported = supported_features(srv);
	rep.page_size = srv->cfg.page_size;
	for (i = 0; i < srv->nr_ns; i++)
		frames += srv->ns[i]->cfg.nframes;
	rep.nr_frames = (uint32_t)min_t(uint64_t, frames, UINT32_MAX);
	rep.client_id = s->id;
	rep.nr_devices = srv->ns[0]->nr_devices ? srv->ns[0]->nr_devices : 1; /* same backend */
	rep.max_msg = KVMM_MSG_MAX;

	if (s->state != KVMM_SESSION_NEW) {
		status = -EPROTO; /* a second HELLO */
		goto out_reply;
	}
	agreed = kvmm_abi_negotiate(KVMM_ABI_VERSION, KVMM_ABI_MIN_COMPAT, req.abi_version,
				    req.abi_min);
	if (agreed < 0) {
		/* full reply so the client can say why; then we are done with it */
		KVMM_STAT_INC(srv, version_mismatch);
		kvmm_notice("ipc: client %u (pid %d) speaks ABI %u..%u, we speak %u..%u", s->id,
			    (int)s->cred.pid, req.abi_min, req.abi_version, KVMM_ABI_MIN_COMPAT,
			    KVMM_ABI_VERSION);
		kvmm_session_reply(s, hdr, -EPROTO, &rep, sizeof(rep));
		kvmm_session_set_dead(s);
		return;
	}
	if (req.name[0] && kvmm_name_check(req.name)) {
		status = -EINVAL;
		goto out_reply;
	}
	rep.abi_agreed = (uint16_t)agreed;
	rep.features = req.features & rep.features_supported;
	s->abi = (uint16_t)agreed;
	s->features = rep.features;
	memcpy(s->name, req.name, sizeof(s->name));
	s->state = KVMM_SESSION_READY;
	KVMM_STAT_INC(srv, hellos);
	kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
	return;

out_reply:
	kvmm_session_reply(s, hdr, status, NULL, 0);
}

/*
 * The member of @n's device group whose chunks an ATTACH gets: the one with device @uuid, or
 * member 0 when the client names none (a host-memory pool, a client that maps no device).
 * -ENODEV, with a notice, when the named device is not in the group.
 */
static int attach_member(struct kvmm_session *s, struct kvmm_ipc_ns *n, const uint8_t *uuid)
{
	kvmm_backend_member_fn member = s->srv->cfg.member;
	char hex[33];
	int ret;

	if (!uuid)
		return 0;
	ret = member ? member(&n->pool->be, uuid) : -ENODEV;
	if (ret >= 0 && (uint32_t)ret < max_t(uint32_t, n->nr_devices, 1))
		return ret;
	for (unsigned int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
	kvmm_notice("ipc: client %u (pid %d): its device %s is not one of namespace %s's %u "
		    "device(s)",
		    s->id, (int)s->cred.pid, hex, n->cfg.name, max_t(uint32_t, n->nr_devices, 1));
	return -ENODEV;
}

static int do_attach(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_attach_req req;
	struct kvmm_attach_device dev;
	struct kvmm_attach_model model = {0};
	const uint8_t *model_id = NULL;
	struct kvmm_attach_rep rep;
	struct kvmm_ipc_ns *n = NULL;
	uint32_t member;
	struct kvmm_fmt fmt;
	struct kvmm_msg_hdr *out;
	const int *fds;
	int *all_fds = NULL;
	unsigned int i;
	int ret;

	if (s->state == KVMM_SESSION_ATTACHED)
		return -EEXIST;
	memcpy(&req, hdr + 1, sizeof(req));
	if ((req.flags & ~KVMM_ATTACH_F_ALL_V0) || kvmm_name_check(req.ns))
		return -EINVAL;
	if (req.flags & KVMM_ATTACH_F_DEVICE)
		memcpy(&dev, (const uint8_t *)(hdr + 1) + sizeof(req), sizeof(dev));
	if (req.flags & KVMM_ATTACH_F_MODEL) {
		/* after the device, when there is one (the payload's length was checked) */
		const uint8_t *m = (const uint8_t *)(hdr + 1) + sizeof(req) +
				   ((req.flags & KVMM_ATTACH_F_DEVICE) ? sizeof(dev) : 0);

		if (!(s->features & KVMM_FEAT_KEY_DOMAIN))
			return -EOPNOTSUPP;
		memcpy(&model, m, sizeof(model));
		if (model.reserved || model.len == 0)
			return -EINVAL;
		model_id = m + sizeof(model);
	}
	if ((req.flags & KVMM_ATTACH_F_RINGS) && !(s->features & KVMM_FEAT_RINGS))
		return -EOPNOTSUPP;
	if (req.ring_entries &&
	    (req.ring_entries < KVMM_RING_MIN_ENTRIES || req.ring_entries > KVMM_RING_MAX_ENTRIES ||
	     (req.ring_entries & (req.ring_entries - 1))))
		return -EINVAL;
	for (i = 0; i < srv->nr_ns; i++)
		if (!memcmp(srv->ns[i]->cfg.name, req.ns, KVMM_NAME_LEN))
			n = srv->ns[i];
	/*
	 * A missing namespace is -ENOENT only to those who may see them all (root, the admin
	 * group, the daemon's own user); anyone else gets the -EACCES of a namespace it may not
	 * use, so it cannot tell which names exist.
	 */
	if (!n)
		return kvmm_session_is_admin(s) || s->cred.uid == srv->owner_uid ? -ENOENT
										 : -EACCES;
	if (!ns_allowed(s, &n->cfg)) {
		kvmm_notice("ipc: client %u uid %u may not attach to %s", s->id,
			    (unsigned int)s->cred.uid, n->cfg.name);
		return -EACCES;
	}
	ret = attach_member(s, n, (req.flags & KVMM_ATTACH_F_DEVICE) ? dev.uuid : NULL);
	if (ret < 0)
		return ret;
	member = (uint32_t)ret;
	if (kvmm_format_check(&req.fmt))
		return -EINVAL;
	ret = kvmm_fmt_init(&fmt, &req.fmt, srv->cfg.page_size);
	if (ret)
		return ret;
	if (fmt.token_bytes > UINT32_MAX)
		return -EINVAL;

	pthread_mutex_lock(&n->pool->lock);
	ret = kvmm_magazine_init(n->pool, &s->mag, s->id, 0, 0);
	if (!ret)
		ret = kvmm_aspace_create(n->pool, n->ns, &fmt, &s->mag, &s->as);
	/* the model identity: a key domain of the client's own within the namespace */
	if (!ret && model_id)
		s->as->fmt_id = kvmm_key_domain(n->ns, KVMM_KEY_DOMAIN_MODEL, s->as->fmt_id,
						model_id, model.len);
	pthread_mutex_unlock(&n->pool->lock);
	if (ret)
		return ret;
	s->ns = n;
	s->device = member;
	s->state = KVMM_SESSION_ATTACHED;
	n->nr_clients++;
	KVMM_STAT_INC(srv, attached);
	kvmm_trace_event(KVMM_TR_ATTACH, n->pool, s->id, n->ns->id, 0, KVMM_TRACE_NONE, 0);

	memset(&rep, 0, sizeof(rep));
	rep.tokens_per_page = fmt.tokens_per_page;
	rep.bytes_per_token = (uint32_t)fmt.token_bytes;
	rep.chunk_size = n->chunk_size;
	rep.nr_chunks = n->nr_chunks;
	rep.ns_id = n->id;
	rep.nr_fds = n->nr_chunks;
	rep.nr_frames = n->cfg.nframes;
	rep.device_index = member;
	rep.nr_devices = n->nr_devices;
	fds = n->fds ? n->fds + (size_t)member * n->nr_chunks : NULL;
	/* the data plane: its region and doorbell go first; without it the socket serves all */
	if ((req.flags & KVMM_ATTACH_F_RINGS) && n->nr_chunks + 2 <= KVMM_SERVER_MAX_CHUNKS) {
		int dp_fds[2];

		pthread_mutex_lock(&n->pool->lock);
		ret = kvmm_dp_create(s, req.ring_entries, dp_fds, &rep);
		pthread_mutex_unlock(&n->pool->lock);
		all_fds = ret ? NULL : malloc(sizeof(int) * (n->nr_chunks + 2));
		if (all_fds) {
			all_fds[0] = dp_fds[0];
			all_fds[1] = dp_fds[1];
			memcpy(all_fds + 2, fds, sizeof(int) * n->nr_chunks);
			fds = all_fds;
			rep.nr_fds += 2;
		} else {
			kvmm_warn("ipc: client %u: no data plane (%s)", s->id,
				  strerror(ret ? -ret : ENOMEM));
			pthread_mutex_lock(&n->pool->lock);
			kvmm_dp_destroy(s);
			pthread_mutex_unlock(&n->pool->lock);
			memset(&rep.shm_size, 0, sizeof(rep.shm_size));
			rep.ring_entries = rep.mag_size = 0;
		}
	}

	out = (struct kvmm_msg_hdr *)srv->tx;
	kvmm_msg_hdr_init_reply(out, hdr, sizeof(*out) + sizeof(rep), 0);
	if (rep.nr_fds)
		out->flags |= KVMM_MSG_F_FDS;
	memcpy(out + 1, &rep, sizeof(rep));
	kvmm_info("ipc: client %u (%.32s, pid %d) attached to %s%s", s->id, s->name,
		  (int)s->cred.pid, n->cfg.name, s->dp ? " with rings" : "");
	kvmm_session_send(s, out, sizeof(*out) + sizeof(rep), fds, rep.nr_fds);
	free(all_fds);
	/* its rings: polled from now on by the namespace's ring worker, if there are workers */
	kvmm_ring_worker_add(s);
	return 0;
}

void kvmm_session_op_attach(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	int ret = do_attach(s, hdr);

	/* on success do_attach() answered with the descriptors itself */
	if (ret)
		kvmm_session_reply(s, hdr, ret, NULL, 0);
}

void kvmm_session_op_detach(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_detach(s);
	kvmm_session_reply(s, hdr, 0, NULL, 0);
}

void kvmm_session_op_bye(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, 0, NULL, 0);
	kvmm_session_detach(s);
	KVMM_STAT_INC(s->srv, hangups);
	kvmm_session_set_dead(s);
}

/* PING over the socket: its payload comes back. */
void kvmm_session_op_ping(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, 0, hdr + 1, hdr->len - sizeof(*hdr));
}

/* PING on the ring: a completion and nothing else (a CQE has no room for an echo). */
int kvmm_session_op_nop(struct kvmm_session *s __maybe_unused, unsigned int op __maybe_unused,
			const void *p __maybe_unused, void *rp __maybe_unused,
			size_t *rlen __maybe_unused)
{
	return 0;
}

/* ---- sequence ops (pool lock held) -------------------------------------------------------- */

static int lookup(struct kvmm_session *s, uint64_t id, bool change, struct kvmm_ipc_seq **out)
{
	struct kvmm_ipc_seq *is = kvmm_session_seq_find(s, id);

	if (!is)
		return -ENOENT;
	/* an OOM victim's KV is gone (or going): only SEQ_FREE still works (swapd.c) */
	if (is->preempted)
		return kvmm_ipc_seq_preempt_err(is);
	if (change && (is->pin_depth || is->nr_ranges))
		return -EBUSY;
	*out = is;
	return 0;
}

/*
 * PIN's fault-in: every swapped page of the batch's sequences comes back before the frames
 * are recorded and pinned.  Room is made first, in reclaim order, with the batch's resident
 * pages held by a temporary pin so that making room never swaps out what the step needs;
 * the reads themselves allocate with nested reclaim limited to dropping cache (swap.h).
 * Returns the pages brought in, or -EIO (a read failed: that sequence stays swapped, the
 * PIN fails, others are untouched), -ENOMEM (no room even after swapping idle sequences out:
 * the batch stays swapped, and an OOM victim outside it, never pinned, may be reported) or
 * -KVMM_EPREEMPTED.
 */
static void fault_mark(struct kvmm_session *s, const uint8_t *ids, uint32_t nr, bool on)
{
	struct kvmm_pool *pool = s->as->pool;
	uint32_t i;

	for (i = 0; i < nr; i++) {
		struct kvmm_ipc_seq *is;
		uint64_t id;

		memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
		is = kvmm_session_seq_find(s, id);
		if (!is || !(is->seq->flags & KVMM_SEQ_F_FAULTING) == !on)
			continue;
		is->seq->flags ^= KVMM_SEQ_F_FAULTING;
		if (on)
			pool->nr_faulting++;
		else
			pool->nr_faulting--;
	}
}

static int pin_fault_in(struct kvmm_session *s, const uint8_t *ids, uint32_t nr)
{
	struct kvmm_pool *pool = s->as->pool;
	uint32_t i, b, need = 0, got = 0;
	int ret = 0;

	for (i = 0; i < nr; i++) {
		struct kvmm_ipc_seq *is;
		uint64_t id;

		memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
		is = kvmm_session_seq_find(s, id);
		if (!is)
			continue; /* the caller reports -ENOENT */
		if (is->preempted)
			return kvmm_ipc_seq_preempt_err(is);
		need += kvmm_mm_seq_nr_swapped(is->seq);
	}
	if (!need)
		return 0;
	/*
	 * Swapped KV is safe where it is: the sequences being faulted in are never OOM victims
	 * for it (nor is a pinned one), so a PIN that finds no room fails with -ENOMEM and
	 * leaves them swapped, to come back on a later PIN (itest_swap test_swap_not_dropped).
	 */
	fault_mark(s, ids, nr, true);
	if (kvmm_pool_nr_free(pool) < need + pool->wmark_min) {
		uint32_t want = need + pool->wmark_min - kvmm_pool_nr_free(pool), nr_held = 0;
		struct kvmm_page **held;
		size_t cap = 0;

		for (i = 0; i < nr; i++) {
			struct kvmm_ipc_seq *is;
			uint64_t id;

			memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
			is = kvmm_session_seq_find(s, id);
			cap += is ? is->seq->nblocks : 0;
		}
		/*
		 * The batch's resident pages are held while reclaim makes room for the rest, and
		 * exactly those are let go after: reclaim polls the swap tiers, and a readahead
		 * completing there maps pages that were swapped before it (counting the present
		 * PTEs again unpinned two pages never pinned; found by fuzz_session, seed
		 * crash-pin-readahead).
		 */
		held = kvmm_malloc((cap ? cap : 1) * sizeof(*held));
		if (!held) {
			fault_mark(s, ids, nr, false);
			return -ENOMEM;
		}
		for (i = 0; i < nr; i++) {
			struct kvmm_ipc_seq *is;
			uint64_t id;

			memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
			is = kvmm_session_seq_find(s, id);
			for (b = 0; is && b < is->seq->nblocks; b++)
				if (kvmm_pte_is_present(is->seq->pte[b])) {
					struct kvmm_page *pg = kvmm_frame_to_page(
						pool, kvmm_pte_frame(is->seq->pte[b]));

					pg->pincount++;
					held[nr_held++] = pg;
				}
		}
		kvmm_shrink(pool, want, 0);
		while (nr_held)
			held[--nr_held]->pincount--;
		kvmm_free(held);
	}
	for (i = 0; i < nr && !ret; i++) {
		struct kvmm_ipc_seq *is;
		uint64_t id;
		int r;

		memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
		is = kvmm_session_seq_find(s, id);
		if (!is || !kvmm_mm_seq_nr_swapped(is->seq))
			continue;
		r = kvmm_mm_seq_fault(is->seq, 0, is->seq->nblocks);
		/* a page that failed its checksum dropped the sequence: not an I/O to retry */
		if (r < 0 && is->preempted)
			r = kvmm_ipc_seq_preempt_err(is);
		if (r < 0) {
			ret = r;
			if (r == -ENOMEM)
				kvmm_out_of_memory(pool);
		} else {
			got += (uint32_t)r;
		}
		kvmm_trace_event(KVMM_TR_FAULT, pool, s->id, s->ns->ns->id, is->seq->id,
				 KVMM_TRACE_NONE, r < 0 ? 0 : (uint64_t)r);
		kvmm_dp_seq_update(s, is, 0);
	}
	fault_mark(s, ids, nr, false);
	return ret ? ret : (int)got;
}

/* PREFETCH: start the reads of the batch's swapped pages; nothing waits, nothing is pinned. */
int kvmm_session_op_prefetch(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			     void *rp, size_t *rlen)
{
	struct kvmm_pin_req req;
	struct kvmm_pin_rep *rep = rp;
	const uint8_t *ids = (const uint8_t *)p + sizeof(req);
	uint32_t i, started = 0;

	memcpy(&req, p, sizeof(req));
	if (req.flags)
		return -EINVAL;
	for (i = 0; i < req.nr_seqs; i++) {
		struct kvmm_ipc_seq *is;
		uint64_t id;
		int ret;

		memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
		ret = lookup(s, id, false, &is);
		if (ret)
			return ret;
		ret = kvmm_mm_seq_prefetch(is->seq, 0, is->seq->nblocks);
		if (ret > 0)
			started += (uint32_t)ret;
	}
	rep->nr_frames = 0;
	rep->nr_swapin = started;
	*rlen = sizeof(*rep);
	return 0;
}

/*
 * The end of SEQ_CREATE and SEQ_FORK: ret is how setting up the new sequence went; on
 * success it is tracked and its id returned in *id, on any failure it is freed.
 */
/*
 * Room for a new sequence of @nr_tokens (SEQ_CREATE, SEQ_PROMPT): every block of it needs a
 * frame or a swap slot at once, so more than the namespace may hold (its limit, or the pool,
 * plus the swap tiers) can never be given - and the core would size the sequence's arrays for
 * them first (gigabytes): -E2BIG; the session's table full: -ENOSPC.
 */
static int new_seq_room(const struct kvmm_session *s, uint64_t nr_tokens)
{
	if (DIV_ROUND_UP(nr_tokens, (uint64_t)s->as->fmt.tokens_per_page) >
	    kvmm_mm_seq_blocks_max(s->as))
		return -E2BIG;
	if (s->nr_seqs >= KVMM_SESSION_MAX_SEQS)
		return -ENOSPC;
	return 0;
}

static int track_new_seq(struct kvmm_session *s, struct kvmm_seq *seq, int ret, uint64_t *id)
{
	struct kvmm_ipc_seq *is = NULL;

	if (!ret) {
		is = seq_track(s, seq);
		if (!is)
			ret = -ENOMEM;
	}
	if (ret) {
		kvmm_mm_seq_free(seq);
		return ret;
	}
	*id = is->id;
	return 0;
}

int kvmm_session_op_seq_create(struct kvmm_session *s, unsigned int op __maybe_unused,
			       const void *p, void *rp, size_t *rlen)
{
	struct kvmm_seq_create_req req;
	struct kvmm_seq_create_rep *rep = rp;
	struct kvmm_seq *seq;
	uint64_t id;
	int ret;

	memcpy(&req, p, sizeof(req));
	if (req.flags)
		return -EINVAL;
	if (req.nr_tokens > UINT32_MAX)
		return -E2BIG;
	ret = new_seq_room(s, req.nr_tokens);
	if (ret)
		return ret;
	ret = kvmm_mm_seq_create(s->as, &seq);
	if (ret)
		return ret;
	seq->priority = req.priority;
	ret = track_new_seq(s, seq, kvmm_mm_seq_append(seq, (uint32_t)req.nr_tokens, NULL), &id);
	if (ret)
		return ret;
	memset(rep, 0, sizeof(*rep));
	rep->seq = id;
	rep->nr_blocks = seq->nblocks;
	*rlen = sizeof(*rep);
	return 0;
}

int kvmm_session_op_seq_append(struct kvmm_session *s, unsigned int op, const void *p, void *rp,
			       size_t *rlen)
{
	struct kvmm_seq_append_req req;
	struct kvmm_seq_append_frames_req freq = {0};
	struct kvmm_seq_append_rep *rep = rp;
	const uint32_t *ids = (const uint32_t *)((const uint8_t *)p + sizeof(req));
	struct kvmm_ipc_seq *is;
	uint32_t old_blocks, old_tail = KVMM_FRAME_NONE, first;
	int ret;

	memcpy(&req, p, sizeof(req));
	if (op == KVMM_OP_SEQ_APPEND_FRAMES)
		memcpy(&freq, p, sizeof(freq)); /* same seq field; counts are 32-bit here */
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	old_blocks = is->seq->nblocks;
	if (old_blocks)
		old_tail = kvmm_mm_seq_frame(is->seq, old_blocks - 1);
	/* proto.c checked that the ids (and frames) follow, so they fit in one record */
	if (op == KVMM_OP_SEQ_APPEND_FRAMES)
		/* the new blocks are frames the client popped from its magazine (ring.c) */
		ret = kvmm_dp_append_frames(s, is->seq, freq.nr_tokens, ids, ids + freq.nr_tokens,
					    freq.nr_frames);
	else
		ret = kvmm_mm_seq_append(is->seq, (uint32_t)req.nr_tokens, ids);
	if (ret)
		return ret;
	first = old_blocks;
	/* a copy-on-write of the shared partial tail gave that block a new frame too */
	if (old_blocks && kvmm_mm_seq_frame(is->seq, old_blocks - 1) != old_tail)
		first = old_blocks - 1;
	rep->nr_tokens = is->seq->ntokens;
	rep->nr_blocks = is->seq->nblocks;
	rep->first_new_block = first;
	*rlen = sizeof(*rep);
	return 0;
}

int kvmm_session_op_seq_fork(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			     void *rp, size_t *rlen)
{
	struct kvmm_seq_fork_req req;
	struct kvmm_seq_fork_rep *rep = rp;
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	uint64_t id;
	int ret;

	memcpy(&req, p, sizeof(req));
	ret = lookup(s, req.seq, false, &is);
	if (ret)
		return ret;
	if (req.nr_tokens != KVMM_SEQ_ALL_TOKENS && req.nr_tokens > is->seq->ntokens)
		return -EINVAL;
	if (s->nr_seqs >= KVMM_SESSION_MAX_SEQS)
		return -ENOSPC;
	ret = kvmm_mm_seq_fork(is->seq, &seq);
	if (ret)
		return ret;
	if (req.nr_tokens != KVMM_SEQ_ALL_TOKENS)
		ret = kvmm_mm_seq_truncate(seq, req.nr_tokens);
	ret = track_new_seq(s, seq, ret, &id);
	if (ret)
		return ret;
	memset(rep, 0, sizeof(*rep));
	rep->seq = id;
	rep->nr_blocks = seq->nblocks;
	*rlen = sizeof(*rep);
	return 0;
}

int kvmm_session_op_seq_truncate(struct kvmm_session *s, unsigned int op __maybe_unused,
				 const void *p, void *rp __maybe_unused,
				 size_t *rlen __maybe_unused)
{
	struct kvmm_seq_truncate_req req;
	struct kvmm_ipc_seq *is;
	int ret;

	memcpy(&req, p, sizeof(req));
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	return kvmm_mm_seq_truncate(is->seq, req.nr_tokens);
}

int kvmm_session_op_seq_free(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			     void *rp __maybe_unused, size_t *rlen __maybe_unused)
{
	struct kvmm_seq_free_req req;
	struct kvmm_ipc_seq *is;
	int ret;

	memcpy(&req, p, sizeof(req));
	is = kvmm_session_seq_find(s, req.seq);
	/* a preempted sequence may always be freed (even pinned: its pins go with it) */
	if (is && is->preempted) {
		seq_untrack(s, is);
		return 0;
	}
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	seq_untrack(s, is);
	return 0;
}

int kvmm_session_op_prefix_lookup(struct kvmm_session *s, unsigned int op __maybe_unused,
				  const void *p, void *rp, size_t *rlen)
{
	struct kvmm_prefix_lookup_req req;
	struct kvmm_prefix_lookup_rep *rep = rp;
	const uint32_t *tokens = (const uint32_t *)((const uint8_t *)p + sizeof(req));
	struct kvmm_ipc_seq *is;
	uint32_t before;
	int ret;

	memcpy(&req, p, sizeof(req));
	if (req.flags)
		return -EINVAL;
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	before = is->seq->nblocks;
	/*
	 * An empty sequence starts a lookup; one holding whole sealed pages (what earlier
	 * lookups of a prompt too long for one record left) continues it with the ids that
	 * follow; anything else is -EINVAL.
	 */
	ret = kvmm_mm_prefix_lookup_reclaim(is->seq, tokens, req.nr_tokens);
	if (ret < 0)
		return ret;
	memset(rep, 0, sizeof(*rep));
	rep->nr_tokens = is->seq->ntokens;
	rep->nr_blocks = is->seq->nblocks - before;
	*rlen = sizeof(*rep);
	return 0;
}

int kvmm_session_op_seq_salt(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			     void *rp __maybe_unused, size_t *rlen __maybe_unused)
{
	struct kvmm_seq_salt_req req;
	struct kvmm_ipc_seq *is;
	int ret;

	memcpy(&req, p, sizeof(req));
	if (req.reserved)
		return -EINVAL;
	if (!(s->features & KVMM_FEAT_KEY_DOMAIN))
		return -EOPNOTSUPP;
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	return kvmm_mm_seq_set_salt(is->seq, (const uint8_t *)p + sizeof(req), req.len);
}

int kvmm_session_op_seal(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			 void *rp __maybe_unused, size_t *rlen __maybe_unused)
{
	struct kvmm_seal_req req;
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	uint32_t full, end, from;
	int ret;

	memcpy(&req, p, sizeof(req));
	ret = lookup(s, req.seq, true, &is);
	if (ret)
		return ret;
	seq = is->seq;
	full = (uint32_t)(seq->ntokens / s->as->fmt.tokens_per_page);
	if (req.nr_blocks == 0)
		end = full;
	else if (req.nr_blocks > full || req.block > full - req.nr_blocks)
		return -EINVAL; /* past the last full block */
	else
		end = req.block + req.nr_blocks;
	/* keys chain: nothing after an unsealed block can be sealed before it */
	if (req.block > seq->nsealed || req.block > full)
		return -EINVAL;
	/*
	 * Sealing reads the frames of the blocks it seals and of the sealed block before them
	 * (its key's parent): reclaim may have swapped any of them out since the append.
	 */
	ret = kvmm_mm_seq_seal_fault(seq, end);
	if (ret < 0)
		return ret;
	from = seq->nsealed;
	while (seq->nsealed < end) {
		ret = kvmm_pagecache_seal_block(seq, seq->nsealed);
		if (ret)
			break;
		seq->nsealed++;
	}
	/* remote_policy = seal: what entered the cache goes to the remote tier too */
	if (s->srv->remote)
		kvmm_ipc_remote_seal(s, seq, from);
	return ret;
}

/*
 * PIN/UNPIN a batch, all or nothing: resolve and check every id first (batch_mark counts a
 * sequence's occurrences so a repeated id is checked against its real depth), then apply.
 */
int kvmm_session_op_pin(struct kvmm_session *s, unsigned int op, const void *p, void *rp,
			size_t *rlen)
{
	struct kvmm_pin_req req;
	struct kvmm_pin_rep *rep = rp;
	struct kvmm_pool *pool = s->as->pool;
	const uint8_t *ids = (const uint8_t *)p + sizeof(req);
	struct kvmm_ipc_seq **v;
	uint32_t i, j, frames = 0, nr_swapin = 0;
	bool pin = op == KVMM_OP_PIN;
	int ret = 0;

	memcpy(&req, p, sizeof(req));
	if (req.flags)
		return -EINVAL;
	if (pin) {
		ret = pin_fault_in(s, ids, req.nr_seqs);
		if (ret < 0)
			return ret;
		nr_swapin = (uint32_t)ret;
		ret = 0;
	}
	v = calloc(req.nr_seqs ? req.nr_seqs : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < req.nr_seqs; i++) {
		uint64_t id;

		memcpy(&id, ids + (size_t)i * sizeof(id), sizeof(id));
		v[i] = kvmm_session_seq_find(s, id);
		if (!v[i]) {
			ret = -ENOENT;
			goto out_marks;
		}
		if (pin && v[i]->preempted) {
			ret = kvmm_ipc_seq_preempt_err(v[i]);
			goto out_marks;
		}
		if (!pin && v[i]->batch_mark >= v[i]->pin_depth) {
			ret = -EINVAL; /* more UNPINs than PINs */
			goto out_marks;
		}
		v[i]->batch_mark++;
		/* the first pin records the frames, which then cannot change until the last unpin */
		if (pin && !v[i]->pin_depth && !v[i]->pinned && v[i]->seq->nblocks) {
			struct kvmm_seq *seq = v[i]->seq;

			v[i]->pinned = kvmm_malloc((size_t)seq->nblocks * sizeof(uint32_t));
			if (!v[i]->pinned) {
				ret = -ENOMEM;
				goto out_marks;
			}
			for (j = 0; j < seq->nblocks; j++) {
				uint32_t f = kvmm_mm_seq_frame(seq, j);

				if (f != KVMM_FRAME_NONE)
					v[i]->pinned[v[i]->nr_pinned++] = f;
			}
		}
	}
	for (i = 0; i < req.nr_seqs; i++) {
		if (pin) {
			for (j = 0; j < v[i]->nr_pinned; j++) {
				struct kvmm_page *pg = kvmm_frame_to_page(pool, v[i]->pinned[j]);

				/* wanted by the step: a swap-out write in flight keeps it */
				kvmm_page_wb_touch(pg);
				pg->pincount++;
			}
			v[i]->pin_depth++;
			frames += v[i]->nr_pinned;
		} else {
			frames += v[i]->nr_pinned;
			pins_drop(pool, v[i], 1);
		}
	}
out_marks:
	for (i = 0; i < req.nr_seqs && v[i]; i++) {
		v[i]->batch_mark = 0;
		/* a failed PIN gives back the frame lists it made */
		if (ret && !v[i]->pin_depth && v[i]->pinned) {
			kvmm_free(v[i]->pinned);
			v[i]->pinned = NULL;
			v[i]->nr_pinned = 0;
		}
	}
	free(v);
	if (ret)
		return ret;
	rep->nr_frames = frames;
	rep->nr_swapin = nr_swapin;
	*rlen = sizeof(*rep);
	return 0;
}

/*
 * SEQ_PIN_RANGE's fault-in: the swapped blocks of [first, first + n) come back.  Room is made
 * first, in reclaim order, with the range's resident pages held by a temporary pin (the rest
 * of the sequence is fair game: that is the point of pinning a range); the sequence is marked
 * faulting meanwhile, so it is no OOM victim for its own fault.  Returns the pages brought
 * in or -errno, as pin_fault_in().
 */
static int range_fault_in(struct kvmm_session *s, struct kvmm_ipc_seq *is, uint32_t first,
			  uint32_t n)
{
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_seq *seq = is->seq;
	uint32_t b, need = 0;
	bool marked = false;
	int r;

	for (b = first; b < first + n; b++)
		if (kvmm_pte_is_swap(seq->pte[b]))
			need++;
	if (!need)
		return 0;
	if (!(seq->flags & KVMM_SEQ_F_FAULTING)) {
		seq->flags |= KVMM_SEQ_F_FAULTING;
		pool->nr_faulting++;
		marked = true;
	}
	if (kvmm_pool_nr_free(pool) < need + pool->wmark_min) {
		uint32_t want = need + pool->wmark_min - kvmm_pool_nr_free(pool), nr_held = 0;
		struct kvmm_page **held = kvmm_malloc((size_t)n * sizeof(*held));

		if (!held) {
			r = -ENOMEM;
			goto out;
		}
		for (b = first; b < first + n; b++)
			if (kvmm_pte_is_present(seq->pte[b])) {
				struct kvmm_page *pg =
					kvmm_frame_to_page(pool, kvmm_pte_frame(seq->pte[b]));

				pg->pincount++;
				held[nr_held++] = pg;
			}
		kvmm_shrink(pool, want, 0);
		while (nr_held)
			held[--nr_held]->pincount--;
		kvmm_free(held);
	}
	r = kvmm_mm_seq_fault(seq, first, n);
	if (r == -ENOMEM)
		kvmm_out_of_memory(pool);
	kvmm_trace_event(KVMM_TR_FAULT, pool, s->id, s->ns->ns->id, seq->id, KVMM_TRACE_NONE,
			 r < 0 ? 0 : (uint64_t)r);
	kvmm_dp_seq_update(s, is, 0);
out:
	if (marked) {
		seq->flags &= ~KVMM_SEQ_F_FAULTING;
		pool->nr_faulting--;
	}
	return r;
}

/*
 * SEQ_PIN_RANGE / SEQ_UNPIN_RANGE: pin blocks [block, block + nr_blocks) of one sequence
 * (faulting the swapped ones in, optionally starting the reads of the next range), or end
 * the latest pin of exactly that range.
 */
int kvmm_session_op_pin_range(struct kvmm_session *s, unsigned int op, const void *p, void *rp,
			      size_t *rlen)
{
	struct kvmm_pin_range_req req;
	struct kvmm_pin_rep *rep = rp;
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_range_pin *r, **pp;
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	uint32_t b, swapin = 0;
	int ret;

	memcpy(&req, p, sizeof(req));
	if (!(s->features & KVMM_FEAT_PIN_RANGE))
		return -EOPNOTSUPP;
	if (req.reserved || (req.flags & ~KVMM_PIN_RANGE_F_ALL) ||
	    (op == KVMM_OP_SEQ_UNPIN_RANGE && req.flags))
		return -EINVAL;
	is = kvmm_session_seq_find(s, req.seq);
	if (!is)
		return -ENOENT;
	seq = is->seq;
	if (op == KVMM_OP_SEQ_UNPIN_RANGE) {
		for (pp = &is->ranges; *pp; pp = &(*pp)->next)
			if ((*pp)->block == req.block && (*pp)->nr_blocks == req.nr_blocks)
				break;
		if (!*pp)
			return -EINVAL; /* no pin of that range */
		r = *pp;
		*pp = r->next;
		is->nr_ranges--;
		rep->nr_frames = range_pin_drop(pool, r);
		rep->nr_swapin = 0;
		*rlen = sizeof(*rep);
		return 0;
	}
	if (is->preempted)
		return -KVMM_EPREEMPTED;
	if (!req.nr_blocks || req.block > seq->nblocks || req.nr_blocks > seq->nblocks - req.block)
		return -EINVAL;
	ret = range_fault_in(s, is, req.block, req.nr_blocks);
	if (ret < 0)
		return ret;
	swapin = (uint32_t)ret;
	if (is->preempted) /* chosen while the fault made room */
		return -KVMM_EPREEMPTED;
	r = range_pin_alloc(req.block, req.nr_blocks);
	if (!r)
		return -ENOMEM;
	for (b = req.block; b < req.block + req.nr_blocks; b++) {
		uint32_t f = kvmm_mm_seq_frame(seq, b);

		if (f == KVMM_FRAME_NONE)
			continue;
		r->frames[r->nr_frames++] = f;
	}
	/* every block of the range must be resident now: a read that failed fails the pin */
	if (r->nr_frames != req.nr_blocks) {
		for (b = req.block; b < req.block + req.nr_blocks; b++)
			if (kvmm_pte_is_swap(seq->pte[b])) {
				kvmm_free(r);
				return -EIO;
			}
	}
	for (b = 0; b < r->nr_frames; b++) {
		struct kvmm_page *pg = kvmm_frame_to_page(pool, r->frames[b]);

		kvmm_page_wb_touch(pg); /* wanted by the step: a swap-out in flight keeps it */
		pg->pincount++;
	}
	r->next = is->ranges;
	is->ranges = r;
	is->nr_ranges++;
	/* the mirror shows the range's frames (a readahead may have mapped some unannounced) */
	kvmm_dp_seq_update(s, is, req.block);
	if ((req.flags & KVMM_PIN_RANGE_F_PREFETCH) && req.block + req.nr_blocks < seq->nblocks) {
		uint32_t next = req.block + req.nr_blocks;
		uint32_t n = min_t(uint32_t, req.nr_blocks, seq->nblocks - next);

		ret = kvmm_mm_seq_prefetch(seq, next, n);
		if (ret > 0)
			kvmm_dp_seq_update(s, is, 0);
	}
	rep->nr_frames = r->nr_frames;
	rep->nr_swapin = swapin;
	*rlen = sizeof(*rep);
	return 0;
}

/* ---- far reads ------------------------------------------------------------------------- */

/* Window page of the far tier's slot 0: the pool's chunks come first. */
static uint32_t far_base(const struct kvmm_session *s, const struct kvmm_swap_tier *t)
{
	return (uint32_t)(s->ns->chunk_size / t->page_size * s->ns->nr_chunks);
}

/* The session's namespace may be read far: a host pool whose chunks clients map. */
static int far_capable(const struct kvmm_session *s)
{
	if (!(s->features & KVMM_FEAT_FAR))
		return -EOPNOTSUPP;
	if (!s->ns->nr_chunks || !s->ns->fds || s->ns->nr_devices != 1 ||
	    !s->as->pool->be.ops->frame_addr)
		return -EOPNOTSUPP;
	return 0;
}

/*
 * FAR_MAP: the far window's parts, the pool's chunks and the host tier's arena, as
 * descriptors (uapi/kvmm.h).
 */
static int do_far_map(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_ipc_ns *n = s->ns;
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_far_map_rep rep;
	struct kvmm_swap_tier *t;
	struct kvmm_msg_hdr *out;
	int fds[KVMM_SERVER_MAX_CHUNKS];
	int ret = far_capable(s);

	if (ret)
		return ret;
	if (n->nr_chunks + 1 > KVMM_SERVER_MAX_CHUNKS)
		return -E2BIG;
	pthread_mutex_lock(&pool->lock);
	t = kvmm_swap_far_tier(pool);
	if (t && n->chunk_size % t->page_size)
		t = NULL;
	memset(&rep, 0, sizeof(rep));
	if (t) {
		rep.gen = t->gen;
		rep.nr_slots = t->nslots;
		rep.far_base = far_base(s, t);
		fds[n->nr_chunks] = t->ops->arena_fd(t);
		/* it reads the tier in place: its lookups leave the pages they find there */
		s->as->far_lookup = true;
	}
	pthread_mutex_unlock(&pool->lock);
	if (!t)
		return -ENODEV;
	if ((uint64_t)rep.far_base + rep.nr_slots > INT32_MAX)
		return -E2BIG; /* entries are int32_t */
	rep.chunk_size = n->chunk_size;
	rep.nr_chunks = n->nr_chunks;
	rep.nr_fds = n->nr_chunks + 1;
	memcpy(fds, n->fds, sizeof(int) * n->nr_chunks);
	out = (struct kvmm_msg_hdr *)s->srv->tx;
	kvmm_msg_hdr_init_reply(out, hdr, sizeof(*out) + sizeof(rep), 0);
	out->flags |= KVMM_MSG_F_FDS;
	memcpy(out + 1, &rep, sizeof(rep));
	kvmm_session_send(s, out, sizeof(*out) + sizeof(rep), fds, rep.nr_fds);
	return 0;
}

void kvmm_session_op_far_map(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	int ret = do_far_map(s, hdr);

	/* on success do_far_map() answered with the descriptors itself */
	if (ret)
		kvmm_session_reply(s, hdr, ret, NULL, 0);
}

/* May block @b of @seq be read in place on @t (sealed, swapped there, a sound slot)? */
static bool far_ok(struct kvmm_swap_tier *t, const struct kvmm_seq *seq, uint32_t b)
{
	return t && kvmm_swap_far_usable(t, seq->pte[b], b < seq->nsealed);
}

/*
 * SEQ_PIN_FAR: a range pin whose sealed pages on the far tier stay there, their slots pinned
 * in place; the reply names each block's page in the far window.
 */
int kvmm_session_op_pin_far(struct kvmm_session *s, unsigned int op __maybe_unused, const void *p,
			    void *rp, size_t *rlen)
{
	struct kvmm_pin_far_req req;
	struct kvmm_pin_far_rep *rep = rp;
	int32_t *out = (int32_t *)(rep + 1);
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_swap_tier *t = NULL;
	struct kvmm_range_pin *r;
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	uint32_t b, end, base = 0, swapin = 0, tries;
	int ret = far_capable(s);

	if (ret)
		return ret;
	memcpy(&req, p, sizeof(req));
	is = kvmm_session_seq_find(s, req.seq);
	if (!is)
		return -ENOENT;
	seq = is->seq;
	if (is->preempted)
		return -KVMM_EPREEMPTED;
	if (!req.nr_blocks || req.block > seq->nblocks || req.nr_blocks > seq->nblocks - req.block)
		return -EINVAL;
	if (req.nr_blocks > KVMM_PIN_FAR_MAX)
		return -E2BIG;
	if (req.gen) {
		t = kvmm_swap_tier_of_gen(pool, req.gen);
		if (!t || t != kvmm_swap_far_tier(pool))
			return -ESTALE; /* swapped off, or another tier reads far now: map again */
		base = far_base(s, t);
	}
	end = req.block + req.nr_blocks;
	/*
	 * Bring back what cannot be read in place (unsealed pages, other tiers), a run of such
	 * blocks at a time.  Making room may swap out blocks of the range already looked at:
	 * look again until none is left, a bounded number of times.
	 */
	for (tries = 0;; tries++) {
		uint32_t first = end, n = 0;

		for (b = req.block; b < end; b++) {
			if (!kvmm_pte_is_swap(seq->pte[b]) || far_ok(t, seq, b)) {
				if (first != end)
					break;
				continue;
			}
			if (first == end)
				first = b;
			n++;
		}
		if (first == end)
			break;
		if (tries > 2 * req.nr_blocks + 4)
			return -ENOMEM; /* the range keeps being swapped out as it comes back */
		ret = range_fault_in(s, is, first, n);
		if (ret < 0)
			return ret;
		swapin += (uint32_t)ret;
		if (is->preempted) /* chosen while the fault made room */
			return -KVMM_EPREEMPTED;
		/* a read that failed leaves its PTE a swap entry: that fails the pin */
		for (b = first; b < first + n; b++)
			if (kvmm_pte_is_swap(seq->pte[b]) && !far_ok(t, seq, b))
				return -EIO;
	}
	r = range_pin_alloc(req.block, req.nr_blocks);
	if (!r)
		return -ENOMEM;
	r->far = t;
	if (t) {
		r->slots = kvmm_malloc((size_t)req.nr_blocks * sizeof(*r->slots));
		if (!r->slots) {
			kvmm_free(r);
			return -ENOMEM;
		}
	}
	/* nothing below lets the lock go: every block is resident or far now */
	for (b = req.block; b < end; b++) {
		uint64_t pte = seq->pte[b], slot;

		if (kvmm_pte_is_present(pte)) {
			struct kvmm_page *pg = kvmm_frame_to_page(pool, kvmm_pte_frame(pte));

			kvmm_page_wb_touch(
				pg); /* wanted by the step: a swap-out in flight keeps it */
			pg->pincount++;
			r->frames[r->nr_frames++] = kvmm_pte_frame(pte);
			out[b - req.block] = (int32_t)kvmm_pte_frame(pte);
		} else if (t && kvmm_swap_far_pin(t, pte, b < seq->nsealed, &slot)) {
			r->slots[r->nr_far++] = slot;
			out[b - req.block] = (int32_t)(base + slot);
		} else if (!kvmm_pte_is_swap(pte)) {
			out[b - req.block] = KVMM_BLOCK_NONE; /* no page yet (as SEQ_BLOCKS says) */
		} else {
			range_pin_drop(pool, r); /* cannot happen: the loop above left none */
			return -EIO;
		}
	}
	r->next = is->ranges;
	is->ranges = r;
	is->nr_ranges++;
	if (swapin)
		kvmm_dp_seq_update(s, is, req.block);
	rep->nr_frames = r->nr_frames;
	rep->nr_far = r->nr_far;
	rep->nr_swapin = swapin;
	rep->count = req.nr_blocks;
	*rlen = sizeof(*rep) + (size_t)req.nr_blocks * sizeof(int32_t);
	return 0;
}

int kvmm_session_op_seq_blocks(struct kvmm_session *s, unsigned int op __maybe_unused,
			       const void *p, void *rp, size_t *rlen)
{
	struct kvmm_seq_blocks_req req;
	struct kvmm_seq_blocks_rep *rep = rp;
	int32_t *out = (int32_t *)(rep + 1);
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	uint32_t count, i;
	int ret;

	memcpy(&req, p, sizeof(req));
	ret = lookup(s, req.seq, false, &is);
	if (ret)
		return ret;
	seq = is->seq;
	if (req.block > seq->nblocks)
		return -EINVAL;
	count = seq->nblocks - req.block;
	if (req.nr_blocks && req.nr_blocks < count)
		count = req.nr_blocks;
	count = min_t(uint32_t, count, (uint32_t)KVMM_SEQ_BLOCKS_MAX);
	for (i = 0; i < count; i++)
		out[i] = kvmm_pte_block(seq->pte[req.block + i]);
	rep->nr_tokens = seq->ntokens;
	rep->nr_blocks = seq->nblocks;
	rep->count = count;
	*rlen = sizeof(*rep) + (size_t)count * sizeof(int32_t);
	return 0;
}

/*
 * SEQ_PROMPT: a request's start in one op (uapi/kvmm.h): a new sequence, the cached run of
 * the prompt's full pages mapped, the rest appended into frames the daemon picks.  On any
 * failure the sequence goes (track_new_seq frees it), so the client has nothing to undo.
 */
int kvmm_session_op_seq_prompt(struct kvmm_session *s, unsigned int op __maybe_unused,
			       const void *p, void *rp, size_t *rlen)
{
	struct kvmm_seq_prompt_req req;
	struct kvmm_seq_prompt_rep *rep = rp;
	const uint32_t *tokens = (const uint32_t *)((const uint8_t *)p + sizeof(req));
	struct kvmm_seq *seq;
	uint32_t hit_blocks = 0;
	uint64_t id;
	int ret, hit;

	memcpy(&req, p, sizeof(req));
	if (req.flags || req.reserved)
		return -EINVAL;
	/* as SEQ_CREATE */
	ret = new_seq_room(s, req.nr_tokens);
	if (ret)
		return ret;
	ret = kvmm_mm_seq_create(s->as, &seq);
	if (ret)
		return ret;
	seq->priority = req.priority;
	/* as PREFIX_LOOKUP: a prefix longer than the free frames is mapped whole, room made */
	hit = kvmm_mm_prefix_lookup_reclaim(seq, tokens, req.nr_tokens);
	if (hit < 0) {
		ret = hit;
	} else {
		hit_blocks = seq->nblocks;
		ret = kvmm_mm_seq_append(seq, req.nr_tokens - (uint32_t)hit, tokens + hit);
	}
	ret = track_new_seq(s, seq, ret, &id);
	if (ret)
		return ret;
	memset(rep, 0, sizeof(*rep));
	rep->seq = id;
	rep->nr_blocks = seq->nblocks;
	rep->nr_hit = hit_blocks;
	*rlen = sizeof(*rep);
	return 0;
}

/* SEQ_SEAL_FREE: a request's end in one op, SEAL then SEQ_FREE (the same leading seq id). */
int kvmm_session_op_seq_seal_free(struct kvmm_session *s, unsigned int op, const void *p, void *rp,
				  size_t *rlen)
{
	int ret = kvmm_session_op_seal(s, op, p, rp, rlen);

	if (ret)
		return ret;
	return kvmm_session_op_seq_free(s, op, p, rp, rlen);
}
