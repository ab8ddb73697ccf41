// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/opdef.c - the daemon's half of the operation table: for every opcode of
 * uapi/kvmm.h's KVMM_OPS (name, payload rule, admin, ring, reply head), its handler, the
 * checker of a variable payload, and how it changes the client's page-table mirror.  Indexed
 * by the uapi row index, so the two halves cannot drift apart unnoticed: test_opdef checks
 * that every row has what its uapi row says it needs.  proto.c (validation), dispatch.c (the
 * socket and the ring) and admin.c read these rows; nothing else switches over opcodes.
 * Adding an operation: Documentation/dev-tools/adding-an-op.md.
 */
#include <string.h>

#include "kvmm/ipc/ipc.h"

/*
 * ATTACH: the device a tensor-parallel client maps follows the request when it names one,
 * then the model identity when it gives one (its header, then exactly len bytes).
 */
static int check_attach(const void *p, size_t plen)
{
	struct kvmm_attach_req r;
	struct kvmm_attach_model m;
	size_t want = sizeof(r);

	memcpy(&r, p, sizeof(r));
	if (r.flags & KVMM_ATTACH_F_DEVICE)
		want += sizeof(struct kvmm_attach_device);
	if (r.flags & KVMM_ATTACH_F_MODEL) {
		if (plen < want + sizeof(m))
			return -EBADMSG;
		memcpy(&m, (const uint8_t *)p + want, sizeof(m));
		if (m.len > KVMM_MODEL_ID_MAX)
			return -EBADMSG;
		want += sizeof(m) + m.len;
	}
	return plen == want ? 0 : -EBADMSG;
}

/* SEQ_SALT: exactly len salt bytes. */
static int check_seq_salt(const void *p, size_t plen)
{
	struct kvmm_seq_salt_req r;

	memcpy(&r, p, sizeof(r));
	return r.len <= KVMM_SALT_MAX && plen == sizeof(r) + r.len ? 0 : -EBADMSG;
}

/* SEQ_APPEND_FRAMES: nr_tokens token ids, then nr_frames frames, 32 bits each. */
static int check_append_frames(const void *p, size_t plen)
{
	struct kvmm_seq_append_frames_req r;

	memcpy(&r, p, sizeof(r));
	/* 33 bits at most: no overflow, and too long for a record anyway when that big */
	return plen == sizeof(r) + ((uint64_t)r.nr_tokens + r.nr_frames) * sizeof(uint32_t)
		       ? 0
		       : -EBADMSG;
}

#define OP(op) [KVMM_OPI_##op]

static const struct kvmm_ipc_opdef opdefs[KVMM_OP_COUNT] = {
	/* session */
	OP(HELLO) = {.handle = kvmm_session_op_hello},
	OP(BYE) = {.handle = kvmm_session_op_bye},
	OP(ATTACH) = {.handle = kvmm_session_op_attach, .check = check_attach},
	OP(DETACH) = {.handle = kvmm_session_op_detach},
	OP(PING) = {.handle = kvmm_session_op_ping, .mem = kvmm_session_op_nop},
	/* sequences and memory */
	OP(SEQ_CREATE) = {.mem = kvmm_session_op_seq_create, .mirror = KVMM_MIRROR_NEW},
	OP(SEQ_APPEND) = {.mem = kvmm_session_op_seq_append, .mirror = KVMM_MIRROR_APPEND},
	OP(SEQ_FORK) = {.mem = kvmm_session_op_seq_fork, .mirror = KVMM_MIRROR_NEW},
	OP(SEQ_TRUNCATE) = {.mem = kvmm_session_op_seq_truncate, .mirror = KVMM_MIRROR_SEQ},
	OP(SEQ_FREE) = {.mem = kvmm_session_op_seq_free},
	OP(PREFIX_LOOKUP) = {.mem = kvmm_session_op_prefix_lookup, .mirror = KVMM_MIRROR_SEQ},
	OP(SEAL) = {.mem = kvmm_session_op_seal, .mirror = KVMM_MIRROR_SEQ},
	OP(PIN) = {.mem = kvmm_session_op_pin},
	OP(UNPIN) = {.mem = kvmm_session_op_pin},
	/* the magazine lives in the data plane: -EOPNOTSUPP without one */
	OP(MAG_REFILL) = {.mem = kvmm_dp_mag_op},
	OP(MAG_DRAIN) = {.mem = kvmm_dp_mag_op},
	OP(SEQ_BLOCKS) = {.mem = kvmm_session_op_seq_blocks},
	OP(PREFETCH) = {.mem = kvmm_session_op_prefetch},
	OP(SEQ_APPEND_FRAMES) = {.mem = kvmm_session_op_seq_append,
				 .check = check_append_frames,
				 .mirror = KVMM_MIRROR_APPEND},
	/* compound: a request's start and end in one op each */
	OP(SEQ_PROMPT) = {.mem = kvmm_session_op_seq_prompt, .mirror = KVMM_MIRROR_NEW},
	OP(SEQ_SEAL_FREE) = {.mem = kvmm_session_op_seq_seal_free},
	OP(SEQ_SALT) = {.mem = kvmm_session_op_seq_salt, .check = check_seq_salt},
	OP(SEQ_PIN_RANGE) = {.mem = kvmm_session_op_pin_range},
	OP(SEQ_UNPIN_RANGE) = {.mem = kvmm_session_op_pin_range},
	OP(FAR_MAP) = {.handle = kvmm_session_op_far_map},
	OP(SEQ_PIN_FAR) = {.mem = kvmm_session_op_pin_far},
	/* admin: read verbs */
	OP(STATUS) = {.report = kvmm_admin_status},
	OP(MEMINFO) = {.report = kvmm_admin_meminfo},
	OP(VMSTAT) = {.report = kvmm_admin_vmstat},
	OP(BUDDYINFO) = {.report = kvmm_admin_buddyinfo},
	OP(CLIENTS) = {.report = kvmm_admin_clients},
	OP(NAMESPACES) = {.report = kvmm_admin_namespaces},
	OP(SEQS) = {.report = kvmm_admin_seqs},
	OP(PAGETABLE) = {.report = kvmm_admin_pagetable},
	OP(LRU) = {.report = kvmm_admin_lru},
	OP(SWAP) = {.report = kvmm_admin_swap},
	OP(TRACE) = {.report = kvmm_admin_trace},
	/* admin: write verbs */
	OP(LIMIT) = {.handle = kvmm_admin_limit},
	OP(DROP_CACHES) = {.handle = kvmm_admin_drop_caches},
	OP(RECLAIM) = {.handle = kvmm_admin_reclaim},
	OP(SWAPON) = {.handle = kvmm_admin_swapon},
	OP(SWAPOFF) = {.handle = kvmm_admin_swapoff},
	OP(FAULT_INJECT) = {.handle = kvmm_admin_fault_inject},
	OP(REMOTE) = {.report = kvmm_admin_remote},
	OP(NS_CREATE) = {.handle = kvmm_admin_ns},
	OP(NS_SET) = {.handle = kvmm_admin_ns},
	OP(NS_DELETE) = {.handle = kvmm_admin_ns},
	/* events: sent, never handled */
	OP(PREEMPT) = {0},
	OP(SHUTDOWN) = {0},
};

const struct kvmm_ipc_opdef *kvmm_ipc_opdef(unsigned int op)
{
	int i = kvmm_op_index(op);

	return i < 0 ? NULL : &opdefs[i];
}
