# SPDX-License-Identifier: MIT
"""One agent process of kvmm.llm.agents: a kvmm.llm engine that answers the orchestrator's tasks.

    /usr/bin/python3 -m kvmm.llm.agent MODEL_DIR [--name NAME] [--threads N] [--nice N]

It loads the checkpoint once, then speaks JSON lines: one command per line on stdin, one
event per line on stdout (nothing else is written there).

    {"op": "attach", "socket": S, "ns": NS, "priority": P, "kv_dtype": "fp16"}
        attach to kvmmd at S in namespace NS; every sequence of this agent gets kvmm priority
        P (under memory pressure kvmmd swaps out or preempts lower priorities first);
        optional "chunk_pages": C: attention C pages at a time (PagedKV(chunk_pages=C)), a
        step writing at most C pages' worth of tokens; "lookup_pages": L: a prefix lookup
        maps at most L pages; "far": true: far reads (PagedKV(far=True): the pages kvmmd
        swapped to its host tier are read where they lie, not faulted in); "step_pages":
        S: a step writes at most S pages' worth of tokens
        -> {"ev": "attached", "tokens_per_page": T, "kernel": K, "far": F}
           (F: whether far reads are in use; "far_why" says why not when they were asked for)
    {"op": "task", "id": I, "prompt": [ids...], "max_tokens": N}
        generate N greedy tokens (end-of-sequence ignored, so every answer has N tokens);
        optional "threads": T: until its first token the task runs on T threads (the
        model's linears split by rows, Model.set_threads, and libkvmm's CPU attention
        kernels on T threads), then on one again: the orchestrator lends a round's leader,
        which prefills alone, the CPUs the others are not using yet
        -> {"ev": "first", "id": I, "ttft": s}    the first token is sampled (the prompt's
                                                   full pages are sealed by then)
        -> {"ev": "done", "id": I, "tokens": [...], "ttft": s, "seconds": s,
            "computed": n, "skipped": n, "preempted": n, "waits": n,
            "prefill_s": s, "decode_s": s,     seconds in engine steps before the first
                                                   token and after it
            "far_pages": n, "chunked_steps": n}    pages read in the host tier, steps run
                                                   chunked (the store's stats, this task's)
        With $KVMM_AGENT_PROFILE=DIR each task runs under cProfile, its profile written to
        DIR/NAME-task-I.prof (python3 -m pstats).
    {"op": "pause"}   while a task runs: stop between two steps (nothing of this agent is
                      pinned then, so kvmmd may swap its sequence out to make room for
                      another agent's) -> {"ev": "paused", "id": I}; the task waits for
                      With "release": true the paused task first gives up its sequence (it is
                      computed again on resume, its prompt from kvmm's prefix cache).
    {"op": "resume"}  -> {"ev": "resumed", "id": I}: the next step pins the sequence again,
                      which faults its swapped pages back in. A pause that comes after
                      the task ended is answered {"ev": "idle"}; a resume outside a
                      paused task is an error.
    {"op": "detach"}  -> {"ev": "detached"}
    {"op": "quit"}    exits 0

Errors are one event, {"ev": "error", "msg": "..."}; a failed load or attach is fatal to the
command, not to the process (the orchestrator decides). When kvmmd has no room for this agent's
step and preempted nothing (every other page is pinned by other agents' steps), the agent waits
and tries again (counted in "waits"); after --stall seconds without room it gives up with an
error naming the namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from typing import Any, Dict, Optional

__all__ = ["main"]


def _emit(ev: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(ev, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Quit(Exception):
    """quit (or the end of stdin) while a task was paused."""


class _Commands:
    """JSON lines from fd 0, read unbuffered so that a task can look for a pause between two
    steps without blocking (sys.stdin's buffer would hide lines select() cannot see)."""

    def __init__(self, fd: int = 0):
        self.fd = fd
        self.buf = b""
        self.eof = False

    def _fill(self, timeout: Optional[float]) -> None:
        if self.eof:
            return
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            chunk = os.read(self.fd, 65536)
            if chunk:
                self.buf += chunk
            else:
                self.eof = True

    def next(self, block: bool = True) -> Optional[Dict[str, Any]]:
        """The next command; None at the end of input (or, when not block, when none is
        waiting)."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.strip():
                    return json.loads(line)
            if self.eof:
                return None
            self._fill(None if block else 0)
            if not block and b"\n" not in self.buf:
                return None


class _Agent:
    def __init__(self, model, stall: float, commands: Optional[_Commands] = None):
        self.model = model
        self.stall = stall
        self.engine = None
        self.kv = None
        self.commands = commands

    def attach(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        from .engine import Engine
        from .paged import PagedKV

        self.detach()
        c = self.model.cfg
        chunk = cmd.get("chunk_pages")
        self.kv = PagedKV(c.num_layers, c.num_kv_heads, c.head_dim,
                          kv_dtype=cmd.get("kv_dtype", "fp16"), ns=cmd["ns"],
                          socket_path=cmd["socket"], priority=int(cmd.get("priority", 0)),
                          chunk_pages=int(chunk) if chunk else None,
                          lookup_pages=cmd.get("lookup_pages"), far=bool(cmd.get("far")))
        batch = int(cmd.get("batch", 4096))
        if chunk:
            # a step writes at most a chunk's worth of pages (plus a partial one): what
            # the orchestrator's admission counts beside the chunk being read
            batch = min(batch, int(chunk) * self.kv.tokens_per_page)
        if cmd.get("step_pages"):
            batch = min(batch, int(cmd["step_pages"]) * self.kv.tokens_per_page)
        self.engine = Engine(self.model, self.kv, max_batch_tokens=batch, seal_prompts=True)
        ev = {"ev": "attached", "tokens_per_page": self.kv.tokens_per_page,
              "kernel": self.kv.kernel, "far": self.kv._far is not None}
        if cmd.get("far") and self.kv._far is None:
            ev["far_why"] = self.kv.far_why
        return ev

    def detach(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = self.kv = None

    def task(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        from .kv import KVOutOfMemory
        from .sampling import SamplingParams

        e = self.engine
        if e is None:
            raise RuntimeError("task before attach")
        tid = cmd["id"]
        before = dict(e.stats)
        kv_before = dict(self.kv.stats)
        lent = self._lend(int(cmd.get("threads", 1)))  # refused before the task starts
        req = e.add_request(cmd["prompt"], SamplingParams(max_tokens=int(cmd["max_tokens"]),
                                                          ignore_eos=True))
        waits = 0
        self.released = 0
        stalled_since: Optional[float] = None
        told = False
        step_s = [0.0, 0.0]  # seconds in steps before / after the first token
        while e.has_work():
            try:
                t = time.perf_counter()
                e.step()
                step_s[1 if told else 0] += time.perf_counter() - t
                stalled_since = None
            except KVOutOfMemory as err:
                # the other agents' pinned steps hold the rest of the pool: theirs end soon
                now = time.monotonic()
                stalled_since = stalled_since or now
                if now - stalled_since > self.stall:
                    raise RuntimeError(f"{err}: no room for {self.stall:.0f} s (the pool is "
                                       "smaller than this agent's sequence)") from None
                waits += 1
                time.sleep(0.002)
            if not told and req.first_token_time is not None:
                told = True
                if lent:
                    lent = self._lend(1)
                _emit({"ev": "first", "id": tid, "ttft": req.first_token_time - req.arrival})
            if self.commands is not None and e.has_work():
                self._between_steps(tid)
        if lent:
            self._lend(1)
        comp = req.completions[0]
        st = e.stats
        return {"ev": "done", "id": tid, "tokens": comp.token_ids,
                "ttft": req.first_token_time - req.arrival,
                "seconds": time.perf_counter() - req.arrival,
                "computed": st["prefill_tokens"] - before["prefill_tokens"],
                "skipped": st["cached_tokens"] - before["cached_tokens"],
                "preempted": req.recomputes - self.released, "released": self.released,
                "waits": waits, "prefill_s": step_s[0], "decode_s": step_s[1],
                "far_pages": self.kv.stats["far_pages"] - kv_before["far_pages"],
                "chunked_steps": self.kv.stats["chunked_steps"] - kv_before["chunked_steps"]}

    def _lend(self, n: int) -> bool:
        """Run the model's linears and the CPU attention kernels on n threads (1: back to
        one); True when n > 1."""
        if n < 1 or n > 64:
            raise ValueError(f"threads: {n} is not between 1 and 64")
        self.model.set_threads(n)
        if self.kv is not None and self.kv.kernel == "libkvmm" and self.kv.device.type == "cpu":
            from kvmm import kernels

            kernels.set_threads(n)
        return n > 1

    def _between_steps(self, tid: int) -> None:
        """A pause from the orchestrator (its admission control: another agent's task needs
        the frames this one holds) stops the task here, where none of its pages is pinned,
        until resume."""
        cmd = self.commands.next(block=False)
        if cmd is None:
            return
        if cmd.get("op") != "pause":
            raise RuntimeError(f"op {cmd.get('op')!r} while a task runs (only pause)")
        if cmd.get("release"):
            # give the sequence up (its sealed prompt pages stay in kvmm's cache): pages
            # mapped by two running sequences are never swapped, so a paused task that
            # kept its prefix mapped would hold it in memory beside the one that runs
            for s in list(self.engine.running):
                self.engine.preempt(s)
                self.released += 1
        _emit({"ev": "paused", "id": tid})
        cmd = self.commands.next(block=True)
        if cmd is None or cmd.get("op") == "quit":
            raise _Quit()
        if cmd.get("op") != "resume":
            raise RuntimeError(f"op {cmd.get('op')!r} while paused (only resume or quit)")
        _emit({"ev": "resumed", "id": tid})


def _profiled(fn, cmd: Dict[str, Any], name: str) -> Dict[str, Any]:
    """fn(cmd), under cProfile when $KVMM_AGENT_PROFILE names a directory: the profile of
    each task goes to DIR/NAME-task-ID.prof (pstats), for finding where a step's time goes."""
    out = os.environ.get("KVMM_AGENT_PROFILE")
    if not out:
        return fn(cmd)
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(fn, cmd)
    finally:
        prof.dump_stats(os.path.join(out, f"{name}-task-{cmd.get('id')}.prof"))


def _warm_up(model) -> None:
    """One short generation with contiguous KV before the first task: torch's first calls
    (allocator, kernels' lazy set-up) are not charged to the first mode measured."""
    from .engine import Engine
    from .kv import ContiguousKV
    from .sampling import SamplingParams

    c = model.cfg
    e = Engine(model, ContiguousKV(c.num_layers, c.num_kv_heads, c.head_dim, dtype=model.dtype))
    e.generate([[3 + i % (c.vocab_size - 3) for i in range(256)]],
               SamplingParams(max_tokens=8, ignore_eos=True))
    e.close()


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="kvmm.llm.agent", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="checkpoint directory (config.json, *.safetensors)")
    ap.add_argument("--name", default=f"agent-{os.getpid()}")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    ap.add_argument("--nice", type=int, default=0,
                    help="add this to the process's CPU niceness before anything starts a "
                    "thread (0; the orchestrator gives its non-critical agents 5)")
    ap.add_argument("--stall", type=float, default=60.0,
                    help="seconds without room before a task fails (60)")
    args = ap.parse_args(argv)
    if args.nice:
        try:
            os.nice(args.nice)  # threads made later inherit it
        except OSError as err:
            _emit({"ev": "error", "msg": f"{args.name}: nice {args.nice}: {err}"})
            return 1
    try:
        import torch

        from .config import ConfigError
        from .model import load_model
        from .safetensors import SafetensorsError

        torch.set_num_threads(max(1, args.threads))
        model = load_model(args.model)
    except (ImportError, ConfigError, SafetensorsError, ValueError, OSError) as err:
        _emit({"ev": "error", "msg": f"{args.name}: cannot load {args.model}: {err}"})
        return 1
    _warm_up(model)
    commands = _Commands()
    agent = _Agent(model, args.stall, commands)
    _emit({"ev": "ready", "pid": os.getpid(), "name": args.name})
    while True:
        try:
            cmd = commands.next()
        except ValueError as err:
            _emit({"ev": "error", "msg": f"{args.name}: bad command: {err}"})
            continue
        if cmd is None:
            break
        try:
            op = cmd.get("op")
            if op == "quit":
                break
            if op == "attach":
                _emit(agent.attach(cmd))
            elif op == "detach":
                agent.detach()
                _emit({"ev": "detached"})
            elif op == "task":
                _emit(_profiled(agent.task, cmd, args.name))
            elif op == "pause":
                _emit({"ev": "idle"})  # the task it was for ended first: nothing to pause
            elif op == "resume":
                _emit({"ev": "error", "msg": f"{args.name}: resume without a paused task"})
            else:
                _emit({"ev": "error", "msg": f"{args.name}: unknown op {op!r}"})
        except _Quit:
            break
        except Exception as err:  # reported to the orchestrator, which stops the run
            _emit({"ev": "error", "msg": f"{args.name}: {type(err).__name__}: {err}"})
            try:
                agent.detach()
            except Exception:
                pass
    agent.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
