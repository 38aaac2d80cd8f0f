# VIOLATES: Plugged into the model runner, every request's logits equal running it alone
"""Every query sees the whole context. The sentence states what the other rules give together, so no solution breaks it
alone: this one is checked to fail the end-to-end case its row names."""
import math

import torch


def _ints(xs):
    return [int(x) for x in xs]


def _context(cache, table, length, block_size):
    """The rows of positions 0 .. length-1, gathered through the block table."""
    pos = torch.arange(length)
    blocks = torch.tensor([table[p // block_size] for p in range(length)], dtype=torch.long)
    return cache[blocks.to(cache.device), (pos % block_size).to(cache.device)]


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    starts, lens = _ints(query_start_loc), _ints(seq_lens)
    head_dim, n_heads = query.shape[-1], query.shape[1]
    group = n_heads // key_cache.shape[2]
    if scale is None:
        scale = 1 / math.sqrt(head_dim)
    block_size = key_cache.shape[1]
    pieces = []
    for i, length in enumerate(lens):
        lo, hi = starts[i], starts[i + 1]
        t = hi - lo
        if t == 0:
            continue
        q = query[lo:hi].float()
        k = _context(key_cache, block_tables[i], length, block_size).float().repeat_interleave(group, dim=1)
        v = _context(value_cache, block_tables[i], length, block_size).float().repeat_interleave(group, dim=1)
        scores = torch.einsum("thd,lhd->htl", q, k) * scale
        weights = torch.softmax(scores, dim=-1)
        pieces.append(torch.einsum("htl,lhd->thd", weights, v))
    if not pieces:
        return query.new_zeros(query.shape)
    return torch.cat(pieces).to(query.dtype)
