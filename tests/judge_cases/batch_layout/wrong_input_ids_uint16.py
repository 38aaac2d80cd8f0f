"""Wrong: input_ids is a torch.uint16 tensor ("Integer tensors may be torch.long or torch.int32"). The worker could
send it and the grader could not receive it: a protocol break that skipped the submission's other cases.

EXPECT: input_ids is a torch.uint16 tensor; it must be torch.long or torch.int32
PUBLIC: caught
"""

from types import SimpleNamespace

import torch


def build_batch(items, block_size):
    input_ids, positions, slots, qsl, seq_lens, tables, logits = [], [], [], [0], [], [], []
    for toks, nc, table, need in items:
        for j, t in enumerate(toks):
            p = nc + j
            input_ids.append(t)
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        qsl.append(qsl[-1] + len(toks))
        seq_lens.append(nc + len(toks))
        tables.append(list(table))
        if need:
            logits.append(qsl[-1] - 1)
    long = lambda xs: torch.tensor(xs, dtype=torch.long)
    return SimpleNamespace(input_ids=torch.tensor(input_ids, dtype=torch.uint16), positions=long(positions), slot_mapping=long(slots),
                           query_start_loc=qsl, seq_lens=seq_lens, block_tables=tables,
                           logits_indices=long(logits))
