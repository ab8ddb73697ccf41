// SPDX-License-Identifier: MIT
/*
 * runtime/reattach.c - what a handle does when kvmmd goes away and comes back. The message
 * layer (client.c) and the rings (ring.c) notice the loss (the socket hangs up, a send finds
 * nobody, the rings' wait polls the socket and finds it closed) and call kvmm_client_gone,
 * which queues one GONE event; from then on every call fails with -ENOTCONN without touching
 * the old daemon's memory. kvmm_reattach connects again to the socket path the handle
 * resolved at attach, with backoff, and redoes HELLO and ATTACH with the saved namespace,
 * format, model identity and options. Everything of the old session is dropped first (rings,
 * data-plane region, page protection, completions) except the pool's address range, which
 * the new pool's chunks replace in place when it has the same size, so that a stale pointer
 * of the engine reads the new pool instead of faulting.
 *
 * The engine must learn which of its sequences died with the daemon: the daemon's copy of
 * them is gone, and a restarted daemon numbers its sequences from the start again. So the
 * handle keeps the set of sequence ids it holds - every path that creates one (create, fork,
 * prompt; synchronous, socket-async or ring-async) adds it, every free removes it - and a
 * reattach hands that set over as the lost list (kvmm_lost_seqs). The set is a small
 * open-addressing table (ids are never 0; UINT64_MAX marks a deleted slot), so recording costs
 * a hash and a store per create or free.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "runtime/libkvmm.h"

#define REATTACH_BACKOFF_MIN_MS 10
#define REATTACH_BACKOFF_MAX_MS 500
#define REATTACH_AUTO_WAIT_MS 1000 /* an automatic attempt waits this long for an answer */

#define LIVE_EMPTY 0
#define LIVE_DEAD UINT64_MAX

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the live set ------------------------------------------------------------------------ */

static uint32_t live_hash(uint64_t id, uint32_t cap)
{
	id ^= id >> 33;
	id *= UINT64_C(0xff51afd7ed558ccd);
	id ^= id >> 33;
	return (uint32_t)id & (cap - 1);
}

static void live_put(uint64_t *tab, uint32_t cap, uint64_t id)
{
	uint32_t i = live_hash(id, cap);

	while (tab[i] != LIVE_EMPTY)
		i = (i + 1) & (cap - 1);
	tab[i] = id;
}

/* Grow (or just clean out deleted slots) so that one more id fits under 3/4 load. */
static int live_grow(struct kvmm_client *c)
{
	uint32_t cap = c->live_cap ? c->live_cap : 64;
	uint64_t *tab;

	while ((uint64_t)(c->nr_live + 1) * 4 > (uint64_t)cap * 3 - cap / 2)
		cap *= 2;
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->live_cap; i++)
		if (c->live[i] != LIVE_EMPTY && c->live[i] != LIVE_DEAD)
			live_put(tab, cap, c->live[i]);
	free(c->live);
	c->live = tab;
	c->live_cap = cap;
	c->nr_live_dead = 0;
	return 0;
}

static uint64_t *live_find(struct kvmm_client *c, uint64_t id)
{
	uint32_t i;

	if (!c->live_cap)
		return NULL;
	for (i = live_hash(id, c->live_cap); c->live[i] != LIVE_EMPTY;
	     i = (i + 1) & (c->live_cap - 1))
		if (c->live[i] == id)
			return &c->live[i];
	return NULL;
}

void kvmm_live_add(struct kvmm_client *c, uint64_t id)
{
	if (id == LIVE_EMPTY || id == LIVE_DEAD || live_find(c, id))
		return;
	if ((uint64_t)(c->nr_live + c->nr_live_dead + 1) * 4 > (uint64_t)c->live_cap * 3 &&
	    live_grow(c)) {
		c->live_incomplete = true;
		return;
	}
	live_put(c->live, c->live_cap, id);
	c->nr_live++;
}

void kvmm_live_del(struct kvmm_client *c, uint64_t id)
{
	uint64_t *slot = live_find(c, id);

	if (!slot)
		return;
	*slot = LIVE_DEAD;
	c->nr_live--;
	c->nr_live_dead++;
}

void kvmm_live_cqe(struct kvmm_client *c, unsigned int op, const struct kvmm_cqe *cqe)
{
	if (cqe->res)
		return;
	switch (op) {
	case KVMM_OP_SEQ_CREATE:
	case KVMM_OP_SEQ_FORK:
	case KVMM_OP_SEQ_PROMPT:
		kvmm_live_add(c, cqe->seq);
		break;
	default:
		break;
	}
}

/*
 * The set becomes the lost list, and the handle holds nothing any more. Without memory for
 * the list it is marked incomplete (kvmm_lost_seqs says -ENOMEM: recompute everything).
 */
static void live_to_lost(struct kvmm_client *c)
{
	uint64_t *lost = NULL;
	uint32_t n = 0;

	if (c->nr_live)
		lost = malloc(sizeof(*lost) * c->nr_live);
	for (uint32_t i = 0; lost && i < c->live_cap; i++)
		if (c->live[i] != LIVE_EMPTY && c->live[i] != LIVE_DEAD)
			lost[n++] = c->live[i];
	free(c->lost);
	c->lost = lost;
	c->nr_lost = n;
	c->lost_incomplete = c->live_incomplete || (c->nr_live && !lost);
	free(c->live);
	c->live = NULL;
	c->live_cap = c->nr_live = c->nr_live_dead = 0;
	c->live_incomplete = false;
}

void kvmm_reattach_free(struct kvmm_client *c)
{
	free(c->live);
	free(c->lost);
	c->live = c->lost = NULL;
	c->live_cap = c->nr_live = c->nr_lost = 0;
}

/* ---- losing the daemon ---------------------------------------------------------------------- */

void kvmm_client_gone(struct kvmm_client *c)
{
	kvmm_client_gone_err(c, -ENOTCONN);
}

void kvmm_client_gone_err(struct kvmm_client *c, int err)
{
	struct kvmm_cqe ev = {.res = err, .flags = KVMM_CQE_F_EVENT | KVMM_CQE_F_GONE};

	if (c->gone || c->reattaching)
		return;
	c->gone = true;
	c->backoff_ms = REATTACH_BACKOFF_MIN_MS;
	c->retry_ns = 0; /* KVMM_ATTACH_REATTACH: the next call tries at once */
	kvmm_cq_push(c, &ev);
}

int kvmm_connected(const kvmm_client_t *c)
{
	return c && kvmm_client_usable_now(c) == 0 ? 1 : 0;
}

/* Retrying may help: no daemon yet, one that is starting or stopping, or one that hung up. */
static bool retryable(int err)
{
	switch (-err) {
	case ENOENT:
	case ECONNREFUSED:
	case ENOTCONN:
	case EPIPE:
	case ECONNRESET:
	case EAGAIN:
	case ESHUTDOWN:
	case EUSERS:
	case ETIMEDOUT: /* a stopped daemon may run again */
		return true;
	default:
		return false;
	}
}

/* Drop the dead session (the pool's address range stays); -EISCONN if it is not dead. */
static int reattach_begin(struct kvmm_client *c)
{
	/*
	 * A handle that has not met the loss yet looks now: what is queued on the socket (a
	 * SHUTDOWN event first, after a clean stop), then the hang-up, a readable EOF.
	 */
	if (!kvmm_client_usable_now(c)) {
		int err = 0;

		for (unsigned int i = 0; i < 1024 && !err; i++)
			err = kvmm_msg_pump(c, false);
		if (!err || err == -EAGAIN)
			return -EISCONN;
	}
	/* broken but not seen gone (a malformed reply): the event still goes out, once */
	kvmm_client_gone(c);
	kvmm_client_close_session(c);
	return 0;
}

/*
 * One attempt at a new session on the saved arguments; the handle stays detached when it
 * fails. On success the old session's sequences become the lost list and what it left
 * unreaped in the completion queue (the GONE event included) is dropped.
 */
static int reattach_once(struct kvmm_client *c, uint32_t wait_ms)
{
	int err;

	c->reattaching = true;
	/* the attempt's answer is waited for at most wait_ms (0: the deadline, if any) */
	if (wait_ms && (!c->deadline_ms || wait_ms < c->deadline_ms))
		c->wait_ms = wait_ms;
	err = kvmm_client_open(c);
	c->wait_ms = c->deadline_ms; /* the session's own calls: the whole deadline */
	if (!err && c->fd >= 0 && c->wait_ms != wait_ms && wait_ms) {
		struct timeval tv = {c->wait_ms / 1000, (long)(c->wait_ms % 1000) * 1000};

		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	c->reattaching = false;
	if (err) {
		kvmm_client_close_session(c);
		return err;
	}
	c->gone = false;
	c->cq_head = c->cq_count = 0;
	live_to_lost(c);
	return 0;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static uint32_t backoff_next(uint32_t ms)
{
	return ms * 2 > REATTACH_BACKOFF_MAX_MS ? REATTACH_BACKOFF_MAX_MS : ms * 2;
}

static int reattach_locked(struct kvmm_client *c, int timeout_ms)
{
	uint64_t start = mono_ns(), deadline;
	uint32_t backoff = REATTACH_BACKOFF_MIN_MS;
	int err;

	if (c->pid != getpid())
		return -EINVAL; /* a forked child attaches on its own */
	err = reattach_begin(c);
	if (err)
		return err;
	deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		uint64_t now = mono_ns();
		uint32_t left = 0;

		/*
		 * An attempt waits for the daemon's answer the time left, but at least what an
		 * automatic one waits (a live daemon answers in far less; a slow one still gets
		 * a fair chance at "one try"), and never past the deadline (0: the deadline).
		 */
		if (deadline != UINT64_MAX) {
			left = (uint32_t)min_u64(
				now >= deadline ? 0 : (deadline - now) / 1000000u + 1, UINT32_MAX);
			if (left < REATTACH_AUTO_WAIT_MS)
				left = REATTACH_AUTO_WAIT_MS;
		}
		err = reattach_once(c, left);
		if (!err)
			return (int)c->nr_lost;
		if (!retryable(err))
			return err;
		now = mono_ns();
		/* the cause stays readable: kvmm_conn_error (no socket, nobody, no answer) */
		if (now >= deadline)
			return -ETIMEDOUT;
		if ((uint64_t)backoff * 1000000u > deadline - now)
			backoff = (uint32_t)((deadline - now) / 1000000u) + 1;
		sleep_ms(backoff);
		backoff = backoff_next(backoff);
	}
}

int kvmm_reattach(kvmm_client_t *c, int timeout_ms)
{
	int ret;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ret = reattach_locked(c, timeout_ms);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int kvmm_client_usable(struct kvmm_client *c)
{
	uint64_t now;
	int err = kvmm_client_usable_now(c);

	if (!err || !(c->opt_flags & KVMM_ATTACH_REATTACH) || c->reattaching || c->pid != getpid())
		return err;
	now = mono_ns();
	if (now < c->retry_ns)
		return -ENOTCONN;
	if (reattach_begin(c) == 0) {
		err = reattach_once(c, REATTACH_AUTO_WAIT_MS);
		if (!err) {
			c->backoff_ms = REATTACH_BACKOFF_MIN_MS;
			return -ESTALE; /* this call is not done: the engine hears of the loss first */
		}
	}
	/* not back yet: later calls fail at once until the backoff has passed */
	if (!c->backoff_ms)
		c->backoff_ms = REATTACH_BACKOFF_MIN_MS;
	c->retry_ns = now + (uint64_t)c->backoff_ms * 1000000u;
	c->backoff_ms = backoff_next(c->backoff_ms);
	/*
	 * A daemon that answers and refuses (another ABI, no longer our namespace's format,
	 * this user not allowed) will not change its mind by itself: say so, not "gone".  The
	 * rest (no socket, nobody listening, no answer) is -ENOTCONN: not back yet, and
	 * kvmm_conn_error says which.
	 */
	return err && !retryable(err) ? err : -ENOTCONN;
}

int kvmm_conn_error(const kvmm_client_t *c, char *buf, size_t len)
{
	if (!c || (len && !buf))
		return -EINVAL;
	if (len)
		snprintf(buf, len, "%s", c->cause ? c->cause_msg : "");
	return c->cause;
}

int kvmm_lost_seqs(const kvmm_client_t *c, uint64_t *seqs, uint32_t max)
{
	if (!c || (max && !seqs))
		return -EINVAL;
	if (c->lost_incomplete)
		return -ENOMEM;
	for (uint32_t i = 0; i < max && i < c->nr_lost; i++)
		seqs[i] = c->lost[i];
	return (int)c->nr_lost;
}
