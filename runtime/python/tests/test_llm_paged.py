# SPDX-License-Identifier: MIT
"""kvmm.llm with its KV in kvmm pages of a real kvmmd, against the no-cache reference forward:
fp32 KV gives the reference's greedy tokens; fp16, bf16 and int8 KV stay within a stated
logit tolerance and give the same greedy tokens on the test prompts; a prefix mapped from the
cache (sealed by this process or another one), a fork, and a recompute after kvmm preempted
the sequence all give the same tokens."""

import os
import subprocess
import sys

import pytest
import torch

from conftest import PKG as PYROOT, Daemon, kvmmd_path  # noqa: E402

try:
    import kvmm  # noqa: F401
    from kvmm.llm.paged import PagedKV
except ImportError as e:  # the bindings or libkvmm are not built
    pytest.skip(f"kvmm package not importable: {e}", allow_module_level=True)

from kvmm.llm import Engine, SamplingParams, load_model  # noqa: E402
from kvmm.llm.testing import ARCHS, write_checkpoint  # noqa: E402

PROMPTS = [[5, 17, 33, 99, 4, 8, 15, 16, 23, 42], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]]
# A prompt of several pages (a token of the tiny models is 512 bytes of fp32 KV, 256 of fp16:
# 32 or 64 tokens in conftest's 16 KiB pages): the prefix tests map its full pages.
LONG = [(i * 37 + 11) % 250 + 3 for i in range(150)]
# Logit tolerance of quantized KV against the fp32 reference (the tiny models' logits have a
# standard deviation of about 1 to 4): measured at most 0.015 (fp16), 0.23 (bf16), 0.34 (int8).
TOL = {"fp32": 1e-3, "fp16": 0.05, "bf16": 0.5, "int8": 0.75}
# One namespace per test, so that prefixes of one model never meet another's; "small" holds
# 8 pages, for the preemption test.
NAMESPACES = ["llm%d" % i for i in range(24)]
SMALL = "small"


class LlmDaemon:
    """conftest's kvmmd, with the namespaces of these tests."""

    def __init__(self):
        extra = []
        for ns in NAMESPACES:
            extra += ["--namespace", ns]
        # the last --frames wins: room beyond conftest's two namespaces
        extra += ["--namespace", SMALL + ":8", "--frames", "2048"]
        self.d = Daemon(extra)
        self.sock = self.d.sock
        self._next = 0

    def ns(self):
        n = NAMESPACES[self._next]
        self._next += 1
        return n


@pytest.fixture(scope="module")
def daemon():
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = LlmDaemon()
    yield d
    log = d.d.log_text()
    rc = d.d.stop()
    assert rc == 0, f"kvmmd exited with {rc}:\n{log}"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    out = {}
    for arch in ARCHS:
        d = str(tmp_path_factory.mktemp(arch))
        write_checkpoint(d, arch, seed=1)
        out[arch] = d
    return out


_ref_cache = {}


def reference(model, prompt, n):
    """Greedy tokens and their logits from the no-cache forward."""
    key = (id(model), tuple(prompt), n)
    if key not in _ref_cache:
        seq, logits = list(prompt), []
        for _ in range(n):
            lg = model.reference_logits(seq)[-1]
            logits.append(lg)
            seq.append(int(lg.argmax()))
        _ref_cache[key] = (seq[len(prompt):], logits)
    return _ref_cache[key]


def paged(model, daemon, ns, dtype="fp32", **kw):
    c = model.cfg
    return PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype=dtype, ns=ns,
                   socket_path=daemon.sock, **kw)


_models = {}


def model_of(ckpts, arch):
    if arch not in _models:
        _models[arch] = load_model(ckpts[arch])
    return _models[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_fp32_greedy_64(daemon, ckpts, arch):
    m = model_of(ckpts, arch)
    kv = paged(m, daemon, daemon.ns())
    e = Engine(m, kv, record_logits=True)
    reqs = e.generate(PROMPTS, SamplingParams(max_tokens=64, ignore_eos=True))
    for p, r in zip(PROMPTS, reqs):
        toks, logits = reference(m, p, 64)
        assert r.completions[0].token_ids == toks
        diff = max(float((a - b).abs().max()) for a, b in zip(r.completions[0].logits, logits))
        assert diff < TOL["fp32"]
    assert kv.live == 0
    e.close()


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_quantized_kv(daemon, ckpts, arch, dtype):
    m = model_of(ckpts, arch)
    e = Engine(m, paged(m, daemon, daemon.ns(), dtype), record_logits=True)
    reqs = e.generate(PROMPTS[:1], SamplingParams(max_tokens=16, ignore_eos=True))
    toks, logits = reference(m, PROMPTS[0], 16)
    got = reqs[0].completions[0]
    diff = max(float((a - b).abs().max()) for a, b in zip(got.logits, logits))
    assert diff < TOL[dtype], f"{dtype} KV: logits off by {diff}"
    assert got.token_ids == toks
    e.close()


def test_prefix_from_cache(daemon, ckpts):
    m = model_of(ckpts, "llama")
    ns = daemon.ns()
    toks, _ = reference(m, LONG, 12)
    e = Engine(m, paged(m, daemon, ns))
    first = e.generate([LONG], SamplingParams(max_tokens=12, ignore_eos=True))[0]
    assert first.cached_tokens == 0 and first.completions[0].token_ids == toks
    # the finished request sealed its full pages: the same prompt maps them
    again = e.generate([LONG], SamplingParams(max_tokens=12, ignore_eos=True))[0]
    tpp = e.kv.tokens_per_page
    assert again.cached_tokens == (len(LONG) - 1) // tpp * tpp > 0
    assert again.completions[0].token_ids == toks
    # a prompt sharing only the first pages reuses those
    other = LONG[:tpp + 5] + [7, 8, 9]
    r = e.generate([other], SamplingParams(max_tokens=12, ignore_eos=True))[0]
    assert r.cached_tokens == tpp
    assert r.completions[0].token_ids == reference(m, other, 12)[0]
    e.close()


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from kvmm.llm import Engine, SamplingParams, load_model
from kvmm.llm.paged import PagedKV
m = load_model(sys.argv[2])
c = m.cfg
kv = PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype="fp16", ns=sys.argv[3],
             socket_path=sys.argv[4])
e = Engine(m, kv)
prompt = [int(x) for x in sys.argv[5].split(",")]
r = e.generate([prompt], SamplingParams(max_tokens=8, ignore_eos=True))[0]
print(",".join(map(str, r.completions[0].token_ids)), r.cached_tokens)
e.close()
"""


def test_prefix_from_another_process(daemon, ckpts):
    m = model_of(ckpts, "qwen2")
    ns = daemon.ns()
    out = subprocess.run([sys.executable, "-c", CHILD, PYROOT, ckpts["qwen2"], ns, daemon.sock,
                          ",".join(map(str, LONG))], capture_output=True, text=True,
                         timeout=120, env=os.environ)
    assert out.returncode == 0, out.stderr
    child_toks, child_cached = out.stdout.split()
    assert child_cached == "0"
    # that process is gone; its sealed pages stay in the namespace's cache
    e = Engine(m, paged(m, daemon, ns, "fp16"))
    r = e.generate([LONG], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert r.cached_tokens == (len(LONG) - 1) // e.kv.tokens_per_page * e.kv.tokens_per_page > 0
    assert ",".join(map(str, r.completions[0].token_ids)) == child_toks
    assert r.completions[0].token_ids == reference(m, LONG, 8)[0]
    e.close()


def test_seal_prompts(daemon, ckpts):
    """Engine(seal_prompts=True) seals a prompt's full pages as soon as they are computed:
    another engine of the namespace maps them while the first one still decodes (without it,
    nothing is sealed before the request ends). Tokens are the reference's either way."""
    m = model_of(ckpts, "llama")
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    for seal, hit_pages in ((True, len(LONG) // 32), (False, 0)):  # 32 fp32 tokens a page
        ns = daemon.ns()
        a = Engine(m, paged(m, daemon, ns), seal_prompts=seal)
        ra = a.add_request(LONG, params)
        while not ra.completions[0].token_ids:
            a.step()
        assert not ra.done
        b = Engine(m, paged(m, daemon, ns))
        rb = b.add_request(LONG + [7, 8, 9], params)
        b.run()
        assert b.kv.tokens_per_page == 32
        assert rb.cached_tokens == hit_pages * 32
        a.run()
        assert ra.completions[0].token_ids == reference(m, LONG, 8)[0]
        assert rb.completions[0].token_ids == reference(m, LONG + [7, 8, 9], 8)[0]
        a.close()
        b.close()


def test_fork(daemon, ckpts):
    m = model_of(ckpts, "mistral")
    ns = daemon.ns()
    # greedy: every continuation is the reference
    e = Engine(m, paged(m, daemon, ns))
    r = e.generate([LONG[:13]], SamplingParams(max_tokens=20, n=3, ignore_eos=True))[0]
    for comp in r.completions:
        assert comp.token_ids == reference(m, LONG[:13], 20)[0]
    # sampled: continuation i equals a lone request of seed + i
    p = SamplingParams(max_tokens=12, temperature=1.0, seed=9, n=3, ignore_eos=True)
    r = e.generate([PROMPTS[1]], p)[0]
    for i, comp in enumerate(r.completions):
        q = SamplingParams(max_tokens=12, temperature=1.0, seed=9 + i, ignore_eos=True)
        alone = e.generate([PROMPTS[1]], q)[0]
        assert comp.token_ids == alone.completions[0].token_ids
    assert len({tuple(c.token_ids) for c in r.completions}) > 1
    assert e.kv.live == 0
    e.close()


def test_preempted_and_recomputed(daemon, ckpts):
    """Namespace "small" holds 8 pages: six requests of 3 pages each do not fit, so
    kvmmd preempts some (or the engine gives up its youngest); all still complete with the
    reference's tokens."""
    m = model_of(ckpts, "llama")
    prompts = [[(i * 13 + j * 7) % 250 + 3 for j in range(30)] for i in range(6)]
    e = Engine(m, paged(m, daemon, SMALL))
    reqs = e.generate(prompts, SamplingParams(max_tokens=64, ignore_eos=True))
    assert e.kv.stats["preempt_events"] > 0  # kvmmd preempted, not only the engine
    assert sum(r.recomputes for r in reqs) > 0
    for p, r in zip(prompts, reqs):
        assert r.completions[0].token_ids == reference(m, p, 64)[0]
    e.close()


def test_kv_in_pages(daemon, ckpts):
    """The K the model computed for a token is in its page: read it back through the view."""
    m = model_of(ckpts, "llama")
    kv = paged(m, daemon, daemon.ns())
    seen = {}

    def spy(layer, q, k, v):
        seen.setdefault(layer, k.clone())
        return kv.attention(layer, q, k, v)

    s = kv.new_seq()
    from kvmm.llm import StepEntry

    kv.begin_step([StepEntry(s, 0, PROMPTS[1])])
    m.forward(torch.tensor(PROMPTS[1]), torch.arange(len(PROMPTS[1])), spy)
    table = kv.table[0].long()
    kv.end_step()
    tpp = kv.tokens_per_page
    for layer in range(m.cfg.num_layers):
        for t in range(len(PROMPTS[1])):
            got = kv.views.k[layer][table[t // tpp], t % tpp]
            assert torch.equal(got, seen[layer][t])
    kv.free(s)
    kv.close()


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_torch_path(daemon, ckpts, dtype):
    """Attention in torch over the views (what runs with a libkvmm without kernels) gives the
    same answers, and libkvmm's kernels are the default where the library has them."""
    import kvmm.kernels

    m = model_of(ckpts, "llama")
    kv = paged(m, daemon, daemon.ns(), dtype, kernels=False)
    assert kv.kernel == "torch"
    e = Engine(m, kv, record_logits=True)
    n = 64 if dtype == "fp32" else 16
    got = e.generate(PROMPTS[:1], SamplingParams(max_tokens=n, ignore_eos=True))[0].completions[0]
    toks, logits = reference(m, PROMPTS[0], n)
    assert got.token_ids == toks
    assert max(float((a - b).abs().max()) for a, b in zip(got.logits, logits)) < TOL[dtype]
    e.close()
    kv = paged(m, daemon, daemon.ns(), dtype)
    assert kv.kernel == ("libkvmm" if kvmm.kernels.available("cpu") else "torch")
    kv.close()


def test_checkpoints_of_one_shape_never_share(daemon, tmp_path):
    """Two checkpoints of the same shape (other weights) in one namespace: each engine's KV
    is keyed with its checkpoint's identity (model_identity), so a prompt one cached is a
    miss for the other and a hit for a second engine of the same checkpoint."""
    from kvmm.llm.paged import model_identity

    d1, d2 = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(d1)
    os.mkdir(d2)
    write_checkpoint(d1, ARCHS[0], seed=1)
    write_checkpoint(d2, ARCHS[0], seed=2)
    assert model_identity(d1) != model_identity(d2)
    assert model_identity(d1) == model_identity(d1)
    m1, m2 = load_model(d1), load_model(d2)
    ns = daemon.ns()
    c = m1.cfg
    kv1, kv1b, kv2 = (PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype="fp32", ns=ns,
                              socket_path=daemon.sock, model=model_identity(d))
                      for d in (d1, d1, d2))
    try:
        eng = Engine(m1, kv1)
        eng.add_request(LONG, SamplingParams(max_tokens=1))
        eng.run()
        assert kv1.stats["sealed"] > 0
        for kv, want in ((kv1b, True), (kv2, False)):
            s = kv.c.seq_create()
            hit = kv.c.prefix_lookup(s, LONG)
            kv.c.seq_free(s)
            assert (hit > 0) == want, (hit, want)
    finally:
        for kv in (kv1, kv1b, kv2):
            kv.close()
