// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/ring.c - the daemon's half of the data plane (uapi/kvmm.h, "Data plane"): one
 * sealed memfd region per client holding its submission and completion rings, its page-table
 * mirror and its magazine, plus an eventfd doorbell.  server.c polls every client's SQ on
 * each loop iteration through kvmm_dp_poll(); the SQEs run through the same
 * kvmm_session_mem_op() as socket requests, so the ring changes transport, not semantics.
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
 * publishes, so a returned number is taken back only if it was handed out and popped.
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
#include "kvmm/ipc/ipc.h"

struct kvmm_dp {
	int memfd, efd;
	void *map;
	struct kvmm_shm_hdr hdr; /* private copy: never read back from the region */
	uint32_t mask;		 /* ring_entries - 1 */
	struct kvmm_shm_ring *sq, *cq, *mag, *ret;
	struct kvmm_ring_sqe *sqes;
	uint8_t *data;
	struct kvmm_ring_cqe *cqes;
	struct kvmm_pt_slot *pt;
	int32_t *pt_frames;
	uint32_t *mag_frames, *ret_frames;

	/* indexes this side owns, published with release stores */
	uint32_t sq_head, cq_tail, mag_tail, ret_head;
	uint32_t mag_head; /* the client's magazine head as last validated */

	uint64_t *slot_seq; /* mirror slot -> sequence id (0 free), private */

	/* magazine: held[i] is the frame of block i of mag_seq; popped[i] if the client has it */
	struct kvmm_seq *mag_seq;
	uint32_t *held;
	uint8_t *popped;
	uint32_t nr_held;
	uint32_t *published; /* private copy of the magazine ring's entries */
};

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
	size = kvmm_shm_layout(&dp->hdr, ring_entries, KVMM_PT_DEFAULT_SLOTS,
			       KVMM_PT_DEFAULT_MAX_BLOCKS, KVMM_MAG_DEFAULT_SIZE);
	if (!size) {
		ret = -EINVAL;
		goto out_free;
	}
	dp->mask = ring_entries - 1;
	dp->slot_seq = calloc(dp->hdr.pt_slots, sizeof(*dp->slot_seq));
	dp->held = calloc(dp->hdr.mag_size, sizeof(*dp->held));
	dp->popped = calloc(dp->hdr.mag_size, sizeof(*dp->popped));
	dp->published = calloc(dp->hdr.mag_size, sizeof(*dp->published));
	if (!dp->slot_seq || !dp->held || !dp->popped || !dp->published) {
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

		if (epoll_ctl(s->srv->epoll_fd, EPOLL_CTL_ADD, dp->efd, &ev)) {
			ret = -errno;
			kvmm_mm_seq_free(dp->mag_seq);
			goto out_free;
		}
	}
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
	free(dp->popped);
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
	/* the magazine's frames go back with their hidden sequence */
	kvmm_mm_seq_free(dp->mag_seq);
	/* the client still holds the eventfd: take it out of epoll before closing ours */
	epoll_ctl(s->srv->epoll_fd, EPOLL_CTL_DEL, dp->efd, NULL);
	close(dp->efd);
	munmap(dp->map, dp->hdr.size);
	close(dp->memfd);
	free(dp->slot_seq);
	free(dp->held);
	free(dp->popped);
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

static int held_find(struct kvmm_dp *dp, uint32_t frame, bool popped)
{
	uint32_t i;

	for (i = 0; i < dp->nr_held; i++)
		if (dp->held[i] == frame && dp->popped[i] == popped)
			return (int)i;
	return -1;
}

/* Give back held frame i: move it to the hidden sequence's last block and truncate that. */
static void held_release(struct kvmm_session *s, uint32_t i)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_seq *seq = dp->mag_seq;
	uint32_t last = dp->nr_held - 1;
	uint64_t pte;

	pte = seq->pte[i];
	seq->pte[i] = seq->pte[last];
	seq->pte[last] = pte;
	dp->held[i] = dp->held[last];
	dp->popped[i] = dp->popped[last];
	dp->nr_held--;
	kvmm_mm_seq_truncate(seq, (uint64_t)dp->nr_held * s->as->fmt.tokens_per_page);
}

/*
 * Follow the client's magazine head (frames it popped) and take back what it returned.
 * Returns the frames taken back, or -EPROTO for an index out of range.
 */
static int mag_poll(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;
	uint32_t size = dp->hdr.mag_size, h, t, n = 0;

	/* acquire: pairs with the client's release of head after it copied the frames out */
	h = smp_load_acquire(&dp->mag->head);
	if ((uint32_t)(h - dp->mag_head) > (uint32_t)(dp->mag_tail - dp->mag_head))
		return -EPROTO; /* popped more than was published */
	for (; dp->mag_head != h; dp->mag_head++) {
		int i = held_find(dp, dp->published[dp->mag_head % size], false);

		if (i >= 0)
			dp->popped[i] = 1;
	}
	/* acquire: pairs with the client's release of the return tail after writing the entries */
	t = smp_load_acquire(&dp->ret->tail);
	if ((uint32_t)(t - dp->ret_head) > size)
		return -EPROTO;
	for (; dp->ret_head != t; dp->ret_head++) {
		int i = held_find(dp, READ_ONCE(dp->ret_frames[dp->ret_head % size]), true);

		if (i >= 0) {
			held_release(s, (uint32_t)i);
			n++;
		}
	}
	/* release: the return slots may be reused once we stopped reading them */
	smp_store_release(&dp->ret->head, dp->ret_head);
	return (int)n;
}

static int mag_refill(struct kvmm_session *s, uint32_t want, uint32_t *moved)
{
	struct kvmm_dp *dp = s->dp;
	uint32_t tpp = s->as->fmt.tokens_per_page, size = dp->hdr.mag_size;
	int ret = 0;

	*moved = 0;
	if (!want || want > size - dp->nr_held)
		want = size - dp->nr_held;
	while (*moved < want) {
		uint32_t f;

		/* one page at a time: a failure leaves whole pages and a consistent count */
		ret = kvmm_mm_seq_append(dp->mag_seq, tpp, NULL);
		if (ret)
			break;
		f = kvmm_mm_seq_frame(dp->mag_seq, dp->nr_held);
		dp->held[dp->nr_held] = f;
		dp->popped[dp->nr_held] = 0;
		dp->nr_held++;
		dp->published[dp->mag_tail % size] = f;
		WRITE_ONCE(dp->mag_frames[dp->mag_tail % size], f);
		dp->mag_tail++;
		(*moved)++;
	}
	/* release: the frame numbers above are visible before the tail that publishes them */
	smp_store_release(&dp->mag->tail, dp->mag_tail);
	return *moved ? 0 : ret;
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
		ret = mag_refill(s, req.nr_frames, &rep.nr_frames);
		if (ret)
			return ret;
	} else {
		rep.nr_frames = (uint32_t)ret;
	}
	rep.nr_held = s->dp->nr_held;
	memcpy(rp, &rep, sizeof(rep));
	*rlen = sizeof(rep);
	return 0;
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

	return dp && READ_ONCE(dp->sq->tail) != dp->sq_head;
}

bool kvmm_dp_runnable(struct kvmm_session *s)
{
	struct kvmm_dp *dp = s->dp;

	if (!kvmm_dp_pending(s))
		return false;
	return (uint32_t)(dp->cq_tail - READ_ONCE(dp->cq->head)) < dp->hdr.ring_entries;
}

void kvmm_dp_need_wakeup(struct kvmm_session *s, bool on)
{
	if (s->dp)
		WRITE_ONCE(s->dp->sq->flags, on ? KVMM_SQ_F_NEED_WAKEUP : 0);
}

static bool ring_op_ok(unsigned int op)
{
	switch (op) {
	case KVMM_OP_PING:
	case KVMM_OP_SEQ_CREATE:
	case KVMM_OP_SEQ_APPEND:
	case KVMM_OP_SEQ_FORK:
	case KVMM_OP_SEQ_TRUNCATE:
	case KVMM_OP_SEQ_FREE:
	case KVMM_OP_PREFIX_LOOKUP:
	case KVMM_OP_SEAL:
	case KVMM_OP_PIN:
	case KVMM_OP_UNPIN:
	case KVMM_OP_MAG_REFILL:
	case KVMM_OP_MAG_DRAIN:
		return true;
	default:
		return false;
	}
}

/* Run one SQE (already copied out of the region) into @cqe. Pool lock held. */
static int run_sqe(struct kvmm_session *s, const struct kvmm_ring_sqe *e, struct kvmm_ring_cqe *cqe)
{
	struct kvmm_dp *dp = s->dp;
	uint8_t *buf = s->srv->rx;
	void *rp = (struct kvmm_msg_hdr *)s->srv->tx + 1;
	size_t rlen = 0;
	int ret;

	if (e->flags || e->reserved || e->reserved2 || !ring_op_ok(e->op))
		return kvmm_op_known(e->op) && !e->flags ? -EOPNOTSUPP : -EBADMSG;
	if (e->len > KVMM_MSG_PAYLOAD_MAX || e->data_off > dp->hdr.data_size ||
	    e->len > dp->hdr.data_size - e->data_off)
		return -EBADMSG;
	/* copy first: the client may rewrite the data area while we look at it */
	memcpy(buf, dp->data + e->data_off, e->len);
	ret = kvmm_ipc_check_payload(e->op, buf, e->len);
	if (ret)
		return ret;
	if (e->op == KVMM_OP_PING)
		return 0;
	ret = kvmm_session_mem_op(s, e->op, buf, rp, &rlen);
	if (!ret)
		memcpy(cqe->rep, rp, min_t(size_t, rlen, sizeof(cqe->rep)));
	return ret;
}

int kvmm_dp_poll(struct kvmm_session *s, unsigned int budget)
{
	struct kvmm_dp *dp = s->dp;
	struct kvmm_pool *pool;
	uint32_t entries, tail, cq_head, avail, room, n, i;
	int ret;

	if (!dp)
		return 0;
	pool = s->as->pool;
	entries = dp->hdr.ring_entries;
	/* acquire: pairs with the client's release of the SQ tail after it wrote the SQEs */
	tail = smp_load_acquire(&dp->sq->tail);
	/* acquire: pairs with the client's release of the CQ head after it read the CQEs */
	cq_head = smp_load_acquire(&dp->cq->head);
	avail = tail - dp->sq_head;
	if (avail > entries || (uint32_t)(dp->cq_tail - cq_head) > entries) {
		kvmm_warn("ipc: client %u: ring indexes out of range (sq %u..%u, cq %u..%u)", s->id,
			  dp->sq_head, tail, cq_head, dp->cq_tail);
		return -EPROTO;
	}
	room = entries - (dp->cq_tail - cq_head);
	n = min_t(uint32_t, min_t(uint32_t, avail, room), budget);

	pthread_mutex_lock(&pool->lock);
	ret = mag_poll(s);
	for (i = 0; i < n && ret >= 0; i++) {
		struct kvmm_ring_sqe e;
		struct kvmm_ring_cqe cqe;
		int res;

		memcpy(&e, &dp->sqes[dp->sq_head & dp->mask], sizeof(e));
		memset(&cqe, 0, sizeof(cqe));
		cqe.user_data = e.user_data;
		cqe.op = kvmm_op_known(e.op) ? e.op : 0;
		res = run_sqe(s, &e, &cqe);
		cqe.res = res;
		if (res == -EBADMSG || res == -EOPNOTSUPP) {
			KVMM_STAT_INC(s->srv, bad_msgs);
			if (++s->nr_bad >= KVMM_SERVER_MAX_BAD_MSGS)
				ret = -EPROTO;
		}
		if (res < 0)
			KVMM_STAT_INC(s->srv, errors);
		KVMM_STAT_INC(s->srv, requests);
		memcpy(&dp->cqes[dp->cq_tail & dp->mask], &cqe, sizeof(cqe));
		dp->cq_tail++;
		dp->sq_head++;
	}
	pthread_mutex_unlock(&pool->lock);
	if (ret < 0) {
		kvmm_warn("ipc: client %u: bad ring (magazine indexes or %u bad entries)", s->id,
			  s->nr_bad);
		return -EPROTO;
	}
	if (!i)
		return 0;
	/* release: we are done reading these SQEs and their data; the client may reuse them */
	smp_store_release(&dp->sq->head, dp->sq_head);
	/*
	 * release: the CQEs, and the mirror and magazine writes of the ops they complete, are
	 * visible before the tail; pairs with the client's acquire load of the CQ tail.
	 */
	smp_store_release(&dp->cq->tail, dp->cq_tail);
	/*
	 * Full barrier: the tail store above must be visible before we load the WAITING flag,
	 * or a client that set the flag and then re-read an old tail would sleep through this
	 * completion.  Pairs with the client's smp_mb between its flag store and tail re-load.
	 */
	smp_mb();
	if (READ_ONCE(dp->cq->flags) & KVMM_CQ_F_WAITING)
		futex_wake(&dp->cq->tail);
	return (int)i;
}
