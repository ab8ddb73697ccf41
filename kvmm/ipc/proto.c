// SPDX-License-Identifier: MIT
/*
 * kvmm/ipc/proto.c - the daemon's checks of a received record, before any field of it is
 * trusted: the header (kvmm_msg_hdr_check() of uapi/kvmm.h plus the rules for requests:
 * no MORE, no FDS, no reply or event opcode), then the payload's exact size by its opcode's
 * rule in the operation table (uapi/kvmm.h KVMM_OPS: empty, any, fixed, at least, a head and
 * the trailing array its count field sizes, or a head and what opdef.c's checker accepts).
 * Everything here is a pure function of the bytes, so the unit tests feed it malformed
 * records directly; the handlers then only check values (flags, names, ranges).
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

/* The element count of an ARRAY payload: the row says where it is and how wide. */
static uint64_t array_count(const struct kvmm_op_info *info, const void *payload)
{
	const uint8_t *at = (const uint8_t *)payload + info->count_off;
	uint32_t n32;
	uint64_t n64;

	if (info->count_size == sizeof(n64)) {
		memcpy(&n64, at, sizeof(n64));
		return n64;
	}
	memcpy(&n32, at, sizeof(n32));
	return n32;
}

int kvmm_ipc_check_payload(unsigned int op, const void *payload, size_t plen)
{
	const struct kvmm_op_info *info;
	const struct kvmm_ipc_opdef *d;

	if (kvmm_op_is_reply(op) || kvmm_op_is_event(op))
		return kvmm_op_known(op) ? -EBADMSG : -EOPNOTSUPP;
	if (plen > KVMM_MSG_PAYLOAD_MAX)
		return -EBADMSG;
	info = kvmm_op_info(op);
	if (!info)
		return -EOPNOTSUPP;

	switch ((enum kvmm_payload_rule)info->rule) {
	case KVMM_PAYLOAD_NONE:
		return plen == 0 ? 0 : -EBADMSG;
	case KVMM_PAYLOAD_ANY:
		return 0;
	case KVMM_PAYLOAD_FIXED:
		return plen == info->size ? 0 : -EBADMSG;
	case KVMM_PAYLOAD_MIN:
		/* a newer client's HELLO may be longer: its frozen head is what we read */
		return plen >= info->size ? 0 : -EBADMSG;
	case KVMM_PAYLOAD_ARRAY:
		if (plen < info->size)
			return -EBADMSG;
		return exact_array(plen, info->size, array_count(info, payload), info->elem);
	case KVMM_PAYLOAD_VAR:
		if (plen < info->size)
			return -EBADMSG;
		d = kvmm_ipc_opdef(op);
		return d && d->check ? d->check(payload, plen) : -EBADMSG;
	}
	return -EOPNOTSUPP;
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
