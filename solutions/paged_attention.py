"""Paged attention: each request's queries attend over keys and values read through its block table
(exercise 127).

The batch is flat: request i owns query rows `query_start_loc[i] .. query_start_loc[i+1]-1`, which are the last
tokens of its `seq_lens[i]`-token context. Its keys live in the blocks `block_tables[i]`, in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from framework.kv_cache_manager import blocks_needed
from mini_llm import repeat_kv


def gather_context(cache: torch.Tensor, block_table: Sequence[int], seq_len: int) -> torch.Tensor:
    """The first `seq_len` tokens' rows `[seq_len, n_kv_heads, head_dim]` of one request from a paged cache."""
    block_size = cache.shape[1]
    blocks = torch.as_tensor(list(block_table[: blocks_needed(seq_len, block_size)]), device=cache.device)
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


@dataclass
class PaddedGroup:
    """Requests attended together in one padded SDPA call: G requests, each padded to Q query rows and to the
    K = W * block_size key slots of a W-block table. Built once per step, on the CPU, and shared by every layer."""

    token_index: torch.Tensor  # [G, Q] flat row of each padded query (padding repeats a real row)
    out_index: torch.Tensor  # [n] flat rows this group answers ...
    padded_row: torch.Tensor  # [n] ... and where each sits in the padded output viewed as [G * Q]
    block_tables: torch.Tensor  # [G, W]
    mask: torch.Tensor  # [G, 1, Q, K] key k is visible to query row q


def build_padded_groups(query_start_loc: Sequence[int], seq_lens: Sequence[int],
                        block_tables: Sequence[Sequence[int]], block_size: int,
                        device: torch.device) -> list[PaddedGroup]:
    """Metadata for `paged_attention_batched`: decodes in one group, longer queries (prefill chunks) in another,
    so that one long prompt does not pad every decode to its length."""
    qsl, lens = np.asarray(query_start_loc, dtype=np.int64), np.asarray(seq_lens, dtype=np.int64)
    q_lens = np.diff(qsl)
    groups = []
    for members in (np.flatnonzero(q_lens == 1), np.flatnonzero(q_lens > 1)):
        if len(members) == 0:
            continue
        q, ctx, start = q_lens[members], lens[members], qsl[members]
        width = blocks_needed(int(ctx.max()), block_size)
        rows = np.arange(q.max())
        token_index = start[:, None] + np.minimum(rows[None, :], q[:, None] - 1)
        valid = rows[None, :] < q[:, None]
        padded_row = np.flatnonzero(valid)
        tables = np.zeros((len(members), width), dtype=np.int64)
        for g, i in enumerate(members):
            n = blocks_needed(int(ctx[g]), block_size)
            tables[g, :n] = block_tables[i][:n]
        # Query row r of a request is position ctx - q + r and sees keys up to there (padded rows see more,
        # harmlessly: their outputs are dropped).
        mask = np.arange(width * block_size)[None, None, :] <= (ctx - q)[:, None, None] + rows[None, :, None]
        as_dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)  # noqa: E731
        groups.append(PaddedGroup(as_dev(token_index), as_dev(token_index.reshape(-1)[padded_row]),
                                  as_dev(padded_row), as_dev(tables), as_dev(mask[:, None])))
    return groups


def paged_attention_batched(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            groups: list[PaddedGroup], scale: float | None = None,
                            workspace: GatherWorkspace | None = None) -> torch.Tensor:
    """`paged_attention` with one SDPA call per group instead of one per request (same result up to float
    rounding): gather each group's blocks through its padded block table and mask what a row may not see.
    Pass the same `workspace` to every call to gather into reused memory instead of fresh tensors."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    workspace = workspace or GatherWorkspace()
    out = torch.empty_like(query)
    for g in groups:
        k, v = (workspace.gather(name, cache, g.block_tables).transpose(1, 2)
                for name, cache in (("key", key_cache), ("value", value_cache)))
        o = F.scaled_dot_product_attention(query[g.token_index].transpose(1, 2), k, v, attn_mask=g.mask,
                                           scale=scale, enable_gqa=True)
        out[g.out_index] = o.transpose(1, 2).flatten(0, 1)[g.padded_row]
    return out


class GatherWorkspace:
    """Reused destinations for gathered blocks, one per name, grown when a step needs more rows.

    A gathered group is megabytes. Allocated afresh for every layer of every step, it can come straight from the
    operating system on CPU (glibc does so until its thresholds have adapted to blocks that large), and then every
    page faults on first touch, which costs more than the copy. A reused buffer makes the engine independent of
    the allocator's history (docs/performance.md); GPU engines get the same from a caching allocator.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def gather(self, name: str, cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
        """`[G, W * block_size, n_kv_heads, head_dim]`: each row's blocks, in order. index_select on whole
        flattened blocks copies contiguous rows, several times faster on CPU than `cache[block_tables]`."""
        n_rows = block_tables.numel()
        blocks = cache.view(cache.shape[0], -1)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape[0] < n_rows or buffer.shape[1] != blocks.shape[1] \
                or buffer.dtype != blocks.dtype or buffer.device != blocks.device:
            buffer = self._buffers[name] = blocks.new_empty((n_rows, blocks.shape[1]))
        rows = torch.index_select(blocks, 0, block_tables.flatten(), out=buffer[:n_rows])
        return rows.view(block_tables.shape[0], block_tables.shape[1] * cache.shape[1], *cache.shape[2:])
