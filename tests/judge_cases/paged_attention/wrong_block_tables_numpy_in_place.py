"""Wrong: paged_attention replaces the rows of block_tables by numpy arrays in place ("do not modify the inputs").
The driver's own comparison of the inputs then raised numpy's "truth value of an array is ambiguous", shown as the
learner's crash.

EXPECT: paged_attention modified its input block_tables
PUBLIC: caught
"""
import math

import numpy as np
import torch


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    n_heads, head_dim = query.shape[1], query.shape[2]
    block_size, n_kv = key_cache.shape[1], key_cache.shape[2]
    group = n_heads // n_kv
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    out = torch.zeros_like(query)
    for j in range(len(block_tables)):
        block_tables[j] = np.asarray(block_tables[j], dtype=np.int64)
    for i in range(len(seq_lens)):
        start, end, ctx = int(query_start_loc[i]), int(query_start_loc[i + 1]), int(seq_lens[i])
        t = end - start
        if t == 0:
            continue
        n_blocks = (ctx + block_size - 1) // block_size
        k = torch.cat([key_cache[b] for b in block_tables[i][:n_blocks].tolist()])[:ctx].float()  # [ctx, n_kv, D]
        v = torch.cat([value_cache[b] for b in block_tables[i][:n_blocks].tolist()])[:ctx].float()
        q = query[start:end].float()
        for h in range(n_heads):
            s = q[:, h] @ k[:, h // group].T * scale  # [t, ctx]
            qpos = torch.arange(ctx - t, ctx)[:, None]
            s = s.masked_fill(torch.arange(ctx)[None, :] > qpos, float("-inf"))
            p = torch.softmax(s, dim=-1)
            out[start:end, h] = (p @ v[:, h // group]).to(query.dtype)
    return out
