// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/swapd.c - the daemon's side of swap and reclaim: the tiers, fault points and
 * kvswapd of each namespace pool (from the [swap] config), the admin verbs SWAPON, SWAPOFF
 * and FAULT_INJECT, and OOM preemption.
 *
 * The core reports to the daemon through the pool's hooks (kvmm/mm.h struct kvmm_mm_hooks),
 * which run with the pool lock held, from the loop's thread or from kvswapd's:
 *   - seq_changed: reclaim swapped out a client's sequence; its page-table mirror in shared
 *     memory is rewritten at once (kvmm_dp_seq_update), so a client never reads a frame
 *     that has been taken away.  The mirror is only ever written under the pool lock.
 *   - oom: the victim is only marked (struct kvmm_ipc_seq.preempted) and the server flagged;
 *     the hook may run inside a core call on the very sequence chosen, and on kvswapd's
 *     thread, so nothing is freed or sent there.  The loop then calls
 *     kvmm_swapd_preempt_run(): each victim that is not pinned is truncated to nothing (its
 *     frames and swap slots go back at once, its KV is gone) and its client gets a PREEMPT
 *     event on the socket, which libkvmm turns into a completion with KVMM_CQE_F_EVENT on
 *     its completion queue.  A pinned victim is left to its client, who is told the same.
 *     From then on every op on the victim but SEQ_FREE fails with -KVMM_EPREEMPTED.
 * The allocation that ran out still fails with -ENOMEM; the client retries after freeing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "compiler.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

#define HOST_TIER 1
#define FILE_TIER 2
#define HOST_PRIO 10
#define FILE_PRIO_DEFAULT 5

static void hook_seq_changed(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t from)
{
	struct kvmm_ipc_seq *is = seq->priv;

	(void)pool;
	if (is && is->sess)
		kvmm_dp_seq_update(is->sess, is, from);
}

static void mark_preempted(struct kvmm_seq *seq, uint32_t nr_frames, uint32_t reason)
{
	struct kvmm_ipc_seq *is = seq->priv;

	if (!is || !is->sess || is->preempted)
		return;
	is->preempted = true;
	is->preempt_frames = nr_frames;
	is->preempt_reason = reason;
	is->sess->preempt_pending = true;
	__atomic_store_n(&is->sess->srv->preempt_pending, 1, __ATOMIC_RELEASE);
}

static void hook_oom(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t nr_frames)
{
	(void)pool;
	mark_preempted(seq, nr_frames, KVMM_PREEMPT_OOM);
}

/* a swapped page of @seq failed its checksum: dropped, and said so (not as an OOM) */
static void hook_lost(struct kvmm_pool *pool, struct kvmm_seq *seq, uint32_t nr_frames)
{
	(void)pool;
	mark_preempted(seq, nr_frames, KVMM_PREEMPT_CORRUPT);
}

static const struct kvmm_mm_hooks swapd_hooks = {
	.seq_changed = hook_seq_changed,
	.oom = hook_oom,
	.lost = hook_lost,
	.demote = kvmm_ipc_remote_demote, /* remote_ipc.c: remote_policy = demote */
};

/* The file of a file tier: PATH, or PATH.NS when every namespace pool needs its own. */
static int tier_path(struct kvmm_server *srv, struct kvmm_ipc_ns *n, const char *path, char *buf,
		     size_t len)
{
	int w = srv->nr_ns > 1 ? snprintf(buf, len, "%s.%s", path, n->cfg.name)
			       : snprintf(buf, len, "%s", path);

	return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static int add_tier(struct kvmm_server *srv, struct kvmm_ipc_ns *n, unsigned int tier, int prio,
		    uint64_t size, const char *path, uint32_t qd)
{
	struct kvmm_swap_tier_params p = {.tier = tier, .priority = prio, .queue_depth = qd};
	char file[KVMM_PATH_LEN];
	int ret;

	p.size = size / kvmm_frame_bytes(n->pool) * kvmm_frame_bytes(n->pool);
	if (path && path[0]) {
		ret = tier_path(srv, n, path, file, sizeof(file));
		if (ret)
			return ret;
		p.path = file;
		/* warm restart: the file indexes the namespace's sealed pages (swap_index.c) */
		if (!srv->cfg.swap.no_index)
			p.index_ns = n->ns;
	}
	pthread_mutex_lock(&n->pool->lock);
	ret = kvmm_swapon(n->pool, p.path ? &kvmm_swap_nvme_ops : &kvmm_swap_host_ops, &p);
	pthread_mutex_unlock(&n->pool->lock);
	if (ret)
		kvmm_err("swap: namespace %s: tier %u (%s, %" PRIu64 " bytes): %s", n->cfg.name,
			 tier, p.path ? p.path : "host", p.size, strerror(-ret));
	else
		kvmm_info("swap: namespace %s: tier %u on (%s, %" PRIu64 " bytes, priority %d)",
			  n->cfg.name, tier, p.path ? p.path : "host", p.size, prio);
	return ret;
}

int kvmm_swapd_setup(struct kvmm_server *srv, struct kvmm_ipc_ns *n)
{
	const struct kvmm_server_swap *c = &srv->cfg.swap;
	unsigned int i;
	int ret;

	pthread_mutex_lock(&n->pool->lock);
	n->pool->hooks = &swapd_hooks;
	/* a namespace made at run time (ns_live.c) finds the remote tier too (remote_ipc.c) */
	if (srv->remote)
		n->pool->hooks_priv = srv;
	/* the remote tier takes evicted pages only with remote_policy demote or both */
	n->pool->reclaim_inline = c->reclaim_inline && !kvmm_ipc_remote_demotes(srv);
	pthread_mutex_unlock(&n->pool->lock);
	if (c->host_size) {
		ret = add_tier(srv, n, HOST_TIER, HOST_PRIO, c->host_size, NULL, 0);
		if (ret)
			return ret;
	}
	if (c->file[0]) {
		ret = add_tier(srv, n, FILE_TIER, c->file_prio ? c->file_prio : FILE_PRIO_DEFAULT,
			       c->file_size, c->file, c->queue_depth);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&n->pool->lock);
	ret = 0;
	if (n->pool->swap || c->prefetch_set)
		ret = kvmm_swap_set_readahead(n->pool,
					      c->prefetch_set ? c->prefetch : KVMM_SWAP_RA_DEFAULT);
	for (i = 0; !ret && i < c->nr_fault; i++) {
		ret = kvmm_swap_fault_parse(n->pool, c->fault[i]);
		if (ret)
			kvmm_err("swap: fault point \"%s\": %s", c->fault[i], strerror(-ret));
	}
	pthread_mutex_unlock(&n->pool->lock);
	if (ret)
		return ret;
	if (!c->no_kswapd) {
		ret = kvmm_kswapd_start(n->pool);
		if (ret)
			kvmm_err("swap: namespace %s: kvswapd: %s", n->cfg.name, strerror(-ret));
	}
	return ret;
}

int kvmm_swapd_swapon(struct kvmm_server *srv, struct kvmm_ipc_ns *n,
		      const struct kvmm_swapon_req *req)
{
	if (!req->tier || req->tier > KVMM_SWAP_TIER_MAX || !req->size ||
	    strnlen(req->path, sizeof(req->path)) == sizeof(req->path))
		return -EINVAL;
	return add_tier(srv, n, req->tier, req->priority, req->size, req->path, 0);
}

void kvmm_swapd_mirror_all(struct kvmm_server *srv, struct kvmm_ipc_ns *n)
{
	struct kvmm_session *s;

	list_for_each_entry (s, &srv->sessions, node) {
		struct kvmm_ipc_seq *is;
		size_t bkt;

		if (s->ns != n || !s->dp)
			continue;
		kvmm_htable_for_each (&s->seqs, bkt, is, node)
			kvmm_dp_seq_update(s, is, 0);
	}
}

int kvmm_swapd_swapoff(struct kvmm_server *srv, struct kvmm_ipc_ns *n, unsigned int tier)
{
	int ret;

	pthread_mutex_lock(&n->pool->lock);
	/* kvswapd's copies in flight would make it -EBUSY: wait for them (the loop's own call) */
	kvmm_swap_writeback_wait(n->pool, true);
	ret = kvmm_swapoff(n->pool, tier);
	/* pages came back into frames: every mirrored table may have changed */
	kvmm_swapd_mirror_all(srv, n);
	pthread_mutex_unlock(&n->pool->lock);
	if (!ret)
		kvmm_info("swap: namespace %s: tier %u off", n->cfg.name, tier);
	return ret;
}

/* One session's victims, pool lock held: free the unpinned, send every event once. */
static void preempt_session(struct kvmm_session *s)
{
	struct kvmm_ipc_seq *is;
	size_t bkt;

	kvmm_htable_for_each (&s->seqs, bkt, is, node) {
		struct {
			struct kvmm_msg_hdr hdr;
			struct kvmm_preempt_event ev;
		} m;

		if (!is->preempted || is->preempt_sent)
			continue;
		is->preempt_sent = true;
		if (!is->pin_depth && !is->nr_ranges && !kvmm_mm_seq_truncate(is->seq, 0))
			kvmm_dp_seq_update(s, is, 0);
		kvmm_msg_hdr_init(&m.hdr, KVMM_OP_PREEMPT, sizeof(m), 0);
		m.hdr.abi = s->abi;
		m.ev.seq = is->id;
		m.ev.nr_frames = is->preempt_frames;
		m.ev.reason = is->preempt_reason ? is->preempt_reason : KVMM_PREEMPT_OOM;
		if (!kvmm_session_send(s, &m, sizeof(m), NULL, 0))
			KVMM_STAT_INC(s->srv, events);
		if (m.ev.reason == KVMM_PREEMPT_CORRUPT)
			kvmm_warn_ratelimited("swap: namespace %s: client %u sequence %" PRIu64
					      " dropped: a swapped page failed its checksum "
					      "(%u frames)",
					      s->ns->cfg.name, s->id, is->id, is->preempt_frames);
		else
			kvmm_notice_ratelimited("oom: namespace %s: client %u sequence %" PRIu64
						" preempted (%u frames)",
						s->ns->cfg.name, s->id, is->id, is->preempt_frames);
	}
}

void kvmm_swapd_preempt_run(struct kvmm_server *srv)
{
	struct kvmm_session *s;

	if (!__atomic_exchange_n(&srv->preempt_pending, 0, __ATOMIC_ACQ_REL))
		return;
	list_for_each_entry (s, &srv->sessions, node)
		kvmm_swapd_preempt_session(s);
}

void kvmm_swapd_preempt_session(struct kvmm_session *s)
{
	struct kvmm_pool *pool;

	if (s->state != KVMM_SESSION_ATTACHED || kvmm_session_dead(s))
		return;
	pool = s->as->pool;
	pthread_mutex_lock(&pool->lock);
	if (s->preempt_pending) {
		s->preempt_pending = false;
		preempt_session(s);
	}
	pthread_mutex_unlock(&pool->lock);
}
