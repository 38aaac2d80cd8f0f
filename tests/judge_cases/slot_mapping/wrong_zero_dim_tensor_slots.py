"""Wrong: compute_slot_mapping returns a list of 0-dim tensors (the right values, but no list of ints: indexing a
tensor with it fails, as chapter 3's check does).

EXPECT: expected a list of integers
PUBLIC: caught
"""
import torch


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return [torch.tensor(block_table[p // block_size] * block_size + p % block_size) for p in range(start, end)]


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    for i, s in enumerate(slot_mapping.tolist()):
        key_cache[s // block_size, s % block_size] = key[i]
        value_cache[s // block_size, s % block_size] = value[i]
