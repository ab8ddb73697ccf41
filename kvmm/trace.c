// SPDX-License-Identifier: MIT
/*
 * kvmm/trace.c - the trace ring behind kvmm/trace.h.  One global ring (kvmmd installs it;
 * NULL keeps every tracepoint a single branch).  A writer claims the next record number with
 * one atomic add, marks the slot busy (seqno 0), fills it and publishes it by storing its
 * number; it never waits, so a ring nobody reads simply wraps.  A reader copies a slot and
 * keeps the copy only when the slot's number was the wanted one before and after the copy,
 * which is how it learns that the ring overwrote records it had not read yet (counted as lost
 * by kvmm/ipc/admin.c).  kvmmd's loop and kvswapd both write; the
 * protocol keeps them and any other writers correct.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvmm/trace.h"

struct kvmm_trace *kvmm_trace_ring;

static const char *const type_names[KVMM_TR_TYPE_COUNT] = {
	[KVMM_TR_ALLOC] = "alloc",	[KVMM_TR_FREE] = "free",      [KVMM_TR_SEAL] = "seal",
	[KVMM_TR_HIT] = "hit",		[KVMM_TR_MISS] = "miss",      [KVMM_TR_RECLAIM] = "reclaim",
	[KVMM_TR_SWAPOUT] = "swap-out", [KVMM_TR_SWAPIN] = "swap-in", [KVMM_TR_FAULT] = "fault",
	[KVMM_TR_OOM] = "oom",		[KVMM_TR_ATTACH] = "attach",  [KVMM_TR_DETACH] = "detach",
};

const char *kvmm_trace_type_name(unsigned int type)
{
	return type < KVMM_TR_TYPE_COUNT ? type_names[type] : "?";
}

int kvmm_trace_type_from_name(const char *name)
{
	unsigned int i;

	for (i = 0; i < KVMM_TR_TYPE_COUNT; i++)
		if (!strcmp(name, type_names[i]))
			return (int)i;
	return -EINVAL;
}

struct kvmm_trace *kvmm_trace_create(uint32_t nr)
{
	struct kvmm_trace *tr;
	uint32_t n = 64;

	if (nr > (1u << 24)) {
		errno = EINVAL;
		return NULL;
	}
	while (n < nr)
		n <<= 1;
	tr = calloc(1, sizeof(*tr));
	if (!tr)
		return NULL;
	tr->ring = calloc(n, sizeof(*tr->ring));
	if (!tr->ring) {
		free(tr);
		return NULL;
	}
	tr->mask = n - 1;
	return tr;
}

void kvmm_trace_destroy(struct kvmm_trace *tr)
{
	if (!tr)
		return;
	free(tr->ring);
	free(tr);
}

uint64_t kvmm_trace_head(const struct kvmm_trace *tr)
{
	return __atomic_load_n(&tr->head, __ATOMIC_ACQUIRE);
}

bool kvmm_trace_read(const struct kvmm_trace *tr, uint64_t seqno, struct kvmm_trace_rec *out)
{
	const struct kvmm_trace_rec *slot;

	if (!seqno)
		return false;
	slot = &tr->ring[(seqno - 1) & tr->mask];
	/* pairs with the release store of the slot's number in kvmm_trace_write() */
	if (__atomic_load_n(&slot->seqno, __ATOMIC_ACQUIRE) != seqno)
		return false;
	memcpy(out, slot, sizeof(*out));
	/* the copy must be complete before the number is checked again */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&slot->seqno, __ATOMIC_RELAXED) != seqno)
		return false;
	out->seqno = seqno;
	return true;
}

/*
 * Inside a clock span a thread stages its records here and publishes them all at the span's
 * end (or when the stage is full) with one atomic add for the lot: the add is a locked
 * instruction that waits for every earlier store of the request to drain, and with one per
 * record it was a fifth of kvmmd's time per request (perf, the flow benchmark).
 */
#define TRACE_STAGE 128

struct trace_stage {
	uint64_t clock;	       /* kvmm_trace_clock_begin's reading, 0 outside a span */
	struct kvmm_trace *tr; /* the ring the staged records are for */
	uint32_t nr;
	struct kvmm_trace_rec rec[TRACE_STAGE];
};

static __thread struct trace_stage trace_stage;

bool kvmm_trace_overwritten(const struct kvmm_trace *tr, uint64_t seqno)
{
	const struct kvmm_trace_rec *slot = &tr->ring[(seqno - 1) & tr->mask];

	if (kvmm_trace_head(tr) >= seqno + tr->mask + 1)
		return true;
	return __atomic_load_n(&slot->seqno, __ATOMIC_ACQUIRE) > seqno;
}

static uint64_t trace_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claim @nr record numbers at once and publish @recs in them, in order. */
static void trace_publish(struct kvmm_trace *tr, const struct kvmm_trace_rec *recs, uint32_t nr)
{
	uint64_t n = __atomic_add_fetch(&tr->head, nr, __ATOMIC_ACQ_REL) - nr;

	for (uint32_t i = 0; i < nr; i++) {
		struct kvmm_trace_rec *slot = &tr->ring[(n + i) & tr->mask];

		/* busy first: a reader that sees 0 (or another number) rejects the slot */
		__atomic_store_n(&slot->seqno, 0, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		slot->ts_ns = recs[i].ts_ns;
		slot->pool = recs[i].pool;
		slot->seq = recs[i].seq;
		slot->count = recs[i].count;
		slot->client = recs[i].client;
		slot->frame = recs[i].frame;
		slot->type = recs[i].type;
		slot->ns = recs[i].ns;
		slot->pad = 0;
		/* publish: the fields above are visible before the number a reader checks */
		__atomic_store_n(&slot->seqno, n + i + 1, __ATOMIC_RELEASE);
	}
}

static void trace_flush(struct trace_stage *st)
{
	/* a ring uninstalled since the records were staged takes them with it */
	if (st->nr && st->tr == __atomic_load_n(&kvmm_trace_ring, __ATOMIC_ACQUIRE))
		trace_publish(st->tr, st->rec, st->nr);
	st->nr = 0;
}

void kvmm_trace_clock_begin(void)
{
	struct trace_stage *st = &trace_stage;

	trace_flush(st);
	st->clock = __atomic_load_n(&kvmm_trace_ring, __ATOMIC_RELAXED) ? trace_now() : 0;
}

void kvmm_trace_clock_end(void)
{
	struct trace_stage *st = &trace_stage;

	trace_flush(st);
	st->clock = 0;
}

void kvmm_trace_write(struct kvmm_trace *tr, unsigned int type, const void *pool, uint32_t client,
		      uint16_t ns, uint64_t seq, uint32_t frame, uint64_t count)
{
	struct trace_stage *st = &trace_stage;
	struct kvmm_trace_rec one, *r = &one;

	if (!tr)
		return;
	if (st->clock) {
		if (st->nr && (st->tr != tr || st->nr == TRACE_STAGE))
			trace_flush(st);
		st->tr = tr;
		r = &st->rec[st->nr++];
	}
	r->ts_ns = st->clock ? st->clock : trace_now();
	r->pool = (uint64_t)(uintptr_t)pool;
	r->seq = seq;
	r->count = count;
	r->client = client;
	r->frame = frame;
	r->type = (uint16_t)type;
	r->ns = ns;
	if (r == &one)
		trace_publish(tr, r, 1);
}
