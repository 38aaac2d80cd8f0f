"""Wrong: write_kv rebinds the cache tensor's data (`key_cache.data = key_cache.index_put(...)`) instead of writing
into it. The tensor object it was given now points at new storage, but the caller's multi-layer cache, of which
it was a view, is unchanged: in the model runner the logits are wrong.

EXPECT: only rebinds
PUBLIC: caught
"""


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("block table too short")
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    bs = key_cache.shape[1]
    idx = (slot_mapping.long() // bs, slot_mapping.long() % bs)
    key_cache.data = key_cache.index_put(idx, key)
    value_cache.data = value_cache.index_put(idx, value)
