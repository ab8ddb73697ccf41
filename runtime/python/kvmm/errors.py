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
    if err in _GONE and call not in _OPENS:
        return KvmmDaemonGone
    if err == _errno.ESTALE and call not in _OPENS:
        return KvmmReattached
    if err in _GONE or (call in _OPENS and err in _NO_DAEMON_AT_ATTACH):
        return NoDaemonError
    return KvmmError


def make_error(status: int, call: str = "") -> KvmmError:
    """The exception for a libkvmm status (negative or positive errno), with kvmm's text."""
    from . import _lib

    err = abs(int(status))
    return error_class(err, call)(err, _lib.strerror(err), call)


def check(status: int, call: str) -> int:
    """Return ``status`` when it is not negative, else raise the matching :class:`KvmmError`."""
    if status < 0:
        raise make_error(status, call)
    return status
