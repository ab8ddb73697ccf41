/* SPDX-License-Identifier: MIT */
/*
 * kvmm/ipc/obs.h - kvmmd's observability side, shared by admin.c (the read verbs),
 * admin_trace.c (TRACE subscriptions), snapshot.c, metrics.c (the trace ring's lifetime, the trace pump timer and the
 * Prometheus /metrics listener) and server.c (one registration: the obs epoll fd sits in the
 * server's epoll set, so the observability fds never touch the data plane's dispatch).
 * Every number kvmmctl, /metrics and `kvmmctl top` show is collected by the snapshot helpers
 * below, so text, JSON and Prometheus cannot disagree.
 */
#ifndef KVMM_IPC_OBS_H
#define KVMM_IPC_OBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmm/mm.h"

#include "list.h"

struct kvmm_server;
struct kvmm_ipc_ns;
struct kvmm_trace;
struct kvmm_server_stats;

struct kvmm_obs {
	struct kvmm_trace *trace; /* installed as kvmm_trace_ring while the server lives */
	uint64_t trace_floor;	  /* TRACE with CLEAR: later dumps start after this record */
	uint64_t trace_sent;	  /* records pushed to subscribers */
	uint64_t trace_lost;	  /* overwritten before a subscriber got them */
	uint64_t trace_dropped;	  /* did not fit a subscriber's socket */
	uint32_t trace_subscribers;
	/*
	 * Run on each tick while there are subscribers (admin_trace.c's kvmm_admin_trace_pump(),
	 * given at create): a pointer, so this file's loop never calls up into the admin verbs
	 * that use it.  Returns whether any subscriber remains.
	 */
	bool (*trace_pump)(struct kvmm_server *srv);

	int epfd;	   /* the obs epoll set, itself polled by the server */
	int timerfd;	   /* trace pump tick while there are subscribers */
	bool ticking;	   /* timerfd armed */
	int listen_fd;	   /* /metrics, -1 when off */
	unsigned int port; /* bound port */
	struct list_head conns;
	unsigned int nr_conns;
	uint64_t scrapes;     /* GET /metrics answered */
	uint64_t http_errors; /* 400 / 404 / 405 / 413 answers */
};

/* One namespace's numbers, taken under its pool lock. */
struct kvmm_obs_ns {
	char name[KVMM_NAME_LEN];
	uint32_t id;
	uint64_t frames, free, magazine, mapped, cached, used, limit, peak;
	uint64_t min, low; /* protections (ns.c); limit, min, low: 0 = none */
	uint64_t active, inactive, pagecache, shared, pinned;
	uint64_t wmark_min, wmark_low, wmark_high;
	uint64_t clients, chunks;
	/* the daemon-wide budget (kvmm/budget.c): frames it charges this pool, reclaim, events */
	uint64_t resident, budget_reclaimed, low_events;
	int priority;
	uint64_t stat[KVMM_STAT_COUNT];
};

/* The daemon-wide frame budget's numbers (snapshot.c, under the budget's lock). */
struct kvmm_obs_budget {
	uint64_t limit, used, span, pools;
	bool overcommit;
	uint64_t reclaims, reclaimed, nr_short, nr_oom, low_events;
	uint64_t bg_runs, bg_reclaimed; /* background reclaim (kvswapd: kvmm_budget_balance) */
};

void kvmm_obs_budget_snapshot(struct kvmm_server *srv, struct kvmm_obs_budget *out);
/* snapshot.c: the numbers of @n, under its pool lock. */
void kvmm_obs_ns_snapshot(struct kvmm_ipc_ns *n, struct kvmm_obs_ns *out);
/* snapshot.c: the server's counters (kvmm_server_get_stats() of server.h is this). */
void kvmm_obs_server_stats(struct kvmm_server *srv, struct kvmm_server_stats *st);

/* ---- metrics.c ----------------------------------------------------------------------- */

/*
 * Create the trace ring (installed as kvmm_trace_ring), the obs epoll set, the listener;
 * @trace_pump runs on the pump timer's ticks.
 */
int kvmm_obs_create(struct kvmm_server *srv, bool (*trace_pump)(struct kvmm_server *srv));
/* The fd the server polls for EPOLLIN; readiness means: call kvmm_obs_event(). */
int kvmm_obs_fd(const struct kvmm_obs *obs);
void kvmm_obs_event(struct kvmm_server *srv);
void kvmm_obs_destroy(struct kvmm_server *srv);
/* A TRACE subscription started: make sure the pump timer runs. */
void kvmm_obs_trace_wake(struct kvmm_server *srv);
/* The trace ring of this server (NULL when off). */
struct kvmm_trace *kvmm_obs_trace(const struct kvmm_server *srv);
/*
 * Tracepoints write into this server's ring (@on) or nowhere: always on with trace_mode
 * ALWAYS, while a follower is subscribed with FOLLOW (admin_trace.c).
 */
void kvmm_obs_trace_arm(struct kvmm_server *srv, bool on);
/* The bound metrics port (0 when off), for tests and the log. */
unsigned int kvmm_obs_metrics_port(const struct kvmm_server *srv);
/* Render the Prometheus text exposition into a malloc'd buffer; 0 or -ENOMEM. */
int kvmm_obs_metrics_text(struct kvmm_server *srv, char **buf, size_t *len);

/* ---- admin_trace.c ------------------------------------------------------------------- */

/* Push pending trace records to every subscriber; true while any subscriber remains. */
bool kvmm_admin_trace_pump(struct kvmm_server *srv);

#endif /* KVMM_IPC_OBS_H */
