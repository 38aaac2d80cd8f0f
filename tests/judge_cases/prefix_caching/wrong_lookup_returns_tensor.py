"""Wrong: lookup returns the block ids as a 1-D tensor (the right values, but the engine's KV-cache manager then
increfs 0-dim tensors, which the block pool cannot find).
EXPECT: not tensors
PUBLIC: caught
"""

from __future__ import annotations

from typing import Sequence

import torch

NONE_HASH = 0  # the parent hash of a request's first block


def hash_block(parent_hash: int, token_ids: Sequence[int]) -> int:
    """The hash of a block: its tokens chained with its parent's hash (Python's hash of ints is deterministic)."""
    return hash((parent_hash, tuple(token_ids)))


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of every full block of `token_ids`, in order."""
    hashes, parent = [], NONE_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start : start + block_size])
        hashes.append(parent)
    return hashes


class PrefixCache:
    """Maps block hashes to the blocks holding them, both ways."""

    def __init__(self) -> None:
        self.hash_to_block: dict[int, int] = {}
        self.block_to_hash: dict[int, int] = {}

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """The cached blocks of the longest prefix of `hashes` found, in order."""
        blocks = []
        for h in hashes:
            if h not in self.hash_to_block:
                break
            blocks.append(self.hash_to_block[h])
        return torch.tensor(blocks, dtype=torch.long)

    def insert(self, block_hash: int, block_id: int) -> None:
        """Record that `block_id` holds the block named `block_hash` (the first holder wins)."""
        if block_hash in self.hash_to_block or block_id in self.block_to_hash:
            return
        self.hash_to_block[block_hash] = block_id
        self.block_to_hash[block_id] = block_hash

    def evict(self, block_id: int) -> None:
        """Forget `block_id`'s contents: the pool is handing it out for new tokens."""
        block_hash = self.block_to_hash.pop(block_id, None)
        if block_hash is not None:
            del self.hash_to_block[block_hash]
