"""Wrong: allocate checks its argument, then returns a generator that takes the blocks only while the caller iterates it:
right once made a list, but `pool.allocate(2)` alone allocates nothing.

EXPECT: (generator)
PUBLIC: caught
"""

from collections import Counter, deque

from framework.errors import NoFreeBlocksError


class BlockPool:
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self._q = deque(range(num_blocks))

    @property
    def num_free_blocks(self):
        return len(self._q)

    def allocate(self, n):
        if n < 0:
            raise ValueError("negative n")
        if n > len(self._q):
            raise NoFreeBlocksError(f"{n} > {len(self._q)}")
        return self._take(n)

    def _take(self, n):
        for _ in range(n):
            b = self._q.popleft()
            self.ref_cnt[b] = 1
            yield b

    def _check(self, b):
        if not isinstance(b, int) or not 0 <= b < self.num_blocks:
            raise ValueError(f"block id {b} out of range")

    def incref(self, block_id):
        self._check(block_id)
        if self.ref_cnt[block_id] == 0:
            self._q.remove(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids):
        for b, k in Counter(block_ids).items():
            self._check(b)
            if self.ref_cnt[b] < k:
                raise ValueError(f"double free of {b}")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._q.append(b)
