"""Wrong: write_kv writes in place correctly but also returns the key cache; the statement says it returns None.

EXPECT: it must return None
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    nb, bs, h, d = key_cache.shape
    key_cache.view(nb * bs, h, d)[slot_mapping.long()] = key
    value_cache.view(nb * bs, h, d)[slot_mapping.long()] = value
    return key_cache
