#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench_prefill.py: the time kvmm.llm's engine takes to compute a prompt's prefill, run by
`kvmm-bench remote` as the "recompute it" side of a remote-tier hit.

The model is a random-weight Llama with the KV geometry asked for (--layers, --kv-heads,
--head-dim: the same bytes per token as the pages kvmm-bench moves) and the smallest body that
has it: hidden = 2 x kv-heads x head-dim, intermediate 8/3 of that.  A real model with this KV
geometry has a wider body, so this prefill time is a lower bound of a real one.  KV in
contiguous tensors (no daemon); the time is the median of --reps runs of a fresh engine's
first step on a --tokens prompt (prefill plus one sampled token).  Prints
"prefill_seconds S" last.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))

import torch  # noqa: E402

from kvmm.llm import ContiguousKV, Engine, SamplingParams, load_model  # noqa: E402
from kvmm.llm.testing import tiny_config, write_checkpoint  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    heads = 2 * args.kv_heads
    hidden = heads * args.head_dim
    with tempfile.TemporaryDirectory(prefix="kvmm-prefill.") as tmp:
        cfg = tiny_config("llama", vocab_size=1024, hidden_size=hidden,
                          intermediate_size=hidden * 8 // 3 // 64 * 64,
                          num_hidden_layers=args.layers, num_attention_heads=heads,
                          num_key_value_heads=args.kv_heads,
                          max_position_embeddings=max(8192, args.tokens + 64))
        write_checkpoint(tmp, config=cfg)
        m = load_model(tmp)
    c = m.cfg
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, c.vocab_size, (args.tokens,), generator=g).tolist()
    times = []
    for _ in range(args.reps):
        kv = ContiguousKV(c.num_layers, c.num_kv_heads, c.head_dim, dtype=torch.float32,
                          initial=args.tokens + 8)
        e = Engine(m, kv, max_batch_tokens=args.tokens + 1)
        r = e.add_request(prompt, SamplingParams(max_tokens=1, ignore_eos=True))
        t = time.perf_counter()
        while not r.completions[0].token_ids:
            e.step()
        times.append(time.perf_counter() - t)
    print(f"model: {c.num_layers} layers, hidden {c.hidden_size}, {c.num_heads} heads, "
          f"{c.num_kv_heads} KV heads of {c.head_dim}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"prefill_seconds {statistics.median(times):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
