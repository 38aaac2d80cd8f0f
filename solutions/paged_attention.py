"""Paged attention: each request's queries attend over keys and values read through its block table
(exercise 127).

The batch is flat: request i owns query rows `query_start_loc[i] .. query_start_loc[i+1]-1`, which are the last
tokens of its `seq_lens[i]`-token context. Its keys live in the blocks `block_tables[i]`, in order.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from mini_llm import repeat_kv


def gather_context(cache: torch.Tensor, block_table: Sequence[int], seq_len: int) -> torch.Tensor:
    """The first `seq_len` tokens' rows `[seq_len, n_kv_heads, head_dim]` of one request from a paged cache."""
    block_size = cache.shape[1]
    blocks = torch.as_tensor(list(block_table[: -(-seq_len // block_size)]), device=cache.device)
    return cache[blocks].flatten(0, 1)[:seq_len]


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_start_loc: Sequence[int],
    seq_lens: Sequence[int],
    block_tables: Sequence[Sequence[int]],
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention for a flat batch `query [N, n_heads, head_dim]` -> `[N, n_heads, head_dim]`.

    Caches are `[num_blocks, block_size, n_kv_heads, head_dim]` and already hold this step's keys and values.
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    qsl, lens = [int(x) for x in query_start_loc], [int(x) for x in seq_lens]
    n_rep = query.shape[1] // key_cache.shape[2]
    out = torch.empty_like(query)
    for i, ctx in enumerate(lens):
        start, end = qsl[i], qsl[i + 1]
        if start == end:
            continue
        k = repeat_kv(gather_context(key_cache, block_tables[i], ctx), n_rep, head_dim_axis=1)
        v = repeat_kv(gather_context(value_cache, block_tables[i], ctx), n_rep, head_dim_axis=1)
        q = query[start:end]
        # The t queries are positions ctx-t .. ctx-1: query j sees keys 0 .. ctx-t+j.
        mask = torch.ones(end - start, ctx, dtype=torch.bool, device=query.device).tril(diagonal=ctx - (end - start))
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=mask, scale=scale)
        out[start:end] = o.transpose(0, 1)
    return out
