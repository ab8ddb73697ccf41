/* SPDX-License-Identifier: MIT */
/*
 * runtime/kvmm_admin.h - libkvmm's admin calls: what kvmmctl, monitoring agents and tests ask
 * kvmmd about the whole daemon (status, meminfo, vmstat, clients, namespaces, sequences, page
 * tables, LRU, swap tiers, trace) and what they change (limits, drop-caches, reclaim, swapon,
 * swapoff, fault injection). An admin handle is one connection that has said HELLO and joined
 * no namespace: it maps nothing and owns no sequence. Read verbs answer the daemon's tagged
 * text ("Name:  value" lines, "Label: first key=value ..." records) or its JSON, reassembled
 * from however many records the daemon sent; kvmm_admin_value, kvmm_admin_next and
 * kvmm_admin_field pick numbers and records out of the text. Write verbs take the uapi request
 * structs. Included by runtime/kvmm.h; each call has a man page in
 * Documentation/userspace-api/man3/, the overview is the "Admin calls" section of
 * Documentation/userspace-api/libkvmm.md.
 *
 * Conventions: 0 (or a count, where said) or a negative errno; kvmm_strerror() gives the text.
 * Admin verbs need root or the daemon's admin group: -EACCES otherwise. A handle serializes its
 * calls with a mutex; it must not be used across fork(). Nothing here raises SIGPIPE.
 */
#ifndef KVMM_RUNTIME_KVMM_ADMIN_H
#define KVMM_RUNTIME_KVMM_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "uapi/kvmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libkvmm.so exports what is declared from here on (runtime/libkvmm.map, -fvisibility=hidden) */
#pragma GCC visibility push(default)

/* A HELLOed connection to kvmmd for admin verbs. Opaque. */
typedef struct kvmm_admin kvmm_admin_t;

/*
 * How long a call waits for the daemon.  Every wait (connect, send, each record of a reply)
 * gives the daemon up with -ETIMEDOUT after the handle's deadline of silence - the one
 * libkvmm's clients have: kvmm_admin_open_timeout()'s timeout_ms, else
 * $KVMM_DAEMON_TIMEOUT_MS, else KVMM_DAEMON_TIMEOUT_DEFAULT_MS (30 s) - and
 * kvmm_admin_why() then names the daemon and its state ("kvmmd (pid N) did not answer in
 * 30000 ms: it is stopped (SIGSTOP or a job-control stop): SIGCONT resumes it").  A write verb
 * (reclaim and swapoff may take a while) keeps waiting past the deadline while the daemon
 * runs, up to KVMM_ADMIN_WRITE_TIMEOUT_MS in all.
 */
#define KVMM_ADMIN_READ_TIMEOUT_MS 30000  /* the default deadline, KVMM_DAEMON_TIMEOUT_DEFAULT_MS */
#define KVMM_ADMIN_WRITE_TIMEOUT_MS 60000 /* write verbs while the daemon runs */

/*
 * Connect to kvmmd at socket_path (NULL: the default kvmm_attach(3) uses) and say HELLO. On
 * success *out is the handle. Errors: what connect(2) says (-ENOENT, -ECONNREFUSED: no daemon
 * there; -EACCES: the socket is not open to us), -ENAMETOOLONG, -ETIMEDOUT (no answer to
 * HELLO), -ECONNRESET (the daemon closed the connection before answering), the daemon's
 * refusal (-EPROTO: no common ABI version; -EINVAL), -EBADMSG, -ENOMEM. kvmm_admin_why() then
 * says which step failed, in words.
 */
int kvmm_admin_open(const char *socket_path, kvmm_admin_t **out);
/*
 * The same with the daemon deadline timeout_ms (as kvmm_attach_opts.daemon_timeout_ms): 0 the
 * default ($KVMM_DAEMON_TIMEOUT_MS, else 30 s), < 0 wait forever.  A daemon that does not
 * answer within it (stopped, hung) fails the open or the call with -ETIMEDOUT.
 */
int kvmm_admin_open_timeout(const char *socket_path, int timeout_ms, kvmm_admin_t **out);
/* Close the connection and free the handle (a trace subscription ends with it). NULL is ok. */
void kvmm_admin_close(kvmm_admin_t *admin);
/*
 * In words, the last failed kvmm_admin_open of the calling thread ("connect ...: ..."), or
 * its last call that gave a silent daemon up (-ETIMEDOUT: "kvmmd (pid N) did not answer ...").
 */
const char *kvmm_admin_why(void);
/* The daemon's HELLO answer: ABI agreed, features, page size, frames, our client id. */
const struct kvmm_hello_rep *kvmm_admin_hello(const kvmm_admin_t *admin);

/*
 * A read verb: op is KVMM_OP_STATUS .. KVMM_OP_TRACE or KVMM_OP_REMOTE, req its filter (NULL: all zero; flags
 * KVMM_ADMIN_F_JSON for JSON, id a client or (PAGETABLE) a sequence, reserved the client of
 * PAGETABLE or TRACE's event mask, ns a namespace). *text receives the whole answer,
 * NUL-terminated, malloc'd: the caller frees it. -EINVAL for another op or
 * KVMM_ADMIN_F_FOLLOW (kvmm_admin_trace_follow), else the daemon's status.
 */
int kvmm_admin_read(kvmm_admin_t *admin, unsigned int op, const struct kvmm_admin_req *req,
		    char **text);

/* One namespace, as the NAMESPACES verb reports it. */
struct kvmm_admin_ns {
	char name[KVMM_NAME_LEN];
	uint32_t id;
	int32_t priority; /* reclaim order between namespaces: lower goes first */
	uint64_t frames;  /* frames of its pool */
	uint64_t limit;	  /* hard limit (max) in frames, KVMM_LIMIT_NONE when none is set */
	uint64_t used;	  /* frames mapped by sequences */
	uint64_t cached;  /* unmapped frames kept in the prefix cache */
	uint64_t shared;  /* frames mapped by more than one sequence */
	uint64_t clients; /* clients attached */
	uint64_t chunks;  /* chunks of its pool */
	uint64_t hits;	  /* prefix-cache lookups that hit */
	uint64_t misses;  /* and that missed */
	uint64_t pgsteal; /* pages reclaimed from it */
	/* (min and low, the protections, are the record's "min=" and "low=": kvmm_admin_read) */
};

/*
 * The namespaces (NAMESPACES; ns NULL or "": all, else that one) as an array of *nr entries in
 * *list, malloc'd: the caller frees it. Their limits are set with kvmm_admin_limit.
 * -ENOENT: no namespace ns. -EBADMSG: a record the library cannot read.
 */
int kvmm_admin_namespaces(kvmm_admin_t *admin, const char *ns, struct kvmm_admin_ns **list,
			  unsigned int *nr);

/* One swap tier of one namespace's pool, as the SWAP verb reports it. */
struct kvmm_admin_tier {
	uint32_t tier;		/* 1..KVMM_SWAP_TIER_MAX */
	int32_t priority;	/* higher is used first */
	char ns[KVMM_NAME_LEN]; /* the namespace whose pool it serves */
	char kind[16];		/* "host", "file", ... */
	uint64_t slots;		/* pages it holds */
	uint64_t used;		/* slots holding swapped pages (kept ones not counted) */
	uint64_t kept;		/* slots kept by resident clean pages: freed on demand */
	uint64_t pages_out;	/* pages written */
	uint64_t clean_out;	/* swap-outs that reused a kept slot (no copy, no write) */
	uint64_t pages_in;	/* pages read back */
	uint64_t bytes_out, bytes_in;
	uint64_t failures; /* I/O errors */
	uint64_t direct;   /* 1: a file tier opened with O_DIRECT */
};

/*
 * The swap tiers (SWAP; ns NULL or "": of every namespace) as an array of *nr entries in
 * *list, malloc'd: the caller frees it. 0 tiers is not an error. -EBADMSG: a record the
 * library cannot read.
 */
int kvmm_admin_swap_tiers(kvmm_admin_t *admin, const char *ns, struct kvmm_admin_tier **list,
			  unsigned int *nr);

/* ---- Write verbs --------------------------------------------------------------------- */

/* Set a namespace's limits (LIMIT): the fields req->valid names. -ENOENT: no such namespace. */
int kvmm_admin_limit(kvmm_admin_t *admin, const struct kvmm_limit_req *req);
/*
 * Create, change or delete a namespace while the daemon runs (@op KVMM_OP_NS_CREATE,
 * KVMM_OP_NS_SET or KVMM_OP_NS_DELETE; the fields of struct kvmm_ns_req that req->valid
 * names).  -EINVAL for another op, -ENOENT, -EEXIST, -ENOSPC (no room in the pool), -EBUSY
 * (NS_DELETE: clients attached without KVMM_NS_F_FORCE, or the last namespace).
 */
int kvmm_admin_ns(kvmm_admin_t *admin, unsigned int op, const struct kvmm_ns_req *req);
/* Drop unmapped cached pages (KVMM_DROP_F_*); *nr_dropped (may be NULL) receives how many. */
int kvmm_admin_drop_caches(kvmm_admin_t *admin, uint32_t flags, uint64_t *nr_dropped);
/* Reclaim up to nr_frames frames (KVMM_RECLAIM_F_*); *nr_reclaimed (may be NULL): how many. */
int kvmm_admin_reclaim(kvmm_admin_t *admin, uint64_t nr_frames, uint32_t flags,
		       uint64_t *nr_reclaimed);
/* Add a swap tier (SWAPON) / bring a tier's pages back and remove it (SWAPOFF). */
int kvmm_admin_swapon(kvmm_admin_t *admin, const struct kvmm_swapon_req *req);
int kvmm_admin_swapoff(kvmm_admin_t *admin, const struct kvmm_swapoff_req *req);
/*
 * Arm (or, "POINT off", disarm) a swap fault point: spec as kvmmctl fault takes it
 * ("swap.write nth=3 mode=short times=1"), in namespace ns (NULL or "": every namespace).
 */
int kvmm_admin_fault_inject(kvmm_admin_t *admin, const char *ns, const char *spec);

/* ---- Trace --------------------------------------------------------------------------- */

/*
 * Subscribe this handle to the daemon's trace events (TRACE with KVMM_ADMIN_F_FOLLOW): flags
 * KVMM_ADMIN_F_JSON for JSON Lines, client 0 or one client's id, events a mask of event types
 * (1 << type, kvmm_admin_trace_event(); 0: all). Waits for the daemon's acknowledgement. The
 * handle then serves only kvmm_admin_trace_next until it is closed.
 */
int kvmm_admin_trace_follow(kvmm_admin_t *admin, uint32_t flags, uint64_t client, uint32_t events);
/*
 * The next batch of trace lines of a subscription, malloc'd and NUL-terminated in *text (the
 * caller frees it), waiting up to timeout_ms (-1: for ever). -ETIMEDOUT (nothing came),
 * -EINTR (a signal arrived: check your flags and call again), -ESHUTDOWN (the daemon is
 * shutting down), -ECONNRESET (the daemon closed the connection), the daemon's status.
 */
int kvmm_admin_trace_next(kvmm_admin_t *admin, int timeout_ms, char **text);
/* Trace event types (the bits of the TRACE mask): the type named name, or -EINVAL. */
int kvmm_admin_trace_event(const char *name);
/* The name of trace event type type ("alloc", "swap-out", ...), NULL past the last one. */
const char *kvmm_admin_trace_event_name(unsigned int type);

/* ---- Reading tagged text ------------------------------------------------------------- */

/*
 * The number after "name:" on the first line of text that starts with it ("FramesFree:  12"),
 * in *value. 0, or -ENOENT when no line has it, -ERANGE when it is not a number.
 */
int kvmm_admin_value(const char *text, const char *name, int64_t *value);
/*
 * Iterate the records labelled label ("Namespace", "Client", "Seq", "Pte", "Tier", ...):
 * for (l = NULL; (l = kvmm_admin_next(text, "Client", l));). Each is a pointer to the start
 * of its line in text; NULL after the last.
 */
const char *kvmm_admin_next(const char *text, const char *label, const char *prev);
/*
 * The value of " key=" on the record line at line (up to its newline), copied NUL-terminated
 * into buf (cut to len - 1 bytes). Returns the value's length, or -ENOENT ("" in buf) when
 * the line has no such key.
 */
int kvmm_admin_field(const char *line, const char *key, char *buf, size_t len);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* KVMM_RUNTIME_KVMM_ADMIN_H */
