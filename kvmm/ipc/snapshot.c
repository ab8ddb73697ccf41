// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/snapshot.c - the numbers every view shows, taken here: one namespace's, at once
 * under its pool lock (struct kvmm_obs_ns, obs.h), and the server's counters, each loaded
 * atomically (they are bumped with relaxed atomics).  The admin read verbs, Prometheus
 * /metrics and `kvmmctl top` all read them from here, so text, JSON and Prometheus cannot
 * disagree.
 */
#include <pthread.h>
#include <string.h>

#include "compiler.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"

void kvmm_obs_server_stats(struct kvmm_server *srv, struct kvmm_server_stats *st)
{
	const uint64_t *src = (const uint64_t *)&srv->stats;
	uint64_t *dst = (uint64_t *)st;
	size_t i;

	BUILD_BUG_ON(sizeof(*st) % sizeof(uint64_t));
	for (i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

void kvmm_obs_budget_snapshot(struct kvmm_server *srv, struct kvmm_obs_budget *out)
{
	struct kvmm_budget *b = &srv->budget;

	memset(out, 0, sizeof(*out));
	if (!srv->budget_init)
		return;
	pthread_mutex_lock(&b->lock);
	out->limit = b->limit;
	out->used = kvmm_budget_used(b);
	out->span = b->span;
	out->pools = b->nr_pools;
	out->overcommit = b->discard;
	out->reclaims = b->nr_reclaim;
	out->reclaimed = b->reclaimed;
	out->nr_short = b->nr_short;
	out->nr_oom = b->nr_oom;
	out->low_events = b->low_events;
	out->bg_runs = b->nr_background;
	out->bg_reclaimed = b->bg_reclaimed;
	pthread_mutex_unlock(&b->lock);
}

void kvmm_obs_ns_snapshot(struct kvmm_ipc_ns *n, struct kvmm_obs_ns *out)
{
	struct kvmm_pool *pool = n->pool;
	uint32_t i;

	memset(out, 0, sizeof(*out));
	memcpy(out->name, n->cfg.name, sizeof(out->name));
	out->id = n->id;
	out->clients = n->nr_clients;
	out->chunks = n->nr_chunks;
	pthread_mutex_lock(&pool->lock);
	out->frames = pool->nframes;
	out->free = pool->nr_free;
	out->magazine = pool->nr_state[KVMM_PAGE_MAGAZINE];
	out->mapped = pool->nr_state[KVMM_PAGE_MAPPED];
	out->cached = pool->nr_state[KVMM_PAGE_CACHED];
	out->used = n->ns->used;
	out->peak = n->ns->peak;
	out->limit = n->ns->limit; /* 0: none (never the pool's size, which is not a limit) */
	out->min = n->ns->min;
	out->low = n->ns->low;
	out->priority = n->ns->priority;
	out->resident = pool->budget_charged;
	out->budget_reclaimed = n->ns->budget_reclaimed;
	out->low_events = n->ns->low_events;
	out->active = pool->lru.nr_active;
	out->inactive = pool->lru.nr_inactive;
	out->pagecache = kvmm_pagecache_count(pool);
	out->wmark_min = pool->wmark_min;
	out->wmark_low = pool->wmark_low;
	out->wmark_high = pool->wmark_high;
	/* how much is shared: frames mapped by more than one sequence, and pinned frames */
	for (i = 0; i < pool->nframes; i++) {
		const struct kvmm_page *pg = &pool->pages[i];

		if (pg->state != KVMM_PAGE_MAPPED)
			continue;
		if (pg->refcount > 1)
			out->shared++;
		if (pg->pincount)
			out->pinned++;
	}
	memcpy(out->stat, pool->stat, sizeof(out->stat));
	pthread_mutex_unlock(&pool->lock);
}
