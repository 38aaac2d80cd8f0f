# VIOLATES: No tokens changes nothing
"""Checks the largest slot against the cache size, which raises on an empty slot_mapping."""
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
    where = slot_mapping.long()
    if int(where.max()) >= key_cache.shape[0] * block_size:
        raise ValueError('a slot is past the cache')
    blocks = where // block_size
    rows = where % block_size
    key_cache[blocks, rows] = key
    value_cache[blocks, rows] = value
