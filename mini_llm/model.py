"""The Qwen3 architecture from scratch: RMSNorm, RoPE, grouped-query attention with QK-norm, SwiGLU.

Module and parameter names match Hugging Face checkpoints (`model.layers.N.self_attn.q_proj`, ...), so a
`model.safetensors` file loads with `load_state_dict` and nothing renamed.

Attention is pluggable: every layer computes q, k, v and hands them to an `attend(layer_idx, q, k, v)`
callable. `forward` plugs in plain causal attention; the KV-cache generator and the course's paged engine plug
in their own, so one model body serves all of them.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import Qwen3Config

# attend(layer_idx, q [..., n_heads, hd], k [..., n_kv_heads, hd], v [..., n_kv_heads, hd]) -> [..., n_heads, hd]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: bf16 squares lose too much precision.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * xf).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape `[*positions.shape, head_dim]` (fp32) for rotary embeddings.

    Qwen3 rotates the two halves of each head (not interleaved pairs): dimension i pairs with i + head_dim/2,
    both at frequency theta ** (-2i / head_dim).
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x [..., n_heads, head_dim]` by the tables `[..., head_dim]` (broadcast over heads)."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def repeat_kv(x: torch.Tensor, n_rep: int, head_dim_axis: int = -3) -> torch.Tensor:
    """Grouped-query attention: query head h reads KV head h // n_rep, so each KV head is repeated in place."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=head_dim_axis)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention over `[B, T, heads, hd]` tensors (no cache)."""
    n_rep = q.shape[-2] // k.shape[-2]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, hd]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.hd, cfg.hidden_size, bias=False)
        # QK-norm: RMSNorm over each head's query and key vector, before RoPE.
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        lead = x.shape[:-1]
        q = self.q_norm(self.q_proj(x).view(*lead, self.n_heads, self.hd))
        k = self.k_norm(self.k_proj(x).view(*lead, self.n_kv_heads, self.hd))
        v = self.v_proj(x).view(*lead, self.n_kv_heads, self.hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = attend(self.layer_idx, q, k, v)
        return self.o_proj(out.reshape(*lead, self.n_heads * self.hd))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


# Vocabulary rows per product of the output layer on CPU (`output_logits`).
VOCAB_SLICE = 2048


def output_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.linear(hidden, weight)` for the output layer. On CPU, MKL streams a few rows' product with a
    151,936-row weight at about 60 % of the speed it reaches on slices of a couple of thousand rows
    (docs/performance.md), so it runs slice by slice there; each logit is the same dot product either way."""
    if hidden.device.type != "cpu" or weight.shape[0] <= VOCAB_SLICE:
        return F.linear(hidden, weight)
    return torch.cat([F.linear(hidden, part) for part in weight.split(VOCAB_SLICE)], dim=-1)


class OutputHead(nn.Linear):
    """The output layer (`lm_head`): an `nn.Linear` without bias, computed by `output_logits`."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return output_logits(hidden, self.weight)


class Qwen3Body(nn.Module):
    """What Hugging Face calls `model`: embeddings, the decoder layers and the final norm."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Transformer(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen3Body(cfg)
        self.lm_head = OutputHead(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        """Final-norm hidden states for any token layout: `[B, T]` batches or the engine's flat `[N]` tokens."""
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attend)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits `[B, T, vocab]` for right-aligned, unpadded token ids `[B, T]`."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(input_ids.shape)}")
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        hidden = self.hidden_states(input_ids, positions, lambda _, q, k, v: causal_attention(q, k, v))
        return self.compute_logits(hidden)
