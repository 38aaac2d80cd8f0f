"""Correct: ref_cnt is an array.array (it indexes and iterates like a list), the free queue a deque, and the
ValueErrors are a subclass of ValueError of its own (the statement says "raises ValueError": a subclass is one)."""
from array import array
from collections import deque

from framework.errors import NoFreeBlocksError


class BadBlockId(ValueError):
    pass


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise BadBlockId("a pool needs at least one block")
        self.num_blocks = num_blocks
        self.ref_cnt = array("l", [0] * num_blocks)
        self._free = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n < 0:
            raise BadBlockId(f"negative n: {n}")
        if n > len(self._free):
            raise NoFreeBlocksError(f"{n} blocks asked, {len(self._free)} free")
        ids = [self._free.popleft() for _ in range(n)]
        for b in ids:
            self.ref_cnt[b] = 1
        return ids

    def _check(self, b: int) -> None:
        if not 0 <= b < self.num_blocks:
            raise BadBlockId(f"block id {b} out of range")

    def incref(self, block_id: int) -> None:
        self._check(block_id)
        if self.ref_cnt[block_id] == 0:
            self._free.remove(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        left = {}
        for b in block_ids:
            self._check(b)
            left[b] = left.get(b, self.ref_cnt[b]) - 1
            if left[b] < 0:
                raise BadBlockId(f"double free of block {b}")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._free.append(b)
