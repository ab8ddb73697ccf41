# SPDX-License-Identifier: MIT
"""Tiny random checkpoints of each supported architecture, for tests and benchmarks.

The weights are drawn from a fixed seed with scales that keep activations O(1) through the
layers and spread the logits, so greedy decoding is not decided by rounding noise.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

import torch

from .safetensors import write_safetensors, write_sharded

__all__ = ["ARCHS", "tiny_config", "write_checkpoint"]

ARCHS = ("llama", "llama3", "qwen2", "mistral")


def tiny_config(arch: str = "llama", **over) -> Dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if arch == "llama3":
        cfg.update(
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            tie_word_embeddings=True,
        )
    elif arch == "qwen2":
        cfg.update(
            architectures=["Qwen2ForCausalLM"],
            model_type="qwen2",
            use_sliding_window=False,
            sliding_window=4096,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            num_key_value_heads=1,
        )
    elif arch == "mistral":
        cfg.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None)
    elif arch != "llama":
        raise ValueError(f"unknown test architecture {arch!r} ({', '.join(ARCHS)})")
    cfg.update(over)
    return cfg


def write_checkpoint(
    directory: str,
    arch: str = "llama",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    shards: int = 1,
    config: Optional[Dict] = None,
) -> Dict:
    """Write config.json and random weights of arch into directory; returns the config."""
    cfg = config if config is not None else tiny_config(arch)
    g = torch.Generator().manual_seed(seed)
    hid, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim", hid // heads)
    qwen = cfg["architectures"][0] == "Qwen2ForCausalLM"

    def w(*shape, scale=1.0):
        fan_in = shape[-1]
        return torch.randn(*shape, generator=g) * (scale / fan_in**0.5)

    # a tied lm_head scores each token by its embedding: kept small there, or the last token's
    # own embedding in the residual stream wins every step and the model repeats it
    escale = 0.1 if cfg.get("tie_word_embeddings") else 1.0
    t = {"model.embed_tokens.weight": escale * torch.randn(cfg["vocab_size"], hid, generator=g)}
    t["model.norm.weight"] = 1 + 0.1 * torch.randn(hid, generator=g)
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = w(cfg["vocab_size"], hid, scale=4.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(hid, generator=g)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(hid, generator=g)
        # q and k scaled up so attention is peaked, not uniform: positions matter
        t[p + "self_attn.q_proj.weight"] = w(heads * hd, hid, scale=3.0)
        t[p + "self_attn.k_proj.weight"] = w(kvh * hd, hid, scale=3.0)
        t[p + "self_attn.v_proj.weight"] = w(kvh * hd, hid)
        t[p + "self_attn.o_proj.weight"] = w(hid, heads * hd, scale=0.7)
        if qwen:
            t[p + "self_attn.q_proj.bias"] = 0.1 * torch.randn(heads * hd, generator=g)
            t[p + "self_attn.k_proj.bias"] = 0.1 * torch.randn(kvh * hd, generator=g)
            t[p + "self_attn.v_proj.bias"] = 0.1 * torch.randn(kvh * hd, generator=g)
        t[p + "mlp.gate_proj.weight"] = w(inter, hid)
        t[p + "mlp.up_proj.weight"] = w(inter, hid)
        t[p + "mlp.down_proj.weight"] = w(hid, inter, scale=0.7)
    t = {k: v.to(dtype) for k, v in t.items()}
    cfg = dict(cfg, torch_dtype={torch.float32: "float32", torch.float16: "float16",
                                 torch.bfloat16: "bfloat16"}[dtype])
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if shards > 1:
        names = sorted(t)
        parts = [{n: t[n] for n in names[i::shards]} for i in range(shards)]
        write_sharded(directory, parts)
    else:
        write_safetensors(os.path.join(directory, "model.safetensors"), t)
    return cfg
