# SPDX-License-Identifier: MIT
"""Every error path: a clear exception, never a crash."""
from __future__ import annotations

import errno
import os

import pytest

import kvmm
from conftest import NS_A, Daemon


def test_no_daemon(tmp_path, fmt):
    with pytest.raises(kvmm.NoDaemonError) as e:
        kvmm.attach(str(tmp_path / "nothing.sock"), NS_A, fmt)
    assert e.value.errno == errno.ENOENT
    assert isinstance(e.value, OSError) and isinstance(e.value, kvmm.KvmmError)
    assert "kvmm_attach" in str(e.value)


def test_unknown_namespace_is_not_no_daemon(daemon, fmt):
    with pytest.raises(kvmm.KvmmError) as e:
        kvmm.attach(daemon.sock, "nosuch", fmt)
    assert e.value.errno == errno.ENOENT
    assert not isinstance(e.value, kvmm.NoDaemonError)
    assert "nosuch" in str(e.value)


@pytest.mark.parametrize("args, exc", [
    ((None, NS_A, None), TypeError),
    ((None, NS_A, {"layers": 1}), TypeError),
    ((None, 5, kvmm.Format(1, 1, 8)), TypeError),
    ((None, "", kvmm.Format(1, 1, 8)), ValueError),
    ((None, "a\0b", kvmm.Format(1, 1, 8)), ValueError),
    ((3.5, NS_A, kvmm.Format(1, 1, 8)), TypeError),
])
def test_attach_bad_arguments(args, exc):
    with pytest.raises(exc):
        kvmm.attach(*args)


@pytest.mark.parametrize("kw, exc", [
    (dict(layers=-1, kv_heads=1, head_dim=8), ValueError),
    (dict(layers=0, kv_heads=1, head_dim=8), ValueError),
    (dict(layers=1.5, kv_heads=1, head_dim=8), TypeError),
    (dict(layers=1, kv_heads=1, head_dim=8, dtype="fp8"), ValueError),
    (dict(layers=1, kv_heads=1, head_dim=8, dtype=object()), TypeError),
    (dict(layers=1, kv_heads=1, head_dim=8, dtype="int8"), ValueError),
    (dict(layers=1, kv_heads=1, head_dim=8, dtype="int8", quant_group=3), ValueError),
    (dict(layers=1, kv_heads=1, head_dim=8, dtype="fp16", quant_group=8), ValueError),
    (dict(layers=1, kv_heads=2 ** 32, head_dim=8), ValueError),
])
def test_bad_formats(kw, exc):
    with pytest.raises(exc):
        kvmm.Format(**kw)


def test_format_the_daemon_refuses(daemon):
    # a token larger than a page: valid as a struct, refused by the daemon
    with pytest.raises(kvmm.KvmmError) as e:
        kvmm.attach(daemon.sock, NS_A, kvmm.Format(64, 64, 128, "fp32"))
    assert e.value.errno == errno.EINVAL


def test_freed_sequence(client):
    s = client.seq_create()
    client.seq_free(s)
    for call in (lambda: client.seq_free(s), lambda: client.seq_append(s, [1]),
                 lambda: client.seq_fork(s), lambda: client.seal(s),
                 lambda: client.prefix_lookup(s, [1, 2]), lambda: client.pin([s]),
                 lambda: client.unpin([s]), lambda: client.block_table([s], 4)):
        with pytest.raises(kvmm.KvmmError) as e:
            call()
        assert e.value.errno == errno.ENOENT


def test_negative_and_out_of_range_values(client):
    s = client.seq_create()
    bad = [
        lambda: client.seq_truncate(s, -1),
        lambda: client.seq_fork(s, -3),
        lambda: client.seq_free(-1),
        lambda: client.seq_free(2 ** 64),
        lambda: client.seq_create(priority=2 ** 31),
        lambda: client.seq_append(s, [-1]),
        lambda: client.seq_append(s, [2 ** 32]),
        lambda: client.prefix_lookup(s, [1, -5]),
        lambda: client.pin([-1]),
        lambda: client.mag_alloc(-1),
        lambda: client.mag_alloc(0),
        lambda: client.block_table([s], -1),
        lambda: client.block_table([s], 0),
        lambda: client.seal(s, block=-1),
        lambda: client.frame_addr(-1),
    ]
    for call in bad:
        with pytest.raises(ValueError):
            call()
    client.seq_free(s)


def test_wrong_types(client):
    np = pytest.importorskip("numpy")
    s = client.seq_create()
    bad = [
        lambda: client.seq_append(s, "abc"),
        lambda: client.seq_append(s, [1.5]),
        lambda: client.seq_append(s, np.array([1.0, 2.0])),
        lambda: client.seq_append(s, 5),
        lambda: client.seq_create("x"),
        lambda: client.seq_free(None),
        lambda: client.seq_free(True),
        lambda: client.seq_free(1.0),
        lambda: client.pin(5),
        lambda: client.pin(["a"]),
        lambda: client.block_table([s]),
        lambda: client.block_table([s], out=[[0, 0]]),
        lambda: client.block_table([s], out=np.zeros((1, 4), dtype=np.int64)),
    ]
    for call in bad:
        with pytest.raises(TypeError):
            call()
    with pytest.raises(ValueError):
        client.seq_append(s, np.zeros((2, 2), dtype=np.uint32))  # not 1-D
    with pytest.raises(ValueError):
        client.block_table([s], out=np.zeros((2, 4), dtype=np.int32))  # rows != seqs
    with pytest.raises(ValueError):
        client.block_table([s], out=np.zeros((4, 2), dtype=np.int32).T)  # not contiguous
    with pytest.raises(ValueError):
        client.block_table([s], 4, like="list")
    client.seq_free(s)


def test_wrong_tensors(client):
    torch = pytest.importorskip("torch")
    s = client.seq_create()
    with pytest.raises(TypeError):
        client.block_table([s], out=torch.zeros((1, 4), dtype=torch.float32))
    with pytest.raises(ValueError):
        client.block_table([s], out=torch.zeros((1, 8), dtype=torch.int32)[:, ::2])
    with pytest.raises(ValueError):
        client.block_table([s], 3, out=torch.zeros((1, 4), dtype=torch.int32))
    with pytest.raises(TypeError):
        client.pin(torch.tensor([1.0]))
    client.seq_free(s)


def test_closed_handle(daemon, fmt):
    c = kvmm.attach(daemon.sock, NS_A, fmt)
    s = c.seq_create()
    c.close()
    calls = [lambda: c.seq_create(), lambda: c.seq_append(s, [1]), lambda: c.seq_free(s),
             lambda: c.seq_fork(s), lambda: c.seq_truncate(s, 0), lambda: c.seal(s),
             lambda: c.prefix_lookup(s, [1]), lambda: c.pin([s]), lambda: c.unpin([s]),
             lambda: c.prefetch([s]), lambda: c.block_table([s], 2), lambda: c.mag_alloc(1),
             lambda: c.mag_free([1]), lambda: c.mag_avail(), lambda: c.frame_addr(0),
             lambda: c.views(), lambda: c.submit([kvmm.Sqe(kvmm.Op.NOP)]),
             lambda: c.complete(), lambda: c.inflight, lambda: c.has_rings]
    for call in calls:
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(ValueError):
        with c:
            pass


def test_out_of_memory(client):
    s = client.seq_create()
    # more new blocks than the namespace could ever hold: refused at once (-E2BIG)
    with pytest.raises(kvmm.KvmmError) as e:
        client.seq_append(s, range(client.tokens_per_page * (client.nr_frames + 1)))
    assert e.value.errno == errno.E2BIG
    # the whole pool, then one page more: out of memory
    client.seq_append(s, range(client.tokens_per_page * client.nr_frames))
    s2 = client.seq_create()
    with pytest.raises(kvmm.OutOfMemoryError) as e:
        client.seq_append(s2, range(client.tokens_per_page))
    assert e.value.errno == errno.ENOMEM
    client.seq_free(s2)
    client.seq_free(s)


def test_frame_addresses(client):
    with pytest.raises(kvmm.KvmmError) as e:
        client.frame_addr(client.nr_frames)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(kvmm.KvmmError) as e:
        client.frame_devptr(0)
    assert e.value.errno == errno.EOPNOTSUPP


def test_daemon_gone(fmt):
    d = Daemon()
    c = kvmm.attach(d.sock, NS_A, fmt)
    s = c.seq_create()
    assert d.stop() == 0
    with pytest.raises(kvmm.NoDaemonError) as e:
        for _ in range(3):  # the first send may still succeed into the dead socket
            c.seq_append(s, [1, 2, 3])
    assert e.value.errno in (errno.ENOTCONN, errno.EPIPE, errno.ECONNRESET)
    c.close()


def test_strerror_texts():
    e = kvmm.errors.make_error(-kvmm.KVMM_EPREEMPTED, "x")
    assert isinstance(e, kvmm.PreemptedError) and "preempt" in e.strerror
    assert isinstance(kvmm.errors.make_error(-kvmm.KVMM_ELOST), kvmm.PageLostError)
    assert isinstance(kvmm.errors.make_error(-errno.ENOMEM), kvmm.OutOfMemoryError)


def test_missing_library_is_a_clear_import_error():
    import subprocess
    import sys

    from conftest import PKG
    env = dict(os.environ, KVMM_LIB="/nonexistent/libkvmm.so", PYTHONPATH=PKG,
               PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", "import kvmm"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "ImportError: kvmm: cannot load libkvmm (set KVMM_LIB" in r.stderr
    assert "/nonexistent/libkvmm.so: no such file" in r.stderr
