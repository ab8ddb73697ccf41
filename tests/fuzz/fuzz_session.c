// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_session.c - libFuzzer harness: what a client can send kvmmd over its
 * socket.  One real server (tests/fuzz/fuzz_server.h) is made once; each input is a new
 * session on a socketpair, fed records decoded from the input exactly as server.c's
 * session_read() would feed them (kvmm_ipc_check_request(), then kvmm_ipc_dispatch()),
 * with the loop's OOM preemption and the data plane's poll run after each record.
 *
 * Input: byte 0 chooses a preamble (bit 0: a valid HELLO + ATTACH first, so the memory ops
 * are reached; bit 1: with rings; bit 2: namespace beta; bits 3-4: the format; bits 5-7: ring
 * entries 8 << n).  Then records, each
 *   u8 op    < 0xf0: an index into the opcode table below, else a raw u16 opcode follows
 *   u8 ctl   bit 0: a raw 32-byte header follows (then the record's len field is the input's
 *            unless bit 1 is set); else a valid header with a counter as tag
 *   u16 plen payload bytes that follow (fewer if the input ends)
 * After the last record the session is torn down as a hang-up would, and every frame and
 * swap slot must be back in the pools (fz_check_pools() aborts otherwise).
 *
 * fuzz-libs: kvmm/ipc/built-in.a kvmm/built-in.a kvmm/backend/built-in.a lib/built-in.a
 * fuzz-ldlibs: -lxxhash -luring -lpthread -lhiredis -lssl -lcrypto
 */
#include "tests/fuzz/fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint16_t ops[] = {
	KVMM_OP_HELLO,
	KVMM_OP_BYE,
	KVMM_OP_ATTACH,
	KVMM_OP_DETACH,
	KVMM_OP_PING,
	KVMM_OP_SEQ_CREATE,
	KVMM_OP_SEQ_APPEND,
	KVMM_OP_SEQ_FORK,
	KVMM_OP_SEQ_TRUNCATE,
	KVMM_OP_SEQ_FREE,
	KVMM_OP_PREFIX_LOOKUP,
	KVMM_OP_SEAL,
	KVMM_OP_PIN,
	KVMM_OP_UNPIN,
	KVMM_OP_MAG_REFILL,
	KVMM_OP_MAG_DRAIN,
	KVMM_OP_SEQ_BLOCKS,
	KVMM_OP_PREFETCH,
	KVMM_OP_SEQ_APPEND_FRAMES,
	KVMM_OP_STATUS,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t rec[KVMM_MSG_MAX];
	struct kvmm_msg_hdr *h = (struct kvmm_msg_hdr *)rec;
	struct kvmm_session *s;
	size_t pos = 1;
	uint64_t tag = 100;
	int peer;

	if (size < 1 || size > (1u << 16))
		return -1;
	s = fz_session_new(&peer);
	if (data[0] & 1)
		fz_attach(s, peer, data[0] & 4, (data[0] >> 3) & 3, data[0] & 2,
			  8u << (data[0] >> 5), NULL);
	while (pos + 4 <= size && !s->dead) {
		unsigned int op = data[pos], ctl = data[pos + 1];
		size_t plen;

		plen = (size_t)data[pos + 2] | (size_t)data[pos + 3] << 8;
		pos += 4;
		if (op >= 0xf0) {
			if (pos + 2 > size)
				break;
			op = (unsigned int)data[pos] | (unsigned int)data[pos + 1] << 8;
			pos += 2;
		} else {
			op = ops[op % ARRAY_SIZE(ops)];
		}
		kvmm_msg_hdr_init(h, op, 0, tag++);
		if (ctl & 1) {
			if (pos + sizeof(*h) > size)
				break;
			memcpy(h, data + pos, sizeof(*h));
			pos += sizeof(*h);
		}
		if (plen > size - pos)
			plen = size - pos;
		memcpy(h + 1, data + pos, plen);
		pos += plen;
		if (!(ctl & 1) || (ctl & 2))
			h->len = (uint32_t)(sizeof(*h) + plen);
		fz_deliver(s, rec, sizeof(*h) + plen);
		fz_drain(peer);
		/* what the loop does after every batch of events */
		kvmm_swapd_preempt_run(s->srv);
		if (s->dp && kvmm_dp_poll(s, 64) < 0)
			break;
		fz_drain(peer);
	}
	fz_session_close(s, peer);
	fz_check_pools();
	return 0;
}
