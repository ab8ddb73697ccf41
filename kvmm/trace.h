/* SPDX-License-Identifier: MIT */
/*
 * kvmm/trace.h - tracepoints of the core: a fixed-size ring of small binary events (alloc,
 * free, seal, hit, miss, reclaim, swap-out, swap-in, fault, oom, attach, detach), each with a
 * timestamp, the client, namespace, sequence, frame and a count.  The ring is global and off
 * (NULL) unless a program installs one: kvmmd does at start, so `kvmmctl trace` can read and
 * follow it; tests and benchmarks that link the core alone pay one predictable branch per
 * tracepoint.  Writers never block and never wait for readers: a slot is claimed with one
 * atomic add and overwritten once the ring wraps; readers notice what they lost from the
 * sequence numbers.  Documentation/admin-guide/kvmmctl.md lists the events.
 */
#ifndef KVMM_TRACE_H
#define KVMM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kvmm_trace_type {
	KVMM_TR_ALLOC,	 /* a frame allocated to a sequence (frame) */
	KVMM_TR_FREE,	 /* a frame freed (frame) */
	KVMM_TR_SEAL,	 /* a block sealed into the page cache (frame) */
	KVMM_TR_HIT,	 /* prefix lookup: count blocks found */
	KVMM_TR_MISS,	 /* prefix lookup stopped at a missing block */
	KVMM_TR_RECLAIM, /* reclaim: count pages evicted (of a pass) */
	KVMM_TR_SWAPOUT, /* a page written to a swap tier (frame, count = tier) */
	KVMM_TR_SWAPIN,	 /* a page read back from a swap tier (frame, count = tier) */
	KVMM_TR_FAULT,	 /* a client touched a non-present page */
	KVMM_TR_OOM,	 /* an allocation failed with -ENOMEM */
	KVMM_TR_ATTACH,	 /* a client attached to a namespace */
	KVMM_TR_DETACH,	 /* a client's address space was torn down */
	KVMM_TR_TYPE_COUNT,
};

/* Name of an event type ("alloc", "swap-out", ...), "?" when out of range. */
const char *kvmm_trace_type_name(unsigned int type);
/* The type named @name, or -EINVAL. */
int kvmm_trace_type_from_name(const char *name);

#define KVMM_TRACE_NONE UINT32_MAX /* frame / client / seq not known */

/* One event, 56 bytes. */
struct kvmm_trace_rec {
	uint64_t seqno;	 /* position in the ring's history, from 1; 0: slot being written */
	uint64_t ts_ns;	 /* CLOCK_MONOTONIC */
	uint64_t pool;	 /* the struct kvmm_pool's address: kvmmd maps it to a namespace */
	uint64_t seq;	 /* core sequence id, 0 when none */
	uint64_t count;	 /* event-specific amount */
	uint32_t client; /* client id (magazine owner), 0 when none */
	uint32_t frame;	 /* KVMM_TRACE_NONE when none */
	uint16_t type;	 /* enum kvmm_trace_type */
	uint16_t ns;	 /* namespace id within its pool, 0 when none */
	uint32_t pad;
};

struct kvmm_trace {
	uint64_t head; /* records ever written (atomic); the next gets seqno head + 1 */
	uint32_t mask; /* nr - 1, nr a power of two */
	struct kvmm_trace_rec *ring;
};

/* The ring every tracepoint writes to; NULL = tracing off.  Set by kvmmd. */
extern struct kvmm_trace *kvmm_trace_ring;

/* A ring of at least @nr records (rounded up to a power of two, >= 64), NULL + errno. */
struct kvmm_trace *kvmm_trace_create(uint32_t nr);
void kvmm_trace_destroy(struct kvmm_trace *tr);

/* The records written so far (the next record's seqno is this + 1). */
uint64_t kvmm_trace_head(const struct kvmm_trace *tr);
/*
 * Copy record number @seqno (1-based, as in rec->seqno) if the ring still holds it: true, or
 * false when it was overwritten (or is being written, or not written yet).
 */
bool kvmm_trace_read(const struct kvmm_trace *tr, uint64_t seqno, struct kvmm_trace_rec *out);
/*
 * After kvmm_trace_read() of @seqno failed: true when the record is gone for good (its slot
 * holds a later record), false when it may still appear (claimed, not yet published).
 */
bool kvmm_trace_overwritten(const struct kvmm_trace *tr, uint64_t seqno);

/*
 * One clock reading for the records of one request: between kvmm_trace_clock_begin() and
 * kvmm_trace_clock_end() this thread's records carry the time of the begin (a request that
 * allocates, seals and frees a hundred frames read the clock a hundred times, a third of its
 * cost in the daemon), and they are staged in the thread and published together at the end
 * (or every 128 records), with one atomic add instead of one per record.  Readers see a
 * span's records when it ends.  Outside such a span every record reads the clock and is
 * published at once.
 */
void kvmm_trace_clock_begin(void);
void kvmm_trace_clock_end(void);

/* Write one event (no-op when @tr is NULL).  Never blocks. */
void kvmm_trace_write(struct kvmm_trace *tr, unsigned int type, const void *pool, uint32_t client,
		      uint16_t ns, uint64_t seq, uint32_t frame, uint64_t count);

/* The tracepoint: one load and one branch when tracing is off.  @pool: the struct kvmm_pool. */
#define kvmm_trace_event(type, pool, client, ns, seq, frame, count)                            \
	do {                                                                                   \
		struct kvmm_trace *__tr = __atomic_load_n(&kvmm_trace_ring, __ATOMIC_ACQUIRE); \
		if (__tr)                                                                      \
			kvmm_trace_write(__tr, (type), (pool), (client), (ns), (seq), (frame), \
					 (count));                                             \
	} while (0)

#endif /* KVMM_TRACE_H */
