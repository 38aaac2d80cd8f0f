"""Wrong: build_batch turns the items' lists into numpy arrays in place ("Do not modify items"). The driver's own
comparison of the items then raised numpy's "truth value of an array is ambiguous", shown as the learner's crash.

EXPECT: build_batch modified its input items
PUBLIC: caught
"""

from types import SimpleNamespace

import torch


import numpy as np


def build_batch(items, block_size):
    for i, (t, n, b, need) in enumerate(items):
        items[i] = (np.asarray(t, dtype=np.int64), n, np.asarray(b, dtype=np.int64), need)
    input_ids, positions, slots, qsl, seq_lens, tables, logits = [], [], [], [0], [], [], []
    for toks, nc, table, need in items:
        for j, t in enumerate(toks):
            p = nc + j
            input_ids.append(t)
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        qsl.append(qsl[-1] + len(toks))
        seq_lens.append(nc + len(toks))
        tables.append([int(x) for x in table])
        if need:
            logits.append(qsl[-1] - 1)
    long = lambda xs: torch.tensor(xs, dtype=torch.long)
    return SimpleNamespace(input_ids=long(input_ids), positions=long(positions), slot_mapping=long(slots),
                           query_start_loc=qsl, seq_lens=seq_lens, block_tables=tables,
                           logits_indices=long(logits))
