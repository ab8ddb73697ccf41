/* SPDX-License-Identifier: MIT */
/*
 * runtime/kvmm.h - libkvmm, the public API an inference engine links to use kvmmd's KV-cache
 * memory. A process attaches to the daemon (one Unix socket per handle), joins a namespace
 * with the KV format of its model and maps that namespace's pool: frame n lies at
 * kvmm_frame_addr(client, n), in this process and in every other process of the namespace,
 * so a block table is just frame numbers. Sequences are created, grown (append), forked,
 * truncated and freed by id; full pages are sealed into the namespace's prefix cache and later
 * prompts map them again with kvmm_prefix_lookup. Batches of sequences are pinned, and their
 * block tables filled, in one call. kvmm_submit / kvmm_complete queue the same operations
 * asynchronously so that one engine step is one burst of requests.
 *
 * Conventions, for every call below: the return value is 0 (or a count, where said) on
 * success and a negative errno on failure; kvmm_strerror() turns it into text. Nothing here
 * raises a signal or aborts: a dead daemon makes calls fail with -ENOTCONN (kvmm_reattach). A handle
 * serializes its own calls with a mutex, so it may be shared by threads, but calls on one
 * handle do not run in parallel: use one handle per thread for parallelism. A handle must not
 * be used across fork(); the child attaches on its own (kvmm_detach in the child only releases
 * the child's copy and leaves the parent's session alone). Each call has a man page in
 * Documentation/userspace-api/man3/; the overview is Documentation/userspace-api/libkvmm.md.
 */
#ifndef KVMM_RUNTIME_KVMM_H
#define KVMM_RUNTIME_KVMM_H

#include <stddef.h>
#include <stdint.h>

#include "uapi/kvmm.h" /* struct kvmm_format, KVMM_BLOCK_NONE, KVMM_E* codes */

#ifdef __cplusplus
extern "C" {
#endif

/* libkvmm.so exports what is declared from here on (runtime/libkvmm.map, -fvisibility=hidden) */
#pragma GCC visibility push(default)

/* A connection to kvmmd attached to one namespace. Opaque. */
typedef struct kvmm_client kvmm_client_t;

/* ---- Attaching ----------------------------------------------------------------------- */

/*
 * Connect to kvmmd, agree on an ABI version (HELLO), join namespace ns with format fmt
 * (ATTACH) and map the namespace's pool. socket_path NULL means $KVMM_SOCKET if set, else
 * $XDG_RUNTIME_DIR/kvmm/kvmmd.sock if XDG_RUNTIME_DIR is set, else /run/kvmm/kvmmd.sock.
 * On success *out is the new handle. Errors: -EINVAL (bad name or format), -ENOENT /
 * -ECONNREFUSED (no daemon there), -EPROTO (no common ABI version), -EACCES (namespace not
 * open to this uid/gid), -EBADMSG (the daemon sent something malformed), -ENOMEM, -ENODEV (the
 * pool is in GPU memory and cannot be mapped here: kvmm_cuda_map_why() says why).
 */
int kvmm_attach(const char *socket_path, const char *ns, const struct kvmm_format *fmt,
		kvmm_client_t **out);

/* Options of kvmm_attach_ex. Zero-initialize and set what is wanted. */
struct kvmm_attach_opts {
	uint32_t flags;	    /* KVMM_ATTACH_* below; others must be zero */
	uint32_t model_len; /* bytes at model, at most KVMM_MODEL_ID_MAX; 0: no identity */
	const void *model;  /* the model's identity (opaque: name, revision, adapter, ...) */
	/*
	 * How long a call may wait for kvmmd without a word from it before the handle gives
	 * the daemon up (-ETIMEDOUT; see "When kvmmd stops answering" below), in ms: 0 the
	 * default ($KVMM_DAEMON_TIMEOUT_MS, else KVMM_DAEMON_TIMEOUT_DEFAULT_MS), < 0 never.
	 */
	int32_t daemon_timeout_ms;
	uint32_t reserved32;  /* must be zero */
	uint64_t reserved[5]; /* must be zero (later options) */
};

#define KVMM_DAEMON_TIMEOUT_DEFAULT_MS 30000

/*
 * Leave the pool writable everywhere in this process: no read-only sealed, shared or foreign
 * pages (kvmm_write_protected() says 0). Faster (no mprotect per page), and what an engine
 * needs whose processes write frames another handle allocated. $KVMM_WPROTECT=0 does the
 * same for every attach of the process.
 */
#define KVMM_ATTACH_NO_WPROTECT (1U << 0)
/*
 * Reattach automatically when kvmmd comes back after going away (kvmm_reattach): while it is
 * gone, calls fail with -ENOTCONN, each at most one connection attempt (spaced with a backoff
 * up to 500 ms); the call that finds it back reattaches the handle and fails with -ESTALE
 * without doing anything, so that the engine learns its sequences were lost
 * (kvmm_lost_seqs) before it names one of the new daemon's.
 */
#define KVMM_ATTACH_REATTACH (1U << 1)
#define KVMM_ATTACH_OPT_ALL (KVMM_ATTACH_NO_WPROTECT | KVMM_ATTACH_REATTACH)

/*
 * kvmm_attach with options (opts NULL: the defaults, as kvmm_attach). opts->model (model_len
 * bytes, at most KVMM_MODEL_ID_MAX) is the identity of the model whose KV this handle stores
 * (name, revision, adapter: opaque): it is hashed into every content key of the handle's
 * pages, so handles of one namespace with different identities never share a page, and
 * those with the same one do. -EINVAL for an unknown flag, a nonzero reserved field or a
 * model_len too long; -EOPNOTSUPP for an identity given to a kvmmd without key domains;
 * otherwise as kvmm_attach.
 */
int kvmm_attach_ex(const char *socket_path, const char *ns, const struct kvmm_format *fmt,
		   const struct kvmm_attach_opts *opts, kvmm_client_t **out);

/*
 * Whether this handle's pool pages are write-protected: 1 or 0. With protection (the default
 * for a pool in host memory) the pool is mapped read-only and a frame is writable only while
 * it is this handle's own page that no one else sees: a page of one of its sequences from the
 * first kvmm_block_table that shows it until it is sealed, shared by kvmm_seq_fork, truncated
 * away or freed, or a frame taken with kvmm_mag_alloc until kvmm_mag_free. Writing any other
 * frame (a sealed or shared prefix page, another client's page) raises SIGSEGV in the writer.
 * 0: KVMM_ATTACH_NO_WPROTECT or $KVMM_WPROTECT=0, a page size that is not a multiple of the
 * system's page, or the kernel refused an mprotect (vm.max_map_count) and the handle fell back
 * to a writable pool. A pool in GPU memory is protected the same way (cuMemSetAccess, each
 * frame its own mapping; a GPU write into a read-only frame faults the writer's context) when
 * its page size is a whole number of the GPU's mapping granules (2 MiB), else 0; also 0 when
 * the driver cannot map part of an allocation or refuses read-only access.
 */
int kvmm_write_protected(const kvmm_client_t *client);

/* ---- When kvmmd goes away ------------------------------------------------------------ */

/*
 * Whether the handle can talk to kvmmd: 1, or 0 once the daemon is known to be gone (its
 * socket hung up, a send failed, the rings' wait found it dead) or the session broke. Knowing
 * takes a call: kvmm_complete(client, cqes, max, 0) looks without waiting. The first time a
 * handle finds its daemon gone it queues one event, a completion with KVMM_CQE_F_EVENT |
 * KVMM_CQE_F_GONE and res -ENOTCONN (-ETIMEDOUT when it gave up a stopped or hung daemon,
 * below); every call then fails with -ENOTCONN (-ETIMEDOUT) (never a hang, a
 * signal or a crash) until kvmm_reattach.
 */
int kvmm_connected(const kvmm_client_t *client);

/*
 * Attach the handle again to a kvmmd at the socket it attached to (a daemon restarted after a
 * crash, kill -9 included, or a clean stop), with the same namespace, format, model identity
 * and options, trying every 10 ms at first and up to every 500 ms until timeout_ms have passed
 * (0: one try; negative: no limit). Every sequence the handle had is lost with the old daemon:
 * the return value is how many (>= 0), and kvmm_lost_seqs() lists their old ids so that the
 * engine recomputes them (prefixes the daemon kept on a warm-restarted swap file come back
 * through kvmm_prefix_lookup). The new daemon may hand out the same ids again: an old id means
 * nothing after this call. The pool is mapped again: kvmm_frame_addr() gives the new
 * addresses (the same ones when the pool kept its size, but with the new daemon's contents;
 * views, block tables and magazine frames of the old session are void), kvmm_page_size() and
 * the other properties are the new daemon's. Completions and events not yet reaped are
 * dropped (operations in flight are lost with their sequences). Errors: -EISCONN (the handle
 * is still connected: nothing done), -ETIMEDOUT (no daemon answered in time; the handle stays
 * detached and may try again; kvmm_conn_error() says what the last attempt met: no socket,
 * nobody listening, a daemon that did not answer, a namespace it does not have), or what
 * kvmm_attach_ex returns for a daemon that refuses it
 * (-EPROTO, -EACCES, -EINVAL for a namespace that took another format, ...). Not while another
 * thread is in kvmm_mag_alloc, kvmm_mag_avail or kvmm_frame_addr on the handle (they take no
 * lock); with KVMM_ATTACH_REATTACH any call may reattach.
 */
int kvmm_reattach(kvmm_client_t *client, int timeout_ms);

/*
 * The old ids of the sequences the last reattach (kvmm_reattach, or the automatic one of
 * KVMM_ATTACH_REATTACH) reported lost: up to max into seqs (may be NULL when max is 0).
 * Returns how many there are in all (call with max 0 to size the array), or -ENOMEM when the
 * handle could not keep track of every sequence (it ran out of memory: recompute all).
 */
int kvmm_lost_seqs(const kvmm_client_t *client, uint64_t *seqs, uint32_t max);

/*
 * When kvmmd stops answering.  A daemon that is stopped (SIGSTOP, a debugger) or hung keeps
 * its socket open, so a call waiting for it would wait forever.  Instead a call that waits
 * daemon_timeout_ms (kvmm_attach_opts; $KVMM_DAEMON_TIMEOUT_MS; default 30 s) without a word
 * from the daemon - no reply, no completion, no event - gives the daemon up: it returns
 * -ETIMEDOUT, the handle queues its GONE event (res -ETIMEDOUT) and closes the connection,
 * and every later call fails with -ETIMEDOUT at once, as after a daemon's death.  Nothing is
 * left half-done for the engine to guess about: the daemon frees the whole session when it
 * runs again (the closed socket), so every sequence of the handle is lost - the one the
 * timed-out call named included, whether or not that call was carried out.  The engine
 * treats it like a crash: kvmm_reattach (or KVMM_ATTACH_REATTACH) once the daemon answers
 * again, then recompute what kvmm_lost_seqs lists.  A reattach attempt waits for the
 * daemon's answer at most the reattach's time left or 1 s, whichever is longer (an
 * automatic one at most 1 s), and never past the deadline.  The check costs
 * nothing on the fast path: the socket's receive timeout and the rings' futex wait, which
 * wakes every 10 ms anyway, measure it.  Calls that legitimately take long (a PIN reading
 * many pages from a slow swap file, a lookup waiting for the remote tier) count against it
 * too: choose the deadline above them.
 */

/*
 * Why the handle cannot talk to kvmmd, or why its last (re)attach attempt failed: the
 * negative errno of the cause (0: connected, nothing failed) and, in buf (len bytes, may be
 * NULL when len is 0), one line naming it - "kvmmd (pid 4242) did not answer in 500 ms: it
 * is stopped (SIGSTOP or a job-control stop): ...", "cannot connect to kvmmd at PATH: No
 * such file or directory", "kvmmd at PATH refused ATTACH to namespace "alpha": ...".
 * -EINVAL for a NULL handle.
 */
int kvmm_conn_error(const kvmm_client_t *client, char *buf, size_t len);

/* Say goodbye (the daemon frees this handle's sequences and pins), unmap, free. NULL is ok. */
void kvmm_detach(kvmm_client_t *client);

/* Bytes per page (frame) of the pool. */
uint64_t kvmm_page_size(const kvmm_client_t *client);
/* Tokens one page holds with the format given at attach. */
uint32_t kvmm_tokens_per_page(const kvmm_client_t *client);
/* Bytes of KV per token (all layers, K and V, scales included). */
uint32_t kvmm_bytes_per_token(const kvmm_client_t *client);
/* Frames this handle maps (the namespace's pool). */
uint32_t kvmm_nr_frames(const kvmm_client_t *client);
/*
 * Devices mirroring each frame: 1, or the size of the daemon's tensor-parallel group (kvmmd
 * --device 0,1,...), where frame n is page_size bytes on each device, each holding its shard
 * of the KV heads (the format given at attach is that shard's).
 */
uint32_t kvmm_nr_devices(const kvmm_client_t *client);
/*
 * Which member of that group this handle maps (0 .. kvmm_nr_devices() - 1): the one on this
 * process's GPU ($KVMM_CUDA_DEVICE), whatever its ordinal in the daemon; 0 for host memory;
 * KVMM_DEVICE_NONE for a handle that maps no device ($KVMM_CUDA_DEVICE=none: a process that
 * allocates and hands block tables to others, with no GPU or CUDA context of its own).
 */
#define KVMM_DEVICE_NONE UINT32_MAX
uint32_t kvmm_device_index(const kvmm_client_t *client);
/*
 * Address of frame in this process, or NULL (errno EINVAL) if it is not a frame we map. A pool
 * in GPU memory (a daemon with --backend cuda) has no host address: NULL, errno EOPNOTSUPP;
 * use kvmm_frame_devptr().
 */
void *kvmm_frame_addr(const kvmm_client_t *client, uint32_t frame);
/*
 * Device address (a CUdeviceptr, valid in the CUDA context of the device the pool was mapped
 * on) of frame for a cuda-backend pool: the pool's base + frame * page size, the same frame in
 * every process of the namespace. 0 with errno EOPNOTSUPP for a pool in host memory, EINVAL
 * for a frame past the pool. kvmm_attach maps such a pool on device $KVMM_CUDA_DEVICE (an
 * ordinal of this process, default 0) and fails with -ENODEV when it cannot (no CUDA driver,
 * no GPU, or libkvmm built without CUDA): kvmm_cuda_map_why() then says which.
 */
uint64_t kvmm_frame_devptr(const kvmm_client_t *client, uint32_t frame);

/* ---- Sequences ------------------------------------------------------------------------ */

/* Create an empty sequence. priority orders reclaim in the namespace (lower goes first). */
int kvmm_seq_create(kvmm_client_t *client, int priority, uint64_t *seq);
/*
 * Append n tokens (their ids) at the end of seq, allocating pages as needed; long appends are
 * split into several messages. *len (may be NULL) receives the new length in tokens.
 */
int kvmm_seq_append(kvmm_client_t *client, uint64_t seq, const uint32_t *tokens, uint32_t n,
		    uint64_t *len);
/*
 * kvmm_seq_append whose new pages are frames this handle took with kvmm_mag_alloc, so the
 * engine can write their KV before (or while) the daemon processes the append: frames[i]
 * becomes block B + i of seq, where B is its block count before the call (its length rounded
 * up to whole pages), and nr_frames must be exactly the number of blocks the append adds.
 * Each frame must be one this handle took and has neither given back nor named before, each
 * named once; it then belongs to the sequence (freed with it, never given back). A shared
 * partial last page is still copied into a page the daemon chooses. -EINVAL (a frame that is
 * not this handle's to give, a wrong count: nothing changes), -EOPNOTSUPP (no data plane),
 * and what kvmm_seq_append returns. Asynchronously: KVMM_SQE_SEQ_APPEND with arg = nr_frames
 * and frames.
 */
int kvmm_seq_append_frames(kvmm_client_t *client, uint64_t seq, const uint32_t *tokens, uint32_t n,
			   const uint32_t *frames, uint32_t nr_frames, uint64_t *len);
/*
 * New sequence *child sharing parent's first nr_tokens tokens (KVMM_SEQ_ALL_TOKENS: all of
 * them); a shared partial last page is copied on the first write.
 */
int kvmm_seq_fork(kvmm_client_t *client, uint64_t parent, uint64_t nr_tokens, uint64_t *child);
/* Shorten seq to nr_tokens (not more than its length); whole pages past the end are freed. */
int kvmm_seq_truncate(kvmm_client_t *client, uint64_t seq, uint64_t nr_tokens);
/* Free seq and its pages (sealed pages stay in the prefix cache). */
int kvmm_seq_free(kvmm_client_t *client, uint64_t seq);

/* ---- Prefix cache --------------------------------------------------------------------- */

/*
 * Map into seq (whose length is a whole number of pages, usually 0) the longest cached run of
 * full pages matching tokens[0..n). *nr_hit (may be NULL) receives how many tokens were mapped,
 * a multiple of kvmm_tokens_per_page(); the caller appends tokens[*nr_hit..n) itself. A long
 * prompt is looked up in several requests, stopping at the first miss.
 */
int kvmm_prefix_lookup(kvmm_client_t *client, uint64_t seq, const uint32_t *tokens, uint64_t n,
		       uint64_t *nr_hit);
/*
 * kvmm_prefix_lookup and kvmm_seal with a salt (like vLLM's cache_salt): salt_len bytes
 * (at most KVMM_SALT_MAX; 0: none) mixed into the content keys of seq's pages, so that
 * requests with different salts never share a page even with the same model and tokens. The
 * salt is the sequence's from then on (later lookups, seals and forks use it); it can only be
 * changed while the sequence has no sealed or shared page (-EBUSY). -EOPNOTSUPP from a kvmmd
 * without key domains.
 */
int kvmm_prefix_lookup_salt(kvmm_client_t *client, uint64_t seq, const uint32_t *tokens, uint64_t n,
			    const void *salt, size_t salt_len, uint64_t *nr_hit);
int kvmm_seal_salt(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		   const void *salt, size_t salt_len);

/*
 * Seal the full, unsealed pages of seq among blocks [block, block + nr_blocks) (nr_blocks 0:
 * all full pages from block on) and enter them in the namespace's prefix cache, keyed by the
 * token ids given at append. Sealed pages are immutable: write a page's KV before sealing it.
 */
int kvmm_seal(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks);

/* ---- A request's flow in one call each ------------------------------------------------ */

/*
 * A request's start in one round trip: create a sequence (priority as kvmm_seq_create), map
 * the longest cached run of full pages of tokens[0..n) (as kvmm_prefix_lookup) and append the
 * rest (as kvmm_seq_append, the daemon choosing the frames). *seq receives the new sequence,
 * *nr_hit (may be NULL) the tokens that came from the cache (a multiple of
 * kvmm_tokens_per_page()), and table (may be NULL) its block table: max_blocks int32 frame
 * numbers, then KVMM_BLOCK_NONE (-E2BIG when it has more blocks: the row holds the first
 * max_blocks, the sequence exists). All or nothing: on any other error no sequence is left.
 * n is at most KVMM_SEQ_PROMPT_MAX (one record): longer prompts use the separate calls.
 * Asynchronously: KVMM_SQE_SEQ_PROMPT.
 */
#define KVMM_SEQ_PROMPT_MAX 16372
int kvmm_seq_prompt(kvmm_client_t *client, const uint32_t *tokens, uint32_t n, int priority,
		    uint64_t *seq, uint64_t *nr_hit, int32_t *table, uint32_t max_blocks);
/*
 * A request's end in one round trip: seal seq's full pages among [block, block + nr_blocks)
 * (as kvmm_seal), then free it (as kvmm_seq_free). A seal that fails frees nothing and its
 * error is returned. Asynchronously: KVMM_SQE_SEQ_SEAL_FREE.
 */
int kvmm_seq_seal_free(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks);

/* ---- Batches -------------------------------------------------------------------------- */

/*
 * Make every page of the nr_seqs sequences resident and keep reclaim off them (pin), or let
 * reclaim have them again (unpin). *nr_frames (may be NULL) receives the frames (un)pinned.
 */
int kvmm_pin(kvmm_client_t *client, const uint64_t *seqs, uint32_t nr_seqs, uint32_t *nr_frames);
int kvmm_unpin(kvmm_client_t *client, const uint64_t *seqs, uint32_t nr_seqs, uint32_t *nr_frames);

/*
 * Pin part of one sequence: make blocks [block, block + nr_blocks) of seq resident (swapped
 * ones are read back; room may be made by swapping out the sequence's other, unpinned blocks)
 * and keep reclaim off them until kvmm_unpin_range() of the same range. For attention over a
 * sequence that does not fit in memory, one chunk at a time. flags: KVMM_PIN_RANGE_F_PREFETCH
 * also starts reading back the next nr_blocks blocks. While a range is pinned the sequence
 * cannot change (-EBUSY). *nr_frames (may be NULL) receives the frames (un)pinned. Needs a
 * daemon with KVMM_FEAT_PIN_RANGE (-EOPNOTSUPP otherwise).
 */
int kvmm_pin_range(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		   unsigned int flags, uint32_t *nr_frames);
int kvmm_unpin_range(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		     uint32_t *nr_frames);

/*
 * Far reads (KVMM_FEAT_FAR, a pool in host memory): attention reads the pages kvmmd swapped
 * to its host-memory tier where they lie, instead of faulting them back into the pool.
 *
 * kvmm_far_map() maps (or maps again) the far window, read-only: the pool's frames
 * [0, far_base) then the host tier's slots, page after page, laid out like the pool, so the
 * kernels index it with the entries kvmm_pin_far() returns.  *base (the window's address),
 * *nr_pages (far_base + the tier's slots) and *far_base may each be NULL.  The window stays
 * until the next kvmm_far_map(), kvmm_detach() or kvmm_close().  -EOPNOTSUPP: the daemon has
 * no far reads, or the pool is in GPU memory; -ENODEV: the namespace has no host swap tier.
 *
 * kvmm_pin_far() pins blocks [block, block + nr_blocks) of seq as kvmm_pin_range() does,
 * except that a sealed page swapped to the host tier stays there, its slot pinned instead
 * (kvmmd neither reuses nor moves it while pinned): entries[i] (nr_blocks of them) is block
 * block + i's index in the window, a frame below far_base, far_base + slot at or above it.
 * Other swapped pages (unsealed, on NVMe) are faulted in as by kvmm_pin_range().  Without a
 * window every entry is a frame.  *nr_far (may be NULL): the entries left in the host tier.
 * End it with kvmm_unpin_range() of the same range.  -ESTALE: the host tier changed since
 * the window was mapped (swapoff, swapon): kvmm_far_map() again.  -E2BIG: nr_blocks is over
 * KVMM_PIN_FAR_MAX (pin the range in parts).  Other errors as kvmm_pin_range().
 */
int kvmm_far_map(kvmm_client_t *client, const void **base, uint64_t *nr_pages, uint32_t *far_base);
int kvmm_pin_far(kvmm_client_t *client, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		 int32_t *entries, uint32_t *nr_far);

/*
 * Start bringing back, asynchronously, the swapped pages of the nr_seqs sequences the next
 * step will run (kvmmd reads them while this step computes); returns once the reads are
 * started.  *nr_started (may be NULL) receives the pages whose reads began.  The PIN of the
 * next step waits for whatever has not arrived.  -KVMM_EPREEMPTED for a preempted sequence.
 */
int kvmm_prefetch(kvmm_client_t *client, const uint64_t *seqs, uint32_t nr_seqs,
		  uint32_t *nr_started);

/*
 * Fill a batch's block table, the int32 frame numbers attention kernels index: row i (at
 * table + i * max_blocks_per_seq) holds the frames of seqs[i]'s blocks, then KVMM_BLOCK_NONE
 * up to the end of the row. Returns -E2BIG when a sequence has more blocks than a row holds
 * (its row holds the first max_blocks_per_seq; the other rows are complete).
 */
int kvmm_block_table(kvmm_client_t *client, const uint64_t *seqs, uint32_t nr_seqs, int32_t *table,
		     uint32_t max_blocks_per_seq);

/* ---- Asynchronous submission ---------------------------------------------------------- */

/* What a submission entry asks for. */
enum kvmm_sqe_op {
	KVMM_SQE_NOP = 0,	/* a round trip (PING); completes with res 0 */
	KVMM_SQE_SEQ_CREATE,	/* arg: priority                       -> cqe.seq */
	KVMM_SQE_SEQ_APPEND,	/* seq, tokens, nr [, arg: frames, frames] -> cqe.nr_tokens */
	KVMM_SQE_SEQ_FORK,	/* seq (parent), arg: tokens to share  -> cqe.seq (child) */
	KVMM_SQE_SEQ_TRUNCATE,	/* seq, arg: new length */
	KVMM_SQE_SEQ_FREE,	/* seq */
	KVMM_SQE_PREFIX_LOOKUP, /* seq, tokens, nr                     -> cqe.nr_tokens */
	KVMM_SQE_SEAL,		/* seq, arg: first block, nr: blocks */
	KVMM_SQE_PIN,		/* seqs, nr                            -> cqe.nr_frames */
	KVMM_SQE_UNPIN,		/* seqs, nr                            -> cqe.nr_frames */
	KVMM_SQE_SEQ_PROMPT, /* tokens, nr, arg: priority -> cqe.seq, .nr_blocks, .nr_tokens hit */
	KVMM_SQE_SEQ_SEAL_FREE, /* seq, arg: first block, nr: blocks */
	KVMM_SQE_PIN_RANGE,	/* seq, arg: first block, nr: blocks   -> cqe.nr_frames */
	KVMM_SQE_UNPIN_RANGE,	/* seq, arg: first block, nr: blocks   -> cqe.nr_frames */
	KVMM_SQE_OP_COUNT
};

/* One operation to submit. Unused fields are ignored. */
struct kvmm_sqe {
	uint32_t op;	    /* enum kvmm_sqe_op */
	uint32_t nr;	    /* tokens (APPEND, PREFIX_LOOKUP), blocks (SEAL), seqs (PIN, UNPIN) */
	uint64_t seq;	    /* the sequence operated on */
	uint64_t arg;	    /* see enum kvmm_sqe_op */
	const void *data;   /* uint32_t token ids or uint64_t sequence ids; copied at submit */
	uint64_t user_data; /* echoed in the completion */
	/* APPEND: arg magazine frames for its new blocks (kvmm_seq_append_frames); copied */
	const uint32_t *frames;
};

#define KVMM_CQE_F_EVENT (1U << 0) /* not a completion: an event (PREEMPT) from the daemon */
/* with KVMM_CQE_F_EVENT: the daemon went away (res -ENOTCONN); once per loss (kvmm_reattach) */
#define KVMM_CQE_F_GONE (1U << 1)

/* One completion (or event). */
struct kvmm_cqe {
	uint64_t user_data; /* the sqe's; 0 for events */
	/*
	 * 0 or -errno. PREEMPT event: -KVMM_EPREEMPTED (the daemon needed the frames) or
	 * -KVMM_ELOST (a swapped page failed its checksum: dropped). GONE: -ENOTCONN or
	 * -ETIMEDOUT (a stopped or hung daemon given up: kvmm_conn_error)
	 */
	int32_t res;
	uint32_t flags;	    /* KVMM_CQE_F_* */
	uint64_t seq;	    /* created / forked sequence; the preempted one for events */
	uint64_t nr_tokens; /* APPEND, PREFIX_LOOKUP: the sequence's length after; PROMPT: hit */
	uint32_t
		nr_blocks; /* blocks of the sequence (CREATE, FORK, APPEND, PROMPT), mapped (LOOKUP) */
	uint32_t nr_frames; /* PIN, UNPIN: frames; PREEMPT: frames the daemon wants back */
};

/*
 * Queue n operations and send them at once, without waiting for any answer. Returns how many
 * were submitted (all n, or fewer when KVMM_MAX_INFLIGHT would be exceeded) or a negative
 * errno if none was; an sqe that cannot go on the wire (bad op, more data than one message
 * holds) is not sent and completes at once with -EINVAL / -E2BIG.
 */
int kvmm_submit(kvmm_client_t *client, const struct kvmm_sqe *sqes, unsigned int n);
/*
 * Reap up to max completions into cqes, waiting until at least min have arrived (min 0: never
 * wait). Returns the number stored, or a negative errno (-ENOTCONN: the daemon is gone and
 * nothing is left to reap; operations in flight then complete with -ENOTCONN; -ETIMEDOUT:
 * the daemon said nothing for the handle's deadline, see kvmm_conn_error). With
 * KVMM_ATTACH_REATTACH, a handle whose daemon is gone (its GONE event reaped) tries to
 * reattach here as in any call: -ESTALE when it did (kvmm_lost_seqs), -ENOTCONN while the
 * daemon is not back, a refusing daemon's errno.
 */
int kvmm_complete(kvmm_client_t *client, struct kvmm_cqe *cqes, unsigned int max, unsigned int min);
/* Operations submitted and not yet reaped by kvmm_complete. */
unsigned int kvmm_inflight(const kvmm_client_t *client);

#define KVMM_MAX_INFLIGHT 4096

/* ---- Data plane and magazine ---------------------------------------------------------- */

/*
 * Whether this handle has the shared-memory data plane (rings, block-table mirror, magazine):
 * 1 or 0. Without it (an older daemon, or $KVMM_NO_RINGS set at attach) every call goes over
 * the socket and the magazine calls return -EOPNOTSUPP.
 */
int kvmm_has_rings(const kvmm_client_t *client);

/*
 * Take up to n free frames into frames[] from this handle's magazine, without a round trip
 * while it holds any; an empty magazine is refilled first (one round trip charging up to
 * kvmm_mag_size() frames to the namespace). A frame taken is this process's until given back:
 * its memory is kvmm_frame_addr(client, frame), no sequence maps it, and the daemon returns
 * it to the pool at kvmm_mag_free, detach or death, unless it names it in an append
 * (kvmm_seq_append_frames), which makes it a page of that sequence. A take is a few loads and
 * one compare-and-swap in shared memory, without a lock or a system call; after the first
 * refill the daemon tops the magazine up on its own when it runs low, so later calls rarely
 * wait. Returns the number taken (>= 1), or -EOPNOTSUPP (no data plane), -ENOMEM (the
 * namespace has no frame left), -EINVAL.
 */
int kvmm_mag_alloc(kvmm_client_t *client, uint32_t *frames, uint32_t n);
/*
 * Give back n frames taken with kvmm_mag_alloc (no round trip unless the return ring stays
 * full). They go back into this handle's magazine (still charged to the namespace) for later
 * takes. Numbers this handle does not hold are ignored by the daemon. 0 or -EINVAL /
 * -EOPNOTSUPP.
 */
int kvmm_mag_free(kvmm_client_t *client, const uint32_t *frames, uint32_t n);
/* Frames ready in the magazine (taken by the next kvmm_mag_alloc calls without a round trip). */
uint32_t kvmm_mag_avail(kvmm_client_t *client);
/* Most frames the magazine holds (given and not given back), 0 without a data plane. */
uint32_t kvmm_mag_size(const kvmm_client_t *client);

/* ---- CUDA pool (runtime/cuda_map.c; -ENODEV in a libkvmm built without CUDA) ----------- */

/* A pool's chunks mapped into this process's device address space. Opaque. */
struct kvmm_cuda_map;

/*
 * Map a cuda-backend pool on CUDA device @device: import each of the nr_chunks chunk fds
 * (from the ATTACH reply; each chunk is chunk_size bytes) with cuMemImportFromShareableHandle
 * and map chunk i at base + i * chunk_size of one reserved range, read-write for the device,
 * so that frame n is at *devptr + n * page_size, as in the daemon. The fds stay the caller's
 * (they may be closed after the call). The driver is opened with dlopen; without one, or
 * without a GPU: -ENODEV (kvmm_cuda_map_why() says why). -EINVAL for bad arguments, -ENOMEM,
 * -EIO. The device's primary context is current in the calling thread on success.
 */
int kvmm_cuda_map_fds(int device, const int *fds, uint32_t nr_chunks, uint64_t chunk_size,
		      struct kvmm_cuda_map **map, uint64_t *devptr);
/* Unmap and release (the daemon's memory is unaffected). NULL is ok. */
void kvmm_cuda_unmap(struct kvmm_cuda_map *map);
/* Why the last kvmm_cuda_map_fds failed, in words. */
const char *kvmm_cuda_map_why(void);

/* ---- Errors --------------------------------------------------------------------------- */

/*
 * Text for a status (negative or positive errno value, kvmm codes included); never NULL,
 * static storage, safe from any thread.
 */
const char *kvmm_strerror(int err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

/* The admin calls (status, namespaces, limits, swapon/off, trace, page tables, ...). */
#include "runtime/kvmm_admin.h"

#endif /* KVMM_RUNTIME_KVMM_H */
