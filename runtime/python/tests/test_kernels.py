# SPDX-License-Identifier: MIT
"""The kernels on views of the pool against the same attention in plain torch on contiguous
tensors, and every argument check."""
from __future__ import annotations

import errno
import math

import pytest

import kvmm
from kvmm import kernels
from conftest import NS_A, NS_B

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not kernels.available("cpu"),
                                reason="this libkvmm has no CPU kernels")

FORMATS = {
    "fp32": kvmm.Format(2, 2, 32, "fp32"),
    "fp16": kvmm.Format(2, 2, 64, "fp16"),
    "bf16": kvmm.Format(2, 2, 64, "bf16"),
    "int8": kvmm.Format(2, 2, 64, "int8", quant_group=32),
}
TOL = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-3, "int8": 1e-3}


class Batch:
    """Sequences of the given lengths with random K/V written by reshape_and_cache."""

    def __init__(self, c: kvmm.Client, lens: list[int], layer: int, seed: int) -> None:
        self.c, self.lens, self.layer = c, lens, layer
        f = c.fmt
        self.pool = c.views()
        self.tpp = c.tokens_per_page
        self.seqs = []
        for i, n in enumerate(lens):
            s = c.seq_create()
            c.seq_append(s, [i * 1000 + t for t in range(n)])
            self.seqs.append(s)
        self.max_blocks = max(-(-n // self.tpp) for n in lens) + 1
        self.table = c.block_table(self.seqs, self.max_blocks)
        g = torch.Generator().manual_seed(seed)
        self.k = [torch.randn((n, f.kv_heads, f.head_dim), generator=g) for n in lens]
        self.v = [torch.randn((n, f.kv_heads, f.head_dim), generator=g) for n in lens]
        slots = torch.cat([self.slots(i, 0, n) for i, n in enumerate(lens)])
        kernels.reshape_and_cache(self.pool, layer, torch.cat(self.k), torch.cat(self.v), slots)
        self.ctx = torch.tensor(lens, dtype=torch.int32)

    def slots(self, i: int, start: int, end: int) -> "torch.Tensor":
        t = torch.arange(start, end)
        return (self.table[i][t // self.tpp].long() * self.tpp + t % self.tpp)

    def stored(self, i: int, which: str) -> "torch.Tensor":
        """Sequence i's K or V as stored (rounded / quantized), read through the views and
        gathered by its block table: [len, kv_heads, head_dim] float32."""
        view = (self.pool.k if which == "k" else self.pool.v)[self.layer]
        t = torch.arange(self.lens[i])
        frames = self.table[i][t // self.tpp].long()
        x = view[frames, t % self.tpp].float()
        if self.pool.k_scales is not None:
            sc = (self.pool.k_scales if which == "k" else self.pool.v_scales)[self.layer]
            s = sc[frames, t % self.tpp]  # [len, heads, groups]
            x = x * s.repeat_interleave(self.c.fmt.quant_group, dim=-1)
        return x

    def free(self) -> None:
        for s in self.seqs:
            self.c.seq_free(s)


def attention(q, k, v, causal_from=None, scale=None):
    """Plain torch: q [nq, hq, d], k/v [n, hk, d]; query r sees keys < causal_from + r + 1."""
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1)
    v = v.repeat_interleave(hq // hk, dim=1)
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * scale
    if causal_from is not None:
        qi = torch.arange(q.shape[0])[:, None] + causal_from
        s = s.masked_fill(torch.arange(k.shape[0])[None, :] > qi, float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v.double()).float()


@pytest.fixture(params=list(FORMATS))
def fclient(request, daemon):
    c = kvmm.attach(daemon.sock, NS_B if request.param == "int8" else NS_A,
                    FORMATS[request.param])
    c.dtype_name = request.param
    yield c
    c.close()


def test_reshape_and_cache_writes_through_the_views(fclient):
    b = Batch(fclient, [3, fclient.tokens_per_page + 2], layer=1, seed=1)
    for i in range(2):
        for which, src in (("k", b.k[i]), ("v", b.v[i])):
            got = b.stored(i, which)
            if fclient.dtype_name == "int8":
                assert torch.allclose(got, src, atol=src.abs().max().item() / 127)
            else:
                dt = b.pool.k[0].dtype
                assert torch.equal(got, src.to(dt).float())
    b.free()


def test_decode_equals_torch(fclient):
    lens = [1, 5, fclient.tokens_per_page, 3 * fclient.tokens_per_page + 7]
    b = Batch(fclient, lens, layer=1, seed=2)
    hq = fclient.fmt.kv_heads * 2
    q = torch.randn((len(lens), hq, fclient.fmt.head_dim), generator=torch.Generator().manual_seed(3))
    out = kernels.paged_decode(b.pool, 1, q, b.table, b.ctx)
    for i in range(len(lens)):
        ref = attention(q[i:i + 1], b.stored(i, "k"), b.stored(i, "v"))
        assert torch.allclose(out[i:i + 1], ref, atol=TOL[fclient.dtype_name], rtol=1e-3), i
    # out= is filled in place, a scale is honoured
    out2 = torch.empty_like(q)
    assert kernels.paged_decode(b.pool, 1, q, b.table, b.ctx, out=out2, scale=0.5) is out2
    ref = attention(q[3:4], b.stored(3, "k"), b.stored(3, "v"), scale=0.5)
    assert torch.allclose(out2[3:4], ref, atol=TOL[fclient.dtype_name], rtol=1e-3)
    b.free()


def test_prefill_equals_torch(fclient):
    tpp = fclient.tokens_per_page
    lens = [4, tpp + 3, 2 * tpp]
    qlens = [4, 5, tpp]
    b = Batch(fclient, lens, layer=0, seed=4)
    hq = fclient.fmt.kv_heads * 2
    q = torch.randn((sum(qlens), hq, fclient.fmt.head_dim),
                    generator=torch.Generator().manual_seed(5))
    out = kernels.paged_prefill(b.pool, 0, q, b.table, b.ctx,
                                torch.tensor(qlens, dtype=torch.int32))
    row = 0
    for i, (n, m) in enumerate(zip(lens, qlens)):
        ref = attention(q[row:row + m], b.stored(i, "k"), b.stored(i, "v"), causal_from=n - m)
        assert torch.allclose(out[row:row + m], ref, atol=TOL[fclient.dtype_name], rtol=1e-3), i
        row += m
    b.free()


def test_copy_pages(fclient):
    tpp = fclient.tokens_per_page
    b = Batch(fclient, [2 * tpp], layer=0, seed=6)
    dst_seq = fclient.seq_create()
    fclient.seq_append(dst_seq, range(2 * tpp))
    dst = fclient.block_table([dst_seq], 2)[0]
    src = b.table[0][:2].clone()
    kernels.copy_pages(b.pool, dst, src)
    p = b.pool
    for layer in range(fclient.fmt.layers):
        for view in (p.k, p.v) + ((p.k_scales, p.v_scales) if p.k_scales else ()):
            assert torch.equal(view[layer][dst.long()], view[layer][src.long()])
    # a partial copy moves only the first rows
    for view in (p.k[0], p.v[1]):
        view[dst[0]].zero_()
    kernels.copy_pages(b.pool, dst[:1].clone(), src[:1], ntokens=3)
    assert torch.equal(p.k[0][dst[0], :3], p.k[0][src[0], :3])
    assert not p.k[0][dst[0], 3:].any()
    fclient.seq_free(dst_seq)
    b.free()


def test_argument_checks(client):
    pool = client.views()
    f = client.fmt
    s = client.seq_create()
    client.seq_append(s, range(5))
    table = client.block_table([s], 2)
    ctx = torch.tensor([5], dtype=torch.int32)
    q = torch.zeros((1, 4, f.head_dim))
    kv = torch.zeros((1, f.kv_heads, f.head_dim))
    slot = torch.tensor([0], dtype=torch.int64)
    d = kernels.paged_decode
    type_errors = [
        lambda: d(client, 0, q, table, ctx),
        lambda: d(client.views("numpy"), 0, q, table, ctx),
        lambda: d(pool, 0, q.half(), table, ctx),
        lambda: d(pool, 0, q.numpy(), table, ctx),
        lambda: d(pool, 0, q, table.long(), ctx),
        lambda: d(pool, 0, q, table, ctx.long()),
        lambda: d(pool, 0, q, table, ctx, out=q.double()),
        lambda: d(pool, "0", q, table, ctx),
        lambda: kernels.reshape_and_cache(pool, 0, kv, kv, slot.int()),
        lambda: kernels.reshape_and_cache(pool, 0, kv.half(), kv, slot),
        lambda: kernels.copy_pages(pool, [1], [2]),
    ]
    for call in type_errors:
        with pytest.raises(TypeError):
            call()
    value_errors = [
        lambda: d(pool, 2, q, table, ctx),
        lambda: d(pool, -1, q, table, ctx),
        lambda: d(pool, 0, q[0], table, ctx),
        lambda: d(pool, 0, torch.zeros((1, 3, f.head_dim)), table, ctx),  # heads % kv_heads
        lambda: d(pool, 0, torch.zeros((1, 4, 8)), table, ctx),  # head_dim
        lambda: d(pool, 0, torch.zeros((2, 4, f.head_dim)), table, ctx),  # rows != seqs
        lambda: d(pool, 0, torch.zeros((1, 8, f.head_dim))[:, ::2], table, ctx),
        lambda: d(pool, 0, q, table, torch.tensor([5, 5], dtype=torch.int32)),
        lambda: d(pool, 0, q, table, ctx, out=torch.zeros((1, 2, f.head_dim))),
        lambda: d(pool, 0, q, table, ctx, scale=-1.0),
        lambda: d(pool, 0, q, table[:, :0], ctx),
        lambda: kernels.paged_prefill(pool, 0, torch.zeros((4, 4, f.head_dim)), table, ctx,
                                      torch.tensor([5], dtype=torch.int32)),
        lambda: kernels.paged_prefill(pool, 0, q, table, ctx,
                                      torch.tensor([-1], dtype=torch.int32)),
        lambda: kernels.reshape_and_cache(pool, 0, kv, torch.zeros((2, f.kv_heads, f.head_dim)),
                                          slot),
        lambda: kernels.copy_pages(pool, table[0, :1], table[0, :2]),
        lambda: kernels.copy_pages(pool, torch.tensor([client.nr_frames], dtype=torch.int32),
                                   table[0, :1]),
        lambda: kernels.copy_pages(pool, torch.tensor([-1], dtype=torch.int32), table[0, :1]),
        lambda: kernels.copy_pages(pool, table[0, :1], table[0, :1], ntokens=-1),
    ]
    for i, call in enumerate(value_errors):
        with pytest.raises(ValueError):
            call()
    # what only the C kernels see: -EINVAL
    kvmm_errors = [
        lambda: d(pool, 0, q, torch.tensor([[client.nr_frames, -1]], dtype=torch.int32), ctx),
        lambda: d(pool, 0, q, torch.tensor([[-1, -1]], dtype=torch.int32), ctx),
        lambda: d(pool, 0, q, table, torch.tensor([10 ** 6], dtype=torch.int32)),
        lambda: d(pool, 0, q, table, torch.tensor([-1], dtype=torch.int32)),
        lambda: kernels.paged_prefill(pool, 0, torch.zeros((6, 4, f.head_dim)), table, ctx,
                                      torch.tensor([6], dtype=torch.int32)),  # q_lens > ctx
        lambda: kernels.reshape_and_cache(pool, 0, kv, kv, torch.tensor(
            [client.nr_frames * client.tokens_per_page], dtype=torch.int64)),
        lambda: kernels.copy_pages(pool, table[0, :1].clone(), table[0, :1].clone()),
    ]
    for call in kvmm_errors:
        with pytest.raises(kvmm.KvmmError) as e:
            call()
        assert e.value.errno == errno.EINVAL
    client.seq_free(s)


def test_threads():
    n = kernels.get_threads()
    kernels.set_threads(2)
    assert kernels.get_threads() == 2
    kernels.set_threads(n)
    with pytest.raises(ValueError):
        kernels.set_threads(-1)


def test_isa_choice(client):
    names = kernels.isas()
    assert "scalar" in names and kernels.isa() in names
    before = kernels.isa()
    try:
        kernels.set_isa("scalar")
        assert kernels.isa() == "scalar"
        # the scalar code gives the same decode as the vector code, within rounding
        b = Batch(client, [client.tokens_per_page + 3], layer=0, seed=9)
        q = torch.randn((1, 4, client.fmt.head_dim), generator=torch.Generator().manual_seed(1))
        scalar = kernels.paged_decode(b.pool, 0, q, b.table, b.ctx)
        kernels.set_isa(before)
        vector = kernels.paged_decode(b.pool, 0, q, b.table, b.ctx)
        assert torch.allclose(scalar, vector, atol=1e-5)
        b.free()
    finally:
        kernels.set_isa(before)
    with pytest.raises(ValueError):
        kernels.set_isa("sse9")
