# SPDX-License-Identifier: MIT
"""KV formats (struct kvmm_format) and the page layout they imply.

A format is what a process registers at attach: layers, KV heads, head dim, dtype (and the
int8 scale group).  The layout of a page is ``[layer][K|V][token][head][dim]``: for each layer
the K slab, then the V slab, each ``tokens_per_page`` rows of ``kv_heads * head_dim``
elements; an int8 slab's fp32 scales (one per token, head and group) follow its data, padded
to 4 bytes.  :class:`PageLayout` computes the same numbers as kvmm/format.c
(``kvmm_fmt_init``); :class:`kvmm.Client` checks them against the library's at attach.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _args

DTYPE_FP32 = 1
DTYPE_FP16 = 2
DTYPE_BF16 = 3
DTYPE_INT8 = 4

DTYPE_NAMES = {"fp32": DTYPE_FP32, "float32": DTYPE_FP32, "fp16": DTYPE_FP16,
               "float16": DTYPE_FP16, "bf16": DTYPE_BF16, "bfloat16": DTYPE_BF16,
               "int8": DTYPE_INT8}
DTYPE_SIZE = {DTYPE_FP32: 4, DTYPE_FP16: 2, DTYPE_BF16: 2, DTYPE_INT8: 1}
SCALE_BYTES = 4


def dtype_code(dtype: Any) -> int:
    """The kvmm dtype code of ``dtype``: a name ("fp16", "bf16", "fp32", "int8"), a
    ``DTYPE_*`` code, or a torch dtype (torch.float16, torch.bfloat16, torch.float32,
    torch.int8)."""
    if isinstance(dtype, str):
        try:
            return DTYPE_NAMES[dtype.lower()]
        except KeyError:
            raise ValueError(f"unknown dtype {dtype!r} (one of fp32, fp16, bf16, int8)") from None
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype not in DTYPE_SIZE:
            raise ValueError(f"unknown dtype code {dtype}")
        return dtype
    name = str(dtype)  # torch.float16 -> "torch.float16", without importing torch
    if name.startswith("torch."):
        return dtype_code(name[len("torch."):])
    raise TypeError(f"dtype must be a name, a kvmm.DTYPE_* code or a torch dtype, not {dtype!r}")


@dataclass(frozen=True)
class Format:
    """A KV format: ``layers`` layers of ``kv_heads`` heads of ``head_dim`` elements of
    ``dtype`` (see :func:`dtype_code`); ``quant_group`` elements per fp32 scale for int8
    (must divide head_dim), 0 otherwise."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: Any = "fp16"
    quant_group: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_code(self.dtype))
        for name in ("layers", "kv_heads", "head_dim", "quant_group"):
            object.__setattr__(self, name, _args.u32(name, getattr(self, name)))
        if not self.layers or not self.kv_heads or not self.head_dim:
            raise ValueError("layers, kv_heads and head_dim must be positive")
        if self.dtype == DTYPE_INT8:
            if not self.quant_group or self.head_dim % self.quant_group:
                raise ValueError("int8 needs a quant_group that divides head_dim")
        elif self.quant_group:
            raise ValueError("quant_group is only for int8")

    @property
    def elem_bytes(self) -> int:
        return DTYPE_SIZE[self.dtype]

    @property
    def dtype_name(self) -> str:
        return {DTYPE_FP32: "fp32", DTYPE_FP16: "fp16", DTYPE_BF16: "bf16",
                DTYPE_INT8: "int8"}[self.dtype]


@dataclass(frozen=True)
class PageLayout:
    """Where each layer's K and V (and int8 scales) lie inside a page of ``page_size`` bytes.

    Byte offsets inside a page: K of layer l starts at ``(2 * l) * slab_bytes``, V at
    ``(2 * l + 1) * slab_bytes``; token t's row at ``+ t * row_bytes``; an int8 slab's scales
    at ``+ scale_off + t * scale_row_bytes``.
    """

    fmt: Format
    page_size: int
    tokens_per_page: int
    row_bytes: int
    scale_row_bytes: int
    slab_bytes: int
    scale_off: int
    token_bytes: int

    @classmethod
    def of(cls, fmt: Format, page_size: int) -> "PageLayout":
        """The layout of ``fmt`` in pages of ``page_size`` bytes (kvmm_fmt_init's rules);
        ValueError when not even one token fits."""
        groups = fmt.head_dim // fmt.quant_group if fmt.dtype == DTYPE_INT8 else 0
        row = fmt.kv_heads * fmt.head_dim * fmt.elem_bytes
        srow = fmt.kv_heads * groups * SCALE_BYTES
        token = (row + srow) * 2 * fmt.layers

        def sizes(tpp: int) -> tuple[int, int, int]:
            data = tpp * row
            if srow:
                data = -(-data // SCALE_BYTES) * SCALE_BYTES
            slab = data + tpp * srow
            return slab, (data if srow else 0), slab * 2 * fmt.layers

        tpp = page_size // token
        if tpp and sizes(tpp)[2] > page_size:
            tpp -= 1
        if not tpp:
            raise ValueError(f"a token of this format ({token} bytes) does not fit in a page "
                             f"of {page_size} bytes")
        slab, scale_off, _ = sizes(tpp)
        return cls(fmt, page_size, tpp, row, srow, slab, scale_off, token)

    def offset(self, layer: int, kv: int) -> int:
        """Byte offset of layer ``layer``'s K (kv=0) or V (kv=1) slab inside a page."""
        return (2 * layer + kv) * self.slab_bytes

    def scale_offset(self, layer: int, kv: int) -> int:
        """Byte offset of an int8 slab's scales inside a page."""
        return (2 * layer + kv) * self.slab_bytes + self.scale_off
