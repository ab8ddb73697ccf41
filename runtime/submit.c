// SPDX-License-Identifier: MIT
/*
 * runtime/submit.c - asynchronous batched submission: kvmm_submit puts every entry of a batch
 * on the way without waiting, kvmm_complete reaps the answers as completions. With the data
 * plane (ring.c) a batch is written into the shared submission ring and published with one
 * tail store and at most one doorbell, and its completions are read from the completion ring:
 * no system call per entry, none at all while the daemon polls. Without it (an older daemon,
 * $KVMM_NO_RINGS) the batch is pipelined over the control socket, each entry one request
 * record tagged with its own header seq, and replies are matched back to their entries by
 * that seq, in whatever order they arrive. Entries of one batch run in order on the ring; on
 * the socket the daemon also handles them in order, one connection being one stream.
 */
#include <errno.h>
#include <string.h>

#include "runtime/libkvmm.h"

/*
 * Wire form of one entry: opcode and up to three parts, the first the request's fixed head
 * built in @fixed, as long as the operation table says that head is (uapi/kvmm.h KVMM_OPS).
 */
static int sqe_encode(const struct kvmm_sqe *sqe, unsigned int *op, struct kvmm_iov *parts,
		      unsigned int *nr_parts, void *fixed)
{
	*nr_parts = 1;
	switch (sqe->op) {
	case KVMM_SQE_NOP:
		*op = KVMM_OP_PING;
		*nr_parts = 0;
		break;
	case KVMM_SQE_SEQ_CREATE: {
		struct kvmm_seq_create_req r = {.priority = (int32_t)sqe->arg};

		*op = KVMM_OP_SEQ_CREATE;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	case KVMM_SQE_SEQ_APPEND:
	case KVMM_SQE_PREFIX_LOOKUP:
		if (sqe->nr && !sqe->data)
			return -EINVAL;
		if (sqe->op == KVMM_SQE_SEQ_APPEND && sqe->arg) {
			/* into magazine frames: token ids, then the frames */
			struct kvmm_seq_append_frames_req r = {.seq = sqe->seq,
							       .nr_tokens = sqe->nr,
							       .nr_frames = (uint32_t)sqe->arg};

			if (!sqe->frames || sqe->arg > UINT32_MAX)
				return -EINVAL;
			*op = KVMM_OP_SEQ_APPEND_FRAMES;
			memcpy(fixed, &r, sizeof(r));
			parts[2] =
				(struct kvmm_iov){sqe->frames, (size_t)sqe->arg * sizeof(uint32_t)};
		} else if (sqe->op == KVMM_SQE_SEQ_APPEND) {
			struct kvmm_seq_append_req r = {.seq = sqe->seq, .nr_tokens = sqe->nr};

			*op = KVMM_OP_SEQ_APPEND;
			memcpy(fixed, &r, sizeof(r));
		} else {
			struct kvmm_prefix_lookup_req r = {.seq = sqe->seq, .nr_tokens = sqe->nr};

			*op = KVMM_OP_PREFIX_LOOKUP;
			memcpy(fixed, &r, sizeof(r));
		}
		parts[1] = (struct kvmm_iov){sqe->data, (size_t)sqe->nr * sizeof(uint32_t)};
		*nr_parts = *op == KVMM_OP_SEQ_APPEND_FRAMES ? 3 : 2;
		break;
	case KVMM_SQE_SEQ_FORK: {
		struct kvmm_seq_fork_req r = {.seq = sqe->seq, .nr_tokens = sqe->arg};

		*op = KVMM_OP_SEQ_FORK;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	case KVMM_SQE_SEQ_TRUNCATE: {
		struct kvmm_seq_truncate_req r = {.seq = sqe->seq, .nr_tokens = sqe->arg};

		*op = KVMM_OP_SEQ_TRUNCATE;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	case KVMM_SQE_SEQ_FREE: {
		struct kvmm_seq_free_req r = {.seq = sqe->seq};

		*op = KVMM_OP_SEQ_FREE;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	case KVMM_SQE_SEQ_PROMPT: {
		struct kvmm_seq_prompt_req r = {.priority = (int32_t)sqe->arg,
						.nr_tokens = sqe->nr};

		if (sqe->nr && !sqe->data)
			return -EINVAL;
		*op = KVMM_OP_SEQ_PROMPT;
		memcpy(fixed, &r, sizeof(r));
		parts[1] = (struct kvmm_iov){sqe->data, (size_t)sqe->nr * sizeof(uint32_t)};
		*nr_parts = 2;
		break;
	}
	case KVMM_SQE_SEAL:
	case KVMM_SQE_SEQ_SEAL_FREE: {
		struct kvmm_seal_req r = {
			.seq = sqe->seq, .block = (uint32_t)sqe->arg, .nr_blocks = sqe->nr};

		if (sqe->arg > UINT32_MAX)
			return -EINVAL;
		*op = sqe->op == KVMM_SQE_SEAL ? KVMM_OP_SEAL : KVMM_OP_SEQ_SEAL_FREE;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	case KVMM_SQE_PIN:
	case KVMM_SQE_UNPIN: {
		struct kvmm_pin_req r = {.nr_seqs = sqe->nr};

		if (sqe->nr && !sqe->data)
			return -EINVAL;
		*op = sqe->op == KVMM_SQE_PIN ? KVMM_OP_PIN : KVMM_OP_UNPIN;
		memcpy(fixed, &r, sizeof(r));
		parts[1] = (struct kvmm_iov){sqe->data, (size_t)sqe->nr * sizeof(uint64_t)};
		*nr_parts = 2;
		break;
	}
	case KVMM_SQE_PIN_RANGE:
	case KVMM_SQE_UNPIN_RANGE: {
		/* kvmm_pin_range(3) without flags, kvmm_unpin_range(3) */
		struct kvmm_pin_range_req r = {
			.seq = sqe->seq, .block = (uint32_t)sqe->arg, .nr_blocks = sqe->nr};

		_Static_assert(sizeof(r) <= 3 * sizeof(uint64_t),
			       "submit_locked's fixed[] holds it");
		if (!sqe->nr || sqe->arg > UINT32_MAX)
			return -EINVAL;
		*op = sqe->op == KVMM_SQE_PIN_RANGE ? KVMM_OP_SEQ_PIN_RANGE
						    : KVMM_OP_SEQ_UNPIN_RANGE;
		memcpy(fixed, &r, sizeof(r));
		break;
	}
	default:
		return -EINVAL;
	}
	parts[0] = (struct kvmm_iov){fixed, kvmm_op_info(*op)->size};
	return 0;
}

/* The page protection (wprotect.c) hears of the entry's completion. */
static void wp_pending(struct kvmm_client *c, uint64_t tag, unsigned int op,
		       const struct kvmm_sqe *sqe)
{
	struct kvmm_wp_op o = {.op = op, .nr = sqe->nr, .seq = sqe->seq, .arg = sqe->arg};

	if (op == KVMM_OP_SEQ_APPEND_FRAMES) {
		o.frames = sqe->frames;
		o.nr_frames = (uint32_t)sqe->arg;
		o.arg = 0;
	}
	kvmm_wp_pending_add(c, tag, &o);
}

/*
 * A long batch is published every this many ring entries, not only at its end: kvmmd starts
 * on the first ones while the rest (a step's prompts, 4 KiB of token ids each) are still
 * being copied in.  Measured (kvmm-bench-ipc flow, one compound_async client, four
 * interleaved runs each): 183k requests/s publishing at the end, 198k every 8 or every 2.
 */
#define SUBMIT_PUBLISH_EVERY 8

static int submit_locked(struct kvmm_client *c, const struct kvmm_sqe *sqes, unsigned int n)
{
	unsigned int i, queued = 0;
	int err = kvmm_client_usable(c);

	if (err)
		return err;
	for (i = 0; i < n; i++) {
		const struct kvmm_sqe *sqe = &sqes[i];
		struct kvmm_iov parts[KVMM_IOV_MAX];
		uint64_t fixed[3] = {0, 0, 0}; /* the largest head: kvmm_pin_range_req */
		unsigned int op, nr_parts;

		if (c->nr_async + kvmm_ring_inflight(c) >= KVMM_MAX_INFLIGHT)
			break;
		err = sqe_encode(sqe, &op, parts, &nr_parts, fixed);
		if (!err && (sqe->op == KVMM_SQE_PIN_RANGE || sqe->op == KVMM_SQE_UNPIN_RANGE) &&
		    !(c->features & KVMM_FEAT_PIN_RANGE))
			err = -EOPNOTSUPP; /* an older daemon: the batch stops here */
		/* every entry kind is a ring op today; one that is not would take the socket */
		if (!err && c->dp && kvmm_op_ring_ok(op)) {
			err = kvmm_ring_queue(c, op, parts, nr_parts, sqe->user_data);
			if (err == -EAGAIN) {
				/* full: let the daemon see what is queued, take what it answered */
				kvmm_ring_kick(c);
				kvmm_ring_reap(c);
				err = kvmm_ring_queue(c, op, parts, nr_parts, sqe->user_data);
			}
			if (!err && c->wp)
				wp_pending(c, KVMM_WP_RING_TAG | kvmm_ring_last_pos(c), op, sqe);
			if (!err && ++queued % SUBMIT_PUBLISH_EVERY == 0)
				kvmm_ring_kick(c);
		} else if (!err) {
			uint64_t tag;

			err = kvmm_msg_send_tagged(c, op, parts, nr_parts, false, sqe->op,
						   sqe->user_data, &tag);
			if (!err && c->wp)
				wp_pending(c, tag, op, sqe);
		}
		/* a sequence given up is not one to report lost, whatever its completion says */
		if (!err && (sqe->op == KVMM_SQE_SEQ_FREE || sqe->op == KVMM_SQE_SEQ_SEAL_FREE))
			kvmm_live_del(c, sqe->seq);
		if (err == -EINVAL || err == -E2BIG) {
			/* this entry alone is wrong: it completes at once, the batch goes on */
			struct kvmm_cqe cqe = {.user_data = sqe->user_data, .res = err};

			err = kvmm_cq_push(c, &cqe);
		}
		if (err)
			break;
	}
	if (c->dp)
		kvmm_ring_kick(c); /* the rest of the batch (at most one doorbell per tail store) */
	return i ? (int)i : err;
}

int kvmm_submit(kvmm_client_t *c, const struct kvmm_sqe *sqes, unsigned int n)
{
	int ret;

	if (!c || (n && !sqes))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ret = submit_locked(c, sqes, n);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int complete_locked(struct kvmm_client *c, struct kvmm_cqe *cqes, unsigned int max,
			   unsigned int min)
{
	unsigned int got = 0;

	if (min > max)
		min = max;
	/*
	 * A handle that only reaps (an engine on the asynchronous rings alone) reattaches here
	 * like the synchronous calls do (KVMM_ATTACH_REATTACH): once the GONE event was taken,
	 * a call that finds the daemon back fails with -ESTALE, so the engine reads
	 * kvmm_lost_seqs before it submits anything to the new daemon.
	 */
	if (!c->cq_count && kvmm_client_usable_now(c) && (c->opt_flags & KVMM_ATTACH_REATTACH)) {
		int err = kvmm_client_usable(c);

		if (err)
			return err;
	}
	for (;;) {
		int err;

		while (got < max && c->cq_count) {
			cqes[got++] = c->cq[c->cq_head];
			c->cq_head = (c->cq_head + 1) % c->cq_cap;
			c->cq_count--;
		}
		if (got >= max)
			break;
		if (c->dp && kvmm_ring_reap(c))
			continue;
		/* take what is already there without blocking, then block only if short */
		err = kvmm_msg_pump(c, false);
		if (err == -EAGAIN) {
			if (got >= min)
				break;
			if (c->nr_async == 0 && kvmm_ring_inflight(c) == 0)
				break; /* nothing in flight could ever complete */
			/* ring work waits on the CQ futex; socket-only work on the socket */
			if (kvmm_ring_inflight(c))
				err = kvmm_ring_wait(c);
			else
				err = kvmm_msg_pump(c, true);
		}
		if (err && !c->cq_count) {
			if (got)
				break;
			return err;
		}
	}
	return (int)got;
}

int kvmm_complete(kvmm_client_t *c, struct kvmm_cqe *cqes, unsigned int max, unsigned int min)
{
	int ret;

	if (!c || (max && !cqes))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ret = complete_locked(c, cqes, max, min);
	/* what the completions reaped did to the pages' protection (wprotect.c) */
	if (c->wp)
		kvmm_wp_flush(c);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

unsigned int kvmm_inflight(const kvmm_client_t *c)
{
	unsigned int n = c->nr_async + kvmm_ring_inflight(c);

	for (unsigned int i = 0; i < c->cq_count; i++)
		if (!(c->cq[(c->cq_head + i) % c->cq_cap].flags & KVMM_CQE_F_EVENT))
			n++;
	return n;
}
