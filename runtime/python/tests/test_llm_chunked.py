# SPDX-License-Identifier: MIT
"""Chunked attention (PagedKV(chunk_pages=N)): the partial-attention merge against one
attention over all keys, then the engine with its attention a few pinned pages at a time
against the no-cache reference (fp32 KV: identical greedy tokens) and against the unchunked
store (logits within tolerance), and a sequence bigger than its namespace's pool, which only
chunking can run: kvmmd swaps the pages outside the pinned chunk out and back in."""

import os

import pytest
import torch

from conftest import Daemon, kvmmd_path  # noqa: E402

try:
    import kvmm
    from kvmm.llm.paged import PagedKV, merge_partials, partial_attention
except ImportError as e:  # the bindings or libkvmm are not built
    pytest.skip(f"kvmm package not importable: {e}", allow_module_level=True)

from kvmm.llm import Engine, SamplingParams, load_model  # noqa: E402
from kvmm.llm.model import causal_attention  # noqa: E402
from kvmm.llm.testing import write_checkpoint  # noqa: E402

LONG = [(i * 37 + 11) % 250 + 3 for i in range(150)]
TINY, TINY_FRAMES = "tiny", 8


@pytest.fixture(scope="module")
def daemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = Daemon(["--namespace", "chunk1", "--namespace", "chunk2", "--namespace", "chunk3",
                "--namespace", f"{TINY}:{TINY_FRAMES}", "--frames", "1200",
                "--swap", f"swap_host={64 * 16384}"])
    yield d
    log = d.log_text()
    rc = d.stop()
    assert rc == 0, f"kvmmd exited with {rc}:\n{log}"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("llama"))
    write_checkpoint(d, "llama", seed=3)
    return load_model(d)


def paged(model, daemon, ns, **kw):
    c = model.cfg
    return PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype="fp32", ns=ns,
                   socket_path=daemon.sock, **kw)


def reference(model, prompt, n):
    seq, logits = list(prompt), []
    for _ in range(n):
        lg = model.reference_logits(seq)[-1]
        logits.append(lg)
        seq.append(int(lg.argmax()))
    return seq[len(prompt):], logits


@pytest.mark.parametrize("past,n,chunk", [(0, 37, 5), (20, 17, 8), (90, 1, 7), (63, 1, 64),
                                          (40, 25, 1)])
def test_merge_is_exact(past, n, chunk):
    """Partials over any chunking of the keys merge into the attention over all of them,
    in any order (queries that see no key of a chunk included)."""
    g = torch.Generator().manual_seed(past * 100 + n)
    q = torch.randn(n, 4, 16, generator=g)
    k = torch.randn(past + n, 2, 16, generator=g)
    v = torch.randn(past + n, 2, 16, generator=g)
    want = causal_attention(q, k, v, past)
    bounds = list(range(0, past + n, chunk))
    for order in (bounds, bounds[::-1]):
        acc = None
        for b in order:
            part = partial_attention(q, k[b:b + chunk], v[b:b + chunk], past, b)
            acc = part if acc is None else merge_partials(*acc, *part)
        got = acc[0].permute(2, 0, 1, 3).reshape(n, 4, 16)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
        assert torch.isfinite(acc[1]).all()


def test_merge_fully_masked():
    """A chunk no query sees weighs nothing: the result is the other chunk's, no NaN."""
    q = torch.randn(3, 2, 8)
    k, v = torch.randn(10, 1, 8), torch.randn(10, 1, 8)
    a = partial_attention(q, k[:5], v[:5], 2, 0)  # queries at 2, 3, 4: keys 0..4
    b = partial_attention(q, k[5:], v[5:], 2, 5)  # keys 5..9: seen by none
    assert torch.isinf(b[1]).all() and (b[0] == 0).all()
    o, lse = merge_partials(*a, *b)
    assert torch.equal(o, a[0]) and torch.equal(lse, a[1])


def _kernel_modes():
    """Chunked attention with libkvmm's kernels over scratch pages, and in torch."""
    return [True, False] if kvmm.kernels.available("cpu") else [False]


@pytest.mark.parametrize("kernels", _kernel_modes())
def test_chunked_engine_matches(daemon, model, kernels):
    """Two prompts of 5 pages, 64 tokens each, chunks of 2 pages: the reference's greedy
    tokens (fp32 KV), and logits within 1e-4 of the unchunked store's."""
    prompts = [LONG, LONG[::-1][:120]]
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    kv = paged(model, daemon, "chunk1", chunk_pages=2, kernels=kernels)
    tpp = kv.tokens_per_page
    assert len(LONG) > 4 * tpp  # several chunks
    e = Engine(model, kv, record_logits=True)
    got = e.generate(prompts, params)
    assert kv.stats["chunked_steps"] > 0 and kv.stats["chunks"] > kv.stats["chunked_steps"]
    # kernels: the chunks were gathered into scratch pages (PoolViews.scratch); else torch
    assert (kv._stage not in (None, False)) == kernels
    whole = Engine(model, paged(model, daemon, "chunk2"), record_logits=True)
    want = whole.generate(prompts, params)
    for p, a, b in zip(prompts, got, want):
        ca, cb = a.completions[0], b.completions[0]
        assert ca.token_ids == cb.token_ids == reference(model, p, 64)[0]
        diff = max(float((x - y).abs().max()) for x, y in zip(ca.logits, cb.logits))
        assert diff < 1e-4, f"chunked logits off by {diff}"
    assert kv.live == 0
    e.close()
    whole.close()


@pytest.mark.parametrize("kernels", _kernel_modes())
def test_bigger_than_the_pool(daemon, model, kernels):
    """Namespace "tiny" holds 8 pages; one sequence of 12 runs chunked (1 or 2 pages a
    chunk), with its other pages swapped out and in, and gives the reference's tokens.
    Without chunking the same request cannot run."""
    prompt = (LONG * 2)[:230]
    n = 150  # 380 tokens: 12 pages of 32
    toks = reference(model, prompt, n)[0]
    for chunk in (2, None):  # None: PagedKV chunks on its own when the pin finds no room
        kv = paged(model, daemon, TINY, chunk_pages=chunk, kernels=kernels)
        assert -(-(len(prompt) + n) // kv.tokens_per_page) > TINY_FRAMES
        e = Engine(model, kv, max_batch_tokens=kv.tokens_per_page)
        got = e.generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True))[0]
        assert got.completions[0].token_ids == toks
        assert kv.stats["chunked_steps"] > 0
        assert got.recomputes == 0
        assert kv._held is None and kv._tails == []  # nothing pinned between steps
        e.close()
    from kvmm import admin

    with admin.open(daemon.sock) as a:
        assert (admin.value(a.vmstat(ns=TINY), "pswpin") or 0) > 0
    kv = paged(model, daemon, TINY, auto_chunk=False)
    e = Engine(model, kv, max_batch_tokens=kv.tokens_per_page)
    e.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True))
    with pytest.raises(MemoryError):
        e.run()
    e.close()


def test_bad_chunk_pages(daemon, model):
    for bad in (0, -1, 2.5, "4"):
        with pytest.raises(ValueError):
            paged(model, daemon, "chunk3", chunk_pages=bad)
