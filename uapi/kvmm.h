/* SPDX-License-Identifier: MIT */
/*
 * uapi/kvmm.h - the kvmm ABI: everything kvmmd, libkvmm, kernels and kvmmctl must agree on
 * byte for byte. It holds the control-message header and opcode space of the SOCK_SEQPACKET
 * protocol, one payload struct per command, the feature bits negotiated by HELLO, the error
 * codes, the KV page format, and the PTE and block-table encodings that clients read from
 * shared memory. It is self-contained (only <stdint.h>, <stddef.h>, <errno.h>), C11 and C++
 * friendly, uses fixed-width types with explicit padding, and pins every struct size and
 * field offset with a static assertion, so an accidental reorder fails to compile rather than
 * corrupting a peer. Native byte order everywhere: both ends run on the same host.
 *
 * Compatibility rules (see Documentation/userspace-api/abi.md):
 *  - A released field is never moved, resized, retyped or reused. Structs grow only at the
 *    end; a new field appears on the wire only when both peers agreed on the version that
 *    added it. Reserved fields and unused flag bits must be zero when sent and are rejected
 *    (-EINVAL / -EBADMSG) when nonzero, so later versions can give them meaning.
 *  - Opcodes, feature bits, PTE types and error codes are append-only.
 *  - struct kvmm_msg_hdr and the leading fields of the HELLO payloads are frozen forever:
 *    they are how two peers of different versions find a version they both speak.
 *
 * Version history (KVMM_ABI_VERSION):
 *   0  First ABI. Header v0 (32 bytes), session ops (HELLO, BYE, ATTACH, DETACH, PING),
 *      sequence and memory ops (SEQ_*, PREFIX_LOOKUP, SEAL, PIN, UNPIN, MAG_*), admin verbs
 *      (STATUS .. SWAPOFF), events (PREEMPT, SHUTDOWN), features HOST_BACKEND, CUDA_BACKEND,
 *      PREFIX_CACHE, SWAP, RINGS, FD_PASSING, PTE layout v0, kvmm errors EPREEMPTED, ELOST.
 *      Before release: SEQ_BLOCKS (read a sequence's block table over the socket),
 *      attach_rep.nr_frames, SEQ_APPEND carries its token ids, SEAL carries none; the data
 *      plane (KVMM_ATTACH_F_RINGS, struct kvmm_shm_hdr and the ring, mirror and magazine
 *      areas after it, shm fd then eventfd first in ATTACH's descriptors); PREFETCH;
 *      SEQ_APPEND_FRAMES (append into frames popped from the magazine) and the magazine
 *      head moved by compare-and-swap on both sides, daemon top-ups below the low mark;
 *      tensor-parallel groups: KVMM_ATTACH_F_DEVICE + struct kvmm_attach_device,
 *      attach_rep.device_index and nr_devices.  Compound ops: SEQ_PROMPT (create, look the
 *      prompt up, append what missed), SEQ_SEAL_FREE (seal, then free), KVMM_RH_PROMPT;
 *      REMOTE (read verb: the remote tier); key domains (KVMM_FEAT_KEY_DOMAIN): a model
 *      identity at ATTACH (KVMM_ATTACH_F_MODEL + struct kvmm_attach_model) and a
 *      sequence's salt (SEQ_SALT), both hashed into every content key.  Live namespaces:
 *      NS_CREATE, NS_SET, NS_DELETE (struct kvmm_ns_req).  The rings' cpu hint (struct
 *      kvmm_shm_ring.cpu, taken from padding; 0 = unknown, what older peers leave there),
 *      and the SQ's load hint (struct kvmm_shm_ring.load, after cpu, the same way).
 *      Range pins (KVMM_FEAT_PIN_RANGE): SEQ_PIN_RANGE, SEQ_UNPIN_RANGE (struct
 *      kvmm_pin_range_req): part of a sequence resident and pinned, the rest reclaimable.
 */
#ifndef KVMM_UAPI_KVMM_H
#define KVMM_UAPI_KVMM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
#define KVMM_STATIC_ASSERT(expr, msg) static_assert(expr, msg)
#else
#define KVMM_STATIC_ASSERT(expr, msg) _Static_assert(expr, msg)
#endif

/* Pin the layout: a changed size or offset of a released struct is an ABI break. */
#define KVMM_ABI_ASSERT_SIZE(type, size) \
	KVMM_STATIC_ASSERT(sizeof(type) == (size), "ABI: sizeof(" #type ") != " #size)
#define KVMM_ABI_ASSERT_OFFSET(type, field, off)           \
	KVMM_STATIC_ASSERT(offsetof(type, field) == (off), \
			   "ABI: offsetof(" #type ", " #field ") != " #off)

/* ---- Versions, magic, features ------------------------------------------------------- */

#define KVMM_ABI_VERSION 0    /* the version this header describes */
#define KVMM_ABI_MIN_COMPAT 0 /* the oldest version a peer built from it still speaks */

/* First word of every message: "KVMM" in memory on little-endian hosts. */
#define KVMM_MAGIC 0x4d4d564bU

/*
 * Feature bits, exchanged in HELLO: the client asks for some, the daemon grants the subset it
 * supports. Append-only; a bit's meaning never changes.
 */
#define KVMM_FEAT_HOST_BACKEND (UINT64_C(1) << 0) /* pool in host memory (memfd chunks) */
#define KVMM_FEAT_CUDA_BACKEND (UINT64_C(1) << 1) /* pool in GPU memory (CUDA VMM, POSIX fd) */
#define KVMM_FEAT_PREFIX_CACHE (UINT64_C(1) << 2) /* PREFIX_LOOKUP and SEAL share sealed pages */
#define KVMM_FEAT_SWAP (UINT64_C(1) << 3)	  /* pages may be swapped to host / NVMe tiers */
#define KVMM_FEAT_RINGS (UINT64_C(1) << 4)	  /* shared-memory SQ/CQ rings beside the socket */
#define KVMM_FEAT_FD_PASSING (UINT64_C(1) << 5)	  /* pool chunks and shm passed as SCM_RIGHTS */
/*
 * A remote tier may answer PREFIX_LOOKUP and SEQ_PROMPT (kvmmd's [remote]): one that misses
 * locally may wait for the cluster.  On the socket the session's next requests wait in it; on
 * the rings the SQE's CQE comes later and the SQEs after it wait in the SQ (CQE i still answers
 * SQE i).  Either way only that client waits, never the daemon.
 */
#define KVMM_FEAT_REMOTE (UINT64_C(1) << 6)
/* ATTACH's model identity (KVMM_ATTACH_F_MODEL) and SEQ_SALT: keys per model and salt */
#define KVMM_FEAT_KEY_DOMAIN (UINT64_C(1) << 7)
/* SEQ_PIN_RANGE and SEQ_UNPIN_RANGE: pin part of a sequence (chunked attention) */
#define KVMM_FEAT_PIN_RANGE (UINT64_C(1) << 8)
/* FAR_MAP and SEQ_PIN_FAR: host-tier pages read where they lie (a pool in host memory) */
#define KVMM_FEAT_FAR (UINT64_C(1) << 9)
/*
 * The data plane's region has an out area (struct kvmm_shm_hdr out_off, out_size): an SQE
 * with KVMM_SQE_F_OUT has its whole reply written there, so ops whose reply does not fit a
 * CQE (KVMM_OPF_RING_OUT: SEQ_PIN_FAR) ride the rings too.  Only with KVMM_FEAT_RINGS.
 */
#define KVMM_FEAT_RING_OUT (UINT64_C(1) << 10)
#define KVMM_FEAT_ALL_V0                                                              \
	(KVMM_FEAT_HOST_BACKEND | KVMM_FEAT_CUDA_BACKEND | KVMM_FEAT_PREFIX_CACHE |   \
	 KVMM_FEAT_SWAP | KVMM_FEAT_RINGS | KVMM_FEAT_FD_PASSING | KVMM_FEAT_REMOTE | \
	 KVMM_FEAT_KEY_DOMAIN | KVMM_FEAT_PIN_RANGE | KVMM_FEAT_FAR | KVMM_FEAT_RING_OUT)

/*
 * Version negotiation, the one rule both sides of HELLO apply: speak the newer of the two
 * minimums up to the older of the two maximums. Returns the agreed version (>= 0) or -EPROTO
 * when the ranges do not overlap (or a range is upside down).
 */
static inline int kvmm_abi_negotiate(uint16_t a_version, uint16_t a_min, uint16_t b_version,
				     uint16_t b_min)
{
	unsigned int hi = a_version < b_version ? a_version : b_version;
	unsigned int lo = a_min > b_min ? a_min : b_min;

	/* an upside-down range (min > version) lands here too: then lo > hi */
	if (lo > hi)
		return -EPROTO;
	return (int)hi;
}

/* ---- Errors -------------------------------------------------------------------------- */

/*
 * Replies carry a status: 0 or a negative errno. Peers are on one host, so errno values are
 * the host's own. What each means on the kvmm wire:
 *   EPROTO      no common ABI version, or a message in a version not agreed
 *   EBADMSG     malformed message: bad magic, length, flags, reserved header bits
 *   EOPNOTSUPP  unknown opcode, or a feature that was not granted
 *   EINVAL      bad argument: payload fields, nonzero reserved field, bad format or name
 *   E2BIG       request larger than the daemon accepts (too many tokens / fds / seqs)
 *   ENOMEM      no frames even after reclaim (the caller may wait for PREEMPT to settle)
 *   ENOSPC      a limit or a swap tier is full (namespace max, swap slots, magazine)
 *   EAGAIN      transient: try again (reclaim in progress, ring full)
 *   EACCES      admin verb from a client that is not root or in the admin group, or ATTACH
 *               to a namespace whose allowed uids/gids do not include the client
 *   EPERM       operation on an object of another client or namespace
 *   ENOENT      no such sequence, namespace, client or swap tier
 *   EEXIST      already there (second ATTACH, SWAPON of an active tier)
 *   EBUSY       object in use (free or truncate of pinned pages, SWAPOFF with pages in use)
 *   EIO         an I/O to a swap tier or a backend failed; the operation did not happen
 *   ENOTCONN    memory op before ATTACH (or after DETACH)
 *   ESHUTDOWN   the daemon is shutting down and takes no new work
 *
 * kvmm-specific codes live above the errno space: Linux errno values stay below 4096
 * (MAX_ERRNO), so a code in [KVMM_ERRNO_BASE, KVMM_ERRNO_MAX] can never be confused with a
 * system errno. They travel as negative numbers like the others. Never encode them in a
 * pointer (ERR_PTR-style): they are outside the range such encodings reserve.
 */
#define KVMM_ERRNO_BASE 4096
#define KVMM_EPREEMPTED (KVMM_ERRNO_BASE + 1) /* the sequence was preempted; its KV is gone */
#define KVMM_ELOST (KVMM_ERRNO_BASE + 2)      /* page content lost (swap I/O error, poisoned) */
#define KVMM_ERRNO_MAX (KVMM_ERRNO_BASE + 255)

/* Short name ("EPROTO", "EPREEMPTED") of a status value (0 or negative); "?" if unknown. */
static inline const char *kvmm_errname(int status)
{
	switch (status) {
	case 0:
		return "OK";
	case -EPROTO:
		return "EPROTO";
	case -EBADMSG:
		return "EBADMSG";
	case -EOPNOTSUPP:
		return "EOPNOTSUPP";
	case -EINVAL:
		return "EINVAL";
	case -E2BIG:
		return "E2BIG";
	case -ENOMEM:
		return "ENOMEM";
	case -ENOSPC:
		return "ENOSPC";
	case -EAGAIN:
		return "EAGAIN";
	case -EACCES:
		return "EACCES";
	case -EPERM:
		return "EPERM";
	case -ENOENT:
		return "ENOENT";
	case -EEXIST:
		return "EEXIST";
	case -EBUSY:
		return "EBUSY";
	case -EIO:
		return "EIO";
	case -ENOTCONN:
		return "ENOTCONN";
	case -ESHUTDOWN:
		return "ESHUTDOWN";
	case -KVMM_EPREEMPTED:
		return "EPREEMPTED";
	case -KVMM_ELOST:
		return "ELOST";
	default:
		return "?";
	}
}

/* ---- Message header ------------------------------------------------------------------ */

/*
 * Every control message (request, reply, event) is one SOCK_SEQPACKET record: this header
 * followed by the payload of its opcode. len counts the header, so a record of n bytes has
 * len == n. Requests carry a caller-chosen nonzero seq; the reply echoes it with
 * KVMM_OP_REPLY set in op and the result in status. Events (0x03xx) are unsolicited and carry
 * seq 0. A reply with status < 0 has no payload, except HELLO's -EPROTO reply (see
 * struct kvmm_hello_rep).
 */
struct kvmm_msg_hdr {
	uint32_t magic;	   /* KVMM_MAGIC */
	uint16_t abi;	   /* the sender's ABI version (HELLO) or the agreed one (after) */
	uint16_t op;	   /* enum kvmm_op, | KVMM_OP_REPLY in replies */
	uint32_t flags;	   /* KVMM_MSG_F_* */
	uint32_t len;	   /* total bytes including this header */
	uint64_t seq;	   /* request tag, echoed in the reply; 0 in events */
	int32_t status;	   /* replies: 0 or -errno; requests and events: 0 */
	uint32_t reserved; /* must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_msg_hdr, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, magic, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, abi, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, op, 6);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, flags, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, len, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, seq, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, status, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_msg_hdr, reserved, 28);

#define KVMM_MSG_HDR_SIZE 32
/*
 * Largest record either side sends or accepts, header included. Well under the default
 * socket buffer; token-carrying requests (PREFIX_LOOKUP, SEAL) split long prompts over
 * several messages and admin replies span several records with KVMM_MSG_F_MORE.
 */
#define KVMM_MSG_MAX 65536
#define KVMM_MSG_PAYLOAD_MAX (KVMM_MSG_MAX - KVMM_MSG_HDR_SIZE)
KVMM_STATIC_ASSERT(KVMM_MSG_HDR_SIZE == sizeof(struct kvmm_msg_hdr), "header size constant");
KVMM_STATIC_ASSERT(KVMM_MSG_HDR_SIZE % 8 == 0, "payloads start 8-byte aligned");

#define KVMM_MSG_F_MORE (1U << 0) /* one part of a multi-record reply; more follow */
#define KVMM_MSG_F_FDS (1U << 1)  /* file descriptors ride along as SCM_RIGHTS */
#define KVMM_MSG_F_ALL_V0 (KVMM_MSG_F_MORE | KVMM_MSG_F_FDS)

/* ---- Opcodes ------------------------------------------------------------------------- */

/*
 * The opcode space, 15 bits, split by the high byte:
 *   0x0000-0x00ff  session: handshake and attachment (0x0000 is never a valid opcode)
 *   0x0100-0x01ff  sequences and memory: the engine's data path when rings are not used
 *   0x0200-0x02ff  admin verbs: kvmmctl; need root or the admin group (-EACCES otherwise)
 *   0x0300-0x03ff  events: daemon to client, unsolicited, never answered
 *   0x0400-0x7fff  reserved
 * Bit 15 (KVMM_OP_REPLY) marks a reply to the request with the same opcode and seq.
 * Append-only: a value, once released, keeps its meaning.
 */
enum kvmm_op {
	KVMM_OP_NONE = 0x0000,

	/* session */
	KVMM_OP_HELLO = 0x0001,	 /* struct kvmm_hello_req -> struct kvmm_hello_rep */
	KVMM_OP_BYE = 0x0002,	 /* no payload: orderly goodbye, implies DETACH */
	KVMM_OP_ATTACH = 0x0003, /* struct kvmm_attach_req -> struct kvmm_attach_rep (+ fds) */
	KVMM_OP_DETACH = 0x0004, /* no payload: free sequences, drop pins, return magazine */
	KVMM_OP_PING = 0x0005,	 /* any payload, echoed back */

	/* sequences and memory */
	KVMM_OP_SEQ_CREATE = 0x0100,	/* struct kvmm_seq_create_req -> kvmm_seq_create_rep */
	KVMM_OP_SEQ_APPEND = 0x0101,	/* struct kvmm_seq_append_req -> kvmm_seq_append_rep */
	KVMM_OP_SEQ_FORK = 0x0102,	/* struct kvmm_seq_fork_req -> kvmm_seq_fork_rep */
	KVMM_OP_SEQ_TRUNCATE = 0x0103,	/* struct kvmm_seq_truncate_req -> no payload */
	KVMM_OP_SEQ_FREE = 0x0104,	/* struct kvmm_seq_free_req -> no payload */
	KVMM_OP_PREFIX_LOOKUP = 0x0105, /* kvmm_prefix_lookup_req + tokens -> _rep */
	KVMM_OP_SEAL = 0x0106,		/* struct kvmm_seal_req + tokens -> no payload */
	KVMM_OP_PIN = 0x0107,		/* struct kvmm_pin_req + seq ids -> struct kvmm_pin_rep */
	KVMM_OP_UNPIN = 0x0108,		/* struct kvmm_pin_req + seq ids -> struct kvmm_pin_rep */
	KVMM_OP_MAG_REFILL = 0x0109,	/* struct kvmm_mag_req -> struct kvmm_mag_rep */
	KVMM_OP_MAG_DRAIN = 0x010a,	/* struct kvmm_mag_req -> struct kvmm_mag_rep */
	KVMM_OP_SEQ_BLOCKS = 0x010b,	/* kvmm_seq_blocks_req -> _rep + int32_t blocks */
	KVMM_OP_PREFETCH = 0x010c,	/* struct kvmm_pin_req + seq ids -> struct kvmm_pin_rep */
	KVMM_OP_SEQ_APPEND_FRAMES = 0x010d, /* _append_frames_req + ids + frames -> _append_rep */
	KVMM_OP_SEQ_PROMPT = 0x010e,	    /* kvmm_seq_prompt_req + ids -> kvmm_seq_prompt_rep */
	KVMM_OP_SEQ_SEAL_FREE = 0x010f,	    /* struct kvmm_seal_req -> none */
	KVMM_OP_SEQ_SALT = 0x0110,	    /* struct kvmm_seq_salt_req + salt bytes -> none */
	KVMM_OP_SEQ_PIN_RANGE = 0x0111,	    /* struct kvmm_pin_range_req -> kvmm_pin_rep */
	KVMM_OP_SEQ_UNPIN_RANGE = 0x0112,   /* struct kvmm_pin_range_req -> kvmm_pin_rep */
	KVMM_OP_FAR_MAP = 0x0113,	    /* no payload -> struct kvmm_far_map_rep + fds */
	KVMM_OP_SEQ_PIN_FAR = 0x0114,	    /* kvmm_pin_far_req -> _rep + int32_t entries */

	/* admin: read verbs take struct kvmm_admin_req and answer text or JSON */
	KVMM_OP_STATUS = 0x0200,
	KVMM_OP_MEMINFO = 0x0201,
	KVMM_OP_VMSTAT = 0x0202,
	KVMM_OP_BUDDYINFO = 0x0203,
	KVMM_OP_CLIENTS = 0x0204,
	KVMM_OP_NAMESPACES = 0x0205,
	KVMM_OP_SEQS = 0x0206,
	KVMM_OP_PAGETABLE = 0x0207, /* admin_req.id = sequence */
	KVMM_OP_LRU = 0x0208,
	KVMM_OP_SWAP = 0x0209,
	KVMM_OP_TRACE = 0x020a, /* admin_req.flags may carry KVMM_ADMIN_F_CLEAR */
	/* admin: write verbs */
	KVMM_OP_LIMIT = 0x020b,	       /* struct kvmm_limit_req -> no payload */
	KVMM_OP_DROP_CACHES = 0x020c,  /* struct kvmm_drop_caches_req -> kvmm_reclaim_rep */
	KVMM_OP_RECLAIM = 0x020d,      /* struct kvmm_reclaim_req -> struct kvmm_reclaim_rep */
	KVMM_OP_SWAPON = 0x020e,       /* struct kvmm_swapon_req -> no payload */
	KVMM_OP_SWAPOFF = 0x020f,      /* struct kvmm_swapoff_req -> no payload */
	KVMM_OP_FAULT_INJECT = 0x0210, /* struct kvmm_fault_inject_req -> no payload */
	KVMM_OP_REMOTE = 0x0211,       /* read verb: the remote tier's counters */
	KVMM_OP_NS_CREATE = 0x0212,    /* struct kvmm_ns_req -> no payload (live namespaces) */
	KVMM_OP_NS_SET = 0x0213,       /* struct kvmm_ns_req -> no payload */
	KVMM_OP_NS_DELETE = 0x0214,    /* struct kvmm_ns_req (ns, flags) -> no payload */

	/* events */
	KVMM_OP_PREEMPT = 0x0300,  /* struct kvmm_preempt_event */
	KVMM_OP_SHUTDOWN = 0x0301, /* struct kvmm_shutdown_event */
};

#define KVMM_OP_REPLY 0x8000U
#define KVMM_OP_MASK 0x7fffU
#define KVMM_OP_RANGE_MASK 0x7f00U
#define KVMM_OP_SESSION_BASE 0x0000U
#define KVMM_OP_MEM_BASE 0x0100U
#define KVMM_OP_ADMIN_BASE 0x0200U
#define KVMM_OP_EVENT_BASE 0x0300U
/* The last opcode of each range in this version (they move when a version appends ops). */
#define KVMM_OP_SESSION_LAST KVMM_OP_PING
#define KVMM_OP_MEM_LAST KVMM_OP_SEQ_PIN_FAR
#define KVMM_OP_ADMIN_LAST KVMM_OP_NS_DELETE
#define KVMM_OP_EVENT_LAST KVMM_OP_SHUTDOWN

static inline unsigned int kvmm_op_base(unsigned int op)
{
	return op & KVMM_OP_MASK;
}

static inline int kvmm_op_is_reply(unsigned int op)
{
	return (op & KVMM_OP_REPLY) != 0;
}

static inline int kvmm_op_is_admin(unsigned int op)
{
	return (op & KVMM_OP_RANGE_MASK) == KVMM_OP_ADMIN_BASE;
}

static inline int kvmm_op_is_event(unsigned int op)
{
	return (op & KVMM_OP_RANGE_MASK) == KVMM_OP_EVENT_BASE;
}

/* Fill a header for a request or event of len total bytes in this header's ABI version. */
static inline void kvmm_msg_hdr_init(struct kvmm_msg_hdr *hdr, unsigned int op, uint32_t len,
				     uint64_t seq)
{
	hdr->magic = KVMM_MAGIC;
	hdr->abi = KVMM_ABI_VERSION;
	hdr->op = (uint16_t)op;
	hdr->flags = 0;
	hdr->len = len;
	hdr->seq = seq;
	hdr->status = 0;
	hdr->reserved = 0;
}

/* Fill the header of the reply to req: same opcode with KVMM_OP_REPLY, same seq and abi. */
static inline void kvmm_msg_hdr_init_reply(struct kvmm_msg_hdr *rep, const struct kvmm_msg_hdr *req,
					   uint32_t len, int32_t status)
{
	rep->magic = KVMM_MAGIC;
	rep->abi = req->abi;
	rep->op = (uint16_t)(req->op | KVMM_OP_REPLY);
	rep->flags = 0;
	rep->len = len;
	rep->seq = req->seq;
	rep->status = status;
	rep->reserved = 0;
}

/*
 * Check a received record of len bytes before reading anything else from it. Returns 0,
 * -EBADMSG for a malformed record (short, bad magic, len field != record length, over
 * KVMM_MSG_MAX, unknown flags, nonzero reserved, a request or event with a status), or
 * -EPROTO for a version outside [KVMM_ABI_MIN_COMPAT, KVMM_ABI_VERSION]. HELLO (request or
 * reply) is exempt from the version check: its job is to find a common version. The opcode
 * itself is not judged here (unknown opcodes are answered -EOPNOTSUPP).
 */
static inline int kvmm_msg_hdr_check(const struct kvmm_msg_hdr *hdr, size_t len)
{
	if (len < sizeof(*hdr) || len > KVMM_MSG_MAX)
		return -EBADMSG;
	if (hdr->magic != KVMM_MAGIC || hdr->len != len)
		return -EBADMSG;
	if ((hdr->flags & ~(uint32_t)KVMM_MSG_F_ALL_V0) != 0 || hdr->reserved != 0)
		return -EBADMSG;
	if (!kvmm_op_is_reply(hdr->op) && hdr->status != 0)
		return -EBADMSG;
	/* one unsigned comparison for MIN_COMPAT <= abi <= VERSION, warning-free at MIN 0 */
	if (kvmm_op_base(hdr->op) != KVMM_OP_HELLO &&
	    (unsigned int)hdr->abi - KVMM_ABI_MIN_COMPAT >
		    (unsigned int)(KVMM_ABI_VERSION - KVMM_ABI_MIN_COMPAT))
		return -EPROTO;
	return 0;
}

/* ---- Names --------------------------------------------------------------------------- */

/*
 * Client and namespace names: a char[KVMM_NAME_LEN] holding 1..31 bytes of [A-Za-z0-9._-]
 * then NUL padding to the end (zero padding keeps stack garbage off the wire and makes names
 * comparable with memcmp).
 */
#define KVMM_NAME_LEN 32
#define KVMM_PATH_LEN 256 /* swap file paths: NUL-terminated, NUL-padded */

/* 0 if name is a valid kvmm name, -EINVAL otherwise. */
static inline int kvmm_name_check(const char *name)
{
	size_t i, n;

	for (n = 0; n < KVMM_NAME_LEN && name[n] != '\0'; n++) {
		char c = name[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return -EINVAL;
	}
	if (n == 0 || n == KVMM_NAME_LEN)
		return -EINVAL;
	for (i = n; i < KVMM_NAME_LEN; i++)
		if (name[i] != '\0')
			return -EINVAL;
	return 0;
}

/* ---- KV page format ------------------------------------------------------------------ */

/* Element type of K and V. 0 is invalid so a zeroed format is caught. */
enum kvmm_dtype {
	KVMM_DTYPE_NONE = 0,
	KVMM_DTYPE_FP32 = 1,
	KVMM_DTYPE_FP16 = 2,
	KVMM_DTYPE_BF16 = 3,
	KVMM_DTYPE_INT8 = 4, /* per-group quantized; needs quant_group */
	KVMM_DTYPE_COUNT
};

/* Bytes per element, 0 for an unknown dtype. */
static inline unsigned int kvmm_dtype_size(unsigned int dtype)
{
	switch (dtype) {
	case KVMM_DTYPE_FP32:
		return 4;
	case KVMM_DTYPE_FP16:
	case KVMM_DTYPE_BF16:
		return 2;
	case KVMM_DTYPE_INT8:
		return 1;
	default:
		return 0;
	}
}

static inline const char *kvmm_dtype_name(unsigned int dtype)
{
	switch (dtype) {
	case KVMM_DTYPE_FP32:
		return "fp32";
	case KVMM_DTYPE_FP16:
		return "fp16";
	case KVMM_DTYPE_BF16:
		return "bf16";
	case KVMM_DTYPE_INT8:
		return "int8";
	default:
		return "?";
	}
}

/*
 * What a client registers at ATTACH: the shape of one token's KV. Page layout is
 * [layer][K|V][token][head][dim]; tokens per page and bytes per token follow and come back in
 * struct kvmm_attach_rep (the daemon is the one who computes them, scale storage included).
 */
struct kvmm_format {
	uint32_t layers;      /* transformer layers stored in this pool's pages */
	uint32_t kv_heads;    /* KV heads per layer (after GQA/MQA grouping) */
	uint32_t head_dim;    /* elements per head */
	uint32_t dtype;	      /* enum kvmm_dtype */
	uint32_t quant_group; /* INT8: elements per scale group, divides head_dim; else 0 */
	uint32_t reserved;    /* must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_format, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, layers, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, kv_heads, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, head_dim, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, dtype, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, quant_group, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_format, reserved, 20);

/* Sanity limits for a format; a real model is far below each. */
#define KVMM_FORMAT_MAX_LAYERS 1024
#define KVMM_FORMAT_MAX_KV_HEADS 1024
#define KVMM_FORMAT_MAX_HEAD_DIM 4096

/*
 * The checks that need no pool: 0 or -EINVAL. The daemon adds its own (a token must fit in a
 * page). Both sides run this one so a client learns of a bad format before a round trip.
 */
static inline int kvmm_format_check(const struct kvmm_format *fmt)
{
	if (fmt->layers == 0 || fmt->layers > KVMM_FORMAT_MAX_LAYERS)
		return -EINVAL;
	if (fmt->kv_heads == 0 || fmt->kv_heads > KVMM_FORMAT_MAX_KV_HEADS)
		return -EINVAL;
	if (fmt->head_dim == 0 || fmt->head_dim > KVMM_FORMAT_MAX_HEAD_DIM)
		return -EINVAL;
	if (kvmm_dtype_size(fmt->dtype) == 0 || fmt->reserved != 0)
		return -EINVAL;
	if (fmt->dtype == KVMM_DTYPE_INT8) {
		if (fmt->quant_group == 0 || fmt->head_dim % fmt->quant_group != 0)
			return -EINVAL;
	} else if (fmt->quant_group != 0) {
		return -EINVAL;
	}
	return 0;
}

/* ---- Frames, PTEs, block tables ------------------------------------------------------ */

/*
 * A frame number is a uint32_t index into the pool; frame n lives at base + n * page_size in
 * every process that maps the pool. KVMM_FRAME_NONE is never a real frame.
 */
#define KVMM_FRAME_NONE 0xffffffffU
#define KVMM_FRAME_MAX 0xfffffffeU

/*
 * A PTE is one uint64_t (read and written whole, so a client's seqcount-protected read sees a
 * consistent entry). Zero is "none", so a zero-filled page table is empty. Bits 0-1 say the
 * type; bits 2-15 hold flags common to present and swap entries (they survive swap-out);
 * the rest depends on the type:
 *
 *   none      63                                                              0
 *             | 0                                                             |
 *
 *   present   63                     32 31          16 15           2 1   0
 *             |   frame (32 bits)      | reserved (0) | flags (14)   | 0 1 |
 *
 *   swap      63                            24 23  21 20  16 15       2 1   0
 *             |     slot (40 bits)            | rsv 0 | tier | flags (14)| 1 0 |
 *
 * Type 3 is invalid. Reserved bits are zero. Readers ignore flag bits they do not know.
 * The constructors mask each argument to its field, so a bad argument can never change an
 * entry's type or spill into another field; callers check the limits below first.
 */
#define KVMM_PTE_TYPE_MASK UINT64_C(0x3)
#define KVMM_PTE_TYPE_NONE UINT64_C(0x0)
#define KVMM_PTE_TYPE_PRESENT UINT64_C(0x1)
#define KVMM_PTE_TYPE_SWAP UINT64_C(0x2)

#define KVMM_PTE_FLAGS_SHIFT 2
#define KVMM_PTE_FLAGS_BITS 14
#define KVMM_PTE_FLAGS_MASK (((UINT64_C(1) << KVMM_PTE_FLAGS_BITS) - 1) << KVMM_PTE_FLAGS_SHIFT)

/* Flags, given in place (no shifting needed). */
#define KVMM_PTE_WRITABLE (UINT64_C(1) << 2) /* the owner may write tokens into this page */
#define KVMM_PTE_DIRTY (UINT64_C(1) << 3)    /* written since allocation or swap-in */
#define KVMM_PTE_SEALED (UINT64_C(1) << 4)   /* full and immutable, indexed by content key */
#define KVMM_PTE_SHARED (UINT64_C(1) << 5)   /* mapped by several sequences: copy before write */
#define KVMM_PTE_FLAGS_V0 (KVMM_PTE_WRITABLE | KVMM_PTE_DIRTY | KVMM_PTE_SEALED | KVMM_PTE_SHARED)

#define KVMM_PTE_FRAME_SHIFT 32
#define KVMM_PTE_PRESENT_RSV_MASK UINT64_C(0x00000000ffff0000)

#define KVMM_PTE_SWAP_TIER_SHIFT 16
#define KVMM_PTE_SWAP_TIER_BITS 5
#define KVMM_PTE_SWAP_RSV_MASK UINT64_C(0x0000000000e00000)
#define KVMM_PTE_SWAP_SLOT_SHIFT 24
#define KVMM_PTE_SWAP_SLOT_BITS 40

#define KVMM_SWAP_TIER_MAX ((1U << KVMM_PTE_SWAP_TIER_BITS) - 1) /* 31 */
#define KVMM_SWAP_SLOT_MAX ((UINT64_C(1) << KVMM_PTE_SWAP_SLOT_BITS) - 1)

/* The fields tile the word exactly, with no overlap. */
KVMM_STATIC_ASSERT(KVMM_PTE_FLAGS_SHIFT + KVMM_PTE_FLAGS_BITS == 16, "flags end at bit 15");
KVMM_STATIC_ASSERT((KVMM_PTE_FLAGS_MASK & KVMM_PTE_TYPE_MASK) == 0, "flags clear of type");
KVMM_STATIC_ASSERT((KVMM_PTE_FLAGS_V0 & ~KVMM_PTE_FLAGS_MASK) == 0, "v0 flags in flag field");
KVMM_STATIC_ASSERT(KVMM_PTE_FRAME_SHIFT + 32 == 64, "a uint32_t frame fills the top half");
KVMM_STATIC_ASSERT((KVMM_PTE_TYPE_MASK | KVMM_PTE_FLAGS_MASK | KVMM_PTE_PRESENT_RSV_MASK |
		    ((UINT64_C(0xffffffff)) << KVMM_PTE_FRAME_SHIFT)) == ~UINT64_C(0),
		   "present fields cover the word");
KVMM_STATIC_ASSERT(KVMM_PTE_SWAP_TIER_SHIFT == 16, "tier right after flags");
KVMM_STATIC_ASSERT(KVMM_PTE_SWAP_SLOT_SHIFT + KVMM_PTE_SWAP_SLOT_BITS == 64, "slot fills top");
KVMM_STATIC_ASSERT((KVMM_PTE_TYPE_MASK | KVMM_PTE_FLAGS_MASK |
		    ((uint64_t)KVMM_SWAP_TIER_MAX << KVMM_PTE_SWAP_TIER_SHIFT) |
		    KVMM_PTE_SWAP_RSV_MASK | (KVMM_SWAP_SLOT_MAX << KVMM_PTE_SWAP_SLOT_SHIFT)) ==
			   ~UINT64_C(0),
		   "swap fields cover the word");
KVMM_STATIC_ASSERT((((uint64_t)KVMM_SWAP_TIER_MAX << KVMM_PTE_SWAP_TIER_SHIFT) &
		    KVMM_PTE_SWAP_RSV_MASK) == 0,
		   "tier clear of reserved bits");
KVMM_STATIC_ASSERT((KVMM_PTE_SWAP_RSV_MASK & (KVMM_SWAP_SLOT_MAX << KVMM_PTE_SWAP_SLOT_SHIFT)) == 0,
		   "reserved clear of slot");
KVMM_STATIC_ASSERT(KVMM_FRAME_MAX < KVMM_FRAME_NONE, "FRAME_NONE above every real frame");

static inline uint64_t kvmm_pte_none(void)
{
	return 0;
}

static inline uint64_t kvmm_pte_mk_present(uint32_t frame, uint64_t flags)
{
	return ((uint64_t)frame << KVMM_PTE_FRAME_SHIFT) | (flags & KVMM_PTE_FLAGS_MASK) |
	       KVMM_PTE_TYPE_PRESENT;
}

static inline uint64_t kvmm_pte_mk_swap(unsigned int tier, uint64_t slot)
{
	return ((slot & KVMM_SWAP_SLOT_MAX) << KVMM_PTE_SWAP_SLOT_SHIFT) |
	       ((uint64_t)(tier & KVMM_SWAP_TIER_MAX) << KVMM_PTE_SWAP_TIER_SHIFT) |
	       KVMM_PTE_TYPE_SWAP;
}

static inline int kvmm_pte_is_none(uint64_t pte)
{
	return pte == 0;
}

static inline int kvmm_pte_is_present(uint64_t pte)
{
	return (pte & KVMM_PTE_TYPE_MASK) == KVMM_PTE_TYPE_PRESENT;
}

static inline int kvmm_pte_is_swap(uint64_t pte)
{
	return (pte & KVMM_PTE_TYPE_MASK) == KVMM_PTE_TYPE_SWAP;
}

/* Frame of a present PTE; KVMM_FRAME_NONE for any other. */
static inline uint32_t kvmm_pte_frame(uint64_t pte)
{
	if (!kvmm_pte_is_present(pte))
		return KVMM_FRAME_NONE;
	return (uint32_t)(pte >> KVMM_PTE_FRAME_SHIFT);
}

/* Tier and slot of a swap PTE; 0 for any other (check kvmm_pte_is_swap first). */
static inline unsigned int kvmm_pte_swap_tier(uint64_t pte)
{
	if (!kvmm_pte_is_swap(pte))
		return 0;
	return (unsigned int)(pte >> KVMM_PTE_SWAP_TIER_SHIFT) & KVMM_SWAP_TIER_MAX;
}

static inline uint64_t kvmm_pte_swap_slot(uint64_t pte)
{
	if (!kvmm_pte_is_swap(pte))
		return 0;
	return pte >> KVMM_PTE_SWAP_SLOT_SHIFT;
}

/* Flags (in place) of a present or swap PTE; 0 for none. */
static inline uint64_t kvmm_pte_flags(uint64_t pte)
{
	return pte & KVMM_PTE_FLAGS_MASK;
}

/* pte with flags set / cleared; a none PTE stays none (it has no flags). */
static inline uint64_t kvmm_pte_set_flags(uint64_t pte, uint64_t flags)
{
	if (kvmm_pte_is_none(pte))
		return pte;
	return pte | (flags & KVMM_PTE_FLAGS_MASK);
}

static inline uint64_t kvmm_pte_clear_flags(uint64_t pte, uint64_t flags)
{
	return pte & ~(flags & KVMM_PTE_FLAGS_MASK);
}

/*
 * Whether pte is well formed: none, or present with a real frame and zero reserved bits, or
 * swap with zero reserved bits. What a reader of a shared page table checks before trusting it.
 */
static inline int kvmm_pte_valid(uint64_t pte)
{
	switch (pte & KVMM_PTE_TYPE_MASK) {
	case KVMM_PTE_TYPE_NONE:
		return pte == 0;
	case KVMM_PTE_TYPE_PRESENT:
		return (pte & KVMM_PTE_PRESENT_RSV_MASK) == 0 &&
		       kvmm_pte_frame(pte) != KVMM_FRAME_NONE;
	case KVMM_PTE_TYPE_SWAP:
		return (pte & KVMM_PTE_SWAP_RSV_MASK) == 0;
	default:
		return 0;
	}
}

/*
 * Block tables, what attention kernels index: int32_t per logical block, the frame number of a
 * resident page or KVMM_BLOCK_NONE (-1). int32_t because that is what the kernels' index
 * arithmetic uses; frames above KVMM_BLOCK_FRAME_MAX cannot appear in a block table (a pool
 * that large, 2^31 pages, is far beyond any device).
 */
#define KVMM_BLOCK_NONE (-1)
#define KVMM_BLOCK_FRAME_MAX 0x7fffffffU
KVMM_STATIC_ASSERT(KVMM_BLOCK_FRAME_MAX < KVMM_FRAME_NONE, "block frames are real frames");

/* Block-table entry for pte: its frame if present and indexable, else KVMM_BLOCK_NONE. */
static inline int32_t kvmm_pte_block(uint64_t pte)
{
	uint32_t frame = kvmm_pte_frame(pte);

	if (frame > KVMM_BLOCK_FRAME_MAX)
		return KVMM_BLOCK_NONE;
	return (int32_t)frame;
}

/* ---- Session payloads ---------------------------------------------------------------- */

/*
 * HELLO, the first message of a connection. Its header's abi is the sender's own version and
 * the daemon reads it whatever that is. The fields up to and including features are frozen in
 * both structs for all versions; a receiver accepts a longer HELLO payload and ignores the
 * tail. The reply's abi_agreed, from kvmm_abi_negotiate(), is the version of every later
 * message on the connection; with no overlap the reply has status -EPROTO and still carries
 * the daemon's range in a full kvmm_hello_rep, so the client can say why.
 */
struct kvmm_hello_req {
	uint16_t abi_version;	  /* newest ABI the client speaks */
	uint16_t abi_min;	  /* oldest ABI the client speaks */
	uint32_t pid;		  /* informational; identity comes from SO_PEERCRED */
	uint64_t features;	  /* KVMM_FEAT_* wanted */
	char name[KVMM_NAME_LEN]; /* client name for kvmmctl clients, kvmm_name_check() */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_hello_req, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_req, abi_version, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_req, abi_min, 2);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_req, pid, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_req, features, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_req, name, 16);

/* Pool backend, as reported in HELLO. */
enum kvmm_backend {
	KVMM_BACKEND_NONE = 0,
	KVMM_BACKEND_HOST = 1,
	KVMM_BACKEND_CUDA = 2,
	KVMM_BACKEND_COUNT
};

struct kvmm_hello_rep {
	uint16_t abi_version;	     /* newest ABI the daemon speaks */
	uint16_t abi_min;	     /* oldest ABI the daemon speaks */
	uint16_t abi_agreed;	     /* version of the rest of this connection */
	uint16_t backend;	     /* enum kvmm_backend */
	uint64_t features;	     /* granted: wanted & supported */
	uint64_t features_supported; /* everything this daemon could grant */
	uint64_t page_size;	     /* bytes per frame */
	uint32_t nr_frames;	     /* frames in the pool */
	uint32_t client_id;	     /* this connection's id in kvmmctl clients */
	uint32_t nr_devices;	     /* devices mirroring each frame (tensor-parallel group) */
	uint32_t max_msg;	     /* largest record the daemon accepts, <= KVMM_MSG_MAX */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_hello_rep, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, abi_version, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, abi_min, 2);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, abi_agreed, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, backend, 6);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, features, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, features_supported, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, page_size, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, nr_frames, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, client_id, 36);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, nr_devices, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_hello_rep, max_msg, 44);

/*
 * ATTACH joins a namespace with a format. The reply (KVMM_MSG_F_FDS) carries nr_fds
 * descriptors: with the data plane (shm_size != 0), the client's shared-memory region (rings,
 * page tables, magazine) first and its doorbell eventfd second; then the pool chunks of the
 * namespace in chunk order, each mapped at base + i * chunk_size.
 *
 * A cuda-backend pool may span a tensor-parallel group of hello_rep.nr_devices GPUs with
 * mirrored frames: frame n is page_size bytes at base + n * page_size on each device of the
 * group (each holding its own shard of the KV heads; the format a client registers is its
 * device's shard).  The chunks passed are those of one member of the group: the one whose
 * device UUID the request names (KVMM_ATTACH_F_DEVICE, struct kvmm_attach_device after the
 * request; -ENODEV when no member is that device), else member 0.  attach_rep.device_index
 * says which member was passed.
 */
struct kvmm_attach_req {
	char ns[KVMM_NAME_LEN]; /* namespace, kvmm_name_check() */
	struct kvmm_format fmt;
	uint32_t flags;	       /* KVMM_ATTACH_F_*; others must be zero */
	uint32_t ring_entries; /* SQ/CQ entries wanted (power of two), 0 = default */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_attach_req, 64);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_req, ns, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_req, fmt, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_req, flags, 56);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_req, ring_entries, 60);

/*
 * After struct kvmm_attach_req (and its struct kvmm_attach_device, if any) when
 * KVMM_ATTACH_F_MODEL is set (KVMM_FEAT_KEY_DOMAIN granted): the identity of the model whose
 * KV the client stores, len opaque bytes (1 .. KVMM_MODEL_ID_MAX: name, revision, adapter,
 * whatever tells two models of one shape apart) right after the struct. The daemon hashes it
 * into every content key of the client's sequences: clients of one namespace with different
 * identities never share a page, with equal ones they do (and with clients that gave none
 * only when both gave none).
 */
#define KVMM_MODEL_ID_MAX 256
struct kvmm_attach_model {
	uint32_t len;	   /* bytes that follow */
	uint32_t reserved; /* must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_attach_model, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_model, len, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_model, reserved, 4);

/* After struct kvmm_attach_req when KVMM_ATTACH_F_DEVICE is set. */
struct kvmm_attach_device {
	uint8_t uuid[16]; /* the CUDA device (cuDeviceGetUuid) whose member of the group to map */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_attach_device, 16);

struct kvmm_attach_rep {
	uint32_t tokens_per_page; /* page_size / bytes_per_token, rounded down */
	uint32_t bytes_per_token; /* K and V of all layers, quantization scales included */
	uint64_t chunk_size;	  /* bytes per pool chunk, a multiple of page_size */
	uint32_t nr_chunks;	  /* chunks the namespace maps */
	uint32_t ns_id;		  /* namespace id in kvmmctl namespaces */
	uint64_t shm_size;	  /* bytes of the shared-memory region (first fd) */
	uint32_t nr_fds;	  /* descriptors passed with this reply */
	uint32_t ring_entries;	  /* SQ/CQ entries granted, 0 without KVMM_FEAT_RINGS */
	uint32_t mag_size;	  /* magazine capacity in frames */
	uint32_t nr_frames;	  /* frames of the namespace's pool (frame numbers < this) */
	uint32_t device_index;	  /* the group member whose chunks are passed (0: host, 1 GPU) */
	uint32_t nr_devices;	  /* devices mirroring each frame (hello_rep.nr_devices) */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_attach_rep, 56);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, tokens_per_page, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, bytes_per_token, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, chunk_size, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, nr_chunks, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, ns_id, 20);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, shm_size, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, nr_fds, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, ring_entries, 36);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, mag_size, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, nr_frames, 44);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, device_index, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_attach_rep, nr_devices, 52);

/* ---- Sequence and memory payloads ---------------------------------------------------- */

/*
 * Sequences are named by a uint64_t id the daemon hands out (never 0, never reused within a
 * daemon's life). Token counts are uint64_t, block indexes uint32_t. Token ids, where a
 * request carries them, follow the fixed struct as uint32_t values.
 */
#define KVMM_SEQ_NONE UINT64_C(0)
#define KVMM_SEQ_ALL_TOKENS UINT64_MAX /* SEQ_FORK: share the whole parent */

struct kvmm_seq_create_req {
	uint64_t nr_tokens; /* tokens to allocate now (0: grow with SEQ_APPEND) */
	uint32_t flags;	    /* none defined in v0: must be zero */
	int32_t priority;   /* reclaim order within the namespace: lower goes first */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_create_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_req, nr_tokens, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_req, flags, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_req, priority, 12);

struct kvmm_seq_create_rep {
	uint64_t seq;	    /* the new sequence */
	uint32_t nr_blocks; /* blocks mapped */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_create_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_rep, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_create_rep, reserved, 12);

/*
 * SEQ_APPEND: nr_tokens uint32_t token ids follow the struct (the record is exactly
 * 32 + 16 + 4 * nr_tokens bytes); the daemon keeps them to key SEAL. A step that adds more
 * ids than fit in one record is split into several appends by the client.
 */
struct kvmm_seq_append_req {
	uint64_t seq;
	uint64_t nr_tokens; /* tokens to add at the end */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_append_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_req, nr_tokens, 8);

struct kvmm_seq_append_rep {
	uint64_t nr_tokens;	  /* the sequence's length now */
	uint32_t nr_blocks;	  /* its blocks now */
	uint32_t first_new_block; /* first block this append mapped (== nr_blocks if none) */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_append_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_rep, nr_tokens, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_rep, first_new_block, 12);

/*
 * SEQ_APPEND_FRAMES: SEQ_APPEND whose new blocks are frames the client took from its
 * magazine (data plane only), so it can write their KV before the daemon has seen the
 * append.  nr_tokens uint32_t token ids follow the struct, then nr_frames uint32_t frame
 * numbers (the record is exactly 32 + 16 + 4 * (nr_tokens + nr_frames) bytes).  nr_frames
 * must be the number of blocks past the sequence's last one that the append maps, and
 * frames[i] becomes the first of them + i.  Every frame must be one this client popped from
 * its magazine and has not given back nor named before, each named once: else -EINVAL and
 * nothing changes.  A shared partial last block is still copied into a daemon-chosen frame.
 * The reply is struct kvmm_seq_append_rep.
 */
struct kvmm_seq_append_frames_req {
	uint64_t seq;
	uint32_t nr_tokens; /* tokens to add at the end */
	uint32_t nr_frames; /* frames that follow the token ids */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_append_frames_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_frames_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_frames_req, nr_tokens, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_append_frames_req, nr_frames, 12);

/*
 * SEQ_PROMPT, a request's start in one op: create a sequence (priority as SEQ_CREATE), map
 * the longest cached run of full pages of the nr_tokens ids that follow (as PREFIX_LOOKUP)
 * and append the rest (as SEQ_APPEND, the daemon choosing the frames).  All or nothing: on
 * any failure the new sequence is freed and nothing is left.  Its block table is in the
 * page-table mirror when the reply arrives (or read with SEQ_BLOCKS).  flags, reserved 0.
 */
struct kvmm_seq_prompt_req {
	int32_t priority;
	uint32_t flags;
	uint32_t nr_tokens; /* token ids that follow */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_prompt_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_req, priority, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_req, flags, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_req, nr_tokens, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_req, reserved, 12);

struct kvmm_seq_prompt_rep {
	uint64_t seq;	    /* the new sequence */
	uint32_t nr_blocks; /* its blocks */
	uint32_t nr_hit;    /* of them, the first nr_hit came from the prefix cache */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_prompt_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_rep, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_prompt_rep, nr_hit, 12);

/* SEQ_FORK shares the parent's first nr_tokens; the partial last page is copy-on-write. */
struct kvmm_seq_fork_req {
	uint64_t seq;	    /* parent */
	uint64_t nr_tokens; /* prefix to share, KVMM_SEQ_ALL_TOKENS for all */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_fork_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_fork_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_fork_req, nr_tokens, 8);

struct kvmm_seq_fork_rep {
	uint64_t seq;	    /* the child */
	uint32_t nr_blocks; /* blocks it maps */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_fork_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_fork_rep, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_fork_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_fork_rep, reserved, 12);

struct kvmm_seq_truncate_req {
	uint64_t seq;
	uint64_t nr_tokens; /* new length, <= the current one */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_truncate_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_truncate_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_truncate_req, nr_tokens, 8);

struct kvmm_seq_free_req {
	uint64_t seq;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_free_req, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_free_req, seq, 0);

/*
 * PREFIX_LOOKUP walks the cache with nr_tokens token ids (uint32_t, following the struct)
 * starting at the sequence's current end, mapping every sealed page hit. A long prompt is
 * sent in several lookups; the walk stops at the first miss.
 */
struct kvmm_prefix_lookup_req {
	uint64_t seq;	    /* target: empty, or whole pages all sealed (earlier lookups) */
	uint32_t nr_tokens; /* token ids that follow */
	uint32_t flags;	    /* none defined in v0: must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_prefix_lookup_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_req, nr_tokens, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_req, flags, 12);

struct kvmm_prefix_lookup_rep {
	uint64_t nr_tokens; /* the sequence's length after the hits */
	uint32_t nr_blocks; /* pages this lookup mapped from the cache */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_prefix_lookup_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_rep, nr_tokens, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_prefix_lookup_rep, reserved, 12);

/*
 * SEAL marks the full, unsealed pages of blocks [block, block + nr_blocks) immutable and
 * enters them in the page cache (nr_blocks 0: every full block from block on). Nothing
 * follows the struct: the token ids that key the cache came with SEQ_APPEND. Blocks are
 * sealed in order (a block's key chains its parent's), so the range must start at or before
 * the first unsealed block; already sealed blocks in it are skipped.
 */
struct kvmm_seal_req {
	uint64_t seq;
	uint32_t block; /* first block to seal */
	uint32_t nr_blocks;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seal_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seal_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seal_req, block, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seal_req, nr_blocks, 12);
/*
 * SEQ_SEAL_FREE, a request's end in one op, takes the same struct: seal as SEAL does, then
 * free the sequence as SEQ_FREE does.  A seal that fails frees nothing (the error is SEAL's);
 * a pinned sequence is -EBUSY.
 */

/*
 * SEQ_SALT (KVMM_FEAT_KEY_DOMAIN) sets the salt mixed into the content keys of a sequence's
 * pages, like vLLM's cache_salt: PREFIX_LOOKUP finds, and SEAL enters, only pages of the same
 * model identity and salt, so one tenant's users can be kept apart inside a namespace. len
 * bytes (0 .. KVMM_SALT_MAX; 0: no salt) follow the struct. The salt is the sequence's: a
 * fork inherits it. It can be changed only while the sequence has no sealed page and shares
 * none (-EBUSY otherwise); setting the salt it already has is always fine.
 */
#define KVMM_SALT_MAX 256
struct kvmm_seq_salt_req {
	uint64_t seq;
	uint32_t len;	   /* salt bytes that follow */
	uint32_t reserved; /* must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_salt_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_salt_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_salt_req, len, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_salt_req, reserved, 12);

/*
 * SEQ_BLOCKS reads part of a sequence's block table: the reply struct is followed by count
 * int32_t entries (frame number, or KVMM_BLOCK_NONE), for blocks [block, block + count).
 * count is min(nr_blocks, blocks from block to the end, what fits in one record);
 * nr_blocks 0 asks for as many as fit.
 */
struct kvmm_seq_blocks_req {
	uint64_t seq;
	uint32_t block;	    /* first block wanted */
	uint32_t nr_blocks; /* entries wanted, 0 = as many as fit */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_blocks_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_req, block, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_req, nr_blocks, 12);

struct kvmm_seq_blocks_rep {
	uint64_t nr_tokens; /* the sequence's length */
	uint32_t nr_blocks; /* its blocks */
	uint32_t count;	    /* int32_t entries that follow */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_seq_blocks_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_rep, nr_tokens, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_rep, nr_blocks, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_seq_blocks_rep, count, 12);
/* Entries one SEQ_BLOCKS reply can carry. */
#define KVMM_SEQ_BLOCKS_MAX \
	((KVMM_MSG_PAYLOAD_MAX - sizeof(struct kvmm_seq_blocks_rep)) / sizeof(int32_t))

/*
 * PIN and UNPIN take a batch: nr_seqs uint64_t sequence ids follow the struct. PIN makes every
 * page of those sequences resident (swapping in as needed) and keeps reclaim off them until
 * UNPIN. Pins nest (each PIN needs its UNPIN). While pinned, a sequence's pages cannot change:
 * SEQ_APPEND, SEQ_TRUNCATE, SEQ_FREE, SEAL and PREFIX_LOOKUP on it get -EBUSY. A batch is
 * all or nothing: an unknown id (-ENOENT) or, for UNPIN, an unpinned one (-EINVAL) fails it.
 * The engine's contract: it writes a page's KV only while the page is pinned, and the KV of
 * tokens it appended is written before the UNPIN that ends the first pin window after the
 * APPEND (an unpinned page may be swapped out at any time). The daemon relies on it: a page
 * brought back from swap whose tokens were all written keeps its swap slot, and swapping it
 * out again unchanged copies nothing (Documentation/mm/swap.md, clean swap-cached pages).
 */
struct kvmm_pin_req {
	uint32_t nr_seqs;
	uint32_t flags; /* none defined in v0: must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pin_req, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_req, nr_seqs, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_req, flags, 4);

struct kvmm_pin_rep {
	uint32_t nr_frames; /* frames pinned (PIN) or unpinned (UNPIN) */
	uint32_t nr_swapin; /* of them, pages brought back from a swap tier */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pin_rep, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_rep, nr_frames, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_rep, nr_swapin, 4);

/*
 * SEQ_PIN_RANGE (KVMM_FEAT_PIN_RANGE) pins blocks [block, block + nr_blocks) of one sequence:
 * their swapped pages are brought back first (room is made by reclaiming elsewhere, the other
 * blocks of the same sequence included: they are not pinned), then each page's pin count is
 * raised until the SEQ_UNPIN_RANGE of the same range.  For an engine whose step does not fit
 * in memory: attention over the sequence chunk by chunk, each chunk pinned while it is read,
 * the pages being written pinned for the whole step.  With KVMM_PIN_RANGE_F_PREFETCH the
 * reads of the swapped blocks of the next nr_blocks after the range are started (as
 * PREFETCH does), so the next chunk's pin finds them resident or in flight.  Range pins nest
 * and overlap freely, with each other and with PIN; each SEQ_UNPIN_RANGE ends the latest pin
 * of exactly that range (-EINVAL when there is none).  While a sequence has range pins it
 * cannot change (SEQ_APPEND, SEQ_TRUNCATE, SEQ_FREE, SEAL and PREFIX_LOOKUP get -EBUSY, as
 * under PIN).  The range must lie within the sequence's blocks and nr_blocks be at least 1
 * (-EINVAL); an unknown id is -ENOENT, a preempted one -KVMM_EPREEMPTED.  The write contract
 * of PIN holds per page: a page's pending KV (tokens appended to it) must be written before
 * the unpin that drops its last pin.  A client that goes away drops its range pins.  Reply:
 * struct kvmm_pin_rep (frames pinned or unpinned, pages brought back from swap).
 */
struct kvmm_pin_range_req {
	uint64_t seq;
	uint32_t block;
	uint32_t nr_blocks;
	uint32_t flags; /* KVMM_PIN_RANGE_F_*; zero for SEQ_UNPIN_RANGE */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pin_range_req, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_range_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_range_req, block, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_range_req, nr_blocks, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_range_req, flags, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_range_req, reserved, 20);
#define KVMM_PIN_RANGE_F_PREFETCH (1U << 0) /* start reading the next nr_blocks back */
#define KVMM_PIN_RANGE_F_ALL KVMM_PIN_RANGE_F_PREFETCH

/*
 * Far reads (KVMM_FEAT_FAR; a pool in host memory with a host-memory swap tier).  FAR_MAP
 * answers struct kvmm_far_map_rep with nr_fds descriptors: the namespace's pool chunks, then
 * the host tier's arena (a memfd).  Mapped read-only one after the other (chunks at
 * i * chunk_size, the arena at nr_chunks * chunk_size) they make the far window, where
 * frame f is page f and the tier's slot s page far_base + s.  -ENODEV: no host-memory tier
 * now; -EOPNOTSUPP: the pool is not in host memory.  gen names this arena: a swapoff or
 * swapon gives the next one another.
 *
 * SEQ_PIN_FAR pins blocks [block, block + nr_blocks) of one sequence like SEQ_PIN_RANGE
 * (no flags), except that a sealed page swapped to that arena is not brought back: its
 * slot is pinned where it is (neither reused, moved nor dropped until unpinned; a slot
 * freed meanwhile is released at the unpin).  The reply gives each block's page in the
 * window: a frame (< far_base) or far_base + slot.  gen 0 asks for frames only (every
 * swapped page faulted in); another gen than the arena's is -ESTALE (map again).  The pin is
 * a range pin: SEQ_UNPIN_RANGE of the same range ends it, a client that goes away drops it.
 * nr_blocks at most KVMM_PIN_FAR_MAX (-E2BIG).  Reply: struct kvmm_pin_far_rep, then count
 * int32_t entries.  Far reads skip the arena's checksums (the window is read-only to
 * clients; kvmmd verifies a slot's checksum when it reads the page back).
 */
struct kvmm_far_map_rep {
	uint64_t gen;	     /* the arena's generation (never 0) */
	uint64_t nr_slots;   /* pages in the arena */
	uint64_t chunk_size; /* bytes per pool chunk, as attach_rep */
	uint32_t nr_chunks;  /* pool chunks (the first nr_chunks descriptors) */
	uint32_t far_base;   /* window page of slot 0: nr_chunks * chunk_size / page size */
	uint32_t nr_fds;     /* nr_chunks + 1 */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_far_map_rep, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, gen, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, nr_slots, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, chunk_size, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, nr_chunks, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, far_base, 28);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, nr_fds, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_far_map_rep, reserved, 36);

struct kvmm_pin_far_req {
	uint64_t seq;
	uint32_t block;
	uint32_t nr_blocks;
	uint64_t gen; /* far_map_rep.gen, or 0: frames only */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pin_far_req, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_req, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_req, block, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_req, nr_blocks, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_req, gen, 16);

struct kvmm_pin_far_rep {
	uint32_t nr_frames; /* entries pinned in the pool */
	uint32_t nr_far;    /* entries pinned in the arena */
	uint32_t nr_swapin; /* pages brought back from swap for it */
	uint32_t count;	    /* int32_t entries that follow (nr_blocks) */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pin_far_rep, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_rep, nr_frames, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_rep, nr_far, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_rep, nr_swapin, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pin_far_rep, count, 12);
/* Blocks one SEQ_PIN_FAR may pin (its reply carries an entry each). */
#define KVMM_PIN_FAR_MAX \
	((KVMM_MSG_PAYLOAD_MAX - sizeof(struct kvmm_pin_far_rep)) / sizeof(int32_t))

/*
 * PREFETCH takes a PIN batch (struct kvmm_pin_req + nr_seqs uint64_t ids): start reading
 * back, asynchronously, the swapped pages of the sequences the next step will run, and answer
 * at once with struct kvmm_pin_rep (nr_frames 0, nr_swapin = reads started).  Nothing is
 * pinned; the PIN that follows finds the pages resident or waits for their reads.
 */

/*
 * MAG_REFILL asks for pre-charged free frames in the client's magazine (in shared memory);
 * MAG_DRAIN hands frames back (nr_frames 0 = all). Frames travel through the magazine, not
 * the message.
 */
struct kvmm_mag_req {
	uint32_t nr_frames;
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_mag_req, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_mag_req, nr_frames, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_mag_req, reserved, 4);

struct kvmm_mag_rep {
	uint32_t nr_frames; /* frames moved */
	uint32_t nr_held;   /* frames in the magazine now */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_mag_rep, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_mag_rep, nr_frames, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_mag_rep, nr_held, 4);

/* ---- Data plane: the client's shared-memory region ------------------------------------- */

/*
 * With KVMM_FEAT_RINGS granted and KVMM_ATTACH_F_RINGS in attach_req.flags, the daemon gives
 * each attaching client one memfd region (the first descriptor of the ATTACH reply, mapped
 * MAP_SHARED read-write, attach_rep.shm_size bytes) and an eventfd (the second descriptor),
 * then the pool chunks. Layout, every offset from the start of the region and a multiple of
 * KVMM_SHM_ALIGN, all filled by kvmm_shm_layout() and described by struct kvmm_shm_hdr at 0:
 *
 *   0              struct kvmm_shm_hdr
 *   sq_off         struct kvmm_shm_ring       submission ring indexes (client produces)
 *   sqes_off       ring_entries x struct kvmm_ring_sqe
 *   data_off       data_size bytes: request payloads the SQEs point at
 *   cq_off         struct kvmm_shm_ring       completion ring indexes (daemon produces)
 *   cqes_off       ring_entries x struct kvmm_ring_cqe
 *   pt_off         pt_slots x struct kvmm_pt_slot        page-table mirror (daemon writes)
 *   pt_frames_off  pt_slots x pt_max_blocks x int32_t    block-table entries of each slot
 *   mag_off        struct kvmm_shm_ring       magazine: free frames (daemon produces)
 *   mag_frames_off mag_size x uint32_t
 *   ret_off        struct kvmm_shm_ring       frames given back (client produces)
 *   ret_frames_off mag_size x uint32_t
 *
 * Rings: single producer, single consumer, like io_uring's. head and tail are free-running
 * uint32_t counters (entry i is at index i & (entries - 1)); the producer writes entries,
 * then publishes tail with a release store; the consumer reads tail with an acquire load,
 * reads the entries, then publishes head with a release store, which hands the slots back.
 * tail - head is never above entries; a daemon that sees otherwise (or anything else out of
 * range in the region) disconnects the client. The daemon never trusts a byte of the region:
 * it copies an SQE and its payload out before checking them.
 *
 * Doorbells. Daemon -> client: the CQ's tail word is a futex. A client that wants to sleep
 * sets KVMM_CQ_F_WAITING in the CQ's flags, re-reads tail and calls FUTEX_WAIT(tail, seen)
 * (shared, not FUTEX_PRIVATE_FLAG); the daemon, after publishing tail, wakes the tail word
 * when that flag is set. Client -> daemon: the daemon's epoll loop cannot wait on a futex,
 * so it polls every client's SQ on each iteration, spins a short while after the last work,
 * and before it blocks sets KVMM_SQ_F_NEED_WAKEUP in each SQ's flags and polls once more; a
 * client that published a new SQ tail and then sees that flag writes 1 to the eventfd.
 *
 * Page-table mirror: each sequence of the client may own a slot (the daemon picks slot
 * (id - 1) % pt_slots when free, else any free one; a sequence gets none when all are
 * taken). The daemon rewrites a slot under its seqcount (odd while writing) after every
 * operation that changes the sequence, before it answers the operation, so a client reads
 * block tables as new as every reply and completion it has seen. A sequence with more than
 * pt_max_blocks blocks has KVMM_PT_F_OVERFLOW set and only its first pt_max_blocks entries
 * (read SEQ_BLOCKS for the rest).
 *
 * Magazine: MAG_REFILL(n) charges up to n more frames (at most mag_size parked, published or returned; popped ones are the client's and not counted) to the client's
 * namespace and publishes them in the magazine ring; the client pops them without a round
 * trip. A popped frame belongs to the client (its memory is at base + frame * page_size, not
 * part of any sequence) until it pushes the number on the return ring or names it in a
 * SEQ_APPEND_FRAMES, which makes it a block of that sequence. The magazine's consumer index
 * (head) is moved with a compare-and-swap, by the client to pop and by the daemon to take
 * published frames back (MAG_DRAIN), so each published frame is popped or retracted exactly
 * once. After the first MAG_REFILL the daemon keeps the ring topped up on its own: whenever
 * fewer than KVMM_MAG_LOW_MARK(mag_size) frames are ready it publishes more (returned frames
 * first, then new ones), from its loop, without a request; a client whose pop leaves fewer
 * than the mark writes the eventfd if KVMM_SQ_F_NEED_WAKEUP is set. Returned frames stay
 * charged to the namespace, cached in the magazine for the next pop; MAG_DRAIN gives back
 * every frame the client does not hold (and stops the top-ups until the next MAG_REFILL);
 * the daemon ignores a returned number it did not hand out. Detach or death returns
 * everything held. Under memory pressure the daemon takes unpopped frames back by itself
 * (the same compare-and-swap on head), before it swaps sequences out; a client then finds
 * its magazine empty and asks with MAG_REFILL.
 */
#define KVMM_SHM_MAGIC 0x48534d4bU /* "KMSH" in memory on little-endian hosts */
#define KVMM_SHM_VERSION 0
#define KVMM_SHM_ALIGN 64 /* offsets and ring index words: cache-line aligned */

#define KVMM_ATTACH_F_RINGS (1U << 0) /* attach_req.flags: create the data plane (FEAT_RINGS) */
/* attach_req.flags: a struct kvmm_attach_device follows the request (a cuda-backend pool) */
#define KVMM_ATTACH_F_DEVICE (1U << 1)
/* attach_req.flags: a struct kvmm_attach_model and the identity follow (KVMM_FEAT_KEY_DOMAIN) */
#define KVMM_ATTACH_F_MODEL (1U << 2)
#define KVMM_ATTACH_F_ALL_V0 (KVMM_ATTACH_F_RINGS | KVMM_ATTACH_F_DEVICE | KVMM_ATTACH_F_MODEL)

#define KVMM_RING_DEFAULT_ENTRIES 256
#define KVMM_RING_MIN_ENTRIES 8
#define KVMM_RING_MAX_ENTRIES 4096
#define KVMM_RING_DATA_PER_ENTRY 512	/* data_size = entries * this, at least: */
#define KVMM_RING_DATA_MIN (128 * 1024) /* twice the largest payload */
#define KVMM_PT_DEFAULT_SLOTS 512
#define KVMM_PT_DEFAULT_MAX_BLOCKS 512
#define KVMM_MAG_DEFAULT_SIZE 256
#define KVMM_MAG_LOW_MARK(size) ((size) / 4) /* the daemon tops up below this many ready */

/* Ring flags words. */
#define KVMM_SQ_F_NEED_WAKEUP (1U << 0) /* SQ flags, set by the daemon: write the eventfd */
#define KVMM_CQ_F_WAITING (1U << 0)	/* CQ flags, set by the client: FUTEX_WAKE the CQ tail */

/* Indexes of one ring; each word on its own cache line (its writer differs from its neighbours'). */
struct kvmm_shm_ring {
	uint32_t head; /* consumer's */
	uint32_t pad0[15];
	uint32_t tail; /* producer's; the CQ's is also the daemon -> client futex word */
	uint32_t pad1[15];
	uint32_t flags; /* KVMM_SQ_F_* / KVMM_CQ_F_* (written by the side that does not own tail) */
	/*
	 * A hint, written by the flags' writer: the CPU it last ran on, plus one (0: unknown).
	 * The SQ's is the daemon's loop, the CQ's the client's while it waits for a completion.
	 * A waiter gives its CPU away (sched_yield) only when the other side is on the same one;
	 * on different CPUs both spin without a system call.  Only a hint: a stale value costs
	 * a late yield or a useless one, never correctness.
	 */
	uint32_t cpu;
	/*
	 * SQ only, a hint written by the daemon: how many clients its last busy round served,
	 * plus one (0: unknown).  A waiting client that sees more of them than CPUs sleeps on the
	 * futex at once instead of spinning: spinners beyond the CPUs keep the daemon itself off
	 * a CPU.  Only a hint, like cpu.
	 */
	uint32_t load;
	uint32_t pad2[13];
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_shm_ring, 192);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_ring, head, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_ring, tail, 64);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_ring, flags, 128);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_ring, cpu, 132);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_ring, load, 136);

/*
 * One submitted operation: op is a memory opcode (PING, SEQ_CREATE .. UNPIN, MAG_REFILL,
 * MAG_DRAIN, ...; SEQ_BLOCKS and SEQ_PIN_FAR only with KVMM_SQE_F_OUT) and its request payload, exactly
 * as on the socket (struct + trailing ids), is len bytes at data_off of the data area.
 *
 * KVMM_SQE_F_OUT (KVMM_FEAT_RING_OUT granted, the region has an out area): the reply goes
 * whole to the out area as well, struct kvmm_ring_out then the reply payload the socket would
 * carry, written before the CQE is published; the CQE's rep still carries its first 16 bytes.
 * The only way to submit a KVMM_OPF_RING_OUT op (SEQ_PIN_FAR), allowed on every ring op.  The
 * area is one: the client has at most one such SQE in flight (libkvmm: a synchronous call) and
 * reads the area before it submits the next.
 */
#define KVMM_SQE_F_OUT (1U << 0)
#define KVMM_SQE_F_ALL KVMM_SQE_F_OUT

/* At the start of the out area: the reply of the last KVMM_SQE_F_OUT SQE. */
struct kvmm_ring_out {
	uint32_t len;	    /* reply payload bytes that follow (<= KVMM_MSG_PAYLOAD_MAX) */
	uint16_t op;	    /* the SQE's op */
	uint16_t reserved;  /* zero */
	uint64_t user_data; /* the SQE's */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_ring_out, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_out, len, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_out, op, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_out, user_data, 8);
/* Bytes of the out area: room for the largest reply. */
#define KVMM_RING_OUT_SIZE (sizeof(struct kvmm_ring_out) + KVMM_MSG_PAYLOAD_MAX)

struct kvmm_ring_sqe {
	uint16_t op;	    /* enum kvmm_op */
	uint16_t flags;	    /* KVMM_SQE_F_*; zero without KVMM_FEAT_RING_OUT */
	uint32_t len;	    /* payload bytes, <= KVMM_MSG_PAYLOAD_MAX */
	uint32_t data_off;  /* offset in the data area; data_off + len <= data_size */
	uint32_t reserved;  /* must be zero */
	uint64_t user_data; /* echoed in the CQE */
	uint64_t reserved2; /* must be zero */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_ring_sqe, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, op, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, flags, 2);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, len, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, data_off, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, reserved, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, user_data, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_sqe, reserved2, 24);

/* One completion, in SQ order: the status and the reply payload the socket would carry. */
struct kvmm_ring_cqe {
	uint64_t user_data;
	int32_t res;	 /* 0 or -errno */
	uint16_t op;	 /* the SQE's op (0 when the SQE was unreadable) */
	uint16_t flags;	 /* none in v0 */
	uint8_t rep[16]; /* struct kvmm_*_rep of op when res == 0 (zero-filled, else zeros) */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_ring_cqe, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_cqe, user_data, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_cqe, res, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_cqe, op, 12);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_cqe, flags, 14);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ring_cqe, rep, 16);

#define KVMM_PT_F_OVERFLOW (1U << 0) /* more blocks than the slot holds */

/* A page-table mirror slot; its int32_t entries are at pt_frames_off + slot * max * 4. */
struct kvmm_pt_slot {
	uint32_t seqcount;  /* odd while the daemon writes (struct kvmm_seqcount) */
	uint32_t nr_blocks; /* blocks of the sequence */
	uint64_t seq;	    /* the sequence's id, 0 for a free slot */
	uint64_t nr_tokens; /* its length */
	uint32_t flags;	    /* KVMM_PT_F_* */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_pt_slot, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, seqcount, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, nr_blocks, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, seq, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, nr_tokens, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, flags, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_pt_slot, reserved, 28);

/* At offset 0 of the region: what is where. Written once by the daemon before ATTACH's reply. */
struct kvmm_shm_hdr {
	uint32_t magic;	       /* KVMM_SHM_MAGIC */
	uint16_t version;      /* KVMM_SHM_VERSION */
	uint16_t hdr_size;     /* sizeof(struct kvmm_shm_hdr) */
	uint64_t size;	       /* bytes of the region (attach_rep.shm_size) */
	uint32_t ring_entries; /* SQ and CQ entries, a power of two */
	uint32_t sqe_size;     /* sizeof(struct kvmm_ring_sqe) */
	uint32_t cqe_size;     /* sizeof(struct kvmm_ring_cqe) */
	uint32_t data_size;    /* bytes of the SQ data area */
	uint64_t sq_off;
	uint64_t sqes_off;
	uint64_t data_off;
	uint64_t cq_off;
	uint64_t cqes_off;
	uint64_t pt_off;
	uint64_t pt_frames_off;
	uint32_t pt_slots;	/* mirror slots */
	uint32_t pt_max_blocks; /* entries per slot */
	uint64_t mag_off;
	uint64_t mag_frames_off;
	uint64_t ret_off;
	uint64_t ret_frames_off;
	uint32_t mag_size; /* entries of the magazine and return rings; frames parked at most */
	uint32_t out_size; /* bytes of the out area (KVMM_RING_OUT_SIZE), 0: none */
	uint64_t out_off;  /* the out area (KVMM_FEAT_RING_OUT, KVMM_SQE_F_OUT), 0: none */
	uint64_t reserved2[6];
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_shm_hdr, 192);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, magic, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, version, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, hdr_size, 6);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, size, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, ring_entries, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, sqe_size, 20);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, cqe_size, 24);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, data_size, 28);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, sq_off, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, sqes_off, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, data_off, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, cq_off, 56);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, cqes_off, 64);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, pt_off, 72);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, pt_frames_off, 80);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, pt_slots, 88);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, pt_max_blocks, 92);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, mag_off, 96);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, mag_frames_off, 104);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, ret_off, 112);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, ret_frames_off, 120);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, mag_size, 128);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, out_size, 132);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, out_off, 136);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shm_hdr, reserved2, 144);

static inline uint64_t kvmm_shm_align(uint64_t x)
{
	return (x + KVMM_SHM_ALIGN - 1) & ~(uint64_t)(KVMM_SHM_ALIGN - 1);
}

/*
 * Fill hdr (all of it) for a region of these sizes; returns its size in bytes, or 0 when a
 * size is out of range (ring_entries not a power of two in [MIN, MAX] entries, pt_slots,
 * pt_max_blocks or mag_size 0 or above 65536, out_size neither 0 nor KVMM_RING_OUT_SIZE).
 * The daemon and the checks below share it.  The out area, when there is one, comes last.
 */
static inline uint64_t kvmm_shm_layout_out(struct kvmm_shm_hdr *h, uint32_t ring_entries,
					   uint32_t pt_slots, uint32_t pt_max_blocks,
					   uint32_t mag_size, uint32_t out_size)
{
	uint64_t off, data;

	if (ring_entries < KVMM_RING_MIN_ENTRIES || ring_entries > KVMM_RING_MAX_ENTRIES ||
	    (ring_entries & (ring_entries - 1)) != 0)
		return 0;
	if (!pt_slots || pt_slots > 65536 || !pt_max_blocks || pt_max_blocks > 65536 || !mag_size ||
	    mag_size > 65536 || (out_size && out_size != KVMM_RING_OUT_SIZE))
		return 0;
	data = (uint64_t)ring_entries * KVMM_RING_DATA_PER_ENTRY;
	if (data < KVMM_RING_DATA_MIN)
		data = KVMM_RING_DATA_MIN;
	__builtin_memset(h, 0, sizeof(*h)); /* C and C++ alike (an engine may be either) */
	h->magic = KVMM_SHM_MAGIC;
	h->version = KVMM_SHM_VERSION;
	h->hdr_size = (uint16_t)sizeof(*h);
	h->ring_entries = ring_entries;
	h->sqe_size = (uint32_t)sizeof(struct kvmm_ring_sqe);
	h->cqe_size = (uint32_t)sizeof(struct kvmm_ring_cqe);
	h->data_size = (uint32_t)data;
	h->pt_slots = pt_slots;
	h->pt_max_blocks = pt_max_blocks;
	h->mag_size = mag_size;
	off = kvmm_shm_align(sizeof(*h));
	h->sq_off = off;
	off = kvmm_shm_align(off + sizeof(struct kvmm_shm_ring));
	h->sqes_off = off;
	off = kvmm_shm_align(off + (uint64_t)ring_entries * sizeof(struct kvmm_ring_sqe));
	h->data_off = off;
	off = kvmm_shm_align(off + data);
	h->cq_off = off;
	off = kvmm_shm_align(off + sizeof(struct kvmm_shm_ring));
	h->cqes_off = off;
	off = kvmm_shm_align(off + (uint64_t)ring_entries * sizeof(struct kvmm_ring_cqe));
	h->pt_off = off;
	off = kvmm_shm_align(off + (uint64_t)pt_slots * sizeof(struct kvmm_pt_slot));
	h->pt_frames_off = off;
	off = kvmm_shm_align(off + (uint64_t)pt_slots * pt_max_blocks * sizeof(int32_t));
	h->mag_off = off;
	off = kvmm_shm_align(off + sizeof(struct kvmm_shm_ring));
	h->mag_frames_off = off;
	off = kvmm_shm_align(off + (uint64_t)mag_size * sizeof(uint32_t));
	h->ret_off = off;
	off = kvmm_shm_align(off + sizeof(struct kvmm_shm_ring));
	h->ret_frames_off = off;
	off = kvmm_shm_align(off + (uint64_t)mag_size * sizeof(uint32_t));
	if (out_size) {
		h->out_size = out_size;
		h->out_off = off;
		off = kvmm_shm_align(off + out_size);
	}
	off = (off + 4095) & ~(uint64_t)4095; /* whole pages: it is mmap'ed */
	h->size = off;
	return off;
}

/* The region without an out area (a client that did not ask for KVMM_FEAT_RING_OUT). */
static inline uint64_t kvmm_shm_layout(struct kvmm_shm_hdr *h, uint32_t ring_entries,
				       uint32_t pt_slots, uint32_t pt_max_blocks, uint32_t mag_size)
{
	return kvmm_shm_layout_out(h, ring_entries, pt_slots, pt_max_blocks, mag_size, 0);
}

/*
 * What a client checks before it touches a region of size bytes: 0 when the header is the
 * one kvmm_shm_layout() makes for its own sizes (so every area lies inside the region),
 * -EBADMSG otherwise.
 */
static inline int kvmm_shm_hdr_check(const struct kvmm_shm_hdr *h, uint64_t size)
{
	struct kvmm_shm_hdr want;
	uint64_t n;

	if (size < sizeof(*h) || h->magic != KVMM_SHM_MAGIC || h->version != KVMM_SHM_VERSION ||
	    h->hdr_size != sizeof(*h))
		return -EBADMSG;
	n = kvmm_shm_layout_out(&want, h->ring_entries, h->pt_slots, h->pt_max_blocks, h->mag_size,
				h->out_size);
	if (!n || n != size || h->size != size)
		return -EBADMSG;
	/* the layout is a pure function of the sizes: any other offset is a corrupt header */
	return __builtin_memcmp(&want, h, sizeof(want)) ? -EBADMSG : 0;
}

/* ---- Event payloads ------------------------------------------------------------------ */

enum kvmm_preempt_reason {
	KVMM_PREEMPT_OOM = 1,	/* the pool is out of frames after reclaim */
	KVMM_PREEMPT_LIMIT = 2, /* the namespace is over its max */
	KVMM_PREEMPT_ADMIN = 3, /* an admin asked */
	/*
	 * A swapped page of the sequence failed its checksum on swap-in (host or file tier):
	 * its KV is lost, never mapped; ops on it fail with -KVMM_ELOST instead of EPREEMPTED
	 */
	KVMM_PREEMPT_CORRUPT = 4,
};

/*
 * PREEMPT: the daemon needs nr_frames back and chose seq. The engine should stop scheduling
 * it, and free or truncate it; after a grace period the daemon frees it itself and further
 * ops on it fail with -KVMM_EPREEMPTED.
 */
struct kvmm_preempt_event {
	uint64_t seq;
	uint32_t nr_frames;
	uint32_t reason; /* enum kvmm_preempt_reason */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_preempt_event, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_preempt_event, seq, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_preempt_event, nr_frames, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_preempt_event, reason, 12);

enum kvmm_shutdown_reason {
	KVMM_SHUTDOWN_SIGNAL = 1, /* SIGTERM / SIGINT */
	KVMM_SHUTDOWN_ADMIN = 2,
};

/* SHUTDOWN: the daemon stops in grace_ms; new work gets -ESHUTDOWN. */
struct kvmm_shutdown_event {
	uint32_t grace_ms;
	uint32_t reason; /* enum kvmm_shutdown_reason */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_shutdown_event, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shutdown_event, grace_ms, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_shutdown_event, reason, 4);

/* ---- Admin payloads ------------------------------------------------------------------ */

/*
 * Read verbs (STATUS .. TRACE) take struct kvmm_admin_req and answer text, one
 * "Name:  value unit" per line (/proc style), or JSON with KVMM_ADMIN_F_JSON. A long answer
 * spans several reply records with the same seq, all but the last with KVMM_MSG_F_MORE.
 */
#define KVMM_ADMIN_F_JSON (1U << 0)  /* answer JSON instead of tagged text */
#define KVMM_ADMIN_F_CLEAR (1U << 1) /* TRACE: empty the buffer after reading */
#define KVMM_ADMIN_F_ALL_V0 (KVMM_ADMIN_F_JSON | KVMM_ADMIN_F_CLEAR)
/*
 * TRACE: subscribe.  The daemon answers at once (status 0, KVMM_MSG_F_MORE, no payload) and
 * then pushes trace lines to this connection as more replies with the request's seq and
 * KVMM_MSG_F_MORE, until the connection closes; it never waits for a slow reader (records
 * that do not fit are dropped and counted).  Admin verbs (the `reserved` field): PAGETABLE
 * takes the client id there, TRACE a mask of event types (bit 1 << type, 0 = all); every
 * other verb wants 0.
 */
#define KVMM_ADMIN_F_FOLLOW (1U << 2)
#define KVMM_ADMIN_F_ALL (KVMM_ADMIN_F_ALL_V0 | KVMM_ADMIN_F_FOLLOW)

struct kvmm_admin_req {
	uint32_t flags; /* KVMM_ADMIN_F_* */
	uint32_t reserved;
	uint64_t id;		/* client, sequence (PAGETABLE) or 0 for all */
	char ns[KVMM_NAME_LEN]; /* namespace filter, all zero for all */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_admin_req, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_admin_req, flags, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_admin_req, reserved, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_admin_req, id, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_admin_req, ns, 16);

#define KVMM_LIMIT_SET_MAX (1U << 0)
#define KVMM_LIMIT_SET_LOW (1U << 1)
#define KVMM_LIMIT_SET_PRIORITY (1U << 2)
#define KVMM_LIMIT_NONE UINT64_MAX /* max_frames: unlimited */

/* LIMIT sets a namespace's limits; valid says which fields to apply. */
struct kvmm_limit_req {
	char ns[KVMM_NAME_LEN];
	uint64_t max_frames; /* hard limit, KVMM_LIMIT_NONE for none */
	uint64_t low_frames; /* protected from reclaim below this */
	int32_t priority;    /* reclaim order between namespaces: lower goes first */
	uint32_t valid;	     /* KVMM_LIMIT_SET_* */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_limit_req, 56);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_limit_req, ns, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_limit_req, max_frames, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_limit_req, low_frames, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_limit_req, priority, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_limit_req, valid, 52);

/*
 * NS_CREATE, NS_SET and NS_DELETE: a namespace created, changed or deleted while the daemon
 * runs (Documentation/admin-guide/kvmmd.md, "Live namespaces").  valid says which fields
 * apply; NS_CREATE needs frames or a max (its pool's size: frames, else max), NS_SET takes
 * anything but frames (a pool's size is fixed), NS_DELETE takes none, only flags.
 */
#define KVMM_NS_SET_FRAMES (1U << 0)   /* NS_CREATE: frames of its pool */
#define KVMM_NS_SET_MAX (1U << 1)      /* max_frames: hard limit, KVMM_LIMIT_NONE for none */
#define KVMM_NS_SET_MIN (1U << 2)      /* min_frames: never reclaimed by others' pressure */
#define KVMM_NS_SET_LOW (1U << 3)      /* low_frames: reclaimed only after the unprotected */
#define KVMM_NS_SET_PRIORITY (1U << 4) /* priority, -1000..1000 */
#define KVMM_NS_SET_ALL 0x1fU
#define KVMM_NS_F_FORCE (1U << 0) /* NS_DELETE: shut its clients out first (else -EBUSY) */

struct kvmm_ns_req {
	char ns[KVMM_NAME_LEN]; /* kvmm_name_check() */
	uint64_t frames;
	uint64_t max_frames;
	uint64_t min_frames;
	uint64_t low_frames;
	int32_t priority;
	uint32_t valid;	   /* KVMM_NS_SET_* */
	uint32_t flags;	   /* KVMM_NS_F_* */
	uint32_t reserved; /* 0 */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_ns_req, 80);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, frames, 32);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, max_frames, 40);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, min_frames, 48);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, low_frames, 56);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, priority, 64);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, valid, 68);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_ns_req, flags, 72);

#define KVMM_DROP_F_DEVICE (1U << 0) /* drop clean, unmapped cached pages from the pool */
#define KVMM_DROP_F_SWAP (1U << 1)   /* and cached copies held only in swap tiers */

struct kvmm_drop_caches_req {
	uint32_t flags; /* KVMM_DROP_F_*, at least one */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_drop_caches_req, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_drop_caches_req, flags, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_drop_caches_req, reserved, 4);

#define KVMM_RECLAIM_F_NOSWAP (1U << 0) /* drop or demote cache only; swap nothing out */

struct kvmm_reclaim_req {
	uint64_t nr_frames; /* frames to free */
	uint32_t flags;	    /* KVMM_RECLAIM_F_* */
	uint32_t reserved;
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_reclaim_req, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_reclaim_req, nr_frames, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_reclaim_req, flags, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_reclaim_req, reserved, 12);

/* Reply to RECLAIM and DROP_CACHES. */
struct kvmm_reclaim_rep {
	uint64_t nr_frames; /* frames freed */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_reclaim_rep, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_reclaim_rep, nr_frames, 0);

/*
 * SWAPON adds a swap tier: host memory (path empty) or a file on NVMe, to the pool of
 * namespace @ns, or of every namespace when @ns is empty.
 */
struct kvmm_swapon_req {
	uint32_t tier;	  /* 1..KVMM_SWAP_TIER_MAX */
	int32_t priority; /* higher is used first */
	uint64_t size;	  /* bytes, a multiple of page_size */
	char path[KVMM_PATH_LEN];
	char ns[KVMM_NAME_LEN]; /* empty: every namespace */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_swapon_req, 304);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapon_req, tier, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapon_req, priority, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapon_req, size, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapon_req, path, 16);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapon_req, ns, 272);

/*
 * SWAPOFF brings a tier's pages back (or drops clean cached ones) and removes it, from the
 * pool of namespace @ns or of every namespace when @ns is empty.
 */
struct kvmm_swapoff_req {
	uint32_t tier;
	uint32_t reserved;
	char path[KVMM_PATH_LEN]; /* must match SWAPON's, empty for host */
	char ns[KVMM_NAME_LEN];	  /* empty: every namespace */
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_swapoff_req, 296);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapoff_req, tier, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapoff_req, reserved, 4);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapoff_req, path, 8);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_swapoff_req, ns, 264);

/*
 * FAULT_INJECT arms (or with "POINT off" disarms) a swap fault point in the pool of namespace
 * ns (all zero: every namespace).  spec is NUL-terminated text:
 * "swap.write nth=3 mode=short times=1" (kvmm/swap.h kvmm_swap_fault_parse()).
 */
#define KVMM_FAULT_SPEC_LEN 224
struct kvmm_fault_inject_req {
	char ns[KVMM_NAME_LEN];
	char spec[KVMM_FAULT_SPEC_LEN];
};
KVMM_ABI_ASSERT_SIZE(struct kvmm_fault_inject_req, 256);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_fault_inject_req, ns, 0);
KVMM_ABI_ASSERT_OFFSET(struct kvmm_fault_inject_req, spec, 32);

/* ---- Operation table ------------------------------------------------------------------ */

/*
 * Every opcode's protocol facts, one row each (in the spirit of io_uring's per-opcode
 * definitions): its name, the rule its request payload follows, whether it is an admin verb,
 * whether it may travel on the data plane's rings, and the shape of its reply's head. kvmmd's
 * checks (kvmm/ipc/proto.c), its dispatch (kvmm/ipc/opdef.c, whose table adds the handlers),
 * the data plane and libkvmm's submission helpers all read these rows: none of them keeps a
 * switch over opcodes of its own. Adding an operation is a value in enum kvmm_op, one row
 * here, one row with its handler in kvmm/ipc/opdef.c (Documentation/dev-tools/adding-an-op.md).
 *
 * Row: X(OP, name, flags, payload rule, reply head), rows in opcode order:
 *   OP     the enumerator without its KVMM_OP_ prefix
 *   name   for logs and traces; an admin verb's name is also kvmmctl's verb
 *   flags  KVMM_OPF_*
 *   rule   one of the KVMM_PL_*() below: what a request's payload must be
 *   head   KVMM_RH_*: what the first bytes of a successful reply (a ring CQE's rep) carry
 */
#define KVMM_OPF_ADMIN (1U << 0)    /* admin verb: root or the admin group (-EACCES otherwise) */
#define KVMM_OPF_RING (1U << 1)	    /* may be submitted on the rings as well as the socket */
#define KVMM_OPF_ATTACHED (1U << 2) /* needs an attached session (-ENOTCONN otherwise) */
#define KVMM_OPF_EVENT (1U << 3)    /* daemon to client only: never a request */
/* rides the rings only with KVMM_SQE_F_OUT: its reply is longer than a CQE's rep */
#define KVMM_OPF_RING_OUT (1U << 4)

enum kvmm_payload_rule {
	KVMM_PAYLOAD_NONE,  /* empty */
	KVMM_PAYLOAD_ANY,   /* anything up to KVMM_MSG_PAYLOAD_MAX (PING's, echoed) */
	KVMM_PAYLOAD_FIXED, /* exactly size bytes */
	KVMM_PAYLOAD_MIN,   /* at least size bytes: a newer peer's may be longer (HELLO) */
	KVMM_PAYLOAD_ARRAY, /* size bytes, then exactly count elements of elem bytes, where count
			     * is the count_size-byte field at count_off of those size bytes */
	KVMM_PAYLOAD_VAR,   /* at least size bytes; the rest is judged by the daemon's checker
			     * for this opcode (kvmm/ipc/opdef.c) */
};

/* Payload rules, as the fields rule, size, count_off, count_size, elem of struct kvmm_op_info */
#define KVMM_PL_NONE() KVMM_PAYLOAD_NONE, 0, 0, 0, 0
#define KVMM_PL_ANY() KVMM_PAYLOAD_ANY, 0, 0, 0, 0
#define KVMM_PL_FIXED(T) KVMM_PAYLOAD_FIXED, sizeof(T), 0, 0, 0
#define KVMM_PL_MIN(T) KVMM_PAYLOAD_MIN, sizeof(T), 0, 0, 0
#define KVMM_PL_ARRAY(T, count, E) \
	KVMM_PAYLOAD_ARRAY, sizeof(T), offsetof(T, count), sizeof(((T *)0)->count), sizeof(E)
#define KVMM_PL_VAR(T) KVMM_PAYLOAD_VAR, sizeof(T), 0, 0, 0

/* What a successful reply starts with, for a client that turns replies into completions. */
enum kvmm_reply_head {
	KVMM_RH_NONE,	/* nothing a completion carries (or no payload) */
	KVMM_RH_SEQ,	/* u64 new sequence id, u32 nr_blocks (seq_create_rep, seq_fork_rep) */
	KVMM_RH_TOKENS, /* u64 nr_tokens, u32 nr_blocks (seq_append_rep, prefix_lookup_rep) */
	KVMM_RH_FRAMES, /* u32 nr_frames (pin_rep) */
	KVMM_RH_PROMPT, /* u64 new sequence id, u32 nr_blocks, u32 nr_hit (seq_prompt_rep) */
};

#define KVMM_OPS(X)                                                                               \
	/* session */                                                                             \
	X(HELLO, "hello", 0, KVMM_PL_MIN(struct kvmm_hello_req), KVMM_RH_NONE)                    \
	X(BYE, "bye", 0, KVMM_PL_NONE(), KVMM_RH_NONE)                                            \
	X(ATTACH, "attach", 0, KVMM_PL_VAR(struct kvmm_attach_req), KVMM_RH_NONE)                 \
	X(DETACH, "detach", KVMM_OPF_ATTACHED, KVMM_PL_NONE(), KVMM_RH_NONE)                      \
	X(PING, "ping", KVMM_OPF_RING, KVMM_PL_ANY(), KVMM_RH_NONE)                               \
	/* sequences and memory */                                                                \
	X(SEQ_CREATE, "seq_create", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                            \
	  KVMM_PL_FIXED(struct kvmm_seq_create_req), KVMM_RH_SEQ)                                 \
	X(SEQ_APPEND, "seq_append", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                            \
	  KVMM_PL_ARRAY(struct kvmm_seq_append_req, nr_tokens, uint32_t), KVMM_RH_TOKENS)         \
	X(SEQ_FORK, "seq_fork", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                \
	  KVMM_PL_FIXED(struct kvmm_seq_fork_req), KVMM_RH_SEQ)                                   \
	X(SEQ_TRUNCATE, "seq_truncate", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                        \
	  KVMM_PL_FIXED(struct kvmm_seq_truncate_req), KVMM_RH_NONE)                              \
	X(SEQ_FREE, "seq_free", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                \
	  KVMM_PL_FIXED(struct kvmm_seq_free_req), KVMM_RH_NONE)                                  \
	X(PREFIX_LOOKUP, "prefix_lookup", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                      \
	  KVMM_PL_ARRAY(struct kvmm_prefix_lookup_req, nr_tokens, uint32_t), KVMM_RH_TOKENS)      \
	X(SEAL, "seal", KVMM_OPF_ATTACHED | KVMM_OPF_RING, KVMM_PL_FIXED(struct kvmm_seal_req),   \
	  KVMM_RH_NONE)                                                                           \
	X(PIN, "pin", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                          \
	  KVMM_PL_ARRAY(struct kvmm_pin_req, nr_seqs, uint64_t), KVMM_RH_FRAMES)                  \
	X(UNPIN, "unpin", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                      \
	  KVMM_PL_ARRAY(struct kvmm_pin_req, nr_seqs, uint64_t), KVMM_RH_FRAMES)                  \
	X(MAG_REFILL, "mag_refill", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                            \
	  KVMM_PL_FIXED(struct kvmm_mag_req), KVMM_RH_NONE)                                       \
	X(MAG_DRAIN, "mag_drain", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                              \
	  KVMM_PL_FIXED(struct kvmm_mag_req), KVMM_RH_NONE)                                       \
	X(SEQ_BLOCKS, "seq_blocks", KVMM_OPF_ATTACHED | KVMM_OPF_RING_OUT,                        \
	  KVMM_PL_FIXED(struct kvmm_seq_blocks_req), KVMM_RH_NONE)                                \
	X(PREFETCH, "prefetch", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                \
	  KVMM_PL_ARRAY(struct kvmm_pin_req, nr_seqs, uint64_t), KVMM_RH_FRAMES)                  \
	X(SEQ_APPEND_FRAMES, "seq_append_frames", KVMM_OPF_ATTACHED | KVMM_OPF_RING,              \
	  KVMM_PL_VAR(struct kvmm_seq_append_frames_req), KVMM_RH_TOKENS)                         \
	X(SEQ_PROMPT, "seq_prompt", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                            \
	  KVMM_PL_ARRAY(struct kvmm_seq_prompt_req, nr_tokens, uint32_t), KVMM_RH_PROMPT)         \
	X(SEQ_SEAL_FREE, "seq_seal_free", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                      \
	  KVMM_PL_FIXED(struct kvmm_seal_req), KVMM_RH_NONE)                                      \
	X(SEQ_SALT, "seq_salt", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                                \
	  KVMM_PL_VAR(struct kvmm_seq_salt_req), KVMM_RH_NONE)                                    \
	X(SEQ_PIN_RANGE, "seq_pin_range", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                      \
	  KVMM_PL_FIXED(struct kvmm_pin_range_req), KVMM_RH_FRAMES)                               \
	X(SEQ_UNPIN_RANGE, "seq_unpin_range", KVMM_OPF_ATTACHED | KVMM_OPF_RING,                  \
	  KVMM_PL_FIXED(struct kvmm_pin_range_req), KVMM_RH_FRAMES)                               \
	X(FAR_MAP, "far_map", KVMM_OPF_ATTACHED, KVMM_PL_NONE(), KVMM_RH_NONE)                    \
	X(SEQ_PIN_FAR, "seq_pin_far", KVMM_OPF_ATTACHED | KVMM_OPF_RING_OUT,                      \
	  KVMM_PL_FIXED(struct kvmm_pin_far_req), KVMM_RH_FRAMES)                                 \
	/* admin: read verbs */                                                                   \
	X(STATUS, "status", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)   \
	X(MEMINFO, "meminfo", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE) \
	X(VMSTAT, "vmstat", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)   \
	X(BUDDYINFO, "buddyinfo", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req),           \
	  KVMM_RH_NONE)                                                                           \
	X(CLIENTS, "clients", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE) \
	X(NAMESPACES, "namespaces", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req),         \
	  KVMM_RH_NONE)                                                                           \
	X(SEQS, "seqs", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)       \
	X(PAGETABLE, "pagetable", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req),           \
	  KVMM_RH_NONE)                                                                           \
	X(LRU, "lru", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)         \
	X(SWAP, "swap", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)       \
	X(TRACE, "trace", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)     \
	/* admin: write verbs */                                                                  \
	X(LIMIT, "limit", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_limit_req), KVMM_RH_NONE)     \
	X(DROP_CACHES, "drop_caches", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_drop_caches_req), \
	  KVMM_RH_NONE)                                                                           \
	X(RECLAIM, "reclaim", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_reclaim_req),             \
	  KVMM_RH_NONE)                                                                           \
	X(SWAPON, "swapon", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_swapon_req), KVMM_RH_NONE)  \
	X(SWAPOFF, "swapoff", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_swapoff_req),             \
	  KVMM_RH_NONE)                                                                           \
	X(FAULT_INJECT, "fault_inject", KVMM_OPF_ADMIN,                                           \
	  KVMM_PL_FIXED(struct kvmm_fault_inject_req), KVMM_RH_NONE)                              \
	X(REMOTE, "remote", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_admin_req), KVMM_RH_NONE)   \
	X(NS_CREATE, "ns_add", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_ns_req), KVMM_RH_NONE)   \
	X(NS_SET, "ns_set", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_ns_req), KVMM_RH_NONE)      \
	X(NS_DELETE, "ns_del", KVMM_OPF_ADMIN, KVMM_PL_FIXED(struct kvmm_ns_req), KVMM_RH_NONE)   \
	/* events */                                                                              \
	X(PREEMPT, "preempt", KVMM_OPF_EVENT, KVMM_PL_FIXED(struct kvmm_preempt_event),           \
	  KVMM_RH_NONE)                                                                           \
	X(SHUTDOWN, "shutdown", KVMM_OPF_EVENT, KVMM_PL_FIXED(struct kvmm_shutdown_event),        \
	  KVMM_RH_NONE)

/*
 * Each row's index in the table: KVMM_OPI_HELLO, ...; KVMM_OP_COUNT rows in all.  Not ABI:
 * they are positions in this header's copy of the table and move when a row is added; only
 * the opcodes travel.
 */
enum kvmm_op_index {
#define KVMM_OP_INDEX_(op, name, flags, rule, head) KVMM_OPI_##op,
	KVMM_OPS(KVMM_OP_INDEX_)
#undef KVMM_OP_INDEX_
	KVMM_OP_COUNT
};

struct kvmm_op_info {
	uint16_t op;	    /* enum kvmm_op */
	const char *name;   /* never NULL */
	uint32_t flags;	    /* KVMM_OPF_* */
	uint8_t rule;	    /* enum kvmm_payload_rule */
	uint32_t size;	    /* FIXED: the size; MIN, ARRAY, VAR: the fixed head */
	uint16_t count_off; /* ARRAY: offset of the element count in the head */
	uint8_t count_size; /* ARRAY: its bytes, 4 or 8 */
	uint16_t elem;	    /* ARRAY: bytes of one element */
	uint8_t head;	    /* enum kvmm_reply_head */
};

/* The row index of opcode op (no reply bit), or -1 when this version does not define it. */
static inline int kvmm_op_index(unsigned int op)
{
	switch (op) {
#define KVMM_OP_CASE_(op, name, flags, rule, head) \
	case KVMM_OP_##op:                         \
		return KVMM_OPI_##op;
		KVMM_OPS(KVMM_OP_CASE_)
#undef KVMM_OP_CASE_
	default:
		return -1;
	}
}

/* The table row of opcode op (no reply bit: a reply is not a request), or NULL if undefined. */
static inline const struct kvmm_op_info *kvmm_op_info(unsigned int op)
{
	static const struct kvmm_op_info rows[KVMM_OP_COUNT] = {
#define KVMM_OP_ROW_(op, name, flags, rule, head) {KVMM_OP_##op, name, flags, rule, head},
		KVMM_OPS(KVMM_OP_ROW_)
#undef KVMM_OP_ROW_
	};
	int i = kvmm_op_index(op);

	return i < 0 ? NULL : &rows[i];
}

/*
 * Name of an opcode for logs and for kvmmctl (admin names are also its verbs); the reply bit
 * is ignored. Returns "?" for anything this version does not define, never NULL, so it can
 * go straight into a printf.
 */
static inline const char *kvmm_op_name(unsigned int op)
{
	const struct kvmm_op_info *d = op > 0xffffU ? NULL : kvmm_op_info(op & KVMM_OP_MASK);

	return d ? d->name : "?";
}

/* Whether this version defines op (reply bit ignored). */
static inline int kvmm_op_known(unsigned int op)
{
	return kvmm_op_name(op)[0] != '?';
}

/* Whether op may be submitted on the data plane's rings. */
static inline int kvmm_op_ring_ok(unsigned int op)
{
	const struct kvmm_op_info *d = kvmm_op_info(op);

	return d && (d->flags & KVMM_OPF_RING);
}

/* Whether op may be submitted on the rings with KVMM_SQE_F_OUT (every ring op, and the
 * KVMM_OPF_RING_OUT ones). */
static inline int kvmm_op_ring_out_ok(unsigned int op)
{
	const struct kvmm_op_info *d = kvmm_op_info(op);

	return d && (d->flags & (KVMM_OPF_RING | KVMM_OPF_RING_OUT));
}

#ifdef __cplusplus
}
#endif

#endif /* KVMM_UAPI_KVMM_H */
