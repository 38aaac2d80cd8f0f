# VIOLATES: `pool.num_blocks` is the number of blocks the pool was made with
"""Keeps the number of blocks under another name: `pool.num_blocks` is missing."""
from framework.errors import NoFreeBlocksError


class PoolMisuse(ValueError):
    """Everything the statement says raises ValueError."""


class BlockPool:
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise PoolMisuse(f"num_blocks must be positive, got {num_blocks}")
        self.size = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.queue = list(range(num_blocks))

    @property
    def num_free_blocks(self):
        return len(self.queue)

    def _check_id(self, block_id):
        if not 0 <= block_id < self.size:
            raise PoolMisuse(f"block id {block_id} is not in 0..{self.size - 1}")

    def allocate(self, n):
        if n < 0:
            raise PoolMisuse(f"cannot allocate {n} blocks")
        if n > len(self.queue):
            raise NoFreeBlocksError(f"{n} blocks asked, {len(self.queue)} free")
        taken = self.queue[:n]
        del self.queue[:n]
        for b in taken:
            self.ref_cnt[b] = 1
        return taken

    def incref(self, block_id):
        self._check_id(block_id)
        if self.ref_cnt[block_id] == 0:
            self.queue.remove(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids):
        wanted = {}
        for b in block_ids:
            self._check_id(b)
            wanted[b] = wanted.get(b, 0) + 1
        for b, times in wanted.items():
            if times > self.ref_cnt[b]:
                raise PoolMisuse(f"block {b} is released {times} times but held {self.ref_cnt[b]} times")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.queue.append(b)
