# VIOLATES: Return the layer's output `[T, hidden]` in `x`'s dtype
"""Returns the output in float64, not in x's dtype (float32)."""
import math

import torch
import torch.nn.functional as F

from mini_llm.model import apply_rope, rope_cos_sin

NORMS = ("input_layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
         "post_attention_layernorm.weight")


class BadWorldSize(ValueError):
    pass


def _piece(t, dim, rank, parts):
    size = t.shape[dim] // parts
    return t.narrow(dim, rank * size, size).clone()


def shard_layer(weights, rank, world_size, num_heads, num_kv_heads):
    inter = weights["mlp.gate_proj.weight"].shape[0]
    for what, n in (("query heads", num_heads), ("KV heads", num_kv_heads)):
        if n % world_size:
            raise BadWorldSize(f"{world_size} ranks cannot share {n} {what}")
    if inter % world_size:
        raise BadWorldSize(f"{world_size} ranks cannot share an intermediate size of {inter}")
    split = {"self_attn.q_proj.weight": 0, "self_attn.k_proj.weight": 0, "self_attn.v_proj.weight": 0,
             "self_attn.o_proj.weight": 1, "mlp.gate_proj.weight": 0, "mlp.up_proj.weight": 0,
             "mlp.down_proj.weight": 1}
    out = {}
    for name, t in weights.items():
        if name in NORMS:
            out[name] = t.clone()
        else:
            out[name] = _piece(t, split[name], rank, world_size)
    return out


def _rms(x, w, eps):
    xf = x.float()
    return (w.float() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _attention(q, k, v):
    t, hd = q.shape[0], q.shape[-1]
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = torch.einsum("thd,shd->hts", q.float(), k.float()) / math.sqrt(hd)
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v.float()).to(q.dtype)


def layer_forward(shard, x, positions, cfg, world_size, all_reduce):
    eps, hd, t = cfg.rms_norm_eps, cfg.head_dim, x.shape[0]
    w = lambda name: shard[name]  # noqa: E731
    h = _rms(x, w("input_layernorm.weight"), eps)
    q = (h @ w("self_attn.q_proj.weight").T).view(t, -1, hd)
    k = (h @ w("self_attn.k_proj.weight").T).view(t, -1, hd)
    v = (h @ w("self_attn.v_proj.weight").T).view(t, -1, hd)
    q = _rms(q, w("self_attn.q_norm.weight"), eps)
    k = _rms(k, w("self_attn.k_norm.weight"), eps)
    cos, sin = rope_cos_sin(positions, hd, cfg.rope_theta)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    attn = _attention(q, k, v).reshape(t, -1) @ w("self_attn.o_proj.weight").T
    x = x + all_reduce(attn)
    h = _rms(x, w("post_attention_layernorm.weight"), eps)
    mlp = (F.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)) @ w("mlp.down_proj.weight").T
    return (x + all_reduce(mlp)).double()
