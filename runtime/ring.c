// SPDX-License-Identifier: MIT
/*
 * runtime/ring.c - libkvmm's half of the data plane (uapi/kvmm.h, "Data plane"): the client
 * end of the submission and completion rings, the doorbells, the page-table mirror reader
 * and the magazine. kvmm_submit puts each entry's request payload in the SQ data area (a
 * byte ring: an entry's bytes are free again once the daemon's SQ head has passed it) and
 * its SQE in the SQ, publishes the whole batch with one tail store and rings the eventfd
 * only if the daemon said it sleeps; completions are moved from the CQ into the handle's
 * completion queue, so kvmm_complete hands out ring and socket completions alike. Waiting
 * spins for a short while (a cross-core wake-up costs far more than a poll) and then sleeps
 * on the CQ tail futex, waking every few milliseconds to check that the daemon still lives.
 * Everything read from the region is checked like any daemon message: a corrupt region makes
 * the handle unusable, never crashes it.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "compiler.h"
#include "runtime/libkvmm.h"

#define KVMM_RING_SPIN_NS 20000	      /* poll the CQ at least this long before sleeping */
#define KVMM_RING_SPIN_MAX_NS 1000000 /* and at most this long (the learnt budget's cap) */
#define KVMM_RING_PURE_NS 20000	      /* of which this long without a yield (kvmm_ring_wait) */
#define KVMM_RING_CROWD_NS 50000      /* crowded (the load hint): yield this long, then sleep */
#define KVMM_RING_SLEEP_NS 10000000L  /* futex timeout: look at the socket this often */
#define KVMM_MIRROR_TRIES 64	      /* seqcount retries before asking the socket */
#define KVMM_MAG_REFILL_MIN 64	      /* frames an empty magazine asks for at least */
#define KVMM_MAG_WAIT_NS 200000	      /* an empty magazine waits this long for a top-up */

struct kvmm_dp_client {
	struct kvmm_shm_hdr hdr; /* checked copy */
	int efd;
	uint32_t mask;
	struct kvmm_shm_ring *sq, *cq, *mag, *ret;
	struct kvmm_ring_sqe *sqes;
	uint8_t *data;
	uint8_t *out; /* the out area (KVMM_FEAT_RING_OUT), NULL without one */
	struct kvmm_ring_cqe *cqes;
	struct kvmm_pt_slot *pt;
	int32_t *pt_frames;
	uint32_t *mag_frames, *ret_frames;

	uint32_t sq_tail;      /* queued (published at kick) */
	uint32_t sq_published; /* published */
	uint32_t cq_head;
	uint64_t data_tail;  /* bytes of the data area handed out, free-running */
	uint64_t *data_end;  /* per SQ slot: data_tail after its payload */
	uint64_t *user_data; /* per SQ slot, to fail what is in flight when the daemon dies */
	uint32_t ret_tail;
	bool mag_auto; /* a MAG_REFILL succeeded: the daemon now tops the magazine up itself */

	/*
	 * What one entry in flight has cost the daemon lately, an average of the waits (ns per
	 * entry, 1/8 weight for the newest): a wait for n entries spins about 2n times that.
	 */
	uint64_t ns_per_entry;

	/* a synchronous call on the ring (kvmm_ring_call): its SQ index and, once in, its CQE */
	bool call_pending, call_done;
	uint32_t call_idx;
	struct kvmm_ring_cqe call_cqe;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *at(struct kvmm_client *c, uint64_t off)
{
	return (uint8_t *)c->shm + off;
}

int kvmm_dp_client_setup(struct kvmm_client *c, int efd, uint32_t ring_entries, uint32_t mag_size)
{
	struct kvmm_dp_client *d;
	struct kvmm_shm_hdr h;

	memcpy(&h, c->shm, sizeof(h));
	if (kvmm_shm_hdr_check(&h, c->shm_len) || h.ring_entries != ring_entries ||
	    h.mag_size != mag_size)
		return -EBADMSG;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->hdr = h;
	d->mask = h.ring_entries - 1;
	d->data_end = calloc(h.ring_entries, sizeof(*d->data_end));
	d->user_data = calloc(h.ring_entries, sizeof(*d->user_data));
	d->efd = dup(efd);
	if (!d->data_end || !d->user_data || d->efd < 0) {
		int err = d->efd < 0 ? -errno : -ENOMEM;

		if (d->efd >= 0)
			close(d->efd);
		free(d->data_end);
		free(d->user_data);
		free(d);
		return err;
	}
	d->sq = at(c, h.sq_off);
	d->sqes = at(c, h.sqes_off);
	d->data = at(c, h.data_off);
	d->cq = at(c, h.cq_off);
	d->cqes = at(c, h.cqes_off);
	d->pt = at(c, h.pt_off);
	d->pt_frames = at(c, h.pt_frames_off);
	d->mag = at(c, h.mag_off);
	d->mag_frames = at(c, h.mag_frames_off);
	d->ret = at(c, h.ret_off);
	d->ret_frames = at(c, h.ret_frames_off);
	/* checked above: an out area only when asked for (the header check placed it) */
	d->out = h.out_size && (c->features & KVMM_FEAT_RING_OUT) ? at(c, h.out_off) : NULL;
	/* a fresh region: every index starts at 0 (a daemon that says otherwise is not trusted) */
	d->sq_tail = d->sq_published = READ_ONCE(d->sq->tail);
	d->cq_head = READ_ONCE(d->cq->head);
	d->ret_tail = READ_ONCE(d->ret->tail);
	c->dp = d;
	return 0;
}

void kvmm_dp_client_free(struct kvmm_client *c)
{
	struct kvmm_dp_client *d = c->dp;

	if (!d)
		return;
	close(d->efd);
	free(d->data_end);
	free(d->user_data);
	free(d);
	c->dp = NULL;
}

/* ---- submission ---------------------------------------------------------------------------- */

static int ring_queue(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		      unsigned int nr_parts, uint64_t user_data, uint16_t flags)
{
	struct kvmm_dp_client *d = c->dp;
	uint64_t size = d->hdr.data_size, len = 0, off, freed, head_pos;
	uint32_t head, idx;
	struct kvmm_ring_sqe *e;

	for (unsigned int i = 0; i < nr_parts; i++)
		len += parts[i].len;
	if (len > KVMM_MSG_PAYLOAD_MAX || len > size / 2)
		return -E2BIG;
	len = (len + 7) & ~(uint64_t)7;
	/* acquire: pairs with the daemon's release of the SQ head once it copied those entries */
	head = smp_load_acquire(&d->sq->head);
	if ((uint32_t)(d->sq_tail - head) > d->hdr.ring_entries ||
	    (uint32_t)(d->sq_published - head) > d->hdr.ring_entries)
		return -EBADMSG;
	if (d->sq_tail - head >= d->hdr.ring_entries)
		return -EAGAIN;
	/* the data the daemon has consumed ends where the last consumed SQE's payload ended */
	freed = head == d->sq_tail ? d->data_tail : d->data_end[(head - 1) & d->mask];
	head_pos = freed;
	off = d->data_tail;
	/* a payload never wraps: skip to the start of the area when it would */
	if (off % size + len > size)
		off += size - off % size;
	if (off + len - head_pos > size)
		return -EAGAIN;
	idx = d->sq_tail & d->mask;
	for (unsigned int i = 0, pos = (uint32_t)(off % size); i < nr_parts; i++) {
		if (parts[i].len)
			memcpy(d->data + pos, parts[i].base, parts[i].len);
		pos += (uint32_t)parts[i].len;
	}
	e = &d->sqes[idx];
	e->op = (uint16_t)op;
	e->flags = flags;
	e->len = 0;
	for (unsigned int i = 0; i < nr_parts; i++)
		e->len += (uint32_t)parts[i].len;
	e->data_off = (uint32_t)(off % size);
	e->reserved = 0;
	e->user_data = user_data;
	e->reserved2 = 0;
	d->data_tail = off + len;
	d->data_end[idx] = d->data_tail;
	d->user_data[idx] = user_data;
	d->sq_tail++;
	return 0;
}

int kvmm_ring_queue(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		    unsigned int nr_parts, uint64_t user_data)
{
	return ring_queue(c, op, parts, nr_parts, user_data, 0);
}

static void doorbell(struct kvmm_dp_client *d)
{
	uint64_t one = 1;
	ssize_t n = write(d->efd, &one, sizeof(one));

	(void)n; /* a full counter (never in practice) already means "wake up" */
}

void kvmm_ring_kick(struct kvmm_client *c)
{
	struct kvmm_dp_client *d = c->dp;

	if (d->sq_published == d->sq_tail)
		return;
	/* release: the SQEs and their data are visible before the tail that publishes them */
	smp_store_release(&d->sq->tail, d->sq_tail);
	d->sq_published = d->sq_tail;
	/*
	 * Full barrier: the tail store must be visible before the NEED_WAKEUP flag is loaded, or
	 * the daemon could re-check our old tail, sleep, and we would not ring. Pairs with the
	 * daemon's smp_mb between its flag stores and its last SQ re-check.
	 */
	smp_mb();
	if (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP)
		doorbell(d);
}

/* ---- completion ------------------------------------------------------------------------------ */

/* A CQE's reply head, as the operation table says its op's replies start (KVMM_RH_*). */
static void cqe_decode(const struct kvmm_client *c, const struct kvmm_ring_cqe *r,
		       struct kvmm_cqe *cqe)
{
	const struct kvmm_op_info *info = kvmm_op_info(r->op);

	memset(cqe, 0, sizeof(*cqe));
	cqe->user_data = r->user_data;
	cqe->res = r->res > 0 ? -EBADMSG : r->res;
	if (cqe->res || !info)
		return;
	switch ((enum kvmm_reply_head)info->head) {
	case KVMM_RH_SEQ: {
		struct kvmm_seq_create_rep rep; /* same layout as kvmm_seq_fork_rep */

		memcpy(&rep, r->rep, sizeof(rep));
		cqe->seq = rep.seq;
		cqe->nr_blocks = rep.nr_blocks;
		break;
	}
	case KVMM_RH_TOKENS: {
		struct kvmm_seq_append_rep rep; /* kvmm_prefix_lookup_rep: the same two fields */

		memcpy(&rep, r->rep, sizeof(rep));
		cqe->nr_tokens = rep.nr_tokens;
		cqe->nr_blocks = rep.nr_blocks;
		break;
	}
	case KVMM_RH_FRAMES: {
		struct kvmm_pin_rep rep;

		memcpy(&rep, r->rep, sizeof(rep));
		cqe->nr_frames = rep.nr_frames;
		break;
	}
	case KVMM_RH_PROMPT: {
		struct kvmm_seq_prompt_rep rep;

		memcpy(&rep, r->rep, sizeof(rep));
		cqe->seq = rep.seq;
		cqe->nr_blocks = rep.nr_blocks;
		cqe->nr_tokens = (uint64_t)rep.nr_hit * c->tokens_per_page;
		break;
	}
	case KVMM_RH_NONE:
		break;
	}
}

/* The daemon is gone or broke the ring: everything in flight completes with err. */
static void ring_fail(struct kvmm_client *c, int err)
{
	struct kvmm_dp_client *d = c->dp;

	while (d->cq_head != d->sq_published) {
		struct kvmm_cqe cqe = {.user_data = d->user_data[d->cq_head & d->mask], .res = err};

		if (d->call_pending && d->cq_head == d->call_idx) {
			/* the synchronous call in flight fails with the rest */
			memset(&d->call_cqe, 0, sizeof(d->call_cqe));
			d->call_cqe.res = err;
			d->call_done = true;
		} else {
			kvmm_cq_push(c, &cqe);
		}
		d->cq_head++;
	}
	d->sq_tail = d->sq_published;
	if (!c->err)
		c->err = err;
}

void kvmm_ring_fail(struct kvmm_client *c, int err)
{
	ring_fail(c, err);
}

unsigned int kvmm_ring_reap(struct kvmm_client *c)
{
	struct kvmm_dp_client *d = c->dp;
	unsigned int n = 0;
	uint32_t tail;

	/* acquire: pairs with the daemon's release of the CQ tail after writing the CQEs */
	tail = smp_load_acquire(&d->cq->tail);
	if ((uint32_t)(tail - d->cq_head) > (uint32_t)(d->sq_published - d->cq_head)) {
		ring_fail(c, -EBADMSG); /* more completions than submissions */
		return 0;
	}
	while (d->cq_head != tail) {
		struct kvmm_ring_cqe r;
		struct kvmm_cqe cqe;

		memcpy(&r, &d->cqes[d->cq_head & d->mask], sizeof(r));
		if (d->call_pending && d->cq_head == d->call_idx) {
			/* the synchronous call's answer: its caller takes it, not kvmm_complete */
			d->call_cqe = r;
			d->call_done = true;
			d->cq_head++;
			n++;
			continue;
		}
		cqe_decode(c, &r, &cqe);
		if (kvmm_cq_push(c, &cqe))
			break; /* out of memory: leave it in the ring for the next call */
		kvmm_live_cqe(c, r.op, &cqe);
		kvmm_wp_pending_done(c, KVMM_WP_RING_TAG | d->cq_head, &cqe);
		d->cq_head++;
		n++;
	}
	if (!n)
		return 0;
	/* release: we are done reading those CQEs; the daemon may overwrite them */
	smp_store_release(&d->cq->head, d->cq_head);
	/*
	 * A daemon held back by our full CQ may be asleep on it: ring if it said so. Full
	 * barrier: the head store before the flag load (pairs with the daemon's smp_mb).
	 */
	smp_mb();
	if (d->sq_published != READ_ONCE(d->sq->head) &&
	    (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP))
		doorbell(d);
	return n;
}

uint32_t kvmm_ring_last_pos(const struct kvmm_client *c)
{
	return c->dp->sq_tail - 1;
}

unsigned int kvmm_ring_inflight(const struct kvmm_client *c)
{
	return c->dp ? c->dp->sq_tail - c->dp->cq_head : 0;
}

static bool cq_has(struct kvmm_dp_client *d)
{
	return READ_ONCE(d->cq->tail) != d->cq_head;
}

/* $NAME as a count of ns below 1 s, else @def. */
static uint64_t env_ns(const char *name, uint64_t def)
{
	const char *e = getenv(name);
	char *end;
	unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;

	return e && *e && !*end && v < 1000000000ull ? v : def;
}

/*
 * The spin budget of a wait for @inflight entries, in ns: twice what they have been costing
 * (ns_per_entry), at least KVMM_RING_SPIN_NS, at most KVMM_RING_SPIN_MAX_NS.  A step of 32
 * entries takes the daemon a few hundred microseconds; a fixed 20 us spin then slept every
 * time, and the futex wake-up (a system call in kvmmd, a scheduler round trip here) cost a
 * third of the step's rate (kvmm-bench.md, suite flow).  $KVMM_RING_SPIN_NS fixes the budget
 * instead, for measuring it.
 */
static uint64_t spin_budget(const struct kvmm_dp_client *d, uint32_t inflight)
{
	static uint64_t fixed = UINT64_MAX; /* UINT64_MAX - 1: learnt */
	uint64_t b;

	if (fixed == UINT64_MAX)
		fixed = getenv("KVMM_RING_SPIN_NS") ? env_ns("KVMM_RING_SPIN_NS", KVMM_RING_SPIN_NS)
						    : UINT64_MAX - 1;
	if (fixed != UINT64_MAX - 1)
		return fixed;
	b = 2 * d->ns_per_entry * (inflight ? inflight : 1);
	return clamp_t(uint64_t, b, KVMM_RING_SPIN_NS, KVMM_RING_SPIN_MAX_NS);
}

/* A wait for @inflight entries saw completions after @ns: learn what an entry costs. */
static void spin_learn(struct kvmm_dp_client *d, uint32_t inflight, uint64_t ns)
{
	uint64_t per = ns / (inflight ? inflight : 1);

	d->ns_per_entry = d->ns_per_entry ? (7 * d->ns_per_entry + per) / 8 : per;
}

/* The part of it without yields on another CPU than the daemon's ($KVMM_RING_PURE_NS). */
static uint64_t pure_budget(void)
{
	static uint64_t budget = UINT64_MAX;

	if (budget == UINT64_MAX)
		budget = env_ns("KVMM_RING_PURE_NS", KVMM_RING_PURE_NS);
	return budget;
}

/*
 * How long at least a wait among more clients than CPUs yields before it sleeps (the spin
 * budget when that is longer; $KVMM_RING_CROWD_NS, 0: sleep at once, for measuring).
 */
static uint64_t crowd_budget(void)
{
	static uint64_t budget = UINT64_MAX;

	if (budget == UINT64_MAX)
		budget = env_ns("KVMM_RING_CROWD_NS", KVMM_RING_CROWD_NS);
	return budget;
}

/* The CPUs this process may run on (the load hint's yardstick), at least 1. */
static uint32_t nr_cpus(void)
{
	static uint32_t n;

	if (!n) {
		cpu_set_t set;

		n = sched_getaffinity(0, sizeof(set), &set) ? 1 : (uint32_t)CPU_COUNT(&set);
		n = n ? n : 1;
	}
	return n;
}

/* Whether waits follow the daemon's load hint ($KVMM_RING_LOAD=0: no, for measuring it). */
static bool load_hint(void)
{
	static int on = -1;

	if (on < 0) {
		const char *e = getenv("KVMM_RING_LOAD");

		on = !(e && !strcmp(e, "0"));
	}
	return on;
}

/* This thread's CPU plus one, 0 when unknown (the rings' cpu hints). */
static unsigned int this_cpu(void)
{
	int cpu = sched_getcpu();

	return cpu < 0 ? 0 : (unsigned int)cpu + 1;
}

/*
 * Wait until the CQ has something: spin for the budget, then sleep on the CQ tail futex.
 * @any: also return when the handle's completion queue holds something (kvmm_complete's
 * wait; a synchronous call waits for the ring alone).
 */
static int ring_wait(struct kvmm_client *c, bool any)
{
	struct kvmm_dp_client *d = c->dp;
	uint64_t start = now_ns(), budget, pure = pure_budget(), heard = start, crowd = 0;
	unsigned int spins = 0, cpu = this_cpu();
	uint32_t inflight;

	WRITE_ONCE(d->cq->cpu, cpu);
	kvmm_ring_kick(c);
	inflight = d->sq_published - READ_ONCE(d->cq->tail);
	budget = spin_budget(d, inflight);
	/*
	 * The clients the daemon served in its last millisecond, plus its polling thread (its
	 * load hint), are more than our CPUs: a spin here takes a CPU from the daemon or from a
	 * client it has answered.  Yield instead, at every poll, for the crowd budget, then
	 * sleep: the CPU goes to whichever of them is runnable (the daemon, or a client whose
	 * completion is in), and this one still sees its own completion without a futex
	 * wake-up.  Sleeping at once cost every request a FUTEX_WAIT, a FUTEX_WAKE and the
	 * scheduler's wake-up latency: eight synchronous clients on two CPUs did less than half
	 * what two did (Documentation/benchmarks/kvmm-bench.md, session 20).  Two synchronous
	 * clients and the daemon on two CPUs are crowded too (session 21).  The yields last as
	 * long as the spin would have (at least the crowd budget): a step of compound entries
	 * takes the daemon longer than 50 us, and a sleep then costs it a futex wake-up.
	 */
	if (READ_ONCE(d->sq->load) > nr_cpus() && load_hint()) {
		crowd = crowd_budget() ? max_t(uint64_t, crowd_budget(), budget) : 0;
		budget = 0;
	}
	if (cq_has(d))
		return 0;
	while (!cq_has(d)) {
		struct timespec ts = {0, KVMM_RING_SLEEP_NS};
		uint32_t seen;
		int err;

		if (crowd && now_ns() - start < crowd) {
			sched_yield();
			continue;
		}

		if ((budget && ++spins < 64) || now_ns() - start < budget) {
			/*
			 * Yield now and then when the daemon's loop runs on this CPU (the
			 * scheduler likes to put two processes that wake each other together):
			 * a pure spin would keep it off the CPU for the whole spin window.  On
			 * another CPU (its SQ cpu hint says which) a yield is only a system call
			 * between us and the completion, for the first KVMM_RING_PURE_NS; a wait
			 * longer than that means the daemon serves others, and clients beyond the
			 * CPUs need ours.  An old daemon (hint 0) gets the yields throughout.
			 */
			if (spins % 16 == 0) {
				uint32_t theirs = READ_ONCE(d->sq->cpu);

				if (cpu != this_cpu()) {
					cpu = this_cpu();
					WRITE_ONCE(d->cq->cpu, cpu);
				}
				if (!theirs || !cpu || theirs == cpu || now_ns() - start >= pure)
					sched_yield();
				else
					cpu_relax();
			} else {
				cpu_relax();
			}
			continue;
		}
		seen = d->cq_head;
		WRITE_ONCE(d->cq->flags, KVMM_CQ_F_WAITING);
		/*
		 * Full barrier: the WAITING store before the tail re-load, or the daemon could
		 * publish a tail we do not see and skip the wake (it loads WAITING after its own
		 * smp_mb). FUTEX_WAIT then compares the tail word atomically with seen.
		 */
		smp_mb();
		if (READ_ONCE(d->cq->tail) == seen)
			syscall(SYS_futex, &d->cq->tail, FUTEX_WAIT, seen, &ts, NULL, 0);
		WRITE_ONCE(d->cq->flags, 0);
		if (cq_has(d) || (any && c->cq_count))
			break;
		/* nothing yet: is the daemon still there? (also takes events off the socket) */
		err = kvmm_msg_pump(c, false);
		if (err == 0)
			heard = now_ns(); /* it spoke (an event): it is alive */
		if (err && err != -EAGAIN) {
			ring_fail(c, err == -ETIMEDOUT ? err : -ENOTCONN);
			return err;
		}
		/* silent past the deadline with work in flight: stopped or hung (kvmm.h) */
		if (c->wait_ms && d->sq_published != d->cq_head &&
		    now_ns() - heard >= (uint64_t)c->wait_ms * 1000000u)
			return kvmm_client_stalled(c);
	}
	spin_learn(d, inflight, now_ns() - start);
	return 0;
}

int kvmm_ring_wait(struct kvmm_client *c)
{
	return ring_wait(c, true);
}

static int ring_call(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		     unsigned int nr_parts, void *rep, size_t rep_len, uint16_t flags)
{
	struct kvmm_dp_client *d = c->dp;
	int err;

	if (rep_len > sizeof(d->call_cqe.rep) || d->call_pending)
		return 1; /* the socket carries it */
	for (;;) {
		err = ring_queue(c, op, parts, nr_parts, 0, flags);
		if (err != -EAGAIN)
			break;
		/* full: wait for the daemon to take some (what it answers goes to the queue) */
		err = ring_wait(c, false);
		if (err)
			return err;
		kvmm_ring_reap(c);
	}
	if (err)
		return err == -E2BIG ? 1 : err; /* too big for the data area: the socket */
	d->call_idx = d->sq_tail - 1;
	d->call_pending = true;
	d->call_done = false;
	kvmm_ring_kick(c);
	while (!d->call_done) {
		if (kvmm_ring_reap(c))
			continue;
		err = ring_wait(c, false);
		if (err && !d->call_done) {
			d->call_pending = false;
			return err;
		}
	}
	d->call_pending = false;
	if (d->call_cqe.res > 0 || (d->call_cqe.res == 0 && d->call_cqe.op != op)) {
		ring_fail(c, -EBADMSG); /* a daemon that answers another op: not trusted */
		return -EBADMSG;
	}
	if (d->call_cqe.res < 0)
		return d->call_cqe.res;
	if (rep && rep_len)
		memcpy(rep, d->call_cqe.rep, rep_len);
	return 0;
}

int kvmm_ring_call(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		   unsigned int nr_parts, void *rep, size_t rep_len)
{
	return ring_call(c, op, parts, nr_parts, rep, rep_len, 0);
}

int kvmm_ring_call_out(struct kvmm_client *c, unsigned int op, const struct kvmm_iov *parts,
		       unsigned int nr_parts, void *out, size_t out_max, size_t *out_len)
{
	struct kvmm_dp_client *d = c->dp;
	struct kvmm_ring_out o;
	int err;

	if (!d || !d->out)
		return 1; /* an older daemon: the socket */
	err = ring_call(c, op, parts, nr_parts, NULL, 0, KVMM_SQE_F_OUT);
	if (err)
		return err;
	/*
	 * Ours: the only out SQE in flight is this call (call_pending), whose CQE we have.  Copy
	 * the header first, then at most what it says fits.
	 */
	memcpy(&o, d->out, sizeof(o));
	if (o.op != op || o.user_data || o.len > d->hdr.out_size - sizeof(o) || o.len > out_max) {
		ring_fail(c, -EBADMSG);
		return -EBADMSG;
	}
	memcpy(out, d->out + sizeof(o), o.len);
	*out_len = o.len;
	return 0;
}

/* ---- page-table mirror ----------------------------------------------------------------------- */

static int slot_read(struct kvmm_dp_client *d, uint32_t k, uint64_t seq, int32_t *row, uint32_t max,
		     uint32_t *nr_blocks)
{
	struct kvmm_pt_slot *slot = &d->pt[k];
	const int32_t *frames = d->pt_frames + (size_t)k * d->hdr.pt_max_blocks;

	for (unsigned int tries = 0; tries < KVMM_MIRROR_TRIES; tries++) {
		uint32_t sc, nb, fl, n;

		if (!kvmm_seqcount_try_read_begin((struct kvmm_seqcount *)&slot->seqcount, &sc)) {
			cpu_relax();
			continue;
		}
		if (READ_ONCE(slot->seq) != seq) {
			if (!kvmm_seqcount_read_retry((struct kvmm_seqcount *)&slot->seqcount, sc))
				return -ENOENT;
			continue;
		}
		nb = READ_ONCE(slot->nr_blocks);
		fl = READ_ONCE(slot->flags);
		n = nb < max ? nb : max;
		if (n > d->hdr.pt_max_blocks)
			n = d->hdr.pt_max_blocks;
		for (uint32_t b = 0; b < n; b++)
			row[b] = READ_ONCE(frames[b]);
		if (kvmm_seqcount_read_retry((struct kvmm_seqcount *)&slot->seqcount, sc))
			continue;
		/* stable: now the values may be acted on */
		if ((fl & KVMM_PT_F_OVERFLOW) && max > d->hdr.pt_max_blocks)
			return -ENOENT; /* the slot lacks entries the row wants */
		*nr_blocks = nb;
		return 0;
	}
	return -ENOENT; /* a writer that never finishes (a dead daemon): ask the socket */
}

int kvmm_mirror_row(struct kvmm_client *c, uint64_t seq, int32_t *row, uint32_t max)
{
	struct kvmm_dp_client *d = c->dp;
	uint32_t n = d->hdr.pt_slots, guess, nb = 0;
	int err;

	if (!seq)
		return -ENOENT;
	guess = (uint32_t)((seq - 1) % n);
	err = slot_read(d, guess, seq, row, max, &nb);
	for (uint32_t k = 0; err == -ENOENT && k < n; k++)
		if (k != guess && READ_ONCE(d->pt[k].seq) == seq)
			err = slot_read(d, k, seq, row, max, &nb);
	if (err)
		return err;
	for (uint32_t b = nb; b < max; b++)
		row[b] = KVMM_BLOCK_NONE;
	return nb > max ? -E2BIG : 0;
}

/* ---- magazine -------------------------------------------------------------------------------- */

static int mag_call(struct kvmm_client *c, unsigned int op, uint32_t n, struct kvmm_mag_rep *rep)
{
	struct kvmm_mag_req req = {.nr_frames = n};
	struct kvmm_iov part = {&req, sizeof(req)};

	return kvmm_msg_call(c, op, &part, 1, rep, sizeof(*rep));
}

/*
 * Pop up to n: a few loads and one compare-and-swap of the shared head, no lock and no
 * system call (the daemon may move the head too, to take frames back: the CAS makes every
 * published frame go to exactly one side).  Crossing under the low mark rings the doorbell
 * when the daemon sleeps, so its top-up runs before the magazine is empty.  Returns the
 * frames taken (0: empty), or -EBADMSG when the daemon published nonsense.
 */
static int mag_pop(struct kvmm_client *c, uint32_t *frames, uint32_t n)
{
	struct kvmm_dp_client *d = c->dp;
	uint32_t size = d->hdr.mag_size, low = KVMM_MAG_LOW_MARK(size);

	for (;;) {
		uint32_t h = READ_ONCE(d->mag->head), t, avail, k;

		/* acquire: pairs with the daemon's release of the tail after writing the numbers */
		t = smp_load_acquire(&d->mag->tail);
		avail = t - h;
		if (avail > size)
			return -EBADMSG;
		if (!avail)
			return 0;
		k = avail < n ? avail : n;
		for (uint32_t i = 0; i < k; i++) {
			uint32_t f = READ_ONCE(d->mag_frames[(h + i) % size]);

			if (f >= c->nr_frames)
				return -EBADMSG;
			frames[i] = f;
		}
		/* release: our copies are done before the daemon sees the slots as taken */
		if (!__atomic_compare_exchange_n(&d->mag->head, &h, h + k, false, __ATOMIC_RELEASE,
						 __ATOMIC_RELAXED))
			continue; /* another thread, or the daemon draining: read again */
		if (avail >= low && avail - k < low && d->mag_auto) {
			/* full barrier: the head store before the flag load (as kvmm_ring_kick) */
			smp_mb();
			if (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP)
				doorbell(d);
		}
		return (int)k;
	}
}

/* Empty: give the daemon's own top-up a moment (waking it if it sleeps) before asking. */
static int mag_wait_topup(struct kvmm_client *c, uint32_t *frames, uint32_t n)
{
	struct kvmm_dp_client *d = c->dp;
	uint64_t start;
	int ret;

	if (!d->mag_auto)
		return 0;
	smp_mb();
	if (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP)
		doorbell(d);
	start = now_ns();
	do {
		ret = mag_pop(c, frames, n);
		if (ret)
			return ret;
		sched_yield(); /* the daemon may share this CPU */
	} while (now_ns() - start < KVMM_MAG_WAIT_NS);
	return 0;
}

int kvmm_mag_alloc(kvmm_client_t *c, uint32_t *frames, uint32_t n)
{
	int ret;

	if (!c || (n && !frames))
		return -EINVAL;
	if (!c->dp)
		return -EOPNOTSUPP;
	if (!n)
		return 0;
	ret = mag_pop(c, frames, n); /* the fast path: no lock */
	if (ret > 0 && c->wp) {
		/* the frames taken are this process's to write (wprotect.c) */
		pthread_mutex_lock(&c->lock);
		kvmm_wp_mag(c, frames, (uint32_t)ret, true);
		pthread_mutex_unlock(&c->lock);
	}
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	ret = mag_wait_topup(c, frames, n);
	if (ret == 0) {
		struct kvmm_mag_rep rep;

		/* one round trip for a batch: what was asked, at least KVMM_MAG_REFILL_MIN */
		ret = mag_call(c, KVMM_OP_MAG_REFILL,
			       n > KVMM_MAG_REFILL_MIN ? n : KVMM_MAG_REFILL_MIN, &rep);
		if (!ret)
			c->dp->mag_auto = true;
		if (!ret)
			ret = mag_pop(c, frames, n);
		if (ret == 0)
			ret = -ENOMEM;
	}
	if (ret > 0)
		kvmm_wp_mag(c, frames, (uint32_t)ret, true);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int kvmm_mag_free(kvmm_client_t *c, const uint32_t *frames, uint32_t n)
{
	struct kvmm_dp_client *d;
	uint32_t done = 0;
	int err = 0;

	if (!c || (n && !frames))
		return -EINVAL;
	if (!c->dp)
		return -EOPNOTSUPP;
	for (uint32_t i = 0; i < n; i++)
		if (frames[i] >= c->nr_frames)
			return -EINVAL;
	pthread_mutex_lock(&c->lock);
	d = c->dp;
	/* read-only before the daemon can see them again (wprotect.c) */
	kvmm_wp_mag(c, frames, n, false);
	while (done < n && !err) {
		uint32_t size = d->hdr.mag_size, head, space, k;

		/* acquire: pairs with the daemon's release of the return head */
		head = smp_load_acquire(&d->ret->head);
		if ((uint32_t)(d->ret_tail - head) > size) {
			err = -EBADMSG;
			break;
		}
		space = size - (d->ret_tail - head);
		if (!space) {
			struct kvmm_mag_rep rep;
			uint64_t start = now_ns();

			/* full: the daemon takes returns on every poll; wake it and let it run */
			smp_mb();
			if (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP)
				doorbell(d);
			while (READ_ONCE(d->ret->head) == head &&
			       now_ns() - start < KVMM_MAG_WAIT_NS)
				sched_yield();
			if (READ_ONCE(d->ret->head) != head)
				continue;
			/* still full: have the daemon take them now (one round trip) */
			err = mag_call(c, KVMM_OP_MAG_DRAIN, 0, &rep);
			continue;
		}
		k = n - done < space ? n - done : space;
		for (uint32_t i = 0; i < k; i++)
			WRITE_ONCE(d->ret_frames[(d->ret_tail + i) % size], frames[done + i]);
		d->ret_tail += k;
		done += k;
		/* release: the numbers are visible before the tail that hands them over */
		smp_store_release(&d->ret->tail, d->ret_tail);
	}
	/*
	 * A daemon that sleeps with the magazine under its low mark may be waiting for these to
	 * top it up: wake it (full barrier: the tail store before the flag load).
	 */
	if (!err && n && d->mag_auto &&
	    READ_ONCE(d->mag->tail) - READ_ONCE(d->mag->head) <
		    KVMM_MAG_LOW_MARK(d->hdr.mag_size)) {
		smp_mb();
		if (READ_ONCE(d->sq->flags) & KVMM_SQ_F_NEED_WAKEUP)
			doorbell(d);
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

uint32_t kvmm_mag_avail(kvmm_client_t *c)
{
	uint32_t n;

	if (!c || !c->dp)
		return 0;
	n = READ_ONCE(c->dp->mag->tail) - READ_ONCE(c->dp->mag->head);
	return n > c->dp->hdr.mag_size ? 0 : n;
}

uint32_t kvmm_mag_size(const kvmm_client_t *c)
{
	return c && c->dp ? c->dp->hdr.mag_size : 0;
}

int kvmm_has_rings(const kvmm_client_t *c)
{
	return c && c->dp ? 1 : 0;
}
