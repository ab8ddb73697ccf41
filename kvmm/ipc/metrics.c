// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/metrics.c - kvmmd's observability plumbing: the trace ring's lifetime (installed
 * as kvmm_trace_ring while the server lives), the timer that drives the TRACE subscribers'
 * pump (admin_trace.c, called through the pointer given at create, so this file never calls
 * up into the admin verbs), and a tiny HTTP/1.0 responder serving the Prometheus text
 * exposition on GET /metrics.  These fds live in their own epoll set whose fd sits in the
 * server's epoll set (one registration in server.c), so nothing here touches the session
 * dispatch.
 *
 * The responder never blocks the daemon: the listener and every connection are
 * non-blocking, a request is read up to METRICS_REQ_MAX bytes (more: 413 and close), the
 * answer is written as far as the socket takes it and the rest on EPOLLOUT, at most
 * METRICS_MAX_CONNS connections are open (the oldest is closed for a new one), and each
 * connection serves one request (HTTP/1.0, Connection: close).  It is meant for a loopback
 * address: there is no authentication.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "kmalloc.h"
#include "log.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/trace.h"

#define METRICS_REQ_MAX 4096
#define METRICS_MAX_CONNS 16
#define TRACE_TICK_NS (50 * 1000 * 1000) /* subscribers see events within 50 ms */

struct metrics_conn {
	struct list_head node; /* in obs->conns, oldest first */
	int fd;
	size_t rlen;
	char req[METRICS_REQ_MAX + 1];
	char *out; /* the answer, being written */
	size_t olen, ooff;
};

static char tag_timer, tag_listen; /* epoll tags of the two fixed fds */

struct kvmm_trace *kvmm_obs_trace(const struct kvmm_server *srv)
{
	return srv->obs ? srv->obs->trace : NULL;
}

void kvmm_obs_trace_arm(struct kvmm_server *srv, bool on)
{
	struct kvmm_trace *mine = srv->obs ? srv->obs->trace : NULL, *expect;

	if (!mine)
		return;
	/*
	 * The first server of the process owns the global ring (kvmmd has one).  A writer that
	 * read the pointer just before it is taken away finishes its record in the ring, which
	 * stays until the server goes: harmless.
	 */
	expect = on ? NULL : mine;
	__atomic_compare_exchange_n(&kvmm_trace_ring, &expect, on ? mine : NULL, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int kvmm_obs_fd(const struct kvmm_obs *obs)
{
	return obs->epfd;
}

unsigned int kvmm_obs_metrics_port(const struct kvmm_server *srv)
{
	return srv->obs ? srv->obs->port : 0;
}

static int obs_add(struct kvmm_obs *obs, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};

	return epoll_ctl(obs->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

/* "127.0.0.1:9477" */
static int parse_addr(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	char *end;
	unsigned long port;

	if (!colon || (size_t)(colon - s) >= sizeof(host) || colon == s)
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port > 65535)
		return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	return 0;
}

static int open_listener(struct kvmm_obs *obs, const char *addr)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int one = 1, ret;

	ret = parse_addr(addr, &sa);
	if (ret) {
		kvmm_err("metrics: bad address '%s' (want IPV4:PORT)", addr);
		return ret;
	}
	if ((ntohl(sa.sin_addr.s_addr) >> 24) != 127)
		kvmm_warn("metrics: %s is not a loopback address; /metrics has no access control",
			  addr);
	obs->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (obs->listen_fd < 0)
		return -errno;
	setsockopt(obs->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(obs->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(obs->listen_fd, 16) ||
	    getsockname(obs->listen_fd, (struct sockaddr *)&sa, &len)) {
		ret = -errno;
		kvmm_err("metrics: %s: %s", addr, strerror(errno));
		return ret;
	}
	obs->port = ntohs(sa.sin_port);
	kvmm_info("metrics: serving /metrics on %s (port %u)", addr, obs->port);
	return obs_add(obs, obs->listen_fd, EPOLLIN, &tag_listen);
}

int kvmm_obs_create(struct kvmm_server *srv, bool (*trace_pump)(struct kvmm_server *srv))
{
	struct kvmm_obs *obs;
	int ret;

	obs = calloc(1, sizeof(*obs));
	if (!obs)
		return -ENOMEM;
	srv->obs = obs;
	obs->trace_pump = trace_pump;
	INIT_LIST_HEAD(&obs->conns);
	obs->listen_fd = -1;
	obs->epfd = epoll_create1(EPOLL_CLOEXEC);
	obs->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (obs->epfd < 0 || obs->timerfd < 0)
		return -errno;
	ret = obs_add(obs, obs->timerfd, EPOLLIN, &tag_timer);
	if (ret)
		return ret;
	if (srv->cfg.trace_mode != KVMM_SERVER_TRACE_OFF) {
		obs->trace = kvmm_trace_create(srv->cfg.trace_entries ? srv->cfg.trace_entries
								      : KVMM_SERVER_DEFAULT_TRACE);
		if (!obs->trace)
			return -errno;
	}
	/* a flight recorder records from the start; follow mode from the first follower on */
	if (srv->cfg.trace_mode == KVMM_SERVER_TRACE_ALWAYS)
		kvmm_obs_trace_arm(srv, true);
	if (srv->cfg.metrics_addr && srv->cfg.metrics_addr[0])
		return open_listener(obs, srv->cfg.metrics_addr);
	return 0;
}

static void conn_close(struct kvmm_obs *obs, struct metrics_conn *c)
{
	epoll_ctl(obs->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	list_del(&c->node);
	obs->nr_conns--;
	free(c->out);
	free(c);
}

void kvmm_obs_destroy(struct kvmm_server *srv)
{
	struct kvmm_obs *obs = srv->obs;
	struct metrics_conn *c, *tmp;

	if (!obs)
		return;
	list_for_each_entry_safe (c, tmp, &obs->conns, node)
		conn_close(obs, c);
	if (obs->listen_fd >= 0)
		close(obs->listen_fd);
	if (obs->timerfd >= 0)
		close(obs->timerfd);
	if (obs->epfd >= 0)
		close(obs->epfd);
	if (obs->trace) {
		struct kvmm_trace *mine = obs->trace;

		/* tracepoints stop before the ring goes */
		__atomic_compare_exchange_n(&kvmm_trace_ring, &mine, NULL, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
		kvmm_trace_destroy(obs->trace);
	}
	free(obs);
	srv->obs = NULL;
}

static void set_tick(struct kvmm_obs *obs, bool on)
{
	struct itimerspec its = {0};

	if (obs->ticking == on)
		return;
	if (on) {
		its.it_value.tv_nsec = TRACE_TICK_NS;
		its.it_interval.tv_nsec = TRACE_TICK_NS;
	}
	timerfd_settime(obs->timerfd, 0, &its, NULL);
	obs->ticking = on;
}

void kvmm_obs_trace_wake(struct kvmm_server *srv)
{
	if (srv->obs)
		set_tick(srv->obs, true);
}

/* ---- Prometheus text exposition ---------------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
};

static __printf(2, 3) void bprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		/* the first call has no buffer yet: NULL + 0 is undefined, ask with NULL */
		n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t cap = b->cap * 2 + (size_t)n + 1;
			char *p = realloc(b->p, cap);

			if (!p) {
				b->oom = true;
				return;
			}
			b->p = p;
			b->cap = cap;
		}
	}
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prometheus names of the vmstat counters: kvmm_<name>_total, a few renamed for clarity. */
static const char *stat_metric(unsigned int i, char *buf, size_t len)
{
	switch (i) {
	case KVMM_STAT_CACHE_HIT:
		return "kvmm_prefix_cache_hits_total";
	case KVMM_STAT_CACHE_MISS:
		return "kvmm_prefix_cache_misses_total";
	case KVMM_STAT_ALLOC:
		return "kvmm_page_allocs_total";
	case KVMM_STAT_FREE:
		return "kvmm_page_frees_total";
	case KVMM_STAT_ALLOC_FAIL:
		return "kvmm_page_alloc_failures_total";
	default:
		snprintf(buf, len, "kvmm_%s_total", kvmm_stat_name(i));
		return buf;
	}
}

/* The daemon-wide budget's numbers (struct kvmm_obs_budget, one sample each). */
struct budget_metric {
	const char *name, *help;
	size_t off; /* of a uint64_t in struct kvmm_obs_budget */
	bool counter;
};
#define BUDGET_METRIC(n, field, c, h)                            \
	{                                                        \
		n, h, offsetof(struct kvmm_obs_budget, field), c \
	}
static const struct budget_metric budget_metrics[] = {
	BUDGET_METRIC("kvmm_budget_frames", limit, false,
		      "The daemon-wide frame budget (pool_size) the namespaces share."),
	BUDGET_METRIC("kvmm_budget_used_frames", used, false, "Frames charged to the budget."),
	BUDGET_METRIC("kvmm_budget_span_frames", span, false,
		      "The namespaces' pool sizes together (above the budget: overcommitted)."),
	BUDGET_METRIC("kvmm_budget_reclaims_total", reclaims, true,
		      "Allocations that found the budget spent and reclaimed across namespaces."),
	BUDGET_METRIC("kvmm_budget_reclaimed_frames_total", reclaimed, true,
		      "Frames the budget's reclaim freed."),
	BUDGET_METRIC("kvmm_budget_short_total", nr_short, true,
		      "Budget reclaims that could not free what was wanted."),
	BUDGET_METRIC("kvmm_budget_preempted_total", nr_oom, true,
		      "Sequences preempted for a namespace under its min."),
	BUDGET_METRIC("kvmm_budget_low_events_total", low_events, true,
		      "Namespaces taken below their low by the budget's reclaim."),
	BUDGET_METRIC("kvmm_budget_background_runs_total", bg_runs, true,
		      "Background reclaims (kvswapd) of the budget under its low point."),
	BUDGET_METRIC("kvmm_budget_background_frames_total", bg_reclaimed, true,
		      "Frames background reclaim freed for the budget."),
};
#undef BUDGET_METRIC

int kvmm_obs_metrics_text(struct kvmm_server *srv, char **out, size_t *outlen)
{
	struct kvmm_obs_ns *snap;
	struct kvmm_server_stats st;
	struct kvmm_kmalloc_stats km;
	struct buf b = {0};
	unsigned int i, k;
	static const char *const states[] = {"free", "magazine", "mapped", "cached"};

	snap = calloc(srv->nr_ns, sizeof(*snap));
	if (!snap)
		return -ENOMEM;
	for (i = 0; i < srv->nr_ns; i++)
		kvmm_obs_ns_snapshot(srv->ns[i], &snap[i]);
	kvmm_obs_server_stats(srv, &st);

	family(&b, "kvmm_frames", "gauge", "Frames of a namespace's pool by state.");
	for (i = 0; i < srv->nr_ns; i++) {
		uint64_t v[4] = {snap[i].free, snap[i].magazine, snap[i].mapped, snap[i].cached};

		for (k = 0; k < 4; k++)
			bprintf(&b, "kvmm_frames{namespace=\"%s\",state=\"%s\"} %" PRIu64 "\n",
				snap[i].name, states[k], v[k]);
	}
#define NS_GAUGE(metric, help, field)                                                        \
	do {                                                                                 \
		family(&b, metric, "gauge", help);                                           \
		for (i = 0; i < srv->nr_ns; i++)                                             \
			bprintf(&b, metric "{namespace=\"%s\"} %" PRIu64 "\n", snap[i].name, \
				(uint64_t)snap[i].field);                                    \
	} while (0)
	NS_GAUGE("kvmm_pool_frames", "Frames in a namespace's pool.", frames);
	NS_GAUGE("kvmm_namespace_used_frames", "Mapped frames charged to the namespace.", used);
	NS_GAUGE("kvmm_namespace_cached_frames", "Cached frames charged to the namespace.", cached);
	/* limits and protections: no sample for a namespace without one (not its pool's size) */
#define NS_GAUGE_OPT(metric, help, field)                                              \
	do {                                                                           \
		family(&b, metric, "gauge", help);                                     \
		for (i = 0; i < srv->nr_ns; i++)                                       \
			if (snap[i].field)                                             \
				bprintf(&b, metric "{namespace=\"%s\"} %" PRIu64 "\n", \
					snap[i].name, (uint64_t)snap[i].field);        \
	} while (0)
	NS_GAUGE_OPT("kvmm_namespace_limit_frames", "The namespace's frame limit (max), if any.",
		     limit);
	NS_GAUGE_OPT("kvmm_namespace_min_frames", "Frames others' pressure never reclaims.", min);
	NS_GAUGE_OPT("kvmm_namespace_low_frames", "Frames reclaimed only after unprotected ones.",
		     low);
#undef NS_GAUGE_OPT
	NS_GAUGE("kvmm_namespace_resident_frames",
		 "Frames the daemon-wide budget charges the namespace's pool.", resident);
	NS_GAUGE("kvmm_shared_frames", "Mapped frames shared by more than one sequence.", shared);
	NS_GAUGE("kvmm_pinned_frames", "Mapped frames pinned by an engine step.", pinned);
	NS_GAUGE("kvmm_page_cache_entries", "Sealed pages indexed in the prefix cache.", pagecache);
	NS_GAUGE("kvmm_namespace_clients", "Clients attached to the namespace.", clients);
#undef NS_GAUGE
	family(&b, "kvmm_lru_pages", "gauge", "Cached pages on each LRU list.");
	for (i = 0; i < srv->nr_ns; i++) {
		bprintf(&b, "kvmm_lru_pages{namespace=\"%s\",list=\"active\"} %" PRIu64 "\n",
			snap[i].name, snap[i].active);
		bprintf(&b, "kvmm_lru_pages{namespace=\"%s\",list=\"inactive\"} %" PRIu64 "\n",
			snap[i].name, snap[i].inactive);
	}
	for (k = 0; k < KVMM_STAT_COUNT; k++) {
		char name[80];
		const char *m = stat_metric(k, name, sizeof(name));

		family(&b, m, "counter", "vmstat counter (see kvmmctl vmstat).");
		for (i = 0; i < srv->nr_ns; i++)
			bprintf(&b, "%s{namespace=\"%s\"} %" PRIu64 "\n", m, snap[i].name,
				snap[i].stat[k]);
	}
	family(&b, "kvmm_namespace_low_events_total", "counter",
	       "Budget reclaims that took the namespace below its low (protection broken).");
	for (i = 0; i < srv->nr_ns; i++)
		bprintf(&b, "kvmm_namespace_low_events_total{namespace=\"%s\"} %" PRIu64 "\n",
			snap[i].name, snap[i].low_events);
	family(&b, "kvmm_namespace_budget_reclaimed_frames_total", "counter",
	       "Frames the budget's reclaim took from the namespace.");
	for (i = 0; i < srv->nr_ns; i++)
		bprintf(&b,
			"kvmm_namespace_budget_reclaimed_frames_total{namespace=\"%s\"} %" PRIu64
			"\n",
			snap[i].name, snap[i].budget_reclaimed);
	{
		struct kvmm_obs_budget bs;

		kvmm_obs_budget_snapshot(srv, &bs);
		for (k = 0; k < ARRAY_SIZE(budget_metrics); k++) {
			const struct budget_metric *m = &budget_metrics[k];
			uint64_t v;

			memcpy(&v, (const char *)&bs + m->off, sizeof(v));
			family(&b, m->name, m->counter ? "counter" : "gauge", m->help);
			bprintf(&b, "%s %" PRIu64 "\n", m->name, v);
		}
	}
	family(&b, "kvmm_page_size_bytes", "gauge", "Bytes per frame.");
	bprintf(&b, "kvmm_page_size_bytes %" PRIu64 "\n", srv->cfg.page_size);
	family(&b, "kvmm_devices", "gauge",
	       "Devices mirroring each frame (a tensor-parallel group; 1 otherwise).");
	bprintf(&b, "kvmm_devices %u\n", srv->ns[0]->nr_devices ? srv->ns[0]->nr_devices : 1u);
	family(&b, "kvmm_clients", "gauge", "Client connections open.");
	bprintf(&b, "kvmm_clients %" PRIu64 "\n", st.clients);
#define SRV_COUNTER(metric, help, field)                                 \
	do {                                                             \
		family(&b, metric, "counter", help);                     \
		bprintf(&b, metric " %" PRIu64 "\n", (uint64_t)(field)); \
	} while (0)
	SRV_COUNTER("kvmm_connections_accepted_total", "Connections accepted.", st.accepted);
	SRV_COUNTER("kvmm_connections_refused_total", "Connections refused (max_clients).",
		    st.refused);
	SRV_COUNTER("kvmm_attaches_total", "Successful ATTACHes.", st.attached);
	SRV_COUNTER("kvmm_detaches_total", "Address spaces torn down.", st.detached);
	SRV_COUNTER("kvmm_requests_total", "Request records received.", st.requests);
	SRV_COUNTER("kvmm_request_errors_total", "Replies with an error status.", st.errors);
	SRV_COUNTER("kvmm_requests_denied_total", "Requests denied with EACCES.", st.denied);
	SRV_COUNTER("kvmm_disconnects_slow_total", "Clients dropped for not reading replies.",
		    st.disconnect_slow);
	SRV_COUNTER("kvmm_invariant_failures_total", "Invariant check failures.",
		    st.invariant_failures);
	SRV_COUNTER("kvmm_trace_events_total", "Trace events recorded.",
		    srv->obs->trace ? kvmm_trace_head(srv->obs->trace) : 0);
	SRV_COUNTER("kvmm_trace_lost_total",
		    "Trace events overwritten before a subscriber read them.",
		    srv->obs->trace_lost);
	SRV_COUNTER("kvmm_trace_dropped_total", "Trace events dropped at a full subscriber socket.",
		    srv->obs->trace_dropped);
	SRV_COUNTER("kvmm_metrics_scrapes_total", "GET /metrics answered.", srv->obs->scrapes);
	if (srv->remote) {
		struct kvmm_remote_stats rs;
		uint64_t cum = 0;

		kvmm_remote_get_stats(srv->remote, &rs);
		SRV_COUNTER("kvmm_remote_lookups_total", "Remote tier lookups (one batch each).",
			    rs.lookups);
		SRV_COUNTER("kvmm_remote_hits_total", "Blocks brought back from the remote tier.",
			    rs.hits);
		SRV_COUNTER("kvmm_remote_misses_total",
			    "Blocks asked of the remote tier and not used.", rs.misses);
		SRV_COUNTER("kvmm_remote_errors_total",
			    "Blocks lost to remote connection errors or timeouts.", rs.errors);
		SRV_COUNTER("kvmm_remote_corrupt_total",
			    "Remote values rejected by their header or checksum.", rs.corrupt);
		SRV_COUNTER("kvmm_remote_mismatch_total",
			    "Intact remote values of another block (collision, format).",
			    rs.mismatch);
		SRV_COUNTER("kvmm_remote_bytes_in_total", "Bytes read from the remote tier.",
			    rs.bytes_in);
		SRV_COUNTER("kvmm_remote_bytes_out_total", "Bytes written to the remote tier.",
			    rs.bytes_out);
		SRV_COUNTER("kvmm_remote_stores_total", "Pages written to the remote tier.",
			    rs.stores);
		SRV_COUNTER("kvmm_remote_store_errors_total", "Page writes that failed.",
			    rs.store_errors);
		SRV_COUNTER("kvmm_remote_demoted_total",
			    "Pages queued for the remote tier as they left this machine's tiers.",
			    rs.demoted);
		SRV_COUNTER("kvmm_remote_store_dropped_total",
			    "Page writes dropped at a full store queue.", rs.store_dropped);
		family(&b, "kvmm_remote_lookup_seconds", "histogram",
		       "Round trip of a remote lookup batch.");
		for (i = 0; i < KVMM_REMOTE_LAT_BUCKETS; i++) {
			cum += rs.lat_bucket[i];
			bprintf(&b, "kvmm_remote_lookup_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
				kvmm_remote_lat_bounds_us[i] / 1e6, cum);
		}
		cum += rs.lat_bucket[KVMM_REMOTE_LAT_BUCKETS];
		bprintf(&b, "kvmm_remote_lookup_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
		bprintf(&b, "kvmm_remote_lookup_seconds_sum %g\n", rs.lat_sum_us / 1e6);
		bprintf(&b, "kvmm_remote_lookup_seconds_count %" PRIu64 "\n", cum);
	}
#undef SRV_COUNTER
	if (!kvmm_kmalloc_stats(&km)) {
		family(&b, "kvmm_kmalloc_bytes", "gauge",
		       "kvmmd's metadata allocator (jemalloc arena or libc) by kind.");
		bprintf(&b, "kvmm_kmalloc_bytes{kind=\"allocated\"} %" PRIu64 "\n", km.allocated);
		bprintf(&b, "kvmm_kmalloc_bytes{kind=\"active\"} %" PRIu64 "\n", km.active);
		bprintf(&b, "kvmm_kmalloc_bytes{kind=\"resident\"} %" PRIu64 "\n", km.resident);
		bprintf(&b, "kvmm_kmalloc_bytes{kind=\"metadata\"} %" PRIu64 "\n", km.metadata);
	}
	free(snap);
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	*out = b.p;
	*outlen = b.len;
	return 0;
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

static void conn_answer(struct kvmm_server *srv, struct metrics_conn *c, int code,
			const char *reason, const char *body, size_t blen, const char *ctype)
{
	struct buf b = {0};

	if (code != 200)
		srv->obs->http_errors++;
	bprintf(&b,
		"HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		"Connection: close\r\n\r\n",
		code, reason, ctype, blen);
	if (!b.oom && blen) {
		if (b.cap - b.len < blen + 1) {
			char *p = realloc(b.p, b.len + blen + 1);

			if (!p)
				b.oom = true;
			else
				b.p = p;
		}
		if (!b.oom) {
			memcpy(b.p + b.len, body, blen);
			b.len += blen;
		}
	}
	if (b.oom) {
		free(b.p);
		conn_close(srv->obs, c);
		return;
	}
	c->out = b.p;
	c->olen = b.len;
	c->ooff = 0;
}

static void conn_error(struct kvmm_server *srv, struct metrics_conn *c, int code,
		       const char *reason)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);

	conn_answer(srv, c, code, reason, body, (size_t)n, "text/plain; charset=utf-8");
}

/* A whole request head has arrived: decide the answer. */
static void conn_request(struct kvmm_server *srv, struct metrics_conn *c)
{
	char method[16], path[256], version[16];
	char *body;
	size_t blen;

	if (sscanf(c->req, "%15s %255s %15s", method, path, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7)) {
		conn_error(srv, c, 400, "Bad Request");
		return;
	}
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		conn_error(srv, c, 405, "Method Not Allowed");
		return;
	}
	if (strcmp(path, "/metrics") && strncmp(path, "/metrics?", 9)) {
		conn_error(srv, c, 404, "Not Found");
		return;
	}
	if (kvmm_obs_metrics_text(srv, &body, &blen)) {
		conn_error(srv, c, 500, "Internal Server Error");
		return;
	}
	srv->obs->scrapes++;
	conn_answer(srv, c, 200, "OK", body, !strcmp(method, "HEAD") ? 0 : blen,
		    "text/plain; version=0.0.4; charset=utf-8");
	free(body);
}

/* Write what the socket takes; true when the connection is finished (close it). */
static bool conn_flush(struct kvmm_obs *obs, struct metrics_conn *c)
{
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};

	while (c->ooff < c->olen) {
		ssize_t n = send(c->fd, c->out + c->ooff, c->olen - c->ooff,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			epoll_ctl(obs->epfd, EPOLL_CTL_MOD, c->fd, &ev);
			return false;
		}
		if (n <= 0)
			return true;
		c->ooff += (size_t)n;
	}
	return true;
}

static void conn_event(struct kvmm_server *srv, struct metrics_conn *c, uint32_t events)
{
	struct kvmm_obs *obs = srv->obs;

	if (c->out) {
		if (conn_flush(obs, c))
			conn_close(obs, c);
		return;
	}
	if (events & EPOLLIN) {
		for (;;) {
			ssize_t n = recv(c->fd, c->req + c->rlen, METRICS_REQ_MAX - c->rlen,
					 MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
			if (n <= 0) {
				conn_close(obs, c);
				return;
			}
			c->rlen += (size_t)n;
			c->req[c->rlen] = '\0';
			if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
				conn_request(srv, c);
				break;
			}
			if (c->rlen == METRICS_REQ_MAX) {
				conn_error(srv, c, 413, "Request Entity Too Large");
				break;
			}
		}
	} else if (events & (EPOLLHUP | EPOLLERR)) {
		conn_close(obs, c);
		return;
	}
	if (c->out && conn_flush(obs, c))
		conn_close(obs, c);
}

static void accept_conns(struct kvmm_obs *obs)
{
	for (;;) {
		struct metrics_conn *c;
		int fd = accept4(obs->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		if (obs->nr_conns >= METRICS_MAX_CONNS)
			conn_close(obs, list_first_entry(&obs->conns, struct metrics_conn, node));
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		if (obs_add(obs, fd, EPOLLIN | EPOLLRDHUP, c)) {
			close(fd);
			free(c);
			continue;
		}
		list_add_tail(&c->node, &obs->conns);
		obs->nr_conns++;
	}
}

void kvmm_obs_event(struct kvmm_server *srv)
{
	struct kvmm_obs *obs = srv->obs;
	struct epoll_event evs[16];
	int i, n;

	n = epoll_wait(obs->epfd, evs, ARRAY_SIZE(evs), 0);
	for (i = 0; i < n; i++) {
		void *ptr = evs[i].data.ptr;

		if (ptr == &tag_timer) {
			uint64_t ticks;

			if (read(obs->timerfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
				kvmm_debug("trace: timerfd: %s", strerror(errno));
			if (!obs->trace_pump(srv))
				set_tick(obs, false);
			continue;
		}
		if (ptr == &tag_listen) {
			accept_conns(obs);
			continue;
		}
		conn_event(srv, ptr, evs[i].events);
	}
}
