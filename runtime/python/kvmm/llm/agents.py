# SPDX-License-Identifier: MIT
"""Multi-agent inference on one kvmm pool: an orchestrator and N agent processes.

Each agent is its own process (kvmm/llm/agent.py): a kvmm.llm engine on the same checkpoint,
attached to one kvmmd. The orchestrator (this module) gives every agent, in each round, a task

    system prompt + tool descriptions + shared context + the agent's instruction

and collects its answer (greedy, a fixed number of tokens). The shared context of round r is
the transcript of the rounds before it: each agent's instruction and answer, in agent order.
So in round 2 every agent's prompt holds agent 0's round-1 instruction and answer right after
the tool descriptions, exactly where agent 0's own round-1 sequence had them: those KV pages,
sealed by agent 0, are mapped by the other agents (reuse of another agent's output at a page
boundary, not only of a fixed system prompt); the rest of the transcript is computed once, by
the round's leader, and mapped by the others.

Schedule (the same in every mode): each round the leader (the first agent that is not the
critical one) starts alone; once its first token is out (its prompt's full pages are sealed,
Engine(seal_prompts=True)) the others start together. While it prefills alone the leader is
lent the CPUs (leader_threads, default: the CPUs this process may use, at most 8): its
linears split by rows and its attention kernels on that many threads, one again after its
first token. One agent is critical: its sequences carry a higher kvmm priority, so under
memory pressure kvmmd takes the others' pages first.

Modes, on identical inputs:
  shared    one namespace: the agents share the prefix cache
  private   a namespace (its own pool) per agent: no sharing, the baseline
  pressure  shared, in a pool of half the frames the shared mode's namespace held at its peak
            (kvmmd's meminfo Peak: used + cached), with a host-memory swap tier. That pool
            is smaller than one round-2 sequence. With far reads (far=True, the default):
            the agents' stores read the sealed pages kvmmd swapped to the host tier where
            they lie (PagedKV(far=True): kvmm_pin_far, the tier mapped read-only after the
            pool), so a step faults nothing in; a step writes at most C pages
            (step_pages), and a task's working set is its own pages (its instruction and
            answer: the shared prefix is read in place). far=False: the agents' attention is
            chunked (PagedKV(chunk_pages=C)): a step pins only the pages it writes and the
            chunk it reads, C pages at a time, and kvmmd swaps the rest of the sequence out
            and back in between chunks. C is chosen so that every agent's working set (the
            chunk read and the at most C + 1 pages written) fits at once beside the frames
            kvswapd keeps free; admission (_Admission: working-set load control) still
            orders the tasks, the critical one first, pausing lower ones when it does not
            fit. A pool below one chunk's needs (3 pages and the kvswapd reserve) is refused
            (pressure_pool= forces a size)
Every agent's output tokens are compared across the modes.
"""

from __future__ import annotations

import json
import math
import os
import random
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Workload", "AgentError", "ModeResult", "Orchestrator", "MODES", "percentile",
           "default_leader_threads"]

MODES = ("shared", "private", "pressure")
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREE = os.path.normpath(os.path.join(PKG_ROOT, "..", ".."))
SHARED_NS = "agents"
CRITICAL_PRIORITY = 10  # kvmm sequence priority of the critical agent (the others: 0)
AGENT_NICE = 5  # the other agents' CPU niceness: the scheduler runs the critical one first
CHUNK_MAX = 64  # pages: the largest attention chunk of the pressure mode


class AgentError(RuntimeError):
    """An agent process or kvmmd failed, or the orchestrator was given bad input."""


@dataclass
class Workload:
    """What the agents are asked: token ids drawn from a fixed seed (the same in every mode)."""

    agents: int = 4
    rounds: int = 2
    system_tokens: int = 512
    tool_tokens: int = 1536
    instruction_tokens: int = 128
    answer_tokens: int = 64
    critical: int = 0  # the critical agent's index
    seed: int = 0
    vocab: int = 256

    def check(self) -> None:
        if not 1 <= self.agents <= 64:
            raise AgentError(f"agents: {self.agents} is not between 1 and 64")
        if self.rounds < 1:
            raise AgentError(f"rounds: {self.rounds} is not at least 1")
        for name in ("system_tokens", "tool_tokens", "instruction_tokens"):
            if getattr(self, name) < 0:
                raise AgentError(f"{name}: {getattr(self, name)} is negative")
        if self.answer_tokens < 1:
            raise AgentError(f"answer_tokens: {self.answer_tokens} is not at least 1")
        if self.system_tokens + self.tool_tokens + self.instruction_tokens < 1:
            raise AgentError("an empty prompt: give system, tool or instruction tokens")
        if not 0 <= self.critical < self.agents:
            raise AgentError(f"critical agent {self.critical} is not one of 0..{self.agents - 1}")

    def _ids(self, what: str, n: int) -> List[int]:
        r = random.Random(f"{self.seed}:{what}")
        return [r.randrange(3, self.vocab) for _ in range(n)]  # 0..2: pad, bos, eos

    @property
    def preamble(self) -> List[int]:
        return self._ids("system", self.system_tokens) + self._ids("tools", self.tool_tokens)

    def instruction(self, rnd: int, agent: int) -> List[int]:
        return self._ids(f"instruction {rnd} {agent}", self.instruction_tokens)

    def prompt(self, rnd: int, agent: int, answers: Dict[Tuple[int, int], List[int]]
               ) -> List[int]:
        """The task of agent in round rnd (0-based), given the answers of earlier rounds."""
        ctx: List[int] = []
        for r in range(rnd):
            for a in range(self.agents):
                ctx += self.instruction(r, a) + answers[(r, a)]
        return self.preamble + ctx + self.instruction(rnd, agent)

    @property
    def leader(self) -> int:
        return 0 if self.agents == 1 else (1 if self.critical == 0 else 0)

    def longest_tokens(self) -> int:
        """Tokens of the longest sequence: the last round's prompt and answer."""
        per = self.instruction_tokens + self.answer_tokens
        return (self.system_tokens + self.tool_tokens + (self.rounds - 1) * self.agents * per
                + per)


def default_leader_threads() -> int:
    """The CPUs this process may run on (at most 8): what a round's leader is lent."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    v = sorted(values)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


@dataclass
class ModeResult:
    mode: str
    pool_frames: int
    peak_frames: int
    wall: float
    generated: int
    computed: int
    skipped: int
    preempted: int
    waits: int
    swap_in: int
    swap_out: int
    ttft: Dict[int, List[float]]  # per agent, one per round
    outputs: Dict[Tuple[int, int], List[int]]
    note: str = ""
    suspended: int = 0  # tasks paused by admission (their sequences left to kvmm's swap)
    queued: float = 0.0  # seconds tasks waited for admission, summed
    prefill_s: float = 0.0  # seconds the agents spent in steps before their first token
    decode_s: float = 0.0  # and after it, summed over tasks
    far: bool = False  # the agents read the host tier in place (far reads)
    far_pages: int = 0  # pages they read there, summed over steps and tasks
    chunked_steps: int = 0  # steps run chunked (far=False; with far reads: fallbacks)

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.wall if self.wall > 0 else 0.0

    def ttft_stats(self, agent: int) -> Tuple[float, float]:
        t = self.ttft[agent]
        return statistics.median(t), percentile(t, 95)


def kvmmd_path() -> str:
    env = os.environ.get("KVMM_KVMMD")
    if env:
        return env
    built = os.path.join(TREE, "kvmm", "kvmmd")
    if os.access(built, os.X_OK):
        return built
    return shutil.which("kvmmd") or "/usr/local/sbin/kvmmd"


class _Daemon:
    """kvmmd on socket sock with the given namespace pools (name, frames)."""

    def __init__(self, workdir: str, sock: str, page_size: int, pools: List[Tuple[str, int]],
                 swap_bytes: int = 0):
        self.sock = sock
        self.log = os.path.join(workdir, "kvmmd.log")
        conf = os.path.join(workdir, "kvmmd.conf")
        open(conf, "w").close()
        argv = [kvmmd_path(), "--foreground", "--config", conf, "--socket", sock,
                "--page-size", str(page_size), "--log-level", "warn"]
        for name, frames in pools:
            argv += ["--namespace", f"{name}:{frames}"]
        if swap_bytes:
            argv += ["--swap", f"swap_host={swap_bytes}"]
        if os.path.exists(sock):
            os.unlink(sock)
        with open(self.log, "ab") as logf:
            try:
                self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL,
                                             preexec_fn=_die_with_parent)
            except OSError as e:
                raise AgentError(f"cannot start kvmmd ({argv[0]}): {e.strerror}") from None
        deadline = time.monotonic() + 10
        # the socket file appears at bind(), before listen(): wait until a connect succeeds
        while not _listening(sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AgentError("kvmmd did not start:\n" + _tail(self.log))
            time.sleep(0.01)

    def stats(self, namespaces: Sequence[str]) -> Dict[str, int]:
        """Peak (summed over the namespaces: each is its own pool), swap-ins and -outs."""
        from kvmm import admin

        out = {"peak": 0, "pswpin": 0, "pswpout": 0}
        with admin.open(self.sock) as a:
            for ns in namespaces:
                out["peak"] += admin.value(a.meminfo(ns=ns), "Peak") or 0
                vm = a.vmstat(ns=ns)
                out["pswpin"] += admin.value(vm, "pswpin") or 0
                out["pswpout"] += admin.value(vm, "pswpout") or 0
        return out

    def wmark_high(self, ns: str) -> int:
        """The free frames kvswapd keeps in namespace ns (meminfo WmarkHigh)."""
        from kvmm import admin

        with admin.open(self.sock) as a:
            return admin.value(a.meminfo(ns=ns), "WmarkHigh") or 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _listening(sock: str) -> bool:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the orchestrator dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so no kvmmd or agent outlives a killed run."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _tail(path: str, n: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class _AgentProc:
    def __init__(self, idx: int, model: str, workdir: str, timeout: float, nice: int = 0):
        self.idx = idx
        self.errlog = os.path.join(workdir, f"agent{idx}.log")
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"]
                                        if env.get("PYTHONPATH") else "")
        # argv[0] "kvmm-agentN" (beside the interpreter, which Python needs to find its
        # library): libkvmm names the client after it, so kvmmctl clients and top show agentN
        argv0 = os.path.join(os.path.dirname(sys.executable), f"kvmm-agent{idx}")
        with open(self.errlog, "wb") as err:
            self.proc = subprocess.Popen(
                [argv0, "-m", "kvmm.llm.agent", model, "--name", f"agent{idx}",
                 "--stall", str(timeout), "--nice", str(nice)], executable=sys.executable,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                preexec_fn=_die_with_parent)
        self.buf = b""
        self.pid = self.proc.pid

    def send(self, cmd: Dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise AgentError(f"agent{self.idx} (pid {self.pid}) is gone:\n"
                             + _tail(self.errlog)) from None


class Orchestrator:
    """N agent processes on one checkpoint; run(mode) runs the workload in one mode."""

    def __init__(self, model: str, workload: Workload, workdir: str, kv_dtype: str = "fp16",
                 timeout: float = 120.0, log=None, far: bool = True,
                 leader_threads: Optional[int] = None):
        workload.check()
        if leader_threads is None:
            leader_threads = default_leader_threads()
        if isinstance(leader_threads, bool) or not isinstance(leader_threads, int) or \
                not 1 <= leader_threads <= 64:
            raise AgentError(f"leader threads: {leader_threads!r} is not between 1 and 64")
        if kv_dtype not in ("fp32", "fp16", "bf16"):
            raise AgentError(f"kv dtype {kv_dtype!r}: one of fp32, fp16, bf16")
        from .config import ConfigError, load_config
        from .safetensors import Checkpoint, SafetensorsError

        try:
            cfg = load_config(model)
            Checkpoint(model)  # the weights' headers: a broken checkpoint fails here, at once
        except (ConfigError, SafetensorsError, OSError, ValueError) as e:
            raise AgentError(f"model {model}: {e}") from None
        workload.vocab = cfg.vocab_size  # the ids are drawn from the model's vocabulary
        self.model, self.w, self.dir, self.kv_dtype = model, workload, workdir, kv_dtype
        self.timeout = timeout
        self.far = far  # the pressure mode reads the host tier in place (else: chunked)
        self.leader_threads = leader_threads  # lent to a round's leader until its first token
        self.log = log or (lambda s: None)
        self.sock = os.path.join(workdir, "kvmmd.sock")
        elem = 4 if kv_dtype == "fp32" else 2
        token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * elem
        self.page_size = max(4096, 1 << (16 * token - 1).bit_length())  # >= 16 tokens a page
        self.tpp = self.page_size // token
        self.agents: List[_AgentProc] = []
        self.sel = selectors.DefaultSelector()
        self._queue: List[Tuple[_AgentProc, Dict]] = []
        try:
            for i in range(workload.agents):
                # the critical agent first on the CPUs too, as in kvmm's reclaim order
                a = _AgentProc(i, model, workdir, timeout,
                               0 if self._priority(i) >= CRITICAL_PRIORITY else AGENT_NICE)
                self.agents.append(a)
                self.sel.register(a.proc.stdout, selectors.EVENT_READ, a)
            for _ in self.agents:
                self._next(want="ready")
        except BaseException:
            self.close()
            raise

    # ---- events -------------------------------------------------------------------------
    def _poll(self, deadline: float) -> List[Tuple[_AgentProc, Dict]]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AgentError(f"no answer from the agents in {self.timeout:.0f} s")
        out = []
        for key, _ in self.sel.select(left):
            a: _AgentProc = key.data
            chunk = os.read(a.proc.stdout.fileno(), 65536)
            if not chunk:
                a.proc.wait()
                raise AgentError(f"agent{a.idx} (pid {a.pid}) exited with status "
                                 f"{a.proc.returncode}:\n" + _tail(a.errlog))
            a.buf += chunk
            while b"\n" in a.buf:
                line, a.buf = a.buf.split(b"\n", 1)
                ev = json.loads(line)
                if ev.get("ev") == "error":
                    raise AgentError(ev.get("msg", "agent error") + "\n" + _tail(a.errlog))
                out.append((a, ev))
        return out

    def _next(self, want: str) -> Tuple[_AgentProc, Dict]:
        """The next event, which must be a `want` (ready, attached, detached)."""
        deadline = time.monotonic() + self.timeout
        while not self._queue:
            self._queue += self._poll(deadline)
        a, ev = self._queue.pop(0)
        if ev.get("ev") != want:
            raise AgentError(f"agent{a.idx}: expected {want}, got {ev}")
        return a, ev

    # ---- one mode -----------------------------------------------------------------------
    def least_pool(self) -> int:
        """Pages of the longest sequence (the last round's prompt and its answer): what a
        whole-sequence pin needs, more than the pressure pool holds; chunked attention
        (chunk_pages) pins a part of it at a time."""
        return -(-self.w.longest_tokens() // self.tpp)

    def chunk_for(self, capacity: int) -> int:
        """The chunk (pages) of the pressure mode's attention in a pool whose admission may
        fill capacity frames: every agent's working set (the chunk read, at most chunk + 1
        pages written) fits at once - or two agents' where the shared preamble alone nearly
        fills the pool - up to CHUNK_MAX and no longer than the longest sequence; 0 when
        not even one chunk of one page fits."""
        if capacity < 3:
            return 0
        together = self.w.agents
        # where the preamble every task maps leaves no room beside it for two tasks' pins,
        # size the chunk for two tasks at once (kvmm swaps the preamble's pages out of all
        # the sequences that map them, so only the pins must fit): fewer, larger chunks a
        # step than four tasks' chunks would be
        if len(self.w.preamble) // self.tpp + 2 * 3 > capacity:
            together = min(together, 2)
        c = (capacity // together - 1) // 2
        return max(1, min(CHUNK_MAX, c, self.least_pool()))

    def _priority(self, agent: int) -> int:
        return CRITICAL_PRIORITY if agent == self.w.critical else 0

    def _working_set(self, prompt: List[int], chunk: int = 0, far: bool = False
                     ) -> Tuple[frozenset, int]:
        """A task's pages: the prompt's full pages by content (the same prefix is the same
        page in the shared namespace, whoever computed it: a chained hash of the blocks, the
        way kvmm keys them) and the count of its own pages after them (a partial prompt
        page, the answer). Chunked attention (chunk pages): its own pages are what a step
        pins, the chunk it reads and the at most chunk + 1 pages it writes. Far reads: no
        shared pages (the round's common prefix, preamble and transcript, is sealed and
        read where it lies, in the pool or the host tier), its own pages those after that
        prefix: its instruction and answer."""
        tpp = self.tpp
        if far:
            common = max(0, len(prompt) - self.w.instruction_tokens) // tpp
            return frozenset(), -(-(len(prompt) + self.w.answer_tokens) // tpp) - common
        full = len(prompt) // tpp
        keys, h = [], 0
        for j in range(full):
            h = hash((h, tuple(prompt[j * tpp:(j + 1) * tpp])))
            keys.append(h)
        if chunk:
            return frozenset(keys), 2 * chunk + 1
        total = -(-(len(prompt) + self.w.answer_tokens) // tpp)
        return frozenset(keys), total - full

    def run(self, mode: str, pool_frames: Optional[int] = None, force: bool = False,
            far: Optional[bool] = None) -> ModeResult:
        """Run the workload in mode; pressure needs pool_frames (half the shared peak), and
        runs with far reads (far, None: the orchestrator's), steps writing at most C pages,
        or else with chunked attention of C pages, C sized to it (chunk_for); a pool that
        cannot hold one chunk beside the frames kvswapd keeps free (wmark_high) is refused.
        force: the size was given (--pressure-pool), not derived."""
        far = self.far if far is None else far
        if mode not in MODES:
            raise AgentError(f"mode {mode!r}: one of {', '.join(MODES)}")
        w = self.w
        # room for every sequence of the run, never reclaimed: the shared and private pools
        ample = (w.rounds * (-(-w.longest_tokens() // self.tpp) + 2) + 16) * w.agents
        note = ""
        swap = 0
        if mode == "private":
            pools = [(f"agent{i}", ample) for i in range(w.agents)]
        elif mode == "shared":
            pools = [(SHARED_NS, ample)]
        else:
            if pool_frames is None:
                raise AgentError("pressure needs the pool size (half the shared peak)")
            swap = ample * self.page_size
            d = _Daemon(self.dir, self.sock, self.page_size, [(SHARED_NS, pool_frames)], swap)
            # kvswapd keeps wmark_high frames free: the running tasks' pinned pages must fit
            # beside them, or it would swap out what a step is about to read
            try:
                reserve = d.wmark_high(SHARED_NS)
            except Exception:
                d.stop()
                raise
            chunk = self.chunk_for(pool_frames - reserve)
            if not chunk:
                d.stop()
                raise AgentError(
                    f"pressure pool: {pool_frames} frames cannot hold one chunk (1 page read "
                    f"and 2 written) beside the {reserve} frames kvswapd keeps free: at least "
                    f"{3 + reserve}")
            least = self.least_pool()
            if far:
                note = (f"{'forced' if force else 'half the shared peak'}: {pool_frames} "
                        f"frames for sequences of up to {least} pages: far reads of the "
                        f"host tier, steps of at most {chunk} pages written (kvswapd keeps "
                        f"{reserve} free)")
            else:
                note = (f"{'forced' if force else 'half the shared peak'}: {pool_frames} "
                        f"frames for sequences of up to {least} pages: attention {chunk} "
                        f"pages at a time (each agent pins at most {2 * chunk + 1}; kvswapd "
                        f"keeps {reserve} free)")
            try:
                return self._run(mode, d, [SHARED_NS], [(SHARED_NS, pool_frames)], note,
                                 pool_frames - reserve, chunk, far)
            finally:
                self._detach_all(d)
        names = [p[0] for p in pools]
        d = _Daemon(self.dir, self.sock, self.page_size, pools, swap)
        try:
            return self._run(mode, d, names, pools, note, None)
        finally:
            self._detach_all(d)

    def _detach_all(self, d: "_Daemon") -> None:
        for a in self.agents:
            if a.proc.poll() is None:
                try:
                    a.send({"op": "detach"})
                except AgentError:
                    pass
        try:
            for _ in self.agents:
                self._next(want="detached")
        except AgentError:
            pass
        d.stop()

    def warm_up(self) -> None:
        """Each agent answers one short task through a kvmmd of its own, not measured: the
        first attach and the first paged steps of a process (libkvmm loaded, the views made,
        torch's first calls) are then not charged to the first mode run."""
        w = self.w
        d = _Daemon(self.dir, self.sock, self.page_size, [("warmup", 64 * w.agents)])
        try:
            for a in self.agents:
                a.send({"op": "attach", "socket": d.sock, "ns": "warmup",
                        "kv_dtype": self.kv_dtype})
            for _ in self.agents:
                self._next(want="attached")
            for a in self.agents:
                a.send({"op": "task", "id": -1 - a.idx, "max_tokens": 4,
                        "prompt": w._ids(f"warm-up {a.idx}", 16 * self.tpp)})
            left = {a.idx for a in self.agents}
            deadline = time.monotonic() + self.timeout
            while left:
                for a, ev in self._poll(deadline):
                    if ev["ev"] == "done":
                        left.discard(a.idx)
            for a in self.agents:
                a.send({"op": "detach"})
            for _ in self.agents:
                self._next(want="detached")
        finally:
            d.stop()

    def _run(self, mode, d, names, pools, note, capacity: Optional[int], chunk: int = 0,
             far: bool = False) -> ModeResult:
        """capacity: the frames admission may fill (None: every task starts when ready);
        chunk: the agents' attention chunk in pages (0: whole sequences); far: far reads
        instead, chunk then the most pages a step writes."""
        w = self.w
        for a in self.agents:
            ns = names[a.idx] if mode == "private" else SHARED_NS
            cmd = {"op": "attach", "socket": d.sock, "ns": ns, "kv_dtype": self.kv_dtype,
                   "priority": self._priority(a.idx)}
            if chunk:
                if far:
                    cmd["far"] = True
                    cmd["step_pages"] = chunk
                else:
                    cmd["chunk_pages"] = chunk
                # a preamble well past the pool (over 4/3 of it) cannot even be mapped for
                # a moment: lookups take at most half the pool (the rest is computed)
                pool = pools[0][1]
                if 3 * (len(w.preamble) // self.tpp) > 4 * pool:
                    cmd["lookup_pages"] = pool // 2
            a.send(cmd)
        far_off = ""
        for _ in self.agents:
            a, ev = self._next(want="attached")
            if ev["tokens_per_page"] != self.tpp:
                raise AgentError(f"agent{a.idx}: {ev['tokens_per_page']} tokens a page, "
                                 f"expected {self.tpp}")
            if far and not ev.get("far"):
                far_off = ev.get("far_why", "")
        if far and far_off:
            # the stores go on without (whole pins, chunked when a pin finds no room)
            self.log(f"[{mode}] far reads unavailable: {far_off}")
            note += f"; far reads unavailable ({far_off})"
            far = False
        self.log(f"[{mode}] kvmmd {d.sock}: {', '.join(f'{n} {f} frames' for n, f in pools)}"
                 f" of {self.page_size // 1024} KiB ({self.tpp} tokens a page); "
                 f"watch: kvmmctl --socket {d.sock} top")
        answers: Dict[Tuple[int, int], List[int]] = {}
        done: Dict[Tuple[int, int], Dict] = {}
        queued: Dict[Tuple[int, int], float] = {}
        suspended = 0
        t0 = time.perf_counter()
        for rnd in range(w.rounds):
            prompts = {i: w.prompt(rnd, i, answers) for i in range(w.agents)}
            adm = _Admission(capacity,
                             {i: self._working_set(prompts[i], 0 if far else chunk, far)
                              for i in prompts},
                             self._priority, chunked=bool(chunk) and not far, far=far)
            tid = {i: rnd * w.agents + i for i in prompts}
            started = False
            left = set(prompts)

            def act(what: str, i: int) -> None:
                if what == "task":
                    cmd = {"op": "task", "id": tid[i], "prompt": prompts[i],
                           "max_tokens": w.answer_tokens}
                    if i == w.leader and self.leader_threads > 1:
                        cmd["threads"] = self.leader_threads  # it prefills alone
                    self.agents[i].send(cmd)
                elif what == "pause" and chunk:
                    self.agents[i].send({"op": what, "release": True})
                else:
                    self.agents[i].send({"op": what})

            adm.eligible([w.leader], time.perf_counter())
            adm.schedule(act)
            deadline = time.monotonic() + self.timeout
            while left:
                for a, ev in self._poll(deadline):
                    deadline = time.monotonic() + self.timeout  # silence is what times out
                    kind = ev["ev"]
                    if kind == "first":
                        if a.idx == w.leader and not started:
                            # the leader's prompt is sealed: the others map what it computed
                            started = True
                            adm.eligible([i for i in prompts if i != w.leader],
                                         time.perf_counter())
                    elif kind == "done":
                        done[(rnd, a.idx)] = ev
                        answers[(rnd, a.idx)] = ev["tokens"]
                        queued[(rnd, a.idx)] = adm.queued(a.idx)
                        left.discard(a.idx)
                        adm.finished(a.idx)
                        if a.idx == w.leader and not started:
                            started = True  # a single agent
                            adm.eligible([i for i in prompts if i != w.leader],
                                         time.perf_counter())
                    elif kind == "paused":
                        adm.paused(a.idx)
                        suspended += 1
                    elif kind in ("resumed", "idle"):
                        pass
                    else:
                        raise AgentError(f"agent{a.idx}: unexpected {ev}")
                    adm.schedule(act)
        self.log(f"[{mode}] round {rnd + 1}: " + ", ".join(
                f"agent{i} {done[(rnd, i)]['skipped']} skipped/"
                f"{done[(rnd, i)]['computed']} computed" for i in range(w.agents)))
        wall = time.perf_counter() - t0
        st = d.stats(names)
        ev = list(done.values())
        return ModeResult(
            mode=mode, pool_frames=sum(p[1] for p in pools), peak_frames=st["peak"], wall=wall,
            generated=sum(len(e["tokens"]) for e in ev), computed=sum(e["computed"] for e in ev),
            skipped=sum(e["skipped"] for e in ev), preempted=sum(e["preempted"] for e in ev),
            waits=sum(e["waits"] for e in ev), swap_in=st["pswpin"], swap_out=st["pswpout"],
            # from the moment the task could start (what the shared mode's schedule would
            # send it): time it waited for admission counts
            ttft={i: [done[(r, i)]["ttft"] + queued[(r, i)] for r in range(w.rounds)]
                  for i in range(w.agents)},
            outputs={k: list(v["tokens"]) for k, v in done.items()}, note=note,
            suspended=suspended, queued=sum(queued.values()),
            prefill_s=sum(e.get("prefill_s", 0.0) for e in ev),
            decode_s=sum(e.get("decode_s", 0.0) for e in ev), far=far,
            far_pages=sum(e.get("far_pages", 0) for e in ev),
            chunked_steps=sum(e.get("chunked_steps", 0) for e in ev))

    def close(self) -> None:
        for a in self.agents:
            if a.proc.poll() is None:
                try:
                    a.send({"op": "quit"})
                    a.proc.stdin.close()
                except (AgentError, OSError):
                    pass
        for a in self.agents:
            try:
                a.proc.wait(10)
            except subprocess.TimeoutExpired:
                a.proc.kill()
                a.proc.wait()
        self.agents = []
        self.sel.close()

    def __enter__(self) -> "Orchestrator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Admission:
    """Load control for a pool smaller than the run (the pressure mode): which agents' tasks
    run at once, the way an OS scheduler keeps the sum of the running processes' working sets
    within memory rather than letting them take each other's pages at every step (Denning's
    working-set policy with load control).

    A task is admitted when its working set (Orchestrator._working_set: the prompt's pages by
    content, which agents of one namespace share, and its own answer pages) fits in the pool
    beside those of the running tasks (chunked: its pinned pages, and a task of higher
    priority runs alone); the candidates go in priority order (the critical
    agent first, then paused tasks, then in the order they became ready; no task overtakes a
    higher one that waits, so none starves). When the critical agent's task does not fit,
    running tasks of lower priority are paused (youngest first) until it does, as the
    swapper of a classic Unix suspends a process: a paused agent stops between two steps,
    so its sequence is unpinned and kvmmd swaps it out (to the swap tier, not dropped) when
    the critical agent's pages need the frames; resumed, its next step's PIN faults it back.
    Chunked (the pressure mode's pool is smaller than one sequence): a task's working set is
    its pinned pages (chunk read, pages written); the rest of its sequence is kvmm's to swap,
    the prompt pages other running tasks map too included (kvmm swaps a sealed page out of
    all its mappers); a paused task gives its sequence up (release: its prompt stays in kvmm's prefix cache, it is computed again on
    resume), so it holds nothing.
    Far reads (far: the pressure mode's default): a task's working set is its own pages only
    (Orchestrator._working_set gives no shared keys: the common prefix is read where it
    lies, in the pool or kvmm's host tier, never faulted in), tasks of any priority share
    the pool (the critical one does not run alone), and a task alone always runs.
    Pages nobody runs on (finished tasks, cached) are kvmmd's to reclaim or demote.
    capacity None: no limit (every task starts when it is ready)."""

    def __init__(self, capacity: Optional[int], sets: Dict[int, Tuple[frozenset, int]],
                 priority, chunked: bool = False, far: bool = False):
        self.capacity = capacity
        self.sets = sets
        self.prio = priority
        self.chunked = chunked
        self.far = far
        self.ready: Dict[int, float] = {}  # agent -> when its task could start
        self.started: Dict[int, float] = {}  # agent -> when its task was sent
        self.waiting: List[int] = []  # ready, not sent
        self.running: List[int] = []  # sent, not paused (pausing ones included)
        self.pausing: List[int] = []  # pause sent, not yet acknowledged
        self.suspended: List[int] = []  # paused, waiting to resume

    def resident(self, agents) -> int:
        """Frames the tasks hold at once. Chunked: each one's pinned pages; the rest of
        each sequence is kvmm's to swap, the prompt pages several of them map included
        (kvmm swaps a sealed page out of all its mappers, Documentation/mm/reclaim.md).
        Else: their pages, shared ones once."""
        if self.chunked:
            return sum(self.sets[i][1] for i in agents)
        keys = set()
        own = 0
        for i in agents:
            keys |= self.sets[i][0]
            own += self.sets[i][1]
        return len(keys) + own

    def _fits(self, agents) -> bool:
        # chunked: a task alone always runs (the pool was checked to hold its chunk)
        # chunked: a task of a higher priority than another runs alone, so that the critical
        # agent has the cores to itself (the others are paused for it); tasks of one
        # priority share the pool, two at a time here (measured: kvmm-bench.md, agents)
        if self.chunked and len(agents) > 1 and len({self.prio(i) for i in agents}) > 1:
            return False
        return (self.capacity is None or ((self.chunked or self.far) and len(agents) == 1)
                or self.resident(agents) <= self.capacity)

    def eligible(self, agents, now: float) -> None:
        for i in agents:
            self.ready[i] = now
            self.waiting.append(i)

    def queued(self, agent: int) -> float:
        return self.started[agent] - self.ready[agent]

    def paused(self, agent: int) -> None:
        if agent in self.pausing:
            self.pausing.remove(agent)
            self.running.remove(agent)
            self.suspended.append(agent)

    def finished(self, agent: int) -> None:
        for lst in (self.running, self.pausing):
            if agent in lst:
                lst.remove(agent)

    def schedule(self, act) -> None:
        """Admit what fits, in order; act(what, agent) sends "task", "pause" or "resume"."""
        while self.waiting or self.suspended:
            cand = min(self.waiting + self.suspended,
                       key=lambda i: (-self.prio(i), i not in self.suspended, self.ready[i], i))
            if self._fits(self.running + [cand]):
                if cand in self.suspended:
                    self.suspended.remove(cand)
                    act("resume", cand)
                else:
                    self.waiting.remove(cand)
                    self.started[cand] = time.perf_counter()
                    act("task", cand)
                self.running.append(cand)
                continue
            if self.pausing or not self.running:
                return  # room is being made; or nothing runs (the pool was checked to fit one)
            lower = sorted((i for i in self.running if self.prio(i) < self.prio(cand)),
                           key=lambda i: (self.prio(i), -self.started[i]))
            victims: List[int] = []
            for v in lower:
                victims.append(v)
                if self._fits([i for i in self.running if i not in victims] + [cand]):
                    break
            else:
                return  # pausing cannot make room for it: it waits for a task to end
            for v in victims:
                self.pausing.append(v)
                act("pause", v)
            return


def run_modes(model: str, workload: Workload, modes: Sequence[str] = MODES,
              kv_dtype: str = "fp16", workdir: Optional[str] = None, log=None,
              timeout: float = 120.0, pressure_pool: Optional[int] = None, far: bool = True,
              leader_threads: Optional[int] = None) -> Dict[str, ModeResult]:
    """Run the modes in order (pressure after shared: its pool is half the shared peak, or
    pressure_pool frames when given; with far reads, else chunked attention)."""
    for m in modes:
        if m not in MODES:
            raise AgentError(f"mode {m!r}: one of {', '.join(MODES)}")
    if pressure_pool is not None and pressure_pool < 1:
        raise AgentError(f"pressure pool: {pressure_pool} frames is not at least 1")
    if "pressure" in modes and "shared" not in modes and pressure_pool is None:
        raise AgentError("pressure is sized from the shared mode's peak: run shared too")
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="kvmm-agents.")
    out: Dict[str, ModeResult] = {}
    try:
        with Orchestrator(model, workload, workdir, kv_dtype, timeout, log, far=far,
                          leader_threads=leader_threads) as o:
            o.warm_up()
            for m in sorted(modes, key=MODES.index):
                pool = None
                if m == "pressure":
                    pool = pressure_pool or out["shared"].peak_frames // 2
                out[m] = o.run(m, pool, force=pressure_pool is not None)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def mismatches(results: Dict[str, ModeResult]) -> List[str]:
    """Where an agent's output tokens differ between modes (empty: identical everywhere)."""
    res = list(results.values())
    bad = []
    for r in res[1:]:
        for k, toks in res[0].outputs.items():
            if r.outputs.get(k) != toks:
                bad.append(f"round {k[0] + 1} agent{k[1]}: {res[0].mode} and {r.mode} differ")
    return bad
