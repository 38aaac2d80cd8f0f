"""Wrong: returns [] for any empty range, without checking it against the table first: the statement says a range
that ends past the table raises ValueError even when empty (compute_slot_mapping([0, 1], 3, 3, 1)).

EXPECT: even when start == end
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    if start == end:
        return []
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    nb, bs, h, d = key_cache.shape
    key_cache.view(nb * bs, h, d)[slot_mapping.long()] = key
    value_cache.view(nb * bs, h, d)[slot_mapping.long()] = value
