"""The paged KV cache: one big tensor of blocks per layer, written token by token through a slot mapping
(exercise 126).

Slot `s` is row `s % block_size` of block `s // block_size`. A request's token at position `p` lives in block
`block_table[p // block_size]`, so its slot is `block_table[p // block_size] * block_size + p % block_size`.
"""

from __future__ import annotations

import torch

from framework.kv_cache_manager import blocks_needed
from framework.paged_kv_cache import PagedKVCache  # noqa: F401  (the cache tensors: framework)


def compute_slot_mapping(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The cache slots of a request's positions `start .. end-1`, given its block table."""
    if end > len(block_table) * block_size:
        raise ValueError(f"positions up to {end - 1} need {blocks_needed(end, block_size)} blocks, "
                         f"table has {len(block_table)}")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store `key`, `value` `[N, n_kv_heads, head_dim]` at `slot_mapping` `[N]` in caches shaped
    `[num_blocks, block_size, n_kv_heads, head_dim]`, in place (vLLM: `reshape_and_cache_flash`)."""
    num_blocks, block_size = key_cache.shape[:2]
    key_cache.view(num_blocks * block_size, *key_cache.shape[2:])[slot_mapping] = key
    value_cache.view(num_blocks * block_size, *value_cache.shape[2:])[slot_mapping] = value
