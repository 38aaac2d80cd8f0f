"""Exercise 126 — slot mapping and writing K/V into the paged cache.

Statement: practice/exercises/126-slot-mapping.md. Grade: `python practice/judge.py 126`.
"""

from __future__ import annotations

import torch

from framework.paged_kv_cache import PagedKVCache  # the cache tensors themselves: nothing to write there

__all__ = ["PagedKVCache", "compute_slot_mapping", "write_kv"]


def compute_slot_mapping(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The cache slots of one request's positions `start, start+1, ..., end-1`.

    Position p lives in block `block_table[p // block_size]` at row `p % block_size`, which is slot
    `block_table[p // block_size] * block_size + p % block_size`.
    Raise ValueError if the range ends past the table (end > len(block_table) * block_size), even when empty.
    Example: block_table [7, 2], block_size 4, start 2, end 6 -> [30, 31, 8, 9].
    """
    raise NotImplementedError("exercise 126: compute_slot_mapping is not implemented yet (practice/paged_kv_cache.py)")


def write_kv(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store each token's key and value in its slot, in place.

    key_cache, value_cache: [num_blocks, block_size, n_kv_heads, head_dim] (one layer's cache).
    key, value: [N, n_kv_heads, head_dim], the new tokens' K and V.
    slot_mapping: [N] integer tensor; token i goes to row slot % block_size of block slot // block_size.
    Nothing else in the caches may change. Returns None.
    """
    raise NotImplementedError("exercise 126: write_kv is not implemented yet (practice/paged_kv_cache.py)")
