# SPDX-License-Identifier: MIT
"""On a GPU: a cuda-backend kvmmd (real driver), CUDA tensor views of the pool shared by two
processes, and the CUDA kernels on them against plain torch.  Skips without a CUDA build of
torch and a GPU (so everywhere in `make check` here); run on a GPU machine with

    KVMM_LIB=$PWD/runtime/libkvmm.so KVMM_KVMMD=$PWD/kvmm/kvmmd \\
        python3 -m pytest runtime/python/tests/test_cuda.py
"""
from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys

import pytest

import kvmm
from kvmm import kernels
from conftest import NS_A, PKG, Daemon, kvmmd_path

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU for torch")


@pytest.fixture(scope="module")
def gpu_daemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip("kvmmd not built")
    d = Daemon(["--backend", "cuda"])
    yield d
    log = d.log_text()
    assert d.stop() == 0, log


@pytest.fixture
def gc(gpu_daemon):
    c = kvmm.attach(gpu_daemon.sock, NS_A, kvmm.Format(2, 2, 64, "fp16"))
    yield c
    c.close()


_READER = r"""
import hashlib, sys
sys.path.insert(0, {pkg!r})
import torch, kvmm
c = kvmm.attach({sock!r}, {ns!r}, kvmm.Format(2, 2, 64, "fp16"))
prompt = list(range(9000, 9000 + {n}))
s = c.seq_create()
hit = c.prefix_lookup(s, prompt)
table = c.block_table([s], 8)[0]
v = c.views()
h = hashlib.sha256()
for b in range(hit // c.tokens_per_page):
    h.update(v.k[1][int(table[b])].cpu().numpy().tobytes())
print(hit, h.hexdigest(), flush=True)
c.close()
"""


def test_views_are_cuda_tensors_shared_between_processes(gpu_daemon, gc):
    assert gc.backend == "cuda"
    v = gc.views()
    k = v.k[1]
    assert k.is_cuda and k.dtype == torch.float16
    assert k.shape == (gc.nr_frames, gc.tokens_per_page, 2, 64)
    assert v.k[0].data_ptr() == gc.frame_devptr(0)
    assert k.data_ptr() == gc.frame_devptr(0) + 2 * gc.layout.slab_bytes
    tpp = gc.tokens_per_page
    n = 2 * tpp + 1
    prompt = list(range(9000, 9000 + n))
    s = gc.seq_create()
    gc.seq_append(s, prompt)
    table = gc.block_table([s], 8)[0]
    h = hashlib.sha256()
    gen = torch.Generator(device=k.device).manual_seed(1)
    for b in range(2):
        f = int(table[b])
        k[f] = torch.randn(k[f].shape, generator=gen, device=k.device).half()
        h.update(k[f].cpu().numpy().tobytes())
    torch.cuda.synchronize()
    gc.seal(s)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", _READER.format(pkg=PKG, sock=gpu_daemon.sock,
                                                             ns=NS_A, n=n)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hit, digest = r.stdout.split()
    assert int(hit) == 2 * tpp and digest == h.hexdigest()
    gc.seq_free(s)


def _attention(q, k, v, causal_from=None):
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1).double()
    v = v.repeat_interleave(hq // hk, dim=1).double()
    s = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[-1])
    if causal_from is not None:
        qi = torch.arange(q.shape[0], device=q.device)[:, None] + causal_from
        s = s.masked_fill(torch.arange(k.shape[0], device=q.device)[None, :] > qi,
                          float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v).float()


def test_kernels_on_gpu_views(gc):
    if not kernels.available("cuda"):
        pytest.skip("this libkvmm has no CUDA kernels")
    dev = gc.views().device
    pool = gc.views()
    tpp = gc.tokens_per_page
    lens = [3, tpp + 5, 3 * tpp]
    seqs = []
    for i, n in enumerate(lens):
        s = gc.seq_create()
        gc.seq_append(s, [i * 1000 + t for t in range(n)])
        seqs.append(s)
    table_cpu = gc.block_table(seqs, 4)
    table = table_cpu.to(dev)
    g = torch.Generator().manual_seed(2)
    ks = [torch.randn((n, 2, 64), generator=g) for n in lens]
    vs = [torch.randn((n, 2, 64), generator=g) for n in lens]
    slots = torch.cat([table_cpu[i][torch.arange(n) // tpp].long() * tpp + torch.arange(n) % tpp
                       for i, n in enumerate(lens)])
    kernels.reshape_and_cache(pool, 0, torch.cat(ks).to(dev), torch.cat(vs).to(dev),
                              slots.to(dev))
    ctx = torch.tensor(lens, dtype=torch.int32, device=dev)
    q = torch.randn((len(lens), 4, 64), generator=g).to(dev)
    out = kernels.paged_decode(pool, 0, q, table, ctx)
    qlens = torch.tensor([3, 5, tpp], dtype=torch.int32)
    qp = torch.randn((int(qlens.sum()), 4, 64), generator=g).to(dev)
    outp = kernels.paged_prefill(pool, 0, qp, table, ctx, qlens.to(dev))
    torch.cuda.synchronize()
    row = 0
    for i, n in enumerate(lens):
        k16 = ks[i].half().float().to(dev)
        v16 = vs[i].half().float().to(dev)
        assert torch.allclose(out[i:i + 1], _attention(q[i:i + 1], k16, v16), atol=2e-3)
        m = int(qlens[i])
        ref = _attention(qp[row:row + m], k16, v16, causal_from=n - m)
        assert torch.allclose(outp[row:row + m], ref, atol=2e-3), i
        row += m
    dst = gc.seq_create()
    gc.seq_append(dst, range(tpp))
    d = gc.block_table([dst], 1)[0].to(dev)
    kernels.copy_pages(pool, d, table[2, :1].contiguous())
    torch.cuda.synchronize()
    assert torch.equal(pool.k[1][d[0]], pool.k[1][table[2, 0]])
    for s in seqs + [dst]:
        gc.seq_free(s)
