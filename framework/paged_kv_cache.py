"""The paged KV cache's memory: per layer, K and V tensors cut into blocks. Which slot each token uses, and how
K and V are written there, is exercise 126 (practice/paged_kv_cache.py)."""

from __future__ import annotations

import torch


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
