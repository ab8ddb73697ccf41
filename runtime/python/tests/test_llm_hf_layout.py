# SPDX-License-Identifier: MIT
"""A checkpoint directory exactly as Hugging Face publishes one, read by kvmm.llm.

transformers is not installed here (and there is no network), so the directory is written by
this test, without kvmm.llm's own writer: the config.json keys of a real Llama
(TinyLlama-1.1B-Chat's) and Qwen2 (Qwen2.5-0.5B-Instruct's) release, shrunk; the weights in
bfloat16 under transformers' tensor names, in the safetensors layout the `safetensors` package
writes (an 8-byte header length, a JSON header with "__metadata__": {"format": "pt"} padded
with spaces to 8 bytes, the tensors back to back), one file or two shards with
model.safetensors.index.json; generation_config.json, tokenizer_config.json,
special_tokens_map.json and a tokenizer.json beside them (the tokenizer is optional: without
the `tokenizers` package kvmm.llm works on ids).

Checked: the model kvmm.llm loads computes what a Llama/Qwen2 forward written here from the
raw tensors computes (transformers' conventions: rotate-half RoPE, GQA, RMSNorm in fp32,
SiLU MLP, q/k/v biases for Qwen2, a tied head); and `kvmm-agents` runs on the directory given
as KVMM_MODEL, in the shared and pressure modes, with identical outputs."""

import json
import math
import os
import struct
import subprocess
import sys

import pytest

from conftest import kvmmd_path

torch = pytest.importorskip("torch")
try:
    from kvmm.llm.model import load_model
except ImportError as e:
    pytest.skip(f"kvmm.llm not importable: {e}", allow_module_level=True)

TREE = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

LLAMA = {  # TinyLlama/TinyLlama-1.1B-Chat-v1.0's config.json, the sizes shrunk
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": True,
    "vocab_size": 320,
}
QWEN2 = {  # Qwen/Qwen2.5-0.5B-Instruct's config.json, the sizes shrunk
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 192, "max_position_embeddings": 32768,
    "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 300,
}


def hf_tensors(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    hid, inter, voc = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = hid // heads

    def r(*shape, s=1.0):
        return (torch.randn(*shape, generator=g) * s / math.sqrt(shape[-1])).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": r(voc, hid, s=hid ** 0.5 * 0.3),
         "model.norm.weight": (1 + 0.1 * torch.randn(hid, generator=g)).to(torch.bfloat16)}
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = r(voc, hid, s=4.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            t[p + n + ".weight"] = (1 + 0.1 * torch.randn(hid, generator=g)).to(torch.bfloat16)
        t[p + "self_attn.q_proj.weight"] = r(heads * hd, hid, s=3.0)
        t[p + "self_attn.k_proj.weight"] = r(kvh * hd, hid, s=3.0)
        t[p + "self_attn.v_proj.weight"] = r(kvh * hd, hid)
        t[p + "self_attn.o_proj.weight"] = r(hid, heads * hd)
        if cfg["model_type"] == "qwen2":
            for n, o in (("q", heads), ("k", kvh), ("v", kvh)):
                t[p + f"self_attn.{n}_proj.bias"] = (0.1 * torch.randn(o * hd, generator=g)
                                                     ).to(torch.bfloat16)
        t[p + "mlp.gate_proj.weight"] = r(inter, hid)
        t[p + "mlp.up_proj.weight"] = r(inter, hid)
        t[p + "mlp.down_proj.weight"] = r(hid, inter)
    return t


def save_file(tensors, path):
    """What safetensors.torch.save_file writes: header length, a JSON header (metadata
    format pt; tensors in name order, offsets back to back), spaces to an 8-byte boundary."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes()  # bf16: numpy has no such type
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return off


def write_hf(directory, cfg, shards=1, seed=0):
    os.makedirs(directory)
    t = hf_tensors(cfg, seed)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
                   "max_length": 2048, "transformers_version": cfg["transformers_version"]}, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "model_max_length": 2048,
                   "tokenizer_class": "LlamaTokenizer"}, f)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}, f)
    if shards == 1:
        save_file(t, os.path.join(directory, "model.safetensors"))
    else:
        names = sorted(t)
        weight_map, total = {}, 0
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: t[n] for n in names[s::shards]}
            total += save_file(part, os.path.join(directory, fname))
            weight_map.update({n: fname for n in part})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return {k: v.float() for k, v in t.items()}


def hf_forward(cfg, w, ids):
    """Logits of a Llama/Qwen2 decoder as transformers computes them, from the raw tensors."""
    hid, heads, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, n = hid // heads, cfg["rms_norm_eps"], len(ids)

    def rms(x, wt):
        return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), -1)

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos().float()[:, None, :], emb.sin().float()[:, None, :]
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.full((n, n), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])

        def proj(name, o):
            y = h @ w[p + f"self_attn.{name}_proj.weight"].T
            b = w.get(p + f"self_attn.{name}_proj.bias")
            return (y if b is None else y + b).view(n, o, hd)

        q, k, v = proj("q", heads), proj("k", kvh), proj("v", kvh)
        q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
        k = k.repeat_interleave(heads // kvh, 1)
        v = v.repeat_interleave(heads // kvh, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
        a = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(n, hid)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        m = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (
            h @ w[p + "mlp.up_proj.weight"].T)
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms(x, w["model.norm.weight"]) @ head.T


@pytest.mark.parametrize("cfg,shards", [(LLAMA, 1), (LLAMA, 2), (QWEN2, 1)],
                         ids=["llama", "llama-sharded", "qwen2"])
def test_hf_directory_loads_and_computes(tmp_path, cfg, shards):
    d = str(tmp_path / "ckpt")
    w = write_hf(d, cfg, shards)
    m = load_model(d)
    assert m.cfg.vocab_size == cfg["vocab_size"] and m.cfg.num_kv_heads == cfg[
        "num_key_value_heads"]
    ids = [(7 * i + 3) % cfg["vocab_size"] for i in range(40)]
    got = m.reference_logits(ids).float()
    want = hf_forward(cfg, w, ids)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=2e-3, rtol=2e-3), (got - want).abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.skipif(not os.access(kvmmd_path(), os.X_OK), reason="kvmmd not built")
def test_agents_on_hf_directory(tmp_path):
    """KVMM_MODEL=DIR: the demo's driver on the HF-layout directory (Qwen2: one KV head,
    tied head, biases), 2 agents, shared and pressure, outputs identical."""
    d = str(tmp_path / "qwen")
    write_hf(d, QWEN2, seed=5)
    env = dict(os.environ, KVMM_MODEL=d)
    r = subprocess.run(
        [sys.executable, os.path.join(TREE, "tools", "kvmm-agents"), "--agents", "2",
         "--system-tokens", "64", "--tool-tokens", "64", "--instruction-tokens", "32",
         "--answer-tokens", "8", "--modes", "shared,pressure", "--timeout", "120"],
        env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"on {d}" in r.stdout
    assert "identical in shared, pressure" in r.stdout
