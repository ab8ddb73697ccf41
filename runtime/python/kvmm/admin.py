# SPDX-License-Identifier: MIT
"""libkvmm's admin calls (runtime/kvmm_admin.h): what kvmmctl asks kvmmd about the whole
daemon (status, meminfo, vmstat, clients, namespaces, sequences, page tables, LRU, swap,
trace) and what it changes (limits, drop-caches, reclaim, swapon/swapoff, fault injection).

An :class:`Admin` handle is one HELLOed connection that joins no namespace.  Read verbs return
the daemon's tagged text ("Name:  value" lines and "Label: first key=value ..." records) or
its JSON; :func:`value`, :func:`records` and :func:`field` pick numbers and records out of the
text with libkvmm's own readers.  Admin verbs need root or the daemon's admin group:
KvmmError EACCES otherwise.
"""
from __future__ import annotations

import ctypes
import errno as _errno
import os
import weakref
from ctypes import POINTER, Structure, byref, c_char, c_char_p, c_int, c_int32, c_int64, \
    c_size_t, c_uint, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any, Iterable, Optional, Union

from . import _args, _lib
from ._lib import lib
from .errors import KvmmError, check, make_error

NAME_LEN = 32
PATH_LEN = 256
FAULT_SPEC_LEN = 224

ADMIN_F_JSON = 1 << 0
ADMIN_F_CLEAR = 1 << 1
DROP_F_DEVICE = 1 << 0
DROP_F_SWAP = 1 << 1
RECLAIM_F_NOSWAP = 1 << 0
LIMIT_SET_MAX, LIMIT_SET_LOW, LIMIT_SET_PRIORITY = 1, 2, 4
LIMIT_NONE = _args.U64_MAX
#: live namespaces (KVMM_OP_NS_*, struct kvmm_ns_req)
OP_NS_CREATE, OP_NS_SET, OP_NS_DELETE = 0x212, 0x213, 0x214
NS_SET_FRAMES, NS_SET_MAX, NS_SET_MIN, NS_SET_LOW, NS_SET_PRIORITY = 1, 2, 4, 8, 16
NS_F_FORCE = 1

#: the read verbs (KVMM_OP_*)
READ_VERBS = {"status": 0x200, "meminfo": 0x201, "vmstat": 0x202, "buddyinfo": 0x203,
              "clients": 0x204, "namespaces": 0x205, "seqs": 0x206, "pagetable": 0x207,
              "lru": 0x208, "swap": 0x209, "trace": 0x20a}

BACKENDS = {0: "none", 1: "host", 2: "cuda"}


class _HelloRep(Structure):
    _fields_ = [("abi_version", c_uint16), ("abi_min", c_uint16), ("abi_agreed", c_uint16),
                ("backend", c_uint16), ("features", c_uint64), ("features_supported", c_uint64),
                ("page_size", c_uint64), ("nr_frames", c_uint32), ("client_id", c_uint32),
                ("nr_devices", c_uint32), ("max_msg", c_uint32)]


class _AdminReq(Structure):
    _fields_ = [("flags", c_uint32), ("reserved", c_uint32), ("id", c_uint64),
                ("ns", c_char * NAME_LEN)]


class _LimitReq(Structure):
    _fields_ = [("ns", c_char * NAME_LEN), ("max_frames", c_uint64), ("low_frames", c_uint64),
                ("priority", c_int32), ("valid", c_uint32)]


class _NsReq(Structure):
    """struct kvmm_ns_req (uapi/kvmm.h)."""
    _fields_ = [("ns", c_char * NAME_LEN), ("frames", c_uint64), ("max_frames", c_uint64),
                ("min_frames", c_uint64), ("low_frames", c_uint64), ("priority", c_int32),
                ("valid", c_uint32), ("flags", c_uint32), ("reserved", c_uint32)]


class _SwaponReq(Structure):
    _fields_ = [("tier", c_uint32), ("priority", c_int32), ("size", c_uint64),
                ("path", c_char * PATH_LEN), ("ns", c_char * NAME_LEN)]


class _SwapoffReq(Structure):
    _fields_ = [("tier", c_uint32), ("reserved", c_uint32), ("path", c_char * PATH_LEN),
                ("ns", c_char * NAME_LEN)]


class _Ns(Structure):
    """struct kvmm_admin_ns (runtime/kvmm_admin.h)."""
    _fields_ = [("name", c_char * NAME_LEN), ("id", c_uint32), ("priority", c_int32)] + \
        [(f, c_uint64) for f in ("frames", "limit", "used", "cached", "shared", "clients",
                                 "chunks", "hits", "misses", "pgsteal")]


class _Tier(Structure):
    """struct kvmm_admin_tier (runtime/kvmm_admin.h)."""
    _fields_ = [("tier", c_uint32), ("priority", c_int32), ("ns", c_char * NAME_LEN),
                ("kind", c_char * 16)] + \
        [(f, c_uint64) for f in ("slots", "used", "kept", "pages_out", "clean_out", "pages_in",
                                 "bytes_out", "bytes_in", "failures", "direct")]


assert ctypes.sizeof(_Ns) == 120 and ctypes.sizeof(_Tier) == 136
assert ctypes.sizeof(_HelloRep) == 48 and ctypes.sizeof(_AdminReq) == 48
assert ctypes.sizeof(_LimitReq) == 56 and ctypes.sizeof(_SwaponReq) == 304
assert ctypes.sizeof(_SwapoffReq) == 296

HAVE_ADMIN = _lib.has("kvmm_admin_open")
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def _bind() -> None:
    P = c_void_p
    protos = {
        "kvmm_admin_open": (c_int, c_char_p, POINTER(c_void_p)),
        "kvmm_admin_open_timeout": (c_int, c_char_p, c_int, POINTER(c_void_p)),
        "kvmm_admin_close": (None, P),
        "kvmm_admin_why": (c_char_p,),
        "kvmm_admin_hello": (POINTER(_HelloRep), P),
        "kvmm_admin_read": (c_int, P, c_uint, POINTER(_AdminReq), POINTER(c_void_p)),
        "kvmm_admin_limit": (c_int, P, POINTER(_LimitReq)),
        "kvmm_admin_ns": (c_int, P, c_uint, POINTER(_NsReq)),
        "kvmm_admin_namespaces": (c_int, P, c_char_p, POINTER(c_void_p), POINTER(c_uint)),
        "kvmm_admin_swap_tiers": (c_int, P, c_char_p, POINTER(c_void_p), POINTER(c_uint)),
        "kvmm_admin_drop_caches": (c_int, P, c_uint32, POINTER(c_uint64)),
        "kvmm_admin_reclaim": (c_int, P, c_uint64, c_uint32, POINTER(c_uint64)),
        "kvmm_admin_swapon": (c_int, P, POINTER(_SwaponReq)),
        "kvmm_admin_swapoff": (c_int, P, POINTER(_SwapoffReq)),
        "kvmm_admin_fault_inject": (c_int, P, c_char_p, c_char_p),
        "kvmm_admin_trace_follow": (c_int, P, c_uint32, c_uint64, c_uint32),
        "kvmm_admin_trace_next": (c_int, P, c_int, POINTER(c_void_p)),
        "kvmm_admin_trace_event": (c_int, c_char_p),
        "kvmm_admin_trace_event_name": (c_char_p, c_uint),
        "kvmm_admin_value": (c_int, c_char_p, c_char_p, POINTER(c_int64)),
        "kvmm_admin_next": (c_void_p, c_void_p, c_char_p, c_void_p),
        "kvmm_admin_field": (c_int, c_void_p, c_char_p, c_void_p, c_size_t),
    }
    for name, (res, *args) in protos.items():
        fn = getattr(lib, name, None)
        if fn is None:  # a libkvmm from before this call: the method says so when used
            continue
        fn.restype = res
        fn.argtypes = args


if HAVE_ADMIN:
    _bind()


def _need() -> None:
    if not HAVE_ADMIN:
        raise KvmmError(_errno.ENOSYS, f"{_lib.path} has no admin calls (kvmm_admin_*)",
                        "kvmm.admin")


def _name(what: str, s: Optional[str], size: int) -> bytes:
    if s is None:
        return b""
    if not isinstance(s, (str, os.PathLike)):
        raise TypeError(f"{what} must be a str, not {type(s).__name__}")
    b = os.fsencode(s)
    if len(b) >= size or b"\0" in b:
        raise ValueError(f"{what} must be under {size} bytes without NUL")
    return b


def _acheck(status: int, call: str) -> int:
    """check(), and a daemon given up after the handle's deadline (ETIMEDOUT) is named as
    kvmm_admin_why() says: "kvmmd (pid N) did not answer in 30000 ms: it is stopped ..."."""
    if status == -_errno.ETIMEDOUT:
        e = make_error(status, call)
        why = lib.kvmm_admin_why()
        if why:
            e.strerror = f"{e.strerror}: {why.decode('utf-8', 'replace')}"
        raise e
    return check(status, call)


def _take_text(p: c_void_p) -> str:
    try:
        return ctypes.string_at(p.value).decode("utf-8", "replace")
    finally:
        _libc.free(p.value)


class _AdminSession(c_void_p):
    """The C handle; kvmm_admin_close runs when the Admin and every call in progress have let
    go of it (see kvmm.client._Session)."""

    def __init__(self, handle: int) -> None:
        super().__init__(handle)
        weakref.finalize(self, lib.kvmm_admin_close, c_void_p(handle))


class Admin:
    """An admin connection to kvmmd (kvmm_admin_open); a context manager.

    ``timeout_ms``: the daemon deadline (kvmm_admin_open_timeout): a daemon silent that long
    (stopped, hung) fails the call with ETIMEDOUT naming it; 0 the default
    ($KVMM_DAEMON_TIMEOUT_MS, else 30 s), negative never.

    ``hello`` is the daemon's HELLO answer as a dict (abi_agreed, backend, features,
    page_size, nr_frames, client_id, nr_devices, ...).
    """

    def __init__(self, socket_path: Optional[str] = None, timeout_ms: int = 0) -> None:
        _need()
        sock = None if socket_path is None else _name("socket_path", socket_path, 4096)
        timeout_ms = _args.integer("timeout_ms", timeout_ms, -(1 << 31), (1 << 31) - 1)
        h = c_void_p()
        if timeout_ms and not hasattr(lib, "kvmm_admin_open_timeout"):
            raise KvmmError(_errno.ENOSYS, f"{_lib.path} has no kvmm_admin_open_timeout",
                            "kvmm.admin")
        if timeout_ms:
            err = lib.kvmm_admin_open_timeout(sock, timeout_ms, byref(h))
        else:
            err = lib.kvmm_admin_open(sock, byref(h))
        if err < 0:
            e = make_error(err, "kvmm_admin_open")
            why = lib.kvmm_admin_why()
            if why:
                e.strerror = why.decode("utf-8", "replace")
            raise e
        self._h: Optional[_AdminSession] = _AdminSession(h.value)
        self._pid = os.getpid()
        rep = lib.kvmm_admin_hello(self._h).contents
        self.hello = {name: getattr(rep, name) for name, _ in _HelloRep._fields_}
        self.hello["backend_name"] = BACKENDS.get(rep.backend, str(rep.backend))

    def _handle(self) -> _AdminSession:
        if self._h is None:
            raise ValueError("kvmm admin handle is closed")
        if self._pid != os.getpid():
            raise ValueError("kvmm admin handle was opened in another process")
        return self._h

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Close the connection (kvmm_admin_close, once no call of another thread is still
        running on it).  Closing twice is fine."""
        self._h = None

    def __enter__(self) -> "Admin":
        self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- read verbs -------------------------------------------------------------------

    def read(self, verb: Union[str, int], *, json: bool = False, id: int = 0, ns: str = "",
             reserved: int = 0, clear: bool = False) -> str:
        """A read verb (kvmm_admin_read): ``verb`` a name of :data:`READ_VERBS` or a
        KVMM_OP_* code; ``json`` for JSON; ``id`` a client, or the sequence of "pagetable";
        ``reserved`` the client of "pagetable" or "trace"'s event mask; ``ns`` a namespace
        filter; ``clear`` empties the trace buffer after reading.  Returns the whole answer."""
        h = self._handle()
        if isinstance(verb, str):
            try:
                op = READ_VERBS[verb]
            except KeyError:
                raise ValueError(f"unknown read verb {verb!r} (one of "
                                 f"{', '.join(READ_VERBS)})") from None
        else:
            op = _args.u32("verb", verb)
        req = _AdminReq((ADMIN_F_JSON if json else 0) | (ADMIN_F_CLEAR if clear else 0),
                        _args.u32("reserved", reserved), _args.u64("id", id),
                        _name("ns", ns, NAME_LEN))
        text = c_void_p()
        _acheck(lib.kvmm_admin_read(h, op, byref(req), byref(text)), "kvmm_admin_read")
        return _take_text(text)

    def status(self, **kw: Any) -> str:
        return self.read("status", **kw)

    def meminfo(self, **kw: Any) -> str:
        return self.read("meminfo", **kw)

    def vmstat(self, **kw: Any) -> str:
        return self.read("vmstat", **kw)

    def clients(self, **kw: Any) -> str:
        return self.read("clients", **kw)

    def namespaces(self, **kw: Any) -> str:
        return self.read("namespaces", **kw)

    def seqs(self, **kw: Any) -> str:
        return self.read("seqs", **kw)

    def pagetable(self, seq: int, client: int, **kw: Any) -> str:
        """The page table of sequence ``seq`` of client ``client`` (PAGETABLE)."""
        return self.read("pagetable", id=seq, reserved=client, **kw)

    def swap(self, **kw: Any) -> str:
        return self.read("swap", **kw)

    def _records(self, call: str, st: Any, ns: Optional[str]) -> list[dict]:
        h = self._handle()
        if not _lib.has(call):
            raise KvmmError(_errno.ENOSYS, f"{_lib.path} has no {call}", "kvmm.admin")
        lst, nr = c_void_p(), c_uint()
        _acheck(getattr(lib, call)(h, _name("ns", ns, NAME_LEN) or None, byref(lst), byref(nr)),
              call)
        try:
            arr = ctypes.cast(lst, POINTER(st * nr.value)).contents if nr.value else []
            return [{f: (getattr(e, f).decode("utf-8", "replace")
                         if isinstance(getattr(e, f), bytes) else getattr(e, f))
                     for f, _ in st._fields_} for e in arr]
        finally:
            _libc.free(lst.value)

    def namespace_list(self, ns: Optional[str] = None) -> list[dict]:
        """The namespaces (kvmm_admin_namespaces; ns None: all) as dicts of struct
        kvmm_admin_ns: name, id, priority, frames, limit, used, cached, shared, clients,
        chunks, hits, misses, pgsteal."""
        return self._records("kvmm_admin_namespaces", _Ns, ns)

    def swap_tiers(self, ns: Optional[str] = None) -> list[dict]:
        """The swap tiers (kvmm_admin_swap_tiers; ns None: of every namespace) as dicts of
        struct kvmm_admin_tier: tier, priority, ns, kind, slots, used, kept, pages_out,
        clean_out, pages_in, bytes_out, bytes_in, failures, direct."""
        return self._records("kvmm_admin_swap_tiers", _Tier, ns)

    # ---- write verbs ------------------------------------------------------------------

    def limit(self, ns: str, *, max_frames: Optional[int] = None,
              low_frames: Optional[int] = None, priority: Optional[int] = None) -> None:
        """Set namespace ``ns``'s limits (kvmm_admin_limit): those given (max_frames
        :data:`LIMIT_NONE` for none)."""
        h = self._handle()
        req = _LimitReq(_name("ns", ns, NAME_LEN))
        if max_frames is not None:
            req.max_frames = _args.u64("max_frames", max_frames)
            req.valid |= LIMIT_SET_MAX
        if low_frames is not None:
            req.low_frames = _args.u64("low_frames", low_frames)
            req.valid |= LIMIT_SET_LOW
        if priority is not None:
            req.priority = _args.integer("priority", priority, -(1 << 31), (1 << 31) - 1)
            req.valid |= LIMIT_SET_PRIORITY
        if not req.valid:
            raise ValueError("limit needs max_frames, low_frames or priority")
        _acheck(lib.kvmm_admin_limit(h, byref(req)), "kvmm_admin_limit")

    def _ns(self, op: int, ns: str, *, frames: Optional[int] = None,
            max_frames: Optional[int] = None, min_frames: Optional[int] = None,
            low_frames: Optional[int] = None, priority: Optional[int] = None,
            force: bool = False) -> None:
        h = self._handle()
        if not _lib.has("kvmm_admin_ns"):
            raise KvmmError(_errno.ENOSYS, f"{_lib.path} has no kvmm_admin_ns", "kvmm.admin")
        req = _NsReq(_name("ns", ns, NAME_LEN))
        for bit, field, v in ((NS_SET_FRAMES, "frames", frames),
                              (NS_SET_MAX, "max_frames", max_frames),
                              (NS_SET_MIN, "min_frames", min_frames),
                              (NS_SET_LOW, "low_frames", low_frames)):
            if v is not None:
                setattr(req, field, _args.u64(field, v))
                req.valid |= bit
        if priority is not None:
            req.priority = _args.integer("priority", priority, -1000, 1000)
            req.valid |= NS_SET_PRIORITY
        if force:
            req.flags = NS_F_FORCE
        _acheck(lib.kvmm_admin_ns(h, op, byref(req)), "kvmm_admin_ns")

    def ns_create(self, ns: str, *, frames: Optional[int] = None,
                  max_frames: Optional[int] = None, min_frames: Optional[int] = None,
                  low_frames: Optional[int] = None, priority: Optional[int] = None) -> None:
        """Create namespace ``ns`` while the daemon runs (kvmm_admin_ns, NS_CREATE): a pool of
        ``frames`` (else ``max_frames``) from the frames no namespace holds; KvmmError ENOSPC
        when too few are left, EEXIST when it exists."""
        if frames is None and max_frames in (None, LIMIT_NONE):
            raise ValueError("ns_create needs frames or max_frames")
        self._ns(OP_NS_CREATE, ns, frames=frames, max_frames=max_frames,
                 min_frames=min_frames, low_frames=low_frames, priority=priority)

    def ns_set(self, ns: str, *, max_frames: Optional[int] = None,
               min_frames: Optional[int] = None, low_frames: Optional[int] = None,
               priority: Optional[int] = None) -> None:
        """Change namespace ``ns``'s max (:data:`LIMIT_NONE`: none), min, low and priority
        (kvmm_admin_ns, NS_SET); its size is fixed."""
        if max_frames is None and min_frames is None and low_frames is None and \
                priority is None:
            raise ValueError("ns_set needs max_frames, min_frames, low_frames or priority")
        self._ns(OP_NS_SET, ns, max_frames=max_frames, min_frames=min_frames,
                 low_frames=low_frames, priority=priority)

    def ns_delete(self, ns: str, *, force: bool = False) -> None:
        """Delete namespace ``ns`` (kvmm_admin_ns, NS_DELETE): KvmmError EBUSY while clients
        are attached unless ``force`` (they are sent SHUTDOWN and disconnected)."""
        self._ns(OP_NS_DELETE, ns, force=force)

    def drop_caches(self, *, device: bool = True, swap: bool = False) -> int:
        """Drop unmapped cached pages (kvmm_admin_drop_caches); returns how many."""
        h = self._handle()
        flags = (DROP_F_DEVICE if device else 0) | (DROP_F_SWAP if swap else 0)
        if not flags:
            raise ValueError("drop_caches needs device or swap")
        n = c_uint64()
        _acheck(lib.kvmm_admin_drop_caches(h, flags, byref(n)), "kvmm_admin_drop_caches")
        return n.value

    def reclaim(self, nr_frames: int, *, noswap: bool = False) -> int:
        """Reclaim up to ``nr_frames`` frames (kvmm_admin_reclaim); returns how many."""
        h = self._handle()
        n = c_uint64()
        _acheck(lib.kvmm_admin_reclaim(h, _args.u64("nr_frames", nr_frames),
                                     RECLAIM_F_NOSWAP if noswap else 0, byref(n)),
              "kvmm_admin_reclaim")
        return n.value

    def swapon(self, tier: int, size: int, path: str = "", *, priority: int = 0,
               ns: str = "") -> None:
        """Add swap tier ``tier`` (1: host memory, 2: a file at ``path``) of ``size`` bytes
        (kvmm_admin_swapon), for namespace ``ns`` ("" : every namespace)."""
        h = self._handle()
        req = _SwaponReq(_args.u32("tier", tier),
                         _args.integer("priority", priority, -(1 << 31), (1 << 31) - 1),
                         _args.u64("size", size), _name("path", path, PATH_LEN),
                         _name("ns", ns, NAME_LEN))
        _acheck(lib.kvmm_admin_swapon(h, byref(req)), "kvmm_admin_swapon")

    def swapoff(self, tier: int, path: str = "", *, ns: str = "") -> None:
        """Bring tier ``tier``'s pages back and remove it (kvmm_admin_swapoff)."""
        h = self._handle()
        req = _SwapoffReq(_args.u32("tier", tier), 0, _name("path", path, PATH_LEN),
                          _name("ns", ns, NAME_LEN))
        _acheck(lib.kvmm_admin_swapoff(h, byref(req)), "kvmm_admin_swapoff")

    def fault_inject(self, spec: str, ns: Optional[str] = None) -> None:
        """Arm (or "POINT off": disarm) a swap fault point (kvmm_admin_fault_inject), e.g.
        ``"swap.write nth=3 mode=short times=1"``."""
        h = self._handle()
        _acheck(lib.kvmm_admin_fault_inject(h, _name("ns", ns, NAME_LEN) or None,
                                          _name("spec", spec, FAULT_SPEC_LEN)),
              "kvmm_admin_fault_inject")

    # ---- trace ------------------------------------------------------------------------

    def trace_follow(self, *, json: bool = False, client: int = 0,
                     events: Union[int, Iterable[str]] = 0) -> None:
        """Subscribe to trace events (kvmm_admin_trace_follow); ``events`` a mask or event
        names ("alloc", "swap-out", ...), 0 for all.  The handle then serves only
        :meth:`trace_next`."""
        h = self._handle()
        if isinstance(events, int):
            mask = _args.u32("events", events)
        else:
            mask = 0
            for name in events:
                mask |= 1 << trace_event(name)
        _acheck(lib.kvmm_admin_trace_follow(h, ADMIN_F_JSON if json else 0,
                                          _args.u64("client", client), mask),
              "kvmm_admin_trace_follow")

    def trace_next(self, timeout_ms: int = -1) -> Optional[str]:
        """The next batch of trace lines (kvmm_admin_trace_next), or None when nothing came
        within ``timeout_ms`` (-1: wait for ever)."""
        h = self._handle()
        text = c_void_p()
        err = lib.kvmm_admin_trace_next(h, _args.integer("timeout_ms", timeout_ms, -1,
                                                         (1 << 31) - 1), byref(text))
        if err == -_errno.ETIMEDOUT:
            return None
        check(err, "kvmm_admin_trace_next")
        return _take_text(text)


def open(socket_path: Optional[str] = None,  # noqa: A001 - mirrors kvmm_admin_open
         timeout_ms: int = 0) -> Admin:
    """An :class:`Admin` handle on the daemon at ``socket_path`` (None: the default socket),
    with the daemon deadline ``timeout_ms`` (see :class:`Admin`)."""
    return Admin(socket_path, timeout_ms)


def trace_event(name: str) -> int:
    """The type number of trace event ``name`` (kvmm_admin_trace_event)."""
    _need()
    return check(lib.kvmm_admin_trace_event(_name("name", name, 64)), "kvmm_admin_trace_event")


def trace_event_names() -> list[str]:
    """Every trace event name, by type (kvmm_admin_trace_event_name)."""
    _need()
    out = []
    while True:
        s = lib.kvmm_admin_trace_event_name(len(out))
        if not s:
            return out
        out.append(s.decode())


def value(text: str, name: str) -> Optional[int]:
    """The number after ``name:`` in tagged text (kvmm_admin_value), None when absent;
    ValueError when it is not a number."""
    _need()
    v = c_int64()
    err = lib.kvmm_admin_value(text.encode(), _name("name", name, 256), byref(v))
    if err == -_errno.ENOENT:
        return None
    if err == -_errno.ERANGE:
        raise ValueError(f"{name} is not a number in this text")
    check(err, "kvmm_admin_value")
    return v.value


def records(text: str, label: str) -> list[str]:
    """The record lines labelled ``label`` ("Namespace", "Client", "Seq", ...) of tagged
    text (kvmm_admin_next), each without its newline."""
    _need()
    raw = text.encode()
    buf = ctypes.create_string_buffer(raw)
    base = ctypes.addressof(buf)
    lab = _name("label", label, 256)
    out = []
    p = None
    while True:
        p = lib.kvmm_admin_next(base, lab, p)
        if not p:
            return out
        off = p - base
        end = raw.find(b"\n", off)
        out.append(raw[off:end if end >= 0 else len(raw)].decode("utf-8", "replace"))


def field(line: str, key: str) -> Optional[str]:
    """The value of `` key=`` on a record line (kvmm_admin_field), None when absent."""
    _need()
    src = ctypes.create_string_buffer(line.encode())
    buf = ctypes.create_string_buffer(len(line.encode()) + 1)
    n = lib.kvmm_admin_field(src, _name("key", key, 256), buf, len(buf))
    if n == -_errno.ENOENT:
        return None
    check(n, "kvmm_admin_field")
    return buf.value.decode("utf-8", "replace")
