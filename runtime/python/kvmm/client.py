# SPDX-License-Identifier: MIT
"""A handle on kvmmd: attach/detach, sequences, the prefix cache, batches (pin, unpin,
prefetch, block tables) and the magazine.  One method per libkvmm call, named after it.

Sequence ids are plain ints (uint64).  Token ids are ints in [0, 2**32).  Every method raises
:class:`kvmm.KvmmError` (or a subclass) with the errno and kvmm's message when the C call
fails, :class:`TypeError`/:class:`ValueError` on bad arguments before calling C, and
:class:`ValueError` on a closed handle.
"""
from __future__ import annotations

import ctypes
import errno as _errno
import os
import sys
import weakref
from ctypes import byref, c_uint32, c_uint64, c_void_p
from typing import Any, Optional, Sequence, Union

from . import _args, _lib
from ._lib import lib
from .errors import KvmmError, check, make_error
from .format import Format, PageLayout

SEQ_ALL_TOKENS = _args.U64_MAX
PIN_FAR_MAX = _lib.PIN_FAR_MAX  # KVMM_PIN_FAR_MAX: the most blocks one pin_far pins
BLOCK_NONE = -1
DEVICE_NONE = _args.U32_MAX

# a list of ints, an array.array (used in place when of the C type), a 1-D integer numpy
# array or CPU tensor
IntSeq = Union[Sequence[int], Any]


class _Session(c_void_p):
    """The C handle (a ``c_void_p``, passed to C as it is).  kvmm_detach runs when the last
    holder lets go: the Client, a call in progress (its local reference, so closing a handle
    in one thread while another thread's call runs on it never frees it under that call), or
    a view of the pool (which must not outlive the mapping)."""

    def __init__(self, handle: int) -> None:
        super().__init__(handle)
        weakref.finalize(self, lib.kvmm_detach, c_void_p(handle))


class Client:
    """An attached libkvmm handle (``kvmm_client_t``).  Use :func:`kvmm.attach`.

    A context manager: ``with kvmm.attach(...) as c:`` detaches at the end.  Not to be used
    in a child after ``fork()`` (attach again there): every call checks the pid.
    """

    def __init__(self, socket_path: Optional[str] = None, ns: str = "default",
                 fmt: Optional[Format] = None, *, wprotect: bool = True,
                 model: Union[bytes, str, None] = None, reattach: bool = False,
                 daemon_timeout: Optional[float] = None) -> None:
        if fmt is None:
            raise TypeError("attach needs a fmt (kvmm.Format)")
        if not isinstance(fmt, Format):
            raise TypeError(f"fmt must be a kvmm.Format, not {type(fmt).__name__}")
        if not isinstance(ns, str):
            raise TypeError(f"ns must be a str, not {type(ns).__name__}")
        if socket_path is not None and not isinstance(socket_path, (str, os.PathLike)):
            raise TypeError(f"socket_path must be a str or None, not {type(socket_path).__name__}")
        nsb = ns.encode()
        if not nsb or b"\0" in nsb:
            raise ValueError("ns must be a non-empty name without NUL")
        sockb = os.fsencode(socket_path) if socket_path is not None else None
        if sockb is not None and b"\0" in sockb:
            raise ValueError("socket_path contains NUL")
        cfmt = _lib.Format(fmt.layers, fmt.kv_heads, fmt.head_dim, fmt.dtype, fmt.quant_group, 0)
        h = c_void_p()
        if not isinstance(wprotect, bool):
            raise TypeError(f"wprotect must be a bool, not {type(wprotect).__name__}")
        modelb = _identity("model", model, _lib.MODEL_ID_MAX)
        if not isinstance(reattach, bool):
            raise TypeError(f"reattach must be a bool, not {type(reattach).__name__}")
        if reattach and not _lib.has("kvmm_reattach"):
            raise KvmmError(_errno.EOPNOTSUPP, "this libkvmm cannot reattach", "kvmm_attach_ex")
        deadline_ms = _deadline_ms(daemon_timeout)
        if wprotect and not modelb and not reattach and not deadline_ms:
            err = lib.kvmm_attach(sockb, nsb, byref(cfmt), byref(h))
        else:
            if not _lib.has("kvmm_attach_ex"):
                raise KvmmError(_errno.EOPNOTSUPP, "this libkvmm has no kvmm_attach_ex "
                                "(model identity, wprotect=False)", "kvmm_attach_ex")
            opts = _lib.AttachOpts()
            opts.flags = (0 if wprotect else _lib.ATTACH_NO_WPROTECT) | \
                (_lib.ATTACH_REATTACH if reattach else 0)
            opts.daemon_timeout_ms = deadline_ms
            buf = ctypes.create_string_buffer(modelb, len(modelb)) if modelb else None
            if buf is not None:
                opts.model = ctypes.cast(buf, c_void_p)
                opts.model_len = len(modelb)
            err = lib.kvmm_attach_ex(sockb, nsb, byref(cfmt), byref(opts), byref(h))
        if err < 0:
            e = make_error(err, "kvmm_attach")
            if err == -_errno.ENOENT and os.path.exists(_socket_path(socket_path)):
                # the daemon is there: the namespace is what does not exist
                e = KvmmError(_errno.ENOENT, f"no namespace {ns!r} at this kvmmd",
                              "kvmm_attach")
            if err == -_errno.ENODEV:
                why = lib.kvmm_cuda_map_why()
                if why:
                    e.strerror = f"{e.strerror}: {why.decode('utf-8', 'replace')}"
            raise e
        self._session: Optional[_Session] = _Session(h.value)
        self._pid = os.getpid()
        self._reattach = reattach
        self.fmt = fmt
        self.ns = ns
        self._init_props()

    def _init_props(self) -> None:
        """The pool's properties, from libkvmm (at attach, and again after a reattach)."""
        h = self._session
        fmt = self.fmt
        self.page_size: int = lib.kvmm_page_size(h)
        self.tokens_per_page: int = lib.kvmm_tokens_per_page(h)
        self.bytes_per_token: int = lib.kvmm_bytes_per_token(h)
        self.nr_frames: int = lib.kvmm_nr_frames(h)
        self.nr_devices: int = lib.kvmm_nr_devices(h)
        self.device_index: int = lib.kvmm_device_index(h)
        self.layout = PageLayout.of(fmt, self.page_size)
        if (self.layout.tokens_per_page != self.tokens_per_page or
                self.layout.token_bytes != self.bytes_per_token):
            self.close()
            raise RuntimeError("kvmm: this package's page layout disagrees with libkvmm's "
                               f"({self.layout.tokens_per_page} vs {self.tokens_per_page} "
                               "tokens per page): package and library do not match")
        self._views: dict = {}
        for v in getattr(self, "_far_views", {}).values():
            v._void()  # a reattach (or close) unmapped the window
        self._far_views: dict = {}
        self._far: Optional[tuple] = None  # the window kvmm_far_map mapped last

    # ---- the handle -------------------------------------------------------------------

    def _handle(self) -> _Session:
        """The handle for one call; the caller keeps it in a local for the call's length."""
        h = self._session
        if h is None:
            raise ValueError("kvmm client is closed")
        if self._pid != os.getpid():
            raise ValueError("kvmm client was attached in another process (after fork(): "
                             "attach again in the child)")
        return h

    @property
    def write_protected(self) -> bool:
        """Whether the pool's pages are write-protected in this process (kvmm_write_protected):
        then only this handle's own unsealed pages (those :meth:`block_table` showed it after
        an append, magazine frames it took) are writable, and a write through a view into any
        other frame (a sealed or shared prefix page, another client's page) is a SIGSEGV that
        ends the process (in GPU memory: the write faults this process's CUDA context,
        ``CUDA_ERROR_ILLEGAL_ADDRESS``, and the context is unusable).  False with
        ``attach(..., wprotect=False)``, $KVMM_WPROTECT=0, or a pool in GPU memory whose page
        size is not a whole number of 2 MiB mapping granules."""
        h = self._handle()
        return bool(_lib.has("kvmm_write_protected") and lib.kvmm_write_protected(h))

    @property
    def closed(self) -> bool:
        return self._session is None

    def close(self) -> None:
        """Detach (kvmm_detach): the daemon frees this handle's sequences and pins.  The pool
        stays mapped, and the session open, until the last view of it (:meth:`views`) is
        gone too.  Closing twice is fine."""
        self._views = {}
        self._far_views, self._far = {}, None  # the window stays until the detach, as views
        self._session = None

    def __enter__(self) -> "Client":
        self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._session is None else f"{self.nr_frames} frames"
        return f"<kvmm.Client ns={self.ns!r} {state}>"

    # ---- when kvmmd goes away (reattach.c) --------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the handle can talk to kvmmd (kvmm_connected): False once a call found the
        daemon gone (:class:`kvmm.KvmmDaemonGone`) until :meth:`reattach`."""
        h = self._handle()
        return bool(lib.kvmm_connected(h)) if _lib.has("kvmm_connected") else True

    def conn_error(self) -> tuple[int, str]:
        """Why the handle cannot talk to kvmmd, or why its last reattach attempt failed
        (kvmm_conn_error): ``(errno, message)``, e.g. ``(errno.ETIMEDOUT, "kvmmd (pid 42)
        did not answer in 500 ms: it is stopped ...")`` or ``(errno.ENOENT, "cannot connect
        to kvmmd at PATH: ...")``; ``(0, "")`` when connected.  The errors of calls that
        failed for that reason carry the same as ``cause_errno`` and ``cause``."""
        from .errors import conn_error
        return conn_error(self._handle())

    def reattach(self, timeout: Optional[float] = 30.0) -> list[int]:
        """Attach again to the kvmmd at the same socket (kvmm_reattach) after the daemon went
        away and came back, with the same namespace, format, model identity and options,
        retrying until ``timeout`` seconds have passed (None: no limit; 0: one try).  Returns
        the old ids of the sequences lost with the old daemon, for the engine to recompute:
        an old id means nothing afterwards (the new daemon may reuse it).  The views made
        before are void: :meth:`views` makes new ones over the new pool (the page size and
        frame count may have changed too).  KvmmError ETIMEDOUT when no daemon answered in
        time (call again later; its ``cause_errno`` and ``cause`` say what the last attempt
        met: no socket, nobody listening, a daemon that did not answer), EISCONN when the
        handle is still connected, or the refusal of a daemon that answered (EPROTO,
        EACCES, ...)."""
        h = self._handle()
        if not _lib.has("kvmm_reattach"):
            raise KvmmError(_errno.EOPNOTSUPP, "this libkvmm cannot reattach", "kvmm_reattach")
        if timeout is None:
            ms = -1
        else:
            if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0:
                raise ValueError(f"timeout must be seconds >= 0 or None, not {timeout!r}")
            ms = min(int(timeout * 1000), 2**31 - 1)
        check(lib.kvmm_reattach(h, ms), "kvmm_reattach", h)
        return self.lost_seqs()

    def lost_seqs(self) -> list[int]:
        """The old ids of the sequences the last reattach reported lost (kvmm_lost_seqs);
        after a :class:`kvmm.KvmmReattached` error, the list to recompute.  Also takes the new
        pool's properties (page_size, nr_frames, ...) and drops the views made before."""
        h = self._handle()
        self._init_props()
        n = check(lib.kvmm_lost_seqs(h, None, 0), "kvmm_lost_seqs", h)
        arr = (c_uint64 * max(n, 1))()
        n = check(lib.kvmm_lost_seqs(h, arr, n), "kvmm_lost_seqs", h)
        return list(arr[:n])

    # ---- the pool ---------------------------------------------------------------------

    def frame_addr(self, frame: int) -> int:
        """Host address of ``frame`` (kvmm_frame_addr).  KvmmError EOPNOTSUPP for a pool in
        GPU memory, EINVAL for a frame past the pool."""
        h = self._handle()
        addr = lib.kvmm_frame_addr(h, _args.u32("frame", frame))
        if not addr:
            raise make_error(-(ctypes.get_errno() or _errno.EINVAL), "kvmm_frame_addr")
        return addr

    def frame_devptr(self, frame: int) -> int:
        """Device address of ``frame`` for a pool in GPU memory (kvmm_frame_devptr).
        KvmmError EOPNOTSUPP for a pool in host memory."""
        h = self._handle()
        ptr = lib.kvmm_frame_devptr(h, _args.u32("frame", frame))
        if not ptr:
            raise make_error(-(ctypes.get_errno() or _errno.EINVAL), "kvmm_frame_devptr")
        return ptr

    @property
    def backend(self) -> str:
        """Where this handle's pool lives: "host", "cuda", or "none" (a cuda-backend pool
        this process does not map: $KVMM_CUDA_DEVICE=none)."""
        h = self._handle()
        if self.device_index == DEVICE_NONE:
            return "none"
        if lib.kvmm_frame_addr(h, 0):
            return "host"
        return "cuda" if lib.kvmm_frame_devptr(h, 0) else "none"

    # ---- sequences --------------------------------------------------------------------

    def seq_create(self, priority: int = 0) -> int:
        """A new empty sequence (kvmm_seq_create); ``priority`` orders reclaim (lower goes
        first).  Returns its id."""
        h = self._handle()
        seq = c_uint64()
        check(lib.kvmm_seq_create(h, _args.integer("priority", priority, -(1 << 31),
                                                   (1 << 31) - 1), byref(seq)),
              "kvmm_seq_create", h)
        return seq.value

    def seq_append(self, seq: int, tokens: IntSeq) -> int:
        """Append token ids to ``seq``, allocating pages (kvmm_seq_append).  Returns the new
        length in tokens."""
        h = self._handle()
        seq = _args.u64("seq", seq)
        arr, addr, n = _args.int_array("tokens", tokens, "I")
        if n > _args.U32_MAX:
            raise ValueError("too many tokens in one append")
        length = c_uint64()
        check(lib.kvmm_seq_append(h, seq, ctypes.cast(addr, _lib.u32p), n, byref(length)),
              "kvmm_seq_append", h)
        return length.value

    def seq_append_frames(self, seq: int, tokens: IntSeq, frames: IntSeq) -> int:
        """Append tokens whose new pages are ``frames`` taken with :meth:`mag_alloc`
        (kvmm_seq_append_frames): frames[i] becomes block B + i, B the block count before.
        Returns the new length in tokens."""
        h = self._handle()
        seq = _args.u64("seq", seq)
        tarr, taddr, n = _args.int_array("tokens", tokens, "I")
        farr, faddr, nf = _args.int_array("frames", frames, "I")
        length = c_uint64()
        check(lib.kvmm_seq_append_frames(h, seq, ctypes.cast(taddr, _lib.u32p), n,
                                         ctypes.cast(faddr, _lib.u32p), nf, byref(length)),
              "kvmm_seq_append_frames", h)
        return length.value

    def seq_fork(self, parent: int, nr_tokens: Optional[int] = None) -> int:
        """A new sequence sharing ``parent``'s first ``nr_tokens`` tokens (None: all of them),
        copy-on-write (kvmm_seq_fork).  Returns the child's id."""
        h = self._handle()
        n = SEQ_ALL_TOKENS if nr_tokens is None else _args.u64("nr_tokens", nr_tokens)
        child = c_uint64()
        check(lib.kvmm_seq_fork(h, _args.u64("parent", parent), n, byref(child)),
              "kvmm_seq_fork", h)
        return child.value

    def seq_truncate(self, seq: int, nr_tokens: int) -> None:
        """Shorten ``seq`` to ``nr_tokens`` tokens (kvmm_seq_truncate)."""
        h = self._handle()
        check(lib.kvmm_seq_truncate(h, _args.u64("seq", seq), _args.u64("nr_tokens", nr_tokens)),
              "kvmm_seq_truncate", h)

    def seq_free(self, seq: int) -> None:
        """Free ``seq`` and its pages; sealed pages stay cached (kvmm_seq_free)."""
        h = self._handle()
        check(lib.kvmm_seq_free(h, _args.u64("seq", seq)), "kvmm_seq_free", h)

    # ---- prefix cache -----------------------------------------------------------------

    def prefix_lookup(self, seq: int, tokens: IntSeq, *,
                      salt: Union[bytes, str, None] = None) -> int:
        """Map into ``seq`` the longest cached run of full pages matching ``tokens``
        (kvmm_prefix_lookup).  Returns the tokens mapped (a multiple of tokens_per_page); the
        caller appends the rest.  ``salt`` (bytes or str, like vLLM's cache_salt;
        kvmm_prefix_lookup_salt) keys the sequence's pages apart from those of other salts:
        it is the sequence's from then on."""
        h = self._handle()
        seq = _args.u64("seq", seq)
        saltb = _identity("salt", salt, _lib.SALT_MAX)
        arr, addr, n = _args.int_array("tokens", tokens, "I")
        hit = c_uint64()
        if saltb is None:
            check(lib.kvmm_prefix_lookup(h, seq, ctypes.cast(addr, _lib.u32p), n, byref(hit)),
                  "kvmm_prefix_lookup", h)
        else:
            check(lib.kvmm_prefix_lookup_salt(h, seq, ctypes.cast(addr, _lib.u32p), n, saltb,
                                              len(saltb), byref(hit)),
                  "kvmm_prefix_lookup_salt", h)
        return hit.value

    def seal(self, seq: int, block: int = 0, nr_blocks: int = 0, *,
             salt: Union[bytes, str, None] = None) -> None:
        """Seal the full pages of ``seq`` among blocks [block, block + nr_blocks) (0: all
        from block on) into the prefix cache (kvmm_seal).  Write their KV first.  ``salt``:
        as in :meth:`prefix_lookup` (kvmm_seal_salt)."""
        h = self._handle()
        seq = _args.u64("seq", seq)
        block, nr_blocks = _args.u32("block", block), _args.u32("nr_blocks", nr_blocks)
        saltb = _identity("salt", salt, _lib.SALT_MAX)
        if saltb is None:
            check(lib.kvmm_seal(h, seq, block, nr_blocks), "kvmm_seal", h)
        else:
            check(lib.kvmm_seal_salt(h, seq, block, nr_blocks, saltb, len(saltb)),
                  "kvmm_seal_salt", h)

    # ---- a request's flow in one call each -------------------------------------------

    def seq_prompt(self, tokens: IntSeq, priority: int = 0,
                   max_blocks: Optional[int] = None, out: Any = None, *,
                   like: str = "torch") -> tuple[int, int, Any]:
        """A request's start in one round trip (kvmm_seq_prompt): a new sequence with
        ``priority``, the cached run of ``tokens``' full pages mapped, the rest appended.
        Returns ``(seq, hit, table)``: the new sequence, the tokens that came from the cache
        (a multiple of tokens_per_page) and its block table row (as :meth:`block_table`
        makes or fills one: ``out`` of shape ``[1, max_blocks]``, or a new one of
        ``max_blocks`` columns; None when neither is given).  All or nothing: on
        KvmmError no sequence is left (except E2BIG from a row too short, raised after the
        sequence was made: it is then in ``err.seq``)."""
        h = self._handle()
        arr, addr, n = _args.int_array("tokens", tokens, "I")
        if n > _args.U32_MAX:
            raise ValueError("too many tokens in one prompt")
        prio = _args.integer("priority", priority, -(1 << 31), (1 << 31) - 1)
        seq, hit = c_uint64(), c_uint64()
        ptr, mb = None, 0
        if out is None and max_blocks is not None:
            out = _new_int32((1, _args.u32("max_blocks", max_blocks)), like)
        if out is not None:
            ptr, mb = _table_ptr(out, 1, max_blocks)
        err = lib.kvmm_seq_prompt(h, ctypes.cast(addr, _lib.u32p), n, prio, byref(seq),
                                  byref(hit), ptr, mb)
        if err < 0:
            e = make_error(err, "kvmm_seq_prompt", h)
            if err == -_errno.E2BIG and seq.value:
                e.seq = seq.value
            raise e
        return seq.value, hit.value, out

    def seq_seal_free(self, seq: int, block: int = 0, nr_blocks: int = 0) -> None:
        """A request's end in one round trip (kvmm_seq_seal_free): seal the full pages of
        ``seq`` among blocks [block, block + nr_blocks) (0: all from block on), then free it.
        A seal that fails frees nothing."""
        h = self._handle()
        check(lib.kvmm_seq_seal_free(h, _args.u64("seq", seq), _args.u32("block", block),
                                     _args.u32("nr_blocks", nr_blocks)),
              "kvmm_seq_seal_free", h)

    # ---- batches ----------------------------------------------------------------------

    def _batch(self, fn: Any, name: str, seqs: IntSeq) -> int:
        h = self._handle()
        arr, addr, n = _args.int_array("seqs", _args.seqs_of(seqs), "Q")
        nr = c_uint32()
        err = fn(h, addr, n, byref(nr))
        if err < 0:
            raise make_error(err, name, h)
        return nr.value

    def pin(self, seqs: IntSeq) -> int:
        """Make every page of ``seqs`` resident and keep reclaim off them (kvmm_pin).
        Returns the frames pinned."""
        return self._batch(lib.kvmm_pin, "kvmm_pin", seqs)

    def unpin(self, seqs: IntSeq) -> int:
        """Undo :meth:`pin` (kvmm_unpin).  Returns the frames unpinned."""
        return self._batch(lib.kvmm_unpin, "kvmm_unpin", seqs)

    def pin_range(self, seq: int, block: int, nr_blocks: int, *, prefetch: bool = False
                  ) -> int:
        """Pin blocks [block, block + nr_blocks) of ``seq`` only (kvmm_pin_range): they are
        made resident (swapped ones read back, room made by reclaiming elsewhere, the
        sequence's other blocks included) and kept so until :meth:`unpin_range` of the same
        range.  For attention over a sequence that does not fit, one chunk at a time.
        ``prefetch``: also start reading back the next ``nr_blocks`` blocks.  While a range
        is pinned the sequence cannot change (BusyError).  Returns the frames pinned."""
        h = self._handle()
        nr = c_uint32()
        err = lib.kvmm_pin_range(h, _args.u64("seq", seq), _args.u32("block", block),
                                 _args.u32("nr_blocks", nr_blocks),
                                 _lib.PIN_RANGE_F_PREFETCH if prefetch else 0, byref(nr))
        if err < 0:
            raise make_error(err, "kvmm_pin_range")
        return nr.value

    def unpin_range(self, seq: int, block: int, nr_blocks: int) -> int:
        """End the latest :meth:`pin_range` of exactly that range (kvmm_unpin_range).
        Returns the frames unpinned."""
        h = self._handle()
        nr = c_uint32()
        err = lib.kvmm_unpin_range(h, _args.u64("seq", seq), _args.u32("block", block),
                                   _args.u32("nr_blocks", nr_blocks), byref(nr))
        if err < 0:
            raise make_error(err, "kvmm_unpin_range")
        return nr.value

    # ---- far reads: host-tier pages read where they lie ---------------------------------

    def far_map(self) -> tuple[int, int, int]:
        """Map (or map again) the far window, read-only (kvmm_far_map): the pool's frames
        [0, far_base), then the pages of kvmmd's host-memory swap tier, one after the other,
        laid out like the pool.  Returns ``(address, nr_pages, far_base)``.  The window made
        by the previous call is unmapped: the views :meth:`far_views` made over it are
        emptied.  KvmmError EOPNOTSUPP: a daemon (or this libkvmm) without far reads, or a
        pool in GPU memory; ENODEV: the namespace has no host swap tier."""
        h = self._handle()
        if not _lib.has("kvmm_far_map"):
            raise KvmmError(_errno.EOPNOTSUPP, "this libkvmm has no far reads (kvmm_far_map)",
                            "kvmm_far_map")
        if self.backend != "host":
            raise KvmmError(_errno.EOPNOTSUPP, "far reads need a pool in host memory (this "
                            f"handle's is {self.backend!r})", "kvmm_far_map")
        base, nr_pages, far_base = c_void_p(), c_uint64(), c_uint32()
        err = lib.kvmm_far_map(h, byref(base), byref(nr_pages), byref(far_base))
        old, self._far_views, self._far = self._far_views, {}, None
        for v in old.values():
            v._void()  # the old window is gone (or may be: a failed map)
        if err < 0:
            raise self._far_error(err, "kvmm_far_map", h)
        self._far = (base.value or 0, nr_pages.value, far_base.value)
        return self._far

    def far_views(self, kind: str = "torch", *, remap: bool = False) -> Any:
        """Zero-copy views of the far window (:class:`kvmm.PoolViews` with ``nr_frames`` the
        window's pages and a ``far_base`` attribute), mapping it first (:meth:`far_map`)
        when it is not mapped yet, or again with ``remap`` (after a :meth:`pin_far` that
        raised ESTALE: the host tier changed).  Cached per kind until the next map.  The
        paged kernels read a sequence pinned with :meth:`pin_far` through them, its entries
        as block table, exactly as they read the pool through :meth:`views`; write through
        :meth:`views` (the window is read-only: a write through it is a SIGSEGV).  Errors:
        as :meth:`far_map`."""
        self._handle()
        if kind not in ("torch", "numpy"):
            raise ValueError(f"kind must be 'torch' or 'numpy', not {kind!r}")
        if remap or self._far is None:
            self.far_map()
        v = self._far_views.get(kind)
        if v is None:
            from .views import PoolViews
            addr, nr_pages, far_base = self._far
            v = PoolViews.far(self, addr, nr_pages, far_base, kind)
            self._far_views[kind] = v
        return v

    def pin_far(self, seq: int, block: int, nr_blocks: int, out: Any = None, *,
                like: str = "torch") -> tuple[Any, int]:
        """Pin blocks [block, block + nr_blocks) of ``seq`` as :meth:`pin_range` does,
        except that a sealed page swapped to the host tier stays there, its slot pinned
        instead (kvmm_pin_far).  Returns ``(entries, nr_far)``: ``entries[i]`` is block
        ``block + i``'s page in the far window (:meth:`far_views`), a frame below
        ``far_base`` or ``far_base + slot``; ``nr_far`` how many lie in the host tier.
        ``entries``: ``out`` filled in place (a contiguous CPU int32 array of ``nr_blocks``
        entries, torch or numpy: a block-table row's slice will do), else a new
        ``torch.int32`` tensor (``like="numpy"``: a numpy int32 array).  Without a mapped
        window every entry is a frame.  End it with :meth:`unpin_range` of the same range.
        KvmmError ESTALE: the host tier changed since the window was mapped (call
        ``far_views(remap=True)``; a client attached with ``reattach=True`` gets
        :class:`kvmm.KvmmReattached` instead, as from any call: either may be meant);
        E2BIG: more than ``kvmm.PIN_FAR_MAX`` blocks (pin in parts); EOPNOTSUPP: no far
        reads here; else as :meth:`pin_range` (PreemptedError, OutOfMemoryError, ...)."""
        h = self._handle()
        if not _lib.has("kvmm_pin_far"):
            raise KvmmError(_errno.EOPNOTSUPP, "this libkvmm has no far reads (kvmm_pin_far)",
                            "kvmm_pin_far")
        seq = _args.u64("seq", seq)
        block, nr_blocks = _args.u32("block", block), _args.u32("nr_blocks", nr_blocks)
        if out is None:
            out = _new_int32((nr_blocks,), like)
        ptr = _vec_ptr(out, nr_blocks)
        nr_far = c_uint32()
        err = lib.kvmm_pin_far(h, seq, block, nr_blocks, ctypes.cast(ptr, _lib.i32p),
                               byref(nr_far))
        if err < 0:
            raise self._far_error(err, "kvmm_pin_far", h)
        return out, nr_far.value

    def _far_error(self, err: int, call: str, h: Any) -> KvmmError:
        """The far calls' error: their ESTALE (the host tier changed: map again) is no
        reattach unless this handle reattaches on its own."""
        if err == -_errno.ESTALE and not self._reattach:
            return KvmmError(_errno.ESTALE, "the host swap tier changed since the far window "
                             "was mapped (far_views(remap=True))", call)
        return make_error(err, call, h)

    def prefetch(self, seqs: IntSeq) -> int:
        """Start reading back the swapped pages of ``seqs`` (kvmm_prefetch).  Returns the
        pages whose reads began."""
        return self._batch(lib.kvmm_prefetch, "kvmm_prefetch", seqs)

    def block_table(self, seqs: IntSeq, max_blocks: Optional[int] = None,
                    out: Any = None, *, like: str = "torch") -> Any:
        """The batch's block table (kvmm_block_table): row i holds the frames of seqs[i]'s
        blocks, then :data:`BLOCK_NONE` (-1).

        ``out``: a C-contiguous int32 array of shape ``[len(seqs), max_blocks]`` on the CPU,
        a ``torch.Tensor`` or a numpy array, filled in place (no allocation: the hot-path
        form).  Without ``out`` a new one is made, a ``torch.int32`` tensor (``like="torch"``)
        or a numpy ``int32`` array (``like="numpy"``), of ``max_blocks`` columns.  Raises
        KvmmError E2BIG when a sequence has more blocks than a row holds (the rows are still
        filled, that one cut short).  Returns ``out``.
        """
        h = self._handle()
        arr, addr, n = _args.int_array("seqs", _args.seqs_of(seqs), "Q")
        if out is None:
            if max_blocks is None:
                raise TypeError("block_table needs max_blocks or out")
            mb = _args.u32("max_blocks", max_blocks)
            out = _new_int32((n, mb), like)
        ptr, mb = _table_ptr(out, n, max_blocks)
        check(lib.kvmm_block_table(h, addr, n, ptr, mb), "kvmm_block_table", h)
        return out

    # ---- magazine ---------------------------------------------------------------------

    @property
    def has_rings(self) -> bool:
        """Whether this handle has the shared-memory data plane (kvmm_has_rings)."""
        return bool(lib.kvmm_has_rings(self._handle()))

    @property
    def mag_size(self) -> int:
        """Most frames the magazine holds (kvmm_mag_size)."""
        return lib.kvmm_mag_size(self._handle())

    def mag_avail(self) -> int:
        """Frames ready in the magazine (kvmm_mag_avail)."""
        return lib.kvmm_mag_avail(self._handle())

    def mag_alloc(self, n: int) -> list[int]:
        """Take up to ``n`` free frames from the magazine (kvmm_mag_alloc); returns them (at
        least one).  OutOfMemoryError when the namespace has none left."""
        h = self._handle()
        n = _args.u32("n", n)
        if n == 0:
            raise ValueError("n must be at least 1")
        buf = (c_uint32 * n)()
        got = check(lib.kvmm_mag_alloc(h, buf, n), "kvmm_mag_alloc", h)
        return list(buf[:got])

    def mag_free(self, frames: IntSeq) -> None:
        """Give back frames taken with :meth:`mag_alloc` (kvmm_mag_free)."""
        h = self._handle()
        arr, addr, n = _args.int_array("frames", frames, "I")
        check(lib.kvmm_mag_free(h, ctypes.cast(addr, _lib.u32p), n), "kvmm_mag_free", h)

    # ---- views (views.py) and asynchronous submission (ring.py) -----------------------

    def views(self, kind: str = "torch") -> Any:
        """The zero-copy per-layer views of the pool (:class:`kvmm.PoolViews`), made once per
        kind ("torch" or "numpy") and cached on the handle."""
        self._handle()
        v = self._views.get(kind)
        if v is None:
            from .views import PoolViews
            v = PoolViews(self, kind)
            self._views[kind] = v
        return v

    def submit(self, sqes: Sequence[Any]) -> int:
        """Queue operations (:class:`kvmm.Sqe`) and send them at once (kvmm_submit).  Returns
        how many were submitted."""
        from .ring import submit
        return submit(self, sqes)

    def complete(self, max: int = 64, min: int = 0) -> list:
        """Reap up to ``max`` completions (:class:`kvmm.Cqe`), waiting for at least ``min``
        (kvmm_complete).  Events (preemption) come as completions with ``is_event``.  With
        ``reattach=True`` it reattaches like any call once the daemon is back (after the GONE
        event: :class:`kvmm.KvmmReattached`), so an engine that only reaps is reattached."""
        from .ring import complete
        return complete(self, max, min)

    @property
    def inflight(self) -> int:
        """Operations submitted and not yet reaped (kvmm_inflight)."""
        return lib.kvmm_inflight(self._handle())


def _new_int32(shape: tuple, like: str) -> Any:
    if like == "torch":
        import torch
        return torch.empty(shape, dtype=torch.int32)
    if like == "numpy":
        import numpy
        return numpy.empty(shape, dtype=numpy.int32)
    raise ValueError(f"like must be 'torch' or 'numpy', not {like!r}")


def _int32_out(out: Any) -> tuple[tuple, int]:
    """Shape and address of a caller's int32 output array (a CPU torch tensor or a numpy
    array, contiguous, writeable), after checking it (cheap checks: this runs every step)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(out, torch.Tensor):
        if out.dtype is not torch.int32:
            raise TypeError(f"out must be torch.int32, not {out.dtype}")
        if not out.is_cpu or out.layout is not torch.strided:
            raise ValueError(f"out must be on the CPU, not {out.device} (copy it after)")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        shape, ptr = out.shape, out.data_ptr()
    elif type(out).__module__ == "numpy":
        if out.dtype.str != "<i4":
            raise TypeError(f"out must be numpy.int32, not {out.dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be C-contiguous and writeable")
        shape, ptr = out.shape, out.ctypes.data
    else:
        raise TypeError(f"out must be a torch.Tensor or a numpy array, not {type(out).__name__}")
    return tuple(shape), ptr


def _table_ptr(out: Any, n: int, max_blocks: Optional[int]) -> tuple[int, int]:
    """Address and row length of a block-table array, after checking it (cheap checks: this
    runs every step)."""
    shape, ptr = _int32_out(out)
    if len(shape) != 2 or shape[0] != n:
        raise ValueError(f"out must have shape [{n}, max_blocks], not {list(shape)}")
    cols = shape[1]
    if max_blocks is not None and cols != max_blocks:
        raise ValueError(f"out has {cols} columns, max_blocks says {max_blocks}")
    if cols == 0 or cols > _args.U32_MAX:
        raise ValueError("max_blocks must be in [1, 2**32)")
    return ptr, cols


def _vec_ptr(out: Any, n: int) -> int:
    """Address of a 1-D int32 array of n entries (pin_far's entries), after checking it."""
    shape, ptr = _int32_out(out)
    if shape != (n,):
        raise ValueError(f"out must have shape [{n}] (nr_blocks), not {list(shape)}")
    return ptr


def _socket_path(socket_path: Optional[str]) -> str:
    """The socket kvmm_attach connects to for ``socket_path`` (its default rule)."""
    if socket_path is not None:
        return os.fsdecode(socket_path)
    if os.environ.get("KVMM_SOCKET"):
        return os.environ["KVMM_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "kvmm", "kvmmd.sock")
    return "/run/kvmm/kvmmd.sock"


def _identity(what: str, v: Union[bytes, str, None], most: int) -> Optional[bytes]:
    """A model identity or a salt as bytes (a str is UTF-8), checked; None stays None."""
    if v is None:
        return None
    if isinstance(v, str):
        v = v.encode()
    if not isinstance(v, (bytes, bytearray)):
        raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")
    if len(v) > most:
        raise ValueError(f"{what} is {len(v)} bytes, at most {most}")
    if what == "model" and not v:
        raise ValueError("model must not be empty (None: no identity)")
    return bytes(v)


def _deadline_ms(daemon_timeout: Optional[float]) -> int:
    """attach's daemon_timeout as kvmm_attach_opts.daemon_timeout_ms: 0 the default, -1 never."""
    if daemon_timeout is None:
        return 0
    if not isinstance(daemon_timeout, (int, float)) or isinstance(daemon_timeout, bool):
        raise TypeError("daemon_timeout must be seconds or None, not "
                        f"{type(daemon_timeout).__name__}")
    if daemon_timeout == float("inf"):
        return -1
    if not daemon_timeout > 0:
        raise ValueError("daemon_timeout must be > 0 seconds (math.inf: never), not "
                         f"{daemon_timeout!r}")
    return max(1, min(int(daemon_timeout * 1000), 2**31 - 1))


def attach(socket_path: Optional[str] = None, ns: str = "default",
           fmt: Optional[Format] = None, *, wprotect: bool = True,
           model: Union[bytes, str, None] = None, reattach: bool = False,
           daemon_timeout: Optional[float] = None) -> Client:
    """Attach to kvmmd (kvmm_attach): connect to ``socket_path`` (None: $KVMM_SOCKET, else
    $XDG_RUNTIME_DIR/kvmm/kvmmd.sock, else /run/kvmm/kvmmd.sock), join namespace ``ns`` with
    format ``fmt`` and map its pool.  NoDaemonError when nothing listens there.
    ``wprotect=False`` (kvmm_attach_ex with KVMM_ATTACH_NO_WPROTECT) leaves the whole pool
    writable: see :attr:`Client.write_protected`.  ``model`` (bytes or str: name, revision,
    adapter) is the identity of the model whose KV this client stores, hashed into every
    content key: clients of one namespace with different identities never share pages.
    ``reattach=True`` (KVMM_ATTACH_REATTACH): after the daemon went away, the first call that
    finds it back reattaches and raises :class:`kvmm.KvmmReattached` (the lost sequences are
    in :meth:`Client.lost_seqs`); without it, :meth:`Client.reattach` does it when asked.
    ``daemon_timeout``: seconds a call may wait for kvmmd without a word from it before the
    client gives a stopped or hung daemon up (:class:`kvmm.KvmmDaemonStalled`; None: the
    default, ``$KVMM_DAEMON_TIMEOUT_MS`` else 30 s; ``math.inf``: wait forever)."""
    return Client(socket_path, ns, fmt, wprotect=wprotect, model=model, reattach=reattach,
                  daemon_timeout=daemon_timeout)


_ = KvmmError  # re-exported for the type hints of callers
