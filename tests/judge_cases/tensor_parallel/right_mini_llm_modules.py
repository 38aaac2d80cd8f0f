"""Correct: torch.chunk over head groups, and mini_llm's own modules on a config with this rank's heads."""
from dataclasses import replace

import torch

from mini_llm import causal_attention, rope_cos_sin
from mini_llm.model import DecoderLayer

SPLIT = {"self_attn.q_proj.weight": ("q", 0), "self_attn.k_proj.weight": ("kv", 0),
         "self_attn.v_proj.weight": ("kv", 0), "self_attn.o_proj.weight": ("q", 1),
         "mlp.gate_proj.weight": ("mlp", 0), "mlp.up_proj.weight": ("mlp", 0), "mlp.down_proj.weight": ("mlp", 1)}


def shard_layer(weights, rank, world_size, num_heads, num_kv_heads):
    if num_heads % world_size or num_kv_heads % world_size or \
            weights["mlp.gate_proj.weight"].shape[0] % world_size:
        raise ValueError(f"{world_size} ranks do not divide {num_heads} heads / {num_kv_heads} KV heads")
    shard = {}
    for name, w in weights.items():
        if name not in SPLIT:
            shard[name] = w.clone()
            continue
        _, dim = SPLIT[name]
        shard[name] = torch.chunk(w, world_size, dim=dim)[rank].clone()  # heads are contiguous blocks of rows
    return shard


class Reduced(torch.nn.Module):
    def __init__(self, linear, all_reduce):
        super().__init__()
        self.linear, self.all_reduce = linear, all_reduce

    def forward(self, x):
        return self.all_reduce(self.linear(x))


def layer_forward(shard, x, positions, cfg, world_size, all_reduce):
    local = replace(cfg, num_attention_heads=cfg.num_attention_heads // world_size,
                    num_key_value_heads=cfg.num_key_value_heads // world_size,
                    intermediate_size=shard["mlp.gate_proj.weight"].shape[0])
    layer = DecoderLayer(local, 0)
    layer.load_state_dict(shard)
    layer.self_attn.o_proj = Reduced(layer.self_attn.o_proj, all_reduce)
    layer.mlp.down_proj = Reduced(layer.mlp.down_proj, all_reduce)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
    out = layer(x[None], cos[None], sin[None], lambda _, q, k, v: causal_attention(q, k, v))
    return out[0]
