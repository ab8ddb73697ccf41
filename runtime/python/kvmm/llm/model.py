# SPDX-License-Identifier: MIT
"""The decoder of LlamaForCausalLM / Qwen2ForCausalLM in plain torch.

The forward pass works on a flat batch: N new tokens of any number of sequences, with their
positions. Everything but attention is per token, so it runs on all N at once; attention is a
callback, attn(layer, q, k, v) -> out, which the KV backend (kv.py) implements: it stores the new
k, v where the sequence's KV lives (contiguous tensors or kvmm pages) and attends each query over
its sequence's keys. reference_logits() is the no-cache forward the tests compare against:
full causal attention over the whole sequence, recomputed at every step.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch

from .config import ConfigError, ModelConfig, load_config
from .safetensors import Checkpoint

__all__ = ["Model", "AttnFn", "load_model"]

# attn(layer, q [N, heads, head_dim], k [N, kv_heads, head_dim], v [N, kv_heads, head_dim])
AttnFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies of the rotary embedding, with the checkpoint's rope scaling."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    rs = cfg.rope_scaling
    if rs is None:
        return inv.float()
    if rs["rope_type"] == "linear":
        return (inv / rs["factor"]).float()
    # llama3: long wavelengths slowed by factor, short ones kept, a smooth ramp between.
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    lo_wavelen, hi_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > lo_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = (wavelen >= hi_wavelen) & (wavelen <= lo_wavelen)
    return torch.where(medium, smoothed, out).float()


class _Layer:
    __slots__ = ("ln1", "qkv", "qkvb", "o", "ob", "ln2", "gate_up", "down")


# A linear over at least this many rows is split by rows over Model.threads threads: below
# it, handing the halves to a worker costs more than the matmul (about 50 us on the 2-CPU VM).
SPLIT_ROWS = 128


class Model:
    """Weights of one checkpoint and the forward pass over them (no autograd)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32, device="cpu"):
        self.cfg = cfg
        self.threads = 1
        self._pool = None  # the workers of set_threads(), made at the first split
        self.dtype = dtype
        self.device = torch.device(device)
        self.inv_freq = rope_inv_freq(cfg).to(self.device)
        self.layers: List[_Layer] = []
        self.embed: Optional[torch.Tensor] = None
        self.norm: Optional[torch.Tensor] = None
        self.lm_head: Optional[torch.Tensor] = None

    # ---- loading ----------------------------------------------------------------------
    def load(self, ckpt: Checkpoint) -> None:
        """Check every tensor's shape first, then read them."""
        c = self.cfg
        qd, kvd = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        want = {
            "model.embed_tokens.weight": [c.vocab_size, c.hidden_size],
            "model.norm.weight": [c.hidden_size],
        }
        if not c.tie_word_embeddings:
            want["lm_head.weight"] = [c.vocab_size, c.hidden_size]
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            want[p + "input_layernorm.weight"] = [c.hidden_size]
            want[p + "post_attention_layernorm.weight"] = [c.hidden_size]
            want[p + "self_attn.q_proj.weight"] = [qd, c.hidden_size]
            want[p + "self_attn.k_proj.weight"] = [kvd, c.hidden_size]
            want[p + "self_attn.v_proj.weight"] = [kvd, c.hidden_size]
            want[p + "self_attn.o_proj.weight"] = [c.hidden_size, qd]
            if c.qkv_bias:
                want[p + "self_attn.q_proj.bias"] = [qd]
                want[p + "self_attn.k_proj.bias"] = [kvd]
                want[p + "self_attn.v_proj.bias"] = [kvd]
            if c.o_bias:
                want[p + "self_attn.o_proj.bias"] = [c.hidden_size]
            want[p + "mlp.gate_proj.weight"] = [c.intermediate_size, c.hidden_size]
            want[p + "mlp.up_proj.weight"] = [c.intermediate_size, c.hidden_size]
            want[p + "mlp.down_proj.weight"] = [c.hidden_size, c.intermediate_size]
        for name, shape in want.items():
            if name not in ckpt:
                raise ValueError(f"{ckpt.directory}: tensor {name} missing")
            if ckpt.shape(name) != shape:
                raise ValueError(
                    f"{ckpt.directory}: tensor {name} is {ckpt.shape(name)}, config says {shape}"
                )
            if ckpt.dtype(name) not in _DTYPES.values():
                raise ValueError(f"{ckpt.directory}: tensor {name} is {ckpt.dtype(name)}")

        def get(name):
            return ckpt.get(name).to(device=self.device, dtype=self.dtype)

        self.embed = get("model.embed_tokens.weight")
        self.norm = get("model.norm.weight")
        self.lm_head = self.embed if c.tie_word_embeddings else get("lm_head.weight")
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            L = _Layer()
            L.ln1 = get(p + "input_layernorm.weight")
            L.ln2 = get(p + "post_attention_layernorm.weight")
            # q, k and v in one matmul: [(heads + 2 * kv_heads) * head_dim, hidden]
            L.qkv = torch.cat([get(p + f"self_attn.{w}_proj.weight") for w in "qkv"], 0)
            L.qkvb = (torch.cat([get(p + f"self_attn.{w}_proj.bias") for w in "qkv"], 0)
                      if c.qkv_bias else None)
            L.o = get(p + "self_attn.o_proj.weight")
            L.ob = get(p + "self_attn.o_proj.bias") if c.o_bias else None
            # gate and up in one matmul: [2 * intermediate, hidden]
            L.gate_up = torch.cat(
                [get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0
            )
            L.down = get(p + "mlp.down_proj.weight")
            self.layers.append(L)

    # ---- the pieces ---------------------------------------------------------------------
    def _rmsnorm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        return w * xf.to(x.dtype)

    def rope_angles(self, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [N, 1, head_dim / 2] of the tokens' positions, in the model's dtype:
        computed once a forward pass, shared by every layer's q and k."""
        f = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        return f.cos().to(self.dtype)[:, None, :], f.sin().to(self.dtype)[:, None, :]

    def rope(self, x: torch.Tensor, positions: torch.Tensor,
             angles: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Rotate x [N, heads, head_dim] by its token's position (the halves convention);
        angles: rope_angles(positions), when already computed."""
        cos, sin = angles if angles is not None else self.rope_angles(positions)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def set_threads(self, n: int) -> None:
        """Split every linear of at least SPLIT_ROWS rows (a prefill's) over n threads, each
        multiplying a block of rows (torch releases the GIL inside the matmul); 1: no split.

        For a torch whose BLAS runs one thread whatever torch.set_num_threads says: Debian's
        python3-torch on the reference BLAS computes a prefill's linears on one CPU otherwise.
        Each output row is the same dot products whichever block it falls in, so the result
        does not depend on n.  With a threaded BLAS (MKL, OpenBLAS) use
        torch.set_num_threads instead; on a GPU this changes nothing."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
            raise ValueError(f"threads: {n!r} is not an integer between 1 and 64")
        if n > 1 and (self._pool is None or self._pool._max_workers < n - 1):
            from concurrent.futures import ThreadPoolExecutor

            if self._pool is not None:
                self._pool.shutdown()
            self._pool = ThreadPoolExecutor(n - 1, thread_name_prefix="kvmm-linear")
        self.threads = n

    def _linear(self, x, w, b=None):
        n = x.shape[0]
        if self.threads > 1 and n >= SPLIT_ROWS and x.dim() == 2 and x.device.type == "cpu":
            y = torch.empty(n, w.shape[0], dtype=torch.result_type(x, w))
            step = -(-n // self.threads)
            jobs = [self._pool.submit(torch.matmul, x[r:r + step], w.t(), out=y[r:r + step])
                    for r in range(step, n, step)]
            torch.matmul(x[:step], w.t(), out=y[:step])
            for j in jobs:
                j.result()
        else:
            y = torch.matmul(x, w.t())
        return y + b if b is not None else y

    # ---- forward ------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn: AttnFn) -> torch.Tensor:
        """Hidden states [N, hidden] after the final norm, for N tokens of a flat batch."""
        c = self.cfg
        n = tokens.shape[0]
        x = self.embed[tokens.to(self.device)]
        positions = positions.to(self.device)
        angles = self.rope_angles(positions)
        qd, kvd = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        for i, L in enumerate(self.layers):
            h = self._rmsnorm(x, L.ln1)
            q, k, v = self._linear(h, L.qkv, L.qkvb).split([qd, kvd, kvd], -1)
            q = self.rope(q.reshape(n, c.num_heads, c.head_dim), positions, angles)
            k = self.rope(k.reshape(n, c.num_kv_heads, c.head_dim), positions, angles)
            v = v.reshape(n, c.num_kv_heads, c.head_dim)
            a = attn(i, q, k, v).reshape(n, c.num_heads * c.head_dim).to(x.dtype)
            x = x + self._linear(a, L.o, L.ob)
            h = self._rmsnorm(x, L.ln2)
            gu = self._linear(h, L.gate_up)
            g, u = gu.split(c.intermediate_size, -1)
            x = x + self._linear(torch.nn.functional.silu(g) * u, L.down)
        return self._rmsnorm(x, self.norm)

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [M, vocab] of M hidden rows."""
        return self._linear(hidden, self.lm_head).float()

    @torch.no_grad()
    def reference_logits(self, tokens: List[int]) -> torch.Tensor:
        """Logits [T, vocab] of every position of one sequence with no cache at all: full
        causal attention over the whole sequence (the tests' ground truth)."""
        t = torch.tensor(tokens, dtype=torch.long)
        return self.logits(self.forward(t, torch.arange(len(tokens)), self._full_attention))

    def _full_attention(self, layer, q, k, v):
        return causal_attention(q, k, v, 0)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """Attention of q [n, H, D] (positions past .. past+n-1) over k, v [past+n, KVH, D]: each
    query sees the keys up to its own position. Computed in fp32; returns [n, H, D]."""
    n, heads, d = q.shape
    total, kvh = k.shape[0], k.shape[1]
    g = heads // kvh
    qf = q.float().view(n, kvh, g, d).permute(1, 2, 0, 3)  # [KVH, g, n, D]
    kf = k.float().permute(1, 2, 0)[:, None]  # [KVH, 1, D, total]
    vf = v.float().permute(1, 0, 2)[:, None]  # [KVH, 1, total, D]
    s = torch.matmul(qf, kf) * (1.0 / math.sqrt(d))  # [KVH, g, n, total]
    if n > 1:
        qpos = torch.arange(past, past + n, device=q.device)[:, None]
        mask = torch.arange(total, device=q.device)[None, :] > qpos
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, -1)
    o = torch.matmul(p, vf)  # [KVH, g, n, D]
    return o.permute(2, 0, 1, 3).reshape(n, heads, d)


def load_model(directory: str, dtype: Optional[torch.dtype] = None, device="cpu") -> Model:
    """Read config.json (refusing what we do not support before touching a weight), then the
    weights. dtype None: float32 on CPU, the checkpoint's dtype elsewhere."""
    cfg = load_config(directory)
    if dtype is None:
        dtype = torch.float32 if str(device) == "cpu" else _DTYPES[cfg.torch_dtype]
    ckpt = Checkpoint(directory)
    m = Model(cfg, dtype=dtype, device=device)
    m.load(ckpt)
    return m


__all__ += ["causal_attention", "rope_inv_freq", "ConfigError"]
