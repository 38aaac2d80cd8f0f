"""Wrong: write_kv stores the key in the value cache too.

EXPECT: value_cache got the keys
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    slots = []
    for p in range(start, end):
        i = p // block_size
        if i >= len(block_table):
            raise ValueError(f"position {p} has no block")
        slots.append(block_table[i] * block_size + p % block_size)
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return slots


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    for i, s in enumerate(slot_mapping.tolist()):
        key_cache[s // block_size, s % block_size] = key[i]
        value_cache[s // block_size, s % block_size] = key[i]
