// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/remote_ipc.c - kvmmd's side of the remote tier (kvmm/remote.h): which namespaces
 * share, the lookups that wait for the cluster without stopping the loop, the pages stored
 * when they are sealed.
 *
 * Who shares.  A namespace shares through the remote tier when its secret was provisioned
 * (secret_file): its content keys are then the same on every machine that has the secret.  A
 * namespace with a random secret never reads or writes the tier (its keys are its own).
 *
 * Lookups, asynchronously.  A PREFIX_LOOKUP or SEQ_PROMPT first runs locally as always.
 * When it stopped short of the prompt's last full block, the remote part - every following
 * full block, up to max_blocks - is sent to the worker with each block's content key and
 * prefix digest, and the request is *parked*: no answer yet.  From the socket, the session's
 * socket is taken out of the loop's read set (its next request waits in the socket, so
 * replies stay in order); from the ring, the SQE is consumed but its CQE not written and the
 * SQEs after it wait in the SQ (ring.c: CQE i answers SQE i).  Everything else - other
 * clients, admin verbs - goes on.  The worker's completion comes back through an eventfd in
 * the loop's epoll set: the verified pages are appended to the sequence (fresh frames, the
 * bytes copied in) and sealed - which enters them in the page cache, or maps the cached copy
 * if another client sealed the block meanwhile - then the request is answered as if the pages
 * had been local (a SEQ_PROMPT's rest, taken back when it parked, appended after them), and
 * the socket or ring is read again.  A client that goes away while parked cancels its lookup.
 *
 * Stores.  With remote_policy = seal, every block a SEAL newly enters in the page cache of a
 * sharing namespace is queued for the worker (the frame copied, the page marked so that it is
 * never queued twice); pages brought from the tier are marked too.  Only frames the host can
 * address (host backend) take part.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "log.h"
#include "kvmm/config.h"
#include "kvmm/swap.h"
#include "kvmm/ipc/admin_emit.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/remote.h"

struct kvmm_ipc_park {
	unsigned int op;	 /* PREFIX_LOOKUP or SEQ_PROMPT */
	bool ring;		 /* answered by a CQE (kvmm_dp_park_done), else on the socket */
	struct kvmm_msg_hdr hdr; /* socket: the request, for the reply */
	uint64_t user_data;	 /* ring: the SQE's */
	uint64_t seq_id;
	uint32_t before;   /* the sequence's blocks before the lookup (SEQ_PROMPT: 0) */
	uint32_t first;	   /* ... when the remote part was sent: its first block */
	uint32_t n;	   /* blocks asked for */
	uint32_t ntokens;  /* tokens[]: the remote part's n * tokens_per_page, then (SEQ_PROMPT) */
	uint32_t tokens[]; /* the rest of the prompt, appended after what came back */
};

static bool ns_shares(const struct kvmm_session *s)
{
	return s->srv->remote && s->ns && s->ns->cfg.have_secret &&
	       kvmm_pool_frame_addr(s->ns->pool, 0) != NULL;
}

int kvmm_ipc_remote_setup(struct kvmm_server *srv)
{
	unsigned int i;
	int ret;

	for (i = 0; i < srv->nr_ns; i++) {
		struct kvmm_ipc_ns *n = srv->ns[i];

		/* its secret_file was applied when the pool was made (server.c) */
		if (!n->cfg.have_secret)
			continue;
		if (srv->cfg.remote.enabled && !kvmm_pool_frame_addr(n->pool, 0))
			kvmm_warn("remote: namespace %s: frames the host cannot address (cuda "
				  "backend) do not use the remote tier",
				  n->cfg.name);
	}
	if (!srv->cfg.remote.enabled)
		return 0;
	ret = kvmm_remote_create(&srv->cfg.remote.cfg, &srv->remote);
	if (ret) {
		kvmm_err("remote: %s: %s", srv->cfg.remote.cfg.redis.seeds, strerror(-ret));
		return ret;
	}
	/* the demote hook (swapd.c's hooks) finds the tier through the pool, under its lock */
	for (i = 0; i < srv->nr_ns; i++) {
		pthread_mutex_lock(&srv->ns[i]->pool->lock);
		srv->ns[i]->pool->hooks_priv = srv;
		pthread_mutex_unlock(&srv->ns[i]->pool->lock);
	}
	kvmm_info("remote: tier on %s (policy %s, timeout %u ms)", srv->cfg.remote.cfg.redis.seeds,
		  kvmm_config_remote_policy(srv->cfg.remote.cfg.policy),
		  srv->cfg.remote.cfg.redis.timeout_ms);
	return 0;
}

void kvmm_ipc_remote_destroy(struct kvmm_server *srv)
{
	for (unsigned int i = 0; srv->remote && i < srv->nr_ns; i++) {
		pthread_mutex_lock(&srv->ns[i]->pool->lock);
		srv->ns[i]->pool->hooks_priv = NULL;
		pthread_mutex_unlock(&srv->ns[i]->pool->lock);
	}
	kvmm_remote_destroy(srv->remote);
	srv->remote = NULL;
}

static void digest_blk(void *arg, const uint32_t *tokens, uint32_t n)
{
	kvmm_remote_digest_update(arg, tokens, n);
}

bool kvmm_ipc_remote_demotes(const struct kvmm_server *srv)
{
	return srv->remote && (kvmm_remote_cfg(srv->remote)->policy & KVMM_REMOTE_POLICY_DEMOTE);
}

bool kvmm_ipc_remote_demote(struct kvmm_pool *pool, const struct kvmm_cache_ent *ent,
			    const void *bytes)
{
	struct kvmm_server *srv = pool->hooks_priv;
	const struct kvmm_remote_config *rc;
	struct kvmm_remote_digest *d;
	struct kvmm_cache_desc desc;
	struct kvmm_remote_meta m;
	struct kvmm_ns *ns;
	uint16_t ns_id;
	bool ok;

	if (!srv || !srv->remote)
		return false;
	rc = kvmm_remote_cfg(srv->remote);
	if (!(rc->policy & KVMM_REMOTE_POLICY_DEMOTE) || pool->page_size > rc->max_value ||
	    !kvmm_pool_frame_addr(pool, 0))
		return false;
	ns_id = kvmm_pagecache_ent_ns(ent);
	ns = ns_id < KVMM_MAX_NS ? pool->ns[ns_id] : NULL;
	/* only namespaces whose keys every machine computes alike (a provisioned secret) */
	if (!ns || !ns->secret_set)
		return false;
	/* the cluster has it already (stored when sealed, or brought from there) */
	if (kvmm_pagecache_ent_remote(ent))
		return true;
	if (!bytes)
		return true;
	d = malloc(sizeof(*d));
	if (!d)
		return false;
	/* the key domain the page was sealed under, then its whole prefix's tokens */
	kvmm_pagecache_ent_desc(ent, &desc);
	kvmm_remote_digest_init(d, ns->secret, ns->hash_seed, desc.fmt_id);
	ok = !kvmm_pagecache_ent_prefix(ent, digest_blk, d);
	if (ok) {
		kvmm_remote_digest_get(d, m.digest);
		m.fmt_id = desc.fmt_id;
		m.payload_len = pool->page_size;
		m.ntokens = desc.ntokens;
		m.depth = desc.depth;
		ok = !kvmm_remote_store(srv->remote, desc.key, &m, bytes);
		if (ok)
			kvmm_remote_note_demoted(srv->remote);
	}
	free(d);
	return ok;
}

/* Stop (or resume) reading the session's socket; a hang-up is still seen. */
static void session_pause(struct kvmm_session *s, bool pause)
{
	struct epoll_event ev = {.events = pause ? EPOLLRDHUP : EPOLLIN | EPOLLRDHUP,
				 .data.ptr = s};

	if (epoll_ctl(s->srv->epoll_fd, EPOLL_CTL_MOD, s->fd, &ev))
		kvmm_warn_ratelimited("ipc: client %u: epoll_ctl: %m", s->id);
}

/*
 * Expected identity of blocks [first, first + n) of @seq continued by @tokens: content key
 * (chained from the sequence's block first - 1, sealed) and prefix digest.  Pool lock held.
 */
static int fill_blocks(struct kvmm_session *s, struct kvmm_seq *seq, uint32_t first,
		       const uint32_t *tokens, struct kvmm_remote_req *req)
{
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_ns *ns = s->as->ns;
	uint32_t tpp = s->as->fmt.tokens_per_page;
	uint64_t parent = 0, key_id = kvmm_seq_key_id(seq);
	struct kvmm_remote_digest *d;

	if (first && kvmm_pagecache_seq_key(seq, first - 1, &parent))
		return -ENOENT;
	d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	/* the key domain of the sequence's pages: its salt's (kvmm_seal_salt), else the aspace's */
	kvmm_remote_digest_init(d, ns->secret, ns->hash_seed, key_id);
	kvmm_remote_digest_update(d, seq->tokens, (size_t)first * tpp);
	for (uint32_t i = 0; i < req->n; i++) {
		const uint32_t *t = tokens + (size_t)i * tpp;
		struct kvmm_remote_blk *b = &req->blk[i];

		b->key = kvmm_cache_key(ns, parent, key_id, t, tpp);
		kvmm_remote_digest_update(d, t, tpp);
		kvmm_remote_digest_get(d, b->want.digest);
		b->want.fmt_id = key_id;
		b->want.payload_len = pool->page_size;
		b->want.ntokens = tpp;
		b->want.depth = first + i;
		parent = b->key;
	}
	free(d);
	return 0;
}

/*
 * Park @op (pool lock held): set up the remote part of the prompt whose local answer is in
 * @rp, queue it, and say so (true: no answer now).  The remote part is every full block the
 * local lookup did not map, up to max_blocks; a SEQ_PROMPT's appended tail is taken back
 * first (its frames are given again, after what the tier brings, when it completes).
 */
bool kvmm_ipc_remote_park(struct kvmm_session *s, unsigned int op, const void *p, const void *rp,
			  const struct kvmm_msg_hdr *hdr, uint64_t user_data)
{
	const struct kvmm_remote_config *rc;
	const uint32_t *tokens;
	struct kvmm_pool *pool;
	struct kvmm_remote_req *rr = NULL;
	struct kvmm_ipc_park *park = NULL;
	struct kvmm_ipc_seq *is;
	uint32_t tpp, n, nr_tokens, done, keep;
	uint64_t seq_id;

	if (!s->srv->remote || !ns_shares(s) || s->park)
		return false;
	rc = kvmm_remote_cfg(s->srv->remote);
	pool = s->as->pool;
	tpp = s->as->fmt.tokens_per_page;
	if (pool->page_size > rc->max_value)
		return false;
	if (op == KVMM_OP_PREFIX_LOOKUP) {
		struct kvmm_prefix_lookup_req req;
		struct kvmm_prefix_lookup_rep rep;

		memcpy(&req, p, sizeof(req));
		memcpy(&rep, rp, sizeof(rep));
		tokens = (const uint32_t *)((const uint8_t *)p + sizeof(req));
		seq_id = req.seq;
		nr_tokens = req.nr_tokens;
		done = rep.nr_blocks; /* mapped by this lookup */
	} else if (op == KVMM_OP_SEQ_PROMPT) {
		struct kvmm_seq_prompt_req req;
		struct kvmm_seq_prompt_rep rep;

		memcpy(&req, p, sizeof(req));
		memcpy(&rep, rp, sizeof(rep));
		tokens = (const uint32_t *)((const uint8_t *)p + sizeof(req));
		seq_id = rep.seq;
		nr_tokens = req.nr_tokens;
		done = rep.nr_hit;
	} else {
		return false;
	}
	/* the full blocks the local lookup did not map */
	if ((uint64_t)done * tpp >= nr_tokens)
		return false;
	n = (uint32_t)min_t(uint64_t, (nr_tokens - (uint64_t)done * tpp) / tpp, rc->max_blocks);
	if (!n)
		return false;
	tokens += (size_t)done * tpp;
	/* a lookup keeps the remote part's ids; a prompt all of its rest */
	keep = op == KVMM_OP_SEQ_PROMPT ? nr_tokens - done * tpp : n * tpp;

	is = kvmm_session_seq_find(s, seq_id);
	if (!is || is->preempted || is->seq->nblocks > UINT32_MAX - n)
		return false;
	if (op == KVMM_OP_SEQ_PROMPT && (is->seq->nsealed != done || is->seq->nblocks < done))
		return false;
	rr = kvmm_remote_req_alloc(n);
	park = malloc(sizeof(*park) + (size_t)keep * sizeof(*tokens));
	if (!rr || !park)
		goto out_free;
	/* a prompt's local hit is its first done blocks; a lookup's ends the sequence */
	if (fill_blocks(s, is->seq, op == KVMM_OP_SEQ_PROMPT ? done : is->seq->nblocks, tokens, rr))
		goto out_free;
	/* the tail appended after a prompt's local hit goes; appended again at the end */
	if (op == KVMM_OP_SEQ_PROMPT && kvmm_mm_seq_truncate(is->seq, (uint64_t)done * tpp))
		goto out_free;
	memset(park, 0, sizeof(*park));
	park->op = op;
	park->ring = !hdr;
	if (hdr)
		park->hdr = *hdr;
	park->user_data = user_data;
	park->seq_id = seq_id;
	park->first = is->seq->nblocks;
	park->before = park->first - done;
	park->n = n;
	park->ntokens = keep;
	memcpy(park->tokens, tokens, (size_t)keep * sizeof(*tokens));

	rr->owner = s;
	/* atomic: the main loop's session_read() looks at it without the pool lock */
	__atomic_store_n(&s->park, park, __ATOMIC_RELEASE);
	/* the socket waits with its next request; the ring stops at this SQE (ring.c) */
	if (!park->ring)
		session_pause(s, true);
	kvmm_remote_lookup(s->srv->remote, rr);
	return true;

out_free:
	kvmm_remote_req_free(rr);
	free(park);
	return false;
}

/*
 * Map the verified pages of @rr after @seq's last block: append their tokens (fresh frames),
 * copy each frame in, seal them.  Pool lock held.  Returns the blocks mapped.
 */
static uint32_t install(struct kvmm_session *s, struct kvmm_seq *seq, struct kvmm_ipc_park *park,
			struct kvmm_remote_req *rr)
{
	struct kvmm_pool *pool = s->as->pool;
	uint32_t tpp = s->as->fmt.tokens_per_page, k = rr->found, i;
	int ret;

	if (!k)
		return 0;
	ret = kvmm_mm_seq_append(seq, k * tpp, park->tokens);
	if (ret) {
		kvmm_notice_ratelimited("remote: no frames for %u fetched pages: %s", k,
					strerror(-ret));
		return 0;
	}
	for (i = 0; i < k; i++) {
		uint32_t frame = kvmm_mm_seq_frame(seq, park->first + i);
		void *dst = frame == KVMM_FRAME_NONE ? NULL : kvmm_pool_frame_addr(pool, frame);

		if (!dst)
			break;
		memcpy(dst, (const uint8_t *)rr->blk[i].val + KVMM_REMOTE_HDR_LEN, pool->page_size);
	}
	if (i == k)
		ret = kvmm_mm_seq_seal(seq);
	if (i < k || ret < 0) {
		/* give the frames back: the client sees no remote hit rather than a bad page */
		kvmm_mm_seq_truncate(seq, (uint64_t)park->first * tpp);
		return 0;
	}
	for (i = 0; i < k; i++)
		kvmm_pagecache_remote_mark(seq, park->first + i);
	return k;
}

/*
 * A SEQ_PROMPT after the tier answered: the rest of the prompt appended after the @k blocks
 * that came back, as the op would have without the tier; when that finds no frames, without
 * them; when that fails too the sequence goes (SEQ_PROMPT leaves nothing to undo).  Pool lock
 * held.  0 or -errno.
 */
static int prompt_rest(struct kvmm_session *s, struct kvmm_ipc_seq *is, struct kvmm_ipc_park *park,
		       uint32_t k)
{
	uint32_t tpp = s->as->fmt.tokens_per_page;
	struct kvmm_seq_free_req fr = {.seq = park->seq_id};
	size_t rlen = 0;
	int ret;

	ret = kvmm_mm_seq_append(is->seq, park->ntokens - k * tpp, park->tokens + (size_t)k * tpp);
	if (ret && k) {
		kvmm_mm_seq_truncate(is->seq, (uint64_t)park->first * tpp);
		ret = kvmm_mm_seq_append(is->seq, park->ntokens, park->tokens);
	}
	if (ret)
		kvmm_session_op_seq_free(s, KVMM_OP_SEQ_FREE, &fr, NULL, &rlen);
	return ret;
}

static void finish(struct kvmm_session *s, struct kvmm_ipc_park *park, struct kvmm_remote_req *rr)
{
	union {
		struct kvmm_prefix_lookup_rep lookup;
		struct kvmm_seq_prompt_rep prompt;
	} rep;
	struct kvmm_pool *pool = s->as->pool;
	uint32_t tpp = s->as->fmt.tokens_per_page, k = 0;
	struct kvmm_ipc_seq *is;
	struct kvmm_seq *seq;
	size_t rlen = 0;
	int status = 0;

	memset(&rep, 0, sizeof(rep));
	pthread_mutex_lock(&pool->lock);
	is = kvmm_session_seq_find(s, park->seq_id);
	if (!is) {
		/* freed meanwhile (through the socket or the ring) */
		status = -ENOENT;
		goto out_unlock;
	}
	seq = is->seq;
	/* unchanged since the lookup (the other transport could have touched it): add pages */
	if (!is->preempted && seq->nblocks == park->first && seq->nsealed == park->first &&
	    seq->ntokens == (uint64_t)park->first * tpp)
		k = install(s, seq, park, rr);
	if (park->op == KVMM_OP_SEQ_PROMPT) {
		if (!is->preempted && seq->ntokens == (uint64_t)(park->first + k) * tpp) {
			status = prompt_rest(s, is, park, k);
		} else {
			/* chosen by the OOM killer meanwhile (or touched by a guessed id) */
			struct kvmm_seq_free_req fr = {.seq = park->seq_id};

			status = is->preempted ? -ENOMEM : -EBUSY;
			kvmm_session_op_seq_free(s, KVMM_OP_SEQ_FREE, &fr, NULL, &rlen);
		}
		if (!status) {
			kvmm_dp_seq_update(s, is, 0);
			rep.prompt.seq = park->seq_id;
			rep.prompt.nr_blocks = is->seq->nblocks;
			rep.prompt.nr_hit = park->first + k;
			rlen = sizeof(rep.prompt);
		}
	} else {
		if (k)
			kvmm_dp_seq_update(s, is, park->first);
		rep.lookup.nr_tokens = seq->ntokens;
		rep.lookup.nr_blocks =
			seq->nblocks >= park->before ? seq->nblocks - park->before : 0;
		rlen = sizeof(rep.lookup);
	}
out_unlock:
	__atomic_store_n(&s->park, NULL, __ATOMIC_RELEASE);
	if (park->ring) {
		/* its CQE, and the SQEs after it run again (ring.c) */
		kvmm_dp_park_done(s, park->user_data, park->op, status, &rep, status ? 0 : rlen);
		pthread_mutex_unlock(&pool->lock);
	} else {
		pthread_mutex_unlock(&pool->lock);
		kvmm_session_reply(s, &park->hdr, status, &rep, status ? 0 : rlen);
		session_pause(s, false);
	}
	free(park);
}

void kvmm_ipc_remote_event(struct kvmm_server *srv)
{
	struct kvmm_remote_req *rr;

	while ((rr = kvmm_remote_complete(srv->remote))) {
		struct kvmm_session *s = rr->owner;

		if (s && s->park)
			finish(s, s->park, rr);
		kvmm_remote_req_free(rr);
	}
}

void kvmm_ipc_remote_cancel(struct kvmm_session *s)
{
	if (!s->park)
		return;
	kvmm_remote_cancel(s->srv->remote, s);
	if (!s->park->ring)
		session_pause(s, false);
	free(s->park);
	__atomic_store_n(&s->park, NULL, __ATOMIC_RELEASE);
}

void kvmm_ipc_remote_seal(struct kvmm_session *s, struct kvmm_seq *seq, uint32_t from)
{
	struct kvmm_pool *pool = s->as->pool;
	struct kvmm_ns *ns = s->as->ns;
	uint32_t tpp = s->as->fmt.tokens_per_page, b;
	struct kvmm_remote_digest *d;

	if (!ns_shares(s) || from >= seq->nsealed ||
	    !(kvmm_remote_cfg(s->srv->remote)->policy & KVMM_REMOTE_POLICY_SEAL))
		return;
	d = malloc(sizeof(*d));
	if (!d)
		return;
	kvmm_remote_digest_init(d, ns->secret, ns->hash_seed, kvmm_seq_key_id(seq));
	kvmm_remote_digest_update(d, seq->tokens, (size_t)from * tpp);
	for (b = from; b < seq->nsealed; b++) {
		struct kvmm_remote_meta m;
		uint32_t frame = kvmm_mm_seq_frame(seq, b);
		uint64_t key;

		kvmm_remote_digest_update(d, seq->tokens + (size_t)b * tpp, tpp);
		if (frame == KVMM_FRAME_NONE || kvmm_pagecache_seq_key(seq, b, &key))
			continue;
		if (!kvmm_pagecache_remote_mark(seq, b))
			continue; /* stored already (or brought from the tier) */
		kvmm_remote_digest_get(d, m.digest);
		m.fmt_id = kvmm_seq_key_id(seq);
		m.payload_len = pool->page_size;
		m.ntokens = tpp;
		m.depth = b;
		kvmm_remote_store(s->srv->remote, key, &m, kvmm_pool_frame_addr(pool, frame));
	}
	free(d);
}

/* REMOTE: tagged text (or JSON) of the tier's counters; "Remote: 0" when none is configured */
int kvmm_admin_remote(struct kvmm_server *srv, struct kvmm_ipc_ns *one __maybe_unused,
		      const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	struct kvmm_remote_stats st;
	unsigned int i, shared = 0;
	char name[32];

	kvmm_out_u64(o, "Remote", srv->remote ? 1 : 0, NULL);
	if (!srv->remote)
		return 0;
	for (i = 0; i < srv->nr_ns; i++)
		shared += srv->ns[i]->cfg.have_secret;
	kvmm_remote_get_stats(srv->remote, &st);
	kvmm_out_str(o, "Seeds", srv->cfg.remote.cfg.redis.seeds);
	kvmm_out_str(o, "Policy", kvmm_config_remote_policy(srv->cfg.remote.cfg.policy));
	kvmm_out_u64(o, "SharedNamespaces", shared, NULL);
	kvmm_out_u64(o, "Cluster", st.redis.cluster, NULL);
	kvmm_out_u64(o, "Nodes", st.redis.nodes, NULL);
	kvmm_out_u64(o, "NodesUp", st.redis.nodes_up, NULL);
	kvmm_out_u64(o, "Lookups", st.lookups, NULL);
	kvmm_out_u64(o, "LookupBlocks", st.lookup_blocks, NULL);
	kvmm_out_u64(o, "Hits", st.hits, NULL);
	kvmm_out_u64(o, "Misses", st.misses, NULL);
	kvmm_out_u64(o, "Errors", st.errors, NULL);
	kvmm_out_u64(o, "Corrupt", st.corrupt, NULL);
	kvmm_out_u64(o, "Mismatch", st.mismatch, NULL);
	kvmm_out_u64(o, "Cancelled", st.cancelled, NULL);
	kvmm_out_u64(o, "BytesIn", st.bytes_in, "B");
	kvmm_out_u64(o, "BytesOut", st.bytes_out, "B");
	kvmm_out_u64(o, "Stores", st.stores, NULL);
	kvmm_out_u64(o, "StoreErrors", st.store_errors, NULL);
	kvmm_out_u64(o, "StoreDropped", st.store_dropped, NULL);
	kvmm_out_u64(o, "Demoted", st.demoted, NULL);
	kvmm_out_u64(o, "StoreQueued", st.queued_bytes, "B");
	kvmm_out_u64(o, "Moved", st.redis.moved, NULL);
	kvmm_out_u64(o, "Ask", st.redis.ask, NULL);
	kvmm_out_u64(o, "Connects", st.redis.connects, NULL);
	kvmm_out_u64(o, "ConnectFailures", st.redis.conn_fail, NULL);
	kvmm_out_u64(o, "IoErrors", st.redis.io_errors, NULL);
	kvmm_out_u64(o, "SlotRefresh", st.redis.slot_refresh, NULL);
	kvmm_out_u64(o, "LatencyAvg", st.lookups ? st.lat_sum_us / st.lookups : 0, "us");
	kvmm_out_u64(o, "LatencyMax", st.lat_max_us, "us");
	for (i = 0; i <= KVMM_REMOTE_LAT_BUCKETS; i++) {
		if (i < KVMM_REMOTE_LAT_BUCKETS)
			snprintf(name, sizeof(name), "LatencyLe%uus", kvmm_remote_lat_bounds_us[i]);
		else
			snprintf(name, sizeof(name), "LatencyLeInf");
		kvmm_out_u64(o, name, st.lat_bucket[i], NULL);
	}
	return 0;
}
