# SPDX-License-Identifier: MIT
"""The admin calls against a real kvmmd (the tests run as root, or in the admin group)."""
from __future__ import annotations

import errno
import json
import os
import signal
import time

import pytest

import kvmm
from kvmm import admin
from conftest import NS_A, NS_A_FRAMES, PAGE_SIZE, stop_process

pytestmark = pytest.mark.skipif(not admin.HAVE_ADMIN, reason="this libkvmm has no admin calls")


@pytest.fixture
def adm(daemon):
    try:
        a = admin.open(daemon.sock)
    except kvmm.KvmmError as e:
        if e.errno == errno.EACCES:
            pytest.skip("admin verbs need root or kvmmd's admin group")
        raise
    yield a
    a.close()


def test_hello_and_reads(adm, client):
    assert adm.hello["page_size"] == PAGE_SIZE
    assert adm.hello["backend_name"] == "host"
    s = client.seq_create()
    client.seq_append(s, range(3 * client.tokens_per_page))
    mem = adm.meminfo(ns=NS_A)
    assert admin.value(mem, "Total") == NS_A_FRAMES
    assert admin.value(mem, "Nothing") is None
    with pytest.raises(ValueError):
        admin.value(mem, "Namespace")  # a name, not a number
    (alpha,) = [r for r in admin.records(adm.namespaces(), "Namespace")
                if r.split()[1] == NS_A]
    assert admin.field(alpha, "frames") == str(NS_A_FRAMES)
    assert admin.field(alpha, "nosuch") is None
    seqs = [r for r in admin.records(adm.seqs(), "Seq") if r.split()[1] == str(s)]
    assert len(seqs) == 1 and admin.field(seqs[0], "blocks") == "3"
    client_id = admin.field(seqs[0], "client")
    assert any(r.split()[1] == client_id for r in admin.records(adm.clients(), "Client"))
    st = json.loads(adm.status(json=True))
    assert st["page_size"] == PAGE_SIZE
    assert adm.pagetable(s, int(client_id))
    client.seq_free(s)


def test_structured_reads(adm, client):
    if not admin._lib.has("kvmm_admin_namespaces"):
        pytest.skip("this libkvmm has no kvmm_admin_namespaces")
    nss = {n["name"]: n for n in adm.namespace_list()}
    assert nss[NS_A]["frames"] == NS_A_FRAMES and nss[NS_A]["clients"] >= 1
    assert [n["name"] for n in adm.namespace_list(NS_A)] == [NS_A]
    with pytest.raises(kvmm.KvmmError) as e:
        adm.namespace_list("nosuch")
    assert e.value.errno == errno.ENOENT
    assert adm.swap_tiers() == []  # this daemon has no swap
    adm.swapon(1, 64 * PAGE_SIZE, ns=NS_A)
    (tier,) = adm.swap_tiers(NS_A)
    assert tier["tier"] == 1 and tier["ns"] == NS_A and tier["slots"] == 64
    adm.swapoff(1, ns=NS_A)
    assert adm.swap_tiers(NS_A) == []


def test_writes(adm, client):
    adm.limit(NS_A, max_frames=NS_A_FRAMES - 10)
    ns = [r for r in admin.records(adm.namespaces(), "Namespace") if r.split()[1] == NS_A]
    assert admin.field(ns[0], "limit") == str(NS_A_FRAMES - 10)
    adm.limit(NS_A, max_frames=NS_A_FRAMES)
    assert adm.drop_caches() >= 0
    assert adm.reclaim(4, noswap=True) >= 0


def _ns_field(adm, ns, key):
    (rec,) = [r for r in admin.records(adm.namespaces(), "Namespace") if r.split()[1] == ns]
    return admin.field(rec, key)


def test_live_namespaces(adm, client):
    if not admin._lib.has("kvmm_admin_ns"):
        pytest.skip("this libkvmm has no kvmm_admin_ns")
    # no limit is "-", never the pool's size (issue 26)
    assert _ns_field(adm, NS_A, "limit") == "-"
    adm.ns_set(NS_A, max_frames=NS_A_FRAMES - 10, low_frames=4, priority=3)
    assert _ns_field(adm, NS_A, "limit") == str(NS_A_FRAMES - 10)
    assert _ns_field(adm, NS_A, "low") == "4"
    assert _ns_field(adm, NS_A, "priority") == "3"
    adm.ns_set(NS_A, max_frames=admin.LIMIT_NONE, low_frames=0, priority=0)
    assert _ns_field(adm, NS_A, "limit") == "-"
    with pytest.raises(kvmm.KvmmError) as e:
        adm.ns_set(NS_A, min_frames=NS_A_FRAMES + 1)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(kvmm.KvmmError) as e:
        adm.ns_create("pyns", frames=1 << 30)
    assert e.value.errno in (errno.ENOSPC, errno.EINVAL)
    with pytest.raises(kvmm.KvmmError) as e:
        adm.ns_create(NS_A, frames=1)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(kvmm.KvmmError) as e:
        adm.ns_delete(NS_A)  # the client fixture is attached
    assert e.value.errno == errno.EBUSY
    with pytest.raises(kvmm.KvmmError) as e:
        adm.ns_delete("nosuch")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(ValueError):
        adm.ns_create("pyns")
    with pytest.raises(ValueError):
        adm.ns_set(NS_A)
    with pytest.raises(ValueError):
        adm.ns_set(NS_A, priority=1001)


def test_trace(daemon, client):
    names = admin.trace_event_names()
    assert "alloc" in names and admin.trace_event("alloc") == names.index("alloc")
    with admin.open(daemon.sock) as t:
        t.trace_follow(events=["alloc"])
        s = client.seq_create()
        client.seq_append(s, range(client.tokens_per_page))
        text = t.trace_next(timeout_ms=5000)
        assert text and "alloc" in text
        client.seq_free(s)


def test_admin_errors(adm, tmp_path):
    with pytest.raises(kvmm.NoDaemonError):
        admin.open(str(tmp_path / "none.sock"))
    with pytest.raises(ValueError):
        adm.read("nosuch")
    with pytest.raises(ValueError):
        adm.limit(NS_A)
    with pytest.raises(ValueError):
        adm.limit("x" * 40, max_frames=1)
    with pytest.raises(ValueError):
        adm.reclaim(-1)
    with pytest.raises(TypeError):
        adm.read("status", ns=5)
    with pytest.raises(ValueError):
        adm.drop_caches(device=False)
    with pytest.raises(kvmm.KvmmError) as e:
        adm.limit("nosuch", max_frames=1)
    assert e.value.errno == errno.ENOENT
    with pytest.raises(kvmm.KvmmError) as e:
        admin.trace_event("nosuch")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(kvmm.KvmmError):
        adm.fault_inject("nosuch.point nth=1")
    adm.close()
    adm.close()
    with pytest.raises(ValueError, match="closed"):
        adm.status()


def test_stopped_daemon_deadline(daemon):
    """A stopped kvmmd: an admin call gives it up after the handle's deadline with ETIMEDOUT
    naming it, an open too (kvmm_admin_open_timeout); after SIGCONT the handle works."""
    a = admin.open(daemon.sock, timeout_ms=300)
    pid = daemon.proc.pid
    try:
        a.read("status")
        stop_process(pid)
        try:
            t0 = time.monotonic()
            with pytest.raises(kvmm.KvmmError) as ei:
                a.read("status")
            assert time.monotonic() - t0 < 3.3
            assert ei.value.errno == errno.ETIMEDOUT
            assert f"kvmmd (pid {pid})" in ei.value.strerror
            assert "stopped" in ei.value.strerror
            with pytest.raises(kvmm.KvmmError) as ei:
                admin.open(daemon.sock, timeout_ms=300)
            assert ei.value.errno == errno.ETIMEDOUT
            assert "stopped" in ei.value.strerror
        finally:
            os.kill(pid, signal.SIGCONT)
        text = ""
        for _ in range(20):  # a loaded machine may take a deadline to resume it
            try:
                text = a.read("status")
                break
            except kvmm.KvmmError as e:
                if e.errno != errno.ETIMEDOUT:
                    raise
        assert "Uptime" in text
    finally:
        a.close()
    with pytest.raises(ValueError):
        admin.open(daemon.sock, timeout_ms=1 << 40)
