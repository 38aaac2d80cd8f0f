"""Wrong: write_kv hands slot_mapping to `index_copy_` as it is. That works for int64 slots, but the statement allows
int32 ones too, and `index_copy_` raises on an int32 index.

EXPECT: Expected a long tensor
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("the block table is too short")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    key_cache.view(-1, *key_cache.shape[2:]).index_copy_(0, slot_mapping, key)
    value_cache.view(-1, *value_cache.shape[2:]).index_copy_(0, slot_mapping, value)
