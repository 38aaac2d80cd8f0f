"""Right: the reference's layout with each block table an array.array of int64 (a sequence of integers the model
runner reads like a list), nested in the list of tables.

EXPECT: pass
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


class BatchItem(NamedTuple):
    token_ids: list[int]  # the new tokens this request computes in this step
    num_computed: int  # how many of its tokens are already in the KV cache
    block_table: list[int]  # its blocks, in order; must cover num_computed + len(token_ids) tokens
    need_logits: bool  # whether its last new token needs logits (a decode, or the last chunk of a prefill)


@dataclass
class Batch:
    input_ids: torch.Tensor  # [N] the new tokens, request after request
    positions: torch.Tensor  # [N] each token's position in its request
    slot_mapping: torch.Tensor  # [N] the cache slot each token's K and V are written to
    query_start_loc: torch.Tensor  # [B+1] request i's tokens are input_ids[qsl[i]:qsl[i+1]]
    seq_lens: torch.Tensor  # [B] context length of each request after this step (cached + new)
    block_tables: list[list[int]]  # [B] each request's blocks
    logits_indices: torch.Tensor  # [L] flat index of the last token of each request that needs logits

    def to(self, device: torch.device) -> "Batch":
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.input_ids), move(self.positions), move(self.slot_mapping), move(self.query_start_loc),
                     move(self.seq_lens), self.block_tables, move(self.logits_indices))


def build_batch(items: list[BatchItem] | list[tuple], block_size: int) -> Batch:
    """Lay out `items` (token_ids, num_computed, block_table, need_logits) as one flat batch, on the CPU."""
    num_new = np.array([len(it[0]) for it in items], dtype=np.int64)
    num_computed = np.array([it[1] for it in items], dtype=np.int64)
    query_start_loc = np.concatenate([[0], np.cumsum(num_new)])
    seq_lens = num_computed + num_new

    # Token t of the flat batch belongs to request req[t] and sits at offset t - qsl[req[t]] among its new tokens.
    req = np.repeat(np.arange(len(items)), num_new)
    offsets = np.arange(query_start_loc[-1]) - query_start_loc[req]
    positions = num_computed[req] + offsets

    width = max((len(it[2]) for it in items), default=0)
    tables = np.zeros((len(items), max(width, 1)), dtype=np.int64)
    for i, it in enumerate(items):
        if len(it[2]) * block_size < seq_lens[i]:
            raise ValueError(f"request {i}: block table of {len(it[2])} blocks cannot hold {seq_lens[i]} tokens")
        tables[i, : len(it[2])] = it[2]
    slot_mapping = tables[req, positions // block_size] * block_size + positions % block_size

    need = np.array([bool(it[3]) for it in items], dtype=bool)
    logits_indices = query_start_loc[1:][need] - 1

    as_long = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    input_ids = [t for it in items for t in it[0]]
    return Batch(
        input_ids=torch.tensor(input_ids, dtype=torch.long),
        positions=as_long(positions),
        slot_mapping=as_long(slot_mapping),
        query_start_loc=as_long(query_start_loc),
        seq_lens=as_long(seq_lens),
        block_tables=[array("q", it[2]) for it in items],
        logits_indices=as_long(logits_indices),
    )
