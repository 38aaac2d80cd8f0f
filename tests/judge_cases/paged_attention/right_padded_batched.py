"""Right: every request padded to the longest context, one batched masked attention for the whole batch."""
import math

import torch
import torch.nn.functional as F


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    qsl = torch.as_tensor(query_start_loc).long().tolist()
    lens = torch.as_tensor(seq_lens).long().tolist()
    B = len(lens)
    N, H, D = query.shape
    bs, KV = key_cache.shape[1], key_cache.shape[2]
    if N == 0:
        return query.clone()
    t = [qsl[i + 1] - qsl[i] for i in range(B)]
    T, L = max(t), max(lens)
    nblk = (L + bs - 1) // bs
    table = torch.zeros(B, nblk, dtype=torch.long)
    for i, row in enumerate(block_tables):
        row = list(row)[:nblk]
        table[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    k = key_cache[table].reshape(B, nblk * bs, KV, D)[:, :L]  # [B, L, KV, D]
    v = value_cache[table].reshape(B, nblk * bs, KV, D)[:, :L]
    k = k.repeat_interleave(H // KV, dim=2).transpose(1, 2)  # [B, H, L, D]
    v = v.repeat_interleave(H // KV, dim=2).transpose(1, 2)
    q = query.new_zeros(B, T, H, D)
    for i in range(B):
        q[i, :t[i]] = query[qsl[i]:qsl[i + 1]]
    lens_t, t_t = torch.tensor(lens), torch.tensor(t)
    qpos = (lens_t - t_t)[:, None] + torch.arange(T)[None, :]  # [B, T] absolute positions
    kpos = torch.arange(L)
    mask = (kpos[None, None, :] <= qpos[:, :, None]) & (kpos[None, None, :] < lens_t[:, None, None])
    mask[:, :, 0] = True  # padded query rows: any valid key, their output is dropped
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask[:, None],
                                       scale=scale if scale is not None else 1 / math.sqrt(D))
    o = o.transpose(1, 2)  # [B, T, H, D]
    return torch.cat([o[i, :t[i]] for i in range(B)])
