"""Wrong: Scales the keys in place (`key_cache.mul_(scale)`), then attends with the scaled keys: the output is
right, but the caller's KV cache is changed (the next step would read scaled keys).

EXPECT: paged_attention modified its input key_cache
PUBLIC: caught
"""
import math

import torch


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    n_heads, head_dim = query.shape[1], query.shape[2]
    block_size, n_kv = key_cache.shape[1], key_cache.shape[2]
    group = n_heads // n_kv
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    key_cache.mul_(scale)  # the bug: an in-place write into the cache it was given
    out = torch.zeros_like(query)
    for i in range(len(seq_lens)):
        start, end, ctx = int(query_start_loc[i]), int(query_start_loc[i + 1]), int(seq_lens[i])
        t = end - start
        if t == 0:
            continue
        table = torch.as_tensor(list(block_tables[i]), dtype=torch.long)
        pos = torch.arange(ctx)
        k = key_cache[table[pos // block_size], pos % block_size].float()  # [ctx, n_kv, D], already scaled
        v = value_cache[table[pos // block_size], pos % block_size].float()
        q = query[start:end].float()
        for h in range(n_heads):
            s = q[:, h] @ k[:, h // group].T  # [t, ctx]
            s = s.masked_fill(pos[None, :] > torch.arange(ctx - t, ctx)[:, None], float("-inf"))
            out[start:end, h] = (torch.softmax(s, dim=-1) @ v[:, h // group]).to(query.dtype)
    return out
