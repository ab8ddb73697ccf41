# SPDX-License-Identifier: MIT
"""Loading libkvmm and the ctypes prototypes of its calls (runtime/kvmm.h, kernels/kernels.h).

The library is found, in this order, at:

1. ``$KVMM_LIB``: a path to ``libkvmm.so`` (the tree's tests set it to the build's copy);
2. the tree this package sits in: ``runtime/libkvmm.so`` next to ``runtime/python/``;
3. ``pkg-config --variable=libdir kvmm``, if a ``kvmm.pc`` is installed;
4. ``ctypes.util.find_library("kvmm")`` (the system's linker search path).

Every call has ``argtypes`` and ``restype`` set, so ctypes converts and range-checks the
arguments it can.  The CPU kernels and the admin calls are bound only when the loaded library
exports them (:data:`HAVE_KERNELS`, :data:`HAVE_ADMIN`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_uint32, c_uint64, c_void_p)
from typing import Optional

u32p = POINTER(c_uint32)
u64p = POINTER(c_uint64)
i32p = POINTER(c_int32)
i64p = POINTER(c_int64)
f32p = POINTER(c_float)


class Format(Structure):
    """struct kvmm_format (uapi/kvmm.h), 24 bytes."""
    _fields_ = [("layers", c_uint32), ("kv_heads", c_uint32), ("head_dim", c_uint32),
                ("dtype", c_uint32), ("quant_group", c_uint32), ("reserved", c_uint32)]


class AttachOpts(Structure):
    """struct kvmm_attach_opts (runtime/kvmm.h)."""
    _fields_ = [("flags", c_uint32), ("model_len", c_uint32), ("model", c_void_p),
                ("daemon_timeout_ms", c_int32), ("reserved32", c_uint32),
                ("reserved", c_uint64 * 5)]


ATTACH_NO_WPROTECT = 1
ATTACH_REATTACH = 2  # KVMM_ATTACH_REATTACH
MODEL_ID_MAX = 256  # KVMM_MODEL_ID_MAX
SALT_MAX = 256  # KVMM_SALT_MAX
PIN_RANGE_F_PREFETCH = 1  # KVMM_PIN_RANGE_F_PREFETCH
# KVMM_PIN_FAR_MAX: (KVMM_MSG_PAYLOAD_MAX - sizeof(struct kvmm_pin_far_rep)) / 4, with
# KVMM_MSG_PAYLOAD_MAX = 65536 - KVMM_MSG_HDR_SIZE (uapi/kvmm.h): blocks one pin_far may pin
PIN_FAR_MAX = (65536 - 32 - 16) // 4


class Sqe(Structure):
    """struct kvmm_sqe (runtime/kvmm.h)."""
    _fields_ = [("op", c_uint32), ("nr", c_uint32), ("seq", c_uint64), ("arg", c_uint64),
                ("data", c_void_p), ("user_data", c_uint64), ("frames", u32p)]


class Cqe(Structure):
    """struct kvmm_cqe (runtime/kvmm.h)."""
    _fields_ = [("user_data", c_uint64), ("res", c_int32), ("flags", c_uint32),
                ("seq", c_uint64), ("nr_tokens", c_uint64), ("nr_blocks", c_uint32),
                ("nr_frames", c_uint32)]


class KvPages(Structure):
    """struct kvmm_kv_pages (kernels/kernels.h)."""
    _fields_ = [("base", c_void_p), ("fmt", c_void_p), ("layer", c_uint32),
                ("nr_frames", c_uint32)]


class AttnBatch(Structure):
    """struct kvmm_attn_batch (kernels/kernels.h)."""
    # the arrays as c_void_p: addresses are stored without a ctypes.cast per call
    _fields_ = [("kv", KvPages), ("nr_seqs", c_uint32), ("num_q_heads", c_uint32),
                ("block_tables", c_void_p), ("max_blocks", c_uint32), ("ctx_lens", c_void_p),
                ("q_lens", c_void_p), ("scale", c_float)]


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("KVMM_LIB")
    if env:
        return [env]  # an explicit choice is the only one tried
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.normpath(os.path.join(here, "..", "..", "libkvmm.so")))
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(["pkg-config", "--variable=libdir", "kvmm"],
                                    capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            out.append(os.path.join(libdir, "libkvmm.so.0"))
            out.append(os.path.join(libdir, "libkvmm.so"))
    found = ctypes.util.find_library("kvmm")
    if found:
        out.append(found)
    return out


def _load() -> tuple[ctypes.CDLL, str]:
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path, use_errno=True), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("kvmm: cannot load libkvmm (set KVMM_LIB to the path of libkvmm.so); "
                      "tried " + ("; ".join(tried) if tried else "nothing"))


lib, path = _load()


def _proto(name: str, restype, *argtypes, optional: bool = False) -> Optional[object]:
    fn = getattr(lib, name, None)
    if fn is None:
        if optional:
            return None
        raise ImportError(f"kvmm: {path} has no {name} (a libkvmm older than this package?)")
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


P = c_void_p  # kvmm_client_t *

_proto("kvmm_attach", c_int, c_char_p, c_char_p, POINTER(Format), POINTER(c_void_p))
_proto("kvmm_attach_ex", c_int, c_char_p, c_char_p, POINTER(Format), POINTER(AttachOpts),
       POINTER(c_void_p), optional=True)
_proto("kvmm_write_protected", c_int, P, optional=True)
_proto("kvmm_prefix_lookup_salt", c_int, P, c_uint64, u32p, c_uint64, c_char_p, c_size_t,
       POINTER(c_uint64), optional=True)
_proto("kvmm_seal_salt", c_int, P, c_uint64, c_uint32, c_uint32, c_char_p, c_size_t,
       optional=True)
_proto("kvmm_detach", None, P)
_proto("kvmm_connected", c_int, P, optional=True)
_proto("kvmm_reattach", c_int, P, c_int, optional=True)
_proto("kvmm_lost_seqs", c_int, P, u64p, c_uint32, optional=True)
_proto("kvmm_conn_error", c_int, P, c_char_p, c_size_t, optional=True)
_proto("kvmm_page_size", c_uint64, P)
_proto("kvmm_tokens_per_page", c_uint32, P)
_proto("kvmm_bytes_per_token", c_uint32, P)
_proto("kvmm_nr_frames", c_uint32, P)
_proto("kvmm_nr_devices", c_uint32, P)
_proto("kvmm_device_index", c_uint32, P)
_proto("kvmm_frame_addr", c_void_p, P, c_uint32)
_proto("kvmm_frame_devptr", c_uint64, P, c_uint32)
_proto("kvmm_seq_create", c_int, P, c_int, u64p)
_proto("kvmm_seq_append", c_int, P, c_uint64, u32p, c_uint32, u64p)
_proto("kvmm_seq_append_frames", c_int, P, c_uint64, u32p, c_uint32, u32p, c_uint32, u64p)
_proto("kvmm_seq_fork", c_int, P, c_uint64, c_uint64, u64p)
_proto("kvmm_seq_truncate", c_int, P, c_uint64, c_uint64)
_proto("kvmm_seq_free", c_int, P, c_uint64)
_proto("kvmm_prefix_lookup", c_int, P, c_uint64, u32p, c_uint64, u64p)
_proto("kvmm_seal", c_int, P, c_uint64, c_uint32, c_uint32)
_proto("kvmm_seq_prompt", c_int, P, u32p, c_uint32, c_int, u64p, u64p, c_void_p, c_uint32)
_proto("kvmm_seq_seal_free", c_int, P, c_uint64, c_uint32, c_uint32)
_proto("kvmm_pin", c_int, P, c_void_p, c_uint32, u32p)
_proto("kvmm_unpin", c_int, P, c_void_p, c_uint32, u32p)
_proto("kvmm_prefetch", c_int, P, c_void_p, c_uint32, u32p)
_proto("kvmm_pin_range", c_int, P, c_uint64, c_uint32, c_uint32, c_uint, u32p)
_proto("kvmm_unpin_range", c_int, P, c_uint64, c_uint32, c_uint32, u32p)
# far reads (KVMM_FEAT_FAR): a libkvmm older than them lacks both (Client raises EOPNOTSUPP)
_proto("kvmm_far_map", c_int, P, POINTER(c_void_p), u64p, u32p, optional=True)
_proto("kvmm_pin_far", c_int, P, c_uint64, c_uint32, c_uint32, i32p, u32p, optional=True)
_proto("kvmm_block_table", c_int, P, c_void_p, c_uint32, c_void_p, c_uint32)
_proto("kvmm_submit", c_int, P, POINTER(Sqe), c_uint)
_proto("kvmm_complete", c_int, P, POINTER(Cqe), c_uint, c_uint)
_proto("kvmm_inflight", c_uint, P)
_proto("kvmm_has_rings", c_int, P)
_proto("kvmm_mag_alloc", c_int, P, u32p, c_uint32)
_proto("kvmm_mag_free", c_int, P, u32p, c_uint32)
_proto("kvmm_mag_avail", c_uint32, P)
_proto("kvmm_mag_size", c_uint32, P)
_proto("kvmm_cuda_map_why", c_char_p)
_proto("kvmm_strerror", c_char_p, c_int)

# The kernels (kernels/kernels.h, kernels/cuda/kvmm_cuda.h), when libkvmm carries them.  The
# format struct they take (struct kvmm_fmt) is filled by kvmm_fmt_init into an opaque buffer.
FMT_BUF_BYTES = 256
HAVE_FMT_INIT = _proto("kvmm_fmt_init", c_int, c_void_p, POINTER(Format), c_uint64,
                       optional=True) is not None
_proto("kvmm_fmt_offset", c_uint64, c_void_p, c_uint32, c_uint32, c_uint32, optional=True)
_proto("kvmm_fmt_scale_offset", c_uint64, c_void_p, c_uint32, c_uint32, c_uint32,
       optional=True)
_cpu = [
    _proto("kvmm_cpu_paged_decode", c_int, POINTER(AttnBatch), c_void_p, c_void_p,
           optional=True),
    _proto("kvmm_cpu_paged_prefill", c_int, POINTER(AttnBatch), c_void_p, c_void_p,
           optional=True),
    _proto("kvmm_cpu_reshape_and_cache", c_int, POINTER(KvPages), c_uint32, c_void_p,
           c_void_p, c_void_p, optional=True),
    _proto("kvmm_cpu_copy_pages", c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
           c_uint32, c_uint32, optional=True),
]
HAVE_KERNELS = HAVE_FMT_INIT and all(f is not None for f in _cpu)
_proto("kvmm_cpu_set_threads", c_int, c_uint32, optional=True)
_proto("kvmm_cpu_get_threads", c_uint32, optional=True)
_proto("kvmm_cpu_isa_name", c_char_p, c_int, optional=True)
_proto("kvmm_cpu_isa_supported", ctypes.c_bool, c_int, optional=True)
_proto("kvmm_cpu_isa_get", c_int, optional=True)
_proto("kvmm_cpu_isa_set", c_int, c_int, optional=True)
_cuda = [
    _proto("kvmm_cuda_init", c_int, c_int, optional=True),
    _proto("kvmm_cuda_why", c_char_p, optional=True),
    _proto("kvmm_cuda_paged_decode", c_int, POINTER(AttnBatch), c_void_p, c_void_p, c_void_p,
           optional=True),
    _proto("kvmm_cuda_paged_prefill", c_int, POINTER(AttnBatch), c_uint32, c_void_p,
           c_void_p, c_void_p, optional=True),
    _proto("kvmm_cuda_reshape_and_cache", c_int, POINTER(KvPages), c_uint32, c_void_p,
           c_void_p, c_void_p, c_void_p, optional=True),
    _proto("kvmm_cuda_copy_pages", c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
           c_uint32, c_uint32, c_void_p, optional=True),
]
HAVE_CUDA_KERNELS = HAVE_FMT_INIT and all(f is not None for f in _cuda)

del _cpu, _cuda
_ = (c_size_t, i64p, f32p)  # re-exported for the modules that build kernel arguments


def has(name: str) -> bool:
    """Whether the loaded libkvmm exports ``name``."""
    return getattr(lib, name, None) is not None


def strerror(err: int) -> str:
    """kvmm's text for an error code (negative or positive errno, kvmm codes included)."""
    s = lib.kvmm_strerror(int(err))
    return s.decode("utf-8", "replace") if s else f"error {err}"
