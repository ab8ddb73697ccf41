# SPDX-License-Identifier: MIT
"""The asynchronous rings: a batch of operations submitted at once, completions collected."""
from __future__ import annotations

import errno

import pytest

import kvmm
from kvmm import Op, Sqe


def test_step_as_one_batch(client):
    tpp = client.tokens_per_page
    n = client.submit([Sqe(Op.SEQ_CREATE, arg=0, user_data=100 + i) for i in range(4)])
    assert n == 4 and client.inflight == 4
    cqes = client.complete(max=8, min=4)
    assert sorted(c.user_data for c in cqes) == [100, 101, 102, 103]
    assert all(c.res == 0 and not c.is_event for c in cqes)
    seqs = [c.seq for c in cqes]
    client.submit([Sqe(Op.SEQ_APPEND, seq=s, data=list(range(tpp + 1)), user_data=i)
                   for i, s in enumerate(seqs)] +
                  [Sqe(Op.PIN, data=seqs, user_data=50)])
    got = {c.user_data: c for c in client.complete(max=16, min=5)}
    assert all(got[i].nr_tokens == tpp + 1 for i in range(4))
    assert got[50].check().nr_frames == 8
    client.submit([Sqe(Op.UNPIN, data=seqs, user_data=51), Sqe(Op.NOP, user_data=52)] +
                  [Sqe(Op.SEQ_FREE, seq=s, user_data=60 + i) for i, s in enumerate(seqs)])
    got = {c.user_data: c for c in client.complete(max=16, min=6)}
    assert got[51].nr_frames == 8 and got[52].res == 0
    assert client.inflight == 0


def test_range_pins_in_a_batch(client):
    """PIN_RANGE and UNPIN_RANGE entries (kvmm_pin_range, kvmm_unpin_range): a chunked step
    ends one chunk's pin and takes the next one's in one submission; entries run in order."""
    tpp = client.tokens_per_page
    s = client.seq_create()
    client.seq_append(s, list(range(3, 3 + 4 * tpp)))
    client.submit([Sqe(Op.PIN_RANGE, seq=s, arg=0, nr=2, user_data=1),
                   Sqe(Op.PIN_RANGE, seq=s, arg=3, nr=2, user_data=2),  # past the end
                   Sqe(Op.UNPIN_RANGE, seq=s, arg=2, nr=2, user_data=3)])  # never pinned
    got = {c.user_data: c for c in client.complete(max=8, min=3)}
    assert got[1].check().nr_frames == 2
    assert got[2].res == -errno.EINVAL and got[3].res == -errno.EINVAL
    client.submit([Sqe(Op.UNPIN_RANGE, seq=s, arg=0, nr=2, user_data=4),
                   Sqe(Op.PIN_RANGE, seq=s, arg=2, nr=2, user_data=5)])
    got = {c.user_data: c for c in client.complete(max=8, min=2)}
    assert got[4].check().nr_frames == 2 and got[5].check().nr_frames == 2
    with pytest.raises(kvmm.KvmmError) as ei:
        client.unpin_range(s, 0, 2)  # the batch ended that pin
    assert ei.value.errno == errno.EINVAL
    assert client.unpin_range(s, 2, 2) == 2
    client.seq_free(s)


def test_failed_operation_completes_with_errno(client):
    client.submit(Sqe(Op.SEQ_FREE, seq=123456789, user_data=9))
    (c,) = client.complete(max=1, min=1)
    assert c.res == -errno.ENOENT
    err = c.error()
    assert isinstance(err, kvmm.KvmmError) and err.errno == errno.ENOENT
    with pytest.raises(kvmm.KvmmError):
        c.check()


def test_complete_without_waiting(client):
    assert client.complete(max=4, min=0) == []


def test_bad_sqes(client):
    with pytest.raises(TypeError):
        client.submit([{"op": 0}])
    with pytest.raises(ValueError):
        client.submit([Sqe(Op.PIN)])  # PIN needs data
    with pytest.raises(ValueError):
        client.submit([Sqe(99)])
    with pytest.raises(ValueError):
        client.submit([Sqe(Op.SEQ_FREE, seq=-1)])
    with pytest.raises(ValueError):
        client.submit([Sqe(Op.SEQ_FREE, frames=[1])])
    with pytest.raises(ValueError):
        client.complete(max=0)
    with pytest.raises(ValueError):
        client.complete(max=1, min=2)
    assert client.submit([]) == 0


def test_preempted_cqe_maps_to_preempted_error():
    c = kvmm.Cqe(0, -kvmm.KVMM_EPREEMPTED, kvmm.CQE_F_EVENT, 5, 0, 0, 3)
    assert c.is_event and c.preempted
    assert isinstance(c.error(), kvmm.PreemptedError)


def test_preemption_event_and_error(daemon, fmt):
    import time

    from conftest import NS_B
    with kvmm.attach(daemon.sock, NS_B, fmt) as c:
        tpp = c.tokens_per_page
        victim = c.seq_create(priority=-10)
        c.seq_append(victim, range(30 * tpp))
        hog = c.seq_create(priority=0)
        with pytest.raises(kvmm.OutOfMemoryError):
            for _ in range(10):
                c.seq_append(hog, range(16 * tpp))
        events = []
        for _ in range(200):
            events += [e for e in c.complete(max=4) if e.is_event]
            if events:
                break
            time.sleep(0.01)
        assert [(e.seq, e.preempted) for e in events] == [(victim, True)]
        assert isinstance(events[0].error(), kvmm.PreemptedError)
        with pytest.raises(kvmm.PreemptedError) as e:
            c.seq_append(victim, [1])
        assert e.value.errno == kvmm.KVMM_EPREEMPTED
        c.seq_free(victim)
        c.seq_free(hog)
