# SPDX-License-Identifier: MIT
"""Greedy, temperature and top-p sampling, reproducible with a seed.

Each sequence has its own torch.Generator, so its tokens depend on its seed and its logits
only: not on which other requests share its batch, nor on whether its KV was recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["SamplingParams", "Sampler"]


@dataclass
class SamplingParams:
    """temperature 0 is greedy; top_p in (0, 1] keeps the smallest set of most likely tokens
    whose probabilities reach top_p. n > 1 samples n continuations of one prompt (the prompt's
    KV is shared by forking); continuation i uses seed + i."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: Optional[int] = None
    n: int = 1
    stop_token_ids: tuple = ()
    ignore_eos: bool = False

    def check(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens {self.max_tokens}: at least 1")
        if self.temperature < 0:
            raise ValueError(f"temperature {self.temperature}: negative")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p {self.top_p}: not in (0, 1]")
        if self.n < 1:
            raise ValueError(f"n {self.n}: at least 1")


class Sampler:
    def __init__(self, params: SamplingParams, index: int = 0):
        self.params = params
        self.gen = torch.Generator()
        seed = params.seed if params.seed is not None else torch.seed()
        self.gen.manual_seed((seed + index) & 0x7FFFFFFFFFFFFFFF)

    def __call__(self, logits: torch.Tensor) -> int:
        """One token id from fp32 logits [vocab]."""
        p = self.params
        if p.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / p.temperature, -1)
        if p.top_p < 1:
            sp, idx = torch.sort(probs, descending=True)
            keep = (torch.cumsum(sp, 0) - sp) < p.top_p  # the first token always stays
            sp = torch.where(keep, sp, torch.zeros_like(sp))
            return int(idx[torch.multinomial(sp, 1, generator=self.gen)])
        return int(torch.multinomial(probs, 1, generator=self.gen))
