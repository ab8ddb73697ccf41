# SPDX-License-Identifier: MIT
"""The engine loop: continuous batching over a KV store.

Each step():
  1. admits waiting requests: a new sequence, then kv.lookup() of the prompt (all but its last
     token, whose logits we need), so a prefix any engine of the namespace sealed is mapped,
     not recomputed;
  2. builds the batch: one token for each decoding sequence, the uncomputed rest (up to the
     step's token budget) for each prefilling one;
  3. kv.begin_step() makes room and pins the batch; a sequence kvmm preempted is dropped and
     recomputed from its tokens (prompt and what it generated so far) in a later step;
  4. runs the model over the flat batch, kv.attention() storing and reading KV per layer;
  5. kv.end_step() unpins; with seal_prompts, a sequence whose prompt was just computed has
     its full pages sealed (kv.seal_computed), so other engines of the namespace map them while
     this one still decodes; the sequences whose last token was computed sample one token;
     after the prompt of an n > 1 request, its sequence is forked n - 1 times (kv.fork);
  6. finished sequences go to kv.finish(), which seals their full pages and frees them.
Requests may be added between any two steps.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from .kv import KVOutOfMemory, KVStore, StepEntry
from .model import Model
from .sampling import Sampler, SamplingParams

__all__ = ["Engine", "Request", "Completion"]


@dataclass
class Completion:
    """One continuation of a request."""

    index: int
    token_ids: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None  # "length" or "stop"
    logits: List[torch.Tensor] = field(default_factory=list)  # with Engine(record_logits=True)


@dataclass
class Request:
    id: int
    prompt: List[int]
    params: SamplingParams
    completions: List[Completion]
    arrival: float = 0.0
    first_token_time: Optional[float] = None
    cached_tokens: int = 0  # prompt tokens mapped from the prefix cache
    recomputes: int = 0  # times a sequence of it was preempted and recomputed

    @property
    def done(self) -> bool:
        return all(c.finish_reason is not None for c in self.completions)


class _Seq:
    __slots__ = ("req", "comp", "sampler", "tokens", "computed", "kv", "forks_pending")

    def __init__(self, req, comp, sampler, tokens):
        self.req: Request = req
        self.comp: Completion = comp
        self.sampler: Sampler = sampler
        self.tokens: List[int] = tokens  # prompt + generated
        self.computed = 0  # tokens whose KV is stored
        self.kv = None
        self.forks_pending = 0  # n - 1 continuations to fork off after the prompt


class Engine:
    """Continuous batching of generation requests over one model and one KV store."""

    def __init__(self, model: Model, kv: KVStore, max_batch_tokens: int = 4096,
                 max_seqs: int = 256, record_logits: bool = False, seal_prompts: bool = False):
        self.model = model
        # seal a prompt's full pages as soon as they are computed, not only when the request
        # finishes: several engines sharing a namespace (kvmm.llm.agents) then reuse them at once
        self.seal_prompts = seal_prompts
        self.kv = kv
        self.max_batch_tokens = max_batch_tokens
        self.max_seqs = max_seqs
        self.record_logits = record_logits
        self._ids = itertools.count()
        self.waiting: List[_Seq] = []
        self.running: List[_Seq] = []
        self.requests: Dict[int, Request] = {}
        self.eos = set(model.cfg.eos_token_ids)
        # after a preemption: sequences allowed to run, grown by one per finished sequence, so
        # a namespace that is too small is not thrashed by re-admitting what it just lost
        self._cap: Optional[int] = None
        self.stats = {"steps": 0, "prefill_tokens": 0, "decode_tokens": 0, "cached_tokens": 0,
                      "preempted": 0}

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, prompt: Sequence[int], params: Optional[SamplingParams] = None) -> Request:
        params = params or SamplingParams()
        params.check()
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("empty prompt")
        vocab = self.model.cfg.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} outside the vocabulary of {vocab}")
        req = Request(next(self._ids), prompt, params,
                      [Completion(i) for i in range(params.n)], arrival=time.perf_counter())
        self.requests[req.id] = req
        s = _Seq(req, req.completions[0], Sampler(params, 0), list(prompt))
        s.forks_pending = params.n - 1
        self.waiting.append(s)
        return req

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def run(self) -> None:
        while self.has_work():
            self.step()

    def generate(self, prompts: Sequence[Sequence[int]], params: Optional[SamplingParams] = None
                 ) -> List[Request]:
        reqs = [self.add_request(p, params) for p in prompts]
        self.run()
        return reqs

    # ---- one step ---------------------------------------------------------------------
    def _admit(self) -> None:
        cap = self.max_seqs if self._cap is None else min(self.max_seqs, self._cap)
        while self.waiting and (len(self.running) < cap or not self.running):
            s = self.waiting.pop(0)
            self._start(s)
            self.running.append(s)

    def _start(self, s: _Seq) -> None:
        """A new sequence for s, with whatever prefix of its tokens the store has cached."""
        s.kv = self.kv.new_seq()
        # never the last token: its logits are what the next sample needs
        hit = self.kv.lookup(s.kv, s.tokens[:-1])
        s.computed = hit
        if hit and not s.req.cached_tokens:
            s.req.cached_tokens = hit
        self.stats["cached_tokens"] += hit

    def _preempted(self, s: _Seq) -> None:
        """kvmm took s's pages: drop its sequence and compute it again from its tokens."""
        self.kv.free(s.kv)
        s.kv = None
        s.req.recomputes += 1
        self.stats["preempted"] += 1
        self.running.remove(s)
        self.waiting.insert(0, s)
        self._cap = max(1, len(self.running))

    def preempt(self, s: _Seq) -> None:
        """Give up s's KV now (as under memory pressure); it is recomputed later."""
        self._preempted(s)

    def step(self) -> int:
        """Run one step; returns the number of tokens sampled."""
        self._admit()
        budget = self.max_batch_tokens
        batch: List[StepEntry] = []
        seqs: List[_Seq] = []
        for s in self.running:  # decodes first: they take one token each
            if len(s.tokens) - s.computed == 1 and budget > 0:
                batch.append(StepEntry(s.kv, s.computed, s.tokens[s.computed:]))
                seqs.append(s)
                budget -= 1
        for s in self.running:
            left = len(s.tokens) - s.computed
            if left > 1 and budget > 0:
                n = min(left, budget)
                batch.append(StepEntry(s.kv, s.computed, s.tokens[s.computed:s.computed + n]))
                seqs.append(s)
                budget -= n
        if not batch:
            return 0
        try:
            lost = self.kv.begin_step(batch)
        except KVOutOfMemory:
            # no room and kvmm preempted nothing of ours: give up our youngest sequence (it
            # is recomputed when there is room), unless it is the only one
            if len(self.running) < 2:
                raise
            self._preempted(max(self.running, key=lambda x: (x.req.id, x.comp.index)))
            return 0
        if lost:
            lost_ids = {id(x) for x in lost}
            for s in [x for x in self.running if id(x.kv) in lost_ids]:
                self._preempted(s)
            keep = [i for i, e in enumerate(batch) if id(e.seq) not in lost_ids]
            batch = [batch[i] for i in keep]
            seqs = [seqs[i] for i in keep]
            if not batch:
                self.kv.end_step()
                return 0
        toks, pos, last_rows, samplers = [], [], [], []
        for e, s in zip(batch, seqs):
            toks.extend(e.new)
            pos.extend(range(e.start, e.start + len(e.new)))
            if e.start + len(e.new) == len(s.tokens):
                last_rows.append(len(toks) - 1)
                samplers.append(s)
        try:
            hidden = self.model.forward(torch.tensor(toks, dtype=torch.long),
                                        torch.tensor(pos, dtype=torch.long), self.kv.attention)
        except KVOutOfMemory:
            # a chunked step found no room for a chunk: nothing of it counts; give up our
            # youngest sequence as begin_step does (unless it is the only one: the caller's)
            self.kv.end_step()
            gone = {id(x) for x in self.kv.step_lost()}
            for s in [x for x in self.running if id(x.kv) in gone]:
                self._preempted(s)
            if len(self.running) < 2:
                raise
            self._preempted(max(self.running, key=lambda x: (x.req.id, x.comp.index)))
            return 0
        finally:
            self.kv.end_step()
        gone = {id(x) for x in self.kv.step_lost()}
        if gone:  # preempted during the step: its output is void, it is recomputed
            for s in [x for x in self.running if id(x.kv) in gone]:
                self._preempted(s)
            keep = [i for i, s in enumerate(seqs) if id(s.kv) not in gone and s.kv is not None]
            rows, pos0 = [], 0
            for i, e in enumerate(batch):
                if i in keep:
                    rows.extend(range(pos0, pos0 + len(e.new)))
                pos0 += len(e.new)
            hidden = hidden[rows]
            batch = [batch[i] for i in keep]
            seqs = [seqs[i] for i in keep]
            last_rows, samplers, n = [], [], 0
            for e, s in zip(batch, seqs):
                n += len(e.new)
                if e.start + len(e.new) == len(s.tokens):
                    last_rows.append(n - 1)
                    samplers.append(s)
        for e, s in zip(batch, seqs):
            s.computed = e.start + len(e.new)
            if len(e.new) == 1 and e.start >= len(s.req.prompt):
                self.stats["decode_tokens"] += 1
            else:
                self.stats["prefill_tokens"] += len(e.new)
            if self.seal_prompts and e.start < len(s.req.prompt) <= s.computed:
                self.kv.seal_computed(s.kv)
        self.stats["steps"] += 1
        sampled = 0
        if last_rows:
            logits = self.model.logits(hidden[last_rows]).cpu()  # sampled on the host
            for row, s in enumerate(samplers):
                sampled += self._sample(s, logits[row])
        return sampled

    def _sample(self, s: _Seq, logits: torch.Tensor) -> int:
        """Sample s's next token (and, right after an n > 1 prompt, its siblings')."""
        out = [s]
        if s.forks_pending:
            n = s.forks_pending
            s.forks_pending = 0
            for i in range(1, n + 1):
                child = _Seq(s.req, s.req.completions[i], Sampler(s.req.params, i),
                             list(s.tokens))
                child.kv = self.kv.fork(s.kv, s.computed)
                child.computed = s.computed
                self.running.append(child)
                out.append(child)
        for x in out:
            self._append(x, logits)
        return len(out)

    def _append(self, s: _Seq, logits: torch.Tensor) -> None:
        tok = s.sampler(logits)
        c = s.comp
        if self.record_logits:
            c.logits.append(logits.clone())
        c.token_ids.append(tok)
        s.tokens.append(tok)
        if s.req.first_token_time is None:
            s.req.first_token_time = time.perf_counter()
        p = s.req.params
        if (not p.ignore_eos and tok in self.eos) or tok in p.stop_token_ids:
            c.finish_reason = "stop"
        elif len(c.token_ids) >= p.max_tokens:
            c.finish_reason = "length"
        if c.finish_reason:
            if self._cap is not None:
                self._cap += 1
            self.running.remove(s)
            self.kv.finish(s.kv)
            s.kv = None

    def close(self) -> None:
        for s in self.running:
            if s.kv is not None:
                self.kv.free(s.kv)
        self.running = []
        self.waiting = []
        self.kv.close()
