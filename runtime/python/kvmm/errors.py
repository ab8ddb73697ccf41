# SPDX-License-Identifier: MIT
"""Exceptions of the kvmm package.

libkvmm returns 0 or a negative errno from every call; :func:`check` turns a negative status
into a :class:`KvmmError` (an :class:`OSError`, so ``err.errno`` and ``err.strerror`` are
there, the latter in kvmm's own words from ``kvmm_strerror``).  The subclasses are the cases an
engine handles differently: a preempted sequence (recompute it), a namespace out of memory
(wait or preempt), no daemon (retry later), a daemon that went away while attached (reattach)
and a client that reattached on its own (recompute what was lost).

Misuse that never reaches C raises Python's usual exceptions instead: :class:`TypeError` for a
wrong type, :class:`ValueError` for a value out of range or a closed handle.
"""
from __future__ import annotations

import errno as _errno

#: kvmm's own error codes (uapi/kvmm.h): beyond the errno range.
KVMM_ERRNO_BASE = 4096
KVMM_EPREEMPTED = KVMM_ERRNO_BASE + 1
KVMM_ELOST = KVMM_ERRNO_BASE + 2


class KvmmError(OSError):
    """A libkvmm call failed.  ``errno`` is the positive error code (``errno.ENOENT``,
    :data:`KVMM_EPREEMPTED`, ...), ``strerror`` kvmm's text for it, ``call`` the C call."""

    #: Why the handle cannot talk to kvmmd when the call failed for that reason
    #: (kvmm_conn_error): the positive errno of the cause and its one-line message, else
    #: 0 and "".  E.g. ENOENT "cannot connect to kvmmd at PATH: ..." behind a reattach's
    #: ETIMEDOUT, or ETIMEDOUT "kvmmd (pid N) did not answer in 500 ms: it is stopped ...".
    cause_errno = 0
    cause = ""

    def __init__(self, err: int, message: str, call: str = "") -> None:
        super().__init__(err, message)
        self.call = call

    def __str__(self) -> str:
        where = f"{self.call}: " if self.call else ""
        return f"{where}{self.strerror} (errno {self.errno})"


class PreemptedError(KvmmError):
    """The sequence was preempted by the daemon (``-KVMM_EPREEMPTED``): its KV is gone and the
    engine must recompute it (or free it).  ``reason``: ``"oom"`` (the daemon needed the
    frames), or ``"corrupt"`` for :class:`PageLostError`."""

    reason = "oom"


class OutOfMemoryError(KvmmError):
    """The namespace has no frame left (``-ENOMEM``)."""


class NoDaemonError(KvmmError):
    """No kvmmd listens at the socket (``-ENOENT``/``-ECONNREFUSED`` at attach), or the daemon
    went away (``-ENOTCONN``/``-EPIPE`` later)."""


class KvmmDaemonGone(NoDaemonError):
    """The daemon went away while this client was attached (``-ENOTCONN``: its socket hung
    up, killed or stopped): every call fails so until :meth:`kvmm.Client.reattach`, which
    reconnects when kvmmd is back and returns the sequences that were lost with it."""


class KvmmDaemonStalled(KvmmDaemonGone):
    """``-ETIMEDOUT`` from a call: kvmmd said nothing for the handle's deadline
    (``daemon_timeout`` at attach, ``$KVMM_DAEMON_TIMEOUT_MS``, 30 s by default) - stopped
    (SIGSTOP, a debugger) or hung - and the handle gave it up, as if it had died: its
    sequences are lost (the daemon frees the session when it runs again), every call fails
    until :meth:`kvmm.Client.reattach` (or ``reattach=True``) once it answers again.  The
    message (``cause``) names the daemon's pid and state."""


class KvmmReattached(KvmmError):
    """``-ESTALE``: a client attached with ``reattach=True`` found kvmmd back and reattached
    on this call, which was not done.  Its sequences died with the old daemon:
    :meth:`kvmm.Client.lost_seqs` lists them, to recompute."""


class PageLostError(PreemptedError):
    """A page's content was lost (``-KVMM_ELOST``): a swapped page of the sequence failed its
    checksum when it came back (the host or file swap tier held other bytes than were
    written), a poisoned frame.  The daemon dropped the sequence, as it drops a preempted
    one but not for lack of memory; a subclass of :class:`PreemptedError` because the engine
    does the same (free it, recompute it), ``reason`` says which: ``"corrupt"``."""

    reason = "corrupt"


_GONE = (_errno.ENOTCONN, _errno.EPIPE)
#: What a call returns when its handle cannot talk to kvmmd: the ones that carry a cause.
_CONN_ERRORS = (_errno.ENOTCONN, _errno.EPIPE, _errno.ETIMEDOUT, _errno.ESTALE, _errno.EPROTO,
                _errno.EACCES, _errno.ENOENT, _errno.ECONNREFUSED, _errno.EUSERS,
                _errno.ESHUTDOWN, _errno.EINVAL)
_NO_DAEMON_AT_ATTACH = (_errno.ENOENT, _errno.ECONNREFUSED)
_OPENS = ("kvmm_attach", "kvmm_admin_open")


def error_class(err: int, call: str = "") -> type[KvmmError]:
    """The exception class for the positive error code ``err`` raised by ``call``."""
    if err == KVMM_EPREEMPTED:
        return PreemptedError
    if err == KVMM_ELOST:
        return PageLostError
    if err == _errno.ENOMEM:
        return OutOfMemoryError
    if err == _errno.ETIMEDOUT and call not in _OPENS + ("kvmm_reattach",):
        return KvmmDaemonStalled
    if err in _GONE and call not in _OPENS:
        return KvmmDaemonGone
    if err == _errno.ESTALE and call not in _OPENS:
        return KvmmReattached
    if err in _GONE or (call in _OPENS and err in _NO_DAEMON_AT_ATTACH):
        return NoDaemonError
    return KvmmError


def conn_error(handle) -> tuple[int, str]:
    """kvmm_conn_error of a client handle: (positive errno, message), (0, "") when there is
    no cause (or this libkvmm cannot tell)."""
    from . import _lib

    if handle is None or not _lib.has("kvmm_conn_error"):
        return 0, ""
    import ctypes
    buf = ctypes.create_string_buffer(256)
    err = _lib.lib.kvmm_conn_error(handle, buf, len(buf))
    return (-err, buf.value.decode("utf-8", "replace")) if err < 0 else (0, "")


def make_error(status: int, call: str = "", handle=None) -> KvmmError:
    """The exception for a libkvmm status (negative or positive errno), with kvmm's text;
    with the client ``handle`` the call used, a call that failed because the handle cannot
    talk to kvmmd also says why (``cause_errno``, ``cause``, appended to the message)."""
    from . import _lib

    err = abs(int(status))
    e = error_class(err, call)(err, _lib.strerror(err), call)
    if handle is not None and err in _CONN_ERRORS:
        cerr, msg = conn_error(handle)
        if cerr:
            e.cause_errno, e.cause = cerr, msg
            if msg:
                e.strerror = f"{e.strerror}: {msg}"
    return e


def check(status: int, call: str, handle=None) -> int:
    """Return ``status`` when it is not negative, else raise the matching :class:`KvmmError`
    (``handle``: the client handle of the call, for the cause of a connection error)."""
    if status < 0:
        raise make_error(status, call, handle)
    return status
