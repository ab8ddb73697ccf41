# SPDX-License-Identifier: MIT
"""kvmm.llm on a GPU, and against Hugging Face transformers' own models.

On a GPU (skipped without a CUDA build of torch and a GPU, so everywhere in `make check` here):
the engine with its model on CUDA and its KV in the pages of a cuda-backend kvmmd, on the tiny
random checkpoints of kvmm.llm.testing, against the no-cache reference forward: fp32 KV gives
the reference's greedy tokens for 64 new tokens (and its logits within 1e-3); fp16, bf16 and
int8 KV stay within test_llm_paged's stated tolerance; attention in torch over the CUDA views
(no kernels) and a prefix mapped from the cache give the same tokens.

Where `transformers` imports (on the CPU, so wherever it is installed): its
AutoModelForCausalLM (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM) loaded from the
same checkpoint directory generates greedily, with no cache, the same tokens as our reference
forward and as the engine over kvmm pages of a host kvmmd (fp32 weights, fp32 KV), and, on a
GPU, as the engine on CUDA.  Run on a GPU machine with

    KVMM_LIB=$PWD/runtime/libkvmm.so KVMM_KVMMD=$PWD/kvmm/kvmmd PYTHONPATH=runtime/python \\
        python3 -m pytest runtime/python/tests/test_llm_cuda.py

(tools/gpu-check does).
"""
from __future__ import annotations

import importlib.util
import os

import pytest

from conftest import Daemon, kvmmd_path

torch = pytest.importorskip("torch")

try:
    import kvmm  # noqa: F401
    from kvmm import kernels
    from kvmm.llm.paged import PagedKV
except ImportError as e:  # the bindings or libkvmm are not built
    pytest.skip(f"kvmm package not importable: {e}", allow_module_level=True)

from kvmm.llm import Checkpoint, Engine, SamplingParams, load_model, write_safetensors  # noqa
from kvmm.llm.testing import ARCHS, write_checkpoint  # noqa: E402

# the same prompts and tolerances as test_llm_paged (the CPU side of these tests)
PROMPTS = [[5, 17, 33, 99, 4, 8, 15, 16, 23, 42], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]]
LONG = [(i * 37 + 11) % 250 + 3 for i in range(150)]
TOL = {"fp32": 1e-3, "fp16": 0.05, "bf16": 0.5, "int8": 0.75}
NEW = 64  # new tokens of the greedy comparisons

HAVE_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU for torch")
# (found, not imported: transformers takes seconds to import; hf_greedy imports it)
HAVE_HF = importlib.util.find_spec("transformers") is not None
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="transformers is not installed")
BACKEND = ["--backend", "cuda"]

# No hub: the checkpoints are local directories, and a GPU machine has no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One namespace per engine, so that the prefixes one model sealed never meet another model.
NAMESPACES = ["llmc%d" % i for i in range(24)]


class LlmDaemon:
    """conftest's kvmmd (backend given) with the namespaces of these tests."""

    def __init__(self, backend):
        extra = list(backend)
        for ns in NAMESPACES:
            extra += ["--namespace", ns]
        extra += ["--frames", "2048"]  # the last --frames wins: room beyond conftest's two
        self.d = Daemon(extra)
        self.sock = self.d.sock
        self._next = 0

    def ns(self):
        n = NAMESPACES[self._next]
        self._next += 1
        return n


def _daemon(backend):
    if not os.access(kvmmd_path(), os.X_OK):
        pytest.skip(f"kvmmd not built at {kvmmd_path()} (or set KVMM_KVMMD)")
    d = LlmDaemon(backend)
    yield d
    log = d.d.log_text()
    rc = d.d.stop()
    assert rc == 0, f"kvmmd exited with {rc}:\n{log}"


@pytest.fixture(scope="module")
def gpu_daemon():
    if not HAVE_CUDA:
        pytest.skip("no CUDA GPU for torch")
    yield from _daemon(BACKEND)


@pytest.fixture(scope="module")
def host_daemon():
    yield from _daemon([])


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """The checkpoints of test_llm_paged (seed 1), their safetensors with the "format": "pt"
    metadata transformers' save_pretrained writes (older transformers insist on it)."""
    out = {}
    for arch in ARCHS:
        d = str(tmp_path_factory.mktemp(arch))
        write_checkpoint(d, arch, seed=1)
        path = os.path.join(d, "model.safetensors")
        ck = Checkpoint(d)
        tensors = {k: ck.get(k).clone() for k in ck.keys()}
        del ck
        write_safetensors(path + ".tmp", tensors, metadata={"format": "pt"})
        os.replace(path + ".tmp", path)  # a new file: nothing maps the old one's pages
        out[arch] = d
    return out


_models = {}


def model_of(ckpts, arch, device="cpu"):
    """fp32 weights of arch on device (one load per arch and device)."""
    key = (arch, str(device))
    if key not in _models:
        _models[key] = load_model(ckpts[arch], dtype=torch.float32, device=device)
    return _models[key]


_refs = {}


def reference(model, prompt, n):
    """Greedy tokens and their fp32 logits (on the CPU) from the no-cache forward."""
    key = (id(model), tuple(prompt), n)
    if key not in _refs:
        seq, logits = list(prompt), []
        for _ in range(n):
            lg = model.reference_logits(seq)[-1].float().cpu()
            logits.append(lg)
            seq.append(int(lg.argmax()))
        _refs[key] = (seq[len(prompt):], logits)
    return _refs[key]


def paged(model, daemon, dtype="fp32", **kw):
    c = model.cfg
    return PagedKV(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype=dtype, ns=daemon.ns(),
                   socket_path=daemon.sock, **kw)


def generate(model, kv, prompts, n):
    """The engine's greedy completions (tokens and logits) of prompts, KV in kv."""
    e = Engine(model, kv, record_logits=True)
    try:
        reqs = e.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))
        assert kv.live == 0
    finally:
        e.close()
    return [r.completions[0] for r in reqs]


def logit_diff(got, want):
    return max(float((a.float().cpu() - b).abs().max()) for a, b in zip(got, want))


# ---- the engine on CUDA against the reference forward ----------------------------------
@needs_cuda
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_fp32_greedy_64(gpu_daemon, ckpts, arch):
    kv = paged(model_of(ckpts, arch), gpu_daemon)  # (the CPU model only for its config)
    assert kv.device.type == "cuda", f"kvmmd's pool is on {kv.device}, not a GPU"
    assert kv.kernel == ("libkvmm" if kernels.available("cuda") else "torch")
    m = model_of(ckpts, arch, kv.device)
    comps = generate(m, kv, PROMPTS, NEW)
    for p, comp in zip(PROMPTS, comps):
        toks, logits = reference(m, p, NEW)
        assert comp.token_ids == toks, f"{arch}: CUDA engine's tokens differ from the reference"
        diff = logit_diff(comp.logits, logits)
        assert diff < TOL["fp32"], f"{arch}: fp32 KV on CUDA, logits off by {diff}"
        # the model on the GPU computes what it does on the CPU
        assert toks == reference(model_of(ckpts, arch), p, NEW)[0], \
            f"{arch}: the reference forward on CUDA and on the CPU disagree"


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_cuda_quantized_kv(gpu_daemon, ckpts, arch, dtype):
    kv = paged(model_of(ckpts, arch), gpu_daemon, dtype)
    m = model_of(ckpts, arch, kv.device)
    got = generate(m, kv, PROMPTS[:1], 16)[0]
    toks, logits = reference(m, PROMPTS[0], 16)
    diff = logit_diff(got.logits, logits)
    assert diff < TOL[dtype], f"{arch}, {dtype} KV on CUDA: logits off by {diff}"
    assert got.token_ids == toks, f"{arch}, {dtype} KV on CUDA: tokens differ"


@needs_cuda
def test_cuda_torch_path(gpu_daemon, ckpts):
    """Attention in torch over the zero-copy CUDA views (no libkvmm kernels): the same."""
    kv = paged(model_of(ckpts, "llama"), gpu_daemon, kernels=False)
    assert kv.kernel == "torch"
    m = model_of(ckpts, "llama", kv.device)
    got = generate(m, kv, PROMPTS[:1], NEW)[0]
    toks, logits = reference(m, PROMPTS[0], NEW)
    assert got.token_ids == toks
    assert logit_diff(got.logits, logits) < TOL["fp32"]


@needs_cuda
def test_cuda_prefix_from_cache(gpu_daemon, ckpts):
    """A finished request seals its full GPU pages: the same prompt maps them."""
    kv = paged(model_of(ckpts, "llama"), gpu_daemon)
    m = model_of(ckpts, "llama", kv.device)
    toks, _ = reference(m, LONG, 12)
    e = Engine(m, kv)
    try:
        p = SamplingParams(max_tokens=12, ignore_eos=True)
        first = e.generate([LONG], p)[0]
        assert first.cached_tokens == 0 and first.completions[0].token_ids == toks
        again = e.generate([LONG], p)[0]
        tpp = kv.tokens_per_page
        assert again.cached_tokens == (len(LONG) - 1) // tpp * tpp > 0
        assert again.completions[0].token_ids == toks
    finally:
        e.close()


# ---- transformers' own model on the same checkpoint --------------------------------------
_hf = {}


def hf_greedy(ckpts, arch, prompt, n):
    """transformers' greedy tokens and logits for prompt, on the CPU in fp32, recomputing the
    whole sequence at each step (no cache: nothing of transformers' own KV handling)."""
    transformers = pytest.importorskip("transformers")
    key = (arch, tuple(prompt), n)
    if key in _hf:
        return _hf[key]
    try:
        hf = transformers.AutoModelForCausalLM.from_pretrained(ckpts[arch],
                                                               attn_implementation="eager")
    except Exception as e:  # say which transformers refused which config
        with open(os.path.join(ckpts[arch], "config.json")) as f:
            cfg = f.read()
        pytest.fail(f"transformers {transformers.__version__} cannot load the {arch} "
                    f"checkpoint: {type(e).__name__}: {e}\nconfig.json: {cfg}")
    hf = hf.float().eval()
    ids = torch.tensor([prompt], dtype=torch.long)
    toks, logits = [], []
    with torch.no_grad():
        for _ in range(n):
            lg = hf(input_ids=ids, use_cache=False).logits[0, -1].float().cpu()
            logits.append(lg)
            toks.append(int(lg.argmax()))
            ids = torch.cat([ids, torch.tensor([[toks[-1]]], dtype=torch.long)], 1)
    _hf[key] = (toks, logits)
    return _hf[key]


@needs_hf
@pytest.mark.parametrize("arch", ARCHS)
def test_reference_matches_transformers(ckpts, arch):
    m = model_of(ckpts, arch)
    for p in PROMPTS:
        htoks, hlogits = hf_greedy(ckpts, arch, p, NEW)
        toks, logits = reference(m, p, NEW)
        diff = logit_diff(logits, hlogits)
        assert toks == htoks, f"{arch}: our reference's tokens differ from transformers' " \
                              f"(logits off by {diff})"
        assert diff < TOL["fp32"], f"{arch}: logits off transformers' by {diff}"


@needs_hf
@pytest.mark.parametrize("arch", ARCHS)
def test_engine_matches_transformers(host_daemon, ckpts, arch):
    """The engine on the CPU, fp32 KV in kvmm pages of a host kvmmd."""
    m = model_of(ckpts, arch)
    want = [hf_greedy(ckpts, arch, p, NEW)[0] for p in PROMPTS]
    comps = generate(m, paged(m, host_daemon), PROMPTS, NEW)
    assert [c.token_ids for c in comps] == want


@needs_cuda
@needs_hf
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_engine_matches_transformers(gpu_daemon, ckpts, arch):
    """The engine on CUDA, fp32 KV in GPU pages, against transformers on the CPU."""
    want = [hf_greedy(ckpts, arch, p, NEW)[0] for p in PROMPTS]
    kv = paged(model_of(ckpts, arch), gpu_daemon)
    m = model_of(ckpts, arch, kv.device)
    comps = generate(m, kv, PROMPTS, NEW)
    assert [c.token_ids for c in comps] == want
