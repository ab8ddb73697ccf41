# SPDX-License-Identifier: MIT
"""kvmmd going away under a client and coming back at the same socket (runtime/reattach.c):
KvmmDaemonGone, the GONE event, Client.reattach() and its lost sequences, views made again
over the new pool, the automatic mode (KvmmReattached), a daemon that never comes back."""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import kvmm
from conftest import NS_A, NS_A_FRAMES, NS_B, NS_B_FRAMES, PAGE_SIZE, kvmmd_path


class RestartableDaemon:
    """A kvmmd that can be killed (-9) or stopped and started again at the same socket."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kvmm-pyreattach.")
        self.sock = os.path.join(self.dir, "kvmmd.sock")
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        conf = os.path.join(self.dir, "kvmmd.conf")
        open(conf, "w").close()
        argv = [kvmmd_path(), "--foreground", "--config", conf, "--socket", self.sock,
                "--page-size", str(PAGE_SIZE), "--frames", str(NS_A_FRAMES + NS_B_FRAMES),
                "--namespace", f"{NS_A}:{NS_A_FRAMES}", "--namespace", f"{NS_B}:{NS_B_FRAMES}"]
        with open(os.path.join(self.dir, "kvmmd.log"), "ab") as logf:
            self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                import socket
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(self.sock)
                s.close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kvmmd did not start")
                time.sleep(0.01)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(20)
        self.proc = None
        return rc

    def remove(self) -> None:
        if self.proc is not None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def rdaemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = RestartableDaemon()
    yield d
    d.remove()


def _page_roundtrip(c: kvmm.Client) -> None:
    """A new sequence's page written through a numpy view of the (new) pool and read back."""
    tpp = c.tokens_per_page
    s = c.seq_create()
    c.seq_append(s, list(range(tpp)))
    frame = int(c.block_table([s], max_blocks=2)[0][0])
    k, _ = c.views("numpy").kv(0)
    k[frame][:] = 7
    assert (k[frame] == 7).all()
    assert ctypes.c_uint16.from_address(c.frame_addr(frame)).value == k[frame].view("u2")[0, 0, 0]
    c.seq_free(s)


def test_gone_then_reattach(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt)
    tpp = c.tokens_per_page
    a = c.seq_create()
    c.seq_append(a, list(range(2 * tpp)))
    b = c.seq_fork(a)
    gone = c.seq_create()
    c.seq_free(gone)
    _page_roundtrip(c)
    assert c.connected

    rdaemon.kill()
    with pytest.raises(kvmm.KvmmDaemonGone) as e:
        c.seq_create()
    assert e.value.errno == errno.ENOTCONN
    assert isinstance(e.value, kvmm.NoDaemonError) and isinstance(e.value, kvmm.KvmmError)
    assert not c.connected
    events = c.complete(max=8, min=0)
    assert len(events) == 1 and events[0].is_event and events[0].is_gone
    assert events[0].res == -errno.ENOTCONN
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.seq_append(a, [1, 2, 3])
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.complete(max=8, min=0)  # said once: nothing more to reap

    rdaemon.start()
    lost = c.reattach(timeout=10)
    assert sorted(lost) == sorted([a, b])
    assert c.lost_seqs() == lost
    assert c.connected
    assert c.page_size == PAGE_SIZE and c.nr_frames == NS_A_FRAMES
    _page_roundtrip(c)
    with pytest.raises(kvmm.KvmmError) as e:
        c.reattach(timeout=0)
    assert e.value.errno == errno.EISCONN
    c.close()


def test_clean_stop_then_reattach(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt)
    s = c.seq_create()
    assert rdaemon.stop() == 0
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.seq_create()
    rdaemon.start()
    assert c.reattach(timeout=10) == [s]
    _page_roundtrip(c)
    c.close()


def test_never_back(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt)
    c.seq_create()
    rdaemon.kill()
    t0 = time.monotonic()
    with pytest.raises(kvmm.KvmmError) as e:
        c.reattach(timeout=0.3)
    assert e.value.errno == errno.ETIMEDOUT
    assert 0.25 < time.monotonic() - t0 < 3
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.seq_create()
    with pytest.raises(ValueError):
        c.reattach(timeout=-1)
    c.close()


def test_automatic(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt, reattach=True)
    s = c.seq_create()
    rdaemon.kill()
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.seq_create()
    rdaemon.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            c.seq_create()
        except kvmm.KvmmDaemonGone:
            assert time.monotonic() < deadline
            time.sleep(0.02)
            continue
        except kvmm.KvmmReattached as e:
            assert e.errno == errno.ESTALE
            break
        raise AssertionError("the first call after the restart must raise KvmmReattached")
    assert c.lost_seqs() == [s]
    _page_roundtrip(c)
    c.close()


def test_reattach_bad_arguments(rdaemon, fmt):
    with pytest.raises(TypeError):
        kvmm.attach(rdaemon.sock, NS_A, fmt, reattach=1)
    c = kvmm.attach(rdaemon.sock, NS_A, fmt)
    with pytest.raises(ValueError):
        c.reattach(timeout="soon")
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.reattach()


def test_engine_recomputes_after_kill9(rdaemon, tmp_path):
    """kvmm.llm over PagedKV(reattach_timeout=...): kvmmd killed with -9 in the middle of
    generation and started again; the engine reattaches, recomputes the lost sequences and
    gives the same tokens as an undisturbed run."""
    pytest.importorskip("torch")
    from kvmm.llm import Engine, SamplingParams, load_model
    from kvmm.llm.paged import PagedKV
    from kvmm.llm.testing import write_checkpoint

    write_checkpoint(str(tmp_path), "llama", seed=1)
    m = load_model(str(tmp_path))
    cfg = m.cfg
    prompts = [[(i * 13 + j * 7) % 250 + 3 for j in range(40)] for i in range(3)]
    params = SamplingParams(max_tokens=24, ignore_eos=True)

    def engine():
        kv = PagedKV(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype="fp32", ns=NS_A,
                     socket_path=rdaemon.sock, reattach_timeout=10)
        return Engine(m, kv)

    e = engine()
    want = [r.completions[0].token_ids for r in e.generate(prompts, params)]
    e.close()

    e = engine()
    reqs = [e.add_request(p, params) for p in prompts]
    for _ in range(5):
        e.step()
    assert any(r.completions[0].token_ids for r in reqs) and not all(r.done for r in reqs)
    rdaemon.kill()
    rdaemon.start()
    while e.has_work():
        e.step()
    assert e.kv.stats["reattached"] == 1
    assert sum(r.recomputes for r in reqs) >= len(prompts)
    assert [r.completions[0].token_ids for r in reqs] == want
    e.close()
