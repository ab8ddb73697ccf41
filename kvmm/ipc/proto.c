// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/proto.c - the daemon's checks of a received record, before any field of it is
 * trusted: the header (kvmm_msg_hdr_check() of uapi/kvmm.h plus the rules for requests:
 * no MORE, no FDS, no reply or event opcode), then the payload's exact size for its opcode,
 * counting the trailing arrays (token ids of SEQ_APPEND and PREFIX_LOOKUP, sequence ids of
 * PIN and UNPIN).  Everything here is a pure function of the bytes, so the unit tests feed it
 * malformed records directly; session.c then only checks values (flags, names, ranges).
 */
#include <errno.h>
#include <string.h>

#include "kvmm/ipc/ipc.h"

/* Payload with @fixed bytes then exactly @count elements of @elem bytes. */
static int exact_array(size_t plen, size_t fixed, uint64_t count, size_t elem)
{
	if (plen < fixed)
		return -EBADMSG;
	if (count > (KVMM_MSG_PAYLOAD_MAX - fixed) / elem)
		return -EBADMSG;
	return plen == fixed + count * elem ? 0 : -EBADMSG;
}

static int exact(size_t plen, size_t size)
{
	return plen == size ? 0 : -EBADMSG;
}

int kvmm_ipc_check_payload(unsigned int op, const void *payload, size_t plen)
{
	uint64_t n64;
	uint32_t n32;

	if (kvmm_op_is_reply(op) || kvmm_op_is_event(op))
		return kvmm_op_known(op) ? -EBADMSG : -EOPNOTSUPP;
	if (plen > KVMM_MSG_PAYLOAD_MAX)
		return -EBADMSG;

	switch (op) {
	case KVMM_OP_HELLO:
		/* a newer client's HELLO may be longer: its frozen head is what we read */
		return plen >= sizeof(struct kvmm_hello_req) ? 0 : -EBADMSG;
	case KVMM_OP_BYE:
	case KVMM_OP_DETACH:
		return exact(plen, 0);
	case KVMM_OP_PING:
		return 0;
	case KVMM_OP_ATTACH: {
		struct kvmm_attach_req r;

		if (plen < sizeof(r))
			return -EBADMSG;
		memcpy(&r, payload, sizeof(r));
		/* the device a tensor-parallel client maps follows the request */
		return exact(plen, sizeof(r) + ((r.flags & KVMM_ATTACH_F_DEVICE)
							? sizeof(struct kvmm_attach_device)
							: 0));
	}
	case KVMM_OP_SEQ_CREATE:
		return exact(plen, sizeof(struct kvmm_seq_create_req));
	case KVMM_OP_SEQ_APPEND:
		if (plen < sizeof(struct kvmm_seq_append_req))
			return -EBADMSG;
		memcpy(&n64,
		       (const uint8_t *)payload + offsetof(struct kvmm_seq_append_req, nr_tokens),
		       sizeof(n64));
		return exact_array(plen, sizeof(struct kvmm_seq_append_req), n64, sizeof(uint32_t));
	case KVMM_OP_SEQ_APPEND_FRAMES: {
		struct kvmm_seq_append_frames_req r;

		if (plen < sizeof(r))
			return -EBADMSG;
		memcpy(&r, payload, sizeof(r));
		return exact_array(plen, sizeof(r), (uint64_t)r.nr_tokens + r.nr_frames,
				   sizeof(uint32_t));
	}
	case KVMM_OP_SEQ_FORK:
		return exact(plen, sizeof(struct kvmm_seq_fork_req));
	case KVMM_OP_SEQ_TRUNCATE:
		return exact(plen, sizeof(struct kvmm_seq_truncate_req));
	case KVMM_OP_SEQ_FREE:
		return exact(plen, sizeof(struct kvmm_seq_free_req));
	case KVMM_OP_PREFIX_LOOKUP:
		if (plen < sizeof(struct kvmm_prefix_lookup_req))
			return -EBADMSG;
		memcpy(&n32,
		       (const uint8_t *)payload +
			       offsetof(struct kvmm_prefix_lookup_req, nr_tokens),
		       sizeof(n32));
		return exact_array(plen, sizeof(struct kvmm_prefix_lookup_req), n32,
				   sizeof(uint32_t));
	case KVMM_OP_SEAL:
		return exact(plen, sizeof(struct kvmm_seal_req));
	case KVMM_OP_PIN:
	case KVMM_OP_UNPIN:
	case KVMM_OP_PREFETCH:
		if (plen < sizeof(struct kvmm_pin_req))
			return -EBADMSG;
		memcpy(&n32, (const uint8_t *)payload + offsetof(struct kvmm_pin_req, nr_seqs),
		       sizeof(n32));
		return exact_array(plen, sizeof(struct kvmm_pin_req), n32, sizeof(uint64_t));
	case KVMM_OP_MAG_REFILL:
	case KVMM_OP_MAG_DRAIN:
		return exact(plen, sizeof(struct kvmm_mag_req));
	case KVMM_OP_SEQ_BLOCKS:
		return exact(plen, sizeof(struct kvmm_seq_blocks_req));
	case KVMM_OP_STATUS:
	case KVMM_OP_MEMINFO:
	case KVMM_OP_VMSTAT:
	case KVMM_OP_BUDDYINFO:
	case KVMM_OP_CLIENTS:
	case KVMM_OP_NAMESPACES:
	case KVMM_OP_SEQS:
	case KVMM_OP_PAGETABLE:
	case KVMM_OP_LRU:
	case KVMM_OP_SWAP:
	case KVMM_OP_TRACE:
		return exact(plen, sizeof(struct kvmm_admin_req));
	case KVMM_OP_LIMIT:
		return exact(plen, sizeof(struct kvmm_limit_req));
	case KVMM_OP_DROP_CACHES:
		return exact(plen, sizeof(struct kvmm_drop_caches_req));
	case KVMM_OP_RECLAIM:
		return exact(plen, sizeof(struct kvmm_reclaim_req));
	case KVMM_OP_SWAPON:
		return exact(plen, sizeof(struct kvmm_swapon_req));
	case KVMM_OP_SWAPOFF:
		return exact(plen, sizeof(struct kvmm_swapoff_req));
	case KVMM_OP_FAULT_INJECT:
		return exact(plen, sizeof(struct kvmm_fault_inject_req));
	default:
		return -EOPNOTSUPP;
	}
}

int kvmm_ipc_check_request(const void *rec, size_t len)
{
	struct kvmm_msg_hdr hdr;
	int ret;

	if (len < sizeof(hdr))
		return -EBADMSG;
	memcpy(&hdr, rec, sizeof(hdr));
	ret = kvmm_msg_hdr_check(&hdr, len);
	if (ret)
		return ret;
	/* no request is multi-record, and the daemon takes no descriptors */
	if (hdr.flags)
		return -EBADMSG;
	if (hdr.op == KVMM_OP_NONE)
		return -EOPNOTSUPP;
	return kvmm_ipc_check_payload(hdr.op, (const uint8_t *)rec + sizeof(hdr),
				      len - sizeof(hdr));
}

void kvmm_ipc_error_hdr(struct kvmm_msg_hdr *rep, const void *rec, size_t len, int status)
{
	struct kvmm_msg_hdr req;

	memset(&req, 0, sizeof(req));
	memcpy(&req, rec, len < sizeof(req) ? len : sizeof(req));
	if (len < offsetof(struct kvmm_msg_hdr, flags))
		req.op = 0;
	if (len < offsetof(struct kvmm_msg_hdr, status))
		req.seq = 0;
	req.abi = KVMM_ABI_VERSION;
	kvmm_msg_hdr_init_reply(rep, &req, sizeof(*rep), status);
}
