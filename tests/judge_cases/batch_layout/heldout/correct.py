"""Held-out correct solution, written from the statement alone: plain Python lists filled request by request,
turned into int32 tensors at the end, returned in a SimpleNamespace."""
from types import SimpleNamespace

import torch


def _slot(block_table, pos, block_size):
    return block_table[pos // block_size] * block_size + pos % block_size


def build_batch(items, block_size):
    ids, pos, slots, starts, lens, tables, wanted = [], [], [], [0], [], [], []
    for token_ids, num_computed, block_table, need_logits in items:
        ids.extend(token_ids)
        for i in range(len(token_ids)):
            pos.append(num_computed + i)
            slots.append(_slot(block_table, num_computed + i, block_size))
        starts.append(starts[-1] + len(token_ids))
        lens.append(num_computed + len(token_ids))
        tables.append(list(block_table))
        if need_logits:
            wanted.append(starts[-1] - 1)
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    return SimpleNamespace(input_ids=as_tensor(ids), positions=as_tensor(pos), slot_mapping=as_tensor(slots),
                           query_start_loc=starts, seq_lens=lens, block_tables=tables,
                           logits_indices=as_tensor(wanted))
