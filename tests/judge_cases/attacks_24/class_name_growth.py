"""Attack (grader memory): right values, but every call returns objects of hundreds of classes with new names,
which the grader once kept one proxy class each for, forever. Honest part: every case.
"""

import itertools
from types import SimpleNamespace

import torch

_fresh = itertools.count()


def _junk():
    return [type(f"Junk{next(_fresh)}_{'x' * 60}", (), {})() for _ in range(300)]


def _right(items, block_size):
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
    long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return SimpleNamespace(input_ids=long(input_ids), positions=long(positions), slot_mapping=long(slots),
                           query_start_loc=qsl, seq_lens=seq_lens, block_tables=tables,
                           logits_indices=long(logits))


def build_batch(items, block_size):
    out = _right(items, block_size)
    out.junk = _junk()
    return out
