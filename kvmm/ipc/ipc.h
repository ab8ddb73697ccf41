/* SPDX-License-Identifier: MIT */
/*
 * kvmm/ipc/ipc.h - what the files of kvmm/ipc/ share and nobody else sees: the server and
 * session structs, the message checks of proto.c, the handlers' shapes and the daemon's half
 * of the operation table (opdef.c), and the entry points between server.c (socket, epoll
 * loop, receive), dispatch.c (requests to their handlers by the table), session.c (the
 * per-client state machine, sending, the session and sequence ops), ring.c (the data plane)
 * and admin.c (the admin verbs).  Calls go one way: server.c -> dispatch.c -> the handlers
 * (session.c, admin*.c, swapd.c) -> ring.c, snapshot.c, metrics.c; ring.c runs SQEs and
 * metrics.c the trace pump through pointers given at create, never by calling up.
 *
 * Session state machine (one per connection):
 *
 *   NEW --HELLO ok--> READY --ATTACH ok--> ATTACHED --DETACH--> READY
 *    |                  |                      |
 *    +--HELLO -EPROTO, BYE, hang-up, too many bad messages, slow, stop--> (closed)
 *
 * NEW accepts only HELLO (anything else: -EPROTO); READY accepts ATTACH, PING, BYE and the
 * admin verbs; ATTACHED accepts everything.  Memory ops outside ATTACHED get -ENOTCONN.
 */
#ifndef KVMM_IPC_IPC_H
#define KVMM_IPC_IPC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "hashtable.h"
#include "list.h"
#include "kvmm/mm.h"
#include "kvmm/backend/host.h"
#include "kvmm/ipc/server.h"
#include "uapi/kvmm.h"

enum kvmm_session_state {
	KVMM_SESSION_NEW,      /* connected, no HELLO yet */
	KVMM_SESSION_READY,    /* version agreed */
	KVMM_SESSION_ATTACHED, /* has an address space in a namespace */
	KVMM_SESSION_STATE_COUNT,
};

const char *kvmm_session_state_name(enum kvmm_session_state s);

/* One namespace: its pool (holding exactly one struct kvmm_ns) and its chunk fds. */
struct kvmm_ipc_ns {
	struct kvmm_ns_config cfg;
	struct kvmm_pool *pool;
	struct kvmm_ns *ns;
	uint32_t id;	     /* 1-based index, attach_rep.ns_id */
	const int *fds;	     /* nr_devices * nr_chunks, member-major */
	uint32_t nr_chunks;  /* per device */
	uint32_t nr_devices; /* devices mirroring each frame (the pool's backend) */
	uint64_t chunk_size;
	uint32_t nr_clients; /* sessions attached */
	/* the ring worker serving this namespace's rings (ring_worker.c), NULL: none yet */
	struct kvmm_ring_worker *rw;
	uint32_t nr_rw_sessions; /* of its sessions on rw (thread 0 only) */
};

/*
 * The rings' side of an event loop: the main loop's (struct kvmm_server.loop) or a ring
 * worker's.  Only the thread running that loop reads or writes it.
 */
struct kvmm_ring_loop {
	uint64_t last_work;	/* CLOCK_MONOTONIC of the last ring work (spin window) */
	uint64_t last_yield_ns; /* and of the spin's last sched_yield */
	uint32_t cpu;		/* the loop's CPU plus one, as the SQs' cpu hints say */
	/*
	 * The load hint (every SQ's load word): the clients served in the last load window
	 * (KVMM_LOAD_WINDOW_NS) plus one for this loop's thread.  win_count counts them as the
	 * window goes, a session once (struct kvmm_session.load_win); win_id numbers windows.
	 */
	uint32_t load;
	uint32_t win_id;
	uint32_t win_count;
	uint64_t win_start; /* last_work when the window opened */
	bool yield_soon;    /* a completed client waits on the loop's CPU: let it run */
	uint8_t *rx;	    /* KVMM_MSG_MAX bytes of scratch for an SQE's payload */
	uint8_t *tx;	    /* and for its reply */
};

/*
 * A ring worker (ring_worker.c, kvmmd.conf ring_threads): a thread polling the rings of the
 * sessions of the namespaces given to it, so that namespaces run on several CPUs at once.
 * The main loop keeps the sockets, admin, timers and session lifetimes.
 */
struct kvmm_ring_worker {
	struct kvmm_server *srv;
	unsigned int index;
	pthread_t thread;
	bool started;
	int stop;      /* atomic: leave the loop */
	bool spinning; /* holds one of srv->rw_max_spinning */
	int nice;      /* the nice value it runs at (atomic: STATUS reads it) */
	int ready;     /* atomic: named and at its nice value (kvmm_ring_workers_start waits) */
	int epoll_fd;  /* its sessions' doorbells and stop_fd */
	int stop_fd;   /* eventfd: wakes it to see stop */
	/*
	 * Held by the worker across each poll round; the main loop takes it to add or remove a
	 * session, so a session never goes while the worker looks at it.  Taken before any
	 * pool lock, never after one.
	 */
	pthread_mutex_t lock;
	struct list_head sessions; /* struct kvmm_session.rw_node */
	uint32_t nr_sessions;
	uint64_t requests; /* SQEs it ran (atomic: STATUS reads it) */
	struct kvmm_ring_loop loop;
};

/*
 * One SEQ_PIN_RANGE (or SEQ_PIN_FAR) pin: blocks [block, block + nr_blocks), the frames it
 * pinned and, a far pin, the slots of tier @far it pinned in place.
 */
struct kvmm_range_pin {
	struct kvmm_range_pin *next;
	uint32_t block;
	uint32_t nr_blocks;
	uint32_t nr_frames;
	uint32_t nr_far;
	struct kvmm_swap_tier *far; /* a far pin's tier (swapoff waits for its pins), or NULL */
	uint64_t *slots;	    /* nr_far slots of @far */
	uint32_t frames[];	    /* nr_frames */
};

/* A client's sequence: the core sequence plus its pin state. */
struct kvmm_ipc_seq {
	struct hlist_node node; /* in session->seqs, keyed by id */
	uint64_t id;		/* per session, from 1, never reused in the session */
	struct kvmm_seq *seq;
	uint32_t pin_depth; /* PINs not yet UNPINned */
	uint32_t nr_pinned; /* frames in pinned[] */
	uint32_t *pinned;   /* frames whose pincount the pins raised (set at first PIN) */
	struct kvmm_range_pin *ranges; /* SEQ_PIN_RANGE pins, latest first */
	uint32_t nr_ranges;	       /* in ranges */
	uint32_t batch_mark;	       /* scratch of one PIN/UNPIN batch */
	uint32_t pt_slot;	       /* data plane: page-table mirror slot + 1, 0 = none */
	struct kvmm_session *sess;     /* its session (reclaim's hooks find it through seq->priv) */
	bool preempted;		       /* OOM victim: ops on it get -KVMM_EPREEMPTED (swapd.c) */
	bool preempt_sent;	       /* the PREEMPT event went out */
	uint32_t preempt_frames;       /* frames it held when chosen */
	uint32_t preempt_reason;       /* enum kvmm_preempt_reason: OOM, or CORRUPT (-KVMM_ELOST) */
};

struct kvmm_session {
	struct list_head node; /* in server->sessions */
	struct kvmm_server *srv;
	int fd;
	uint32_t id;
	enum kvmm_session_state state;
	bool dead; /* close at the end of this event */
	/*
	 * Over its uid's connection cap (server.c): its first record is answered -EUSERS and
	 * the connection closed, so the client reads why instead of a bare hang-up.
	 */
	bool refused;
	uint64_t accept_ns; /* when it connected: the HELLO deadline runs from here */
	struct ucred cred;
	gid_t groups[64]; /* supplementary groups (SO_PEERGROUPS), primary first */
	unsigned int nr_groups;
	char name[KVMM_NAME_LEN];
	uint16_t abi;	   /* agreed version */
	uint64_t features; /* granted */

	struct kvmm_ipc_ns *ns; /* ATTACHED */
	uint32_t device;	/* ATTACHED: the member of ns's device group it maps */
	struct kvmm_aspace *as;
	struct kvmm_magazine mag;
	struct kvmm_htable seqs;
	uint32_t nr_seqs;
	uint64_t next_seq;
	struct kvmm_dp *dp; /* data plane (ring.c), NULL without one */
	/*
	 * The ring worker polling dp (NULL: the main loop does), set when dp is made; rw_node is
	 * in its list while rw_linked.  ring_bad (atomic): the worker found the ring corrupt, the
	 * main loop closes the session.
	 */
	struct kvmm_ring_worker *rw;
	struct list_head rw_node;
	bool rw_linked;
	uint32_t load_win; /* its loop's win_id + 1 when last counted for the load hint */
	int ring_bad;

	uint32_t nr_bad;
	uint64_t nr_requests;
	bool preempt_pending; /* a sequence was chosen as OOM victim: event to send (swapd.c) */
	/* a PREFIX_LOOKUP waiting for the remote tier; its socket is not read (remote_ipc.c) */
	struct kvmm_ipc_park *park;

	/* TRACE subscription (admin.c, kvmm/ipc/obs.h): pushed by the trace pump */
	bool trace_follow;
	bool trace_json;
	uint32_t trace_mask;   /* event types wanted (bit 1 << type), 0 = all */
	uint32_t trace_client; /* 0 = all */
	uint64_t trace_req_seq;
	uint64_t trace_next;	/* next ring record to send */
	uint64_t trace_lost;	/* overwritten in the ring before we sent them */
	uint64_t trace_dropped; /* did not fit in the socket: dropped, never waited for */
};

/*
 * dead: a ring worker's PREEMPT send may find the socket gone (kvmm_session_send) while the
 * main loop looks: read and set atomically.
 */
static inline bool kvmm_session_dead(const struct kvmm_session *s)
{
	return __atomic_load_n(&s->dead, __ATOMIC_RELAXED);
}

static inline void kvmm_session_set_dead(struct kvmm_session *s)
{
	__atomic_store_n(&s->dead, true, __ATOMIC_RELAXED);
}

#define KVMM_SESSION_MAX_SEQS 65536

struct kvmm_server {
	struct kvmm_server_config cfg; /* copy; socket_path and ns point into this struct */
	char *socket_path;
	/*
	 * The namespaces, nr_ns of them in order of creation.  Each lives in its own allocation
	 * (sessions and hooks point at it), so one deleted at run time (ns_live.c) only shifts
	 * the pointers after it.
	 */
	struct kvmm_ipc_ns **ns;
	unsigned int nr_ns;
	uid_t owner_uid;
	struct kvmm_host_backend host; /* the pools' backend unless cfg->backend is another */
	struct kvmm_budget budget;     /* total_frames, shared by every namespace's pool */
	bool budget_init;

	int listen_fd;
	int epoll_fd;
	int stop_fd;   /* eventfd written by kvmm_server_stop() */
	int reload_fd; /* eventfd written by kvmm_server_reload() (SIGHUP) */
	void (*reload_fn)(struct kvmm_server *srv, void *arg);
	void *reload_arg;
	int reserve_fd; /* spare fd given up to accept-and-close when out of fds */
	bool socket_bound;

	struct list_head sessions;
	uint32_t next_client_id;
	uint64_t start_ns;	    /* CLOCK_MONOTONIC at create */
	uint64_t ring_spin_ns;	    /* the spin window: KVMM_RING_SPIN_NS, or $KVMMD_RING_SPIN_NS */
	uint64_t spin_sys_ns;	    /* while spinning, a system call at most this often */
	uint64_t last_sys_ns;	    /* CLOCK_MONOTONIC of the spin's last epoll_wait */
	struct kvmm_ring_loop loop; /* the main loop's rings (those of sessions without rw) */
	/* ring workers (ring_worker.c), nr_rw of them; none: the main loop polls every ring */
	struct kvmm_ring_worker *rw;
	unsigned int nr_rw;
	/*
	 * Workers spinning idle (atomic) and how many may at once: one per two CPUs, so that
	 * spinning workers leave the clients, the ones they wait for, CPUs to run on.
	 */
	int rw_spinning;
	int rw_max_spinning;
	int kick_fd;	  /* eventfd: a worker asks the main loop to look (preempts, bad rings) */
	int kick_pending; /* atomic: kick_fd was written and not yet read */
	uint64_t hello_next_ns; /* earliest HELLO deadline of a waiting connection, 0: none */

	struct kvmm_server_stats stats; /* updated with relaxed atomics (read by other threads) */

	uint8_t *rx; /* KVMM_MSG_MAX bytes */
	uint8_t *tx; /* KVMM_MSG_MAX bytes */

	struct kvmm_obs *obs; /* trace ring, trace pump and /metrics (kvmm/ipc/obs.h) */
	/*
	 * How the data plane runs an SQE: dispatch.c's kvmm_ipc_ring_exec(), set at create.  A
	 * pointer so that ring.c, which the handlers call, never calls up into the dispatch.
	 */
	int (*ring_exec)(struct kvmm_session *s, unsigned int op, const void *p, size_t plen,
			 void *rp, size_t *rlen);
	int preempt_pending;	    /* some session has a PREEMPT to send (atomic, swapd.c) */
	struct kvmm_remote *remote; /* the remote tier, NULL when not configured */
};

#define KVMM_STAT_INC(srv, field) __atomic_fetch_add(&(srv)->stats.field, 1, __ATOMIC_RELAXED)
#define KVMM_STAT_ADD(srv, field, n) __atomic_fetch_add(&(srv)->stats.field, (n), __ATOMIC_RELAXED)
#define KVMM_STAT_DEC(srv, field) __atomic_fetch_sub(&(srv)->stats.field, 1, __ATOMIC_RELAXED)

/* ---- the handlers' shapes (opdef.c) -------------------------------------------------- */

struct kvmm_out;

/* A request answered by its handler itself: session ops, admin write verbs. */
typedef void kvmm_ipc_handle_fn(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr);
/*
 * A memory op of an attached session, from the socket or the ring, pool lock held: checked
 * payload @p in; the reply payload goes to @rp (KVMM_MSG_PAYLOAD_MAX bytes), its length to
 * *rlen.  0 or -errno.
 */
typedef int kvmm_ipc_mem_fn(struct kvmm_session *s, unsigned int op, const void *p, void *rp,
			    size_t *rlen);
/* An admin read verb's report of the namespace @one (NULL: all) into @o; 0 or -errno. */
typedef int kvmm_ipc_report_fn(struct kvmm_server *srv, struct kvmm_ipc_ns *one,
			       const struct kvmm_admin_req *req, struct kvmm_out *o);
/* The variable part of a KVMM_PAYLOAD_VAR payload (@plen >= the fixed head): 0 or -EBADMSG. */
typedef int kvmm_ipc_check_fn(const void *payload, size_t plen);

/* ---- proto.c: message checks (pure functions, unit tested) -------------------------- */

/*
 * Check a request's payload (@plen bytes after the header) against its opcode's layout:
 * exact sizes, counts that match the trailing arrays.  0, -EBADMSG (wrong size, or a reply
 * or event opcode sent as a request) or -EOPNOTSUPP (an opcode this version does not know).
 */
int kvmm_ipc_check_payload(unsigned int op, const void *payload, size_t plen);
/*
 * Check a whole received record of @len bytes: kvmm_msg_hdr_check(), then the request
 * flags (no MORE, no FDS from a client) and the payload.  Same returns plus -EPROTO.
 */
int kvmm_ipc_check_request(const void *rec, size_t len);
/*
 * The reply header for a record that failed the checks: it echoes the opcode and seq when
 * the record is long enough to hold them (0 otherwise).
 */
void kvmm_ipc_error_hdr(struct kvmm_msg_hdr *rep, const void *rec, size_t len, int status);

/* ---- session.c ---------------------------------------------------------------------- */

/*
 * Send one record (header + payload, hdr->len set by the caller) with @nfds descriptors.
 * Never blocks: a peer whose socket buffer is full is marked dead (slow client).  0 or -errno.
 */
int kvmm_session_send(struct kvmm_session *s, const void *rec, size_t len, const int *fds,
		      unsigned int nfds);
/* Reply to @req with status and @plen payload bytes. */
int kvmm_session_reply(struct kvmm_session *s, const struct kvmm_msg_hdr *req, int status,
		       const void *payload, size_t plen);

int kvmm_session_init(struct kvmm_session *s);
/* Drop pins, free sequences, destroy the address space, drain the magazine; -> READY. */
void kvmm_session_detach(struct kvmm_session *s);
void kvmm_session_fini(struct kvmm_session *s);
bool kvmm_session_is_admin(const struct kvmm_session *s);
/* The session's sequence @id, or NULL: a client only ever names its own. */
struct kvmm_ipc_seq *kvmm_session_seq_find(struct kvmm_session *s, uint64_t id);

/* The session ops' handlers (opdef.c's rows): each answers the request itself. */
kvmm_ipc_handle_fn kvmm_session_op_hello, kvmm_session_op_bye, kvmm_session_op_attach,
	kvmm_session_op_far_map, kvmm_session_op_detach, kvmm_session_op_ping;
/*
 * The memory ops' handlers (opdef.c's rows), run by dispatch.c with the pool lock held:
 * checked payload in, reply payload built in @rp, its length in *rlen.  0 or -errno.
 */
kvmm_ipc_mem_fn kvmm_session_op_nop, kvmm_session_op_seq_create, kvmm_session_op_seq_append,
	kvmm_session_op_seq_fork, kvmm_session_op_seq_truncate, kvmm_session_op_seq_free,
	kvmm_session_op_prefix_lookup, kvmm_session_op_seal, kvmm_session_op_pin,
	kvmm_session_op_seq_blocks, kvmm_session_op_prefetch, kvmm_session_op_seq_prompt,
	kvmm_session_op_seq_seal_free, kvmm_session_op_seq_salt, kvmm_session_op_pin_range,
	kvmm_session_op_pin_far;

/* ---- ring.c: the data plane (uapi/kvmm.h "Data plane") ------------------------------- */

struct kvmm_dp;

/*
 * Create @s's shared region and doorbell (ring_entries 0 = default), register the doorbell
 * with the server's epoll (tagged pointer: the session's address | 1) and give back the two
 * descriptors to pass (still owned by the data plane) and the reply's sizes.  Pool lock held.
 */
int kvmm_dp_create(struct kvmm_session *s, uint32_t ring_entries, int fds[2],
		   struct kvmm_attach_rep *rep);
/* Return every frame it holds, unmap, close.  Pool lock held; NULL dp is a no-op. */
void kvmm_dp_destroy(struct kvmm_session *s);
/*
 * Consume up to @budget SQEs (fewer when the CQ is full: backpressure), post their CQEs,
 * follow the magazine (pops, returns, top-up below the low mark), wake a waiting client.
 * Returns the work done (SQEs consumed plus magazine frames moved; 0 = idle), or -EPROTO
 * when the client corrupted its ring indexes or sent too many bad SQEs (close it).
 */
int kvmm_dp_poll(struct kvmm_session *s, unsigned int budget);
/* Whether the daemon has work there now: SQ entries the CQ has room for, or magazine work. */
bool kvmm_dp_runnable(struct kvmm_session *s);
/* Whether the SQ holds entries at all (runnable or held back by a full CQ). */
bool kvmm_dp_pending(struct kvmm_session *s);
/* Ring @s's doorbell from the daemon's side: the loop polling it wakes up. */
void kvmm_dp_kick(struct kvmm_session *s);
/* Set or clear KVMM_SQ_F_NEED_WAKEUP. */
void kvmm_dp_need_wakeup(struct kvmm_session *s, bool on);
/* Publish the loop's CPU (plus one) in the SQ's cpu hint (struct kvmm_shm_ring). */
void kvmm_dp_set_cpu(struct kvmm_session *s, uint32_t cpu);
/* Publish how many clients the last busy round served, plus one (the SQ's load hint). */
void kvmm_dp_set_load(struct kvmm_session *s, uint32_t load);
/*
 * The SQE parked by kvmm_ipc_remote_park() is answered (pool lock held): its CQE goes out
 * and the ring's next SQEs run again.
 */
void kvmm_dp_park_done(struct kvmm_session *s, uint64_t user_data, unsigned int op, int res,
		       const void *rep, size_t rlen);
/* Mirror hooks, pool lock held: @is changed from block @from on / is going away. */
void kvmm_dp_seq_update(struct kvmm_session *s, struct kvmm_ipc_seq *is, uint32_t from);
void kvmm_dp_seq_gone(struct kvmm_session *s, struct kvmm_ipc_seq *is);
/* MAG_REFILL / MAG_DRAIN (pool lock held); -EOPNOTSUPP without a data plane. */
int kvmm_dp_mag_op(struct kvmm_session *s, unsigned int op, const void *p, void *rp, size_t *rlen);
/*
 * SEQ_APPEND_FRAMES (pool lock held): append @n tokens (@ids) to @seq with the @nr_frames
 * frames the client named as its new blocks, each checked to be one it popped from its
 * magazine (-EINVAL otherwise, also without a data plane); nothing changes on error.
 */
int kvmm_dp_append_frames(struct kvmm_session *s, struct kvmm_seq *seq, uint32_t n,
			  const uint32_t *ids, const uint32_t *frames, uint32_t nr_frames);

#define KVMM_RING_BURST 256	    /* SQEs of one client consumed per loop round */
#define KVMM_RING_BLOCKED_MS 5	    /* re-poll a CQ-full client at least this often */
#define KVMM_LOAD_WINDOW_NS 1000000 /* the load hint counts the clients served this long */

/* ---- ring_worker.c: ring workers (kvmmd.conf ring_threads) --------------------------------- */

/* Start @n ring workers (0: none, the main loop polls every ring).  0 or -errno. */
int kvmm_ring_workers_start(struct kvmm_server *srv, unsigned int n);
/* Stop and join them (before the sessions close); kvmm_ring_workers_free() after. */
void kvmm_ring_workers_stop(struct kvmm_server *srv);
void kvmm_ring_workers_free(struct kvmm_server *srv);
/*
 * At kvmm_dp_create(): choose the loop that will poll @s's rings (the worker of its
 * namespace, or the least busy one for a namespace's first ring) and return the epoll fd its
 * doorbell goes into.  Pool lock held; main loop.
 */
int kvmm_ring_worker_pick(struct kvmm_session *s);
/* After the attach was answered: the worker starts polling @s.  Main loop, no pool lock. */
void kvmm_ring_worker_add(struct kvmm_session *s);
/* Before @s's data plane goes: the worker stops polling it.  Main loop, no pool lock. */
void kvmm_ring_worker_del(struct kvmm_session *s);
/* A worker's round (ring.c's kvmm_dp_poll) saw OOM victims: its sessions' events now. */
void kvmm_ring_worker_preempt(struct kvmm_ring_worker *w);
/* Ask the main loop to look at preempts and bad rings (any thread). */
void kvmm_ipc_kick(struct kvmm_server *srv);
/*
 * A loop's spin decision after a poll round that did (@busy) or did not find work: true
 * while it should poll again without sleeping (it yields the CPU now and then itself).
 */
bool kvmm_ring_loop_spin(struct kvmm_server *srv, struct kvmm_ring_loop *l, bool busy);
/* A poll round of @l served @s: count it for the load hint (once per window). */
void kvmm_ring_loop_served(struct kvmm_ring_loop *l, struct kvmm_session *s);
/*
 * After a busy poll round: the new load hint when a load window closed and the hint changed
 * (the caller writes it into its sessions' SQs), else 0.
 */
uint32_t kvmm_ring_loop_load(struct kvmm_ring_loop *l);

/* ---- swapd.c: swap tiers, kvswapd, OOM preemption ---------------------------------------- */

/* At create, per namespace pool: hooks, the configured tiers and fault points, kvswapd. */
int kvmm_swapd_setup(struct kvmm_server *srv, struct kvmm_ipc_ns *n);

/* ---- namespaces' pools (server.c) and live namespaces (ns_live.c) --------------------- */

/* Make @n's pool, namespace, swap tiers, kvswapd, chunk fds from n->cfg.  0 or -errno. */
int kvmm_ipc_ns_open(struct kvmm_server *srv, struct kvmm_ipc_ns *n);
/* A namespace's settings are sound on their own (name, sizes, limits, ids).  0 or -EINVAL. */
int kvmm_ipc_ns_config_check(const struct kvmm_ns_config *c);
/* NS_CREATE, NS_SET, NS_DELETE */
void kvmm_admin_ns(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr);
/* Loop: send pending PREEMPT events, free victims that are not pinned. Cheap when none. */
void kvmm_swapd_preempt_run(struct kvmm_server *srv);
/* The same for one session (takes its pool lock): a ring worker's own sessions. */
void kvmm_swapd_preempt_session(struct kvmm_session *s);
/* What an op on preempted @is fails with: -KVMM_ELOST when a page was corrupt, else EPREEMPTED. */
static inline int kvmm_ipc_seq_preempt_err(const struct kvmm_ipc_seq *is)
{
	return is->preempt_reason == KVMM_PREEMPT_CORRUPT ? -KVMM_ELOST : -KVMM_EPREEMPTED;
}
/* Admin verbs (the pool locks are taken inside): 0 or -errno. */
int kvmm_swapd_swapon(struct kvmm_server *srv, struct kvmm_ipc_ns *n,
		      const struct kvmm_swapon_req *req);
int kvmm_swapd_swapoff(struct kvmm_server *srv, struct kvmm_ipc_ns *n, unsigned int tier);
/* Rewrite every mirrored table of the namespace's sessions (after a swapoff). */
void kvmm_swapd_mirror_all(struct kvmm_server *srv, struct kvmm_ipc_ns *n);

/* ---- remote_ipc.c: the remote tier ------------------------------------------------------ */

/* At create, after the pools: provisioned secrets, the tier and its worker.  0 or -errno. */
int kvmm_ipc_remote_setup(struct kvmm_server *srv);
void kvmm_ipc_remote_destroy(struct kvmm_server *srv);
/*
 * After a PREFIX_LOOKUP or SEQ_PROMPT answered @rp locally (pool lock held): when the prompt
 * has full blocks left and the namespace shares, ask the tier and park the request (true: do
 * not answer now).  @hdr: the socket request; NULL: the ring's SQE of @user_data, which the
 * ring answers with kvmm_dp_park_done().  false: answer as usual.
 */
bool kvmm_ipc_remote_park(struct kvmm_session *s, unsigned int op, const void *p, const void *rp,
			  const struct kvmm_msg_hdr *hdr, uint64_t user_data);
/* The tier's eventfd fired: map what came back, answer the parked lookups. */
void kvmm_ipc_remote_event(struct kvmm_server *srv);
/* The session goes: forget its parked lookup. */
void kvmm_ipc_remote_cancel(struct kvmm_session *s);
/*
 * The pool's demote hook (kvmm/mm.h struct kvmm_mm_hooks): with remote_policy = demote (or
 * both), a sealed page of a sharing namespace that leaves this machine's tiers is queued for
 * the tier.  Pool lock held; may run on kvswapd's thread.
 */
bool kvmm_ipc_remote_demote(struct kvmm_pool *pool, const struct kvmm_cache_ent *ent,
			    const void *bytes);
/* Whether evicted pages go to the remote tier (remote_policy demote or both). */
bool kvmm_ipc_remote_demotes(const struct kvmm_server *srv);
/* SEAL entered blocks [from, seq->nsealed) in the cache: store them (pool lock held). */
void kvmm_ipc_remote_seal(struct kvmm_session *s, struct kvmm_seq *seq, uint32_t from);

/* ---- admin.c: the admin verbs ------------------------------------------------------- */

/* A read verb: check the request, run @report, send the answer in as many records as needed. */
void kvmm_admin_read(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr,
		     kvmm_ipc_report_fn *report);
kvmm_ipc_report_fn kvmm_admin_status, kvmm_admin_meminfo, kvmm_admin_vmstat, kvmm_admin_buddyinfo,
	kvmm_admin_clients, kvmm_admin_namespaces, kvmm_admin_seqs, kvmm_admin_pagetable,
	kvmm_admin_lru, kvmm_admin_swap;
/* REMOTE: the remote tier's counters (remote_ipc.c) */
kvmm_ipc_report_fn kvmm_admin_remote;
/* The write verbs: each answers itself. */
kvmm_ipc_handle_fn kvmm_admin_limit, kvmm_admin_drop_caches, kvmm_admin_reclaim, kvmm_admin_swapon,
	kvmm_admin_swapoff, kvmm_admin_fault_inject;

/* ---- admin_trace.c: TRACE ------------------------------------------------------------ */

/* TRACE's report (a dump of the ring); the subscription of KVMM_ADMIN_F_FOLLOW is this: */
kvmm_ipc_report_fn kvmm_admin_trace;
/* Subscribe @s to new trace records; the reply (status 0, MORE) is the caller's to send. */
int kvmm_admin_trace_follow(struct kvmm_session *s, const struct kvmm_admin_req *req,
			    const struct kvmm_msg_hdr *hdr);

/* ---- opdef.c: the daemon's half of the operation table ------------------------------ */

/* How an op changes the client's page-table mirror (ring.c's copy of its block tables). */
enum kvmm_ipc_mirror {
	KVMM_MIRROR_NONE,   /* changes no table (SEQ_FREE clears its slot as it frees) */
	KVMM_MIRROR_NEW,    /* on success, the new sequence whose id starts the reply */
	KVMM_MIRROR_SEQ,    /* the sequence whose id starts the request, whole */
	KVMM_MIRROR_APPEND, /* same, from the reply's first_new_block on (whole on error) */
};

/*
 * One row per opcode, next to uapi/kvmm.h's row (KVMM_OPS) that holds the protocol facts.
 * A request op has exactly one of handle (answers on the socket itself), mem (the memory ops:
 * socket and ring, under the pool lock) or report (admin read verbs); PING has handle for
 * the socket and mem for the ring.
 */
struct kvmm_ipc_opdef {
	kvmm_ipc_handle_fn *handle;
	kvmm_ipc_mem_fn *mem;
	kvmm_ipc_report_fn *report;
	kvmm_ipc_check_fn *check; /* KVMM_PAYLOAD_VAR only */
	enum kvmm_ipc_mirror mirror;
};

/* The daemon's row of opcode @op (no reply bit), NULL when this version does not define it. */
const struct kvmm_ipc_opdef *kvmm_ipc_opdef(unsigned int op);

/* ---- dispatch.c: requests to their handlers ----------------------------------------- */

/* Handle one checked request record (kvmm_ipc_check_request()); answers it. */
void kvmm_ipc_dispatch(struct kvmm_session *s, const struct kvmm_msg_hdr *hdr);
/*
 * Run a memory op of an attached session with its checked payload, pool lock held, and keep
 * the page-table mirror in step (before the op is answered).  0 or -errno.
 */
int kvmm_ipc_mem_op(struct kvmm_session *s, unsigned int op, const void *p, void *rp, size_t *rlen);
/* An SQE the data plane copied out: check its payload, then kvmm_ipc_mem_op(). */
int kvmm_ipc_ring_exec(struct kvmm_session *s, unsigned int op, const void *p, size_t plen,
		       void *rp, size_t *rlen);

#endif /* KVMM_IPC_IPC_H */
