# SPDX-License-Identifier: MIT
"""A request's flow in one call each: seq_prompt (create + lookup + append the misses + block
table) and seq_seal_free (seal + free), synchronous and in a batch, against a real kvmmd."""
from __future__ import annotations

import errno

import numpy as np
import pytest

import kvmm
from kvmm import KvmmError
from kvmm.ring import Op, Sqe
from conftest import NS_A_FRAMES


def prompt(base, n):
    return [(base * 7919 + i * 31) % 50000 for i in range(n)]


def test_prompt_then_seal_free_then_hit(client):
    tpp = client.tokens_per_page
    toks = prompt(1, 3 * tpp + 5)
    s, hit, row = client.seq_prompt(toks, max_blocks=8)
    assert hit == 0
    assert str(row.dtype) == "torch.int32" and tuple(row.shape) == (1, 8)
    assert all(row[0, b] >= 0 for b in range(4)) and row[0, 4] == kvmm.BLOCK_NONE
    client.seq_seal_free(s)
    with pytest.raises(KvmmError) as e:
        client.seq_free(s)
    assert e.value.errno == errno.ENOENT
    out = np.zeros((1, 8), dtype=np.int32)
    s2, hit2, same = client.seq_prompt(toks, priority=-2, out=out)
    assert same is out and hit2 == 3 * tpp
    assert list(out[0, :3]) == [int(x) for x in row[0, :3]]
    # no table asked for
    s3, hit3, none = client.seq_prompt(toks)
    assert none is None and hit3 == 3 * tpp
    client.seq_free(s3)
    client.seq_seal_free(s2)


def test_seal_free_that_fails_frees_nothing(client):
    tpp = client.tokens_per_page
    s, _, _ = client.seq_prompt(prompt(2, 2 * tpp))
    with pytest.raises(KvmmError) as e:
        client.seq_seal_free(s, block=5, nr_blocks=1)
    assert e.value.errno == errno.EINVAL
    client.seq_seal_free(s)  # still there
    with pytest.raises(KvmmError) as e:
        client.seq_seal_free(s)
    assert e.value.errno == errno.ENOENT


def test_prompt_errors_leave_nothing(client):
    tpp = client.tokens_per_page
    with pytest.raises(KvmmError) as e:
        client.seq_prompt(prompt(3, (NS_A_FRAMES + 1) * tpp))
    assert e.value.errno in (errno.E2BIG,)
    # a row too short: E2BIG, the sequence exists and is named in the error
    with pytest.raises(KvmmError) as e:
        client.seq_prompt(prompt(4, 3 * tpp), max_blocks=2)
    assert e.value.errno == errno.E2BIG and e.value.seq
    client.seq_free(e.value.seq)
    with pytest.raises(TypeError):
        client.seq_prompt(prompt(5, 4), out=np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(ValueError):
        client.seq_prompt(prompt(5, 4), priority=1 << 40)


def test_batch_of_prompts_and_ends(client):
    tpp = client.tokens_per_page
    for rnd in range(2):
        toks = [prompt(10 + i, 2 * tpp + 1) for i in range(4)]
        client.submit([Sqe(Op.SEQ_PROMPT, data=t, arg=1, user_data=i)
                       for i, t in enumerate(toks)])
        got = {c.user_data: c.check() for c in client.complete(max=8, min=4)}
        assert sorted(got) == [0, 1, 2, 3]
        for c in got.values():
            assert c.nr_blocks == 3 and c.nr_tokens == (2 * tpp if rnd else 0)
        client.submit([Sqe(Op.SEQ_SEAL_FREE, seq=got[i].seq, user_data=10 + i)
                       for i in range(4)] +
                      [Sqe(Op.SEQ_SEAL_FREE, seq=987654321, user_data=99)])
        ends = {c.user_data: c for c in client.complete(max=8, min=5)}
        assert all(ends[10 + i].res == 0 for i in range(4))
        assert ends[99].res == -errno.ENOENT
