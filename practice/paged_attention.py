"""Exercise 127 — paged attention.

Statement: practice/exercises/127-paged-attention.md. Grade: `python practice/judge.py 127`.
"""

from __future__ import annotations

from typing import Sequence

import torch


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    query_start_loc: Sequence[int], seq_lens: Sequence[int],
                    block_tables: Sequence[Sequence[int]], scale: float | None = None) -> torch.Tensor:
    """Causal attention for a flat batch whose keys and values live in a paged cache.

    query: [N, n_heads, head_dim], the new tokens of B requests, request after request.
    key_cache, value_cache: [num_blocks, block_size, n_kv_heads, head_dim]; they already hold this step's K/V.
    query_start_loc: B+1 integers (list or tensor): request i's queries are rows qsl[i] .. qsl[i+1]-1.
    seq_lens: B integers: request i's context length, counting this step's tokens. Its t = qsl[i+1]-qsl[i]
        queries are the positions seq_lens[i]-t .. seq_lens[i]-1; query j may attend to positions
        0 .. seq_lens[i]-t+j (causal), which live in blocks block_tables[i][0], block_tables[i][1], ...
    block_tables: B sequences of block ids.
    scale: softmax scale; None means 1/sqrt(head_dim), any number (0.0 included) is used as given.
    Grouped-query attention: query head h reads KV head h // (n_heads // n_kv_heads).

    Returns [N, n_heads, head_dim] in query's dtype and device. A request with no queries contributes no rows.
    """
    raise NotImplementedError("exercise 127: paged_attention is not implemented yet (practice/paged_attention.py)")
