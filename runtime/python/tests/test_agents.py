# SPDX-License-Identifier: MIT
"""kvmm.llm.agents: agent processes on one kvmmd in the shared, private and pressure modes.

One small run (2 agents, 2 rounds, a tiny model, a few tokens) checks what the demo and the
benchmark rest on: every agent's output tokens are identical in the three modes, the shared
mode really skipped prefill (the other agent's and the previous round's pages were mapped),
the private mode held more frames at its peak, and in a pressure pool of half the shared
peak, smaller than one sequence, the agents read the pages kvmm swapped to its host tier in
place (far reads), and with far=False their chunked attention ran (a page a chunk, the
admission control letting the tasks take turns) while kvmm swapped, nothing was preempted
and the outputs stayed the same; then an agent
killed between two runs is named by the next one, which does not hang. The admission's order
on its own; an agent paused in the middle of a task and resumed answers what it answers
unpaused. Then the error paths: bad agent counts and modes, a pool below one chunk, a model
directory without a config, and one without weights."""

import os
import re
import signal
import time

import pytest

from conftest import kvmmd_path

try:
    import kvmm  # noqa: F401
    from kvmm import _lib
    from kvmm.llm.agents import (AGENT_NICE, AgentError, Orchestrator, Workload, _Admission,
                                 _Daemon, mismatches, run_modes)
    from kvmm.llm.agents_cli import main as cli_main
    from kvmm.llm.testing import write_checkpoint
except ImportError as e:  # the bindings, libkvmm or torch are missing
    pytest.skip(f"kvmm.llm not importable: {e}", allow_module_level=True)

pytestmark = pytest.mark.skipif(not os.access(kvmmd_path(), os.X_OK),
                                reason=f"kvmmd not built at {kvmmd_path()}")


def small() -> Workload:
    # 16 tokens a page: 64 tokens of system + tools are 4 shared pages
    return Workload(agents=2, rounds=2, system_tokens=32, tool_tokens=32,
                    instruction_tokens=16, answer_tokens=8, critical=0)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("agents-model"))
    write_checkpoint(d, "llama", seed=3)
    return d


def test_three_modes(ckpt, tmp_path):
    # 1024 tokens of system + tools (64 pages): half the shared peak is 36 frames, below one
    # round-2 sequence (69 pages), and room for 8-page chunks
    w = Workload(agents=2, rounds=2, system_tokens=512, tool_tokens=512,
                 instruction_tokens=16, answer_tokens=8, critical=0)
    with Orchestrator(ckpt, w, str(tmp_path), timeout=60) as o:
        # the pressure pool is half the shared peak: below one round-2 sequence (69 pages),
        # so the agents' attention is chunked (about 8 pages a chunk, 17 pinned at most a task)
        assert o.least_pool() == 69
        assert o.chunk_for(2) == 0 and o.chunk_for(3) == 1 and o.chunk_for(14) == 3
        with pytest.raises(AgentError, match=r"2 frames cannot hold one chunk .* at least"):
            o.run("pressure", 2, force=True)
        sh = o.run("shared")
        res = {"shared": sh, "private": o.run("private"),
               "pressure": o.run("pressure", sh.peak_frames // 2),
               "chunked": o.run("pressure", sh.peak_frames // 2, far=False)}
        assert mismatches(res) == []
        sh, pr, pf, pz = res["shared"], res["private"], res["pressure"], res["chunked"]
        # far reads (the default): the agents read the host tier in place
        if _lib.has("kvmm_pin_far"):
            assert pf.far and "far reads of the host tier" in pf.note, pf.note
            assert pf.far_pages > 0
        assert pf.pool_frames == sh.peak_frames // 2 and pf.peak_frames <= pf.pool_frames
        assert not pz.far and pz.far_pages == 0 and pz.chunked_steps > 0
        for r in res.values():
            assert r.generated == w.agents * w.rounds * w.answer_tokens
            assert all(len(t) == w.answer_tokens for t in r.outputs.values())
            # the same prompts (under pressure a preempted sequence is looked up and computed
            # again)
            assert r.computed + r.skipped >= pr.computed + pr.skipped
        assert sh.computed + sh.skipped == pr.computed + pr.skipped
        # shared: round 1's follower maps the leader's 4 pages of system + tools; round 2 maps
        # agent 0's round-1 pages and what the leader computed of the transcript
        assert sh.skipped > pr.skipped
        assert sh.computed < pr.computed
        assert sh.skipped >= (w.agents - 1) * 1024
        # private: each agent's pool holds its own copy of everything
        assert pr.peak_frames > sh.peak_frames > 0
        assert pz.pool_frames == sh.peak_frames // 2 < o.least_pool()
        assert pz.peak_frames <= pz.pool_frames
        # chunks of about 8 pages (the peak, so the pool, varies by a frame or two)
        m = re.search(r"attention (\d+) pages at a time \(each agent pins at most (\d+)", pz.note)
        assert m and 4 <= int(m.group(1)) <= 9 and int(m.group(2)) < pz.pool_frames
        assert pz.swap_out > 0 and pz.swap_in > 0  # the pool was too small: kvmm made room
        # (kvmmd may preempt a sequence when a lookup finds no room: it is recomputed, and
        # the outputs above are still identical)
        assert set(sh.ttft) == {0, 1} and all(t > 0 for v in sh.ttft.values() for t in v)

        # an agent that dies: the next run says which, and does not hang
        os.kill(o.agents[1].pid, signal.SIGKILL)
        o.agents[1].proc.wait()
        with pytest.raises(AgentError, match="agent1"):
            o.run("shared")


def test_pause_resume(ckpt, tmp_path):
    """pause between two steps, resume: the same tokens as a task never paused; a pause that
    comes after the task ended is answered idle."""
    w = Workload(agents=1, rounds=1, system_tokens=32, tool_tokens=0, instruction_tokens=16,
                 answer_tokens=8)
    with Orchestrator(ckpt, w, str(tmp_path), timeout=60) as o:
        plain = o.run("shared").outputs[(0, 0)]
        prompt = w.prompt(0, 0, {})
        a = o.agents[0]
        pools = [("agents", 64)]
        d = _Daemon(str(tmp_path), o.sock, o.page_size, pools)
        try:
            a.send({"op": "attach", "socket": d.sock, "ns": "agents", "kv_dtype": "fp16"})
            o._next(want="attached")
            a.send({"op": "task", "id": 7, "prompt": prompt, "max_tokens": 200})
            a.send({"op": "pause"})
            evs = []
            while not any(e["ev"] == "paused" for e in evs):
                evs += [e for _, e in o._poll(time.monotonic() + 60)]
            assert [e["ev"] for e in evs] in (["paused"], ["first", "paused"])
            a.send({"op": "resume"})
            while not any(e["ev"] == "done" for e in evs):
                evs += [e for _, e in o._poll(time.monotonic() + 60)]
            done = [e for e in evs if e["ev"] == "done"][0]
            assert "resumed" in [e["ev"] for e in evs]
            assert done["tokens"][:8] == plain and len(done["tokens"]) == 200
            a.send({"op": "pause"})  # no task: nothing to pause
            assert o._next(want="idle")[1] == {"ev": "idle"}
            a.send({"op": "detach"})
            o._next(want="detached")
        finally:
            d.stop()


def test_leader_threads(ckpt, tmp_path):
    """The agents other than the critical one run at a lower CPU priority (nice). A round's
    leader lent threads while it prefills alone (its linears split by rows, the
    attention kernels on more threads): every agent's tokens are what they are unlent; a task
    asking for a thread count out of range is an error event, and runs nothing."""
    w = Workload(agents=2, rounds=2, system_tokens=256, tool_tokens=128, instruction_tokens=16,
                 answer_tokens=8)
    with pytest.raises(AgentError, match="leader threads: 0 is not between 1 and 64"):
        Orchestrator(ckpt, w, str(tmp_path), leader_threads=0)
    with Orchestrator(ckpt, w, str(tmp_path), timeout=60, leader_threads=1) as o:
        # the critical agent (0) keeps our CPU niceness, the other runs AGENT_NICE lower
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, o.agents[0].pid) == base
        assert os.getpriority(os.PRIO_PROCESS, o.agents[1].pid) == min(19, base + AGENT_NICE)
        plain = o.run("shared")
        o.leader_threads = 3
        lent = o.run("shared")
        assert mismatches({"plain": plain, "lent": lent}) == []
        assert lent.computed == plain.computed and lent.skipped == plain.skipped
        a = o.agents[0]
        d = _Daemon(str(tmp_path), o.sock, o.page_size, [("agents", 64)])
        try:
            a.send({"op": "attach", "socket": d.sock, "ns": "agents", "kv_dtype": "fp16"})
            o._next(want="attached")
            a.send({"op": "task", "id": 1, "prompt": [5] * 40, "max_tokens": 2, "threads": 0})
            with pytest.raises(AgentError, match="threads: 0 is not between 1 and 64"):
                o._next(want="done")
            # refused before the task started (an error detaches the agent): attached
            # again, the next task is the only one to run
            a.send({"op": "attach", "socket": d.sock, "ns": "agents", "kv_dtype": "fp16"})
            o._next(want="attached")
            a.send({"op": "task", "id": 2, "prompt": [5] * 40, "max_tokens": 2})
            assert o._next(want="first")[1]["id"] == 2
            done = o._next(want="done")[1]
            assert done["id"] == 2 and len(done["tokens"]) == 2 and done["computed"] == 40
            a.send({"op": "detach"})
            o._next(want="detached")
        finally:
            d.stop()


def test_admission_order():
    """Load control on its own: what fits starts; the critical agent (priority 10) goes first
    and pauses the youngest lower task when it does not fit; a paused task resumes before a
    new one; tasks sharing pages count them once."""
    shared = frozenset(range(10))
    sets = {0: (shared | {100}, 2), 1: (shared | {101}, 2), 2: (shared | {102}, 2),
            3: (frozenset({200}), 2)}
    prio = lambda i: 10 if i == 0 else 0  # noqa: E731
    assert _Admission(None, sets, prio).resident([0, 1, 2]) == 10 + 3 + 6
    log = []
    act = lambda what, i: log.append((what, i))  # noqa: E731
    adm = _Admission(18, sets, prio)  # 0-2 alone: 13 frames; two: 16; three: 19
    adm.eligible([1], 0.0)
    adm.schedule(act)
    assert log == [("task", 1)]
    adm.eligible([2, 0], 1.0)
    adm.schedule(act)
    assert log[1:] == [("task", 0)]  # the critical first; 2 waits (three do not fit)
    assert adm.resident(adm.running) == 16
    adm.finished(1)
    adm.schedule(act)
    assert log[2:] == [("task", 2)]
    assert adm.queued(2) == pytest.approx(adm.started[2] - 1.0)

    # far reads: own pages only, the critical agent beside the others, one alone always runs
    own = {0: (frozenset(), 5), 1: (frozenset(), 5), 2: (frozenset(), 5), 3: (frozenset(), 30)}
    log.clear()
    adm = _Admission(12, own, prio, far=True)
    adm.eligible([1, 0, 2], 0.0)
    adm.schedule(act)
    assert log == [("task", 0), ("task", 1)]  # 10 frames; a third does not fit
    adm.finished(0)
    adm.finished(1)
    adm.schedule(act)
    adm.finished(2)
    adm.eligible([3], 1.0)
    adm.schedule(act)
    assert log[2:] == [("task", 2), ("task", 3)]  # 30 frames: alone it runs

    # the critical agent does not fit beside 1 and 3: the youngest lower one (3) pauses
    log.clear()
    adm = _Admission(16, sets, prio)
    adm.eligible([1], 0.0)
    adm.schedule(act)
    adm.eligible([3], 0.5)
    adm.schedule(act)
    assert log == [("task", 1), ("task", 3)]  # 13 + 3 = 16
    adm.eligible([0], 1.0)
    adm.schedule(act)
    assert log[2:] == [("pause", 3)]  # 1 and 0 fit together (16): 3 alone pauses
    adm.eligible([2], 1.5)
    adm.schedule(act)
    assert log[3:] == []  # nothing starts while room is being made
    adm.paused(3)
    adm.schedule(act)
    assert log[3:] == [("task", 0)]
    adm.finished(1)
    adm.schedule(act)
    assert log[4:] == [("resume", 3)]  # the paused task before the new one (2 still waits)
    adm.finished(0)
    adm.schedule(act)
    assert log[5:] == [("task", 2)]
    # a pause that crossed the task's end: nothing is left paused
    adm.eligible([0], 2.0)
    adm.schedule(act)
    assert log[6:] == [("pause", 2)]  # 3, 2 and 0: 19 frames; 2 is the youngest
    adm.finished(2)  # it ended before it read the pause (the agent answers idle)
    adm.schedule(act)
    assert log[7:] == [("task", 0)]
    assert adm.suspended == [] and adm.pausing == []


def test_bad_input():
    for bad in (dict(agents=0), dict(agents=65), dict(rounds=0), dict(answer_tokens=0),
                dict(critical=2), dict(system_tokens=-1),
                dict(system_tokens=0, tool_tokens=0, instruction_tokens=0)):
        with pytest.raises(AgentError):
            Workload(**{**small().__dict__, **bad}).check()
    with pytest.raises(AgentError, match="mode 'bogus'"):
        run_modes("/nonexistent", small(), modes=["bogus"])
    with pytest.raises(AgentError, match="shared"):
        run_modes("/nonexistent", small(), modes=["pressure"])


def test_bad_model_dir(tmp_path):
    with pytest.raises(AgentError, match="model .*nonexistent"):
        Orchestrator(str(tmp_path / "nonexistent"), small(), str(tmp_path))


def test_cli_errors(capsys, tmp_path):
    assert cli_main(["--agents", "0"]) == 2
    assert "kvmm-agents: agents: 0 is not between 1 and 64" in capsys.readouterr().err
    assert cli_main(["--modes", "shared,oops"]) == 2
    assert "modes" in capsys.readouterr().err
    assert cli_main(["--model", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_weights_missing(tmp_path):
    """config.json without weights: refused before any agent starts."""
    d = tmp_path / "model"
    write_checkpoint(str(d), "llama")
    os.unlink(d / "model.safetensors")
    with pytest.raises(AgentError, match="no .*safetensors"):
        Orchestrator(str(d), Workload(agents=1), str(tmp_path), timeout=60)
