# VIOLATES: Positions are absolute: a chunk may start mid-table, mid-block
"""Walks rows from 0 from the block of `start`: right only when start is a multiple of block_size."""
class TableTooShort(ValueError):
    pass


def compute_slot_mapping(block_table, start, end, block_size):
    capacity = len(block_table) * block_size
    if end > capacity:
        raise TableTooShort(f"positions up to {end} need more than {len(block_table)} blocks of {block_size}")
    slots = []
    first = start // block_size
    for k in range(end - start):
        block = block_table[first + k // block_size]
        slots.append(block * block_size + k % block_size)
    return slots


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    where = slot_mapping.long()
    blocks = where // block_size
    rows = where % block_size
    key_cache[blocks, rows] = key
    value_cache[blocks, rows] = value
