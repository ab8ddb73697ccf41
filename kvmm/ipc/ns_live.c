// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/ns_live.c - namespaces created, changed and deleted while kvmmd runs: the admin
 * verbs NS_CREATE, NS_SET and NS_DELETE (kvmmctl ns ...), and the reload of the config file's
 * [namespace] sections on SIGHUP (kvmm_server_ns_apply(), called by kvmmd.c).
 *
 * Namespaces stay physically partitioned (server.c): each has a pool of its own, so a client
 * only ever maps its own namespace's frames.  The pool_size is a budget the pools share
 * (kvmm/budget.c): a pool's size is only the most its namespace may ever hold, the pools may
 * together span more than the budget (overcommit), and the frames resident in all of them
 * never exceed it; the budget's reclaim honours each namespace's min and low (memcg's
 * protections) across the pools.  A new namespace is refused (-ENOSPC) only when its pool
 * alone is larger than the budget or the namespaces' mins would add up past it; a deleted
 * one's pool, memfds and swap tiers are destroyed.  A pool's size is fixed while it lives;
 * what changes at run time is a namespace's max (its hard limit, memcg's memory.max: a lower
 * one reclaims down to it, or is refused with -EBUSY), its min and low, its priority and who
 * may attach.
 *
 * Deleting a namespace that a client is attached to is refused with -EBUSY unless forced;
 * forced, each such client is sent a SHUTDOWN event (reason ADMIN), detached (its sequences
 * and frames freed) and its connection shut down, so that nothing of the pool outlives it.
 * The last namespace is never deleted (-EBUSY): HELLO reports the pools' common backend from
 * it.  Everything here runs on the server's thread, between the loop's events; the pool locks
 * are taken around what kvswapd may touch.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"

int kvmm_ipc_ns_config_check(const struct kvmm_ns_config *c)
{
	if (kvmm_name_check(c->name) || !c->nframes || c->limit > c->nframes ||
	    c->nr_uids > KVMM_NS_MAX_IDS || c->nr_gids > KVMM_NS_MAX_IDS)
		return -EINVAL;
	/* protections within the pool and the limit, low no lower than min */
	if (c->min > c->nframes || c->low > c->nframes || (c->low && c->min > c->low) ||
	    (c->limit && (c->min > c->limit || c->low > c->limit)))
		return -EINVAL;
	if (c->priority < -1000 || c->priority > 1000)
		return -EINVAL;
	return 0;
}

static struct kvmm_ipc_ns *ns_by_name(struct kvmm_server *srv, const char *name)
{
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++)
		if (!strncmp(srv->ns[i]->cfg.name, name, KVMM_NAME_LEN))
			return srv->ns[i];
	return NULL;
}

/* The lowest id no live namespace has (attach_rep.ns_id). */
static uint32_t free_id(const struct kvmm_server *srv)
{
	uint32_t id;
	unsigned int i;

	for (id = 1;; id++) {
		for (i = 0; i < srv->nr_ns && srv->ns[i]->id != id; i++)
			;
		if (i == srv->nr_ns)
			return id;
	}
}

/* Unlink and free @n, whose pool holds no client any more. */
static void ns_free(struct kvmm_server *srv, struct kvmm_ipc_ns *n)
{
	unsigned int i;

	for (i = 0; i < srv->nr_ns && srv->ns[i] != n; i++)
		;
	if (i < srv->nr_ns) {
		memmove(&srv->ns[i], &srv->ns[i + 1], (srv->nr_ns - i - 1) * sizeof(srv->ns[0]));
		srv->ns[--srv->nr_ns] = NULL;
	}
	/* kvswapd first (kvmm_pool_destroy stops it too, but the pool must not move under it) */
	if (n->pool)
		kvmm_kswapd_stop(n->pool);
	kvmm_pool_destroy(n->pool);
	free(n);
}

/* The mins of every namespace but @skip, plus @min: what the budget must guarantee. */
static uint64_t mins_with(const struct kvmm_server *srv, const struct kvmm_ipc_ns *skip,
			  uint32_t min)
{
	uint64_t sum = min;
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++)
		if (srv->ns[i] != skip)
			sum += srv->ns[i]->cfg.min;
	return sum;
}

int kvmm_server_ns_add(struct kvmm_server *srv, const struct kvmm_ns_config *c)
{
	uint64_t budget = srv ? srv->cfg.total_frames : 0;
	struct kvmm_ipc_ns *n;
	int ret;

	if (!srv || !c || kvmm_ipc_ns_config_check(c))
		return -EINVAL;
	if (ns_by_name(srv, c->name))
		return -EEXIST;
	if (srv->nr_ns >= KVMM_SERVER_MAX_NS) {
		kvmm_warn("ipc: namespace %.32s: %u namespaces exist already", c->name, srv->nr_ns);
		return -ENOSPC;
	}
	/* the pools may span more than the budget together (overcommit), but not one alone */
	if (c->nframes > budget) {
		kvmm_warn("ipc: namespace %.32s: %u frames asked, more than the budget's %llu",
			  c->name, c->nframes, (unsigned long long)budget);
		return -ENOSPC;
	}
	/* what min guarantees must exist */
	if (mins_with(srv, NULL, c->min) > budget) {
		kvmm_warn("ipc: namespace %.32s: the namespaces' min would add up to %llu frames, "
			  "more than the budget's %llu",
			  c->name, (unsigned long long)mins_with(srv, NULL, c->min),
			  (unsigned long long)budget);
		return -ENOSPC;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->cfg = *c;
	n->id = free_id(srv);
	srv->ns[srv->nr_ns++] = n;
	ret = kvmm_ipc_ns_open(srv, n);
	if (ret) {
		ns_free(srv, n);
		return ret;
	}
	kvmm_notice("ipc: namespace %s created: %u frames, max %u, min %u, low %u, priority %d",
		    n->cfg.name, n->cfg.nframes, n->cfg.limit, n->cfg.min, n->cfg.low,
		    n->cfg.priority);
	return 0;
}

/*
 * Apply @c's max, min, low and priority to @n's namespace (the caller checked @c).  A max
 * below what the namespace holds reclaims down to it, its own protections aside (memcg's
 * memory.max write): cached pages, its clients' idle magazine frames, sequences swapped out.
 * What is left mapped above the new max (pinned, or no swap tier to go to) is never preempted
 * for a resize: the old settings stay and -EBUSY says so.
 */
static int ns_set(struct kvmm_ipc_ns *n, const struct kvmm_ns_config *c)
{
	struct kvmm_ns *ns = n->ns;
	uint32_t limit = c->limit >= c->nframes ? 0 : c->limit;
	uint32_t old_limit = ns->limit, old_min = ns->min, old_low = ns->low;
	struct kvmm_pool *pool = n->pool;
	uint64_t charged;
	int ret;

	pthread_mutex_lock(&pool->lock);
	/* protections off first, so that neither check sees half of the new settings */
	ret = kvmm_ns_set_protection(ns, 0, 0);
	if (!ret)
		ret = kvmm_ns_set_limit(ns, limit);
	charged = (uint64_t)ns->used + ns->cached;
	if (!ret && limit && charged > limit) {
		struct kvmm_ns *prev = pool->reclaim_for;

		pool->reclaim_for = ns;
		kvmm_shrink(pool, (uint32_t)(charged - limit), 0);
		pool->reclaim_for = prev;
		charged = (uint64_t)ns->used + ns->cached;
		if (charged > limit) {
			kvmm_warn("ipc: namespace %s: max %u refused: it still holds %llu frames "
				  "after reclaim (mapped, pinned or nowhere to swap them)",
				  c->name, limit, (unsigned long long)charged);
			ns->limit = old_limit;
			ret = -EBUSY;
		}
	}
	if (!ret)
		ret = kvmm_ns_set_protection(ns, c->min, c->low);
	else
		kvmm_ns_set_protection(ns, old_min, old_low);
	if (!ret)
		ns->priority = c->priority;
	pthread_mutex_unlock(&pool->lock);
	return ret;
}

int kvmm_server_ns_update(struct kvmm_server *srv, const struct kvmm_ns_config *c)
{
	struct kvmm_ipc_ns *n;
	int ret;

	if (!srv || !c || kvmm_ipc_ns_config_check(c))
		return -EINVAL;
	n = ns_by_name(srv, c->name);
	if (!n)
		return -ENOENT;
	/* a pool's frames and a namespace's secret are fixed for its life */
	if (c->nframes != n->cfg.nframes || c->have_secret != n->cfg.have_secret ||
	    (c->have_secret && memcmp(c->secret, n->cfg.secret, sizeof(c->secret))))
		return -EINVAL;
	if (c->min > n->cfg.min && mins_with(srv, n, c->min) > srv->cfg.total_frames) {
		kvmm_warn("ipc: namespace %s: min %u refused: the namespaces' min would add up to "
			  "%llu frames, more than the budget's %llu",
			  c->name, c->min, (unsigned long long)mins_with(srv, n, c->min),
			  (unsigned long long)srv->cfg.total_frames);
		return -ENOSPC;
	}
	ret = ns_set(n, c);
	if (ret)
		return ret;
	n->cfg = *c;
	return 0;
}

/* Shut an attached client out of the namespace being deleted (force). */
static void evict_client(struct kvmm_session *s)
{
	struct {
		struct kvmm_msg_hdr hdr;
		struct kvmm_shutdown_event ev;
	} m;

	memset(&m, 0, sizeof(m));
	kvmm_msg_hdr_init(&m.hdr, KVMM_OP_SHUTDOWN, sizeof(m), 0);
	m.hdr.abi = s->abi;
	m.ev.reason = KVMM_SHUTDOWN_ADMIN;
	if (!kvmm_session_send(s, &m, sizeof(m), NULL, 0))
		KVMM_STAT_INC(s->srv, events);
	if (s->park)
		kvmm_ipc_remote_cancel(s);
	kvmm_session_detach(s);
	/*
	 * Closed by the loop when the hang-up comes back (not here: this may run inside another
	 * session's event, and the loop may still hold this one's in its batch).
	 */
	shutdown(s->fd, SHUT_RDWR);
	kvmm_session_set_dead(s);
	kvmm_notice("ipc: client %u shut out of its deleted namespace", s->id);
}

int kvmm_server_ns_delete(struct kvmm_server *srv, const char *name, bool force)
{
	struct kvmm_session *s, *tmp;
	struct kvmm_ipc_ns *n;

	if (!srv || !name || kvmm_name_check(name))
		return -EINVAL;
	n = ns_by_name(srv, name);
	if (!n)
		return -ENOENT;
	if (srv->nr_ns == 1)
		return -EBUSY;
	if (n->nr_clients && !force)
		return -EBUSY;
	list_for_each_entry_safe (s, tmp, &srv->sessions, node)
		if (s->ns == n)
			evict_client(s);
	if (KVMM_WARN_ON(n->nr_clients))
		return -EBUSY;
	kvmm_notice("ipc: namespace %s deleted (%u frames back to the pool)", n->cfg.name,
		    n->cfg.nframes);
	ns_free(srv, n);
	return 0;
}

static bool ns_config_equal(const struct kvmm_ns_config *a, const struct kvmm_ns_config *b)
{
	return a->nframes == b->nframes && a->limit == b->limit && a->min == b->min &&
	       a->low == b->low && a->priority == b->priority && a->nr_uids == b->nr_uids &&
	       a->nr_gids == b->nr_gids &&
	       !memcmp(a->uids, b->uids, a->nr_uids * sizeof(a->uids[0])) &&
	       !memcmp(a->gids, b->gids, a->nr_gids * sizeof(a->gids[0])) &&
	       a->have_secret == b->have_secret &&
	       (!a->have_secret || !memcmp(a->secret, b->secret, sizeof(a->secret)));
}

int kvmm_server_ns_apply(struct kvmm_server *srv, const struct kvmm_ns_config *ns,
			 unsigned int nr_ns)
{
	unsigned int i, j, failed = 0;
	int ret;

	/* deletions first: what they give back may be what a new namespace needs */
	for (i = 0; i < srv->nr_ns;) {
		struct kvmm_ipc_ns *n = srv->ns[i];

		for (j = 0; j < nr_ns && strncmp(ns[j].name, n->cfg.name, KVMM_NAME_LEN); j++)
			;
		if (j < nr_ns) {
			i++;
			continue;
		}
		ret = kvmm_server_ns_delete(srv, n->cfg.name, false);
		if (ret) {
			kvmm_warn("reload: namespace %s is no longer configured but stays: %s",
				  n->cfg.name,
				  ret == -EBUSY ? "clients are attached (kvmmctl ns delete --force)"
						: strerror(-ret));
			failed++;
			i++;
		}
	}
	for (j = 0; j < nr_ns; j++) {
		struct kvmm_ipc_ns *n = ns_by_name(srv, ns[j].name);

		if (n && ns_config_equal(&n->cfg, &ns[j]))
			continue;
		if (!n) {
			ret = kvmm_server_ns_add(srv, &ns[j]);
		} else if (n->cfg.nframes != ns[j].nframes) {
			kvmm_warn("reload: namespace %s: its pool has %u frames, %u configured: a "
				  "size changes only with a restart (or delete and create)",
				  n->cfg.name, n->cfg.nframes, ns[j].nframes);
			failed++;
			continue;
		} else if (n->cfg.have_secret != ns[j].have_secret ||
			   (n->cfg.have_secret &&
			    memcmp(n->cfg.secret, ns[j].secret, sizeof(ns[j].secret)))) {
			kvmm_warn("reload: namespace %s: its secret_file changed: a secret changes "
				  "only with a restart (or delete and create)",
				  n->cfg.name);
			failed++;
			continue;
		} else {
			ret = kvmm_server_ns_update(srv, &ns[j]);
			if (!ret)
				kvmm_notice("reload: namespace %s changed", ns[j].name);
		}
		if (ret) {
			kvmm_warn("reload: namespace %.32s: %s", ns[j].name, strerror(-ret));
			failed++;
		}
	}
	return (int)failed;
}

/* ---- the admin verbs -------------------------------------------------------------------- */

/* The request's settings over @base (a new namespace's defaults, or its current ones). */
static int ns_req_config(const struct kvmm_ns_req *req, struct kvmm_ns_config *c)
{
	if (req->valid & KVMM_NS_SET_MAX) {
		if (req->max_frames != KVMM_LIMIT_NONE &&
		    (!req->max_frames || req->max_frames > UINT32_MAX))
			return -EINVAL;
		c->limit = req->max_frames == KVMM_LIMIT_NONE ? 0 : (uint32_t)req->max_frames;
	}
	if (req->valid & KVMM_NS_SET_MIN) {
		if (req->min_frames > UINT32_MAX)
			return -EINVAL;
		c->min = (uint32_t)req->min_frames;
	}
	if (req->valid & KVMM_NS_SET_LOW) {
		if (req->low_frames > UINT32_MAX)
			return -EINVAL;
		c->low = (uint32_t)req->low_frames;
	}
	if (req->valid & KVMM_NS_SET_PRIORITY)
		c->priority = req->priority;
	if (c->limit >= c->nframes)
		c->limit = 0; /* a max of the whole pool or more limits nothing */
	return kvmm_ipc_ns_config_check(c);
}

static int do_ns_create(struct kvmm_session *s, const struct kvmm_ns_req *req)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_ns_config c;
	int ret;

	if (req->valid & ~KVMM_NS_SET_ALL)
		return -EINVAL;
	memset(&c, 0, sizeof(c));
	memcpy(c.name, req->ns, sizeof(c.name));
	/*
	 * Its pool: the frames asked, else the whole budget, so that its max (which it must then
	 * give) can later be raised as far as the budget at run time.
	 */
	if (req->valid & KVMM_NS_SET_FRAMES)
		c.nframes = req->frames > UINT32_MAX ? 0 : (uint32_t)req->frames;
	else if ((req->valid & KVMM_NS_SET_MAX) && req->max_frames != KVMM_LIMIT_NONE)
		c.nframes = (uint32_t)min_t(uint64_t, srv->cfg.total_frames, KVMM_MAX_FRAMES);
	if (!c.nframes || c.nframes > KVMM_MAX_FRAMES)
		return -EINVAL;
	ret = ns_req_config(req, &c);
	if (ret)
		return ret;
	/* like a [namespace] that names nobody: the daemon's own user and root */
	c.uids[c.nr_uids++] = srv->owner_uid;
	if (srv->owner_uid != 0)
		c.uids[c.nr_uids++] = 0;
	ret = kvmm_server_ns_add(srv, &c);
	if (!ret)
		kvmm_notice("ipc: client %u created namespace %s", s->id, c.name);
	return ret;
}

static int do_ns_set(struct kvmm_session *s, const struct kvmm_ns_req *req)
{
	struct kvmm_ipc_ns *n;
	struct kvmm_ns_config c;
	int ret;

	/* a pool's size is fixed while it lives */
	if (!req->valid || (req->valid & ~(KVMM_NS_SET_ALL & ~KVMM_NS_SET_FRAMES)))
		return -EINVAL;
	n = ns_by_name(s->srv, req->ns);
	if (!n)
		return -ENOENT;
	c = n->cfg;
	ret = ns_req_config(req, &c);
	if (!ret)
		ret = kvmm_server_ns_update(s->srv, &c);
	if (!ret)
		kvmm_notice("ipc: client %u set namespace %s: max %u, min %u, low %u, priority %d",
			    s->id, c.name, c.limit, c.min, c.low, c.priority);
	return ret;
}

void kvmm_admin_ns(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_ns_req req;
	int ret;

	memcpy(&req, hdr + 1, sizeof(req));
	if (!memchr(req.ns, '\0', sizeof(req.ns)) || kvmm_name_check(req.ns) || req.reserved) {
		ret = -EINVAL;
	} else if (kvmm_op_base(hdr->op) == KVMM_OP_NS_CREATE) {
		ret = req.flags ? -EINVAL : do_ns_create(s, &req);
	} else if (kvmm_op_base(hdr->op) == KVMM_OP_NS_SET) {
		ret = req.flags ? -EINVAL : do_ns_set(s, &req);
	} else {
		ret = req.valid || (req.flags & ~KVMM_NS_F_FORCE)
			      ? -EINVAL
			      : kvmm_server_ns_delete(s->srv, req.ns, req.flags & KVMM_NS_F_FORCE);
		if (!ret)
			kvmm_notice("ipc: client %u deleted namespace %s", s->id, req.ns);
	}
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}
