"""Right: tensor arithmetic for the slots (returned as an int64 tensor), flat-view indexing for write_kv."""
import torch


def compute_slot_mapping(block_table, start, end, block_size):
    if len(block_table) * block_size < end:
        raise ValueError("block table too short")
    pos = torch.arange(start, end)
    table = torch.tensor(block_table, dtype=torch.long)
    if pos.numel() == 0:
        return pos
    return table[pos // block_size] * block_size + pos % block_size


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    nb, bs, h, d = key_cache.shape
    slots = slot_mapping.long()
    key_cache.view(nb * bs, h, d).index_copy_(0, slots, key.to(key_cache.dtype))
    value_cache.view(nb * bs, h, d).index_copy_(0, slots, value.to(value_cache.dtype))
