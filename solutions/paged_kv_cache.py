"""The paged KV cache: one big tensor of blocks per layer, written token by token through a slot mapping
(exercise 126).

Slot `s` is row `s % block_size` of block `s // block_size`. A request's token at position `p` lives in block
`block_table[p // block_size]`, so its slot is `block_table[p // block_size] * block_size + p % block_size`.
"""

from __future__ import annotations

import torch


def compute_slot_mapping(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The cache slots of a request's positions `start .. end-1`, given its block table."""
    if end > len(block_table) * block_size:
        raise ValueError(f"positions up to {end - 1} need {-(-end // block_size)} blocks, table has {len(block_table)}")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(
    key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Store `key`, `value` `[N, n_kv_heads, head_dim]` at `slot_mapping` `[N]` in caches shaped
    `[num_blocks, block_size, n_kv_heads, head_dim]`, in place (vLLM: `reshape_and_cache_flash`)."""
    num_blocks, block_size = key_cache.shape[:2]
    key_cache.view(num_blocks * block_size, *key_cache.shape[2:])[slot_mapping] = key
    value_cache.view(num_blocks * block_size, *value_cache.shape[2:])[slot_mapping] = value


class PagedKVCache:
    """Per layer, K and V caches of shape `[num_blocks, block_size, n_kv_heads, head_dim]`."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.key_caches = torch.zeros(shape, dtype=dtype, device=device)
        self.value_caches = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks, self.block_size = num_blocks, block_size

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int) -> "PagedKVCache":
        cfg = model.cfg
        return cls(cfg.num_hidden_layers, num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim,
                   model.dtype, model.device)

    @property
    def bytes(self) -> int:
        return 2 * self.key_caches.numel() * self.key_caches.element_size()
