"""Wrong: the output is right, but it empties block_tables and changes the query_start_loc and seq_lens lists it was
given (the tensors are left alone).

EXPECT: modified its input
PUBLIC: caught
"""

from __future__ import annotations
import math
import torch
import torch.nn.functional as F


def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale=None):
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    qsl, lens = [int(x) for x in query_start_loc], [int(x) for x in seq_lens]
    bs = key_cache.shape[1]
    n_rep = query.shape[1] // key_cache.shape[2]
    out = torch.empty_like(query)
    for i, ctx in enumerate(lens):
        s, e = qsl[i], qsl[i + 1]
        if s == e:
            continue
        blocks = torch.as_tensor(list(block_tables[i][: (ctx + bs - 1) // bs]), dtype=torch.long)
        k = key_cache[blocks].flatten(0, 1)[:ctx].repeat_interleave(n_rep, dim=1)
        v = value_cache[blocks].flatten(0, 1)[:ctx].repeat_interleave(n_rep, dim=1)
        mask = torch.ones(e - s, ctx, dtype=torch.bool).tril(diagonal=ctx - (e - s))
        o = F.scaled_dot_product_attention(query[s:e].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=mask, scale=scale)
        out[s:e] = o.transpose(0, 1)
    # the breach: the caller's lists are wrecked
    for t in block_tables:
        if isinstance(t, list):
            t.clear()
    if isinstance(block_tables, list):
        block_tables.clear()
    if isinstance(seq_lens, list):
        seq_lens[:] = [0] * len(seq_lens)
    if isinstance(query_start_loc, list):
        del query_start_loc[1:]
    return out
