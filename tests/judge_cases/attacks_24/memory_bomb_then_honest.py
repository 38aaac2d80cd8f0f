"""Honest, graded right after the memory bomb: int32 tensors built with torch ops. It must get full marks.

EXPECT: pass
"""

from types import SimpleNamespace

import torch


def build_batch(items, block_size):
    i32 = torch.int32
    n_new = torch.tensor([len(t) for t, _, _, _ in items], dtype=i32)
    n_cached = torch.tensor([nc for _, nc, _, _ in items], dtype=i32)
    qsl = torch.zeros(len(items) + 1, dtype=i32)
    qsl[1:] = torch.cumsum(n_new, 0)
    pieces_pos, pieces_slot = [], []
    for (toks, nc, table, _), _n in zip(items, n_new.tolist()):
        pos = torch.arange(nc, nc + len(toks), dtype=i32)
        tb = torch.tensor(table, dtype=i32)
        pieces_pos.append(pos)
        pieces_slot.append(tb[(pos // block_size).long()] * block_size + pos % block_size)
    empty = torch.zeros(0, dtype=i32)
    need = torch.tensor([bool(x[3]) for x in items], dtype=torch.bool)
    return SimpleNamespace(
        input_ids=torch.tensor([t for toks, _, _, _ in items for t in toks], dtype=i32),
        positions=torch.cat(pieces_pos) if pieces_pos else empty,
        slot_mapping=torch.cat(pieces_slot) if pieces_slot else empty,
        query_start_loc=qsl,
        seq_lens=n_cached + n_new,
        block_tables=[list(tb) for _, _, tb, _ in items],
        logits_indices=(qsl[1:] - 1)[need],
    )
