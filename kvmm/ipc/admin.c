// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/admin.c - the admin verbs of the protocol (kvmmctl's), for root or the admin
 * group (session.c checks before calling here).  Read verbs answer tagged text, one
 * "Name:  value unit" line per fact (/proc style) and one "Record: first key=value ..." line
 * per row of a table, or the same numbers as JSON (KVMM_ADMIN_F_JSON): every verb writes its
 * facts once, through the small emitter below, which renders either form - so text and JSON
 * cannot disagree.  The JSON key of a fact is its tag in snake_case ("FramesFree" ->
 * "frames_free"); the schema is in Documentation/admin-guide/kvmmctl.md.  An answer is built
 * whole and then sent in as many records as it needs (all but the last with KVMM_MSG_F_MORE).
 * The numbers come from the pools (kvmm_obs_ns_snapshot(), also used by /metrics), the
 * sessions and the server's counters.  TRACE dumps the trace ring or, with
 * KVMM_ADMIN_F_FOLLOW, subscribes the connection: kvmm_admin_trace_pump() then pushes new
 * records to it without ever waiting (metrics.c ticks it).  Write verbs (LIMIT, DROP_CACHES,
 * RECLAIM) act on the namespaces' pools under their locks; SWAPON, SWAPOFF and FAULT_INJECT
 * go through swapd.c.
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
#include "kvmm/ipc/ipc.h"
#include "kvmm/ipc/obs.h"
#include "kvmm/swap.h"
#include "kvmm/trace.h"

struct text {
	char *buf;
	size_t len, cap;
	int err;
};

static __printf(2, 3) void tprintf(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->err = -EINVAL;
			return;
		}
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t cap = max_t(size_t, t->cap * 2, t->len + (size_t)n + 1);
			char *b = realloc(t->buf, cap);

			if (!b) {
				t->err = -ENOMEM;
				return;
			}
			t->buf = b;
			t->cap = cap;
		}
	}
}

/* ---- the emitter: one call per fact, rendered as tagged text or JSON ---------------------- */

#define OUT_MAX_DEPTH 8

struct out {
	struct text t;
	bool json;
	int width; /* text: column of values after "Tag:"; 0 = "tag: value" */
	int rec;   /* text: fields written in the open inline record, -1 = none open */
	unsigned int depth;
	bool sep[OUT_MAX_DEPTH]; /* json: something was written at this depth */
};

/* "FramesFree" -> "frames_free", "ABIMin" -> "abi_min", "pin_depth" stays. */
static void snake(const char *tag, char *buf, size_t len)
{
	size_t i, o = 0;

	for (i = 0; tag[i] && o + 2 < len; i++) {
		char c = tag[i];

		if (c >= 'A' && c <= 'Z') {
			bool prev_lower = i && ((tag[i - 1] >= 'a' && tag[i - 1] <= 'z') ||
						(tag[i - 1] >= '0' && tag[i - 1] <= '9'));
			bool acronym_end = i && tag[i - 1] >= 'A' && tag[i - 1] <= 'Z' &&
					   tag[i + 1] >= 'a' && tag[i + 1] <= 'z';

			if (o && (prev_lower || acronym_end))
				buf[o++] = '_';
			c = (char)(c - 'A' + 'a');
		} else if (c == '-') {
			c = '_';
		}
		buf[o++] = c;
	}
	buf[o] = '\0';
}

static void json_str(struct text *t, const char *s)
{
	tprintf(t, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			tprintf(t, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			tprintf(t, "\\u%04x", c);
		else
			tprintf(t, "%c", c);
	}
	tprintf(t, "\"");
}

static void jsep(struct out *o)
{
	if (o->sep[o->depth])
		tprintf(&o->t, ",");
	o->sep[o->depth] = true;
}

static void jkey(struct out *o, const char *tag)
{
	char k[64];

	jsep(o);
	snake(tag, k, sizeof(k));
	json_str(&o->t, k);
	tprintf(&o->t, ":");
}

static void jpush(struct out *o, char c)
{
	tprintf(&o->t, "%c", c);
	if (o->depth + 1 < OUT_MAX_DEPTH)
		o->depth++;
	o->sep[o->depth] = false;
}

static void jpop(struct out *o, char c)
{
	tprintf(&o->t, "%c", c);
	if (o->depth)
		o->depth--;
}

/* text: start a fact; false when it was written inline (in a record) */
static void text_fact(struct out *o, const char *tag, const char *val, const char *unit)
{
	if (o->rec >= 0) {
		if (o->rec++)
			tprintf(&o->t, " %s=%s", tag, val);
		else
			tprintf(&o->t, " %s", val);
		return;
	}
	if (o->width) {
		int n = (int)strlen(tag) + 1;

		tprintf(&o->t, "%s:%*s%s", tag, n < o->width ? o->width - n : 1, "", val);
	} else {
		tprintf(&o->t, "%s: %s", tag, val);
	}
	if (unit)
		tprintf(&o->t, " %s", unit);
	tprintf(&o->t, "\n");
}

static void out_u64(struct out *o, const char *tag, uint64_t v, const char *unit)
{
	char b[24];

	if (o->json) {
		jkey(o, tag);
		tprintf(&o->t, "%" PRIu64, v);
		return;
	}
	snprintf(b, sizeof(b), "%" PRIu64, v);
	text_fact(o, tag, b, unit);
}

static void out_s64(struct out *o, const char *tag, int64_t v, const char *unit)
{
	char b[24];

	if (o->json) {
		jkey(o, tag);
		tprintf(&o->t, "%" PRId64, v);
		return;
	}
	snprintf(b, sizeof(b), "%" PRId64, v);
	text_fact(o, tag, b, unit);
}

/* A frame number, or "-" / null when none. */
static void out_frame(struct out *o, const char *tag, uint32_t frame)
{
	if (frame == KVMM_TRACE_NONE || frame == KVMM_FRAME_NONE) {
		if (o->json) {
			jkey(o, tag);
			tprintf(&o->t, "null");
		} else {
			text_fact(o, tag, "-", NULL);
		}
		return;
	}
	out_u64(o, tag, frame, NULL);
}

static void out_str(struct out *o, const char *tag, const char *s)
{
	if (o->json) {
		jkey(o, tag);
		json_str(&o->t, s);
		return;
	}
	text_fact(o, tag, s[0] ? s : "-", NULL);
}

static void out_open(struct out *o)
{
	o->rec = -1;
	if (o->json)
		jpush(o, '{');
}

static void out_close(struct out *o)
{
	if (o->json) {
		jpop(o, '}');
		tprintf(&o->t, "\n");
	}
}

/* A list of objects: JSON "tag":[ ... ]; nothing in text. */
static void out_list(struct out *o, const char *tag)
{
	if (o->json) {
		jkey(o, tag);
		jpush(o, '[');
	}
}

static void out_list_end(struct out *o)
{
	if (o->json)
		jpop(o, ']');
}

/* An object in a list: text renders it as one "Label: first k=v ..." line. */
static void out_rec(struct out *o, const char *label)
{
	if (o->json) {
		jsep(o);
		jpush(o, '{');
		return;
	}
	tprintf(&o->t, "%s:", label);
	o->rec = 0;
}

static void out_rec_end(struct out *o)
{
	if (o->json) {
		jpop(o, '}');
		return;
	}
	tprintf(&o->t, "\n");
	o->rec = -1;
}

/* An object in a list whose facts are text lines (a section, e.g. one namespace). */
static void out_sect(struct out *o)
{
	if (o->json) {
		jsep(o);
		jpush(o, '{');
	}
}

static void out_sect_end(struct out *o)
{
	if (o->json)
		jpop(o, '}');
}

/* ---- sending ------------------------------------------------------------------------------- */

/* Send the text in records of at most KVMM_MSG_PAYLOAD_MAX bytes, split at line ends. */
static void send_text(struct kvmm_session *s, const struct kvmm_msg_hdr *req, struct text *t,
		      bool more_after)
{
	struct kvmm_msg_hdr *rep = (struct kvmm_msg_hdr *)s->srv->tx;
	size_t off = 0;

	if (t->err) {
		kvmm_session_reply(s, req, t->err, NULL, 0);
		return;
	}
	do {
		size_t n = t->len - off;
		bool more = more_after;

		if (n > KVMM_MSG_PAYLOAD_MAX) {
			n = KVMM_MSG_PAYLOAD_MAX;
			while (n > 1 && t->buf[off + n - 1] != '\n')
				n--;
			if (n <= 1)
				n = KVMM_MSG_PAYLOAD_MAX;
			more = true;
		}
		kvmm_msg_hdr_init_reply(rep, req, (uint32_t)(sizeof(*rep) + n), 0);
		if (more)
			rep->flags |= KVMM_MSG_F_MORE;
		if (n)
			memcpy(rep + 1, t->buf + off, n);
		if (kvmm_session_send(s, rep, sizeof(*rep) + n, NULL, 0))
			return;
		off += n;
	} while (off < t->len);
}

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
		if (!memcmp(srv->ns[i].cfg.name, name, KVMM_NAME_LEN)) {
			*one = &srv->ns[i];
			return 0;
		}
	}
	return -ENOENT;
}

#define for_each_selected(srv, n, one)                                        \
	for ((n) = (one) ? (one) : (srv)->ns; (n) < (srv)->ns + (srv)->nr_ns; \
	     (n) = (one) ? (srv)->ns + (srv)->nr_ns : (n) + 1)

/* ---- snapshots ------------------------------------------------------------------------------ */

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
	out->limit = n->ns->limit ? n->ns->limit : pool->nframes;
	out->priority = n->ns->priority;
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

/* ---- read verbs ------------------------------------------------------------------------------ */

/*
 * The daemon's metadata allocator (include/kmalloc.h): its own jemalloc arena, or libc in a
 * sanitizer build.  Printed by STATUS and MEMINFO (JSON keys kmalloc_*).
 */
static void kmalloc_out(struct out *o)
{
	struct kvmm_kmalloc_stats km;
	int ret = kvmm_kmalloc_stats(&km);

	out_str(o, "KmallocBackend", km.backend);
	if (ret) {
		out_s64(o, "KmallocError", ret, NULL);
		return;
	}
	out_u64(o, "KmallocArena", km.arena, NULL);
	out_u64(o, "KmallocAllocs", km.nr_allocs, NULL);
	out_u64(o, "KmallocFrees", km.nr_frees, NULL);
	out_u64(o, "KmallocAllocated", km.allocated, "bytes");
	out_u64(o, "KmallocActive", km.active, "bytes");
	out_u64(o, "KmallocResident", km.resident, "bytes");
	out_u64(o, "KmallocMetadata", km.metadata, "bytes");
	out_u64(o, "KmallocTotalAllocated", km.total_allocated, "bytes");
	out_u64(o, "KmallocTotalResident", km.total_resident, "bytes");
	out_u64(o, "KmallocTotalMetadata", km.total_metadata, "bytes");
}

/*
 * The GPUs of a cuda pool, in member order: DeviceN (the daemon's CUDA ordinal) and
 * DeviceNUuid in nvidia-smi's form, so that an admin can tell which GPU each member is.
 */
static void devices_out(struct kvmm_server *srv, struct out *o)
{
	for (uint32_t k = 0; srv->cfg.device_info && k < srv->ns[0].nr_devices; k++) {
		char tag[32], id[48];
		uint8_t u[16];
		int ord;

		if (srv->cfg.device_info(&srv->ns[0].pool->be, k, &ord, u))
			break;
		snprintf(id, sizeof(id),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
			 u[12], u[13], u[14], u[15]);
		snprintf(tag, sizeof(tag), "Device%u", k);
		out_u64(o, tag, (uint64_t)ord, NULL);
		snprintf(tag, sizeof(tag), "Device%uUuid", k);
		out_str(o, tag, id);
	}
}

static void status_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
{
	struct kvmm_server_stats st;
	struct kvmm_ipc_ns *n;
	struct kvmm_obs_ns snap;
	struct timespec ts;
	uint64_t frames = 0, nfree = 0, used = 0, cached = 0, shared = 0, now;
	uint64_t hits = 0, misses = 0;

	kvmm_server_get_stats(srv, &st);
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
	out_u64(o, "ABI", KVMM_ABI_VERSION, NULL);
	out_u64(o, "ABIMin", KVMM_ABI_MIN_COMPAT, NULL);
	out_u64(o, "Uptime", (now - srv->start_ns) / 1000000000u, "s");
	out_u64(o, "Namespaces", one ? 1 : srv->nr_ns, NULL);
	out_u64(o, "PageSize", srv->cfg.page_size, "bytes");
	/* a tensor-parallel group: every frame is PageSize bytes on each device */
	out_u64(o, "Devices", srv->ns[0].nr_devices ? srv->ns[0].nr_devices : 1, NULL);
	devices_out(srv, o);
	out_u64(o, "Frames", frames, "frames");
	out_u64(o, "FramesFree", nfree, "frames");
	out_u64(o, "FramesUsed", used, "frames");
	out_u64(o, "FramesCached", cached, "frames");
	out_u64(o, "FramesShared", shared, "frames");
	out_u64(o, "CacheHits", hits, "blocks");
	out_u64(o, "CacheMisses", misses, "lookups");
	out_u64(o, "Clients", st.clients, NULL);
	out_u64(o, "Accepted", st.accepted, NULL);
	out_u64(o, "Refused", st.refused, NULL);
	out_u64(o, "Hellos", st.hellos, NULL);
	out_u64(o, "VersionMismatch", st.version_mismatch, NULL);
	out_u64(o, "Attached", st.attached, NULL);
	out_u64(o, "Detached", st.detached, NULL);
	out_u64(o, "Requests", st.requests, NULL);
	out_u64(o, "Errors", st.errors, NULL);
	out_u64(o, "BadMessages", st.bad_msgs, NULL);
	out_u64(o, "Denied", st.denied, NULL);
	out_u64(o, "Hangups", st.hangups, NULL);
	out_u64(o, "HelloTimeouts", st.hello_timeouts, NULL);
	out_u64(o, "DisconnectBad", st.disconnect_bad, NULL);
	out_u64(o, "DisconnectSlow", st.disconnect_slow, NULL);
	out_u64(o, "Events", st.events, NULL);
	out_u64(o, "FdsPassed", st.fds_passed, NULL);
	out_u64(o, "FdsDropped", st.fds_dropped, NULL);
	out_u64(o, "InvariantFailures", st.invariant_failures, NULL);
	if (srv->obs) {
		out_u64(o, "TraceRecords", srv->obs->trace ? kvmm_trace_head(srv->obs->trace) : 0,
			NULL);
		out_u64(o, "TraceSubscribers", srv->obs->trace_subscribers, NULL);
		out_u64(o, "TraceLost", srv->obs->trace_lost, NULL);
		out_u64(o, "TraceDropped", srv->obs->trace_dropped, NULL);
		out_u64(o, "MetricsPort", srv->obs->port, NULL);
		out_u64(o, "MetricsScrapes", srv->obs->scrapes, NULL);
	}
	kmalloc_out(o);
}

static void meminfo_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
{
	struct kvmm_ipc_ns *n;

	out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		struct kvmm_obs_ns s;

		kvmm_obs_ns_snapshot(n, &s);
		out_sect(o);
		out_str(o, "Namespace", s.name);
		out_u64(o, "Total", s.frames, "frames");
		out_u64(o, "Free", s.free, "frames");
		out_u64(o, "Magazines", s.magazine, "frames");
		out_u64(o, "Mapped", s.mapped, "frames");
		out_u64(o, "Cached", s.cached, "frames");
		out_u64(o, "Used", s.used, "frames");
		out_u64(o, "Limit", s.limit, "frames");
		out_u64(o, "Shared", s.shared, "frames");
		out_u64(o, "Pinned", s.pinned, "frames");
		out_u64(o, "Active", s.active, "frames");
		out_u64(o, "Inactive", s.inactive, "frames");
		out_u64(o, "PageCache", s.pagecache, "pages");
		out_u64(o, "WmarkMin", s.wmark_min, "frames");
		out_u64(o, "WmarkLow", s.wmark_low, "frames");
		out_u64(o, "WmarkHigh", s.wmark_high, "frames");
		out_u64(o, "PageSize", n->pool->page_size, "bytes");
		out_u64(o, "Devices", n->pool->be.nr_devices, NULL);
		out_sect_end(o);
	}
	out_list_end(o);
	kmalloc_out(o);
}

static void vmstat_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
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
		out_u64(o, kvmm_stat_name(i), sum[i], NULL);
}

static void buddyinfo_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
{
	char buf[KVMM_BUDDYINFO_SIZE];
	struct kvmm_ipc_ns *n;
	unsigned int i;

	out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		uint32_t blocks[KVMM_MAX_ORDER];
		int ret;

		pthread_mutex_lock(&n->pool->lock);
		ret = kvmm_buddyinfo(n->pool, buf, sizeof(buf));
		memcpy(blocks, n->pool->nr_free_blocks, sizeof(blocks));
		pthread_mutex_unlock(&n->pool->lock);
		if (!o->json) {
			tprintf(&o->t, "Namespace: %s\n", n->cfg.name);
			if (ret < 0)
				o->t.err = ret;
			else
				tprintf(&o->t, "%s", buf);
			continue;
		}
		out_sect(o);
		out_str(o, "Namespace", n->cfg.name);
		jkey(o, "FreeBlocks");
		tprintf(&o->t, "[");
		for (i = 0; i < KVMM_MAX_ORDER; i++)
			tprintf(&o->t, "%s%u", i ? "," : "", blocks[i]);
		tprintf(&o->t, "]");
		out_sect_end(o);
	}
	out_list_end(o);
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
			struct out *o)
{
	struct kvmm_session *c;

	out_list(o, "clients");
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
		out_rec(o, "Client");
		out_u64(o, "id", c->id, NULL);
		out_str(o, "name", c->name);
		out_s64(o, "pid", (int64_t)c->cred.pid, NULL);
		out_u64(o, "uid", (unsigned int)c->cred.uid, NULL);
		out_u64(o, "gid", (unsigned int)c->cred.gid, NULL);
		out_str(o, "state", kvmm_session_state_name(c->state));
		out_str(o, "ns", c->ns ? c->ns->cfg.name : "");
		out_u64(o, "device", c->device, NULL); /* member of a tensor-parallel group */
		out_u64(o, "seqs", c->nr_seqs, NULL);
		out_u64(o, "requests", c->nr_requests, NULL);
		out_u64(o, "bad", c->nr_bad, NULL);
		out_u64(o, "blocks", blocks, NULL);
		out_u64(o, "magazine", mag, NULL);
		out_u64(o, "tracing", c->trace_follow, NULL);
		out_rec_end(o);
	}
	out_list_end(o);
}

static void namespaces_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
{
	struct kvmm_ipc_ns *n;

	out_list(o, "namespaces");
	for_each_selected(srv, n, one)
	{
		struct kvmm_obs_ns s;

		kvmm_obs_ns_snapshot(n, &s);
		out_rec(o, "Namespace");
		out_str(o, "name", s.name);
		out_u64(o, "id", s.id, NULL);
		out_u64(o, "frames", s.frames, NULL);
		out_u64(o, "limit", s.limit, NULL);
		out_u64(o, "used", s.used, NULL);
		out_u64(o, "cached", s.cached, NULL);
		out_s64(o, "priority", s.priority, NULL);
		out_u64(o, "clients", s.clients, NULL);
		out_u64(o, "chunks", s.chunks, NULL);
		out_u64(o, "shared", s.shared, NULL);
		out_u64(o, "hits", s.stat[KVMM_STAT_CACHE_HIT], NULL);
		out_u64(o, "misses", s.stat[KVMM_STAT_CACHE_MISS], NULL);
		out_u64(o, "pgsteal", s.stat[KVMM_STAT_PGSTEAL], NULL);
		out_rec_end(o);
	}
	out_list_end(o);
}

/* One sequence's row (pool lock held). */
static void seq_row(struct out *o, struct kvmm_session *c, struct kvmm_ipc_seq *is)
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
	out_rec(o, "Seq");
	out_u64(o, "id", is->id, NULL);
	out_u64(o, "client", c->id, NULL);
	out_str(o, "ns", c->ns->cfg.name);
	out_u64(o, "core", seq->id, NULL);
	out_u64(o, "tokens", seq->ntokens, NULL);
	out_u64(o, "blocks", seq->nblocks, NULL);
	out_u64(o, "sealed", seq->nsealed, NULL);
	out_u64(o, "shared", shared, NULL);
	out_u64(o, "pinned", pinned, NULL);
	out_u64(o, "pin_depth", is->pin_depth, NULL);
	out_s64(o, "priority", seq->priority, NULL);
	out_rec_end(o);
}

static void seqs_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t id, struct out *o)
{
	struct kvmm_session *c;

	out_list(o, "seqs");
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
	out_list_end(o);
}

static const char *pte_flags(uint64_t pte, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s", (pte & KVMM_PTE_WRITABLE) ? "W" : "",
		 (pte & KVMM_PTE_DIRTY) ? "D" : "", (pte & KVMM_PTE_SEALED) ? "S" : "",
		 (pte & KVMM_PTE_SHARED) ? "H" : "");
	return buf;
}

static int pagetable_out(struct kvmm_server *srv, uint32_t client, uint64_t id, struct out *o)
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
	out_u64(o, "Client", c->id, NULL);
	out_u64(o, "Seq", is->id, NULL);
	out_str(o, "Namespace", c->ns->cfg.name);
	out_u64(o, "Tokens", seq->ntokens, "tokens");
	out_u64(o, "TokensPerPage", seq->as->fmt.tokens_per_page, "tokens");
	out_u64(o, "Blocks", seq->nblocks, "blocks");
	out_u64(o, "Sealed", seq->nsealed, "blocks");
	out_list(o, "ptes");
	for (b = 0; b < seq->nblocks; b++) {
		uint64_t pte = seq->pte[b];
		char fl[8];

		out_rec(o, "Pte");
		out_u64(o, "block", b, NULL);
		if (kvmm_pte_is_present(pte)) {
			const struct kvmm_page *pg = &pool->pages[kvmm_pte_frame(pte)];

			out_str(o, "type", "present");
			out_frame(o, "frame", kvmm_pte_frame(pte));
			out_str(o, "flags", pte_flags(pte, fl, sizeof(fl)));
			out_u64(o, "refcount", pg->refcount, NULL);
			out_u64(o, "pincount", pg->pincount, NULL);
			out_u64(o, "tokens", pg->ntokens, NULL);
		} else if (kvmm_pte_is_swap(pte)) {
			out_str(o, "type", "swap");
			out_u64(o, "tier", kvmm_pte_swap_tier(pte), NULL);
			out_u64(o, "slot", kvmm_pte_swap_slot(pte), NULL);
			out_str(o, "flags", pte_flags(pte, fl, sizeof(fl)));
		} else {
			out_str(o, "type", "none");
		}
		out_rec_end(o);
	}
	out_list_end(o);
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

/* Pages listed per LRU list, oldest (next to go) first, when the request does not say. */
#define LRU_SHOW_DEFAULT 16

static void lru_list_out(struct out *o, struct kvmm_pool *pool, struct list_head *head,
			 const char *name, uint64_t show)
{
	struct kvmm_page *pg;
	uint64_t pos = 0;

	list_for_each_entry_reverse (pg, head, lru) {
		if (pos >= show)
			break;
		out_rec(o, "Page");
		out_u64(o, "frame", kvmm_page_to_frame(pool, pg), NULL);
		out_str(o, "list", name);
		out_u64(o, "age", pos++, NULL);
		out_u64(o, "referenced", !!(pg->flags & KVMM_PG_REFERENCED), NULL);
		out_u64(o, "tokens", pg->ntokens, NULL);
		out_rec_end(o);
	}
}

static void lru_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, uint64_t show, struct out *o)
{
	struct kvmm_ipc_ns *n;

	if (!show)
		show = LRU_SHOW_DEFAULT;
	out_list(o, "namespaces");
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
		out_sect(o);
		out_str(o, "Namespace", n->cfg.name);
		out_u64(o, "Active", pool->lru.nr_active, "pages");
		out_u64(o, "ActiveReferenced", ref_a, "pages");
		out_u64(o, "Inactive", pool->lru.nr_inactive, "pages");
		out_u64(o, "InactiveReferenced", ref_i, "pages");
		out_u64(o, "Scanned", pool->stat[KVMM_STAT_PGSCAN], "pages");
		out_u64(o, "Stolen", pool->stat[KVMM_STAT_PGSTEAL], "pages");
		out_u64(o, "Activated", pool->stat[KVMM_STAT_PGACTIVATE], "pages");
		out_u64(o, "Deactivated", pool->stat[KVMM_STAT_PGDEACTIVATE], "pages");
		/* age: position from the tail, 0 = the next page reclaim looks at */
		out_list(o, "pages");
		lru_list_out(o, pool, &pool->lru.inactive, "inactive", show);
		lru_list_out(o, pool, &pool->lru.active, "active", show);
		out_list_end(o);
		out_sect_end(o);
		pthread_mutex_unlock(&pool->lock);
	}
	out_list_end(o);
}

/*
 * Swap tiers, per namespace pool (kvmm/swap.h): from config (--swap) or SWAPON.
 */
static void swap_out(struct kvmm_server *srv, struct kvmm_ipc_ns *one, struct out *o)
{
	struct kvmm_ipc_ns *n;
	uint64_t total = 0;

	out_list(o, "tiers");
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
			out_rec(o, "Tier");
			out_u64(o, "tier", ti.tier, NULL);
			out_str(o, "ns", n->cfg.name);
			out_str(o, "kind", ti.kind ? ti.kind : "");
			out_s64(o, "priority", ti.priority, NULL);
			out_u64(o, "slots", ti.nslots, NULL);
			out_u64(o, "used", ti.used, NULL);
			out_u64(o, "kept", ti.kept, NULL);
			out_u64(o, "pages_out", ti.pages_out, NULL);
			out_u64(o, "clean_out", ti.clean_out, NULL);
			out_u64(o, "pages_in", ti.pages_in, NULL);
			out_u64(o, "bytes_out", ti.bytes_out, NULL);
			out_u64(o, "bytes_in", ti.bytes_in, NULL);
			out_u64(o, "failures", ti.failures, NULL);
			out_u64(o, "direct", ti.direct, NULL);
			out_rec_end(o);
		}
		pthread_mutex_unlock(&n->pool->lock);
	}
	out_list_end(o);
	out_u64(o, "SwapTiers", total, NULL);
}

/* ---- trace ------------------------------------------------------------------------------------ */

static const char *pool_ns_name(struct kvmm_server *srv, uint64_t pool)
{
	unsigned int i;

	for (i = 0; i < srv->nr_ns; i++)
		if ((uint64_t)(uintptr_t)srv->ns[i].pool == pool)
			return srv->ns[i].cfg.name;
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
static void trace_line(struct kvmm_server *srv, struct text *t, bool json,
		       const struct kvmm_trace_rec *r)
{
	struct out o = {.json = json, .rec = -1, .width = 18};

	o.t = *t;
	if (json)
		jpush(&o, '{');
	else
		out_rec(&o, "Event");
	out_u64(&o, "seqno", r->seqno, NULL);
	if (json)
		out_u64(&o, "ts_ns", r->ts_ns, NULL);
	else
		tprintf(&o.t, " ts=%" PRIu64 ".%06" PRIu64, r->ts_ns / 1000000000u,
			r->ts_ns / 1000u % 1000000u);
	out_str(&o, "type", kvmm_trace_type_name(r->type));
	out_u64(&o, "client", r->client, NULL);
	out_str(&o, "ns", pool_ns_name(srv, r->pool));
	out_u64(&o, "seq", r->seq, NULL);
	out_frame(&o, "frame", r->frame);
	out_u64(&o, "count", r->count, NULL);
	if (json) {
		jpop(&o, '}');
		tprintf(&o.t, "\n");
	} else {
		out_rec_end(&o);
	}
	*t = o.t;
}

static uint64_t trace_oldest(const struct kvmm_trace *tr, uint64_t head)
{
	uint64_t nr = (uint64_t)tr->mask + 1;

	return head > nr ? head - nr + 1 : 1;
}

static void trace_dump(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
		       const struct kvmm_admin_req *req, struct out *o)
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

/* Start a subscription; the reply (status 0, MORE) is sent by the caller. */
static int trace_follow(struct kvmm_session *s, const struct kvmm_admin_req *req,
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
static bool trace_push(struct kvmm_session *s, struct text *t)
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
	struct text t = {0};
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
			tprintf(&t, "{\"lost\":%" PRIu64 ",\"dropped\":%" PRIu64 "}\n",
				s->trace_lost, s->trace_dropped);
		else
			tprintf(&t, "Lost: lost=%" PRIu64 " dropped=%" PRIu64 "\n", s->trace_lost,
				s->trace_dropped);
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
		if (!s->trace_follow || s->dead)
			continue;
		subs++;
		if (tr)
			pump_one(srv, tr, s);
	}
	/* sessions that closed took their subscription with them */
	srv->obs->trace_subscribers = subs;
	return subs != 0;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static void do_read_verb(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_server *srv = s->srv;
	struct kvmm_admin_req req;
	struct kvmm_ipc_ns *one;
	struct out o = {.rec = -1, .width = 18};
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
		ret = trace_follow(s, &req, hdr);
		if (ret)
			goto out_err;
		o.t.buf = NULL;
		send_text(s, hdr, &o.t, true);
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
		out_open(&o);
	switch (hdr->op) {
	case KVMM_OP_STATUS:
		status_out(srv, one, &o);
		break;
	case KVMM_OP_MEMINFO:
		meminfo_out(srv, one, &o);
		break;
	case KVMM_OP_VMSTAT:
		vmstat_out(srv, one, &o);
		break;
	case KVMM_OP_BUDDYINFO:
		buddyinfo_out(srv, one, &o);
		break;
	case KVMM_OP_CLIENTS:
		clients_out(srv, one, req.id, &o);
		break;
	case KVMM_OP_NAMESPACES:
		namespaces_out(srv, one, &o);
		break;
	case KVMM_OP_SEQS:
		seqs_out(srv, one, req.id, &o);
		break;
	case KVMM_OP_PAGETABLE:
		ret = pagetable_out(srv, req.reserved, req.id, &o);
		if (ret)
			o.t.err = ret;
		break;
	case KVMM_OP_LRU:
		lru_out(srv, one, req.id, &o);
		break;
	case KVMM_OP_SWAP:
		swap_out(srv, one, &o);
		break;
	case KVMM_OP_TRACE:
		if (!kvmm_obs_trace(srv))
			o.t.err = -EOPNOTSUPP;
		else
			trace_dump(srv, one, &req, &o);
		break;
	default:
		o.t.err = -EOPNOTSUPP;
		break;
	}
	if (hdr->op != KVMM_OP_TRACE)
		out_close(&o);
	send_text(s, hdr, &o.t, false);
	free(o.t.buf);
	return;

out_err:
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}

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
	if (req.valid & KVMM_LIMIT_SET_LOW)
		return -EOPNOTSUPP; /* no low protection in the core yet */
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
	if (!ret && (req.valid & KVMM_LIMIT_SET_PRIORITY))
		n->ns->priority = req.priority;
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
		struct kvmm_pool *pool = srv->ns[i].pool;

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
		struct kvmm_pool *pool = srv->ns[i].pool;

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

void kvmm_admin_handle(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr)
{
	struct kvmm_reclaim_rep rep;
	int ret;

	switch (hdr->op) {
	case KVMM_OP_STATUS:
	case KVMM_OP_MEMINFO:
	case KVMM_OP_VMSTAT:
	case KVMM_OP_BUDDYINFO:
	case KVMM_OP_CLIENTS:
	case KVMM_OP_NAMESPACES:
	case KVMM_OP_SEQS:
	case KVMM_OP_PAGETABLE:
	case KVMM_OP_LRU:
	case KVMM_OP_SWAP:
	case KVMM_OP_TRACE:
		do_read_verb(s, hdr);
		return;
	case KVMM_OP_LIMIT:
		kvmm_session_reply(s, hdr, do_limit(s, hdr), NULL, 0);
		return;
	case KVMM_OP_DROP_CACHES: {
		struct kvmm_drop_caches_req req;

		memcpy(&req, hdr + 1, sizeof(req));
		if (!req.flags || (req.flags & ~(KVMM_DROP_F_DEVICE | KVMM_DROP_F_SWAP)) ||
		    req.reserved) {
			kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
			return;
		}
		rep.nr_frames = 0;
		/* device first: what it demotes instead of dropping goes with the swap pass */
		if (req.flags & KVMM_DROP_F_DEVICE)
			rep.nr_frames = reclaim_all(s->srv, UINT64_MAX, false);
		if (req.flags & KVMM_DROP_F_SWAP)
			rep.nr_frames += drop_swap_all(s->srv);
		kvmm_notice("ipc: client %u dropped %" PRIu64 " cached pages", s->id,
			    rep.nr_frames);
		kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
		return;
	}
	case KVMM_OP_RECLAIM: {
		struct kvmm_reclaim_req req;

		memcpy(&req, hdr + 1, sizeof(req));
		if ((req.flags & ~KVMM_RECLAIM_F_NOSWAP) || req.reserved) {
			kvmm_session_reply(s, hdr, -EINVAL, NULL, 0);
			return;
		}
		rep.nr_frames =
			reclaim_all(s->srv, req.nr_frames, !(req.flags & KVMM_RECLAIM_F_NOSWAP));
		kvmm_session_reply(s, hdr, 0, &rep, sizeof(rep));
		return;
	}
	case KVMM_OP_SWAPON:
		ret = do_swapon(s, hdr);
		break;
	case KVMM_OP_SWAPOFF:
		ret = do_swapoff(s, hdr);
		break;
	case KVMM_OP_FAULT_INJECT:
		ret = do_fault_inject(s, hdr);
		break;
	default:
		ret = -EOPNOTSUPP;
		break;
	}
	kvmm_session_reply(s, hdr, ret, NULL, 0);
}
