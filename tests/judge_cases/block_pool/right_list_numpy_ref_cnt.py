"""Correct: a plain list for the free queue, validation on a copy of the counts; ref_cnt as numpy int64."""
import numpy as np

from framework.errors import NoFreeBlocksError


class BlockPool:
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise ValueError("need at least one block")
        self.num_blocks = num_blocks
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int64)
        self.free_list = list(range(num_blocks))

    @property
    def num_free_blocks(self):
        return len(self.free_list)

    def allocate(self, n):
        if n < 0:
            raise ValueError("negative")
        if len(self.free_list) < n:
            raise NoFreeBlocksError("not enough")
        taken = self.free_list[:n]
        del self.free_list[:n]
        self.ref_cnt[taken] = 1
        return taken

    def incref(self, block_id):
        if block_id < 0 or block_id >= self.num_blocks:
            raise ValueError("bad id")
        if self.ref_cnt[block_id] == 0:
            self.free_list.remove(block_id)
        self.ref_cnt[block_id] += 1

    def free(self, block_ids):
        counts = self.ref_cnt.copy()
        for b in block_ids:
            if b < 0 or b >= self.num_blocks or counts[b] == 0:
                raise ValueError(f"cannot free {b}")
            counts[b] -= 1
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_list.append(b)
