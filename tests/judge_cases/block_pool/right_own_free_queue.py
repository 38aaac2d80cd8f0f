"""Correct: a free queue of its own design, a doubly linked list threaded through two arrays (O(1) removal of
any block, as vLLM's FreeKVCacheBlockQueue does), with no attribute named free_queue; ref_cnt a plain list."""
from framework.errors import NoFreeBlocksError

NONE = -1


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self._prev = [b - 1 for b in range(num_blocks)]
        self._next = [b + 1 if b + 1 < num_blocks else NONE for b in range(num_blocks)]
        self._head, self._tail, self._size = 0, num_blocks - 1, num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self._size

    def _unlink(self, b: int) -> None:
        p, n = self._prev[b], self._next[b]
        if p == NONE:
            self._head = n
        else:
            self._next[p] = n
        if n == NONE:
            self._tail = p
        else:
            self._prev[n] = p
        self._size -= 1

    def _push_back(self, b: int) -> None:
        self._prev[b], self._next[b] = self._tail, NONE
        if self._tail == NONE:
            self._head = b
        else:
            self._next[self._tail] = b
        self._tail = b
        self._size += 1

    def allocate(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(n)
        if n > self._size:
            raise NoFreeBlocksError(n)
        out = []
        for _ in range(n):
            b = self._head
            self._unlink(b)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def incref(self, block_id: int) -> None:
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(block_id)
        if self.ref_cnt[block_id] == 0:
            self._unlink(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        need: dict[int, int] = {}
        for b in block_ids:
            if not 0 <= b < self.num_blocks:
                raise ValueError(b)
            need[b] = need.get(b, 0) + 1
        if any(self.ref_cnt[b] < k for b, k in need.items()):
            raise ValueError("double free")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._push_back(b)
