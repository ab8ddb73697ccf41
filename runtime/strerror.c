// SPDX-License-Identifier: MIT
/*
 * runtime/strerror.c - kvmm_strerror: the text for a status any libkvmm call returns. The
 * errno values that mean something particular on the kvmm wire (uapi/kvmm.h, "Errors") get a
 * sentence in kvmm's terms, so that "Protocol error" becomes a version mismatch an operator
 * can act on; kvmm's own codes above the errno space get theirs; every other errno falls back
 * to the C library's description. All strings are static: safe from any thread.
 */
#include <string.h>

#include "runtime/kvmm.h"

static const struct {
	int err;
	const char *text;
} kvmm_err_text[] = {
	{EPROTO, "libkvmm and kvmmd share no protocol (ABI) version: upgrade the older one"},
	{EBADMSG, "malformed kvmm message (bad magic, length, flags or reply payload)"},
	{EOPNOTSUPP, "operation not supported by this kvmmd (unknown opcode or feature)"},
	{EINVAL, "invalid argument (bad id, name, format, range or reserved field)"},
	{E2BIG, "request too large for one kvmm message, or block table row too short"},
	{ENOMEM, "out of KV frames even after reclaim (or out of memory)"},
	{ENOSPC, "a kvmm limit is reached (namespace maximum, swap slots, magazine)"},
	{EAGAIN, "kvmm is busy (reclaim in progress or ring full): try again"},
	{EACCES, "permission denied: admin verb without root or the admin group, or a namespace "
		 "not open to this user"},
	{EPERM, "operation on a sequence of another client or namespace"},
	{ENOENT, "no such sequence, namespace or kvmmd socket"},
	{EEXIST, "already attached (or already there)"},
	{EBUSY, "sequence busy: pinned, or its pages are in use"},
	{EIO, "kvmm I/O error (swap tier or backend); the operation did not happen"},
	{ENOTCONN, "not connected to kvmmd (the daemon went away, or the handle is detached)"},
	{EPIPE, "connection to kvmmd broken (the daemon went away)"},
	{ECONNREFUSED, "kvmmd is not running (connection refused on its socket)"},
	{EUSERS, "kvmmd refused the connection: this user holds max_clients_per_uid connections "
		 "already, or only the places kept for root and the admin group are left"},
	{ESHUTDOWN, "kvmmd is shutting down and takes no new work"},
	{ESTALE, "kvmmd restarted and the handle reattached: its sequences were lost "
		 "(kvmm_lost_seqs), the call was not done"},
	{EISCONN, "the handle is still connected to kvmmd (nothing to reattach)"},
	{ETIMEDOUT, "kvmmd did not answer in time (stopped or hung; $KVMM_DAEMON_TIMEOUT_MS): the "
		    "handle gave it up, its sequences are lost (kvmm_reattach; kvmm_conn_error "
		    "says more)"},
	{KVMM_EPREEMPTED, "the sequence was preempted by kvmmd; its KV cache is gone"},
	{KVMM_ELOST, "KV page content lost: a swapped page failed its checksum (or a swap I/O "
		     "error, a poisoned page); the sequence was dropped, recompute it"},
};

const char *kvmm_strerror(int err)
{
	const char *s;

	if (err < 0)
		err = -err;
	if (err == 0)
		return "success";
	for (size_t i = 0; i < sizeof(kvmm_err_text) / sizeof(kvmm_err_text[0]); i++)
		if (kvmm_err_text[i].err == err)
			return kvmm_err_text[i].text;
	if (err >= KVMM_ERRNO_BASE && err <= KVMM_ERRNO_MAX)
		return "unknown kvmm error (from a newer kvmmd?)";
	s = strerrordesc_np(err);
	return s ? s : "unknown error";
}
