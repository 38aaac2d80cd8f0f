"""Right: query_start_loc and seq_lens as array.array (a sequence of integers the model runner reads like a list);
block tables as tuples; a dataclass.

EXPECT: pass
"""

from array import array
from dataclasses import dataclass

import torch


@dataclass
class Batch:
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc: array
    seq_lens: array
    block_tables: list
    logits_indices: torch.Tensor


def build_batch(items, block_size):
    ids, pos, slots, logits = [], [], [], []
    qsl, seq_lens = array("q", [0]), array("q")
    for toks, nc, table, need in items:
        ps = range(nc, nc + len(toks))
        ids += toks
        pos += ps
        slots += [table[p // block_size] * block_size + p % block_size for p in ps]
        qsl.append(qsl[-1] + len(toks))
        seq_lens.append(nc + len(toks))
        if need:
            logits.append(qsl[-1] - 1)
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)
    return Batch(as_long(ids), as_long(pos), as_long(slots), qsl, seq_lens, [tuple(t) for t in (i[2] for i in items)],
                 as_long(logits))
