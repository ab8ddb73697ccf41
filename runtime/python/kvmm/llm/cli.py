# SPDX-License-Identifier: MIT
"""kvmm-llm: generate with a Hugging Face checkpoint, its KV in kvmm pages."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import List, Optional

DESCRIPTION = """\
Generate text (or token ids) with a LlamaForCausalLM or Qwen2ForCausalLM checkpoint
directory (config.json and *.safetensors, sharded or not; fp32, fp16 or bf16 weights), its KV
cache in the pages of a running kvmmd. All prompts are run together with continuous batching;
a prompt prefix that any kvmm-llm of the same model sealed before (in this run or another
process) is mapped from kvmm's prefix cache instead of being recomputed.

Prompts are token ids (--ids) or text (--prompt); text needs the checkpoint's tokenizer and
the Python package `tokenizers` (tokenizer.json) or `sentencepiece` (tokenizer.model). The
output is one line per completion: the token ids, then the text when a tokenizer is loaded.
"""

EPILOG = """\
examples:
  kvmmd --foreground --socket /tmp/kvmm.sock --pool-size 1G &
  kvmm-llm ~/models/TinyLlama-1.1B --socket /tmp/kvmm.sock --ns tiny --prompt "Once upon"
  kvmm-llm ./ckpt --ids 1,450,4996 --ids 1,450,338 --max-tokens 32 --kv-dtype int8
  kvmm-llm ./ckpt --ids 1,2,3 --temperature 0.8 --top-p 0.9 --seed 7 -n 4
  kvmm-llm ./ckpt --ids 1,2,3 --kv contiguous     (no daemon: per-sequence KV tensors)

The namespace (--ns) must exist in kvmmd (--namespace NAME on its command line or in its
configuration); engines of one model must use the same one, and never one of another model.
Documentation/userspace-api/engine.md describes the engine loop and where kvmm is called.
"""


def _ids(s: str) -> List[int]:
    try:
        out = [int(x) for x in s.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: token ids are integers separated by commas")
    if not out:
        raise argparse.ArgumentTypeError("an empty prompt")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvmm-llm", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="checkpoint directory (config.json, *.safetensors)")
    g = p.add_argument_group("prompts (at least one; repeat for a batch)")
    g.add_argument("--ids", action="append", type=_ids, default=[], metavar="ID,ID,...",
                   help="a prompt as token ids")
    g.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                   help="a prompt as text (needs a tokenizer)")
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=32, help="new tokens per completion (32)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (1.0: off)")
    g.add_argument("--seed", type=int, default=0,
                   help="sampling seed (0); prompt k's completion i uses seed + k * n + i")
    g.add_argument("-n", type=int, default=1, help="completions per prompt (forks the prompt)")
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence")
    g = p.add_argument_group("KV cache")
    g.add_argument("--kv", choices=["kvmm", "contiguous"], default="kvmm",
                   help="kvmm pages (default) or per-sequence tensors without a daemon")
    g.add_argument("--kv-dtype", choices=["fp32", "fp16", "bf16", "int8"], default="fp16",
                   help="KV element type in the pages (fp16); int8 is group-quantized")
    g.add_argument("--quant-group", type=int, default=0,
                   help="int8: elements per scale (default: 32, or head_dim if smaller)")
    g.add_argument("--ns", default=None,
                   help="kvmm namespace (default: llm-<hash of the checkpoint>)")
    g.add_argument("--socket", default=None,
                   help="kvmmd socket (default: $KVMM_SOCKET, then the standard places)")
    g.add_argument("--kernels", choices=["auto", "libkvmm", "torch"], default="auto",
                   help="attention over pages: libkvmm's kernels or torch over the views")
    g = p.add_argument_group("engine")
    g.add_argument("--max-batch-tokens", type=int, default=2048,
                   help="tokens computed per step at most (2048)")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="compute dtype (default float32 on the CPU)")
    g.add_argument("--device", default="cpu", help="torch device (cpu, cuda:0)")
    g.add_argument("--stats", action="store_true", help="print timing and cache statistics")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from .config import ConfigError
    from .engine import Engine
    from .kv import ContiguousKV
    from .model import load_model
    from .safetensors import SafetensorsError
    from .sampling import SamplingParams
    from .tokenizer import load_tokenizer, why_no_tokenizer

    def fail(msg: str) -> int:
        print(f"kvmm-llm: {msg}", file=sys.stderr)
        return 1

    if not args.ids and not args.prompt:
        return fail("no prompt: give --ids or --prompt")
    tok = load_tokenizer(args.model)
    if args.prompt and tok is None:
        return fail(f"--prompt needs a tokenizer, and {why_no_tokenizer()}: use --ids")
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                            top_p=args.top_p, seed=args.seed, n=args.n,
                            ignore_eos=args.ignore_eos)
    try:
        params.check()
    except ValueError as e:
        return fail(str(e))
    dtype = getattr(torch, args.dtype) if args.dtype else None
    try:
        model = load_model(args.model, dtype=dtype, device=args.device)
    except (ConfigError, SafetensorsError, ValueError, OSError) as e:
        return fail(str(e))
    c = model.cfg
    if args.kv == "contiguous":
        kv = ContiguousKV(c.num_layers, c.num_kv_heads, c.head_dim, dtype=model.dtype,
                          device=args.device)
    else:
        try:
            import kvmm  # noqa: F401
        except ImportError as e:
            return fail(f"the kvmm package cannot be loaded ({e}); --kv contiguous runs "
                        "without it")
        from .paged import PagedKV, model_identity, namespace_of

        ns = args.ns or namespace_of(args.model)
        kern = None if args.kernels == "auto" else args.kernels == "libkvmm"
        try:
            kv = PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype=args.kv_dtype,
                         ns=ns, socket_path=args.socket, quant_group=args.quant_group,
                         kernels=kern, model=model_identity(args.model))
        except (kvmm.KvmmError, ValueError, RuntimeError) as e:
            return fail(f"kvmm namespace {ns}: {e}")
    prompts = list(args.ids) + [tok.encode(t) for t in args.prompt]
    engine = Engine(model, kv, max_batch_tokens=args.max_batch_tokens)
    t0 = time.perf_counter()
    try:
        # prompt k samples with seed + k * n, so no two completions share a seed
        reqs = [engine.add_request(p, dataclasses.replace(params, seed=args.seed + k * args.n))
                for k, p in enumerate(prompts)]
        engine.run()
    except (ValueError, MemoryError, OSError) as e:  # KvmmError is an OSError
        return fail(str(e))
    finally:
        engine.close()
    dt = time.perf_counter() - t0
    for r in reqs:
        for comp in r.completions:
            line = f"[{r.id}.{comp.index}] " + ",".join(map(str, comp.token_ids))
            if tok is not None:
                line += "\t" + repr(tok.decode(comp.token_ids))
            print(line)
    if tok is None:
        print(f"kvmm-llm: token ids only: {why_no_tokenizer()}", file=sys.stderr)
    if args.stats:
        s = engine.stats
        gen = sum(len(cp.token_ids) for r in reqs for cp in r.completions)
        ttft = [r.first_token_time - r.arrival for r in reqs if r.first_token_time]
        print(f"kv={kv.name} kernel={getattr(kv, 'kernel', '-')} steps={s['steps']} "
              f"prefill_tokens={s['prefill_tokens']} cached_tokens={s['cached_tokens']} "
              f"generated={gen} preempted={s['preempted']} seconds={dt:.3f} "
              f"tokens/s={gen / dt:.1f} ttft_max={max(ttft):.3f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
