"""Wrong: allocate returns the block ids as a 1-D tensor (the right values, but each id is then a 0-dim tensor,
which hashes by identity: the pool's free queue and the prefix cache never find it again).
EXPECT: not tensors
PUBLIC: caught
"""

from __future__ import annotations

from collections import Counter, OrderedDict

import torch

from framework.errors import NoFreeBlocksError


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        # An ordered set: allocation pops from the front (least recently freed), free appends at the back.
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def allocate(self, n: int) -> list[int]:
        """`n` free blocks, each now with reference count 1; all or nothing."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self.free_queue):
            raise NoFreeBlocksError(f"asked for {n} blocks, only {len(self.free_queue)} free")
        blocks = [self.free_queue.popitem(last=False)[0] for _ in range(n)]
        for b in blocks:
            self.ref_cnt[b] = 1
        return torch.tensor(blocks, dtype=torch.long)

    def incref(self, block_id: int) -> None:
        """One more owner of `block_id`; a free block (count 0) leaves the free queue."""
        self._check(block_id)
        if self.ref_cnt[block_id] == 0:
            del self.free_queue[block_id]
        self.ref_cnt[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block; a block whose count reaches 0 goes to the back of the free queue.

        Free a request's blocks in reverse order (last block first): its tail is least likely to be shared, so
        it should be reused before the prefix.
        """
        for b, times in Counter(block_ids).items():
            self._check(b)
            if self.ref_cnt[b] < times:
                raise ValueError(f"block {b} is freed more often than it is held (double free)")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None

    def _check(self, block_id: int) -> None:
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block id {block_id} out of range [0, {self.num_blocks})")
