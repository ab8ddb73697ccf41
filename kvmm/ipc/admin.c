// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/admin.c - the admin verbs of the protocol (kvmmctl's), for root or the admin
 * group (dispatch.c checks, by the operation table's KVMM_OPF_ADMIN, before calling here).
 * Read verbs answer tagged text, one "Name:  value unit" line per fact (/proc style) and one
 * "Record: first key=value ..." line per row of a table, or the same numbers as JSON
 * (KVMM_ADMIN_F_JSON): every verb writes its facts once, through the emitter of
 * admin_emit.c, which renders either form - so text and JSON cannot disagree.  An answer is
 * built whole (kvmm_admin_read() runs the verb's report, opdef.c's row names it) and then
 * sent in as many records as it needs.  The numbers come from the pools (snapshot.c's
 * kvmm_obs_ns_snapshot(), also used by /metrics), the sessions and the server's counters.
 * TRACE is admin_trace.c's.  Write verbs (LIMIT, DROP_CACHES, RECLAIM) act on the
 * namespaces' pools under their locks; SWAPON, SWAPOFF and FAULT_INJECT go through swapd.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "compiler.h"
#include "kmalloc.h"
#include "log.h"
#include "kvmm/ipc/admin_emit.h"
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

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
		if (!memcmp(srv->ns[i]->cfg.name, name, KVMM_NAME_LEN)) {
			*one = srv->ns[i];
			return 0;
		}
	}
	return -ENOENT;
}

/* Each selected namespace: @one alone, or every one (srv->ns is an array of pointers). */
#define for_each_selected(srv, n, one)                                                   \
	for (unsigned int sel_i_ = 0;                                                    \
	     ((n) = (one) ? (sel_i_ ? NULL : (one))                                      \
			  : (sel_i_ < (srv)->nr_ns ? (srv)->ns[sel_i_] : NULL)) != NULL; \
	     sel_i_++)

/* ---- read verbs ------------------------------------------------------------------------------ */

/*
 * The daemon's metadata allocator (include/kmalloc.h): its own jemalloc arena, or libc in a
 * sanitizer build.  Printed by STATUS and MEMINFO (JSON keys kmalloc_*).
 */
static void kmalloc_out(struct kvmm_out *o)
{
	struct kvmm_kmalloc_stats km;
	int ret = kvmm_kmalloc_stats(&km);

	kvmm_out_str(o, "KmallocBackend", km.backend);
	if (ret) {
		kvmm_out_s64(o, "KmallocError", ret, NULL);
		return;
	}
	kvmm_out_u64(o, "KmallocArena", km.arena, NULL);
	kvmm_out_u64(o, "KmallocAllocs", km.nr_allocs, NULL);
	kvmm_out_u64(o, "KmallocFrees", km.nr_frees, NULL);
	kvmm_out_u64(o, "KmallocAllocated", km.allocated, "bytes");
	kvmm_out_u64(o, "KmallocActive", km.active, "bytes");
	kvmm_out_u64(o, "KmallocResident", km.resident, "bytes");
	kvmm_out_u64(o, "KmallocMetadata", km.metadata, "bytes");
	kvmm_out_u64(o, "KmallocTotalAllocated", km.total_allocated, "bytes");
	kvmm_out_u64(o, "KmallocTotalResident", km.total_resident, "bytes");
	kvmm_out_u64(o, "KmallocTotalMetadata", km.total_metadata, "bytes");
}

/*
 * The GPUs of a cuda pool, in member order: DeviceN (the daemon's CUDA ordinal) and
 * DeviceNUuid in nvidia-smi's form, so that an admin can tell which GPU each member is.
 */
static void devices_out(struct kvmm_server *srv, struct kvmm_out *o)
{
	for (uint32_t k = 0; srv->cfg.device_info && k < srv->ns[0]->nr_devices; k++) {
		char tag[32], id[48];
		uint8_t u[16];
		int ord;

		if (srv->cfg.device_info(&srv->ns[0]->pool->be, k, &ord, u))
			break;
		snprintf(id, sizeof(id),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
			 u[12], u[13], u[14], u[15]);
		snprintf(tag, sizeof(tag), "Device%u", k);
		kvmm_out_u64(o, tag, (uint64_t)ord, NULL);
		snprintf(tag, sizeof(tag), "Device%uUuid", k);
		kvmm_out_str(o, tag, id);
	}
}

static void status_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
{
	struct kvmm_server_stats st;
	struct kvmm_ipc_ns *n;
	struct kvmm_obs_ns snap;
	struct timespec ts;
	uint64_t frames = 0, nfree = 0, used = 0, cached = 0, shared = 0, now;
	uint64_t hits = 0, misses = 0;

	kvmm_obs_server_stats(srv, &st);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	for_each_selected(srv, n, one)
	{
		kvmm_obs_ns_snapshot(n, &snap);
		frames += snap.frames;
		nfree += snap.free + snap.magazine;
		used += snap.used;
		cached += snap.cached;
		shared += snap.shared;
		hits += snap.stat[KVMM_STAT_CACHE_HIT];
		misses += snap.stat[KVMM_STAT_CACHE_MISS];
	}
	kvmm_out_u64(o, "ABI", KVMM_ABI_VERSION, NULL);
	kvmm_out_u64(o, "ABIMin", KVMM_ABI_MIN_COMPAT, NULL);
	kvmm_out_u64(o, "Uptime", (now - srv->start_ns) / 1000000000u, "s");
	kvmm_out_u64(o, "Namespaces", one ? 1 : srv->nr_ns, NULL);
	kvmm_out_u64(o, "PageSize", srv->cfg.page_size, "bytes");
	/* a tensor-parallel group: every frame is PageSize bytes on each device */
	kvmm_out_u64(o, "Devices", srv->ns[0]->nr_devices ? srv->ns[0]->nr_devices : 1, NULL);
	devices_out(srv, o);
	kvmm_out_u64(o, "Frames", frames, "frames");
	kvmm_out_u64(o, "FramesFree", nfree, "frames");
	kvmm_out_u64(o, "FramesUsed", used, "frames");
	kvmm_out_u64(o, "FramesCached", cached, "frames");
	kvmm_out_u64(o, "FramesShared", shared, "frames");
	kvmm_out_u64(o, "CacheHits", hits, "blocks");
	kvmm_out_u64(o, "CacheMisses", misses, "lookups");
	kvmm_out_u64(o, "Clients", st.clients, NULL);
	/* threads polling the rings (ring_threads); 0: the event loop does */
	kvmm_out_u64(o, "RingThreads", srv->nr_rw, NULL);
	/* the nice value they run at (ring_nice, or the daemon's own where it could not be taken) */
	if (srv->nr_rw)
		kvmm_out_s64(o, "RingNice", __atomic_load_n(&srv->rw[0].nice, __ATOMIC_RELAXED),
			     NULL);
	for (unsigned int i = 0; i < srv->nr_rw; i++) {
		char tag[48];

		/* how the namespaces' clients spread over them, and what each ran */
		snprintf(tag, sizeof(tag), "RingThread%uClients", i);
		kvmm_out_u64(o, tag, READ_ONCE(srv->rw[i].nr_sessions), NULL);
		snprintf(tag, sizeof(tag), "RingThread%uRequests", i);
		kvmm_out_u64(o, tag, __atomic_load_n(&srv->rw[i].requests, __ATOMIC_RELAXED), NULL);
	}
	kvmm_out_u64(o, "Accepted", st.accepted, NULL);
	kvmm_out_u64(o, "Refused", st.refused, NULL);
	kvmm_out_u64(o, "Hellos", st.hellos, NULL);
	kvmm_out_u64(o, "VersionMismatch", st.version_mismatch, NULL);
	kvmm_out_u64(o, "Attached", st.attached, NULL);
	kvmm_out_u64(o, "Detached", st.detached, NULL);
	kvmm_out_u64(o, "Requests", st.requests, NULL);
	kvmm_out_u64(o, "Errors", st.errors, NULL);
	kvmm_out_u64(o, "BadMessages", st.bad_msgs, NULL);
	kvmm_out_u64(o, "Denied", st.denied, NULL);
	kvmm_out_u64(o, "Hangups", st.hangups, NULL);
	kvmm_out_u64(o, "HelloTimeouts", st.hello_timeouts, NULL);
	kvmm_out_u64(o, "DisconnectBad", st.disconnect_bad, NULL);
	kvmm_out_u64(o, "DisconnectSlow", st.disconnect_slow, NULL);
	kvmm_out_u64(o, "Events", st.events, NULL);
	kvmm_out_u64(o, "FdsPassed", st.fds_passed, NULL);
	kvmm_out_u64(o, "FdsDropped", st.fds_dropped, NULL);
	kvmm_out_u64(o, "InvariantFailures", st.invariant_failures, NULL);
	if (srv->obs) {
		kvmm_out_u64(o, "TraceRecords",
			     srv->obs->trace ? kvmm_trace_head(srv->obs->trace) : 0, NULL);
		kvmm_out_str(o, "TraceMode",
			     srv->cfg.trace_mode == KVMM_SERVER_TRACE_ALWAYS ? "always"
			     : srv->cfg.trace_mode == KVMM_SERVER_TRACE_OFF  ? "off"
									     : "follow");
		kvmm_out_u64(o, "TraceSubscribers", srv->obs->trace_subscribers, NULL);
		kvmm_out_u64(o, "TraceLost", srv->obs->trace_lost, NULL);
		kvmm_out_u64(o, "TraceDropped", srv->obs->trace_dropped, NULL);
		kvmm_out_u64(o, "MetricsPort", srv->obs->port, NULL);
		kvmm_out_u64(o, "MetricsScrapes", srv->obs->scrapes, NULL);
	}
	kmalloc_out(o);
}

/* The daemon-wide frame budget the namespaces' pools share (kvmm/budget.c). */
static void budget_out(struct kvmm_server *srv, struct kvmm_out *o)
{
	struct kvmm_obs_budget b;

	kvmm_obs_budget_snapshot(srv, &b);
	kvmm_out_u64(o, "Budget", b.limit, "frames");
	kvmm_out_u64(o, "BudgetUsed", b.used, "frames");
	kvmm_out_u64(o, "BudgetFree", b.used < b.limit ? b.limit - b.used : 0, "frames");
	/* the pools' sizes together: above Budget, overcommitted (freed frames discarded) */
	kvmm_out_u64(o, "BudgetSpan", b.span, "frames");
	kvmm_out_u64(o, "BudgetOvercommit", b.overcommit, NULL);
	kvmm_out_u64(o, "BudgetReclaims", b.reclaims, NULL);
	kvmm_out_u64(o, "BudgetFreed", b.reclaimed, "frames");
	kvmm_out_u64(o, "BudgetShort", b.nr_short, NULL);
	kvmm_out_u64(o, "BudgetPreempted", b.nr_oom, NULL);
	kvmm_out_u64(o, "BudgetLowEvents", b.low_events, NULL);
	/* kvswapd's background reclaim under the budget's low point */
	kvmm_out_u64(o, "BudgetBackground", b.bg_runs, NULL);
	kvmm_out_u64(o, "BudgetBackgroundFreed", b.bg_reclaimed, "frames");
}

static void meminfo_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
{
	struct kvmm_ipc_ns *n;

	kvmm_out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		struct kvmm_obs_ns s;

		kvmm_obs_ns_snapshot(n, &s);
		kvmm_out_sect(o);
		kvmm_out_str(o, "Namespace", s.name);
		kvmm_out_u64(o, "Total", s.frames, "frames");
		kvmm_out_u64(o, "Free", s.free, "frames");
		kvmm_out_u64(o, "Magazines", s.magazine, "frames");
		kvmm_out_u64(o, "Mapped", s.mapped, "frames");
		kvmm_out_u64(o, "Cached", s.cached, "frames");
		kvmm_out_u64(o, "Used", s.used, "frames");
		/* no line (no JSON key) without a limit: the pool's size is not one */
		if (s.limit)
			kvmm_out_u64(o, "Limit", s.limit, "frames");
		if (s.min)
			kvmm_out_u64(o, "Min", s.min, "frames");
		if (s.low)
			kvmm_out_u64(o, "Low", s.low, "frames");
		/* frames the daemon-wide budget charges it (all out of its pool's buddy) */
		kvmm_out_u64(o, "Resident", s.resident, "frames");
		kvmm_out_u64(o, "BudgetReclaimed", s.budget_reclaimed, "frames");
		kvmm_out_u64(o, "LowEvents", s.low_events, NULL);
		kvmm_out_u64(o, "Peak", s.peak, "frames");
		kvmm_out_u64(o, "Shared", s.shared, "frames");
		kvmm_out_u64(o, "Pinned", s.pinned, "frames");
		kvmm_out_u64(o, "Active", s.active, "frames");
		kvmm_out_u64(o, "Inactive", s.inactive, "frames");
		kvmm_out_u64(o, "PageCache", s.pagecache, "pages");
		kvmm_out_u64(o, "WmarkMin", s.wmark_min, "frames");
		kvmm_out_u64(o, "WmarkLow", s.wmark_low, "frames");
		kvmm_out_u64(o, "WmarkHigh", s.wmark_high, "frames");
		kvmm_out_u64(o, "PageSize", n->pool->page_size, "bytes");
		kvmm_out_u64(o, "Devices", n->pool->be.nr_devices, NULL);
		kvmm_out_sect_end(o);
	}
	kvmm_out_list_end(o);
	budget_out(srv, o);
	kmalloc_out(o);
}

static void vmstat_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
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
	o->width = 0;
	for (i = 0; i < KVMM_STAT_COUNT; i++)
		kvmm_out_u64(o, kvmm_stat_name(i), sum[i], NULL);
}

static void buddyinfo_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
{
	char buf[KVMM_BUDDYINFO_SIZE];
	struct kvmm_ipc_ns *n;
	unsigned int i;

	kvmm_out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		uint32_t blocks[KVMM_MAX_ORDER];
		int ret;

		pthread_mutex_lock(&n->pool->lock);
		ret = kvmm_buddyinfo(n->pool, buf, sizeof(buf));
		memcpy(blocks, n->pool->nr_free_blocks, sizeof(blocks));
		pthread_mutex_unlock(&n->pool->lock);
		if (!o->json) {
			kvmm_tprintf(&o->t, "Namespace: %s\n", n->cfg.name);
			if (ret < 0)
				o->t.err = ret;
			else
				kvmm_tprintf(&o->t, "%s", buf);
			continue;
		}
		kvmm_out_sect(o);
		kvmm_out_str(o, "Namespace", n->cfg.name);
		kvmm_out_key(o, "FreeBlocks");
		kvmm_tprintf(&o->t, "[");
		for (i = 0; i < KVMM_MAX_ORDER; i++)
			kvmm_tprintf(&o->t, "%s%u", i ? "," : "", blocks[i]);
		kvmm_tprintf(&o->t, "]");
		kvmm_out_sect_end(o);
	}
	kvmm_out_list_end(o);
}

/* Blocks mapped by a session's sequences (a shared frame counts once per sequence). */
static uint64_t session_blocks(struct kvmm_session *c)
{
	struct kvmm_ipc_seq *is;
	uint64_t blocks = 0;
	size_t bkt;

	kvmm_htable_for_each (&c->seqs, bkt, is, node)
		blocks += is->seq->nblocks;
	return blocks;
}

static void clients_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t id,
			struct kvmm_out *o)
{
	struct kvmm_session *c;

	kvmm_out_list(o, "clients");
	list_for_each_entry (c, &srv->sessions, node) {
		uint64_t blocks = 0, mag = 0;

		if ((one && c->ns != one) || (id && c->id != id))
			continue;
		if (c->ns) {
			pthread_mutex_lock(&c->ns->pool->lock);
			blocks = session_blocks(c);
			mag = c->mag.count;
			pthread_mutex_unlock(&c->ns->pool->lock);
		}
		kvmm_out_rec(o, "Client");
		kvmm_out_u64(o, "id", c->id, NULL);
		kvmm_out_str(o, "name", c->name);
		kvmm_out_s64(o, "pid", (int64_t)c->cred.pid, NULL);
		kvmm_out_u64(o, "uid", (unsigned int)c->cred.uid, NULL);
		kvmm_out_u64(o, "gid", (unsigned int)c->cred.gid, NULL);
		kvmm_out_str(o, "state", kvmm_session_state_name(c->state));
		kvmm_out_str(o, "ns", c->ns ? c->ns->cfg.name : "");
		kvmm_out_u64(o, "device", c->device, NULL); /* member of a tensor-parallel group */
		kvmm_out_u64(o, "seqs", c->nr_seqs, NULL);
		kvmm_out_u64(o, "requests", c->nr_requests, NULL);
		kvmm_out_u64(o, "bad", c->nr_bad, NULL);
		kvmm_out_u64(o, "blocks", blocks, NULL);
		kvmm_out_u64(o, "magazine", mag, NULL);
		kvmm_out_u64(o, "tracing", c->trace_follow, NULL);
		kvmm_out_rec_end(o);
	}
	kvmm_out_list_end(o);
}

static void namespaces_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
{
	struct kvmm_ipc_ns *n;

	kvmm_out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		struct kvmm_obs_ns s;

		kvmm_obs_ns_snapshot(n, &s);
		kvmm_out_rec(o, "Namespace");
		kvmm_out_str(o, "name", s.name);
		kvmm_out_u64(o, "id", s.id, NULL);
		kvmm_out_u64(o, "frames", s.frames, NULL);
		/* "-" / null without one: the pool's size is not a limit */
		kvmm_out_u64_opt(o, "limit", s.limit, NULL);
		kvmm_out_u64_opt(o, "min", s.min, NULL);
		kvmm_out_u64_opt(o, "low", s.low, NULL);
		kvmm_out_u64(o, "used", s.used, NULL);
		kvmm_out_u64(o, "cached", s.cached, NULL);
		kvmm_out_u64(o, "resident", s.resident, NULL);
		kvmm_out_u64(o, "low_events", s.low_events, NULL);
		kvmm_out_u64(o, "budget_reclaimed", s.budget_reclaimed, NULL);
		kvmm_out_s64(o, "priority", s.priority, NULL);
		kvmm_out_u64(o, "clients", s.clients, NULL);
		kvmm_out_u64(o, "chunks", s.chunks, NULL);
		kvmm_out_u64(o, "shared", s.shared, NULL);
		kvmm_out_u64(o, "hits", s.stat[KVMM_STAT_CACHE_HIT], NULL);
		kvmm_out_u64(o, "misses", s.stat[KVMM_STAT_CACHE_MISS], NULL);
		kvmm_out_u64(o, "pgsteal", s.stat[KVMM_STAT_PGSTEAL], NULL);
		kvmm_out_rec_end(o);
	}
	kvmm_out_list_end(o);
}

/* One sequence's row (pool lock held). */
static void seq_row(struct kvmm_out *o, struct kvmm_session *c, struct kvmm_ipc_seq *is)
{
	struct kvmm_seq *seq = is->seq;
	struct kvmm_pool *pool = c->ns->pool;
	uint64_t shared = 0, pinned = 0;
	uint32_t b;

	for (b = 0; b < seq->nblocks; b++) {
		uint64_t pte = seq->pte[b];
		const struct kvmm_page *pg;

		if (!kvmm_pte_is_present(pte))
			continue;
		pg = &pool->pages[kvmm_pte_frame(pte)];
		if (pg->refcount > 1)
			shared++;
		if (pg->pincount)
			pinned++;
	}
	kvmm_out_rec(o, "Seq");
	kvmm_out_u64(o, "id", is->id, NULL);
	kvmm_out_u64(o, "client", c->id, NULL);
	kvmm_out_str(o, "ns", c->ns->cfg.name);
	kvmm_out_u64(o, "core", seq->id, NULL);
	kvmm_out_u64(o, "tokens", seq->ntokens, NULL);
	kvmm_out_u64(o, "blocks", seq->nblocks, NULL);
	kvmm_out_u64(o, "sealed", seq->nsealed, NULL);
	kvmm_out_u64(o, "shared", shared, NULL);
	kvmm_out_u64(o, "pinned", pinned, NULL);
	kvmm_out_u64(o, "pin_depth", is->pin_depth, NULL);
	kvmm_out_s64(o, "priority", seq->priority, NULL);
	kvmm_out_rec_end(o);
}

static void seqs_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t id,
		     struct kvmm_out *o)
{
	struct kvmm_session *c;

	kvmm_out_list(o, "seqs");
	list_for_each_entry (c, &srv->sessions, node) {
		struct kvmm_ipc_seq *is;
		size_t bkt;

		if (!c->ns || (one && c->ns != one) || (id && c->id != id))
			continue;
		pthread_mutex_lock(&c->ns->pool->lock);
		kvmm_htable_for_each (&c->seqs, bkt, is, node)
			seq_row(o, c, is);
		pthread_mutex_unlock(&c->ns->pool->lock);
	}
	kvmm_out_list_end(o);
}

static const char *pte_flags(uint64_t pte, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s", (pte & KVMM_PTE_WRITABLE) ? "W" : "",
		 (pte & KVMM_PTE_DIRTY) ? "D" : "", (pte & KVMM_PTE_SEALED) ? "S" : "",
		 (pte & KVMM_PTE_SHARED) ? "H" : "");
	return buf;
}

static int pagetable_out(struct kvmm_server *srv, uint32_t client, uint64_t id, struct kvmm_out *o)
{
	struct kvmm_session *c;
	struct kvmm_ipc_seq *is = NULL, *it;
	struct kvmm_pool *pool;
	struct kvmm_seq *seq;
	uint32_t b;

	if (!client || !id)
		return -EINVAL;
	list_for_each_entry (c, &srv->sessions, node)
		if (c->id == client)
			break;
	if (&c->node == &srv->sessions || !c->ns)
		return -ENOENT;
	kvmm_htable_for_each_possible (&c->seqs, it, node, id)
		if (it->id == id)
			is = it;
	if (!is)
		return -ENOENT;
	pool = c->ns->pool;
	seq = is->seq;
	pthread_mutex_lock(&pool->lock);
	kvmm_out_u64(o, "Client", c->id, NULL);
	kvmm_out_u64(o, "Seq", is->id, NULL);
	kvmm_out_str(o, "Namespace", c->ns->cfg.name);
	kvmm_out_u64(o, "Tokens", seq->ntokens, "tokens");
	kvmm_out_u64(o, "TokensPerPage", seq->as->fmt.tokens_per_page, "tokens");
	kvmm_out_u64(o, "Blocks", seq->nblocks, "blocks");
	kvmm_out_u64(o, "Sealed", seq->nsealed, "blocks");
	kvmm_out_list(o, "ptes");
	for (b = 0; b < seq->nblocks; b++) {
		uint64_t pte = seq->pte[b];
		char fl[8];

		kvmm_out_rec(o, "Pte");
		kvmm_out_u64(o, "block", b, NULL);
		if (kvmm_pte_is_present(pte)) {
			const struct kvmm_page *pg = &pool->pages[kvmm_pte_frame(pte)];

			kvmm_out_str(o, "type", "present");
			kvmm_out_frame(o, "frame", kvmm_pte_frame(pte));
			kvmm_out_str(o, "flags", pte_flags(pte, fl, sizeof(fl)));
			kvmm_out_u64(o, "refcount", pg->refcount, NULL);
			kvmm_out_u64(o, "pincount", pg->pincount, NULL);
			kvmm_out_u64(o, "tokens", pg->ntokens, NULL);
		} else if (kvmm_pte_is_swap(pte)) {
			kvmm_out_str(o, "type", "swap");
			kvmm_out_u64(o, "tier", kvmm_pte_swap_tier(pte), NULL);
			kvmm_out_u64(o, "slot", kvmm_pte_swap_slot(pte), NULL);
			kvmm_out_str(o, "flags", pte_flags(pte, fl, sizeof(fl)));
		} else {
			kvmm_out_str(o, "type", "none");
		}
		kvmm_out_rec_end(o);
	}
	kvmm_out_list_end(o);
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

/* Pages listed per LRU list, oldest (next to go) first, when the request does not say. */
#define LRU_SHOW_DEFAULT 16

static void lru_list_out(struct kvmm_out *o, struct kvmm_pool *pool, struct list_head *head,
			 const char *name, uint64_t show)
{
	struct kvmm_page *pg;
	uint64_t pos = 0;

	list_for_each_entry_reverse (pg, head, lru) {
		if (pos >= show)
			break;
		kvmm_out_rec(o, "Page");
		kvmm_out_u64(o, "frame", kvmm_page_to_frame(pool, pg), NULL);
		kvmm_out_str(o, "list", name);
		kvmm_out_u64(o, "age", pos++, NULL);
		kvmm_out_u64(o, "referenced", !!(pg->flags & KVMM_PG_REFERENCED), NULL);
		kvmm_out_u64(o, "tokens", pg->ntokens, NULL);
		kvmm_out_rec_end(o);
	}
}

static void lru_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t show,
		    struct kvmm_out *o)
{
	struct kvmm_ipc_ns *n;

	if (!show)
		show = LRU_SHOW_DEFAULT;
	kvmm_out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		struct kvmm_pool *pool = n->pool;
		struct kvmm_page *pg;
		uint64_t ref_a = 0, ref_i = 0;

		pthread_mutex_lock(&pool->lock);
		list_for_each_entry (pg, &pool->lru.active, lru)
			ref_a += !!(pg->flags & KVMM_PG_REFERENCED);
		list_for_each_entry (pg, &pool->lru.inactive, lru)
			ref_i += !!(pg->flags & KVMM_PG_REFERENCED);
		kvmm_out_sect(o);
		kvmm_out_str(o, "Namespace", n->cfg.name);
		kvmm_out_u64(o, "Active", pool->lru.nr_active, "pages");
		kvmm_out_u64(o, "ActiveReferenced", ref_a, "pages");
		kvmm_out_u64(o, "Inactive", pool->lru.nr_inactive, "pages");
		kvmm_out_u64(o, "InactiveReferenced", ref_i, "pages");
		kvmm_out_u64(o, "Scanned", pool->stat[KVMM_STAT_PGSCAN], "pages");
		kvmm_out_u64(o, "Stolen", pool->stat[KVMM_STAT_PGSTEAL], "pages");
		kvmm_out_u64(o, "Activated", pool->stat[KVMM_STAT_PGACTIVATE], "pages");
		kvmm_out_u64(o, "Deactivated", pool->stat[KVMM_STAT_PGDEACTIVATE], "pages");
		/* age: position from the tail, 0 = the next page reclaim looks at */
		kvmm_out_list(o, "pages");
		lru_list_out(o, pool, &pool->lru.inactive, "inactive", show);
		lru_list_out(o, pool, &pool->lru.active, "active", show);
		kvmm_out_list_end(o);
		kvmm_out_sect_end(o);
		pthread_mutex_unlock(&pool->lock);
	}
	kvmm_out_list_end(o);
}

/*
 * Swap tiers, per namespace pool (kvmm/swap.h): from config (--swap) or SWAPON.
 */
static void swap_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct kvmm_out *o)
{
	struct kvmm_ipc_ns *n;
	uint64_t total = 0;

	kvmm_out_list(o, "tiers");
	for_each_selected(srv, n, one)
	{
		unsigned int ids[KVMM_SWAP_TIER_MAX], nr, i;

		pthread_mutex_lock(&n->pool->lock);
		nr = kvmm_swap_tiers(n->pool, ids, ARRAY_SIZE(ids));
		for (i = 0; i < nr; i++) {
			struct kvmm_swap_tier_info ti;

			if (kvmm_swap_tier_info(n->pool, ids[i], &ti))
				continue;
			total++;
			kvmm_out_rec(o, "Tier");
			kvmm_out_u64(o, "tier", ti.tier, NULL);
			kvmm_out_str(o, "ns", n->cfg.name);
			kvmm_out_str(o, "kind", ti.kind ? ti.kind : "");
			kvmm_out_s64(o, "priority", ti.priority, NULL);
			kvmm_out_u64(o, "slots", ti.nslots, NULL);
			kvmm_out_u64(o, "used", ti.used, NULL);
			kvmm_out_u64(o, "kept", ti.kept, NULL);
			kvmm_out_u64(o, "pages_out", ti.pages_out, NULL);
			kvmm_out_u64(o, "clean_out", ti.clean_out, NULL);
			kvmm_out_u64(o, "pages_in", ti.pages_in, NULL);
			kvmm_out_u64(o, "bytes_out", ti.bytes_out, NULL);
			kvmm_out_u64(o, "bytes_in", ti.bytes_in, NULL);
			kvmm_out_u64(o, "failures", ti.failures, NULL);
			kvmm_out_u64(o, "csum_bad", ti.csum_bad, NULL);
			kvmm_out_u64(o, "direct", ti.direct, NULL);
			/* a file tier's warm-restart index (swap_index.c) */
			if (ti.indexed) {
				kvmm_out_u64(o, "index_records", ti.index_records, NULL);
				kvmm_out_u64(o, "index_restored", ti.index_restored, NULL);
				kvmm_out_u64(o, "index_rejected", ti.index_rejected, NULL);
				kvmm_out_u64(o, "index_pending", ti.index_pending, NULL);
			}
			kvmm_out_rec_end(o);
		}
		pthread_mutex_unlock(&n->pool->lock);
	}
	kvmm_out_list_end(o);
	kvmm_out_u64(o, "SwapTiers", total, NULL);
}

/* ---- read verbs: the reports opdef.c's rows name ------------------------------------------ */

int kvmm_admin_status(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		      const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	status_out(srv, one, o);
	return 0;
}

int kvmm_admin_meminfo(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		       const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	meminfo_out(srv, one, o);
	return 0;
}

int kvmm_admin_vmstat(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		      const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	vmstat_out(srv, one, o);
	return 0;
}

int kvmm_admin_buddyinfo(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
			 const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	buddyinfo_out(srv, one, o);
	return 0;
}

int kvmm_admin_clients(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		       const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	clients_out(srv, one, req->id, o);
	return 0;
}

int kvmm_admin_namespaces(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
			  const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	namespaces_out(srv, one, o);
	return 0;
}

int kvmm_admin_seqs(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		    const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	seqs_out(srv, one, req->id, o);
	return 0;
}

/* PAGETABLE: admin_req.reserved is the client, id the sequence. */
int kvmm_admin_pagetable(struct kvmm_server *srv, struct kvmm_ipc_ns *one __maybe_unused,
			 const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	return pagetable_out(srv, req->reserved, req->id, o);
}

int kvmm_admin_lru(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		   const struct kvmm_admin_req *req, struct kvmm_out *o)
{
	lru_out(srv, one, req->id, o);
	return 0;
}

int kvmm_admin_swap(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		    const struct kvmm_admin_req *req __maybe_unused, struct kvmm_out *o)
{
	swap_out(srv, one, o);
	return 0;
}

void kvmm_admin_read(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr,
		     kvmm_ipc_report_fn *report)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_admin_req req;
	struct kvmm_ipc_ns *one;
	struct kvmm_out o = {.rec = -1, .width = 18};
	bool follow;
	int ret;

	memcpy(&req, hdr + 1, sizeof(req));
	follow = req.flags & KVMM_ADMIN_F_FOLLOW;
	if ((req.flags & ~KVMM_ADMIN_F_ALL) ||
	    (req.reserved && hdr->op != KVMM_OP_TRACE && hdr->op != KVMM_OP_PAGETABLE) ||
	    ((req.flags & (KVMM_ADMIN_F_CLEAR | KVMM_ADMIN_F_FOLLOW)) &&
	     hdr->op != KVMM_OP_TRACE) ||
	    (hdr->op == KVMM_OP_TRACE && req.reserved >> KVMM_TR_TYPE_COUNT)) {
		ret = -EINVAL;
		goto out_err;
	}
	o.json = req.flags & KVMM_ADMIN_F_JSON;
	ret = select_ns(srv, req.ns, &one);
	if (ret)
		goto out_err;
	if (follow) {
		ret = kvmm_admin_trace_follow(s, &req, hdr);
		if (ret)
			goto out_err;
		o.t.buf = NULL;
		kvmm_out_send(s, hdr, &o.t, true);
		return;
	}
	o.t.cap = 4096;
	o.t.buf = malloc(o.t.cap);
	if (!o.t.buf) {
		ret = -ENOMEM;
		goto out_err;
	}
	o.t.buf[0] = '\0';
	/* TRACE answers JSON Lines (one object per event), not one document */
	if (hdr->op != KVMM_OP_TRACE)
		kvmm_out_open(&o);
	ret = report(srv, one, &req, &o);
	if (ret)
		o.t.err = ret;
	if (hdr->op != KVMM_OP_TRACE)
		kvmm_out_close(&o);
	kvmm_out_send(s, hdr, &o.t, false);
	free(o.t.buf);
	return;

out_err:
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}

/* ---- write verbs ---------------------------------------------------------------------------- */

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
	if ((req.valid & KVMM_LIMIT_SET_LOW) && req.low_frames > UINT32_MAX)
		return -EINVAL;
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
	if (!ret && (req.valid & KVMM_LIMIT_SET_LOW))
		ret = kvmm_ns_set_protection(n->ns, n->ns->min, (uint32_t)req.low_frames);
	if (!ret && (req.valid & KVMM_LIMIT_SET_PRIORITY))
		n->ns->priority = req.priority;
	/* the namespace's settings as a reload compares them */
	n->cfg.limit = n->ns->limit;
	n->cfg.low = n->ns->low;
	n->cfg.priority = n->ns->priority;
	pthread_mutex_unlock(&n->pool->lock);
	if (!ret)
		kvmm_notice("ipc: client %u set limits of %s", s->id, n->cfg.name);
	return ret;
}

/* Reclaim up to @want cached frames over every pool; the count freed. */
/*
 * Free up to @want frames over the namespace pools: cache only (kvmm_reclaim: DROP_CACHES,
 * RECLAIM with KVMM_RECLAIM_F_NOSWAP) or, with @full, the whole reclaim order (kvmm_shrink:
 * cache first, then whole sequences swapped out to a tier).
 */
static uint64_t reclaim_all(struct kvmm_server *srv, uint64_t want, bool full)
{
	uint64_t done = 0;
	unsigned int i;

	for (i = 0; i < srv->nr_ns && done < want; i++) {
		struct kvmm_pool *pool = srv->ns[i]->pool;

		pthread_mutex_lock(&pool->lock);
		while (done < want) {
			uint32_t m = (uint32_t)min_t(uint64_t, want - done, UINT32_MAX);
			uint32_t n = full ? kvmm_shrink(pool, m, 0) : kvmm_reclaim(pool, NULL, m);

			if (!n)
				break;
			done += n;
		}
		pthread_mutex_unlock(&pool->lock);
	}
	return done;
}

/* DROP_CACHES swap: the demoted cached pages of every namespace pool; the count dropped. */
static uint64_t drop_swap_all(struct kvmm_server *srv)
{
	uint64_t done = 0;
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++) {
		struct kvmm_pool *pool = srv->ns[i]->pool;

		pthread_mutex_lock(&pool->lock);
		done += kvmm_swap_drop_cached(pool);
		pthread_mutex_unlock(&pool->lock);
	}
	return done;
}

/*
 * SWAPON / SWAPOFF act on the request's namespace pool, or every one when its ns is empty; a
 * file tier gets one file per pool, PATH.NS, when there are several namespaces (swapd.c).
 * SWAPON stops at the first pool that fails; SWAPOFF reports the first failure but tries
 * every selected pool, and -ENOENT only when none had the tier.
 */
static int do_swapon(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_swapon_req req;
	struct kvmm_ipc_ns *one, *n;
	int ret;

	memcpy(&req, hdr + 1, sizeof(req));
	if (!memchr(req.ns, '\0', sizeof(req.ns)))
		return -EINVAL;
	ret = select_ns(s->srv, req.ns, &one);
	if (ret)
		return ret;
	for_each_selected(s->srv, n, one)
	{
		ret = kvmm_swapd_swapon(s->srv, n, &req);
		if (ret)
			return ret;
	}
	kvmm_notice("ipc: client %u: swapon tier %u%s%s", s->id, req.tier, one ? " in " : "",
		    one ? one->cfg.name : "");
	return 0;
}

static int do_swapoff(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_swapoff_req req;
	struct kvmm_ipc_ns *one, *n;
	unsigned int found = 0;
	int ret = 0;

	memcpy(&req, hdr + 1, sizeof(req));
	if (req.reserved || !memchr(req.ns, '\0', sizeof(req.ns)))
		return -EINVAL;
	ret = select_ns(s->srv, req.ns, &one);
	if (ret)
		return ret;
	for_each_selected(s->srv, n, one)
	{
		int r = kvmm_swapd_swapoff(s->srv, n, req.tier);

		if (r != -ENOENT)
			found++;
		if (r && r != -ENOENT && !ret)
			ret = r;
	}
	if (!found)
		return -ENOENT;
	if (!ret)
		kvmm_notice("ipc: client %u: swapoff tier %u%s%s", s->id, req.tier,
			    one ? " in " : "", one ? one->cfg.name : "");
	return ret;
}

/* FAULT_INJECT: the request's namespace, or every one when it is empty. */
static int do_fault_inject(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_fault_inject_req req;
	struct kvmm_ipc_ns *one, *n;
	int ret;

	memcpy(&req, hdr + 1, sizeof(req));
	if (!memchr(req.spec, '\0', sizeof(req.spec)) || !memchr(req.ns, '\0', sizeof(req.ns)))
		return -EINVAL;
	ret = select_ns(s->srv, req.ns, &one);
	if (ret)
		return ret;
	for_each_selected(s->srv, n, one)
	{
		pthread_mutex_lock(&n->pool->lock);
		ret = kvmm_swap_fault_parse(n->pool, req.spec);
		pthread_mutex_unlock(&n->pool->lock);
		if (ret)
			return ret;
	}
	kvmm_notice("ipc: client %u: fault %s", s->id, req.spec);
	return 0;
}

void kvmm_admin_limit(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, do_limit(s, hdr), NULL, 0);
}

void kvmm_admin_drop_caches(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_drop_caches_req req;
	struct kvmm_reclaim_rep rep;

	memcpy(&req, hdr + 1, sizeof(req));
	if (!req.flags || (req.flags & ~(KVMM_DROP_F_DEVICE | KVMM_DROP_F_SWAP)) || req.reserved) {
		kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
		return;
	}
	rep.nr_frames = 0;
	/* device first: what it demotes instead of dropping goes with the swap pass */
	if (req.flags & KVMM_DROP_F_DEVICE)
		rep.nr_frames = reclaim_all(s->srv, UINT64_MAX, false);
	if (req.flags & KVMM_DROP_F_SWAP)
		rep.nr_frames += drop_swap_all(s->srv);
	kvmm_notice("ipc: client %u dropped %" PRIu64 " cached pages", s->id, rep.nr_frames);
	kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
}

void kvmm_admin_reclaim(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_reclaim_req req;
	struct kvmm_reclaim_rep rep;

	memcpy(&req, hdr + 1, sizeof(req));
	if ((req.flags & ~KVMM_RECLAIM_F_NOSWAP) || req.reserved) {
		kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
		return;
	}
	rep.nr_frames = reclaim_all(s->srv, req.nr_frames, !(req.flags & KVMM_RECLAIM_F_NOSWAP));
	kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
}

void kvmm_admin_swapon(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, do_swapon(s, hdr), NULL, 0);
}

void kvmm_admin_swapoff(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, do_swapoff(s, hdr), NULL, 0);
}

void kvmm_admin_fault_inject(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	kvmm_session_reply(s, hdr, do_fault_inject(s, hdr), NULL, 0);
}
