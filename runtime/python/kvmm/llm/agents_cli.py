# SPDX-License-Identifier: MIT
"""kvmm-agents: N agent processes on one kvmmd, in the shared, private and pressure modes.

The command behind `make demo` and `kvmm-bench agents` (kvmm/llm/agents.py does the work)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional

DESCRIPTION = """\
An orchestrator hands tasks to N agent processes (default 4), each a kvmm.llm engine on the
same checkpoint attached to one kvmmd. A task is system prompt + tool descriptions + shared
context + the agent's instruction; round 2's shared context carries round 1's instructions
and answers, so agents map each other's KV. One agent is critical (a higher kvmm priority).
The workload runs in three modes on identical inputs: shared (one namespace, prefix cache),
private (a namespace each: the baseline) and pressure (shared, in a pool of half the shared
mode's peak frames, smaller than one sequence; a host swap tier whose pages the agents read
where they lie - far reads - or, with --no-far, attention chunked to fit; admission runs the
tasks that fit, the critical agent first, pausing others). It prints, per mode, prefill
tokens computed and skipped, frames at peak, wall time, tokens/s, time to first token per
agent, preemptions and swap-ins, checks that every agent's output tokens are the same in
every mode, and ends with a table.

The model is KVMM_MODEL (a Llama or Qwen2 checkpoint directory) or --model; without either, a
tiny random-weight checkpoint is written in the temporary directory.
"""

EPILOG = """\
examples:
  kvmm-agents                                   the demo (make demo)
  KVMM_MODEL=~/models/TinyLlama kvmm-agents --answer-tokens 16
  kvmm-agents --agents 8 --rounds 3 --modes shared,private
  kvmm-agents --pressure-pool 200               force the pressure pool's size (frames)
  kvmm-agents --no-far                          pressure with chunked attention instead

While it runs, `kvmmctl --socket DIR/kvmmd.sock top` in a second terminal shows the agents
(each mode starts its own kvmmd on that socket; top follows it from one to the next).
See Documentation/admin-guide/multi-agent.md.
"""


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvmm-agents", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.environ.get("KVMM_MODEL") or None,
                   help="checkpoint directory (default $KVMM_MODEL, else a tiny one written)")
    p.add_argument("--agents", type=_positive, default=4, help="agent processes (4)")
    p.add_argument("--rounds", type=_positive, default=2, help="rounds (2)")
    p.add_argument("--critical", type=_positive, default=0, help="the critical agent (0)")
    p.add_argument("--system-tokens", type=_positive, default=512)
    p.add_argument("--tool-tokens", type=_positive, default=1536)
    p.add_argument("--instruction-tokens", type=_positive, default=128)
    p.add_argument("--answer-tokens", type=_positive, default=64)
    p.add_argument("--modes", default="shared,private,pressure",
                   help="comma separated, of shared, private, pressure (all)")
    p.add_argument("--kv-dtype", choices=["fp32", "fp16", "bf16"], default="fp16")
    p.add_argument("--pressure-pool", type=_positive, default=None, metavar="FRAMES",
                   help="the pressure pool (default: half the shared peak; the agents' "
                   "attention is chunked to fit it; refused below one chunk's pages)")
    p.add_argument("--no-far", action="store_true",
                   help="pressure mode without far reads: chunked attention, each chunk's "
                   "swapped pages faulted in")
    p.add_argument("--leader-threads", type=_positive, default=None, metavar="N",
                   help="threads lent to a round's leader while it prefills alone (default: "
                   "the CPUs, at most 8; 1 lends none)")
    p.add_argument("--reps", type=_positive, default=1,
                   help="run the modes this many times; each figure is the median")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds an agent may stay silent (300)")
    p.add_argument("--bench-rows", action="store_true",
                   help="print kvmm-bench rows (tab separated) instead of the report")
    p.add_argument("--hidden", type=_positive, default=128, help="tiny model: hidden size")
    p.add_argument("--layers", type=_positive, default=2, help="tiny model: layers")
    return p


def _tiny(directory: str, hidden: int, layers: int) -> str:
    from .testing import tiny_config, write_checkpoint

    cfg = tiny_config("llama", vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=16384)
    path = os.path.join(directory, "model")
    write_checkpoint(path, config=cfg)
    return path


def _ms(x: float) -> str:
    return f"{x * 1000:.0f} ms"


def _report(res, w, out) -> None:
    from .agents import percentile

    p = lambda s="": print(s, file=out)  # noqa: E731
    r = res
    p(f"== {r.mode}: pool {r.pool_frames} frames" + (f" ({r.note})" if r.note else ""))
    total = r.computed + r.skipped
    p(f"  prefill tokens     {r.computed} computed, {r.skipped} skipped "
      f"({100 * r.skipped / max(1, total):.0f}% from the prefix cache)")
    p(f"  frames at peak     {r.peak_frames}"
      + (f" (the sum of the {w.agents} pools' peaks: each pool is sized for its own)"
         if r.mode == "private" else ""))
    p(f"  wall time          {r.wall:.2f} s for {r.generated} tokens: "
      f"{r.tokens_per_s:.1f} tokens/s")
    for a in sorted(r.ttft):
        med, p95 = r.ttft_stats(a)
        tag = "  (critical)" if a == w.critical else ""
        p(f"  TTFT agent{a}       median {_ms(med)}, p95 {_ms(p95)}{tag}")
    allt = [t for v in r.ttft.values() for t in v]
    p(f"  TTFT all agents    median {_ms(statistics.median(allt))}, "
      f"p95 {_ms(percentile(allt, 95))}")
    p(f"  preemptions        {r.preempted} (waits for room: {r.waits})")
    p(f"  step time          {r.prefill_s:.2f} s prefill (to the first token), "
      f"{r.decode_s:.2f} s decode, summed over the agents' tasks")
    if r.mode == "pressure":
        p(f"  admission          {r.suspended} tasks paused for the critical agent, "
          f"{r.queued:.2f} s waited for room in all")
        p("  attention          " + (f"far reads: {r.far_pages} pages read in the host "
                                      f"tier, {r.chunked_steps} steps chunked"
                                      if r.far else f"chunked: {r.chunked_steps} steps"))
    p(f"  swap-ins           {r.swap_in} pages (swap-outs {r.swap_out})")
    p()


def _summary(results: Dict[str, object], w, same: bool, out) -> None:
    p = lambda s="": print(s, file=out)  # noqa: E731
    p("== summary")
    p(f"  {'mode':9s} {'pool':>6s} {'peak':>6s} {'computed':>9s} {'skipped':>8s} "
      f"{'wall s':>7s} {'tok/s':>7s} {'crit TTFT':>10s} {'preempt':>8s} {'swap-in':>8s}")
    for m, r in results.items():
        crit = r.ttft_stats(w.critical)[0]
        p(f"  {m:9s} {r.pool_frames:6d} {r.peak_frames:6d} {r.computed:9d} {r.skipped:8d} "
          f"{r.wall:7.2f} {r.tokens_per_s:7.1f} {_ms(crit):>10s} {r.preempted:8d} "
          f"{r.swap_in:8d}")
    if "shared" in results and "private" in results:
        s, pr = results["shared"], results["private"]
        p(f"  shared vs private: {s.peak_frames / max(1, pr.peak_frames):.2f}x the frames, "
          f"{s.tokens_per_s / max(1e-9, pr.tokens_per_s):.2f}x the throughput")
    if "shared" in results and "pressure" in results:
        s, pz = results["shared"], results["pressure"]
        p(f"  pressure vs shared: {pz.pool_frames / max(1, s.peak_frames):.2f}x the peak as "
          f"pool, {pz.tokens_per_s / max(1e-9, s.tokens_per_s):.2f}x the throughput, critical "
          f"TTFT {pz.ttft_stats(w.critical)[0] / max(1e-9, s.ttft_stats(w.critical)[0]):.2f}x")
    p(f"  outputs: every agent's tokens are {'identical' if same else 'NOT identical'} "
      f"in {', '.join(results)}")


def _median_result(runs: List[Dict[str, object]]) -> Dict[str, object]:
    """The run whose shared throughput is the median (one run: itself); the others' figures
    are folded in as medians of throughput, TTFT and wall time per mode."""
    import copy

    out = {}
    for m in runs[0]:
        rs = [r[m] for r in runs]
        med = copy.copy(sorted(rs, key=lambda x: x.wall)[len(rs) // 2])
        med.ttft = {a: [statistics.median(r.ttft[a][k] for r in rs)
                        for k in range(len(rs[0].ttft[a]))] for a in rs[0].ttft}
        out[m] = med
    return out


def _bench_rows(res, w, same: bool, out) -> None:
    def row(name, value, unit, base, bval):
        print(f"row\t{name}\t{value:.6g}\t{unit}\t{base}\t{bval:.6g}", file=out)

    def note(s):
        print(f"note\t{s}", file=out)

    def target(what, value, limit, upper, unit):
        print(f"target\t{what}\t{value:.6g}\t{limit:.6g}\t{int(upper)}\t{unit}", file=out)

    s, pr, pz = res.get("shared"), res.get("private"), res.get("pressure")
    crit = w.critical
    if s and pr:
        row("agents.peak_frames_shared", s.peak_frames, "frames", "private", pr.peak_frames)
        row("agents.tokens_per_s_shared", s.tokens_per_s, "tok/s", "private", pr.tokens_per_s)
        target("agents peak frames shared/private", s.peak_frames / pr.peak_frames, 0.5, True,
               "x")
        target("agents throughput shared/private", s.tokens_per_s / pr.tokens_per_s, 2.0,
               False, "x")
    if s and pz:
        row("agents.tokens_per_s_pressure", pz.tokens_per_s, "tok/s", "shared", s.tokens_per_s)
        cs, cp = s.ttft_stats(crit)[0], pz.ttft_stats(crit)[0]
        row("agents.critical_ttft_pressure", cp * 1e3, "ms", "shared", cs * 1e3)
        target("agents throughput pressure/shared", pz.tokens_per_s / s.tokens_per_s, 0.92,
               False, "x")
        target("agents critical TTFT pressure/shared", cp / cs, 1.2, True, "x")
        # kvmm-bench keeps a note to 240 characters: one thing a note
        note(f"agents: pressure pool {pz.pool_frames} frames = "
             f"{pz.pool_frames / s.peak_frames:.2f}x the shared peak of {s.peak_frames}")
        if pz.note:
            note(f"agents: {pz.note}")
        note(f"agents pressure: {pz.preempted} preemptions, {pz.swap_in} pages swapped in, "
             f"{pz.swap_out} out; admission paused {pz.suspended} tasks, "
             f"{pz.queued:.2f} s waited for room")
        note("agents pressure: " + (f"far reads, {pz.far_pages} pages read in the host "
                                     f"tier in place, {pz.chunked_steps} steps chunked"
                                     if pz.far else f"chunked attention ({pz.chunked_steps} "
                                     "steps), no far reads"))
    for m, r in res.items():
        note(f"agents {m}: prefill {r.computed} computed, {r.skipped} skipped; "
             f"{r.generated} tokens in {r.wall:.2f} s")
    note(f"agents: {w.agents} agents x {w.rounds} rounds, system+tools "
         f"{w.system_tokens + w.tool_tokens}, instruction {w.instruction_tokens}, answer "
         f"{w.answer_tokens} greedy tokens; outputs identical in every mode: "
         f"{'yes' if same else 'NO'}")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from .agents import AgentError, Workload, mismatches, run_modes

    def fail(msg: str, rc: int = 1) -> int:
        print(f"kvmm-agents: {msg}", file=sys.stderr)
        return rc

    modes = [m for m in args.modes.split(",") if m]
    w = Workload(agents=args.agents, rounds=args.rounds, system_tokens=args.system_tokens,
                 tool_tokens=args.tool_tokens, instruction_tokens=args.instruction_tokens,
                 answer_tokens=args.answer_tokens, critical=args.critical)
    try:
        w.check()
    except AgentError as e:
        return fail(str(e), 2)
    if args.reps < 1:
        return fail(f"reps: {args.reps} is not at least 1", 2)
    if args.pressure_pool is not None and args.pressure_pool < 1:
        return fail(f"pressure pool: {args.pressure_pool} frames is not at least 1", 2)
    bad_modes = [m for m in modes if m not in ("shared", "private", "pressure")]
    if bad_modes or not modes:
        return fail(f"modes: {args.modes!r}: a comma separated list of shared, private, "
                    "pressure", 2)
    if args.model and not os.path.isfile(os.path.join(args.model, "config.json")):
        return fail(f"model {args.model}: no config.json there (a Hugging Face checkpoint "
                    "directory is needed)", 2)
    tmp = tempfile.mkdtemp(prefix="kvmm-agents.")
    out = sys.stdout
    log = (lambda s: print(s, file=sys.stderr)) if args.bench_rows else \
        (lambda s: print(s, flush=True))
    try:
        t0 = time.perf_counter()
        model = args.model or _tiny(tmp, args.hidden, args.layers)
        if not args.bench_rows:
            print(f"kvmm-agents: {w.agents} agents x {w.rounds} rounds on "
                  f"{args.model or 'a tiny random-weight checkpoint'}; agent{w.critical} is "
                  f"critical; socket {os.path.join(tmp, 'kvmmd.sock')} "
                  f"(kvmmctl --socket ... top shows the agents)", flush=True)
        runs = []
        for _ in range(args.reps):
            runs.append(run_modes(model, w, modes, kv_dtype=args.kv_dtype, workdir=tmp,
                                  log=log, timeout=args.timeout,
                                  pressure_pool=args.pressure_pool, far=not args.no_far,
                                  leader_threads=args.leader_threads))
        bad = [b for r in runs for b in mismatches(r)]
        res = _median_result(runs)
        if args.bench_rows:
            _bench_rows(res, w, not bad, out)
        else:
            print()
            for r in res.values():
                _report(r, w, out)
            _summary(res, w, not bad, out)
            for b in bad[:10]:
                print(f"  mismatch: {b}")
            print(f"  (whole run: {time.perf_counter() - t0:.1f} s)")
        return 1 if bad else 0
    except AgentError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
