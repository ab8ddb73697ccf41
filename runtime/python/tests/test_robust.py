# SPDX-License-Identifier: MIT
"""Detection and integrity (issue #26): a sequence dropped because a swapped page failed its
checksum (PageLostError, reason "corrupt", Cqe.lost), a stopped kvmmd given up after the
deadline (KvmmDaemonStalled naming the daemon), the automatic reattach of a client that only
reaps completions, and the real cause behind a failed reattach (cause_errno, conn_error)."""
from __future__ import annotations

import errno
import math
import os
import signal
import time

import pytest

import kvmm
from kvmm import admin
from conftest import NS_A, PAGE_SIZE, Daemon, kvmmd_path, stop_process
from test_reattach import RestartableDaemon


@pytest.fixture
def rdaemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = RestartableDaemon()
    yield d
    if d.proc is not None:
        d.proc.send_signal(signal.SIGCONT)  # never leave a stopped daemon behind
    d.remove()


def _reap_until(c: kvmm.Client, want, seconds: float = 5.0) -> list:
    """Completions reaped until one satisfies ``want`` (returned with those before it)."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += c.complete(max=16, min=0)
        if any(want(q) for q in got):
            return got
        time.sleep(0.01)
    raise AssertionError(f"no such completion among {got}")


# ---- a page that failed its checksum ---------------------------------------------------------

def test_error_classes():
    e = kvmm.errors.make_error(-kvmm.KVMM_ELOST, "kvmm_pin")
    assert isinstance(e, kvmm.PageLostError) and isinstance(e, kvmm.PreemptedError)
    assert e.reason == "corrupt" and "checksum" in e.strerror
    p = kvmm.errors.make_error(-kvmm.KVMM_EPREEMPTED, "kvmm_pin")
    assert type(p) is kvmm.PreemptedError and p.reason == "oom"
    s = kvmm.errors.make_error(-errno.ETIMEDOUT, "kvmm_seq_create")
    assert isinstance(s, kvmm.KvmmDaemonStalled) and isinstance(s, kvmm.KvmmDaemonGone)
    # attach and reattach time out as plain errors (no daemon answered: not a stall)
    assert type(kvmm.errors.make_error(-errno.ETIMEDOUT, "kvmm_reattach")) is kvmm.KvmmError
    lost = kvmm.Cqe(0, -kvmm.KVMM_ELOST, kvmm.CQE_F_EVENT, 5, 0, 0, 3)
    assert lost.lost and lost.preempted
    oom = kvmm.Cqe(0, -kvmm.KVMM_EPREEMPTED, kvmm.CQE_F_EVENT, 5, 0, 0, 3)
    assert oom.preempted and not oom.lost


@pytest.mark.skipif(not admin.HAVE_ADMIN, reason="this libkvmm has no admin calls")
def test_corrupt_host_slot(fmt):
    """A host-tier slot spoilt after its write: PIN raises PageLostError (not EIO, not a
    plain preemption), the PREEMPT event says lost, swap_csum_bad counts it, others intact."""
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = Daemon(["--swap", f"swap_host={64 * PAGE_SIZE}"])
    try:
        c = kvmm.attach(d.sock, NS_A, fmt)
        a = admin.open(d.sock)
        tpp = c.tokens_per_page
        bad0 = admin.value(a.vmstat(), "swap_csum_bad") or 0
        a.fault_inject("swap.write nth=1 times=1 mode=corrupt", ns=NS_A)
        x = c.seq_create(priority=-5)  # lowest priority: swapped out first
        c.seq_append(x, list(range(20 * tpp)))
        z = c.seq_create(priority=-4)
        c.seq_append(z, list(range(1000, 1000 + 10 * tpp)))
        y = c.seq_create()
        c.seq_append(y, list(range(5000, 5000 + 230 * tpp)))  # pushes x and z out
        c.seq_free(y)
        with pytest.raises(kvmm.PageLostError) as e:
            c.pin([x])
        assert e.value.errno == kvmm.KVMM_ELOST and e.value.reason == "corrupt"
        assert admin.value(a.vmstat(), "swap_csum_bad") - bad0 == 1
        ev = [q for q in _reap_until(c, lambda q: q.is_event and q.seq == x)
              if q.is_event and q.seq == x]
        assert ev[0].lost and ev[0].preempted and ev[0].res == -kvmm.KVMM_ELOST
        with pytest.raises(kvmm.PreemptedError):  # what engines catch already
            c.seq_append(x, [1])
        c.pin([z])
        c.unpin([z])
        c.seq_free(x)
        c.seq_free(z)
        a.close()
        c.close()
        assert "failed its checksum" in d.log_text()
    finally:
        d.stop()


# ---- a stopped daemon ------------------------------------------------------------------------

def test_daemon_timeout_args(rdaemon, fmt):
    for bad in (0, -1, -0.5):
        with pytest.raises(ValueError):
            kvmm.attach(rdaemon.sock, NS_A, fmt, daemon_timeout=bad)
    with pytest.raises(TypeError):
        kvmm.attach(rdaemon.sock, NS_A, fmt, daemon_timeout="1")
    kvmm.attach(rdaemon.sock, NS_A, fmt, daemon_timeout=math.inf).close()
    kvmm.attach(rdaemon.sock, NS_A, fmt, daemon_timeout=2.5).close()


def test_stopped_daemon(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt, daemon_timeout=0.4)
    s = c.seq_create()
    assert c.conn_error() == (0, "")
    pid = rdaemon.proc.pid
    stop_process(pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(kvmm.KvmmDaemonStalled) as e:
            c.seq_create()
        dt = time.monotonic() - t0
        assert 0.35 < dt < 3.5
        assert e.value.errno == errno.ETIMEDOUT and e.value.cause_errno == errno.ETIMEDOUT
        assert f"pid {pid}" in str(e.value) and "stopped" in e.value.cause
        assert not c.connected
        gone = [q for q in c.complete(max=8, min=0) if q.is_gone]
        assert len(gone) == 1 and gone[0].res == -errno.ETIMEDOUT
        with pytest.raises(kvmm.KvmmDaemonStalled):
            c.seq_create()
        assert c.conn_error()[0] == errno.ETIMEDOUT
    finally:
        os.kill(pid, signal.SIGCONT)
    assert c.reattach(timeout=10) == [s]
    assert c.conn_error() == (0, "")
    t = c.seq_create()
    c.seq_append(t, list(range(c.tokens_per_page)))
    c.seq_free(t)
    c.close()


# ---- automatic reattach from kvmm_complete alone ---------------------------------------------

def test_complete_only_automatic(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt, reattach=True)
    c.submit([kvmm.Sqe(kvmm.Op.SEQ_CREATE, user_data=1)])
    (done,) = c.complete(max=1, min=1)
    s = done.seq
    rdaemon.kill()
    _reap_until(c, lambda q: q.is_gone)
    with pytest.raises(kvmm.KvmmDaemonGone):
        c.complete(max=8, min=0)
    rdaemon.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            c.complete(max=8, min=0)
        except kvmm.KvmmDaemonGone:
            assert time.monotonic() < deadline
            time.sleep(0.02)
            continue
        except kvmm.KvmmReattached:
            break
        raise AssertionError("kvmm_complete must reattach and raise KvmmReattached")
    assert c.lost_seqs() == [s]
    c.submit([kvmm.Sqe(kvmm.Op.SEQ_CREATE, user_data=2)])
    (done,) = c.complete(max=1, min=1)
    assert done.res == 0
    c.close()


# ---- the cause of a failed reattach ---------------------------------------------------------

def test_reattach_cause(rdaemon, fmt):
    c = kvmm.attach(rdaemon.sock, NS_A, fmt)
    rdaemon.kill()
    os.unlink(rdaemon.sock)  # no socket at all: ENOENT, try after try
    with pytest.raises(kvmm.KvmmError) as e:
        c.reattach(timeout=0.2)
    assert e.value.errno == errno.ETIMEDOUT
    assert e.value.cause_errno == errno.ENOENT
    assert rdaemon.sock in str(e.value) and "cannot connect" in e.value.cause
    err, msg = c.conn_error()
    assert err == errno.ENOENT and rdaemon.sock in msg
    rdaemon.start()
    assert c.reattach(timeout=10) == []
    assert c.conn_error() == (0, "")
    c.close()
