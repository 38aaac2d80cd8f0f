"""Right: a NamedTuple with extra fields, tuples for query_start_loc and seq_lens, a helper function.

EXPECT: pass
"""

from typing import NamedTuple

import torch


class Layout(NamedTuple):
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc: tuple
    seq_lens: tuple
    block_tables: list
    logits_indices: torch.Tensor
    num_tokens: int  # extra
    note: str = "mine"  # extra


def slot_of(table, p, block_size):
    return table[p // block_size] * block_size + p % block_size


def build_batch(items, block_size):
    ids, pos, slots, starts = [], [], [], [0]
    for toks, nc, table, _ in items:
        ids += list(toks)
        pos += range(nc, nc + len(toks))
        slots += [slot_of(table, p, block_size) for p in range(nc, nc + len(toks))]
        starts.append(starts[-1] + len(toks))
    last = [starts[i + 1] - 1 for i, it in enumerate(items) if it[3]]
    return Layout(torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long),
                  torch.tensor(slots, dtype=torch.long), tuple(starts),
                  tuple(nc + len(t) for t, nc, _, _ in items), [tuple(tb) for _, _, tb, _ in items],
                  torch.tensor(last, dtype=torch.long), len(ids))
