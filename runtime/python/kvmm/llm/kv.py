# SPDX-License-Identifier: MIT
"""Where the engine keeps K and V: the interface, and contiguous per-sequence tensors.

The engine talks to a KV store through a few calls, the same ones a vLLM or SGLang worker
makes of its block manager:

    new_seq()                    an empty sequence
    lookup(seq, tokens)          map a cached prefix of tokens, return how many tokens it covers
    fork(seq, n)                 a new sequence sharing seq's first n tokens
    seal_computed(seq)           offer seq's computed full pages to later prompts now (optional)
    finish(seq)                  the request is done: keep what may serve later prompts, free
    free(seq)                    drop seq (a preempted or aborted sequence)
    begin_step(batch)            make room for and pin the batch's new tokens; returns the
                                 sequences kvmm preempted, which sit out this step
    attention(layer, q, k, v)    store the step's new k, v and attend (model.AttnFn); may
                                 raise KVOutOfMemory (a chunked step found no room)
    end_step()                   unpin
    step_lost()                  sequences lost while the step ran: their output is void

ContiguousKV keeps each sequence's K and V in its own growing tensors: the baseline kvmm pages
are measured against (tools/kvmm-llm-bench) and the path used without a daemon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from .model import causal_attention

__all__ = ["StepEntry", "KVStore", "ContiguousKV", "KVOutOfMemory"]


class KVOutOfMemory(MemoryError):
    """begin_step found no room for the batch, and nothing was preempted to make some: the
    engine must give up a sequence of its own (it is recomputed later) and try again."""


@dataclass
class StepEntry:
    """One sequence in a step: tokens[start:start + len(new)] are new (their KV is computed
    this step); the first start tokens' KV is already stored."""

    seq: object
    start: int
    new: Sequence[int]


class KVStore:
    """The interface the engine uses (see the module docstring)."""

    name = "abstract"
    # sequences' lookups may return a multiple of this (1: no page granularity)
    tokens_per_page = 1

    def new_seq(self):
        raise NotImplementedError

    def lookup(self, seq, tokens: Sequence[int]) -> int:
        return 0

    def fork(self, seq, ntokens: int):
        raise NotImplementedError

    def seal_computed(self, seq) -> None:
        pass

    def finish(self, seq) -> None:
        self.free(seq)

    def free(self, seq) -> None:
        raise NotImplementedError

    def begin_step(self, batch: List[StepEntry]) -> List[object]:
        raise NotImplementedError

    def attention(self, layer: int, q, k, v) -> torch.Tensor:
        raise NotImplementedError

    def end_step(self) -> None:
        pass

    def step_lost(self) -> List[object]:
        """Sequences lost while the step ran (their output of it is void): none here."""
        return []

    def close(self) -> None:
        pass


class _ContigSeq:
    __slots__ = ("k", "v", "len")

    def __init__(self):
        self.k: List[Optional[torch.Tensor]] = []
        self.v: List[Optional[torch.Tensor]] = []
        self.len = 0


class ContiguousKV(KVStore):
    """Each sequence's K and V of each layer in one [capacity, kv_heads, head_dim] tensor,
    grown by doubling; attention is one matmul per sequence over its tensors."""

    name = "contiguous"

    def __init__(self, layers: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device="cpu", initial: int = 256):
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device, self.initial = dtype, torch.device(device), initial
        self._batch: List[StepEntry] = []
        self.live = 0

    def _alloc(self, cap):
        return torch.empty(cap, self.kv_heads, self.head_dim, dtype=self.dtype, device=self.device)

    def new_seq(self):
        s = _ContigSeq()
        s.k = [self._alloc(self.initial) for _ in range(self.layers)]
        s.v = [self._alloc(self.initial) for _ in range(self.layers)]
        self.live += 1
        return s

    def fork(self, seq, ntokens):
        if ntokens > seq.len:
            raise ValueError(f"fork of {ntokens} tokens from a sequence of {seq.len}")
        c = _ContigSeq()
        c.k = [t.clone() for t in seq.k]
        c.v = [t.clone() for t in seq.v]
        c.len = ntokens
        self.live += 1
        return c

    def free(self, seq):
        if seq.k:
            seq.k, seq.v, seq.len = [], [], 0
            self.live -= 1

    def begin_step(self, batch):
        for e in batch:
            s = e.seq
            if e.start != s.len:
                raise ValueError(f"step writes at {e.start}, sequence holds {s.len} tokens")
            need = e.start + len(e.new)
            cap = s.k[0].shape[0]
            if need > cap:
                while cap < need:
                    cap *= 2
                for lst in (s.k, s.v):
                    for i, t in enumerate(lst):
                        nt = self._alloc(cap)
                        nt[: s.len] = t[: s.len]
                        lst[i] = nt
        self._batch = batch
        return []

    def attention(self, layer, q, k, v):
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        row = 0
        for e in self._batch:
            s, n = e.seq, len(e.new)
            end = e.start + n
            s.k[layer][e.start:end] = k[row:row + n]
            s.v[layer][e.start:end] = v[row:row + n]
            out[row:row + n] = causal_attention(
                q[row:row + n], s.k[layer][:end], s.v[layer][:end], e.start
            )
            row += n
        return out

    def end_step(self):
        for e in self._batch:
            e.seq.len = e.start + len(e.new)
        self._batch = []
