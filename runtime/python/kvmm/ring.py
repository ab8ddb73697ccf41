# SPDX-License-Identifier: MIT
"""Asynchronous submission (kvmm_submit / kvmm_complete): queue one step's operations at once,
reap their completions later, matched by ``user_data``.  Preemption events from the daemon
arrive among the completions, with :attr:`Cqe.is_event` set."""
from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Sequence

from . import _args, _lib
from ._lib import lib
from .errors import KVMM_ELOST, KVMM_EPREEMPTED, KvmmError, check, make_error

CQE_F_EVENT = 1
CQE_F_GONE = 2  # with CQE_F_EVENT: the daemon went away (res -ENOTCONN), once per loss
MAX_INFLIGHT = 4096


class Op(enum.IntEnum):
    """enum kvmm_sqe_op: what an :class:`Sqe` asks for."""
    NOP = 0            #: a round trip; completes with res 0
    SEQ_CREATE = 1     #: arg: priority                 -> Cqe.seq
    SEQ_APPEND = 2     #: seq, data: tokens [, frames]  -> Cqe.nr_tokens
    SEQ_FORK = 3       #: seq (parent), arg: tokens to share (SEQ_ALL_TOKENS) -> Cqe.seq
    SEQ_TRUNCATE = 4   #: seq, arg: new length
    SEQ_FREE = 5       #: seq
    PREFIX_LOOKUP = 6  #: seq, data: tokens             -> Cqe.nr_tokens
    SEAL = 7           #: seq, arg: first block, nr: blocks
    PIN = 8            #: data: sequence ids            -> Cqe.nr_frames
    UNPIN = 9          #: data: sequence ids            -> Cqe.nr_frames
    SEQ_PROMPT = 10    #: data: tokens, arg: priority   -> Cqe.seq, .nr_blocks, .nr_tokens hit
    SEQ_SEAL_FREE = 11  #: seq, arg: first block, nr: blocks
    PIN_RANGE = 12     #: seq, arg: first block, nr: blocks -> Cqe.nr_frames (kvmm_pin_range)
    UNPIN_RANGE = 13   #: seq, arg: first block, nr: blocks -> Cqe.nr_frames


_TOKEN_OPS = (Op.SEQ_APPEND, Op.PREFIX_LOOKUP, Op.SEQ_PROMPT)
_SEQ_OPS = (Op.PIN, Op.UNPIN)


@dataclass
class Sqe:
    """One operation to submit (struct kvmm_sqe).  ``data`` is the token ids (SEQ_APPEND,
    PREFIX_LOOKUP, SEQ_PROMPT) or sequence ids (PIN, UNPIN); ``nr`` defaults to its length
    (SEAL, SEQ_SEAL_FREE, PIN_RANGE, UNPIN_RANGE: the number of blocks).  ``frames``: SEQ_APPEND's magazine frames for its new blocks.
    Everything is copied at submit."""

    op: Op
    seq: int = 0
    arg: int = 0
    data: Optional[Sequence[int]] = None
    nr: Optional[int] = None
    user_data: int = 0
    frames: Optional[Sequence[int]] = None


class Cqe(NamedTuple):
    """One completion (struct kvmm_cqe), or an event (``is_event``: PREEMPT, ``seq`` the
    preempted sequence, ``nr_frames`` the frames the daemon wants back)."""

    user_data: int
    res: int
    flags: int
    seq: int
    nr_tokens: int
    nr_blocks: int
    nr_frames: int

    @property
    def is_event(self) -> bool:
        return bool(self.flags & CQE_F_EVENT)

    @property
    def is_gone(self) -> bool:
        """The event that says the daemon went away (:meth:`kvmm.Client.reattach`)."""
        return bool(self.flags & CQE_F_EVENT and self.flags & CQE_F_GONE)

    @property
    def preempted(self) -> bool:
        """A PREEMPT event, or an operation that failed because its sequence was preempted
        (for lack of memory, or dropped because a page was corrupt: :attr:`lost`)."""
        return self.res in (-KVMM_EPREEMPTED, -KVMM_ELOST)

    @property
    def lost(self) -> bool:
        """The sequence was dropped because a swapped page failed its checksum
        (``-KVMM_ELOST``; a PREEMPT event of reason CORRUPT), not for lack of memory."""
        return self.res == -KVMM_ELOST

    def error(self) -> Optional[KvmmError]:
        """The exception for a failed operation (not raised), or None."""
        return make_error(self.res, "kvmm_complete") if self.res < 0 else None

    def check(self) -> "Cqe":
        """Raise the operation's error if it failed; else return self."""
        if self.res < 0:
            raise make_error(self.res, "kvmm_complete")
        return self


def _fill(c: _lib.Sqe, s: Sqe, keep: list) -> None:
    if not isinstance(s, Sqe):
        raise TypeError(f"sqes must be kvmm.Sqe, not {type(s).__name__}")
    op = Op(_args.u32("op", s.op)) if not isinstance(s.op, Op) else s.op
    c.op = op
    c.seq = _args.u64("seq", s.seq)
    c.arg = _args.u64("arg", s.arg)
    c.user_data = _args.u64("user_data", s.user_data)
    nr = 0
    if s.data is not None:
        code = "Q" if op in _SEQ_OPS else "I"
        arr, addr, nr = _args.int_array("data", s.data, code)
        keep.append(arr)
        c.data = addr
    elif op in _TOKEN_OPS or op in _SEQ_OPS:
        raise ValueError(f"{op.name} needs data")
    if s.nr is not None:
        nr = _args.u32("nr", s.nr)
        if s.data is not None and nr > len(s.data):
            raise ValueError("nr is larger than data")
    c.nr = nr
    if s.frames is not None:
        if op != Op.SEQ_APPEND:
            raise ValueError("frames are for SEQ_APPEND only")
        farr, faddr, nf = _args.int_array("frames", s.frames, "I")
        keep.append(farr)
        c.frames = ctypes.cast(faddr, _lib.u32p)
        if s.arg == 0:
            c.arg = nf


def submit(client: Any, sqes: Sequence[Sqe]) -> int:
    """See :meth:`kvmm.Client.submit`."""
    h = client._handle()
    if isinstance(sqes, Sqe):
        sqes = [sqes]
    n = len(sqes)
    if n == 0:
        return 0
    arr = (_lib.Sqe * n)()
    keep: list = []
    for i, s in enumerate(sqes):
        _fill(arr[i], s, keep)
    return check(lib.kvmm_submit(h, arr, n), "kvmm_submit", h)


def complete(client: Any, max: int = 64, min: int = 0) -> list[Cqe]:
    """See :meth:`kvmm.Client.complete`."""
    h = client._handle()
    mx = _args.u32("max", max)
    mn = _args.u32("min", min)
    if mx == 0:
        raise ValueError("max must be at least 1")
    if mn > mx:
        raise ValueError("min must not exceed max")
    buf = (_lib.Cqe * mx)()
    got = check(lib.kvmm_complete(h, buf, mx, mn), "kvmm_complete", h)
    return [Cqe(c.user_data, c.res, c.flags, c.seq, c.nr_tokens, c.nr_blocks, c.nr_frames)
            for c in buf[:got]]
