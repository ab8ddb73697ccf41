# SPDX-License-Identifier: MIT
"""kvmm.llm without a daemon: the safetensors reader, config checks, the model against its
no-cache reference, sampling, and the engine over contiguous KV (forks, recompute)."""

import json
import os
import struct
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kvmm.llm import (  # noqa: E402
    Checkpoint,
    ConfigError,
    ContiguousKV,
    Engine,
    SafetensorsError,
    SamplingParams,
    load_model,
    parse_config,
    write_safetensors,
)
from kvmm.llm.testing import ARCHS, tiny_config, write_checkpoint  # noqa: E402

PROMPTS = [[5, 17, 33, 99, 4, 8, 15, 16, 23, 42], [7, 7, 7, 200, 100, 3, 9]]


def reference_greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model.reference_logits(seq)[-1].argmax()))
    return seq[len(prompt):]


def contiguous(model):
    c = model.cfg
    return ContiguousKV(c.num_layers, c.num_kv_heads, c.head_dim, initial=16)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    out = {}
    for arch in ARCHS:
        d = str(tmp_path_factory.mktemp(arch))
        write_checkpoint(d, arch, seed=1)
        out[arch] = d
    return out


# ---- safetensors ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8])
def test_safetensors_roundtrip(tmp_path, dtype):
    t = {"a": (torch.randn(3, 5) * 10).to(dtype), "b.c": torch.arange(7, dtype=torch.int64),
         "empty": torch.zeros(0, 4, dtype=dtype)}
    p = str(tmp_path / "x.safetensors")
    write_safetensors(p, t, metadata={"format": "pt"})
    ck = Checkpoint(str(tmp_path))
    assert sorted(ck.keys()) == ["a", "b.c", "empty"]
    for k, v in t.items():
        got = ck.get(k)
        assert got.dtype == v.dtype and list(got.shape) == list(v.shape)
        assert torch.equal(got, v)


def _raw(tmp_path, header, data=b""):
    h = json.dumps(header).encode()
    p = tmp_path / "m.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return str(tmp_path)


@pytest.mark.parametrize(
    "header,data,msg",
    [
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"1234", "data_offsets"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"12345678", "data_offsets"),
        ({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"12345678", "dtype"),
        ({"w": {"dtype": "F32", "shape": [2]}}, b"12345678", "bad header"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "v": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"12345678", "overlap"),
    ],
)
def test_safetensors_bad(tmp_path, header, data, msg):
    with pytest.raises(SafetensorsError, match=msg):
        Checkpoint(_raw(tmp_path, header, data))


def test_safetensors_bad_length(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(SafetensorsError, match="header length"):
        Checkpoint(str(tmp_path))
    (tmp_path / "m.safetensors").write_bytes(b"\x01")
    with pytest.raises(SafetensorsError, match="shorter"):
        Checkpoint(str(tmp_path))


def test_sharded_equals_single(tmp_path):
    a, b = str(tmp_path / "one"), str(tmp_path / "three")
    write_checkpoint(a, "llama", seed=3)
    write_checkpoint(b, "llama", seed=3, shards=3)
    assert os.path.exists(os.path.join(b, "model.safetensors.index.json"))
    ma, mb = load_model(a), load_model(b)
    assert torch.equal(ma.reference_logits(PROMPTS[0]), mb.reference_logits(PROMPTS[0]))


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 0.05), (torch.bfloat16, 0.3)])
def test_half_checkpoints(tmp_path, dtype, tol):
    a, b = str(tmp_path / "f32"), str(tmp_path / "half")
    write_checkpoint(a, "llama", seed=4)
    write_checkpoint(b, "llama", seed=4, dtype=dtype)
    la = load_model(a).reference_logits(PROMPTS[0])
    lb = load_model(b).reference_logits(PROMPTS[0])  # weights widened to fp32 on the CPU
    assert (la - lb).abs().max() < tol


# ---- config ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "over,fieldname",
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "architectures"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"sliding_window": 4096}, "sliding_window"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling.rope_type"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor"),
        ({"hidden_size": -1}, "hidden_size"),
        ({"vocab_size": None}, "vocab_size"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ({"torch_dtype": "int4"}, "torch_dtype"),
    ],
)
def test_config_refused_before_weights(tmp_path, over, fieldname):
    cfg = tiny_config("llama", **over)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    # weights that cannot be read: the config must be refused first
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ConfigError) as ei:
        load_model(str(tmp_path))
    assert ei.value.field == fieldname
    assert fieldname in str(ei.value)


def test_config_qwen_window():
    with pytest.raises(ConfigError, match="use_sliding_window"):
        parse_config(tiny_config("qwen2", use_sliding_window=True))
    assert parse_config(tiny_config("qwen2")).qkv_bias


def test_weight_shape_mismatch(tmp_path):
    write_checkpoint(str(tmp_path), "llama")
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mlp.gate_proj.weight"):
        load_model(str(tmp_path))


def test_llama3_rope_scaling_changes_long_positions(ckpts):
    from kvmm.llm.model import rope_inv_freq

    c = parse_config(tiny_config("llama3"))
    scaled = rope_inv_freq(c)
    c.rope_scaling = None
    plain = rope_inv_freq(c)
    assert torch.allclose(scaled[0], plain[0])  # short wavelengths untouched
    assert torch.allclose(scaled[-1], plain[-1] / 8)  # long ones slowed by factor


# ---- engine over contiguous KV vs the no-cache reference ----------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_matches_reference(ckpts, arch):
    m = load_model(ckpts[arch])
    e = Engine(m, contiguous(m))
    reqs = e.generate(PROMPTS, SamplingParams(max_tokens=64, ignore_eos=True))
    for p, r in zip(PROMPTS, reqs):
        assert r.completions[0].token_ids == reference_greedy(m, p, 64)
        assert r.completions[0].finish_reason == "length"
    assert e.kv.live == 0


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_rows(ckpts, threads):
    """Model.set_threads(n): a prefill's linears split by rows over n threads give the very
    same hidden states as one thread (each row is the same dot products), odd row counts
    included; decode-sized batches (below SPLIT_ROWS) are not split; bad counts refused."""
    from kvmm.llm import model as model_mod

    m = load_model(ckpts["qwen2"])  # qwen2: the qkv linear has a bias
    n = model_mod.SPLIT_ROWS * 2 + 5
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(3, m.cfg.vocab_size, (n,), generator=g)
    pos = torch.arange(n)

    def attn(layer, q, k, v):
        return model_mod.causal_attention(q, k, v, 0)

    one = m.forward(toks, pos, attn)
    calls = []
    real = torch.matmul

    def counting(*a, **kw):
        calls.append(a[0].shape[0])
        return real(*a, **kw)

    m.set_threads(threads)
    try:
        torch.matmul = counting
        split = m.forward(toks, pos, attn)
        small = m.forward(toks[:8], pos[:8], attn)
    finally:
        torch.matmul = real
        m.set_threads(1)
    assert torch.equal(one, split)
    step = -(-n // threads)
    assert calls.count(step) >= 4 * m.cfg.num_layers  # every linear of the prefill split
    assert n not in calls
    assert torch.equal(small, m.forward(toks[:8], pos[:8], attn))
    for bad in (0, 65, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            m.set_threads(bad)
    assert m.threads == 1


def test_continuous_batching_arrivals(ckpts):
    """A request added while another decodes gets the same tokens as alone."""
    m = load_model(ckpts["llama"])
    e = Engine(m, contiguous(m), max_batch_tokens=8)  # prompts prefill in chunks too
    a = e.add_request(PROMPTS[0], SamplingParams(max_tokens=20, ignore_eos=True))
    for _ in range(5):
        e.step()
    b = e.add_request(PROMPTS[1], SamplingParams(max_tokens=20, ignore_eos=True))
    e.run()
    assert a.completions[0].token_ids == reference_greedy(m, PROMPTS[0], 20)
    assert b.completions[0].token_ids == reference_greedy(m, PROMPTS[1], 20)


def test_sampling_seeded(ckpts):
    m = load_model(ckpts["qwen2"])
    p = SamplingParams(max_tokens=24, temperature=0.9, top_p=0.8, seed=11, ignore_eos=True)
    a = Engine(m, contiguous(m)).generate([PROMPTS[0]], p)[0].completions[0].token_ids
    b = Engine(m, contiguous(m)).generate([PROMPTS[0], PROMPTS[1]], p)[0].completions[0].token_ids
    assert a == b
    c = Engine(m, contiguous(m)).generate(
        [PROMPTS[0]], SamplingParams(max_tokens=24, temperature=0.9, top_p=0.8, seed=12,
                                     ignore_eos=True))[0].completions[0].token_ids
    assert c != a


def test_fork_n(ckpts):
    """n continuations: each equals a single request with seed + i."""
    m = load_model(ckpts["llama"])
    p = SamplingParams(max_tokens=16, temperature=1.0, seed=5, n=3, ignore_eos=True)
    r = Engine(m, contiguous(m)).generate([PROMPTS[0]], p)[0]
    assert len(r.completions) == 3
    for i, comp in enumerate(r.completions):
        q = SamplingParams(max_tokens=16, temperature=1.0, seed=5 + i, ignore_eos=True)
        alone = Engine(m, contiguous(m)).generate([PROMPTS[0]], q)[0]
        assert comp.token_ids == alone.completions[0].token_ids
    assert len({tuple(c.token_ids) for c in r.completions}) > 1


def test_recompute_after_preempt(ckpts):
    m = load_model(ckpts["mistral"])
    e = Engine(m, contiguous(m))
    r = e.add_request(PROMPTS[0], SamplingParams(max_tokens=30, ignore_eos=True))
    for _ in range(10):
        e.step()
    e.preempt(e.running[0])
    e.run()
    assert r.recomputes == 1
    assert r.completions[0].token_ids == reference_greedy(m, PROMPTS[0], 30)


def test_stop_and_bad_requests(ckpts):
    m = load_model(ckpts["llama"])
    e = Engine(m, contiguous(m))
    first = reference_greedy(m, PROMPTS[0], 3)
    r = e.generate([PROMPTS[0]], SamplingParams(max_tokens=10, stop_token_ids=(first[2],)))[0]
    assert r.completions[0].token_ids == first and r.completions[0].finish_reason == "stop"
    with pytest.raises(ValueError, match="vocabulary"):
        e.add_request([1, 999999])
    with pytest.raises(ValueError, match="empty"):
        e.add_request([])
    with pytest.raises(ValueError, match="top_p"):
        e.add_request([1], SamplingParams(top_p=0))


# ---- the command --------------------------------------------------------------------------
def test_cli(ckpts, capsys):
    from kvmm.llm.cli import main

    m = load_model(ckpts["llama"])
    ids = ",".join(map(str, PROMPTS[0]))
    assert main([ckpts["llama"], "--kv", "contiguous", "--ids", ids, "--max-tokens", "8",
                 "--ignore-eos"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "[0.0] " + ",".join(map(str, reference_greedy(m, PROMPTS[0], 8)))
    assert "token ids only" in err
    assert main([ckpts["llama"], "--kv", "contiguous", "--prompt", "hi"]) == 1
    assert "needs a tokenizer" in capsys.readouterr().err
    assert main([ckpts["llama"], "--kv", "contiguous", "--ids", "1,99999"]) == 1
    assert "vocabulary" in capsys.readouterr().err
    assert main([ckpts["llama"], "--kv", "contiguous", "--ids", "1", "--top-p", "2"]) == 1
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "kvmm-llm" in capsys.readouterr().out
