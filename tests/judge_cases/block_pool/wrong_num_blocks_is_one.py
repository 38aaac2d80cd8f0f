"""Wrong: `num_blocks` holds 1 whatever the pool was made with (the scheduler reads it as the size of the cache).

EXPECT: .num_blocks is 1
PUBLIC: caught
"""
from collections import Counter, deque

from framework.errors import NoFreeBlocksError


class BlockPool:
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise ValueError(num_blocks)
        self.size = num_blocks
        self.num_blocks = 1
        self._counts = [0] * num_blocks
        self._queue = deque(range(num_blocks))

    @property
    def ref_cnt(self):
        return self._counts

    @property
    def num_free_blocks(self):
        return len(self._queue)

    def allocate(self, n):
        if n < 0:
            raise ValueError(n)
        if n > len(self._queue):
            raise NoFreeBlocksError(n)
        out = [self._queue.popleft() for _ in range(n)]
        for b in out:
            self._counts[b] = 1
        return out

    def _check(self, b):
        if not 0 <= b < self.size:
            raise ValueError(b)

    def incref(self, b):
        self._check(b)
        if self._counts[b] == 0:
            self._queue.remove(b)
        self._counts[b] += 1

    def free(self, ids):
        for b, times in Counter(ids).items():
            self._check(b)
            if self._counts[b] < times:
                raise ValueError(b)
        for b in ids:
            self._counts[b] -= 1
            if self._counts[b] == 0:
                self._queue.append(b)
