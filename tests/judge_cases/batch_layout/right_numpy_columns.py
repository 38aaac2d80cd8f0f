"""Right: one numpy table of (token, position, slot) rows, its columns handed out with torch.from_numpy: 1-D int64
tensors whose stride is 3 (a one-token batch's too, which the judge once failed to send).

EXPECT: pass
"""

from types import SimpleNamespace
import numpy as np
import torch


def build_batch(items, block_size):
    rows, qsl, lens, li = [], [0], [], []
    for toks, nc, table, need in items:
        for j, tok in enumerate(toks):
            p = nc + j
            rows.append((tok, p, table[p // block_size] * block_size + p % block_size))
        qsl.append(len(rows))
        lens.append(nc + len(toks))
        if need:
            li.append(len(rows) - 1)
    meta = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return SimpleNamespace(input_ids=torch.from_numpy(meta[:, 0]), positions=torch.from_numpy(meta[:, 1]),
                           slot_mapping=torch.from_numpy(meta[:, 2]), query_start_loc=qsl, seq_lens=lens,
                           block_tables=[list(it[2]) for it in items],
                           logits_indices=torch.tensor(li, dtype=torch.long))
