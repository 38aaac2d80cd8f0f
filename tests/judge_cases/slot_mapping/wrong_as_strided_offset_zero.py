"""Wrong: write_kv builds its flat view with `as_strided(..., storage_offset=0)`. On a standalone cache that is the
same tensor, but the model runner gives it `key_caches[l]`, a view whose storage starts at layer 0: layer l's K/V
land in layer 0.

EXPECT: another layer changed
PUBLIC: caught
"""
import torch


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def _flat(cache: torch.Tensor) -> torch.Tensor:
    nb, bs, h, d = cache.shape
    return cache.as_strided((nb * bs, h, d), (h * d, d, 1), storage_offset=0)


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    _flat(key_cache)[slot_mapping.long()] = key
    _flat(value_cache)[slot_mapping.long()] = value
