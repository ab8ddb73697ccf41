# SPDX-License-Identifier: MIT
"""kvmm.llm.agents: agent processes on one kvmmd in the shared, private and pressure modes.

One small run (2 agents, 2 rounds, a tiny model, a few tokens) checks what the demo and the
benchmark rest on: every agent's output tokens are identical in the three modes, the shared
mode really skipped prefill (the other agent's and the previous round's pages were mapped),
the private mode held more frames at its peak, and in a pressure pool smaller than the shared
peak kvmm swapped or preempted and the outputs stayed the same; then an agent killed between
two runs is named by the next one, which does not hang. Then the error paths: bad agent
counts and modes, a model directory without a config, and one without weights."""

import os
import signal

import pytest

from conftest import kvmmd_path

try:
    import kvmm  # noqa: F401
    from kvmm.llm.agents import AgentError, Orchestrator, Workload, mismatches, run_modes
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
    w = small()
    with Orchestrator(ckpt, w, str(tmp_path), timeout=60) as o:
        # a pressure pool of 10 frames: below the shared peak (12 frames here) and below what
        # the two agents' steps need at once, so sequences are swapped out and in, or preempted
        res = {"shared": o.run("shared"), "private": o.run("private"),
               "pressure": o.run("pressure", 10, force=True)}
        assert mismatches(res) == []
        sh, pr, pz = res["shared"], res["private"], res["pressure"]
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
        assert sh.skipped >= (w.agents - 1) * 64
        # private: each agent's pool holds its own copy of everything
        assert pr.peak_frames > sh.peak_frames > 0
        assert pz.pool_frames == 10 < sh.peak_frames
        assert pz.peak_frames <= pz.pool_frames
        assert pz.swap_out + pz.preempted > 0  # the pool was too small: kvmm made room
        assert set(sh.ttft) == {0, 1} and all(t > 0 for v in sh.ttft.values() for t in v)

        # an agent that dies: the next run says which, and does not hang
        os.kill(o.agents[1].pid, signal.SIGKILL)
        o.agents[1].proc.wait()
        with pytest.raises(AgentError, match="agent1"):
            o.run("shared")


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
