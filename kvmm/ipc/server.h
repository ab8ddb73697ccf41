/* SPDX-License-Identifier: MIT */
/*
 * kvmm/ipc/server.h - the control-plane server of kvmmd: what kvmmd's main (kvmm/kvmmd.c)
 * calls to serve the SOCK_SEQPACKET protocol of uapi/kvmm.h.  kvmmd parses its flags and
 * config file into a struct kvmm_server_config, creates the server (one pool per namespace,
 * the listening socket), runs its single-threaded epoll loop, and stops it from a signal
 * handler.  The wire protocol as built is described in
 * Documentation/userspace-api/protocol.md.
 */
#ifndef KVMM_IPC_SERVER_H
#define KVMM_IPC_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvmm/remote.h"
#include "uapi/kvmm.h"

struct kvmm_backend_ops;
struct kvmm_backend_ctx;
struct kvmm_pool;
struct kvmm_server;

#define KVMM_NS_MAX_IDS 16

/* One namespace from the config file.  Namespaces are physically partitioned: one pool each. */
struct kvmm_ns_config {
	char name[KVMM_NAME_LEN]; /* kvmm_name_check(), unique */
	uint32_t nframes;	  /* frames of this namespace's pool */
	uint32_t limit;		  /* frames, 0 = nframes (memcg's max) */
	uint32_t min, low;	  /* protections in frames, 0 = none (struct kvmm_ns) */
	int priority;
	/*
	 * Who may ATTACH: a peer (SO_PEERCRED) whose uid is listed, or whose primary or
	 * supplementary gid is listed.  Both lists empty: the daemon's owner (its effective
	 * uid) only.  Root (uid 0) may attach to every namespace.
	 */
	uid_t uids[KVMM_NS_MAX_IDS];
	unsigned int nr_uids;
	gid_t gids[KVMM_NS_MAX_IDS];
	unsigned int nr_gids;
	/* a provisioned page-cache secret (secret_file): shared through the remote tier */
	bool have_secret;
	uint64_t secret[2];
};

/*
 * The memfds of a backend instance's chunks, for SCM_RIGHTS: kvmm_host_backend_chunks() of
 * kvmm/backend/host.c.  Called once per namespace pool at kvmm_server_create(); the fds stay
 * owned by the backend.  A pool mirrored on several devices (be->nr_devices > 1, the cuda
 * backend's tensor-parallel group) has nr_chunks per device, member-major: member d's are
 * (*fds)[d * nr_chunks ...].  0 or -errno.
 */
typedef int (*kvmm_backend_chunks_fn)(struct kvmm_backend_ctx *be, const int **fds,
				      uint32_t *nr_chunks, uint64_t *chunk_size);

/*
 * Which member of a mirrored pool's device group has this device UUID (ATTACH with
 * KVMM_ATTACH_F_DEVICE): kvmm_cuda_backend_member().  The index, or -ENODEV.
 */
typedef int (*kvmm_backend_member_fn)(struct kvmm_backend_ctx *be, const uint8_t uuid[16]);

/* At most this many chunk fds per namespace (the kernel's SCM_MAX_FD is 253 per message). */
#define KVMM_SERVER_MAX_CHUNKS 253

/*
 * Swap of every namespace pool (Documentation/admin-guide/kvmmd.md "[swap]"): a host tier of
 * host_size bytes (priority 10) and a file tier (priority file_prio, default 5) of file_size
 * bytes at file, or at file.NS for each namespace when there are several; kvswapd per pool.
 */
#define KVMM_SERVER_MAX_FAULTS 4
struct kvmm_server_swap {
	uint64_t host_size;	  /* bytes per namespace pool, 0 = no host tier */
	char file[KVMM_PATH_LEN]; /* "" = no file tier */
	uint64_t file_size;
	int file_prio;
	uint32_t queue_depth; /* file tier io_uring depth, 0 = default */
	uint32_t prefetch;    /* readahead depth after a fault, with prefetch_set (else 2) */
	bool prefetch_set;
	bool no_kswapd;	     /* tests: no background reclaimer */
	bool reclaim_inline; /* drop-only reclaim in the loop (kvmm_kswapd_inline) */
	bool no_index;	     /* warm_restart = no: the file tier keeps no index */
	char fault[KVMM_SERVER_MAX_FAULTS][KVMM_FAULT_SPEC_LEN]; /* armed at start */
	unsigned int nr_fault;
};

#define KVMM_SERVER_MAX_RING_THREADS 64

struct kvmm_server_config {
	const char *socket_path;
	uint64_t page_size;
	uint64_t chunk_size; /* host backend: bytes per memfd chunk, a multiple of page_size;
			      * 0 = the backend's default */
	uint32_t wmark_min, wmark_low, wmark_high; /* 0 = defaults; applied to every pool */
	gid_t admin_gid;			   /* admin verbs: root or this group */
	bool have_admin_gid;
	/*
	 * NULL or &kvmm_host_backend_ops: the host backend, which the server configures with
	 * chunk_size itself.  Anything else (kvmm_mmap_backend_ops in tests) is used as is.
	 */
	const struct kvmm_backend_ops *backend;
	/*
	 * How to get a pool's chunk fds for ATTACH.  NULL: kvmm_host_backend_chunks() for a
	 * host-backend pool, and no fds for any other backend.
	 */
	kvmm_backend_chunks_fn chunks;
	/* NULL: an ATTACH naming a device gets -ENODEV unless it is a one-device pool's */
	kvmm_backend_member_fn member;
	/* STATUS's DeviceN lines: member n's ordinal and UUID (kvmm_cuda_backend_device()) */
	int (*device_info)(struct kvmm_backend_ctx *be, uint32_t member, int *ordinal,
			   uint8_t uuid[16]);
	const struct kvmm_ns_config *ns;
	unsigned int nr_ns; /* 1 .. KVMM_SERVER_MAX_NS */
	/*
	 * The frames the namespaces' pools may hold together (pool_size): a namespace created at
	 * run time takes what the others leave.  0: the sum of the configured namespaces'.
	 */
	uint64_t total_frames;
	uint32_t max_clients; /* 0 = KVMM_SERVER_DEFAULT_MAX_CLIENTS */
	/*
	 * Lock-out defences (a local user holding every connection must not shut out root or
	 * other users): connections one unprivileged uid may hold (0 = no cap); how long a
	 * connection may stay without HELLO (0 = KVMM_SERVER_DEFAULT_HELLO_MS).  Privileged
	 * peers (root, the daemon's own uid, the admin group) are never capped per uid and get
	 * KVMM_SERVER_ADMIN_RESERVE connections past max_clients.
	 */
	uint32_t max_clients_per_uid;
	uint32_t hello_timeout_ms;
	/*
	 * Ring worker threads (kvmm/ipc/ring_worker.c): each namespace's data-plane rings are
	 * polled by one of them, so namespaces run in parallel.  0: the event loop polls every
	 * ring itself.  At most KVMM_SERVER_MAX_RING_THREADS.
	 */
	uint32_t ring_threads;
	/*
	 * The ring workers' nice value (-20..19), and whether the admin set it: a default that
	 * the daemon may not take (no CAP_SYS_NICE) is logged at info level, a set one warned of.
	 */
	int ring_nice;
	bool ring_nice_set;
	/* the socket file's mode (0 = 0666, the library's default) and group */
	uint32_t socket_mode;
	gid_t socket_gid;
	bool have_socket_gid;
	/*
	 * Prometheus /metrics on "ADDR:PORT" (IPv4, e.g. "127.0.0.1:9477"; port 0 picks one,
	 * logged); NULL or "" = off.  kvmm/ipc/metrics.c.
	 */
	const char *metrics_addr;
	uint32_t trace_entries; /* trace ring records, 0 = KVMM_SERVER_DEFAULT_TRACE */
	/*
	 * When the ring records (kvmm_trace_ring installed): KVMM_SERVER_TRACE_ALWAYS (0, a
	 * flight recorder), _FOLLOW (while a TRACE follower is subscribed), _OFF (no ring).
	 */
	unsigned int trace_mode;
	struct kvmm_server_swap swap;
	/* [remote]: the remote tier, for the namespaces with a secret (kvmm/ipc/remote.c) */
	struct {
		bool enabled;
		struct kvmm_remote_config cfg;
	} remote;
};

#define KVMM_SERVER_DEFAULT_TRACE 16384
#define KVMM_SERVER_TRACE_ALWAYS 0
#define KVMM_SERVER_TRACE_FOLLOW 1
#define KVMM_SERVER_TRACE_OFF 2
#define KVMM_SERVER_MAX_NS 32 /* namespaces at once (= KVMM_CONFIG_MAX_NS) */

#define KVMM_SERVER_DEFAULT_MAX_CLIENTS 1024
#define KVMM_SERVER_DEFAULT_HELLO_MS 5000
#define KVMM_SERVER_ADMIN_RESERVE 16

/*
 * Create the pools and namespaces and bind the socket (cfg->socket_mode, 0666 when 0, and
 * cfg->socket_gid's group; a stale socket file is
 * removed only when nobody answers a connect on it).  The config is copied; nothing in it
 * need outlive the call.  0 or -errno: -EINVAL (bad config), -EADDRINUSE (a daemon listens
 * on the path), -EEXIST (the path is not a socket), -ENAMETOOLONG, -E2BIG (too many chunks),
 * -ENOMEM, or what socket calls and the backend return.
 */
int kvmm_server_create(const struct kvmm_server_config *cfg, struct kvmm_server **out);
/* Serve until kvmm_server_stop(): 0, or -errno if the loop itself failed. Call once. */
int kvmm_server_run(struct kvmm_server *srv);
/*
 * Ask the loop to stop: it stops accepting, sends every client a SHUTDOWN event, tears them
 * down and returns 0.  Async-signal-safe (one eventfd write); may come before run().
 */
void kvmm_server_stop(struct kvmm_server *srv);
/* Close the socket (unlinking its path), destroy every pool.  NULL is a no-op. */
void kvmm_server_destroy(struct kvmm_server *srv);

/* Event counters, shown by kvmmctl status; every field only grows, but clients. */
struct kvmm_server_stats {
	uint64_t accepted;	     /* connections accepted */
	uint64_t refused;	     /* connections refused: max_clients or a uid's cap reached */
	uint64_t hellos;	     /* HELLOs answered with success */
	uint64_t version_mismatch;   /* HELLOs answered -EPROTO (then closed) */
	uint64_t attached;	     /* successful ATTACHes */
	uint64_t detached;	     /* address spaces torn down (DETACH, BYE, hang-up, stop) */
	uint64_t requests;	     /* records received */
	uint64_t errors;	     /* replies with status < 0 */
	uint64_t bad_msgs;	     /* of them: -EBADMSG, -EPROTO, -EOPNOTSUPP */
	uint64_t denied;	     /* of them: -EACCES */
	uint64_t hangups;	     /* sessions ended by the peer (hang-up, reset, BYE) */
	uint64_t hello_timeouts;     /* connections closed for saying no HELLO in time */
	uint64_t disconnect_bad;     /* sessions closed for too many bad messages */
	uint64_t disconnect_slow;    /* sessions closed because a reply could not be queued */
	uint64_t events;	     /* events sent (SHUTDOWN) */
	uint64_t fds_passed;	     /* descriptors sent with SCM_RIGHTS */
	uint64_t fds_dropped;	     /* descriptors a client sent us (closed unread) */
	uint64_t invariant_failures; /* kvmm_check_invariants() failures after a teardown */
	uint64_t clients;	     /* sessions open now */
};

/* A consistent-enough snapshot (each field read atomically), from any thread. */
void kvmm_server_get_stats(struct kvmm_server *srv, struct kvmm_server_stats *st);

/* A client sending this many malformed or unsupported messages is disconnected. */
#define KVMM_SERVER_MAX_BAD_MSGS 16

/*
 * Live namespaces (kvmm/ipc/ns_live.c): add namespace @c at run time (its pool, swap tiers,
 * kvswapd), from what the other namespaces leave of total_frames.  0, -EEXIST, -ENOSPC (no
 * room in the pool, or KVMM_SERVER_MAX_NS reached), -EINVAL, or what making the pool returns.
 * From the server's thread only (the loop, or before it runs).
 */
int kvmm_server_ns_add(struct kvmm_server *srv, const struct kvmm_ns_config *c);
/*
 * Change namespace @c->name's max, min, low, priority and access lists (its size cannot
 * change: a pool's frames are fixed).  0, -ENOENT, -EINVAL.
 */
int kvmm_server_ns_update(struct kvmm_server *srv, const struct kvmm_ns_config *c);
/*
 * Delete namespace @name: -EBUSY while a client is attached to it (or it is the last one),
 * unless @force, which first detaches its clients (each gets a SHUTDOWN event and is closed).
 * Its pool, swap tiers and cache go.  0, -ENOENT, -EBUSY.
 */
int kvmm_server_ns_delete(struct kvmm_server *srv, const char *name, bool force);
/*
 * Make the namespaces those of @cfg (a re-read config: SIGHUP): add the new ones, update the
 * changed ones, delete those it no longer names (not forced: one with clients stays, and is
 * reported).  Each change is logged.  The count of changes that failed, 0 when all went.
 */
int kvmm_server_ns_apply(struct kvmm_server *srv, const struct kvmm_ns_config *ns,
			 unsigned int nr_ns);
/*
 * Ask the loop to re-read its configuration: async-signal-safe like kvmm_server_stop().  The
 * loop calls @fn(srv, arg) (kvmmd's reload: re-read the file, kvmm_server_ns_apply()).
 */
void kvmm_server_reload(struct kvmm_server *srv);
void kvmm_server_set_reload(struct kvmm_server *srv, void (*fn)(struct kvmm_server *, void *),
			    void *arg);

/*
 * Debug and test accessors.  The pool of namespace @name (NULL if none); another thread
 * must hold pool->lock while it looks inside.
 */
struct kvmm_pool *kvmm_server_ns_pool(struct kvmm_server *srv, const char *name);

#endif /* KVMM_IPC_SERVER_H */
