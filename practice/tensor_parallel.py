"""Exercise 135 — shard the layer (tensor parallelism).

Statement: practice/exercises/135-tensor-parallel.md. Grade: `python practice/judge.py 135`.
"""

from __future__ import annotations

from typing import Callable

import torch

from mini_llm import Qwen3Config


def shard_layer(weights: dict[str, torch.Tensor], rank: int, world_size: int, num_heads: int,
                num_kv_heads: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s share of one decoder layer's weights, for tensor parallelism over `world_size` ranks.

    weights: the layer's weights by checkpoint name without the "model.layers.N." prefix: input_layernorm.weight,
        self_attn.{q,k,v,o}_proj.weight, self_attn.{q,k}_norm.weight, post_attention_layernorm.weight,
        mlp.{gate,up,down}_proj.weight (PyTorch layout: [out_features, in_features]).
    Rank r holds query heads r*H/ws .. (r+1)*H/ws - 1, KV heads r*KV/ws .. (r+1)*KV/ws - 1 and the MLP's
    intermediate columns r*I/ws .. (r+1)*I/ws - 1. q/k/v/gate/up are split along their output features (dim 0),
    o_proj and down_proj along their input features (dim 1); the four RMSNorm weights are whole on every rank.

    Returns a dict with the same keys. Raises ValueError when world_size does not divide num_heads, num_kv_heads
    or the intermediate size. Does not modify `weights`.
    """
    raise NotImplementedError("exercise 135: shard_layer is not implemented yet (practice/tensor_parallel.py)")


def layer_forward(shard: dict[str, torch.Tensor], x: torch.Tensor, positions: torch.Tensor, cfg: Qwen3Config,
                  world_size: int, all_reduce: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """One rank's forward pass of the decoder layer whose share is `shard` (as shard_layer returns it).

    x: [T, hidden], one sequence's hidden states, the same on every rank; positions: [T] (its RoPE positions);
    attention is causal over these T tokens. cfg: the whole model's config (head_dim, rms_norm_eps, rope_theta,
    num_attention_heads, num_key_value_heads). all_reduce(t) returns the sum of `t` over the ranks (use what it
    returns); call it exactly twice: on o_proj's output and on down_proj's output.

    Returns the layer's output [T, hidden] (residuals included) in x's dtype, the same on every rank.
    """
    raise NotImplementedError("exercise 135: layer_forward is not implemented yet (practice/tensor_parallel.py)")
