# SPDX-License-Identifier: MIT
"""kvmm: Python bindings of libkvmm, the runtime of the kvmm KV-cache memory manager.

A thin layer over the C library (runtime/kvmm.h), one method per C call::

    import kvmm
    fmt = kvmm.Format(layers=32, kv_heads=8, head_dim=128, dtype="bf16")
    with kvmm.attach(ns="default", fmt=fmt) as c:
        seq = c.seq_create()
        hit = c.prefix_lookup(seq, prompt)
        c.seq_append(seq, prompt[hit:])
        k, v = c.views().kv(layer)          # [frames, tokens_per_page, kv_heads, head_dim]
        table = c.block_table([seq], max_blocks=64)

Documentation/userspace-api/python.md has the whole story.
"""
from ._lib import path as library_path
from .client import BLOCK_NONE, DEVICE_NONE, PIN_FAR_MAX, SEQ_ALL_TOKENS, Client, attach
from .errors import (KVMM_ELOST, KVMM_EPREEMPTED, KvmmDaemonGone, KvmmDaemonStalled, KvmmError,
                     KvmmReattached, NoDaemonError, OutOfMemoryError, PageLostError,
                     PreemptedError)
from .format import DTYPE_BF16, DTYPE_FP16, DTYPE_FP32, DTYPE_INT8, Format, PageLayout
from .ring import CQE_F_EVENT, CQE_F_GONE, MAX_INFLIGHT, Cqe, Op, Sqe
from .views import PoolViews
from . import admin, kernels

__all__ = [
    "attach", "Client", "Format", "PageLayout", "PoolViews", "kernels", "admin",
    "KvmmError", "PreemptedError", "OutOfMemoryError", "NoDaemonError", "PageLostError",
    "KvmmDaemonGone", "KvmmDaemonStalled", "KvmmReattached", "CQE_F_GONE",
    "KVMM_EPREEMPTED", "KVMM_ELOST", "BLOCK_NONE", "SEQ_ALL_TOKENS", "DEVICE_NONE",
    "PIN_FAR_MAX",
    "DTYPE_FP32", "DTYPE_FP16", "DTYPE_BF16", "DTYPE_INT8",
    "Op", "Sqe", "Cqe", "CQE_F_EVENT", "MAX_INFLIGHT", "library_path",
]
__version__ = "0.1.0"
