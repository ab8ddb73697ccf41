// SPDX-License-Identifier: MIT
/*
 * runtime/seq.c - the synchronous calls on sequences: create, append, fork, truncate, free,
 * prefix lookup, seal, pin/unpin of a batch and a batch's block table. Each is one request and
 * its reply through the message layer of client.c, except where a call carries more ids than
 * one record holds: appends, lookups and pin batches are then split into several requests
 * (a lookup stops at the first that does not hit in full), and block tables are read from
 * the data plane's page-table mirror when there is one, else with one SEQ_BLOCKS request per
 * sequence, all sent before the first reply is read so that a batch costs one burst rather
 * than a round trip per sequence.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/libkvmm.h"

/* Tell the page protection (wprotect.c) what a successful operation did. */
static void wp_done(struct kvmm_client *c, uint32_t op, uint64_t seq, uint32_t nr, uint64_t arg,
		    const struct kvmm_cqe *res)
{
	struct kvmm_wp_op o = {.op = op, .nr = nr, .seq = seq, .arg = arg};

	if (c->wp)
		kvmm_wp_done(c, &o, res);
}

/* Ids of type size sz that fit in one request after a fixed struct of fixed bytes. */
static size_t ids_per_msg(const struct kvmm_client *c, size_t fixed, size_t sz)
{
	return (kvmm_msg_payload_max(c) - fixed) / sz;
}

int kvmm_seq_create(kvmm_client_t *c, int priority, uint64_t *seq)
{
	struct kvmm_seq_create_req req = {.priority = priority};
	struct kvmm_iov part = {&req, sizeof(req)};
	struct kvmm_seq_create_rep rep;
	int err;

	if (!c || !seq)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = kvmm_msg_call(c, KVMM_OP_SEQ_CREATE, &part, 1, &rep, sizeof(rep));
	if (!err) {
		kvmm_live_add(c, rep.seq);
		wp_done(c, KVMM_OP_SEQ_CREATE, 0, 0, 0, &(struct kvmm_cqe){.seq = rep.seq});
	}
	pthread_mutex_unlock(&c->lock);
	if (err)
		return err;
	*seq = rep.seq;
	return 0;
}

static int seq_append_locked(struct kvmm_client *c, uint64_t seq, const uint32_t *tokens,
			     uint32_t n, uint64_t *len)
{
	size_t per = ids_per_msg(c, sizeof(struct kvmm_seq_append_req), sizeof(uint32_t));
	struct kvmm_seq_append_rep rep = {0};
	uint32_t done = 0;

	/* n == 0 still goes out once: it reports the length and checks the id */
	do {
		uint32_t k = n - done > per ? (uint32_t)per : n - done;
		struct kvmm_seq_append_req req = {.seq = seq, .nr_tokens = k};
		struct kvmm_iov parts[2] = {{&req, sizeof(req)},
					    {tokens + done, k * sizeof(uint32_t)}};
		int err = kvmm_msg_call(c, KVMM_OP_SEQ_APPEND, parts, 2, &rep, sizeof(rep));

		if (err)
			return err;
		wp_done(c, KVMM_OP_SEQ_APPEND, seq, k, 0,
			&(struct kvmm_cqe){.nr_tokens = rep.nr_tokens, .nr_blocks = rep.nr_blocks});
		done += k;
	} while (done < n);
	if (len)
		*len = rep.nr_tokens;
	return 0;
}

int kvmm_seq_append(kvmm_client_t *c, uint64_t seq, const uint32_t *tokens, uint32_t n,
		    uint64_t *len)
{
	if (!c || (n && !tokens))
		return -EINVAL;
	return LOCKED(c, seq_append_locked(c, seq, tokens, n, len));
}

/*
 * An append into magazine frames. One record when the ids and frames fit; otherwise the
 * sequence's length is asked first (an empty append) so that each part names exactly the
 * frames of the blocks it adds.
 */
static int seq_append_frames_locked(struct kvmm_client *c, uint64_t seq, const uint32_t *tokens,
				    uint32_t n, const uint32_t *frames, uint32_t nr_frames,
				    uint64_t *len)
{
	size_t per = ids_per_msg(c, sizeof(struct kvmm_seq_append_frames_req), sizeof(uint32_t));
	uint64_t tpp = c->tokens_per_page, cur = 0;
	struct kvmm_seq_append_rep rep = {0};
	uint32_t done = 0, fdone = 0;
	int err;

	if (!c->dp)
		return -EOPNOTSUPP;
	if ((uint64_t)n + nr_frames > per) {
		err = seq_append_locked(c, seq, NULL, 0, &cur);
		if (err)
			return err;
	}
	do {
		uint32_t k = n - done, f = nr_frames - fdone;
		struct kvmm_seq_append_frames_req req;
		struct kvmm_iov parts[3];

		if ((uint64_t)k + f > per) {
			/* blocks this part adds: ceil((cur + k) / tpp) - ceil(cur / tpp) <= k/tpp + 1 */
			k = (uint32_t)(per - per / (tpp + 1) - 1);
			if (k > n - done)
				k = n - done;
			f = (uint32_t)((cur + k + tpp - 1) / tpp - (cur + tpp - 1) / tpp);
			if (f > nr_frames - fdone)
				return -EINVAL; /* fewer frames than the blocks it needs */
		}
		req = (struct kvmm_seq_append_frames_req){
			.seq = seq, .nr_tokens = k, .nr_frames = f};
		parts[0] = (struct kvmm_iov){&req, sizeof(req)};
		parts[1] = (struct kvmm_iov){tokens + done, k * sizeof(uint32_t)};
		parts[2] = (struct kvmm_iov){frames + fdone, f * sizeof(uint32_t)};
		err = kvmm_msg_call(c, KVMM_OP_SEQ_APPEND_FRAMES, parts, 3, &rep, sizeof(rep));
		if (err)
			return err;
		if (c->wp) {
			struct kvmm_wp_op o = {.op = KVMM_OP_SEQ_APPEND_FRAMES,
					       .nr = k,
					       .seq = seq,
					       .frames = frames + fdone,
					       .nr_frames = f};
			struct kvmm_cqe res = {.nr_tokens = rep.nr_tokens,
					       .nr_blocks = rep.nr_blocks};

			kvmm_wp_done(c, &o, &res);
		}
		done += k;
		fdone += f;
		cur = rep.nr_tokens;
	} while (done < n);
	if (len)
		*len = rep.nr_tokens;
	return 0;
}

int kvmm_seq_append_frames(kvmm_client_t *c, uint64_t seq, const uint32_t *tokens, uint32_t n,
			   const uint32_t *frames, uint32_t nr_frames, uint64_t *len)
{
	if (!c || (n && !tokens) || (nr_frames && !frames))
		return -EINVAL;
	return LOCKED(c, seq_append_frames_locked(c, seq, tokens, n, frames, nr_frames, len));
}

int kvmm_seq_fork(kvmm_client_t *c, uint64_t parent, uint64_t nr_tokens, uint64_t *child)
{
	struct kvmm_seq_fork_req req = {.seq = parent, .nr_tokens = nr_tokens};
	struct kvmm_iov part = {&req, sizeof(req)};
	struct kvmm_seq_fork_rep rep;
	int err;

	if (!c || !child)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = kvmm_msg_call(c, KVMM_OP_SEQ_FORK, &part, 1, &rep, sizeof(rep));
	if (!err) {
		kvmm_live_add(c, rep.seq);
		wp_done(c, KVMM_OP_SEQ_FORK, parent, 0, nr_tokens,
			&(struct kvmm_cqe){.seq = rep.seq, .nr_blocks = rep.nr_blocks});
	}
	pthread_mutex_unlock(&c->lock);
	if (err)
		return err;
	*child = rep.seq;
	return 0;
}

int kvmm_seq_truncate(kvmm_client_t *c, uint64_t seq, uint64_t nr_tokens)
{
	struct kvmm_seq_truncate_req req = {.seq = seq, .nr_tokens = nr_tokens};
	struct kvmm_iov part = {&req, sizeof(req)};

	struct kvmm_cqe res = {0};
	int err;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = kvmm_msg_call(c, KVMM_OP_SEQ_TRUNCATE, &part, 1, NULL, 0);
	if (!err)
		wp_done(c, KVMM_OP_SEQ_TRUNCATE, seq, 0, nr_tokens, &res);
	pthread_mutex_unlock(&c->lock);
	return err;
}

int kvmm_seq_free(kvmm_client_t *c, uint64_t seq)
{
	struct kvmm_seq_free_req req = {.seq = seq};
	struct kvmm_iov part = {&req, sizeof(req)};

	struct kvmm_cqe res = {0};
	int err;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = kvmm_msg_call(c, KVMM_OP_SEQ_FREE, &part, 1, NULL, 0);
	/* freed, or lost with the daemon while the engine was letting it go: not to recompute */
	if (!err || kvmm_err_gone(err))
		kvmm_live_del(c, seq);
	if (!err)
		wp_done(c, KVMM_OP_SEQ_FREE, seq, 0, 0, &res);
	pthread_mutex_unlock(&c->lock);
	return err;
}

static int prefix_lookup_locked(struct kvmm_client *c, uint64_t seq, const uint32_t *tokens,
				uint64_t n, uint64_t *nr_hit)
{
	uint64_t tpp = c->tokens_per_page;
	/* whole pages per request, so that a request that hits in full leaves a page boundary */
	uint64_t per = ids_per_msg(c, sizeof(struct kvmm_prefix_lookup_req), sizeof(uint32_t));
	uint64_t done = 0, hit = 0;

	per -= per % tpp;
	if (per == 0)
		return -E2BIG;
	while (done < n) {
		uint64_t k = n - done > per ? per : n - done;
		struct kvmm_prefix_lookup_req req = {.seq = seq, .nr_tokens = (uint32_t)k};
		struct kvmm_iov parts[2] = {{&req, sizeof(req)},
					    {tokens + done, k * sizeof(uint32_t)}};
		struct kvmm_prefix_lookup_rep rep;
		int err;

		err = kvmm_msg_call(c, KVMM_OP_PREFIX_LOOKUP, parts, 2, &rep, sizeof(rep));
		if (err)
			return err;
		wp_done(c, KVMM_OP_PREFIX_LOOKUP, seq, 0, 0,
			&(struct kvmm_cqe){.nr_tokens = rep.nr_tokens, .nr_blocks = rep.nr_blocks});
		hit += (uint64_t)rep.nr_blocks * tpp;
		done += k;
		/* a request that did not map all its full pages met a miss: the walk ends */
		if ((uint64_t)rep.nr_blocks * tpp < k - k % tpp || k % tpp)
			break;
	}
	if (nr_hit)
		*nr_hit = hit;
	return 0;
}

int kvmm_prefix_lookup(kvmm_client_t *c, uint64_t seq, const uint32_t *tokens, uint64_t n,
		       uint64_t *nr_hit)
{
	if (!c || (n && !tokens))
		return -EINVAL;
	return LOCKED(c, prefix_lookup_locked(c, seq, tokens, n, nr_hit));
}

/* SEQ_SALT: seq's pages are keyed with this salt from now on. Lock held. */
static int seq_salt_locked(struct kvmm_client *c, uint64_t seq, const void *salt, size_t len)
{
	struct kvmm_seq_salt_req req = {.seq = seq, .len = (uint32_t)len};
	struct kvmm_iov parts[2] = {{&req, sizeof(req)}, {salt, len}};

	if (!(c->features & KVMM_FEAT_KEY_DOMAIN))
		return -EOPNOTSUPP;
	return kvmm_msg_call(c, KVMM_OP_SEQ_SALT, parts, len ? 2 : 1, NULL, 0);
}

int kvmm_prefix_lookup_salt(kvmm_client_t *c, uint64_t seq, const uint32_t *tokens, uint64_t n,
			    const void *salt, size_t salt_len, uint64_t *nr_hit)
{
	int err;

	if (!c || (n && !tokens) || salt_len > KVMM_SALT_MAX || (salt_len && !salt))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = seq_salt_locked(c, seq, salt, salt_len);
	if (!err)
		err = prefix_lookup_locked(c, seq, tokens, n, nr_hit);
	pthread_mutex_unlock(&c->lock);
	return err;
}

static int seal_locked(struct kvmm_client *c, uint64_t seq, uint32_t block, uint32_t nr_blocks)
{
	struct kvmm_seal_req req = {.seq = seq, .block = block, .nr_blocks = nr_blocks};
	struct kvmm_iov part = {&req, sizeof(req)};
	struct kvmm_cqe res = {0};
	int err;

	err = kvmm_msg_call(c, KVMM_OP_SEAL, &part, 1, NULL, 0);
	if (!err)
		wp_done(c, KVMM_OP_SEAL, seq, nr_blocks, block, &res);
	return err;
}

int kvmm_seal(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks)
{
	if (!c)
		return -EINVAL;
	return LOCKED(c, seal_locked(c, seq, block, nr_blocks));
}

int kvmm_seal_salt(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		   const void *salt, size_t salt_len)
{
	int err;

	if (!c || salt_len > KVMM_SALT_MAX || (salt_len && !salt))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	err = seq_salt_locked(c, seq, salt, salt_len);
	if (!err)
		err = seal_locked(c, seq, block, nr_blocks);
	pthread_mutex_unlock(&c->lock);
	return err;
}

/*
 * Send op (PIN, UNPIN or PREFETCH) for seqs[0..nr_seqs), one record's worth of ids at a time;
 * stop at the first error.  *done (ids the daemon accepted) and the reply sums are set either
 * way.  The caller holds c->lock.
 */
int kvmm_seq_batch_locked(struct kvmm_client *c, unsigned int op, const uint64_t *seqs,
			  uint32_t nr_seqs, uint32_t *done, struct kvmm_pin_rep *sum)
{
	size_t per = ids_per_msg(c, sizeof(struct kvmm_pin_req), sizeof(uint64_t));
	int err = 0;

	*done = 0;
	sum->nr_frames = sum->nr_swapin = 0;
	while (*done < nr_seqs) {
		uint32_t k = nr_seqs - *done > per ? (uint32_t)per : nr_seqs - *done;
		struct kvmm_pin_req req = {.nr_seqs = k};
		struct kvmm_iov parts[2] = {{&req, sizeof(req)},
					    {seqs + *done, k * sizeof(uint64_t)}};
		struct kvmm_pin_rep rep;

		err = kvmm_msg_call(c, op, parts, 2, &rep, sizeof(rep));
		if (err)
			break;
		sum->nr_frames += rep.nr_frames;
		sum->nr_swapin += rep.nr_swapin;
		*done += k;
	}
	return err;
}

/*
 * PIN and UNPIN of a batch larger than one record: each part is all or nothing on the daemon,
 * so a failing part undoes the parts before it (pin) to keep the whole call all or nothing.
 */
static int pin_locked(struct kvmm_client *c, unsigned int op, const uint64_t *seqs,
		      uint32_t nr_seqs, uint32_t *nr_frames)
{
	struct kvmm_pin_rep sum, undo_sum;
	uint32_t done, undone;
	int err;

	err = kvmm_seq_batch_locked(c, op, seqs, nr_seqs, &done, &sum);
	/* if the undo fails the connection is gone, and so are the pins */
	if (err && op == KVMM_OP_PIN && done)
		kvmm_seq_batch_locked(c, KVMM_OP_UNPIN, seqs, done, &undone, &undo_sum);
	if (!err && nr_frames)
		*nr_frames = sum.nr_frames;
	return err;
}

int kvmm_pin(kvmm_client_t *c, const uint64_t *seqs, uint32_t nr_seqs, uint32_t *nr_frames)
{
	if (!c || (nr_seqs && !seqs))
		return -EINVAL;
	return LOCKED(c, pin_locked(c, KVMM_OP_PIN, seqs, nr_seqs, nr_frames));
}

int kvmm_unpin(kvmm_client_t *c, const uint64_t *seqs, uint32_t nr_seqs, uint32_t *nr_frames)
{
	if (!c || (nr_seqs && !seqs))
		return -EINVAL;
	return LOCKED(c, pin_locked(c, KVMM_OP_UNPIN, seqs, nr_seqs, nr_frames));
}

static int pin_range_locked(struct kvmm_client *c, unsigned int op, uint64_t seq, uint32_t block,
			    uint32_t nr_blocks, unsigned int flags, uint32_t *nr_frames)
{
	struct kvmm_pin_range_req req = {
		.seq = seq, .block = block, .nr_blocks = nr_blocks, .flags = flags};
	struct kvmm_iov part = {&req, sizeof(req)};
	struct kvmm_pin_rep rep;
	int err;

	if (!(c->features & KVMM_FEAT_PIN_RANGE))
		return -EOPNOTSUPP;
	err = kvmm_msg_call(c, op, &part, 1, &rep, sizeof(rep));
	if (!err && nr_frames)
		*nr_frames = rep.nr_frames;
	return err;
}

int kvmm_pin_range(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		   unsigned int flags, uint32_t *nr_frames)
{
	if (!c || !nr_blocks || (flags & ~KVMM_PIN_RANGE_F_ALL))
		return -EINVAL;
	return LOCKED(c, pin_range_locked(c, KVMM_OP_SEQ_PIN_RANGE, seq, block, nr_blocks, flags,
					  nr_frames));
}

int kvmm_unpin_range(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks,
		     uint32_t *nr_frames)
{
	if (!c || !nr_blocks)
		return -EINVAL;
	return LOCKED(c, pin_range_locked(c, KVMM_OP_SEQ_UNPIN_RANGE, seq, block, nr_blocks, 0,
					  nr_frames));
}

/*
 * Copy the entries of the SEQ_BLOCKS reply now in c->rx (plen payload bytes) into
 * row[block..]; next block.
 */
static int blocks_take(struct kvmm_client *c, size_t plen, int32_t *row, uint32_t block,
		       uint32_t max, uint32_t *next, uint32_t *total)
{
	struct kvmm_seq_blocks_rep rep;

	if (plen < sizeof(rep))
		return -EBADMSG;
	memcpy(&rep, c->rx + KVMM_MSG_HDR_SIZE, sizeof(rep));
	if (rep.count > (plen - sizeof(rep)) / sizeof(int32_t) || rep.count > max - block)
		return -EBADMSG;
	memcpy(row + block, c->rx + KVMM_MSG_HDR_SIZE + sizeof(rep), rep.count * sizeof(int32_t));
	*next = block + rep.count;
	*total = rep.nr_blocks;
	return 0;
}

/* Payload bytes of the reply now in c->rx. */
static size_t msg_plen(const struct kvmm_client *c)
{
	return ((const struct kvmm_msg_hdr *)c->rx)->len - KVMM_MSG_HDR_SIZE;
}

/*
 * Row of seq from block @next on, one SEQ_BLOCKS at a time (@socket: on the socket; else on
 * the rings through their out area when the daemon has one), until @max entries, the
 * sequence's @total blocks, or an empty reply; -E2BIG when the row holds only the first max.
 */
static int blocks_rest(struct kvmm_client *c, bool socket, uint64_t seq, int32_t *row,
		       uint32_t next, uint32_t max, uint32_t total)
{
	int e = 0;

	while (next < max && next < total) {
		struct kvmm_seq_blocks_req req = {
			.seq = seq, .block = next, .nr_blocks = max - next};
		struct kvmm_iov part = {&req, sizeof(req)};
		uint32_t before = next;
		size_t plen = 0;

		if (socket) {
			/* not a KVMM_OPF_RING op: kvmm_msg_call sends it on the socket */
			e = kvmm_msg_call(c, KVMM_OP_SEQ_BLOCKS, &part, 1, NULL, 0);
			plen = e ? 0 : msg_plen(c);
		} else {
			e = kvmm_msg_call_var(c, KVMM_OP_SEQ_BLOCKS, &part, 1, &plen);
		}
		if (!e)
			e = blocks_take(c, plen, row, next, max, &next, &total);
		if (e || next == before)
			break;
	}
	return !e && total > max ? -E2BIG : e;
}

/*
 * One sequence's row without the mirror (a sequence it does not hold, or one longer than a
 * slot): SEQ_BLOCKS on the rings when they have the out area, else kvmm_block_table_socket.
 */
static int block_row_var(struct kvmm_client *c, uint64_t seq, int32_t *row, uint32_t max)
{
	for (uint32_t i = 0; i < max; i++)
		row[i] = KVMM_BLOCK_NONE;
	return blocks_rest(c, false, seq, row, 0, max, UINT32_MAX);
}

int kvmm_block_table_socket(struct kvmm_client *c, const uint64_t *seqs, uint32_t nr_seqs,
			    int32_t *table, uint32_t max)
{
	uint64_t *tags;
	uint32_t sent = 0;
	int err = 0, ret = 0;

	for (size_t i = 0; i < (size_t)nr_seqs * max; i++)
		table[i] = KVMM_BLOCK_NONE;
	if (max == 0 || nr_seqs == 0)
		return 0;
	tags = malloc(sizeof(*tags) * nr_seqs);
	if (!tags)
		return -ENOMEM;
	/* the burst: one request per sequence for as much of its row as one reply carries */
	for (; sent < nr_seqs; sent++) {
		struct kvmm_seq_blocks_req req = {.seq = seqs[sent], .nr_blocks = max};
		struct kvmm_iov part = {&req, sizeof(req)};

		err = kvmm_msg_send(c, KVMM_OP_SEQ_BLOCKS, &part, 1, &tags[sent]);
		if (err)
			break;
	}
	/* every request sent is waited for, even after a failure, so no reply is left over */
	for (uint32_t i = 0; i < sent; i++) {
		int32_t *row = table + (size_t)i * max;
		struct kvmm_seq_blocks_rep rep;
		uint32_t next, total;
		int e;

		e = kvmm_msg_wait(c, tags[i], &rep, sizeof(rep));
		if (!e)
			e = blocks_take(c, msg_plen(c), row, 0, max, &next, &total);
		/* a row longer than one reply: the rest one request at a time */
		if (!e)
			e = blocks_rest(c, true, seqs[i], row, next, max, total);
		/* report the first hard failure; -E2BIG only if nothing worse happened */
		if (e && (!ret || ret == -E2BIG))
			ret = e;
	}
	free(tags);
	if (err)
		return err;
	return ret;
}

/*
 * The engine learns these frames now: make each sequence's own blocks writable (a row ends
 * after its last entry that is not KVMM_BLOCK_NONE).
 */
static void wp_rows(struct kvmm_client *c, const uint64_t *seqs, uint32_t nr_seqs,
		    const int32_t *table, uint32_t max)
{
	for (uint32_t i = 0; c->wp && i < nr_seqs; i++) {
		const int32_t *row = table + (size_t)i * max;
		uint32_t n = max;

		while (n && row[n - 1] == KVMM_BLOCK_NONE)
			n--;
		kvmm_wp_row(c, seqs[i], row, n);
	}
	if (c->wp)
		kvmm_wp_flush(c);
}

/*
 * With the data plane, rows come from the page-table mirror without a round trip; a
 * sequence the mirror does not hold (no slot, too long for its slot, a torn read) is asked
 * for over the socket.
 */
static int block_table_locked(struct kvmm_client *c, const uint64_t *seqs, uint32_t nr_seqs,
			      int32_t *table, uint32_t max)
{
	int ret = kvmm_client_usable(c);

	/* a mirror outlives its daemon: a handle known to be dead reads nothing from it */
	if (ret)
		return ret;
	if (!c->dp || max == 0) {
		ret = kvmm_block_table_socket(c, seqs, nr_seqs, table, max);
		wp_rows(c, seqs, nr_seqs, table, max);
		return ret;
	}
	for (uint32_t i = 0; i < nr_seqs; i++) {
		int32_t *row = table + (size_t)i * max;
		int e = kvmm_mirror_row(c, seqs[i], row, max);

		if (e == -ENOENT)
			e = block_row_var(c, seqs[i], row, max);
		if (e && (!ret || ret == -E2BIG))
			ret = e;
	}
	wp_rows(c, seqs, nr_seqs, table, max);
	return ret;
}

int kvmm_block_table(kvmm_client_t *c, const uint64_t *seqs, uint32_t nr_seqs, int32_t *table,
		     uint32_t max_blocks_per_seq)
{
	if (!c || (nr_seqs && (!seqs || (max_blocks_per_seq && !table))))
		return -EINVAL;
	return LOCKED(c, block_table_locked(c, seqs, nr_seqs, table, max_blocks_per_seq));
}

/* ---- a request's flow in one round trip each ------------------------------------------- */

static int seq_prompt_locked(struct kvmm_client *c, const uint32_t *tokens, uint32_t n,
			     int priority, uint64_t *seq, uint64_t *nr_hit, int32_t *table,
			     uint32_t max_blocks)
{
	struct kvmm_seq_prompt_req req = {.priority = priority, .nr_tokens = n};
	struct kvmm_iov parts[2] = {{&req, sizeof(req)}, {tokens, (size_t)n * sizeof(uint32_t)}};
	struct kvmm_seq_prompt_rep rep;
	int err;

	if (n > ids_per_msg(c, sizeof(req), sizeof(uint32_t)))
		return -E2BIG;
	err = kvmm_msg_call(c, KVMM_OP_SEQ_PROMPT, parts, 2, &rep, sizeof(rep));
	if (err)
		return err;
	*seq = rep.seq;
	kvmm_live_add(c, rep.seq);
	if (nr_hit)
		*nr_hit = (uint64_t)rep.nr_hit * c->tokens_per_page;
	wp_done(c, KVMM_OP_SEQ_PROMPT, 0, n, 0,
		&(struct kvmm_cqe){.seq = rep.seq,
				   .nr_blocks = rep.nr_blocks,
				   .nr_tokens = (uint64_t)rep.nr_hit * c->tokens_per_page});
	/* the mirror is at least as new as the reply: no second round trip, as a rule */
	return table ? block_table_locked(c, &rep.seq, 1, table, max_blocks) : 0;
}

int kvmm_seq_prompt(kvmm_client_t *c, const uint32_t *tokens, uint32_t n, int priority,
		    uint64_t *seq, uint64_t *nr_hit, int32_t *table, uint32_t max_blocks)
{
	if (!c || !seq || (n && !tokens) || (table && !max_blocks))
		return -EINVAL;
	return LOCKED(c, seq_prompt_locked(c, tokens, n, priority, seq, nr_hit, table, max_blocks));
}

static int seq_seal_free_locked(struct kvmm_client *c, const struct kvmm_iov *part, uint64_t seq)
{
	int err = kvmm_msg_call(c, KVMM_OP_SEQ_SEAL_FREE, part, 1, NULL, 0);

	if (!err || kvmm_err_gone(err))
		kvmm_live_del(c, seq);

	/* freed: none of its frames is this handle's to write any more */
	if (!err)
		wp_done(c, KVMM_OP_SEQ_SEAL_FREE, seq, 0, 0, &(struct kvmm_cqe){0});
	return err;
}

int kvmm_seq_seal_free(kvmm_client_t *c, uint64_t seq, uint32_t block, uint32_t nr_blocks)
{
	struct kvmm_seal_req req = {.seq = seq, .block = block, .nr_blocks = nr_blocks};
	struct kvmm_iov part = {&req, sizeof(req)};

	if (!c)
		return -EINVAL;
	return LOCKED(c, seq_seal_free_locked(c, &part, seq));
}
