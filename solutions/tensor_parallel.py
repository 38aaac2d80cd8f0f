"""Tensor parallelism, Megatron-style (exercise 135): which slice of each weight a rank holds, and where the
partial results are summed.

In one decoder layer, rank `r` of `world_size` holds query heads `[r*H/ws, (r+1)*H/ws)` and KV heads
`[r*KV/ws, (r+1)*KV/ws)`, so that each query head finds its KV head on its own rank (head `h` reads KV head
`h // (H/KV)`), and the MLP's intermediate columns `[r*I/ws, (r+1)*I/ws)`:

- column-parallel (output features split, weight dim 0): q_proj, k_proj, v_proj, gate_proj, up_proj;
- row-parallel (input features split, weight dim 1): o_proj and down_proj, each followed by one all-reduce that
  sums the ranks' partial outputs;
- replicated: the RMSNorm weights (input_layernorm, post_attention_layernorm, and q_norm / k_norm, which act on
  one head's head_dim, whole on every rank).

Every rank thus enters a layer with the same hidden states and leaves it with the same hidden states, after two
all-reduces. The model outside the layers: the embedding is replicated (a lookup costs nothing to compute), the
output layer is vocabulary-parallel (rank `r` computes the logits of its rows of the vocabulary, gathered on rank
0): on Qwen3-0.6B it is a quarter of the multiply-adds of a decoded token. vLLM's counterparts:
`ColumnParallelLinear`, `QKVParallelLinear`, `RowParallelLinear` (vllm/model_executor/layers/linear.py) and
`ParallelLMHead` (vllm/model_executor/layers/vocab_parallel_embedding.py).

`load_shard` reads a rank's slices straight from the safetensors files (`safe_open(...).get_slice`), so no rank
ever holds the whole model.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from mini_llm import CheckpointError, Qwen3Config, Transformer, causal_attention, rope_cos_sin
from mini_llm.model import DecoderLayer, output_logits
from mini_llm.settings import model_path

AllReduce = Callable[[torch.Tensor], torch.Tensor]  # the sum over ranks of a tensor of the same shape
Gather = Callable[[torch.Tensor], torch.Tensor]  # on rank 0, the ranks' tensors concatenated on the last axis

COLUMN_PARALLEL = {"self_attn.q_proj.weight": "q", "self_attn.k_proj.weight": "kv", "self_attn.v_proj.weight": "kv",
                   "mlp.gate_proj.weight": "mlp", "mlp.up_proj.weight": "mlp"}
ROW_PARALLEL = {"self_attn.o_proj.weight": "q", "mlp.down_proj.weight": "mlp"}


def check_divisible(num_heads: int, num_kv_heads: int, intermediate_size: int, world_size: int) -> None:
    for what, n in (("num_attention_heads", num_heads), ("num_key_value_heads", num_kv_heads),
                    ("intermediate_size", intermediate_size)):
        if n % world_size:
            raise ValueError(f"tensor parallelism over {world_size} ranks needs {what} ({n}) divisible by "
                             f"{world_size}: choose a tensor_parallel_size that divides it")


def shard_range(name: str, shape: tuple[int, ...], rank: int, world_size: int, num_heads: int,
                num_kv_heads: int) -> tuple[int, int, int] | None:
    """`(dim, start, stop)`: the part of the layer weight `name` (e.g. "self_attn.q_proj.weight", shape `shape`)
    that `rank` holds, or None when every rank holds all of it."""
    kind = COLUMN_PARALLEL.get(name) or ROW_PARALLEL.get(name)
    if kind is None:
        return None
    dim = 0 if name in COLUMN_PARALLEL else 1
    size = shape[dim]
    # q_proj's rows (o_proj's columns) are num_heads heads of head_dim; k/v of num_kv_heads; the MLP's plain.
    units = {"q": num_heads, "kv": num_kv_heads, "mlp": size}[kind]
    per_rank = size // units * (units // world_size)
    return dim, rank * per_rank, (rank + 1) * per_rank


def shard_layer(weights: dict[str, torch.Tensor], rank: int, world_size: int, num_heads: int,
                num_kv_heads: int) -> dict[str, torch.Tensor]:
    """This rank's share of one decoder layer's weights (names as in a checkpoint, without "model.layers.N.")."""
    check_divisible(num_heads, num_kv_heads, weights["mlp.gate_proj.weight"].shape[0], world_size)
    shard = {}
    for name, w in weights.items():
        part = shard_range(name, tuple(w.shape), rank, world_size, num_heads, num_kv_heads)
        shard[name] = w if part is None else w.narrow(part[0], part[1], part[2] - part[1])
    return shard


def local_config(cfg: Qwen3Config, world_size: int) -> Qwen3Config:
    """The shape of one rank's layers: its heads and its intermediate columns."""
    check_divisible(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size, world_size)
    return replace(cfg, num_attention_heads=cfg.num_attention_heads // world_size,
                   num_key_value_heads=cfg.num_key_value_heads // world_size,
                   intermediate_size=cfg.intermediate_size // world_size)


class RowParallelLinear(nn.Linear):
    """A linear layer on this rank's input features, whose partial outputs are summed over the ranks."""

    def __init__(self, in_features: int, out_features: int, all_reduce: AllReduce) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.all_reduce = all_reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.all_reduce(F.linear(x, self.weight))


def parallelize_layer(layer: DecoderLayer, all_reduce: AllReduce) -> DecoderLayer:
    """A decoder layer built on `local_config`: its o_proj and down_proj become row-parallel (same weights)."""
    for parent, name in ((layer.self_attn, "o_proj"), (layer.mlp, "down_proj")):
        dense = getattr(parent, name)
        row = RowParallelLinear(dense.in_features, dense.out_features, all_reduce).to(dense.weight)
        row.weight = dense.weight
        setattr(parent, name, row)
    return layer


def layer_forward(shard: dict[str, torch.Tensor], x: torch.Tensor, positions: torch.Tensor, cfg: Qwen3Config,
                  world_size: int, all_reduce: AllReduce) -> torch.Tensor:
    """One rank's forward pass of a decoder layer over one sequence `x [T, hidden]` (causal attention over its
    T tokens at `positions`): the whole layer's output `[T, hidden]`, the same on every rank."""
    with torch.device(x.device):
        layer = DecoderLayer(local_config(cfg, world_size), 0).to(x.dtype)
    layer.load_state_dict(shard)
    parallelize_layer(layer, all_reduce)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
    return layer(x, cos, sin, lambda _, q, k, v: causal_attention(q[None], k[None], v[None])[0])


class VocabParallelHead(nn.Module):
    """The output layer on this rank's rows of the vocabulary; `gather` brings the logits to rank 0."""

    def __init__(self, weight: torch.Tensor, vocab_size: int, world_size: int, gather: Gather) -> None:
        super().__init__()
        self.weight, self.vocab_size, self.gather = weight, vocab_size, gather
        self.rows_per_rank = -(-vocab_size // world_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """On rank 0 the full logits `[L, vocab]`; elsewhere this rank's part (unused)."""
        local = output_logits(hidden, self.weight)  # the last rank's part is padded to the others' width
        return self.gather(F.pad(local, (0, self.rows_per_rank - local.shape[-1])))[..., : self.vocab_size]


def vocab_range(vocab_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rank `rank`'s rows of the vocabulary: equal parts of ceil(vocab / world_size), the last one shorter."""
    per_rank = -(-vocab_size // world_size)  # = VocabParallelHead.rows_per_rank
    return min(rank * per_rank, vocab_size), min((rank + 1) * per_rank, vocab_size)


def _read(f, name: str, part: tuple[int, int, int] | None) -> torch.Tensor:
    if part is None:
        return f.get_tensor(name)
    dim, start, stop = part
    sliced = f.get_slice(name)
    return sliced[start:stop] if dim == 0 else sliced[:, start:stop]


def load_shard(path: str | os.PathLike | None, rank: int, world_size: int, all_reduce: AllReduce, gather: Gather,
               dtype: torch.dtype | None, device: torch.device) -> Transformer:
    """Rank `rank`'s model: `local_config` layers with row-parallel o_proj / down_proj, the replicated embedding
    and a vocabulary-parallel head, each weight read as this rank's slice of the checkpoint's tensor."""
    folder = model_path(path)
    cfg = Qwen3Config.from_json(folder / "config.json")
    with torch.device(device):
        model = Transformer(local_config(cfg, world_size))
    state = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if name.startswith("model.layers."):
                    rel = name.split(".", 3)[3]
                    part = shard_range(rel, tuple(f.get_slice(name).get_shape()), rank, world_size,
                                       cfg.num_attention_heads, cfg.num_key_value_heads)
                elif name == "lm_head.weight" and not cfg.tie_word_embeddings:
                    part = (0, *vocab_range(cfg.vocab_size, rank, world_size))
                elif name == "lm_head.weight":
                    continue  # tied: the head's rows are the embedding's
                else:
                    part = None
                state[name] = _read(f, name, part)
    dtype = dtype or next(iter(state.values())).dtype
    model = model.to(dtype)
    head = state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise CheckpointError(f"{folder} does not match its config.json: missing {missing[:5]}, unexpected "
                              f"{unexpected[:5]}")
    if head is None:
        start, stop = vocab_range(cfg.vocab_size, rank, world_size)
        head = model.model.embed_tokens.weight[start:stop]
    model.lm_head = VocabParallelHead(head.to(device, dtype), cfg.vocab_size, world_size, gather)
    for layer in model.model.layers:
        parallelize_layer(layer, all_reduce)
    return model.eval()
