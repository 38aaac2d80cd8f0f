"""The least glue that turns a shipped function into an exercise's API, shared by candidates of several chapters."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Callable

import torch

FIELDS = ("input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "logits_indices")


def build_batch_from(layout: Callable) -> Callable:
    """Exercise 128's build_batch from a function of (items, block_size) returning the batch's fields (a dict, or
    a sequence in the order of FIELDS), with the statement's check of the block tables added."""

    def build_batch(items, block_size):
        for i, (token_ids, num_computed, table, _) in enumerate(items):
            if len(table) * block_size < num_computed + len(token_ids):
                raise ValueError(f"request {i}: its block table is too short")
        out = layout(items, block_size)
        fields = dict(out) if isinstance(out, dict) else dict(zip(FIELDS, out))
        batch = {k: torch.as_tensor(fields[k], dtype=torch.long) for k in FIELDS if k in fields}
        return SimpleNamespace(**batch, block_tables=[list(it[2]) for it in items])

    return build_batch


def paged_attention_from(attention: Callable) -> Callable:
    """Exercise 127's paged_attention from a function of (q, k, v) over one request's contiguous context, scaled by
    1/sqrt(head_dim), with the gather through the block table that the chapters show (and the statement's `scale`
    folded into the queries)."""

    def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
        if scale is not None:
            query = query * (scale * math.sqrt(query.shape[-1]))
        qsl, out = [int(x) for x in query_start_loc], []
        for i, table in enumerate(block_tables):
            n = int(seq_lens[i])
            k = key_cache[list(table)].flatten(0, 1)[:n]
            v = value_cache[list(table)].flatten(0, 1)[:n]
            out.append(attention(query[qsl[i]:qsl[i + 1]], k, v))
        return torch.cat(out) if out else torch.empty_like(query)

    return paged_attention
