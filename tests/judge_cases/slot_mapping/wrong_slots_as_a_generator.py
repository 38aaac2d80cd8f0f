"""Wrong: compute_slot_mapping returns a generator of the right slots, not a list (or tensor) of them.

EXPECT: (generator); expected a list of integers
PUBLIC: caught
"""

import torch


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return (block_table[p // block_size] * block_size + p % block_size for p in range(start, end))


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    idx = slot_mapping.long()
    bs = key_cache.shape[1]
    key_cache[idx // bs, idx % bs] = key
    value_cache[idx // bs, idx % bs] = value
