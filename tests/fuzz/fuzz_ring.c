// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_ring.c - libFuzzer harness: the data plane's shared memory, everything a
 * client can write there for kvmmd to read (uapi/kvmm.h "Data plane", kvmm/ipc/ring.c).
 * One real server (tests/fuzz/fuzz_server.h) is made once; each input is a new session that
 * attaches with rings and maps its region as libkvmm would, then runs the input's steps: a
 * well-behaved client's moves (submit an SQE and its payload, reap, pop magazine frames,
 * return them, append into popped frames) mixed with a hostile one's (raw SQEs, raw ring
 * indexes, raw bytes anywhere in the region, between any two polls), with kvmm_dp_poll() run
 * when the input says and the loop's OOM preemption after each poll.  A poll that finds the
 * ring corrupt ends the session, as server.c closes such a client.  At the end the session
 * is torn down and every frame and swap slot must be back (fz_check_pools() aborts).
 *
 * Input: byte 0: bits 0-1 ring entries (8 << n), bit 2 namespace beta, bits 3-4 the format.
 * Then steps, each a command byte (its value mod 13 below) and its arguments.
 *
 * fuzz-libs: kvmm/ipc/built-in.a kvmm/built-in.a kvmm/backend/built-in.a lib/built-in.a
 * fuzz-ldlibs: -lxxhash -luring -lpthread -lhiredis -lssl -lcrypto
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include "atomic.h"
#include "tests/fuzz/fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
	STEP_SUBMIT,	    /* u8 op, u16 plen, payload: an SQE and its data, tail published */
	STEP_RAW_SQE,	    /* u8 index, 32 bytes: an SQE slot, tail unchanged */
	STEP_SQ_TAIL,	    /* u32: the SQ tail */
	STEP_POLL,	    /* u8 budget - 1 */
	STEP_REAP,	    /* CQ head = CQ tail */
	STEP_CQ_HEAD,	    /* u32: the CQ head */
	STEP_POP,	    /* u8 n: pop up to n frames from the magazine */
	STEP_RETURN,	    /* u8 k: push popped frame k on the return ring */
	STEP_RETURN_RAW,    /* u32: push any number on the return ring */
	STEP_INDEX,	    /* u8 which, u32: the magazine head or the return tail */
	STEP_APPEND_FRAMES, /* u8 seq, u8 tokens, u8 frames: SEQ_APPEND_FRAMES of popped frames */
	STEP_WRITE,	    /* u32 offset, u8 len, bytes: anywhere in the region */
	STEP_SOCKET,	    /* u8 op, u16 plen, payload: a request on the socket */
	STEP_COUNT,
};

static const uint16_t ops[] = {
	KVMM_OP_PING,	   KVMM_OP_SEQ_CREATE,	 KVMM_OP_SEQ_APPEND, KVMM_OP_SEQ_APPEND_FRAMES,
	KVMM_OP_SEQ_FORK,  KVMM_OP_SEQ_TRUNCATE, KVMM_OP_SEQ_FREE,   KVMM_OP_PREFIX_LOOKUP,
	KVMM_OP_SEAL,	   KVMM_OP_PIN,		 KVMM_OP_UNPIN,	     KVMM_OP_MAG_REFILL,
	KVMM_OP_MAG_DRAIN, KVMM_OP_SEQ_BLOCKS,	 KVMM_OP_PREFETCH,   KVMM_OP_DETACH,
};

struct client {
	uint8_t *map;
	struct kvmm_shm_hdr h;
	struct kvmm_shm_ring *sq, *cq, *mag, *ret;
	struct kvmm_ring_sqe *sqes;
	uint8_t *data;
	uint32_t *mag_frames, *ret_frames;
	uint32_t sq_tail, ret_tail, data_pos;
	uint32_t popped[4096];
	uint32_t nr_popped;
	uint64_t user_data;
};

static bool fz_debug;

struct input {
	const uint8_t *p;
	size_t left;
};

static bool take(struct input *in, void *out, size_t n)
{
	if (in->left < n)
		return false;
	memcpy(out, in->p, n);
	in->p += n;
	in->left -= n;
	return true;
}

static bool client_map(struct client *c, int fd)
{
	struct stat st;

	if (fd < 0 || fstat(fd, &st))
		return false;
	c->map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (c->map == MAP_FAILED)
		return false;
	memcpy(&c->h, c->map, sizeof(c->h));
	if (kvmm_shm_hdr_check(&c->h, (uint64_t)st.st_size))
		return false;
	c->sq = (void *)(c->map + c->h.sq_off);
	c->cq = (void *)(c->map + c->h.cq_off);
	c->mag = (void *)(c->map + c->h.mag_off);
	c->ret = (void *)(c->map + c->h.ret_off);
	c->sqes = (void *)(c->map + c->h.sqes_off);
	c->data = c->map + c->h.data_off;
	c->mag_frames = (void *)(c->map + c->h.mag_frames_off);
	c->ret_frames = (void *)(c->map + c->h.ret_frames_off);
	return true;
}

/* Queue an SQE for @op with @len payload bytes, copied into the data area. */
static void submit(struct client *c, unsigned int op, const void *pl, uint32_t len)
{
	struct kvmm_ring_sqe e = {.op = (uint16_t)op, .len = len, .user_data = ++c->user_data};

	if (len > c->h.data_size)
		len = c->h.data_size;
	if (c->data_pos + len > c->h.data_size)
		c->data_pos = 0;
	e.data_off = c->data_pos;
	memcpy(c->data + c->data_pos, pl, len);
	c->data_pos += len;
	memcpy(&c->sqes[c->sq_tail & (c->h.ring_entries - 1)], &e, sizeof(e));
	smp_store_release(&c->sq->tail, ++c->sq_tail);
}

static void pop(struct client *c, unsigned int n)
{
	while (n-- && c->nr_popped < ARRAY_SIZE(c->popped)) {
		uint32_t h = smp_load_acquire(&c->mag->head);
		uint32_t t = smp_load_acquire(&c->mag->tail);
		uint32_t f;

		if (h == t)
			return;
		f = READ_ONCE(c->mag_frames[h % c->h.mag_size]);
		if (!__atomic_compare_exchange_n(&c->mag->head, &h, h + 1, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			return;
		c->popped[c->nr_popped++] = f;
	}
}

static void give_back(struct client *c, uint32_t frame)
{
	WRITE_ONCE(c->ret_frames[c->ret_tail % c->h.mag_size], frame);
	smp_store_release(&c->ret->tail, ++c->ret_tail);
}

/* One step; false when the session is over (the daemon closed it, or the input ended). */
static bool step(struct kvmm_session *s, int peer, struct client *c, struct input *in)
{
	static uint8_t buf[KVMM_MSG_PAYLOAD_MAX];
	uint8_t cmd, b[3];
	uint32_t v;
	uint16_t len;
	int ret;

	if (!take(in, &cmd, 1))
		return false;
	switch (cmd % STEP_COUNT) {
	case STEP_SUBMIT:
	case STEP_SOCKET:
		if (!take(in, b, 1) || !take(in, &len, 2))
			return false;
		if (len > in->left)
			len = (uint16_t)in->left;
		take(in, buf, len);
		if (cmd % STEP_COUNT == STEP_SUBMIT)
			submit(c, ops[b[0] % ARRAY_SIZE(ops)], buf, len);
		else
			fz_request(s, ops[b[0] % ARRAY_SIZE(ops)], ++c->user_data, buf, len);
		break;
	case STEP_RAW_SQE:
		if (!take(in, b, 1) || !take(in, buf, sizeof(struct kvmm_ring_sqe)))
			return false;
		memcpy(&c->sqes[b[0] & (c->h.ring_entries - 1)], buf, sizeof(struct kvmm_ring_sqe));
		break;
	case STEP_SQ_TAIL:
		if (!take(in, &v, 4))
			return false;
		c->sq_tail = v;
		smp_store_release(&c->sq->tail, v);
		break;
	case STEP_POLL:
		if (!take(in, b, 1))
			return false;
		ret = kvmm_dp_poll(s, b[0] + 1u);
		kvmm_swapd_preempt_run(s->srv);
		if (ret < 0)
			return false; /* server.c closes the client */
		break;
	case STEP_REAP: {
		uint32_t t = smp_load_acquire(&c->cq->tail);

		/* KVMM_FUZZ_DEBUG=1: what the ops did, to check that a seed does what it says */
		for (uint32_t h = READ_ONCE(c->cq->head); fz_debug && h != t; h++) {
			struct kvmm_ring_cqe *e = (void *)(c->map + c->h.cqes_off);

			e += h & (c->h.ring_entries - 1);
			fprintf(stderr, "cqe %llu: %s %d\n", (unsigned long long)e->user_data,
				kvmm_op_name(e->op), e->res);
		}
		smp_store_release(&c->cq->head, t);
		break;
	}
	case STEP_CQ_HEAD:
		if (!take(in, &v, 4))
			return false;
		smp_store_release(&c->cq->head, v);
		break;
	case STEP_POP:
		if (!take(in, b, 1))
			return false;
		pop(c, b[0]);
		break;
	case STEP_RETURN:
		if (!take(in, b, 1))
			return false;
		if (c->nr_popped) {
			uint32_t k = b[0] % c->nr_popped;

			give_back(c, c->popped[k]);
			c->popped[k] = c->popped[--c->nr_popped];
		}
		break;
	case STEP_RETURN_RAW:
		if (!take(in, &v, 4))
			return false;
		give_back(c, v);
		break;
	case STEP_INDEX:
		if (!take(in, b, 1) || !take(in, &v, 4))
			return false;
		if (b[0] & 1)
			smp_store_release(&c->mag->head, v);
		else
			smp_store_release(&c->ret->tail, c->ret_tail = v);
		break;
	case STEP_APPEND_FRAMES: {
		struct kvmm_seq_append_frames_req *r = (void *)buf;
		uint32_t *ids = (uint32_t *)(r + 1);

		if (!take(in, b, 3))
			return false;
		r->seq = b[0];
		r->nr_tokens = b[1];
		r->nr_frames = min_t(uint32_t, b[2], c->nr_popped);
		for (uint32_t i = 0; i < r->nr_tokens; i++)
			ids[i] = i * 7 + b[0];
		memcpy(ids + r->nr_tokens, c->popped, r->nr_frames * sizeof(uint32_t));
		submit(c, KVMM_OP_SEQ_APPEND_FRAMES, buf,
		       (uint32_t)(sizeof(*r) + (r->nr_tokens + r->nr_frames) * sizeof(uint32_t)));
		break;
	}
	case STEP_WRITE: {
		uint8_t n;

		if (!take(in, &v, 4) || !take(in, &n, 1))
			return false;
		if (n > in->left)
			n = (uint8_t)in->left;
		v %= (uint32_t)c->h.size;
		if (n > c->h.size - v)
			n = (uint8_t)(c->h.size - v);
		take(in, c->map + v, n);
		break;
	}
	}
	fz_drain(peer);
	return !s->dead && s->state == KVMM_SESSION_ATTACHED;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct client c;
	struct input in = {data + 1, size - 1};
	struct kvmm_session *s;
	int peer, fd;

	if (size < 1 || size > (1u << 16))
		return -1;
	memset(&c, 0, sizeof(c));
	fz_debug = getenv("KVMM_FUZZ_DEBUG") != NULL;
	s = fz_session_new(&peer);
	fz_attach(s, peer, data[0] & 4, (data[0] >> 3) & 3, true, 8u << (data[0] & 3), &fd);
	if (!s->dp || !client_map(&c, fd)) {
		fprintf(stderr, "fuzz: no data plane\n");
		abort();
	}
	while (step(s, peer, &c, &in))
		;
	/* what the client left in its rings, as the loop would see it before the hang-up */
	if (!s->dead && s->dp && kvmm_dp_poll(s, 256) >= 0)
		kvmm_swapd_preempt_run(s->srv);
	munmap(c.map, c.h.size);
	fz_session_close(s, peer);
	fz_check_pools();
	return 0;
}
