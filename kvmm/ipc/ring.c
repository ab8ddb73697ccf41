// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/ring.c - the daemon's half of the data plane (uapi/kvmm.h, "Data plane"): one
 * sealed memfd region per client holding its submission and completion rings, its page-table
 * mirror and its magazine, plus an eventfd doorbell.  server.c polls every client's SQ on
 * each loop iteration through kvmm_dp_poll(); the SQEs run through the same dispatch as
 * socket requests (the server's ring_exec, dispatch.c's kvmm_ipc_ring_exec()), so the ring
 * changes transport, not semantics.  The call goes through that pointer because the
 * handlers call down into this file (mirror, magazine): ring.c never calls up.
 *
 * Nothing in the region is trusted: sizes and offsets come from the daemon's private copy of
 * the header, the indexes the daemon owns (SQ head, CQ tail, magazine tail, return head) are
 * kept privately and only published, an SQE and its payload are copied out before they are
 * checked, and a client index that claims more than its ring holds gets the client closed.
 * Work per poll is bounded (budget), and a full CQ stops consumption (backpressure) instead
 * of blocking: a client that never reaps only stalls itself.  The region is sealed against
 * shrinking, so a client cannot make the daemon fault on it.
 *
 * The magazine's frames are held as the blocks of a hidden sequence of the client's address
 * space: they are charged to the namespace and mapped by one PTE each, which keeps every pool
 * invariant, and teardown (kvmm_aspace_destroy) returns them like any sequence's pages.
 * Which of them the client has popped is tracked privately, from the magazine head it
 * publishes, so a returned number is taken back only if it was handed out and popped, and an
 * APPEND that names frames for its new blocks (SEQ_APPEND_FRAMES) is refused unless every
 * one is a frame this client popped: those pages then move from the hidden sequence to the
 * client's (kvmm_mm_seq_unmap_tail, kvmm_mm_seq_append_pages), their charge unchanged, with
 * whatever the client already wrote in them.  After the client's first MAG_REFILL the daemon
 * tops the ring up itself, from every poll, whenever fewer than KVMM_MAG_LOW_MARK frames are
 * ready: returned frames first (they stay charged, cached for the next pop), then new ones in
 * one batch.  A frame index lookup is a hash probe, never a scan.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atomic.h"
#include "compiler.h"
#include "log.h"
#include "kvmm/trace.h"
#include "kvmm/ipc/ipc.h"

struct kvmm_dp {
	int memfd, efd;
	void *map;
	struct kvmm_shm_hdr hdr; /* private copy: never read back from the region */
	uint32_t mask;		 /* ring_entries - 1 */
	struct kvmm_shm_ring *sq, *cq, *mag, *ret;
	struct kvmm_ring_sqe *sqes;
	uint8_t *data;
	uint8_t *out; /* the out area (KVMM_FEAT_RING_OUT), NULL without one */
	struct kvmm_ring_cqe *cqes;
	struct kvmm_pt_slot *pt;
	int32_t *pt_frames;
	uint32_t *mag_frames, *ret_frames;

	/* indexes this side owns, published with release stores */
	uint32_t sq_head, cq_tail, mag_tail, ret_head;
	uint32_t mag_head; /* the client's magazine head as last validated */

	uint64_t *slot_seq; /* mirror slot -> sequence id (0 free), private */
	/*
	 * An SQE waits for the remote tier (remote_ipc.c): consumed, its CQE not written yet.
	 * CQE i answers SQE i (the client reclaims its data area, matches its synchronous call
	 * and fails what is in flight by that order), so the SQEs after it wait in the SQ until
	 * kvmm_dp_park_done() posts it - as a parked socket request holds the socket.
	 */
	bool parked;
	bool park_out; /* the parked SQE has KVMM_SQE_F_OUT: its reply goes to the out area too */

	/*
	 * magazine: held[i] is the frame of block i of mag_seq, state[i] its MAG_* state.  The
	 * books grow (held_grow): frames the client popped and has not named yet are its own
	 * and count against its namespace only, not against mag_size, which bounds what the
	 * magazine parks (published and spare).
	 */
	struct kvmm_seq *mag_seq;
	uint32_t *held;
	uint8_t *state;
	uint32_t nr_held, held_cap;
	uint32_t *hash; /* frame -> index + 1 in held[], open addressing */
	uint32_t hash_mask;
	uint32_t *spare; /* frames held but neither published nor popped (a stack) */
	uint32_t nr_spare;
	uint32_t *published; /* private copy of the magazine ring's entries */
	bool mag_auto;	     /* keep it topped up (after the client's first MAG_REFILL) */
	bool mag_starved;    /* the last top-up stayed under the low mark */
	/*
	 * Reclaim takes idle magazine frames back through this (mag_shrink); mag_busy is set
	 * while mag_seq itself is being changed, when reclaim (started by that very change's
	 * allocation) must leave it alone.  Both under the pool lock, like all of the above.
	 */
	struct kvmm_shrinker shrinker;
	struct kvmm_session *s;
	bool mag_busy;
};

static uint32_t mag_shrink(struct kvmm_shrinker *sh, struct kvmm_ns *ns, uint32_t want);

/* ---- creation ------------------------------------------------------------------------- */

static void *area(struct kvmm_dp *dp, uint64_t off)
{
	return (uint8_t *)dp->map + off;
}

int kvmm_dp_create(struct kvmm_session *s, uint32_t ring_entries, int fds[2],
		   struct kvmm_attach_rep *rep)
{
	struct kvmm_dp *dp;
	uint64_t size;
	int ret;

	if (!ring_entries)
		ring_entries = KVMM_RING_DEFAULT_ENTRIES;
	dp = calloc(1, sizeof(*dp));
	if (!dp)
		return -ENOMEM;
	dp->memfd = dp->efd = -1;
	dp->map = MAP_FAILED;
	/* an out area for a client that asked for it (a region an older client could not check) */
	size = kvmm_shm_layout_out(&dp->hdr, ring_entries, KVMM_PT_DEFAULT_SLOTS,
				   KVMM_PT_DEFAULT_MAX_BLOCKS, KVMM_MAG_DEFAULT_SIZE,
				   s->features & KVMM_FEAT_RING_OUT ? KVMM_RING_OUT_SIZE : 0);
	if (!size) {
		ret = -EINVAL;
		goto out_free;
	}
	dp->mask = ring_entries - 1;
	dp->slot_seq = calloc(dp->hdr.pt_slots, sizeof(*dp->slot_seq));
	dp->held = calloc(dp->hdr.mag_size, sizeof(*dp->held));
	dp->state = calloc(dp->hdr.mag_size, sizeof(*dp->state));
	dp->spare = calloc(dp->hdr.mag_size, sizeof(*dp->spare));
	dp->published = calloc(dp->hdr.mag_size, sizeof(*dp->published));
	/* at most half full: short probe chains */
	for (dp->hash_mask = 1; dp->hash_mask < 2 * dp->hdr.mag_size; dp->hash_mask *= 2)
		;
	dp->hash = calloc(dp->hash_mask, sizeof(*dp->hash));
	dp->hash_mask--;
	dp->held_cap = dp->hdr.mag_size;
	if (!dp->slot_seq || !dp->held || !dp->state || !dp->spare || !dp->published || !dp->hash) {
		ret = -ENOMEM;
		goto out_free;
	}
	dp->memfd = memfd_create("kvmm-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (dp->memfd < 0 || ftruncate(dp->memfd, (off_t)size)) {
		ret = -errno;
		goto out_free;
	}
	/* the client gets this fd: it must not be able to shrink the region under us (SIGBUS) */
	if (fcntl(dp->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = -errno;
		goto out_free;
	}
	dp->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, dp->memfd, 0);
	if (dp->map == MAP_FAILED) {
		ret = -errno;
		goto out_free;
	}
	memcpy(dp->map, &dp->hdr, sizeof(dp->hdr));
	dp->sq = area(dp, dp->hdr.sq_off);
	/* the hints start as the main loop's; a worker's are written at kvmm_ring_worker_add */
	dp->sq->cpu = s->srv->loop.cpu;
	dp->sq->load = s->srv->loop.load;
	dp->sqes = area(dp, dp->hdr.sqes_off);
	dp->data = area(dp, dp->hdr.data_off);
	dp->cq = area(dp, dp->hdr.cq_off);
	dp->cqes = area(dp, dp->hdr.cqes_off);
	dp->pt = area(dp, dp->hdr.pt_off);
	dp->pt_frames = area(dp, dp->hdr.pt_frames_off);
	dp->mag = area(dp, dp->hdr.mag_off);
	dp->mag_frames = area(dp, dp->hdr.mag_frames_off);
	dp->ret = area(dp, dp->hdr.ret_off);
	dp->ret_frames = area(dp, dp->hdr.ret_frames_off);
	dp->out = dp->hdr.out_size ? area(dp, dp->hdr.out_off) : NULL;

	dp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (dp->efd < 0) {
		ret = -errno;
		goto out_free;
	}
	ret = kvmm_mm_seq_create(s->as, &dp->mag_seq);
	if (ret)
		goto out_free;
	/* the client may be writing into a popped frame at any time: never swap these out */
	dp->mag_seq->flags |= KVMM_SEQ_F_NORECLAIM;
	{
		/*
		 * Edge-triggered, tagged with the session's address | 1: server.c never
		 * dereferences it (the session may close earlier in the same batch), it only
		 * learns that some ring wants polling, and it polls them all anyway.
		 */
		struct epoll_event ev = {.events = EPOLLIN | EPOLLET,
					 .data.ptr = (void *)((uintptr_t)s | 1)};

		/* into the epoll set of the loop that will poll these rings (ring_worker.c) */
		if (epoll_ctl(kvmm_ring_worker_pick(s), EPOLL_CTL_ADD, dp->efd, &ev)) {
			s->rw = NULL;
			ret = -errno;
			kvmm_mm_seq_free(dp->mag_seq);
			goto out_free;
		}
	}
	dp->s = s;
	dp->shrinker.scan = mag_shrink;
	kvmm_register_shrinker(s->as->pool, &dp->shrinker);
	s->dp = dp;
	fds[0] = dp->memfd;
	fds[1] = dp->efd;
	rep->shm_size = size;
	rep->ring_entries = ring_entries;
	rep->mag_size = dp->hdr.mag_size;
	return 0;

out_free:
	if (dp->map != MAP_FAILED)
		munmap(dp->map, size);
	if (dp->memfd >= 0)
		close(dp->memfd);
	if (dp->efd >= 0)
		close(dp->efd);
	free(dp->slot_seq);
	free(dp->held);
	free(dp->state);
	free(dp->spare);
	free(dp->hash);
	free(dp->published);
	free(dp);
	return ret;
}

void kvmm_dp_destroy(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;

	if (!dp)
		return;
	s->dp = NULL;
	kvmm_unregister_shrinker(s->as->pool, &dp->shrinker);
	/* the magazine's frames go back with their hidden sequence */
	kvmm_mm_seq_free(dp->mag_seq);
	/* the client still holds the eventfd: take it out of epoll before closing ours */
	epoll_ctl(s->rw ? s->rw->epoll_fd : s->srv->epoll_fd, EPOLL_CTL_DEL, dp->efd, NULL);
	s->rw = NULL; /* kvmm_ring_worker_del() took it out of the worker's list first */
	close(dp->efd);
	munmap(dp->map, dp->hdr.size);
	close(dp->memfd);
	free(dp->slot_seq);
	free(dp->held);
	free(dp->state);
	free(dp->spare);
	free(dp->hash);
	free(dp->published);
	free(dp);
}

/* ---- page-table mirror ------------------------------------------------------------------ */

static uint32_t slot_get(struct kvmm_dp *dp, struct kvmm_ipc_seq *is)
{
	uint32_t n = dp->hdr.pt_slots, want, i;

	if (is->pt_slot)
		return is->pt_slot;
	/* the client guesses (id - 1) % slots first: take it when free */
	want = (uint32_t)((is->id - 1) % n);
	for (i = 0; i < n; i++) {
		uint32_t k = (want + i) % n;

		if (!dp->slot_seq[k]) {
			dp->slot_seq[k] = is->id;
			is->pt_slot = k + 1;
			return is->pt_slot;
		}
	}
	return 0; /* all taken: this sequence is read over the socket */
}

void kvmm_dp_seq_update(struct kvmm_session *s, struct kvmm_ipc_seq *is, uint32_t from)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_seq *seq = is->seq;
	struct kvmm_pt_slot *slot;
	int32_t *frames;
	uint32_t k, b, end;

	if (!dp)
		return;
	k = slot_get(dp, is);
	if (!k)
		return;
	slot = &dp->pt[k - 1];
	frames = dp->pt_frames + (size_t)(k - 1) * dp->hdr.pt_max_blocks;
	end = min_t(uint32_t, seq->nblocks, dp->hdr.pt_max_blocks);
	if (READ_ONCE(slot->seq) != is->id)
		from = 0; /* a fresh slot (or one the client scribbled on): write it all */
	/* odd count, then the data, then even: a reader never uses a half-written table */
	kvmm_seqcount_write_begin((struct kvmm_seqcount *)&slot->seqcount);
	WRITE_ONCE(slot->seq, is->id);
	WRITE_ONCE(slot->nr_tokens, seq->ntokens);
	WRITE_ONCE(slot->nr_blocks, seq->nblocks);
	WRITE_ONCE(slot->flags, seq->nblocks > dp->hdr.pt_max_blocks ? KVMM_PT_F_OVERFLOW : 0);
	WRITE_ONCE(slot->reserved, 0);
	for (b = from; b < end; b++)
		WRITE_ONCE(frames[b], kvmm_pte_block(seq->pte[b]));
	kvmm_seqcount_write_end((struct kvmm_seqcount *)&slot->seqcount);
}

void kvmm_dp_seq_gone(struct kvmm_session *s, struct kvmm_ipc_seq *is)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_pt_slot *slot;

	if (!dp || !is->pt_slot)
		return;
	slot = &dp->pt[is->pt_slot - 1];
	kvmm_seqcount_write_begin((struct kvmm_seqcount *)&slot->seqcount);
	WRITE_ONCE(slot->seq, 0);
	WRITE_ONCE(slot->nr_blocks, 0);
	WRITE_ONCE(slot->nr_tokens, 0);
	WRITE_ONCE(slot->flags, 0);
	kvmm_seqcount_write_end((struct kvmm_seqcount *)&slot->seqcount);
	dp->slot_seq[is->pt_slot - 1] = 0;
	is->pt_slot = 0;
}

/* ---- magazine ----------------------------------------------------------------------------- */

/*
 * Held frames: index i of held[] is block i of the hidden sequence.  A held frame is SPARE
 * (the daemon's: returned by the client, or new), PUBLISHED (in the magazine ring, not yet
 * popped) or POPPED (the client's).  hash[] finds a frame's index (open addressing, linear
 * probing, slots hold index + 1), so following the client's head, taking returns and
 * checking the frames an append names cost O(1) per frame, not a scan of held[].
 */
enum {
	MAG_SPARE,
	MAG_PUBLISHED,
	MAG_POPPED,
	MAG_NAMED /* by the append being checked */
};

static uint32_t fhash_home(const struct kvmm_dp *dp, uint32_t frame)
{
	return (frame * 2654435761u) & dp->hash_mask;
}

/* Slot of @frame in hash[], or UINT32_MAX. */
static uint32_t fhash_slot(const struct kvmm_dp *dp, uint32_t frame)
{
	uint32_t k = fhash_home(dp, frame);

	for (;;) {
		uint32_t v = dp->hash[k];

		if (!v)
			return UINT32_MAX;
		if (dp->held[v - 1] == frame)
			return k;
		k = (k + 1) & dp->hash_mask;
	}
}

/* Index in held[] of @frame, or -1 when the magazine does not hold it. */
static int held_find(const struct kvmm_dp *dp, uint32_t frame)
{
	uint32_t k = fhash_slot(dp, frame);

	return k == UINT32_MAX ? -1 : (int)dp->hash[k] - 1;
}

static void fhash_add(struct kvmm_dp *dp, uint32_t frame, uint32_t i)
{
	uint32_t k = fhash_home(dp, frame);

	while (dp->hash[k])
		k = (k + 1) & dp->hash_mask;
	dp->hash[k] = i + 1;
}

/*
 * Make room in the books for @need held frames: held[] and state[] grow (doubling), and the
 * hash is rebuilt at least twice as large, so probe chains stay short.  0 or -ENOMEM (the
 * books are unchanged then).
 */
static int held_grow(struct kvmm_dp *dp, uint32_t need)
{
	uint32_t cap = dp->held_cap, mask, *held, *hash;
	uint8_t *state;

	if (need <= cap)
		return 0;
	while (cap < need)
		cap = cap > UINT32_MAX / 4 ? need : cap * 2;
	for (mask = 1; mask < 2 * cap; mask *= 2)
		;
	held = realloc(dp->held, sizeof(*held) * cap);
	if (!held)
		return -ENOMEM;
	dp->held = held;
	state = realloc(dp->state, sizeof(*state) * cap);
	if (!state)
		return -ENOMEM;
	dp->state = state;
	hash = calloc(mask, sizeof(*hash));
	if (!hash)
		return -ENOMEM;
	free(dp->hash);
	dp->hash = hash;
	dp->hash_mask = mask - 1;
	dp->held_cap = cap;
	for (uint32_t i = 0; i < dp->nr_held; i++)
		fhash_add(dp, dp->held[i], i);
	return 0;
}

/* Remove @frame (present), shifting the probe chain back so no tombstone is needed. */
static void fhash_del(struct kvmm_dp *dp, uint32_t frame)
{
	uint32_t i = fhash_slot(dp, frame), j = i;

	dp->hash[i] = 0;
	for (;;) {
		uint32_t k;

		j = (j + 1) & dp->hash_mask;
		if (!dp->hash[j])
			return;
		k = fhash_home(dp, dp->held[dp->hash[j] - 1]);
		/* an entry whose home lies cyclically in (i, j] is still reachable: leave it */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		dp->hash[i] = dp->hash[j];
		dp->hash[j] = 0;
		i = j;
	}
}

/*
 * Take held frame i out of the magazine's books and make it the hidden sequence's last
 * block (where the core can unmap it): the last entry moves into its place.
 */
static void held_to_last(struct kvmm_session *s, uint32_t i)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_seq *seq = dp->mag_seq;
	uint32_t last = dp->nr_held - 1;
	uint64_t pte;

	fhash_del(dp, dp->held[i]);
	if (i != last) {
		uint32_t k = fhash_slot(dp, dp->held[last]); /* before held[] changes under it */

		pte = seq->pte[i];
		seq->pte[i] = seq->pte[last];
		seq->pte[last] = pte;
		dp->held[i] = dp->held[last];
		dp->state[i] = dp->state[last];
		dp->hash[k] = i + 1;
	}
	dp->nr_held--;
}

/* Give back held frame i to the pool (truncating the hidden sequence frees it). */
static void held_release(struct kvmm_session *s, uint32_t i)
{
	struct kvmm_dp *dp = s->dp;

	held_to_last(s, i);
	kvmm_mm_seq_truncate(dp->mag_seq, (uint64_t)dp->nr_held * s->as->fmt.tokens_per_page);
}

/* Add the hidden sequence's blocks [nr_held, nblocks) to the books as @state. */
static void held_add_new(struct kvmm_dp *dp, uint8_t state)
{
	while (dp->nr_held < dp->mag_seq->nblocks) {
		uint32_t i = dp->nr_held++;

		dp->held[i] = kvmm_mm_seq_frame(dp->mag_seq, i);
		dp->state[i] = state;
		fhash_add(dp, dp->held[i], i);
		if (state == MAG_SPARE)
			dp->spare[dp->nr_spare++] = dp->held[i];
	}
}

static void publish(struct kvmm_dp *dp, uint32_t i)
{
	uint32_t size = dp->hdr.mag_size, f = dp->held[i];

	dp->state[i] = MAG_PUBLISHED;
	dp->published[dp->mag_tail % size] = f;
	WRITE_ONCE(dp->mag_frames[dp->mag_tail % size], f);
	WRITE_ONCE(dp->mag_tail, dp->mag_tail + 1); /* mag_pending() reads it unlocked */
}

/*
 * Follow the client's magazine head (frames it popped) and take back what it returned: a
 * returned frame becomes a spare, published again by the next fill (it stays charged: the
 * magazine caches up to mag_size frames per client).  Returns the frames that moved, or
 * -EPROTO for an index out of range.
 */
static int mag_poll(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;
	uint32_t size = dp->hdr.mag_size, h, t, n = 0;

	/* acquire: pairs with the client's release of head after it copied the frames out */
	h = smp_load_acquire(&dp->mag->head);
	if ((uint32_t)(h - dp->mag_head) > (uint32_t)(dp->mag_tail - dp->mag_head))
		return -EPROTO; /* popped more than was published */
	for (; dp->mag_head != h; WRITE_ONCE(dp->mag_head, dp->mag_head + 1), n++) {
		int i = held_find(dp, dp->published[dp->mag_head % size]);

		if (i >= 0 && dp->state[i] == MAG_PUBLISHED)
			dp->state[i] = MAG_POPPED;
	}
	/* acquire: pairs with the client's release of the return tail after writing the entries */
	t = smp_load_acquire(&dp->ret->tail);
	if ((uint32_t)(t - dp->ret_head) > size)
		return -EPROTO;
	for (; dp->ret_head != t; WRITE_ONCE(dp->ret_head, dp->ret_head + 1)) {
		int i = held_find(dp, READ_ONCE(dp->ret_frames[dp->ret_head % size]));

		/* a number it does not hold (or twice) is ignored */
		if (i < 0 || dp->state[i] != MAG_POPPED)
			continue;
		n++;
		if (dp->mag_tail - dp->mag_head + dp->nr_spare < size) {
			dp->state[i] = MAG_SPARE;
			dp->spare[dp->nr_spare++] = dp->held[i];
		} else {
			/* the magazine parks mag_size frames at most: this one goes to the pool */
			held_release(s, (uint32_t)i);
		}
	}
	/* release: the return slots may be reused once we stopped reading them */
	smp_store_release(&dp->ret->head, dp->ret_head);
	if (n)
		WRITE_ONCE(dp->mag_starved, false);
	return (int)n;
}

/*
 * Publish up to @want more frames: spares first, then new frames charged to the namespace
 * (one append of the hidden sequence for the whole batch; page by page if that fails), never
 * more than mag_size parked (published or spare; frames the client popped are not counted,
 * they are its own until it names or returns them).  @background: a top-up nobody asked for, which must not push the
 * pool into reclaim, so it takes no new frame once free frames are under the low mark.
 * Returns the frames published (0 with *err set when none could be).
 */
static uint32_t mag_fill(struct kvmm_session *s, uint32_t want, bool background, int *err)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_pool *pool = s->as->pool;
	uint32_t tpp = s->as->fmt.tokens_per_page, size = dp->hdr.mag_size, moved = 0, room;

	*err = 0;
	room = size - (dp->mag_tail - dp->mag_head);
	want = min_t(uint32_t, want, room);
	while (moved < want && dp->nr_spare) {
		int i = held_find(dp, dp->spare[--dp->nr_spare]);

		if (i >= 0 && dp->state[i] == MAG_SPARE) {
			publish(dp, (uint32_t)i);
			moved++;
		}
	}
	/* past the spares: new frames, as many as the ring has room for (want <= room) */
	while (moved < want) {
		uint32_t k = want - moved, first;
		int ret;

		if (background && kvmm_pool_nr_free(pool) < pool->wmark_low + k)
			break;
		ret = held_grow(dp, dp->nr_held + k);
		if (ret) {
			*err = ret;
			break;
		}
		dp->mag_busy = true; /* the append may reclaim: not from this magazine */
		ret = kvmm_mm_seq_append(dp->mag_seq, k * tpp, NULL);
		if (ret && k > 1)
			ret = kvmm_mm_seq_append(dp->mag_seq, tpp, NULL); /* one page at a time */
		dp->mag_busy = false;
		if (ret) {
			*err = ret;
			break;
		}
		first = dp->nr_held;
		held_add_new(dp, MAG_PUBLISHED);
		for (; first < dp->nr_held; first++, moved++)
			publish(dp, first);
	}
	if (moved)
		/* release: the frame numbers above are visible before the tail that publishes them */
		smp_store_release(&dp->mag->tail, dp->mag_tail);
	return moved;
}

/* The daemon's own top-up, from every poll: below the low mark, fill the ring again. */
static uint32_t mag_topup(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;
	uint32_t size = dp->hdr.mag_size, moved;
	int err;

	if (!dp->mag_auto || dp->mag_starved ||
	    dp->mag_tail - dp->mag_head >= KVMM_MAG_LOW_MARK(size))
		return 0;
	moved = mag_fill(s, size, true, &err);
	/* not back above the mark: wait for the client to move before trying again */
	WRITE_ONCE(dp->mag_starved, dp->mag_tail - dp->mag_head < KVMM_MAG_LOW_MARK(size));
	return moved;
}

/*
 * Give back up to @want frames the client does not hold: spares, then published ones, taken
 * back from the ring by moving its head with the same compare-and-swap the client pops with,
 * so a frame is either popped by the client or retracted, never both.
 */
static uint32_t mag_take_back(struct kvmm_session *s, uint32_t want)
{
	struct kvmm_dp *dp = s->dp;
	uint32_t size = dp->hdr.mag_size, n = 0;

	while (n < want && dp->nr_spare) {
		int i = held_find(dp, dp->spare[--dp->nr_spare]);

		if (i >= 0 && dp->state[i] == MAG_SPARE) {
			held_release(s, (uint32_t)i);
			n++;
		}
	}
	for (int tries = 0; n < want && tries < 8; tries++) {
		uint32_t h = dp->mag_head, k = min_t(uint32_t, want - n, dp->mag_tail - h);

		if (!k)
			break;
		if (!__atomic_compare_exchange_n(&dp->mag->head, &h, h + k, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			/* the client popped meanwhile: account for it and try again */
			if (mag_poll(s) < 0)
				break;
			continue;
		}
		for (; dp->mag_head != h + k; WRITE_ONCE(dp->mag_head, dp->mag_head + 1)) {
			int i = held_find(dp, dp->published[dp->mag_head % size]);

			if (i >= 0 && dp->state[i] == MAG_PUBLISHED) {
				held_release(s, (uint32_t)i);
				n++;
			}
		}
	}
	return n;
}

/* MAG_DRAIN: up to @want frames (0: all), and no top-up until the next MAG_REFILL. */
static uint32_t mag_drain(struct kvmm_session *s, uint32_t want)
{
	uint32_t n = mag_take_back(s, want ? want : UINT32_MAX);

	WRITE_ONCE(s->dp->mag_auto, false); /* drained on purpose */
	return n;
}

/*
 * Reclaim's request (shrinker.c): the frames parked in this client's magazine are idle, so
 * they go before any cached prefix or decoding sequence.  Popped frames are the client's and
 * stay.  Top-ups go on afterwards, but only once the client has moved (mag_starved) and only
 * with frames above the low watermark (mag_fill's background rule), so a magazine never takes
 * back what reclaim just freed; a client that finds its magazine empty asks with MAG_REFILL.
 */
static uint32_t mag_shrink(struct kvmm_shrinker *sh, struct kvmm_ns *ns, uint32_t want)
{
	struct kvmm_dp *dp = container_of(sh, struct kvmm_dp, shrinker);
	struct kvmm_session *s = dp->s;
	uint32_t n;

	if (dp->mag_busy || (ns && s->as->ns != ns))
		return 0;
	n = mag_take_back(s, want);
	if (n) {
		WRITE_ONCE(dp->mag_starved, true);
		kvmm_debug("ipc: client %u: reclaim took %u magazine frames back", s->id, n);
	}
	return n;
}

int kvmm_dp_mag_op(struct kvmm_session *s, unsigned int op, const void *p, void *rp, size_t *rlen)
{
	struct kvmm_mag_req req;
	struct kvmm_mag_rep rep = {0};
	int ret;

	if (!s->dp)
		return -EOPNOTSUPP;
	memcpy(&req, p, sizeof(req));
	if (req.reserved)
		return -EINVAL;
	ret = mag_poll(s);
	if (ret < 0)
		return -EINVAL;
	if (op == KVMM_OP_MAG_REFILL) {
		rep.nr_frames =
			mag_fill(s, req.nr_frames ? req.nr_frames : UINT32_MAX, false, &ret);
		if (!rep.nr_frames && ret)
			return ret;
		/* from now on the daemon keeps it topped up without being asked */
		WRITE_ONCE(s->dp->mag_auto, true);
		WRITE_ONCE(s->dp->mag_starved, false);
	} else {
		rep.nr_frames = mag_drain(s, req.nr_frames);
	}
	rep.nr_held = s->dp->nr_held;
	memcpy(rp, &rep, sizeof(rep));
	*rlen = sizeof(rep);
	return 0;
}

int kvmm_dp_append_frames(struct kvmm_session *s, struct kvmm_seq *seq, uint32_t n,
			  const uint32_t *ids, const uint32_t *frames, uint32_t nr_frames)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_page *stack[64], **pages = stack;
	uint32_t tpp = s->as->fmt.tokens_per_page, i;
	int ret = 0;

	if (!dp)
		return -EINVAL; /* no magazine: no frame can be in it */
	/* the client popped them just before: catch up with its head first */
	if (mag_poll(s) < 0)
		return -EINVAL;
	/* every frame must be one this client popped, named once: mark them as we check */
	for (i = 0; i < nr_frames; i++) {
		int k = held_find(dp, frames[i]);

		if (k < 0 || dp->state[k] != MAG_POPPED) {
			ret = -EINVAL;
			break;
		}
		dp->state[k] = MAG_NAMED; /* a second mention fails the test above */
	}
	while (i--)
		dp->state[held_find(dp, frames[i])] = MAG_POPPED;
	if (ret)
		return ret;
	if (nr_frames > ARRAY_SIZE(stack)) {
		pages = malloc(sizeof(*pages) * nr_frames);
		if (!pages)
			return -ENOMEM;
	}
	dp->mag_busy = true; /* the append may reclaim: not from this magazine */
	for (i = 0; i < nr_frames; i++) {
		held_to_last(s, (uint32_t)held_find(dp, frames[i]));
		ret = kvmm_mm_seq_unmap_tail(dp->mag_seq, 1, &pages[i]);
		KVMM_BUG_ON(ret); /* a NORECLAIM, unshared, unsealed page of ours */
	}
	ret = kvmm_mm_seq_append_pages(seq, n, ids, pages, nr_frames);
	if (ret) {
		/*
		 * Back into the hidden sequence, still popped: it only shrank, so its arrays
		 * have room and it holds whole pages (no copy-on-write): this cannot fail.
		 */
		int r = kvmm_mm_seq_append_pages(dp->mag_seq, nr_frames * tpp, NULL, pages,
						 nr_frames);

		KVMM_BUG_ON(r);
		held_add_new(dp, MAG_POPPED);
	}
	dp->mag_busy = false;
	if (pages != stack)
		free(pages);
	return ret;
}

/* ---- rings --------------------------------------------------------------------------------- */

static void futex_wake(uint32_t *word)
{
	/* shared (no FUTEX_PRIVATE_FLAG): the waiter is another process mapping the memfd */
	syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

bool kvmm_dp_pending(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;

	/*
	 * A parked ring is not looked at until its CQE goes out.  Without the pool lock: the
	 * main loop's kvmm_dp_park_done() may change parked and cq_tail under it, so this is a
	 * hint, read atomically; kvmm_dp_poll() looks again under the lock.
	 */
	return dp && !__atomic_load_n(&dp->parked, __ATOMIC_RELAXED) &&
	       READ_ONCE(dp->sq->tail) != dp->sq_head;
}

/* Work for the magazine: the client popped or returned frames, or a top-up is due. */
static bool mag_pending(const struct kvmm_dp *dp)
{
	/*
	 * Without the pool lock: reclaim (kvswapd's shrinker) moves mag_head and the flags under
	 * it (and the return head), so they are read and written with READ_ONCE/WRITE_ONCE.  A stale answer costs one
	 * lock round or one loop iteration, never a lost wake-up: this is looked at every poll.
	 */
	uint32_t head = READ_ONCE(dp->mag_head);

	return READ_ONCE(dp->mag->head) != head ||
	       READ_ONCE(dp->ret->tail) != READ_ONCE(dp->ret_head) ||
	       (READ_ONCE(dp->mag_auto) && !READ_ONCE(dp->mag_starved) &&
		READ_ONCE(dp->mag_tail) - head < KVMM_MAG_LOW_MARK(dp->hdr.mag_size));
}

bool kvmm_dp_runnable(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;

	if (!dp)
		return false;
	if (mag_pending(dp))
		return true;
	if (!kvmm_dp_pending(s))
		return false;
	return (uint32_t)(__atomic_load_n(&dp->cq_tail, __ATOMIC_RELAXED) -
			  READ_ONCE(dp->cq->head)) < dp->hdr.ring_entries;
}

void kvmm_dp_need_wakeup(struct kvmm_session *s, bool on)
{
	if (s->dp)
		WRITE_ONCE(s->dp->sq->flags, on ? KVMM_SQ_F_NEED_WAKEUP : 0);
}

void kvmm_dp_set_cpu(struct kvmm_session *s, uint32_t cpu)
{
	if (s->dp)
		WRITE_ONCE(s->dp->sq->cpu, cpu);
}

void kvmm_dp_set_load(struct kvmm_session *s, uint32_t load)
{
	if (s->dp)
		WRITE_ONCE(s->dp->sq->load, load);
}

/*
 * The reply of a KVMM_SQE_F_OUT SQE into the out area, before its CQE: the CQ tail's release
 * store (cq_store) publishes both.
 */
static void out_write(struct kvmm_dp *dp, unsigned int op, uint64_t user_data, int res,
		      const void *rep, size_t rlen)
{
	/* no reply is longer than a message's payload: KVMM_RING_OUT_SIZE holds it */
	struct kvmm_ring_out o = {
		.len = res ? 0 : (uint32_t)min_t(size_t, rlen, KVMM_MSG_PAYLOAD_MAX),
		.op = (uint16_t)op,
		.user_data = user_data,
	};

	memcpy(dp->out + sizeof(o), rep, o.len);
	memcpy(dp->out, &o, sizeof(o));
}

/* Run one SQE (already copied out of the region) into @cqe. Pool lock held. */
static int run_sqe(struct kvmm_session *s, struct kvmm_ring_loop *l, const struct kvmm_ring_sqe *e,
		   struct kvmm_ring_cqe *cqe)
{
	struct kvmm_dp *dp = s->dp;
	uint8_t *buf = l->rx;
	void *rp = (struct kvmm_msg_hdr *)l->tx + 1;
	size_t rlen = 0;
	bool out = e->flags & KVMM_SQE_F_OUT;
	int ret;

	/*
	 * The operation table says which ops the rings carry (uapi/kvmm.h KVMM_OPF_RING, and
	 * KVMM_OPF_RING_OUT with the out area).
	 */
	if ((e->flags & ~KVMM_SQE_F_ALL) || (out && !dp->out) || e->reserved || e->reserved2)
		return -EBADMSG;
	if (out ? !kvmm_op_ring_out_ok(e->op) : !kvmm_op_ring_ok(e->op))
		return kvmm_op_known(e->op) ? -EOPNOTSUPP : -EBADMSG;
	if (e->len > KVMM_MSG_PAYLOAD_MAX || e->data_off > dp->hdr.data_size ||
	    e->len > dp->hdr.data_size - e->data_off)
		return -EBADMSG;
	/* copy first: the client may rewrite the data area while we look at it */
	memcpy(buf, dp->data + e->data_off, e->len);
	/* checked and run by the dispatch (kvmm_ipc_ring_exec()), as a socket request would be */
	ret = s->srv->ring_exec(s, e->op, buf, e->len, rp, &rlen);
	if (!ret)
		memcpy(cqe->rep, rp, min_t(size_t, rlen, sizeof(cqe->rep)));
	if (out)
		out_write(dp, e->op, e->user_data, ret, rp, rlen);
	return ret;
}

/*
 * Publish the CQ tail (pool lock held: the main loop's kvmm_dp_park_done() and a worker's
 * poll both post CQEs, and the tail must never be seen to go back).
 */
static void cq_store(struct kvmm_dp *dp)
{
	/*
	 * release: the CQEs, and the mirror and magazine writes of the ops they complete, are
	 * visible before the tail; pairs with the client's acquire load of the CQ tail.
	 */
	smp_store_release(&dp->cq->tail, dp->cq_tail);
}

/*
 * After cq_store(), lock or no lock: wake a client asleep on the tail.  @l: the loop that
 * polls this ring when it is the calling thread (a client spinning on its CPU makes it
 * yield), else NULL.
 */
static void cq_wake(struct kvmm_dp *dp, struct kvmm_ring_loop *l)
{
	/*
	 * Full barrier: the tail store above must be visible before we load the WAITING flag,
	 * or a client that set the flag and then re-read an old tail would sleep through this
	 * completion.  Pairs with the client's smp_mb between its flag store and tail re-load.
	 */
	smp_mb();
	if (READ_ONCE(dp->cq->flags) & KVMM_CQ_F_WAITING)
		futex_wake(&dp->cq->tail);
	else if (l && l->cpu && READ_ONCE(dp->cq->cpu) == l->cpu)
		l->yield_soon = true; /* it spins for this on our CPU: the loop yields */
}

void kvmm_dp_park_done(struct kvmm_session *s, uint64_t user_data, unsigned int op, int res,
		       const void *rep, size_t rlen)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_ring_cqe cqe;

	if (!dp || !dp->parked)
		return;
	memset(&cqe, 0, sizeof(cqe));
	cqe.user_data = user_data;
	cqe.op = op;
	cqe.res = res;
	if (!res)
		memcpy(cqe.rep, rep, min_t(size_t, rlen, sizeof(cqe.rep)));
	if (res < 0)
		KVMM_STAT_INC(s->srv, errors);
	if (dp->park_out)
		out_write(dp, op, user_data, res, rep, rlen);
	/* its slot is free: the poll that parked it counted it in the CQ's room */
	memcpy(&dp->cqes[dp->cq_tail & dp->mask], &cqe, sizeof(cqe));
	__atomic_store_n(&dp->cq_tail, dp->cq_tail + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&dp->parked, false, __ATOMIC_RELAXED);
	cq_store(dp);
	/* not the polling loop's thread when a worker polls this ring: no yield hint */
	cq_wake(dp, s->rw ? NULL : &s->srv->loop);
	/* a worker asleep must see the SQEs held behind the parked one: ring its doorbell */
	if (s->rw)
		kvmm_dp_kick(s);
}

void kvmm_dp_kick(struct kvmm_session *s)
{
	uint64_t one = 1;
	ssize_t n;

	if (!s->dp)
		return;
	n = write(s->dp->efd, &one, sizeof(one));
	(void)n;
}

int kvmm_dp_poll(struct kvmm_session *s, unsigned int budget)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_ring_loop *l;
	struct kvmm_pool *pool;
	uint32_t entries, tail, cq_head, avail, room, n, i, moved = 0;
	bool preempt;
	int ret;

	if (!dp)
		return 0;
	/* an idle client costs a few loads per loop iteration, not the pool lock */
	if (!kvmm_dp_runnable(s))
		return 0;
	l = s->rw ? &s->rw->loop : &s->srv->loop;
	pool = s->as->pool;
	entries = dp->hdr.ring_entries;

	pthread_mutex_lock(&pool->lock);
	/* acquire: pairs with the client's release of the SQ tail after it wrote the SQEs */
	tail = smp_load_acquire(&dp->sq->tail);
	/* acquire: pairs with the client's release of the CQ head after it read the CQEs */
	cq_head = smp_load_acquire(&dp->cq->head);
	avail = tail - dp->sq_head;
	if (avail > entries || (uint32_t)(dp->cq_tail - cq_head) > entries) {
		pthread_mutex_unlock(&pool->lock);
		kvmm_warn_ratelimited(
			"ipc: client %u: ring indexes out of range (sq %u..%u, cq %u..%u)", s->id,
			dp->sq_head, tail, cq_head, dp->cq_tail);
		return -EPROTO;
	}
	room = entries - (dp->cq_tail - cq_head);
	n = dp->parked ? 0 : min_t(uint32_t, min_t(uint32_t, avail, room), budget);
	ret = mag_poll(s);
	if (ret > 0)
		moved = (uint32_t)ret;
	for (i = 0; i < n && ret >= 0; i++) {
		struct kvmm_ring_sqe e;
		struct kvmm_ring_cqe cqe;
		int res;

		memcpy(&e, &dp->sqes[dp->sq_head & dp->mask], sizeof(e));
		memset(&cqe, 0, sizeof(cqe));
		cqe.user_data = e.user_data;
		cqe.op = kvmm_op_known(e.op) ? e.op : 0;
		kvmm_trace_clock_begin();
		res = run_sqe(s, l, &e, &cqe);
		kvmm_trace_clock_end();
		/*
		 * A lookup that stopped short may wait for the remote tier: the SQE is
		 * consumed, its CQE comes with kvmm_dp_park_done(), the rest waits.
		 */
		if (!res && s->srv->remote &&
		    kvmm_ipc_remote_park(s, e.op, l->rx, (struct kvmm_msg_hdr *)l->tx + 1, NULL,
					 e.user_data)) {
			KVMM_STAT_INC(s->srv, requests);
			dp->park_out = e.flags & KVMM_SQE_F_OUT;
			__atomic_store_n(&dp->parked, true, __ATOMIC_RELAXED);
			dp->sq_head++;
			i++;
			break;
		}
		cqe.res = res;
		if (res == -EBADMSG || res == -EOPNOTSUPP) {
			KVMM_STAT_INC(s->srv, bad_msgs);
			if (++s->nr_bad >= KVMM_SERVER_MAX_BAD_MSGS)
				ret = -EPROTO;
		}
		if (res < 0)
			KVMM_STAT_INC(s->srv, errors);
		memcpy(&dp->cqes[dp->cq_tail & dp->mask], &cqe, sizeof(cqe));
		__atomic_store_n(&dp->cq_tail, dp->cq_tail + 1, __ATOMIC_RELAXED);
		dp->sq_head++;
	}
	/* one shared counter update per round, not per entry (workers share the line) */
	if (i) {
		KVMM_STAT_ADD(s->srv, requests, i - (dp->parked ? 1 : 0));
		if (s->rw)
			__atomic_fetch_add(&s->rw->requests, i, __ATOMIC_RELAXED);
	}
	/* after the step's appends took their frames: top the magazine up in the same pass */
	if (ret >= 0)
		moved += mag_topup(s);
	/*
	 * An op of this batch ran out of memory and reported OOM victims: their PREEMPT events
	 * go out before its -ENOMEM completion can be seen, so that a client which polls its
	 * events on -ENOMEM (kvmm.llm's engine does) finds the victim's, as it did when the reply
	 * came on the socket after them.  That takes pool locks: publish after it, locked again.
	 */
	preempt = i && ret >= 0 && __atomic_load_n(&s->srv->preempt_pending, __ATOMIC_ACQUIRE);
	if (i && ret >= 0 && !preempt) {
		/* release: we are done reading these SQEs and their data; the client may reuse them */
		smp_store_release(&dp->sq->head, dp->sq_head);
		cq_store(dp);
	}
	pthread_mutex_unlock(&pool->lock);
	if (ret < 0) {
		kvmm_warn_ratelimited(
			"ipc: client %u: bad ring (magazine indexes or %u bad entries)", s->id,
			s->nr_bad);
		return -EPROTO;
	}
	if (!i)
		return moved ? 1 : 0;
	if (preempt) {
		if (s->rw)
			kvmm_ring_worker_preempt(s->rw);
		else
			kvmm_swapd_preempt_run(s->srv);
		pthread_mutex_lock(&pool->lock);
		smp_store_release(&dp->sq->head, dp->sq_head);
		cq_store(dp);
		pthread_mutex_unlock(&pool->lock);
	}
	cq_wake(dp, l);
	return (int)(i + moved);
}
