# SPDX-License-Identifier: MIT
"""config.json of a Hugging Face checkpoint, for the architectures kvmm.llm runs.

LlamaForCausalLM covers Llama 2 and 3 (llama3 and linear rope scaling), TinyLlama, SmolLM and
Mistral checkpoints without a sliding window; Qwen2ForCausalLM adds biases to q, k and v. A
field we do not implement is refused here, naming the field, before any weight is read: a
model that loads is a model we compute correctly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["ConfigError", "ModelConfig", "load_config", "parse_config"]

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


class ConfigError(ValueError):
    """A config.json kvmm.llm cannot run; .field names the offending key."""

    def __init__(self, fieldname: str, msg: str):
        super().__init__(f"config.json: {fieldname}: {msg}")
        self.field = fieldname


@dataclass
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool  # biases on q, k, v (Qwen2; Llama's attention_bias)
    o_bias: bool  # bias on o_proj (Llama's attention_bias only)
    rope_scaling: Optional[Dict[str, Any]] = None
    torch_dtype: str = "float32"
    bos_token_id: Optional[int] = None
    eos_token_ids: List[int] = field(default_factory=list)


def _get(cfg: Dict[str, Any], key: str, kind, default=None, required=False):
    if key not in cfg or cfg[key] is None:
        if required:
            raise ConfigError(key, "missing")
        return default
    v = cfg[key]
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(key, f"{v!r} is not a positive integer")
    elif kind is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(key, f"{v!r} is not a positive number")
        v = float(v)
    elif kind is bool:
        if not isinstance(v, bool):
            raise ConfigError(key, f"{v!r} is not true or false")
    return v


def _rope_scaling(cfg: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    rs = cfg.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ConfigError("rope_scaling", "not an object")
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": _get(rs, "factor", float, required=True)}
    if kind == "llama3":
        out = {"rope_type": "llama3"}
        for k in ("factor", "low_freq_factor", "high_freq_factor"):
            try:
                out[k] = _get(rs, k, float, required=True)
            except ConfigError as e:
                raise ConfigError(f"rope_scaling.{k}", str(e).split(": ", 2)[-1]) from None
        try:
            out["original_max_position_embeddings"] = _get(
                rs, "original_max_position_embeddings", int, required=True
            )
        except ConfigError as e:
            raise ConfigError(
                "rope_scaling.original_max_position_embeddings", str(e).split(": ", 2)[-1]
            ) from None
        if out["high_freq_factor"] <= out["low_freq_factor"]:
            raise ConfigError("rope_scaling.high_freq_factor", "not above low_freq_factor")
        return out
    raise ConfigError("rope_scaling.rope_type", f"{kind!r} is not supported (linear, llama3)")


def parse_config(cfg: Dict[str, Any]) -> ModelConfig:
    """Check a config.json dict and return the fields the model uses."""
    if not isinstance(cfg, dict):
        raise ConfigError("(top level)", "not a JSON object")
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise ConfigError("architectures", f"{archs!r}: expected one architecture name")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise ConfigError("architectures", f"{arch} is not supported ({', '.join(ARCHITECTURES)})")

    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError("hidden_act", f"{act!r} is not supported (silu)")
    # Llama and Mistral configs use sliding_window for Mistral's local attention; Qwen2 says
    # use_sliding_window. A window smaller than the context changes the attention we compute.
    if arch == "Qwen2ForCausalLM":
        if cfg.get("use_sliding_window"):
            raise ConfigError("use_sliding_window", "sliding-window attention is not supported")
    elif cfg.get("sliding_window") is not None:
        raise ConfigError("sliding_window", "sliding-window attention is not supported")
    if cfg.get("mlp_bias"):
        raise ConfigError("mlp_bias", "biases in the MLP are not supported")
    if cfg.get("pretraining_tp", 1) not in (1, None):
        raise ConfigError("pretraining_tp", "only 1 is supported")
    for k in ("quantization_config",):
        if cfg.get(k) is not None:
            raise ConfigError(k, "quantized checkpoints are not supported")

    hidden = _get(cfg, "hidden_size", int, required=True)
    heads = _get(cfg, "num_attention_heads", int, required=True)
    kv_heads = _get(cfg, "num_key_value_heads", int, default=heads)
    if heads % kv_heads:
        raise ConfigError("num_key_value_heads", f"{kv_heads} does not divide {heads} heads")
    head_dim = _get(cfg, "head_dim", int, default=None)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError("num_attention_heads", f"{heads} does not divide {hidden}")
        head_dim = hidden // heads
    if head_dim % 2:
        raise ConfigError("head_dim", f"{head_dim} is odd: rotary embedding needs pairs")

    if arch == "Qwen2ForCausalLM":
        qkv_bias, o_bias = True, False
    else:
        qkv_bias = o_bias = bool(_get(cfg, "attention_bias", bool, default=False))

    eos = cfg.get("eos_token_id")
    eos_ids = [eos] if isinstance(eos, int) else [e for e in (eos or []) if isinstance(e, int)]
    dtype = cfg.get("torch_dtype") or "float32"
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ConfigError("torch_dtype", f"{dtype!r} is not supported (float32, float16, bfloat16)")

    return ModelConfig(
        architecture=arch,
        vocab_size=_get(cfg, "vocab_size", int, required=True),
        hidden_size=hidden,
        intermediate_size=_get(cfg, "intermediate_size", int, required=True),
        num_layers=_get(cfg, "num_hidden_layers", int, required=True),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=_get(cfg, "rms_norm_eps", float, default=1e-6),
        rope_theta=_get(cfg, "rope_theta", float, default=10000.0),
        max_position_embeddings=_get(cfg, "max_position_embeddings", int, default=4096),
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", bool, default=False)),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        rope_scaling=_rope_scaling(cfg),
        torch_dtype=dtype,
        bos_token_id=cfg.get("bos_token_id") if isinstance(cfg.get("bos_token_id"), int) else None,
        eos_token_ids=eos_ids,
    )


def load_config(directory: str) -> ModelConfig:
    path = os.path.join(directory, "config.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except OSError as e:
        raise ConfigError("(file)", f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ConfigError("(file)", f"{path} is not JSON: {e}") from None
    return parse_config(cfg)
