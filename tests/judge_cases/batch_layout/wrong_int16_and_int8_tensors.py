"""Wrong: right values in int16 / int8 tensors, which overflow on real token ids (Qwen3 has 151,936) and positions.

EXPECT: it must be torch.long or torch.int32
PUBLIC: caught
"""

from types import SimpleNamespace
import torch


def build_batch(items, block_size):
    ids, pos, slots, qsl, lens, tables, logits = [], [], [], [0], [], [], []
    for toks, nc, table, need in items:
        for k, t in enumerate(toks):
            p = nc + k
            ids.append(t)
            pos.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        qsl.append(qsl[-1] + len(toks))
        lens.append(nc + len(toks))
        tables.append(list(table))
        if need:
            logits.append(qsl[-1] - 1)
    return SimpleNamespace(input_ids=torch.tensor(ids, dtype=torch.int16), positions=torch.tensor(pos, dtype=torch.int8),
                           slot_mapping=torch.tensor(slots, dtype=torch.int32), query_start_loc=qsl, seq_lens=lens,
                           block_tables=tables, logits_indices=torch.tensor(logits, dtype=torch.int16))
