# VIOLATES: In place, into the tensors passed (one layer of a multi-layer cache); nothing else in the caches changes
"""Uses the out-of-place index_put, so the caller's caches never change."""
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
    blocks = where // block_size
    rows = where % block_size
    key_cache = key_cache.index_put((blocks, rows), key)
    value_cache = value_cache.index_put((blocks, rows), value)
