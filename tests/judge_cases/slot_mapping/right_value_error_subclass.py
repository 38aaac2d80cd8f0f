"""Right: raises its own `BlockTableTooShort(ValueError)` (a ValueError, as the statement asks), returns the slots
as an int32 tensor, and writes K/V block by block with index_put_ on the given (possibly non-contiguous) views."""
import torch


class BlockTableTooShort(ValueError):
    pass


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise BlockTableTooShort(f"end {end} is past the {len(block_table) * block_size} slots of the table")
    return torch.tensor([block_table[p // block_size] * block_size + p % block_size for p in range(start, end)],
                        dtype=torch.int32)


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    bs = key_cache.shape[1]
    idx = (slot_mapping.long() // bs, slot_mapping.long() % bs)
    key_cache.index_put_(idx, key)
    value_cache.index_put_(idx, value)
