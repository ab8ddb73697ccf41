# SPDX-License-Identifier: MIT
"""Zero-copy views of the pool: per layer, K and V of every frame as one strided tensor.

A page is laid out ``[layer][K|V][token][head][dim]`` and frame n lies at ``base + n *
page_size``, so layer l's K of the whole pool is the 4-D array::

    k[l][frame, token, head, dim]   shape [nr_frames, tokens_per_page, kv_heads, head_dim]
    strides (elements): [page_size / elem, kv_heads * head_dim, head_dim, 1]

over the pool's own memory: nothing is copied, a write through a view is a write to the page,
seen by every process of the namespace.  That is the shape paged-attention kernels index with
a block table (FlashAttention's and FlashInfer's "NHD" paged layout, with a page stride).
int8 formats carry fp32 scales, ``[nr_frames, tokens_per_page, kv_heads, head_dim /
quant_group]``, likewise.

Host pools give torch tensors (``kind="torch"``) or numpy arrays (``kind="numpy"``, without
torch; numpy has no bfloat16, so bf16 pools need torch).  A pool in GPU memory (kvmmd
``--backend cuda``) gives CUDA tensors over the mapping ``kvmm_cuda_map_fds`` made at attach,
through ``__cuda_array_interface__`` (untested here: no GPU in CI).

Lifetime: a view keeps the pool mapped.  :meth:`kvmm.Client.close` ends the handle for calls
at once, but the detach (which unmaps the pool and ends the session) waits until the last view
is gone, so a view never points at unmapped memory.  Sealed pages are shared and immutable by
contract: never write through a view into a sealed page.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from .format import DTYPE_BF16, DTYPE_FP16, DTYPE_FP32, DTYPE_INT8

_TORCH_DTYPE = {DTYPE_FP32: "float32", DTYPE_FP16: "float16", DTYPE_BF16: "bfloat16",
                DTYPE_INT8: "int8"}
_NUMPY_DTYPE = {DTYPE_FP32: "float32", DTYPE_FP16: "float16", DTYPE_INT8: "int8"}


class _HostBuffer:
    """The pool's bytes for numpy (``__array_interface__``); keeps the session alive.
    ``readonly``: numpy refuses writes (torch ignores the flag, and warns about it: torch
    views are made over a writable buffer)."""

    def __init__(self, session: Any, addr: int, nbytes: int, readonly: bool = False) -> None:
        self._session = session
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                    "data": (addr, readonly), "version": 3}


class _CudaBuffer:
    """The pool's device bytes for torch (``__cuda_array_interface__``, version 2)."""

    def __init__(self, session: Any, devptr: int, nbytes: int) -> None:
        self._session = session
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (devptr, False), "version": 2,
                                         "strides": None}


def cuda_device_ordinal() -> int:
    """The CUDA ordinal libkvmm maps a cuda-backend pool on: $KVMM_CUDA_DEVICE, default 0."""
    v = os.environ.get("KVMM_CUDA_DEVICE", "0")
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"KVMM_CUDA_DEVICE={v!r} maps no device") from None


class PoolViews:
    """The views of one handle's pool; get them with :meth:`kvmm.Client.views` (made once).

    Attributes: ``k[l]`` and ``v[l]`` per layer (``[nr_frames, tokens_per_page, kv_heads,
    head_dim]`` of the format's dtype: torch.float32/float16/bfloat16/int8), ``k_scales[l]``
    and ``v_scales[l]`` (int8: fp32 ``[nr_frames, tokens_per_page, kv_heads, groups]``, else
    None), ``base`` (the whole pool as 1-D uint8), ``base_ptr`` (address of frame 0, host or
    device), ``device`` ("cpu" or "cuda:N"), ``layout`` (:class:`kvmm.PageLayout`).
    """

    def __init__(self, client: Any, kind: str = "torch") -> None:
        if kind not in ("torch", "numpy"):
            raise ValueError(f"kind must be 'torch' or 'numpy', not {kind!r}")
        self.kind = kind
        self.layout = L = client.layout
        self.fmt = fmt = client.fmt
        self.nr_frames = client.nr_frames
        self.page_size = client.page_size
        self.tokens_per_page = client.tokens_per_page
        nbytes = self.nr_frames * self.page_size
        backend = client.backend
        if backend == "host":
            self.base_ptr = client.frame_addr(0)
            if self.nr_frames > 1 and (client.frame_addr(self.nr_frames - 1) !=
                                       self.base_ptr + (self.nr_frames - 1) * self.page_size):
                raise RuntimeError("kvmm: the pool's frames are not contiguous in this process")
            buf: Any = _HostBuffer(client._session, self.base_ptr, nbytes)
            self.device = "cpu"
        elif backend == "cuda":
            if kind != "torch":
                raise ValueError("a pool in GPU memory has only torch views (kind='torch')")
            self.base_ptr = client.frame_devptr(0)
            buf = _CudaBuffer(client._session, self.base_ptr, nbytes)
            self.device = f"cuda:{cuda_device_ordinal()}"
        else:
            raise ValueError("this handle maps no pool ($KVMM_CUDA_DEVICE=none): no views")

        if kind == "torch":
            import torch
            if backend == "host":
                import numpy
                self.base = torch.from_numpy(numpy.asarray(buf))
            else:
                self.base = torch.as_tensor(buf, device=self.device)
        else:
            import numpy
            self.base = numpy.asarray(buf)
        self._make_views()

    @classmethod
    def scratch(cls, fmt: Any, page_size: int, nr_frames: int) -> "PoolViews":
        """Torch views of the same shape over a host buffer of ``nr_frames`` pages of this
        process (not kvmm's pool), laid out as kvmm lays out pages of ``fmt`` and
        ``page_size``: a place to gather pages into for kvmm.kernels, which take PoolViews
        (kvmm.llm's chunked attention copies a sequence's pinned chunks into one)."""
        import torch

        from .format import PageLayout

        if nr_frames < 1:
            raise ValueError(f"nr_frames {nr_frames}: at least 1")
        self = cls.__new__(cls)
        self.kind = "torch"
        self.layout = PageLayout.of(fmt, page_size)
        self.fmt = fmt
        self.nr_frames = nr_frames
        self.page_size = page_size
        self.tokens_per_page = self.layout.tokens_per_page
        self.device = "cpu"
        self.base = torch.zeros(nr_frames * page_size, dtype=torch.uint8)
        self.base_ptr = self.base.data_ptr()
        self._make_views()
        return self

    @classmethod
    def far(cls, client: Any, addr: int, nr_pages: int, far_base: int,
            kind: str = "torch") -> "PoolViews":
        """Views of the far window ``kvmm_far_map`` mapped at ``addr``: ``nr_pages`` pages
        laid out like the pool (frames [0, far_base), then the host swap tier's slots), so
        ``k[l][entry]`` is the page ``kvmm_pin_far`` returned ``entry`` for.  Get them with
        :meth:`kvmm.Client.far_views`.  Read-only memory: a write through them is a SIGSEGV
        (numpy views refuse it); they are void after the next far_map of the client (its
        views are then emptied: ``nr_frames`` 0, no ``k``/``v``).  ``far_base`` is kept as
        an attribute."""
        if kind not in ("torch", "numpy"):
            raise ValueError(f"kind must be 'torch' or 'numpy', not {kind!r}")
        self = cls.__new__(cls)
        self.kind = kind
        self.layout = client.layout
        self.fmt = client.fmt
        self.nr_frames = nr_pages
        self.page_size = client.page_size
        self.tokens_per_page = client.tokens_per_page
        self.far_base = far_base
        self.device = "cpu"
        self.base_ptr = addr
        buf = _HostBuffer(client._session, addr, nr_pages * self.page_size,
                          readonly=kind == "numpy")
        import numpy
        if kind == "torch":
            import torch
            self.base = torch.from_numpy(numpy.asarray(buf))
        else:
            self.base = numpy.asarray(buf)
        self._make_views()
        return self

    def _void(self) -> None:
        """Forget the memory (a far window unmapped): no views, no frames, so the kernels
        refuse every block-table entry instead of reading unmapped memory."""
        self.k, self.v, self.k_scales, self.v_scales = [], [], None, None
        self.nr_frames = 0
        self.base = self._typed = self._scales = None

    def _make_views(self) -> None:
        fmt, L = self.fmt, self.layout
        if self.kind == "torch":
            import torch
            make = self._torch_view
            dt = getattr(torch, _TORCH_DTYPE[fmt.dtype])
            self._typed = self.base.view(dt)
            self._scales = self.base.view(torch.float32) if fmt.dtype == DTYPE_INT8 else None
        else:
            import numpy
            if fmt.dtype not in _NUMPY_DTYPE:
                raise TypeError("numpy has no bfloat16: use kind='torch' for a bf16 pool")
            make = self._numpy_view
            self._typed = numpy.dtype(_NUMPY_DTYPE[fmt.dtype])
            self._scales = numpy.dtype("float32") if fmt.dtype == DTYPE_INT8 else None

        e = fmt.elem_bytes
        shape = (self.nr_frames, L.tokens_per_page, fmt.kv_heads, fmt.head_dim)
        strides = (self.page_size, fmt.kv_heads * fmt.head_dim * e, fmt.head_dim * e, e)
        self.k = [make(self._typed, shape, strides, L.offset(l, 0), e) for l in range(fmt.layers)]
        self.v = [make(self._typed, shape, strides, L.offset(l, 1), e) for l in range(fmt.layers)]
        self.k_scales: Optional[list] = None
        self.v_scales: Optional[list] = None
        if fmt.dtype == DTYPE_INT8:
            groups = fmt.head_dim // fmt.quant_group
            sshape = (self.nr_frames, L.tokens_per_page, fmt.kv_heads, groups)
            sstrides = (self.page_size, fmt.kv_heads * groups * 4, groups * 4, 4)
            self.k_scales = [make(self._scales, sshape, sstrides, L.scale_offset(l, 0), 4)
                             for l in range(fmt.layers)]
            self.v_scales = [make(self._scales, sshape, sstrides, L.scale_offset(l, 1), 4)
                             for l in range(fmt.layers)]

    def _torch_view(self, typed: Any, shape: tuple, strides: tuple, off: int, e: int) -> Any:
        if self.page_size % e or off % e:
            raise RuntimeError("kvmm: page layout not aligned to the element size")
        return typed.as_strided(shape, tuple(s // e for s in strides), off // e)

    def _numpy_view(self, dtype: Any, shape: tuple, strides: tuple, off: int, e: int) -> Any:
        import numpy
        return numpy.ndarray(shape, dtype=dtype, buffer=self.base, offset=off, strides=strides)

    def kv(self, layer: int) -> tuple:
        """(K, V) of ``layer``: two ``[nr_frames, tokens_per_page, kv_heads, head_dim]``
        views."""
        return self.k[layer], self.v[layer]

    def scales(self, layer: int) -> tuple:
        """(K scales, V scales) of ``layer`` for int8 (fp32 ``[nr_frames, tokens_per_page,
        kv_heads, head_dim / quant_group]``); ValueError for other dtypes."""
        if self.k_scales is None:
            raise ValueError("only int8 formats have scales")
        return self.k_scales[layer], self.v_scales[layer]

    def page(self, frame: int) -> Any:
        """The raw bytes of one frame (1-D uint8 view of ``page_size`` bytes)."""
        if not 0 <= frame < self.nr_frames:
            raise ValueError(f"frame {frame} is not in [0, {self.nr_frames})")
        return self.base[frame * self.page_size:(frame + 1) * self.page_size]

    def __repr__(self) -> str:
        return (f"<kvmm.PoolViews {self.kind} {self.device} {self.fmt.layers} layers x "
                f"[{self.nr_frames}, {self.tokens_per_page}, {self.fmt.kv_heads}, "
                f"{self.fmt.head_dim}] {self.fmt.dtype_name}>")
