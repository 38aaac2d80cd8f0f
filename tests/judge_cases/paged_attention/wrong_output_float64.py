"""Wrong: The output is returned in float64, whatever the query's dtype (the values are right).

EXPECT: the output must have the query's dtype
PUBLIC: caught
"""
import math

import torch


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    n_heads, head_dim = query.shape[1], query.shape[2]
    block_size, n_kv = key_cache.shape[1], key_cache.shape[2]
    group = n_heads // n_kv
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    out = torch.zeros_like(query)
    for i in range(len(seq_lens)):
        start, end, ctx = int(query_start_loc[i]), int(query_start_loc[i + 1]), int(seq_lens[i])
        t = end - start
        if t == 0:
            continue
        n_blocks = (ctx + block_size - 1) // block_size
        k = torch.cat([key_cache[b] for b in block_tables[i][:n_blocks]])[:ctx].float()  # [ctx, n_kv, D]
        v = torch.cat([value_cache[b] for b in block_tables[i][:n_blocks]])[:ctx].float()
        q = query[start:end].float()
        for h in range(n_heads):
            s = q[:, h] @ k[:, h // group].T * scale  # [t, ctx]
            qpos = torch.arange(ctx - t, ctx)[:, None]
            s = s.masked_fill(torch.arange(ctx)[None, :] > qpos, float("-inf"))
            p = torch.softmax(s, dim=-1)
            out[start:end, h] = (p @ v[:, h // group]).to(query.dtype)
    return out.to(torch.float64)
