# EXERCISE: 125
"""Chapter 02's model of the block pool, if it ships one (a class with allocate, free and incref), with the
statement's names and argument checks added."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

from framework.errors import NoFreeBlocksError  # noqa: E402

Model = _shipped.define(_shipped.find("02_block_pool", methods=("allocate", "free", "incref")),
                        NoFreeBlocksError=NoFreeBlocksError)


class BlockPool(Model):
    def __init__(self, num_blocks):
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        super().__init__(num_blocks)
        self.num_blocks = num_blocks

    @property
    def ref_cnt(self):
        return self.ref

    @property
    def num_free_blocks(self):
        return len(self.queue)

    def allocate(self, n):
        if n < 0:
            raise ValueError("n must not be negative")
        return super().allocate(n)

    def incref(self, block_id):
        self._check([block_id])
        super().incref(block_id)

    def free(self, block_ids):
        self._check(block_ids)
        super().free(list(block_ids))

    def _check(self, block_ids):
        if any(not 0 <= b < self.num_blocks for b in block_ids):
            raise ValueError("block id out of range")
