# SPDX-License-Identifier: MIT
"""kvmm.llm: a small, real inference engine whose KV lives in kvmm pages.

Loads Hugging Face checkpoints of LlamaForCausalLM (Llama 2/3, TinyLlama, SmolLM, Mistral
without sliding window) and Qwen2ForCausalLM with our own safetensors reader, and generates
with continuous batching, prefix caching, forks and preemption through libkvmm. PyTorch is its
one required dependency. See Documentation/userspace-api/engine.md.
"""

from .config import ConfigError, ModelConfig, load_config, parse_config
from .engine import Completion, Engine, Request
from .kv import ContiguousKV, KVStore, StepEntry
from .model import Model, load_model
from .safetensors import Checkpoint, SafetensorsError, SafetensorsFile, write_safetensors
from .sampling import Sampler, SamplingParams

__all__ = [
    "Checkpoint", "Completion", "ConfigError", "ContiguousKV", "Engine", "KVStore", "Model",
    "ModelConfig", "Request", "SafetensorsError", "SafetensorsFile", "Sampler", "SamplingParams",
    "StepEntry", "load_config", "load_model", "parse_config", "write_safetensors",
]
