# SPDX-License-Identifier: MIT
"""Our own reader and writer of the safetensors format.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end
of the header; an optional "__metadata__" entry maps strings to strings), then the raw
little-endian tensor bytes. A sharded checkpoint adds model.safetensors.index.json whose
"weight_map" names the file that holds each tensor.

Tensors are read with numpy (np.empty + readinto: one copy, writable, works with torch 1.13 and
2.x alike) and handed to torch with torch.from_numpy. numpy has no bfloat16: BF16 is read as
int16 and reinterpreted with Tensor.view(torch.bfloat16).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch

__all__ = ["SafetensorsError", "SafetensorsFile", "Checkpoint", "write_safetensors"]

# The header is JSON describing tensors; anything larger than this is not a header we trust.
_MAX_HEADER = 100 << 20

# safetensors dtype -> (numpy dtype used to read the bytes, torch dtype of the result)
_DTYPES = {
    "F32": (np.float32, torch.float32),
    "F16": (np.float16, torch.float16),
    "BF16": (np.int16, torch.bfloat16),
    "F64": (np.float64, torch.float64),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16),
    "I8": (np.int8, torch.int8),
    "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}
_TORCH_TO_ST = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class SafetensorsError(ValueError):
    """A malformed safetensors file or index: the message names the file and what is wrong."""


class SafetensorsFile:
    """One .safetensors file: its header is parsed at open, tensors are read on demand."""

    def __init__(self, path: str):
        self.path = path
        self._entries: Dict[str, Tuple[str, List[int], int, int]] = {}
        self.metadata: Dict[str, str] = {}
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(8)
            if len(raw) != 8:
                raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > _MAX_HEADER or 8 + hlen > size:
                raise SafetensorsError(f"{path}: header length {hlen} past the file's {size} bytes")
            try:
                header = json.loads(f.read(hlen).decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{path}: header is not a JSON object")
        self._data_start = 8 + hlen
        data_len = size - self._data_start
        spans = []
        for name, ent in header.items():
            if name == "__metadata__":
                if isinstance(ent, dict):
                    self.metadata = {str(k): str(v) for k, v in ent.items()}
                continue
            try:
                dtype = ent["dtype"]
                shape = [int(d) for d in ent["shape"]]
                begin, end = (int(o) for o in ent["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise SafetensorsError(f"{path}: tensor {name!r}: bad header entry") from None
            if dtype not in _DTYPES:
                raise SafetensorsError(f"{path}: tensor {name!r}: dtype {dtype} not supported")
            if any(d < 0 for d in shape):
                raise SafetensorsError(f"{path}: tensor {name!r}: negative dimension")
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype][0]).itemsize
            if not (0 <= begin <= end <= data_len) or end - begin != nbytes:
                raise SafetensorsError(
                    f"{path}: tensor {name!r}: data_offsets [{begin}, {end}) do not hold "
                    f"{dtype}{shape} within the {data_len} data bytes"
                )
            spans.append((begin, end, name))
            self._entries[name] = (dtype, shape, begin, end)
        spans.sort()
        for (b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} overlap")

    def keys(self) -> List[str]:
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def dtype(self, name: str) -> torch.dtype:
        return _DTYPES[self._entries[name][0]][1]

    def shape(self, name: str) -> List[int]:
        return list(self._entries[name][1])

    def get(self, name: str) -> torch.Tensor:
        """The tensor name, as a new CPU tensor of its stored dtype."""
        try:
            dtype, shape, begin, end = self._entries[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor {name!r}") from None
        npdt, tdt = _DTYPES[dtype]
        arr = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=npdt)
        with open(self.path, "rb") as f:
            f.seek(self._data_start + begin)
            got = f.readinto(memoryview(arr).cast("B")) if end > begin else 0
        if got != end - begin:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: file truncated")
        if not arr.dtype.isnative:  # big-endian host: the format is little-endian
            arr = arr.byteswap().newbyteorder()
        t = torch.from_numpy(arr)
        if tdt == torch.bfloat16:
            t = t.view(torch.bfloat16)
        return t.reshape(shape)


class Checkpoint:
    """The tensors of a checkpoint directory: model.safetensors.index.json, or every
    *.safetensors file in it."""

    def __init__(self, directory: str):
        self.directory = directory
        self._files: Dict[str, SafetensorsFile] = {}
        self._where: Dict[str, str] = {}
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index):
            try:
                with open(index, "r", encoding="utf-8") as f:
                    wmap = json.load(f)["weight_map"]
                if not isinstance(wmap, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise SafetensorsError(f"{index}: no weight_map object") from None
            for name, fname in wmap.items():
                if os.path.basename(str(fname)) != fname:
                    raise SafetensorsError(f"{index}: {name!r} in {fname!r}, outside the directory")
                self._where[name] = fname
            for fname in sorted(set(self._where.values())):
                self._open(fname)
            for name, fname in self._where.items():
                if name not in self._files[fname]:
                    raise SafetensorsError(f"{index}: {name!r} is not in {fname}")
        else:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
            if not names:
                raise SafetensorsError(f"{directory}: no *.safetensors file")
            for fname in names:
                for name in self._open(fname).keys():
                    if name in self._where:
                        raise SafetensorsError(f"{directory}: {name!r} in two files")
                    self._where[name] = fname

    def _open(self, fname: str) -> SafetensorsFile:
        st = SafetensorsFile(os.path.join(self.directory, fname))
        self._files[fname] = st
        return st

    def keys(self) -> List[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def _file(self, name: str) -> SafetensorsFile:
        try:
            return self._files[self._where[name]]
        except KeyError:
            raise KeyError(f"{self.directory}: checkpoint has no tensor {name!r}") from None

    def shape(self, name: str) -> List[int]:
        return self._file(name).shape(name)

    def dtype(self, name: str) -> torch.dtype:
        return self._file(name).dtype(name)

    def get(self, name: str) -> torch.Tensor:
        return self._file(name).get(name)


def write_safetensors(
    path: str, tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None
) -> None:
    """Write tensors (CPU, any dtype of the table above) as one safetensors file."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    blobs: List[bytes] = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _TORCH_TO_ST:
            raise SafetensorsError(f"{name}: dtype {t.dtype} not supported")
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            arr = t.numpy()
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": _TORCH_TO_ST[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [off, off + len(data)],
        }
        blobs.append(data)
        off += len(data)
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * (-len(hdr) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for b in blobs:
            f.write(b)


def write_sharded(directory: str, shards: Iterable[Dict[str, torch.Tensor]]) -> None:
    """Write tensors as model-0000i-of-0000n.safetensors plus model.safetensors.index.json."""
    shards = list(shards)
    wmap = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, fname), part)
        for name in part:
            wmap[name] = fname
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)
