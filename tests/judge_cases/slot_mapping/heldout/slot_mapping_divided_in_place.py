# VIOLATES: `key`, `value` and `slot_mapping` are not modified; it returns `None`
"""Turns the caller's slot_mapping into block ids in place (floor_divide_)."""
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
    rows = (slot_mapping % block_size).long()
    blocks = slot_mapping.floor_divide_(block_size).long()
    key_cache[blocks, rows] = key
    value_cache[blocks, rows] = value
