# SPDX-License-Identifier: MIT
"""Argument checks and conversions shared by the modules: every value is checked here, in
Python, before anything reaches C, so that a wrong type is a TypeError and a value out of
range a ValueError, never a wrapped integer or a wild pointer."""
from __future__ import annotations

import array
import operator
from typing import Any, Iterable, Tuple

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1


def integer(name: str, v: Any, lo: int, hi: int) -> int:
    """``v`` as an int in [lo, hi]; bools and floats are refused."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}") from None
    if i < lo or i > hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], not {i}")
    return i


def u32(name: str, v: Any) -> int:
    return integer(name, v, 0, U32_MAX)


def u64(name: str, v: Any) -> int:
    return integer(name, v, 0, U64_MAX)


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency, but say so clearly
        return None
    return numpy


def int_array(name: str, values: Any, code: str) -> Tuple[array.array, int, int]:
    """``values`` (ints, a numpy array or a CPU torch tensor) as an ``array.array`` of
    ``code`` ('I': uint32, 'Q': uint64, 'i': int32, 'q': int64): (array, address, count).

    An ``array.array`` of that very type code is used as it is (no copy).  A list is converted
    element by element (each checked); an array or tensor must have an integer dtype and every
    element in range.  Otherwise the result is a copy the caller keeps alive across the C
    call.
    """
    if type(values) is array.array and values.typecode == code:
        # already the C type: used in place (the hot path of an engine that keeps its batch
        # as an array.array), no copy and no per-element check needed
        addr, n = values.buffer_info()
        return values, addr, n
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of integers, not {type(values).__name__}")
    if hasattr(values, "__array__") or hasattr(values, "__array_interface__"):
        values = _from_ndarray(name, values, code)
    try:
        arr = array.array(code, values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers") from None
    except OverflowError:
        bits = arr_bits(code)
        raise ValueError(f"{name}: every value must fit in {bits} bits "
                         f"({'unsigned' if code.isupper() else 'signed'})") from None
    addr, n = arr.buffer_info()
    return arr, addr, n


def arr_bits(code: str) -> int:
    return array.array(code).itemsize * 8


def _from_ndarray(name: str, values: Any, code: str) -> list:
    np = _numpy()
    if type(values).__module__.startswith("torch"):
        if values.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU, not {values.device}")
        values = values.detach().numpy()
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional, not shape {tuple(a.shape)}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, not {a.dtype}")
    return a.tolist()


def seqs_of(values: Any) -> Iterable[int]:
    """A single sequence id is refused where a batch is expected (a common slip)."""
    if isinstance(values, int):
        raise TypeError("seqs must be a sequence of sequence ids, not a single int "
                        "(write [seq])")
    return values
