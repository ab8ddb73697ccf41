/* SPDX-License-Identifier: MIT */
/*
 * runtime/libkvmm.h - what the files of libkvmm share and nothing outside the library sees:
 * the client handle, and the message layer of client.c (send one request, wait for the reply
 * with the same seq, park every other record that arrives meanwhile: async completions go to
 * the completion queue, events become event completions). Every function here expects the
 * caller to hold client->lock.
 */
#ifndef KVMM_RUNTIME_LIBKVMM_H
#define KVMM_RUNTIME_LIBKVMM_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "runtime/kvmm.h"

/* Shared between the library's files, never exported from libkvmm.so. */
#define KVMM_INTERNAL __attribute__((visibility("hidden")))

#define KVMM_DEFAULT_SOCKET "/run/kvmm/kvmmd.sock"
#define KVMM_XDG_SOCKET "kvmm/kvmmd.sock"

/*
 * client.c: the socket kvmm_attach and kvmm_admin_open use when given none ($KVMM_SOCKET, else
 * $XDG_RUNTIME_DIR/kvmm/kvmmd.sock, else /run/kvmm/kvmmd.sock) into buf. 0 or -ENAMETOOLONG.
 */
KVMM_INTERNAL int kvmm_socket_path_default(char *buf, size_t len);
/* client.c: this process's name in kvmmctl clients (the program's, cut to a kvmm name). */
KVMM_INTERNAL void kvmm_client_name(char name[KVMM_NAME_LEN]);

/* A request on the wire, waiting for its reply. */
struct kvmm_inflight {
	uint64_t seq;	    /* header seq of the request */
	uint64_t user_data; /* async: the sqe's */
	uint32_t op;	    /* async: enum kvmm_sqe_op */
	bool sync;	    /* a synchronous call waits for it (else: becomes a completion) */
	void *stash; /* sync: the whole reply record, when it came while waiting for another */
	size_t stash_len;
};

struct kvmm_client {
	pthread_mutex_t lock; /* serializes every call on the handle */
	int fd;		      /* the SOCK_SEQPACKET connection, -1 once closed */
	int err;	      /* 0, or why the connection is unusable (-ENOTCONN, -EBADMSG) */
	bool shutting_down;   /* SHUTDOWN event seen */
	pid_t pid;	      /* the process that attached: a forked child must not say BYE */

	/* from HELLO */
	uint16_t abi;
	uint64_t features;
	uint64_t page_size;
	uint32_t client_id;
	uint32_t max_msg;
	uint16_t backend;    /* enum kvmm_backend of the pool: host (mmap) or cuda (device) */
	uint32_t nr_devices; /* devices mirroring each frame */

	/* from ATTACH */
	uint32_t tokens_per_page;
	uint32_t bytes_per_token;
	uint64_t chunk_size;
	uint32_t nr_chunks;
	uint32_t ns_id;
	uint32_t nr_frames;    /* frames mapped at base */
	uint32_t device_index; /* the member of the device group mapped (0: host, one GPU) */
	void *base;	       /* frame n at base + n * page_size */
	size_t map_len;
	/* cuda backend (cuda_map.c): the chunks are mapped on a GPU instead; base stays NULL */
	struct kvmm_cuda_map *cuda;
	uint64_t devbase; /* CUdeviceptr of frame 0 */
	int cuda_device;  /* the ordinal in this process ($KVMM_CUDA_DEVICE, default 0; -1 none) */
	bool cuda_ro;	  /* mapped a frame a mapping, read-only: wprotect.c grants frames */
	void *shm;	  /* the data-plane region, when the daemon sends one */
	size_t shm_len;
	struct kvmm_dp_client *dp; /* its rings, mirror and magazine (ring.c); NULL: socket only */
	struct kvmm_wp *wp;	   /* read-only pages (wprotect.c); NULL: the pool is writable */
	int wp_off_reason;	   /* why wp is NULL: 0 (not asked for) or -errno */
	bool wp_want; /* protect at attach (no KVMM_ATTACH_NO_WPROTECT, $KVMM_WPROTECT) */
	/*
	 * The far window (far.c, kvmm_far_map): the pool's chunks then the host tier's arena,
	 * read-only; far_gen 0 when there is none (or the session it came from is gone).
	 */
	void *far;
	size_t far_len;
	uint64_t far_gen;
	uint32_t far_base;
	uint64_t far_pages;

	uint64_t next_seq; /* header seq of the next request, never 0 */

	/* async requests on the wire (unordered array, searched linearly: batches are small) */
	struct kvmm_inflight *inflight;
	unsigned int nr_inflight, inflight_cap;
	unsigned int nr_async; /* of them, submitted by kvmm_submit */

	/* completions and events not yet reaped: a ring of cq_cap entries */
	struct kvmm_cqe *cq;
	unsigned int cq_cap, cq_head, cq_count;
	uint64_t nr_events_dropped; /* events lost to a full queue */

	/* the record received last */
	unsigned char *rx;

	/* what kvmm_reattach attaches with again (reattach.c) */
	char sock_path[108]; /* resolved at attach ($KVMM_SOCKET etc. read once) */
	char ns[KVMM_NAME_LEN];
	struct kvmm_format fmt;
	uint32_t opt_flags; /* KVMM_ATTACH_* */
	uint32_t model_len;
	unsigned char model[KVMM_MODEL_ID_MAX];
	/*
	 * Stall detection (client.c): a call that waits deadline_ms for the daemon without a
	 * word from it gives the daemon up (-ETIMEDOUT, like a daemon gone); 0: waits forever.
	 * wait_ms is the socket's receive timeout now (deadline_ms, shorter for a reattach
	 * attempt), peer_pid kvmmd's pid from SO_PEERCRED (0: unknown).
	 */
	uint32_t deadline_ms;
	uint32_t wait_ms;
	pid_t peer_pid;
	/* why the handle cannot talk to kvmmd, or why its last reattach attempt failed */
	int cause;
	char cause_msg[256];
	bool gone;	     /* the daemon went away: the GONE event is queued, reattach may run */
	bool reattaching;    /* inside kvmm_reattach: no automatic attempt from within */
	uint64_t retry_ns;   /* KVMM_ATTACH_REATTACH: no attempt before this (CLOCK_MONOTONIC) */
	uint32_t backoff_ms; /* the gap after the next failed attempt */

	/* the sequences this handle holds (open addressing: 0 empty, UINT64_MAX deleted) */
	uint64_t *live;
	uint32_t live_cap, nr_live, nr_live_dead;
	bool live_incomplete; /* an id could not be recorded (no memory) */
	/* what the last reattach lost */
	uint64_t *lost;
	uint32_t nr_lost;
	bool lost_incomplete;
};

/*
 * A record being sent: the header is filled by kvmm_msg_send, the payload is up to three
 * parts (fixed struct, then variable arrays) so that token ids go straight from the caller's
 * array into the one sendmsg.
 */
struct kvmm_iov {
	const void *base;
	size_t len;
};

#define KVMM_IOV_MAX 3

/* Send one request of opcode op; returns the seq it was given (> 0) via *seq, or -errno. */
KVMM_INTERNAL int kvmm_msg_send(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *iov,
				unsigned int nr_iov, uint64_t *seq);
/* The same for an asynchronous request: its reply becomes a completion with user_data. */
KVMM_INTERNAL int kvmm_msg_send_tagged(struct kvmm_client *c, unsigned int op,
				       const struct kvmm_iov *parts, unsigned int nr_parts,
				       bool sync, uint32_t sqe_op, uint64_t user_data,
				       uint64_t *seq);
/*
 * Wait for the reply to seq. On success the reply is in c->rx (header then payload) and the
 * return value is its status (0 or -errno from the daemon); transport errors are negative too.
 * A successful reply with a payload shorter than rep_len is -EBADMSG; rep (may be NULL)
 * receives rep_len bytes of payload.
 */
KVMM_INTERNAL int kvmm_msg_wait(struct kvmm_client *c, uint64_t seq, void *rep, size_t rep_len);
/* Send and wait: one synchronous round trip. */
KVMM_INTERNAL int kvmm_msg_call(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *iov,
				unsigned int nr_iov, void *rep, size_t rep_len);
/*
 * Send and wait for a reply of any length (SEQ_PIN_FAR): its payload is left at c->rx +
 * KVMM_MSG_HDR_SIZE, *plen bytes, whether the rings' out area (KVMM_FEAT_RING_OUT) or the
 * socket carried it.  0 or -errno.
 */
KVMM_INTERNAL int kvmm_msg_call_var(struct kvmm_client *c, unsigned int op,
				    const struct kvmm_iov *iov, unsigned int nr_iov, size_t *plen);
/* @expr (an int) with the handle's lock held: the public calls' wrapper (seq.c, far.c). */
#define LOCKED(c, expr)                           \
	({                                        \
		int __ret;                        \
		pthread_mutex_lock(&(c)->lock);   \
		__ret = (expr);                   \
		pthread_mutex_unlock(&(c)->lock); \
		__ret;                            \
	})

/* Most descriptors one record can carry (the kernel's SCM_MAX_FD). */
#define KVMM_RX_FDS_MAX 253
/*
 * A payload-less request whose reply carries descriptors (FAR_MAP): rep as kvmm_msg_call's;
 * on success the caller owns the *nr_fds (at most max_fds, else -EBADMSG) in fds.
 */
KVMM_INTERNAL int kvmm_msg_call_fds(struct kvmm_client *c, unsigned int op, void *rep,
				    size_t rep_len, int *fds, unsigned int max_fds,
				    unsigned int *nr_fds);
/* Receive one record and dispatch it (async completion or event); blocks if block. */
KVMM_INTERNAL int kvmm_msg_pump(struct kvmm_client *c, bool block);
/* Payload bytes one request may carry with this daemon. */
KVMM_INTERNAL size_t kvmm_msg_payload_max(const struct kvmm_client *c);

/* PIN, UNPIN or PREFETCH of a batch, split into records (seq.c); caller holds c->lock. */
KVMM_INTERNAL int kvmm_seq_batch_locked(struct kvmm_client *c, unsigned int op,
					const uint64_t *seqs, uint32_t nr_seqs, uint32_t *done,
					struct kvmm_pin_rep *sum);

/* Append a completion to the queue (the queue grows; events are dropped when it is full). */
KVMM_INTERNAL int kvmm_cq_push(struct kvmm_client *c, const struct kvmm_cqe *cqe);

/* Complete every in-flight request with err (the connection died). */
KVMM_INTERNAL void kvmm_inflight_fail(struct kvmm_client *c, int err);

/*
 * seq.c: a batch's block table over the socket (SEQ_BLOCKS), whatever the mirror holds; lock
 * held. The tests compare the mirror against it.
 */
KVMM_INTERNAL int kvmm_block_table_socket(struct kvmm_client *c, const uint64_t *seqs,
					  uint32_t nr_seqs, int32_t *table, uint32_t max);

/* ---- ring.c: the data plane ------------------------------------------------------------ */

struct kvmm_dp_client;

/*
 * Check and adopt the region mapped at c->shm (c->shm_len bytes) and the doorbell efd (dup'ed,
 * the caller keeps its fd). 0 or -EBADMSG / -errno.
 */
KVMM_INTERNAL int kvmm_dp_client_setup(struct kvmm_client *c, int efd, uint32_t ring_entries,
				       uint32_t mag_size);
KVMM_INTERNAL void kvmm_dp_client_free(struct kvmm_client *c);
/*
 * Queue one request (opcode, payload parts) on the SQ without publishing it. 0, -EAGAIN (SQ or
 * data area full: reap, kick, retry) or -E2BIG (larger than the data area takes).
 */
KVMM_INTERNAL int kvmm_ring_queue(struct kvmm_client *c, unsigned int op,
				  const struct kvmm_iov *parts, unsigned int nr_parts,
				  uint64_t user_data);
/* Publish what kvmm_ring_queue queued and ring the doorbell if the daemon sleeps. */
KVMM_INTERNAL void kvmm_ring_kick(struct kvmm_client *c);
/* Move the CQEs there are into the completion queue; how many. */
KVMM_INTERNAL unsigned int kvmm_ring_reap(struct kvmm_client *c);
/* Wait (spin, then futex) until a CQE arrives or the daemon dies. 0 or -errno. */
KVMM_INTERNAL int kvmm_ring_wait(struct kvmm_client *c);
/*
 * One synchronous request on the rings: queue it (waiting for room), publish, wait for its
 * own completion (others that arrive meanwhile go to the completion queue for kvmm_complete)
 * and copy its reply head (at most 16 bytes) into rep.  0 or the op's -errno; 1 when the
 * rings cannot carry it (too long for the data area): the caller uses the socket.
 */
KVMM_INTERNAL int kvmm_ring_call(struct kvmm_client *c, unsigned int op,
				 const struct kvmm_iov *parts, unsigned int nr_parts, void *rep,
				 size_t rep_len);
/*
 * The same with KVMM_SQE_F_OUT: the whole reply payload comes back through the region's out
 * area, copied into out (out_max bytes), *out_len its length.  0, the op's -errno, -EBADMSG
 * (an out area that does not answer this call), or 1: no out area (an older daemon), or the
 * rings cannot carry it: the caller uses the socket.
 */
KVMM_INTERNAL int kvmm_ring_call_out(struct kvmm_client *c, unsigned int op,
				     const struct kvmm_iov *parts, unsigned int nr_parts, void *out,
				     size_t out_max, size_t *out_len);
/* SQEs submitted whose CQEs are not reaped yet. */
KVMM_INTERNAL unsigned int kvmm_ring_inflight(const struct kvmm_client *c);
/*
 * Row of seq's block table from the mirror: 0 (row filled, *total its blocks), -E2BIG (row
 * holds the first max), -ENOENT (not mirrored: ask the socket).
 */
KVMM_INTERNAL int kvmm_mirror_row(struct kvmm_client *c, uint64_t seq, int32_t *row, uint32_t max);

/* ---- cuda_map.c: a cuda-backend pool ---------------------------------------------------- */

/*
 * Map the nr_chunks chunk fds of a cuda-backend pool on the GPU ($KVMM_CUDA_DEVICE, default
 * 0): c->cuda, c->devbase, c->cuda_device. The fds stay the caller's. 0, or -ENODEV (no
 * driver, no GPU, or libkvmm built without CUDA; kvmm_cuda_map_why() says which) / -errno.
 */
KVMM_INTERNAL int kvmm_client_cuda_map(struct kvmm_client *c, const int *fds, uint32_t nr_chunks,
				       uint64_t chunk_size);
/*
 * The UUID of the GPU this process maps a cuda-backend pool on ($KVMM_CUDA_DEVICE, default
 * 0), which ATTACH names so that the daemon passes that device's chunks.  0, 1 (the handle
 * maps no device: $KVMM_CUDA_DEVICE=none), -EINVAL (a bad $KVMM_CUDA_DEVICE), -ENODEV (no
 * driver or no such device: kvmm_cuda_map_why()).
 */
KVMM_INTERNAL int kvmm_client_cuda_uuid(struct kvmm_client *c, uint8_t uuid[16]);
/* The daemon refused the GPU kvmm_client_cuda_uuid named (-ENODEV): say why, for the user. */
KVMM_INTERNAL void kvmm_client_cuda_refused(struct kvmm_client *c);
/*
 * Make [off, off + len) of the handle's device mapping read-write (@rw) or read-only, with one
 * cuMemSetAccess: only for a mapping made a frame a mapping (c->cuda_ro). 0 or -errno.
 */
KVMM_INTERNAL int kvmm_client_cuda_protect(struct kvmm_client *c, uint64_t off, uint64_t len,
					   bool rw);
/* Undo kvmm_client_cuda_map (nothing when there is no device mapping). */
KVMM_INTERNAL void kvmm_client_cuda_unmap(struct kvmm_client *c);

/* ---- wprotect.c: read-only pool pages --------------------------------------------------- */

/* What a successful operation did, for the page protection: its opcode and arguments. */
struct kvmm_wp_op {
	uint32_t op;		/* KVMM_OP_* */
	uint32_t nr;		/* APPEND: tokens; SEAL: blocks */
	uint64_t seq;		/* the sequence (parent for FORK) */
	uint64_t arg;		/* FORK: tokens shared; TRUNCATE: new length; SEAL: first block */
	const uint32_t *frames; /* APPEND_FRAMES: the magazine frames named */
	uint32_t nr_frames;
};

/* Ring completions are matched by SQ position: tag = KVMM_WP_RING_TAG | position. */
#define KVMM_WP_RING_TAG (UINT64_C(1) << 63)

/*
 * Set up protection for a freshly mapped host pool (mapped PROT_READ when c->wp_want): c->wp,
 * or a writable pool and c->wp_off_reason when it cannot be had. 0 or -errno.
 */
KVMM_INTERNAL int kvmm_wp_setup(struct kvmm_client *c);
KVMM_INTERNAL void kvmm_wp_free(struct kvmm_client *c);
/* A successful operation (res: its reply, as a completion). */
KVMM_INTERNAL void kvmm_wp_done(struct kvmm_client *c, const struct kvmm_wp_op *op,
				const struct kvmm_cqe *res);
/* Apply the protection changes gathered since the last flush (each call above but
 * kvmm_wp_row and kvmm_wp_pending_done flushes itself). 0 or -1: protection went off. */
KVMM_INTERNAL int kvmm_wp_flush(struct kvmm_client *c);
/* The engine read n entries of seq's block table: grant its own blocks' frames (at the flush). */
KVMM_INTERNAL void kvmm_wp_row(struct kvmm_client *c, uint64_t seq, const int32_t *row, uint32_t n);
/* Magazine frames taken (writable) or given back (read-only). */
KVMM_INTERNAL void kvmm_wp_mag(struct kvmm_client *c, const uint32_t *frames, uint32_t n,
			       bool taken);
/*
 * An asynchronous operation sent with tag; its completion goes to kvmm_wp_pending_done, whose
 * changes kvmm_complete flushes.
 */
KVMM_INTERNAL int kvmm_wp_pending_add(struct kvmm_client *c, uint64_t tag,
				      const struct kvmm_wp_op *op);
KVMM_INTERNAL void kvmm_wp_pending_done(struct kvmm_client *c, uint64_t tag,
					const struct kvmm_cqe *cqe);
/* ring.c: the SQ position of the entry kvmm_ring_queue queued last. */
KVMM_INTERNAL uint32_t kvmm_ring_last_pos(const struct kvmm_client *c);

/* 0 if the handle can talk to the daemon, else why not. */
static inline int kvmm_client_usable_now(const struct kvmm_client *c)
{
	if (c->fd < 0)
		return -ENOTCONN;
	return c->err;
}

/* ---- reattach.c: when the daemon goes away --------------------------------------------- */

/*
 * 0 if the handle can talk to the daemon, else why not; with KVMM_ATTACH_REATTACH a handle
 * whose daemon is gone first tries to reattach (-ESTALE when it did). Lock held.
 */
KVMM_INTERNAL int kvmm_client_usable(struct kvmm_client *c);
/* The connection hung up or a send found no one: queue the GONE event (once per loss). */
KVMM_INTERNAL void kvmm_client_gone(struct kvmm_client *c);
/* The same with the event's res @err (-ETIMEDOUT: the handle gave a stalled daemon up). */
KVMM_INTERNAL void kvmm_client_gone_err(struct kvmm_client *c, int err);
/*
 * The daemon said nothing for c->wait_ms while a call waited: give it up.  The connection
 * is closed to further use (c->err = -ETIMEDOUT), what is in flight fails with -ETIMEDOUT,
 * the GONE event (res -ETIMEDOUT) is queued, and the cause names the daemon and its state
 * (stopped, running).  Returns -ETIMEDOUT (client.c).
 */
KVMM_INTERNAL int kvmm_client_stalled(struct kvmm_client *c);
/*
 * What process @pid is doing, in words, for a message about a daemon that does not answer:
 * "it is stopped (SIGSTOP or a job-control stop): SIGCONT resumes it", ... (client.c).
 */
KVMM_INTERNAL const char *kvmm_peer_state_text(pid_t pid);
/* Is process @pid running or sleeping (not stopped, traced, exited or unknown)? */
KVMM_INTERNAL bool kvmm_peer_alive(pid_t pid);
/* $KVMM_DAEMON_TIMEOUT_MS in ms (0: wait forever), else KVMM_DAEMON_TIMEOUT_DEFAULT_MS. */
KVMM_INTERNAL uint32_t kvmm_daemon_timeout_env(void);
/* Record why the handle cannot talk (kvmm_conn_error): @err and a printf-style message. */
KVMM_INTERNAL void kvmm_client_cause(struct kvmm_client *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* ring.c: everything in flight on the rings completes with @err (the daemon is given up). */
KVMM_INTERNAL void kvmm_ring_fail(struct kvmm_client *c, int err);
/* Connect to c->sock_path, HELLO and ATTACH with c's saved arguments (client.c). */
KVMM_INTERNAL int kvmm_client_open(struct kvmm_client *c);
/* Undo what kvmm_client_open set up except the pool's address range (client.c). */
KVMM_INTERNAL void kvmm_client_close_session(struct kvmm_client *c);
/* The handle holds sequence id now / no longer (created, forked, freed by any path). */
KVMM_INTERNAL void kvmm_live_add(struct kvmm_client *c, uint64_t id);
KVMM_INTERNAL void kvmm_live_del(struct kvmm_client *c, uint64_t id);
/* A completion of KVMM_OP_* op: a new sequence is recorded. */
KVMM_INTERNAL void kvmm_live_cqe(struct kvmm_client *c, unsigned int op,
				 const struct kvmm_cqe *cqe);
/* Whether err says the connection is gone (the call may or may not have been done). */
static inline bool kvmm_err_gone(int err)
{
	return err == -ENOTCONN || err == -EPIPE || err == -ECONNRESET || err == -ESTALE ||
	       err == -ETIMEDOUT;
}
KVMM_INTERNAL void kvmm_reattach_free(struct kvmm_client *c);

#endif /* KVMM_RUNTIME_LIBKVMM_H */
