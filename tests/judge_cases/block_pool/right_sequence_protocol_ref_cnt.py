"""Right: `ref_cnt` is a read-only view that indexes and iterates like a list through the sequence protocol
(`__getitem__` and `__len__`, no `__iter__`), as the statement allows ("anything that indexes and iterates like
one"); a deque as the free queue.

EXPECT: pass
"""
from collections import Counter, deque

from framework.errors import NoFreeBlocksError


class Counts:
    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, i):
        return self._data[i]  # IndexError past the end ends an iteration


class BlockPool:
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise ValueError(num_blocks)
        self.num_blocks = num_blocks
        self._counts = [0] * num_blocks
        self._queue = deque(range(num_blocks))

    @property
    def ref_cnt(self):
        return Counts(self._counts)

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
        if not 0 <= b < self.num_blocks:
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
