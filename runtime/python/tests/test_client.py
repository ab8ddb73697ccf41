# SPDX-License-Identifier: MIT
"""Attach, sequences, the prefix cache, batches and the magazine against a real kvmmd."""
from __future__ import annotations

import errno
import os

import pytest

import kvmm
from conftest import NS_A, NS_B, NS_A_FRAMES, PAGE_SIZE


def test_attach_reports_the_pool(client, fmt):
    assert client.page_size == PAGE_SIZE
    assert client.nr_frames == NS_A_FRAMES
    # 2 layers * K,V * 2 heads * 64 dims * 2 bytes
    assert client.bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert client.tokens_per_page == PAGE_SIZE // client.bytes_per_token
    assert client.layout.tokens_per_page == client.tokens_per_page
    assert client.backend == "host"
    assert client.nr_devices == 1 and client.device_index == 0
    assert client.fmt == fmt
    assert client.frame_addr(1) == client.frame_addr(0) + PAGE_SIZE


def test_context_manager_detaches(daemon, fmt):
    with kvmm.attach(daemon.sock, NS_A, fmt) as c:
        assert not c.closed
        c.seq_create()
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.seq_create()
    c.close()  # twice is fine


def test_sequence_lifecycle(client):
    tpp = client.tokens_per_page
    s = client.seq_create(priority=3)
    assert client.seq_append(s, list(range(tpp + 1))) == tpp + 1
    assert client.seq_append(s, [7, 8]) == tpp + 3
    child = client.seq_fork(s)
    half = client.seq_fork(s, tpp)
    assert len({s, child, half}) == 3
    table = client.block_table([s, child, half], 4)
    assert table.dtype.is_floating_point is False and str(table.dtype) == "torch.int32"
    # the full first page is shared by all three, the partial second is copied on write
    assert table[0, 0] == table[1, 0] == table[2, 0]
    assert table[0, 1] >= 0 and table[2, 1] == kvmm.BLOCK_NONE
    client.seq_truncate(s, 1)
    assert client.block_table([s], 4)[0, 1] == kvmm.BLOCK_NONE
    for q in (s, child, half):
        client.seq_free(q)


def test_prefix_shared_between_handles(daemon, fmt, client):
    tpp = client.tokens_per_page
    prompt = [1000 + i for i in range(3 * tpp + 5)]
    a = client.seq_create()
    assert client.prefix_lookup(a, prompt) == 0
    client.seq_append(a, prompt)
    client.seal(a)
    with kvmm.attach(daemon.sock, NS_A, fmt) as other:
        b = other.seq_create()
        hit = other.prefix_lookup(b, prompt)
        assert hit == 3 * tpp
        assert other.seq_append(b, prompt[hit:]) == len(prompt)
        ta = client.block_table([a], 8)
        tb = other.block_table([b], 8)
        assert ta[0, :3].tolist() == tb[0, :3].tolist()
        assert ta[0, 3] != tb[0, 3]
    client.seq_free(a)


def test_pin_unpin_prefetch_block_table_numpy(client):
    np = pytest.importorskip("numpy")
    tpp = client.tokens_per_page
    seqs = [client.seq_create() for _ in range(3)]
    for i, s in enumerate(seqs):
        client.seq_append(s, range((i + 1) * tpp))
    assert client.pin(seqs) == 1 + 2 + 3
    out = np.full((3, 5), 99, dtype=np.int32)
    assert client.block_table(np.array(seqs, dtype=np.uint64), out=out) is out
    assert [(row >= 0).sum() for row in out] == [1, 2, 3]
    assert (out[0, 1:] == kvmm.BLOCK_NONE).all()
    assert client.prefetch(seqs) == 0  # nothing is swapped out
    assert client.unpin(seqs) == 6
    t = client.block_table(seqs, 5, like="numpy")
    assert isinstance(t, np.ndarray) and (t == out).all()
    for s in seqs:
        client.seq_free(s)


def test_block_table_into_torch_out(client):
    torch = pytest.importorskip("torch")
    s = client.seq_create()
    client.seq_append(s, range(client.tokens_per_page * 2))
    out = torch.full((1, 3), 7, dtype=torch.int32)
    client.block_table(torch.tensor([s]), out=out)
    assert out[0, 2] == kvmm.BLOCK_NONE and out[0, 0] >= 0
    client.seq_free(s)


def test_block_table_row_too_short(client):
    s = client.seq_create()
    client.seq_append(s, range(client.tokens_per_page * 3))
    with pytest.raises(kvmm.KvmmError) as e:
        client.block_table([s], 2)
    assert e.value.errno == errno.E2BIG
    client.seq_free(s)


def test_magazine(client):
    assert client.has_rings
    assert client.mag_size > 0
    frames = client.mag_alloc(3)
    assert 1 <= len(frames) <= 3
    assert all(0 <= f < client.nr_frames for f in frames)
    s = client.seq_create()
    tpp = client.tokens_per_page
    assert client.seq_append_frames(s, range(tpp * len(frames)), frames) == tpp * len(frames)
    assert client.block_table([s], len(frames)).tolist() == [frames]
    more = client.mag_alloc(2)
    client.mag_free(more)
    client.seq_free(s)


def test_other_namespace_has_its_own_pool(daemon, fmt):
    with kvmm.attach(daemon.sock, NS_B, fmt) as c:
        assert c.nr_frames == 64


def test_fork_in_child_process_refuses_the_handle(client):
    pid = os.fork()
    if pid == 0:
        try:
            client.seq_create()
        except ValueError:
            os._exit(0)
        except BaseException:
            os._exit(2)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    client.seq_create()  # the parent's handle is unharmed


def test_close_while_another_thread_calls(daemon, fmt):
    import threading
    import time

    c = kvmm.attach(daemon.sock, NS_A, fmt)
    s = c.seq_create()
    c.seq_append(s, range(40))
    errors: list = []
    calls = [0]

    def worker():
        try:
            while True:
                c.pin([s])
                c.block_table([s], 4)
                c.unpin([s])
                calls[0] += 1
        except ValueError as e:  # closed: the one way out
            errors.append(e)
        except BaseException as e:  # anything else is a failure
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    while calls[0] < 20 and t.is_alive():
        time.sleep(0.001)
    c.close()
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ValueError), errors


def _cached(c, tokens, salt=None) -> int:
    """Tokens of a new sequence that a lookup (with salt) maps; the sequence is freed."""
    s = c.seq_create()
    try:
        return c.prefix_lookup(s, tokens, salt=salt)
    finally:
        c.seq_free(s)


def _cache(c, tokens, salt=None) -> None:
    s = c.seq_create()
    c.seq_append(s, tokens)
    c.seal(s, salt=salt)
    c.seq_free(s)


def test_model_identity_and_salt(daemon, fmt):
    """Two models of one shape in one namespace never share pages, the same model does; a
    salt separates requests of one model (kvmm_attach_ex's model, kvmm_*_salt)."""
    with kvmm.attach(daemon.sock, NS_A, fmt, model="qwen2-0.5b@r1") as a, \
            kvmm.attach(daemon.sock, NS_A, fmt, model=b"qwen2-0.5b@r1") as a2, \
            kvmm.attach(daemon.sock, NS_A, fmt, model="qwen2-0.5b@r2") as b:
        tpp = a.tokens_per_page
        tokens = list(range(31000, 31000 + 2 * tpp + 1))
        _cache(a, tokens)
        assert _cached(a2, tokens) == 2 * tpp  # str and bytes: the same identity
        assert _cached(b, tokens) == 0
        _cache(a, tokens, salt="user-1")
        assert _cached(a2, tokens, salt=b"user-1") == 2 * tpp
        assert _cached(a2, tokens, salt="user-2") == 0
        assert _cached(b, tokens, salt="user-1") == 0
        # the salt is the sequence's once it holds sealed pages
        s = a.seq_create()
        assert a.prefix_lookup(s, tokens, salt="user-1") == 2 * tpp
        with pytest.raises(kvmm.KvmmError) as e:
            a.seal(s, salt="user-2")
        assert e.value.errno == errno.EBUSY
        a.seq_free(s)
        with pytest.raises(ValueError):
            a.prefix_lookup(a.seq_create(), tokens, salt="x" * 257)
        with pytest.raises(TypeError):
            a.seal(1, salt=3)
    with pytest.raises(ValueError):
        kvmm.attach(daemon.sock, NS_A, fmt, model="")
    with pytest.raises(ValueError):
        kvmm.attach(daemon.sock, NS_A, fmt, model=b"m" * 257)
