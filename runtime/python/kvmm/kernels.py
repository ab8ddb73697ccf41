# SPDX-License-Identifier: MIT
"""kvmm's kernels on torch tensors: paged decode and prefill attention, reshape_and_cache, and
page copy, over the pages of a pool (:class:`kvmm.PoolViews`), on the CPU (``kvmm_cpu_*``) or
on the GPU (``kvmm_cuda_*``, for a pool in GPU memory), with the same signatures.

Every shape, dtype, device and contiguity is checked here before a pointer goes to C; the C
kernels check the rest (block-table entries against the pool, context lengths against the
table) and answer -EINVAL, raised as :class:`kvmm.KvmmError`.  Queries, outputs and new K/V
rows are ``torch.float32`` whatever the pool's dtype: the kernels convert on read and write.
Nothing here copies a tensor; ``out`` may be given to avoid the one allocation of the result.

On the GPU the kernels run asynchronously on torch's current stream of the pool's device, and
the checks that need values (``q_lens`` sums, frame ranges) read them back, a device sync;
that path is untested here (no GPU in CI).
"""
from __future__ import annotations

import ctypes
import errno
from typing import Any, Optional

from . import _args, _lib
from ._lib import lib
from .errors import KvmmError, check, make_error
from .views import PoolViews

__all__ = ["available", "paged_decode", "paged_prefill", "reshape_and_cache", "copy_pages",
           "set_threads", "get_threads", "isa", "isas", "set_isa"]


def available(device: str = "cpu") -> bool:
    """Whether the loaded libkvmm carries the kernels for ``device`` ("cpu" or "cuda")."""
    return _lib.HAVE_CUDA_KERNELS if device.startswith("cuda") else _lib.HAVE_KERNELS


def _need(pool: Any, layer: Optional[int] = None) -> bool:
    """Check pool (and layer); True for the GPU path."""
    if not isinstance(pool, PoolViews):
        raise TypeError(f"pool must be kvmm.PoolViews (client.views()), not {type(pool).__name__}")
    if pool.kind != "torch":
        raise TypeError("the kernels take torch tensors: use client.views('torch')")
    if layer is not None:
        _args.integer("layer", layer, 0, pool.fmt.layers - 1)
    cuda = pool.device != "cpu"
    if not available("cuda" if cuda else "cpu"):
        raise KvmmError(errno.ENOSYS, f"{_lib.path} has no {'CUDA' if cuda else 'CPU'} kernels "
                        "(libkvmm without kvmm_cpu_*/kvmm_cuda_* exports)", "kvmm.kernels")
    return cuda


def _kfmt(pool: PoolViews) -> ctypes.Array:
    """The pool's struct kvmm_fmt (kvmm_fmt_init into an opaque buffer), made once."""
    buf = getattr(pool, "_kvmm_fmt", None)
    if buf is None:
        f = pool.fmt
        buf = (ctypes.c_uint64 * (_lib.FMT_BUF_BYTES // 8))()
        wire = _lib.Format(f.layers, f.kv_heads, f.head_dim, f.dtype, f.quant_group, 0)
        check(lib.kvmm_fmt_init(buf, ctypes.byref(wire), pool.page_size), "kvmm_fmt_init")
        pool._kvmm_fmt = buf
    return buf


def _tensor(name: str, t: Any, dtype: str, ndim: int, device: str) -> Any:
    if not type(t).__module__.startswith("torch"):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if str(t.dtype) != "torch." + dtype:
        raise TypeError(f"{name} must be torch.{dtype}, not {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, not shape {list(t.shape)}")
    if str(t.device) != device and not (device == "cpu" and t.device.type == "cpu"):
        raise ValueError(f"{name} must be on {device} (the pool's device), not {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t


def _stream(pool: PoolViews) -> int:
    import torch
    return torch.cuda.current_stream(torch.device(pool.device)).cuda_stream


_cuda_ready: dict = {}


def _cuda_init(pool: PoolViews) -> None:
    ordinal = int(pool.device.split(":")[1])
    if _cuda_ready.get(ordinal):
        return
    err = lib.kvmm_cuda_init(ordinal)
    if err < 0:
        e = make_error(err, "kvmm_cuda_init")
        why = lib.kvmm_cuda_why()
        if why:
            e.strerror = f"{e.strerror}: {why.decode('utf-8', 'replace')}"
        raise e
    _cuda_ready[ordinal] = True


def _pages(pool: PoolViews, layer: int) -> _lib.KvPages:
    return _lib.KvPages(pool.base_ptr, ctypes.addressof(_kfmt(pool)), layer, pool.nr_frames)


def _batch(pool: PoolViews, layer: int, q: Any, block_tables: Any, ctx_lens: Any,
           q_lens: Any, scale: Optional[float]) -> tuple:
    dev = pool.device
    f = pool.fmt
    _tensor("q", q, "float32", 3, dev)
    _tensor("block_tables", block_tables, "int32", 2, dev)
    _tensor("ctx_lens", ctx_lens, "int32", 1, dev)
    n, max_blocks = block_tables.shape
    hq = q.shape[1]
    if q.shape[2] != f.head_dim:
        raise ValueError(f"q's last dimension must be head_dim {f.head_dim}, not {q.shape[2]}")
    if hq == 0 or hq % f.kv_heads:
        raise ValueError(f"q's heads ({hq}) must be a positive multiple of kv_heads {f.kv_heads}")
    if ctx_lens.shape[0] != n:
        raise ValueError(f"ctx_lens must have {n} entries (block_tables' rows), "
                         f"not {ctx_lens.shape[0]}")
    if max_blocks == 0 or n > _args.U32_MAX or max_blocks > _args.U32_MAX:
        raise ValueError("block_tables must have at least one column")
    if q_lens is not None:
        _tensor("q_lens", q_lens, "int32", 1, dev)
        if q_lens.shape[0] != n:
            raise ValueError(f"q_lens must have {n} entries, not {q_lens.shape[0]}")
    s = 0.0 if scale is None else float(scale)
    if not s >= 0.0:
        raise ValueError("scale must be positive (or None for 1/sqrt(head_dim))")
    b = _lib.AttnBatch(_pages(pool, layer), n, hq, block_tables.data_ptr(), max_blocks,
                       ctx_lens.data_ptr(), q_lens.data_ptr() if q_lens is not None else None, s)
    return b


def _out(q: Any, out: Any, rows: int) -> Any:
    import torch
    if out is None:
        return torch.empty((rows,) + tuple(q.shape[1:]), dtype=torch.float32, device=q.device)
    _tensor("out", out, "float32", 3, str(q.device))
    if tuple(out.shape) != (rows,) + tuple(q.shape[1:]):
        raise ValueError(f"out must have shape {[rows] + list(q.shape[1:])}, "
                         f"not {list(out.shape)}")
    return out


def paged_decode(pool: PoolViews, layer: int, q: Any, block_tables: Any, ctx_lens: Any, *,
                 out: Any = None, scale: Optional[float] = None) -> Any:
    """One decode step of attention over the pages of ``layer``.

    q: float32 ``[nr_seqs, num_q_heads, head_dim]`` (query head j reads KV head
    ``j // (num_q_heads // kv_heads)``); block_tables: int32 ``[nr_seqs, max_blocks]``
    (from :meth:`kvmm.Client.block_table`); ctx_lens: int32 ``[nr_seqs]``, the tokens each
    sequence attends to (its new token's K/V already written); scale: softmax scale, None for
    ``1/sqrt(head_dim)``.  Returns out, float32 like q.  All on the pool's device.
    """
    cuda = _need(pool, layer)
    b = _batch(pool, layer, q, block_tables, ctx_lens, None, scale)
    if q.shape[0] != b.nr_seqs:
        raise ValueError(f"q must have {b.nr_seqs} rows (one per sequence), not {q.shape[0]}")
    out = _out(q, out, q.shape[0])
    if cuda:
        _cuda_init(pool)
        check(lib.kvmm_cuda_paged_decode(ctypes.byref(b), q.data_ptr(), out.data_ptr(),
                                         _stream(pool)), "kvmm_cuda_paged_decode")
    else:
        check(lib.kvmm_cpu_paged_decode(ctypes.byref(b), q.data_ptr(), out.data_ptr()),
              "kvmm_cpu_paged_decode")
    return out


def paged_prefill(pool: PoolViews, layer: int, q: Any, block_tables: Any, ctx_lens: Any,
                  q_lens: Any, *, out: Any = None, scale: Optional[float] = None) -> Any:
    """Causal prefill attention over the pages of ``layer``.

    Sequence i's ``q_lens[i]`` queries are its tokens at positions ``ctx_lens[i] - q_lens[i]
    .. ctx_lens[i] - 1`` (their K/V already written with :func:`reshape_and_cache`); each
    attends to the tokens at or before its position.  q: float32 ``[sum(q_lens),
    num_q_heads, head_dim]``, the sequences' queries one after the other; block_tables int32
    ``[nr_seqs, max_blocks]``; ctx_lens, q_lens int32 ``[nr_seqs]``.  Returns out, float32
    like q.  (Reads q_lens to check the sum: a device sync on the GPU.)
    """
    cuda = _need(pool, layer)
    b = _batch(pool, layer, q, block_tables, ctx_lens, q_lens, scale)
    ql = q_lens.tolist()
    if min(ql, default=0) < 0:
        raise ValueError("q_lens must not be negative")
    if q.shape[0] != sum(ql):
        raise ValueError(f"q must have sum(q_lens) = {sum(ql)} rows, not {q.shape[0]}")
    out = _out(q, out, q.shape[0])
    if cuda:
        _cuda_init(pool)
        check(lib.kvmm_cuda_paged_prefill(ctypes.byref(b), max(ql, default=0), q.data_ptr(),
                                          out.data_ptr(), _stream(pool)),
              "kvmm_cuda_paged_prefill")
    else:
        check(lib.kvmm_cpu_paged_prefill(ctypes.byref(b), q.data_ptr(), out.data_ptr()),
              "kvmm_cpu_paged_prefill")
    return out


def reshape_and_cache(pool: PoolViews, layer: int, k: Any, v: Any, slots: Any) -> None:
    """Write new K and V rows into their pages of ``layer``, converting to the pool's dtype
    (int8: quantized per group, scale = max|x| / 127).

    k, v: float32 ``[nr_tokens, kv_heads, head_dim]``; slots: int64 ``[nr_tokens]``, token
    t's slot ``frame * tokens_per_page + row`` (a negative slot is skipped: padding).
    """
    cuda = _need(pool, layer)
    dev, f = pool.device, pool.fmt
    _tensor("k", k, "float32", 3, dev)
    _tensor("v", v, "float32", 3, dev)
    _tensor("slots", slots, "int64", 1, dev)
    shape = (slots.shape[0], f.kv_heads, f.head_dim)
    if tuple(k.shape) != shape or tuple(v.shape) != shape:
        raise ValueError(f"k and v must have shape {list(shape)} ([len(slots), kv_heads, "
                         f"head_dim]), not {list(k.shape)} and {list(v.shape)}")
    if shape[0] > _args.U32_MAX:
        raise ValueError("too many tokens")
    kv = _pages(pool, layer)
    if cuda:
        _cuda_init(pool)
        check(lib.kvmm_cuda_reshape_and_cache(ctypes.byref(kv), shape[0], slots.data_ptr(),
                                              k.data_ptr(), v.data_ptr(), _stream(pool)),
              "kvmm_cuda_reshape_and_cache")
    else:
        check(lib.kvmm_cpu_reshape_and_cache(ctypes.byref(kv), shape[0], slots.data_ptr(),
                                             k.data_ptr(), v.data_ptr()),
              "kvmm_cpu_reshape_and_cache")


def copy_pages(pool: PoolViews, dst: Any, src: Any, ntokens: int = 0) -> None:
    """Copy frame ``src[i]`` to frame ``dst[i]`` of the pool, every layer, K, V and scales:
    the whole used page (``ntokens`` 0), or only the first ``ntokens`` rows of each slab (a
    partial last block, as copy-on-write needs).  dst, src: int32 ``[nr]`` on the pool's
    device, frames below ``nr_frames``, no frame copied onto itself.  (Reads the frame
    numbers to check them: a device sync on the GPU.)
    """
    cuda = _need(pool)
    dev = pool.device
    _tensor("dst", dst, "int32", 1, dev)
    _tensor("src", src, "int32", 1, dev)
    if dst.shape != src.shape:
        raise ValueError(f"dst and src must have the same length, not {dst.shape[0]} and "
                         f"{src.shape[0]}")
    nt = _args.integer("ntokens", ntokens, 0, pool.tokens_per_page)
    for name, t in (("dst", dst), ("src", src)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= pool.nr_frames):
            raise ValueError(f"{name} frames must be in [0, {pool.nr_frames})")
    fmt = ctypes.addressof(_kfmt(pool))
    n = dst.shape[0]
    if cuda:
        _cuda_init(pool)
        check(lib.kvmm_cuda_copy_pages(fmt, pool.base_ptr, pool.base_ptr, dst.data_ptr(),
                                       src.data_ptr(), n, nt, _stream(pool)),
              "kvmm_cuda_copy_pages")
    else:
        check(lib.kvmm_cpu_copy_pages(fmt, pool.base_ptr, pool.base_ptr, dst.data_ptr(),
                                      src.data_ptr(), n, nt), "kvmm_cpu_copy_pages")


def set_threads(n: int) -> None:
    """Threads the CPU attention kernels use, the caller included (kvmm_cpu_set_threads; 0:
    one per online CPU)."""
    if not _lib.has("kvmm_cpu_set_threads"):
        raise KvmmError(errno.ENOSYS, f"{_lib.path} has no kvmm_cpu_set_threads", "kvmm.kernels")
    check(lib.kvmm_cpu_set_threads(_args.integer("n", n, 0, 64)), "kvmm_cpu_set_threads")


def get_threads() -> int:
    """Threads the CPU attention kernels use (kvmm_cpu_get_threads)."""
    if not _lib.has("kvmm_cpu_get_threads"):
        raise KvmmError(errno.ENOSYS, f"{_lib.path} has no kvmm_cpu_get_threads", "kvmm.kernels")
    return lib.kvmm_cpu_get_threads()


_ISAS = ("scalar", "avx2", "avx512")  # enum kvmm_cpu_isa, in order


def _need_isa() -> None:
    if not _lib.has("kvmm_cpu_isa_get"):
        raise KvmmError(errno.ENOSYS, f"{_lib.path} has no kvmm_cpu_isa_*", "kvmm.kernels")


def isa() -> str:
    """The vector code the CPU kernels use: "scalar", "avx2" or "avx512"
    (kvmm_cpu_isa_get; $KVMM_KERNEL_ISA if set and supported, else the best)."""
    _need_isa()
    return lib.kvmm_cpu_isa_name(lib.kvmm_cpu_isa_get()).decode()


def isas() -> list[str]:
    """The vector codes this CPU and build can run (kvmm_cpu_isa_supported)."""
    _need_isa()
    return [name for i, name in enumerate(_ISAS) if lib.kvmm_cpu_isa_supported(i)]


def set_isa(name: str) -> None:
    """Force the CPU kernels' vector code (kvmm_cpu_isa_set; tests, benchmarks); KvmmError
    ENOTSUP when this CPU cannot run it.  Not while kernels run."""
    _need_isa()
    if name not in _ISAS:
        raise ValueError(f"isa must be one of {', '.join(_ISAS)}, not {name!r}")
    check(lib.kvmm_cpu_isa_set(_ISAS.index(name)), "kvmm_cpu_isa_set")
