# VIOLATES: Return a list of ints (a 1-D integer tensor or array is accepted)
"""Returns the slots as floats."""
class TableTooShort(ValueError):
    pass


def compute_slot_mapping(block_table, start, end, block_size):
    capacity = len(block_table) * block_size
    if end > capacity:
        raise TableTooShort(f"positions up to {end} need more than {len(block_table)} blocks of {block_size}")
    slots = []
    for pos in range(start, end):
        block = block_table[pos // block_size]
        slots.append(float(block * block_size + pos % block_size))
    return slots


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    where = slot_mapping.long()
    blocks = where // block_size
    rows = where % block_size
    key_cache[blocks, rows] = key
    value_cache[blocks, rows] = value
