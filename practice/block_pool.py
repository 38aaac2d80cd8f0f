"""Exercise 125 — the block pool.

Statement: practice/exercises/125-block-pool.md. Grade: `python practice/judge.py 125`.
"""

from __future__ import annotations

from framework.errors import NoFreeBlocksError  # raise this when too few blocks are free

__all__ = ["BlockPool", "NoFreeBlocksError"]


class BlockPool:
    """KV-cache memory cut into `num_blocks` fixed-size blocks, with ids 0 .. num_blocks-1.

    Public state the rest of the engine reads:
    - `num_blocks` (int);
    - `ref_cnt` (list[int]): how many owners each block has; 0 means free;
    - `num_free_blocks` (int property).

    Free blocks form a queue: `allocate` takes from the front, `free` appends at the back, so the block handed
    out next is the one freed longest ago (least recently used). Initially the queue is 0, 1, ..., num_blocks-1.
    """

    def __init__(self, num_blocks: int) -> None:
        """Raise ValueError if num_blocks is not positive."""
        raise NotImplementedError("exercise 125: BlockPool is not implemented yet (practice/block_pool.py)")

    @property
    def num_free_blocks(self) -> int:
        raise NotImplementedError("exercise 125: BlockPool.num_free_blocks is not implemented yet")

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the front of the free queue, each now with ref_cnt 1, and return their ids.

        All or nothing: if fewer than `n` are free, raise NoFreeBlocksError and change nothing.
        Raise ValueError for a negative `n`; `allocate(0)` returns [].
        """
        raise NotImplementedError("exercise 125: BlockPool.allocate is not implemented yet")

    def incref(self, block_id: int) -> None:
        """Add an owner to `block_id` (prefix caching shares blocks). A free block (ref_cnt 0) leaves the free
        queue. Raise ValueError for an id out of range."""
        raise NotImplementedError("exercise 125: BlockPool.incref is not implemented yet")

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block in `block_ids`, in order; a block whose ref_cnt reaches 0 is appended
        to the back of the free queue.

        Check everything first, so that a bad call changes nothing: raise ValueError for an id out of range or
        a double free (a block released more times than it is held, counting repeats within `block_ids`).
        """
        raise NotImplementedError("exercise 125: BlockPool.free is not implemented yet")
