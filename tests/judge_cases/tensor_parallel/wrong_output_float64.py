"""Wrong: layer_forward returns its output in float64, not in x's dtype (float32). It passed every case, and chapter
12's check of the learner's layer then failed (torch.allclose: "Double did not match Float").

EXPECT: x's dtype
PUBLIC: caught
"""
import torch


def shard_layer(weights, rank, world_size, num_heads, num_kv_heads):
    inter = weights["mlp.gate_proj.weight"].shape[0]
    if num_heads % world_size or num_kv_heads % world_size or inter % world_size:
        raise ValueError("world_size must divide the heads, the KV heads and the intermediate size")
    hd = weights["self_attn.q_proj.weight"].shape[0] // num_heads
    q = slice(rank * num_heads // world_size * hd, (rank + 1) * num_heads // world_size * hd)
    kv = slice(rank * num_kv_heads // world_size * hd, (rank + 1) * num_kv_heads // world_size * hd)
    m = slice(rank * inter // world_size, (rank + 1) * inter // world_size)
    out = dict(weights)
    for name in ("q_proj", "k_proj", "v_proj"):
        out[f"self_attn.{name}.weight"] = weights[f"self_attn.{name}.weight"][q if name == "q_proj" else kv]
    out["self_attn.o_proj.weight"] = weights["self_attn.o_proj.weight"][:, q]
    out["mlp.gate_proj.weight"] = weights["mlp.gate_proj.weight"][m]
    out["mlp.up_proj.weight"] = weights["mlp.up_proj.weight"][m]
    out["mlp.down_proj.weight"] = weights["mlp.down_proj.weight"][:, m]
    return out


def rms(x, w, eps):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, positions, theta):
    hd = x.shape[-1]
    freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = positions.float()[:, None] * freq
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def layer_forward(shard, x, positions, cfg, world_size, all_reduce):
    hd, eps, T = cfg.head_dim, cfg.rms_norm_eps, x.shape[0]
    h = rms(x, shard["input_layernorm.weight"], eps)
    q = (h @ shard["self_attn.q_proj.weight"].T).view(T, -1, hd)
    k = (h @ shard["self_attn.k_proj.weight"].T).view(T, -1, hd)
    v = (h @ shard["self_attn.v_proj.weight"].T).view(T, -1, hd)
    q, k = rms(q, shard["self_attn.q_norm.weight"], eps), rms(k, shard["self_attn.k_norm.weight"], eps)
    q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    attn = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, -1)
    x = x + all_reduce(attn @ shard["self_attn.o_proj.weight"].T)
    h = rms(x, shard["post_attention_layernorm.weight"], eps)
    gate, up = h @ shard["mlp.gate_proj.weight"].T, h @ shard["mlp.up_proj.weight"].T
    return (x + all_reduce((torch.nn.functional.silu(gate) * up) @ shard["mlp.down_proj.weight"].T)).double()
