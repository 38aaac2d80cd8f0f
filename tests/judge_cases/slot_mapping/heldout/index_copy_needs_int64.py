# VIOLATES: `slot_mapping` may be `int64` or `int32`; caches `float32`, `bfloat16` or `float16`
"""Writes with index_copy_, which takes int64 indices only, on the slot_mapping as given."""
class TableTooShort(ValueError):
    pass


def compute_slot_mapping(block_table, start, end, block_size):
    capacity = len(block_table) * block_size
    if end > capacity:
        raise TableTooShort(f"positions up to {end} need more than {len(block_table)} blocks of {block_size}")
    slots = []
    for pos in range(start, end):
        block = block_table[pos // block_size]
        slots.append(block * block_size + pos % block_size)
    return slots


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    key_cache.view(-1, *key_cache.shape[2:]).index_copy_(0, slot_mapping, key)
    value_cache.view(-1, *value_cache.shape[2:]).index_copy_(0, slot_mapping, value)
