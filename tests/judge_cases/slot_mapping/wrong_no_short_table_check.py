"""Wrong: A block table that is too short is not reported.

EXPECT: expected ValueError
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    slots = []
    for p in range(start, end):
        i = p // block_size
        i = min(i, len(block_table) - 1)
        slots.append(block_table[i] * block_size + p % block_size)
    return slots


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    block_size = key_cache.shape[1]
    for i, s in enumerate(slot_mapping.tolist()):
        key_cache[s // block_size, s % block_size] = key[i]
        value_cache[s // block_size, s % block_size] = value[i]
