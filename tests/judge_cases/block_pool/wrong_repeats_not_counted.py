"""Wrong: free checks each id once, not how often it repeats within the call.

EXPECT: count repeats within one call
PUBLIC: caught
"""
from collections import Counter, deque

from framework.errors import NoFreeBlocksError


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.queue = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.queue)

    def allocate(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(n)
        if n > len(self.queue):
            raise NoFreeBlocksError(n)
        out = [self.queue.popleft() for _ in range(n)]
        for b in out:
            self.ref_cnt[b] = 1
        return out

    def _valid(self, b: int) -> None:
        if not (0 <= b < self.num_blocks):
            raise ValueError(b)

    def incref(self, block_id: int) -> None:
        self._valid(block_id)
        if self.ref_cnt[block_id] == 0:
            self.queue.remove(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        for b, k in Counter(block_ids).items():
            self._valid(b)
            if self.ref_cnt[b] < 1:
                raise ValueError(f"double free of {b}")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if not self.ref_cnt[b]:
                self.queue.append(b)
