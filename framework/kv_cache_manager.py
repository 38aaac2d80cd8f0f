"""The KV-cache manager: which blocks each request holds, grown as its tokens are scheduled.

It sits between the scheduler and the block pool, as vLLM v1's `KVCacheManager`
(vllm/v1/core/kv_cache_manager.py): `get_computed_blocks` for prefix hits, `allocate_slots`, `free`.
It is built from a block pool (exercise 125) and a prefix cache (exercise 132), given as class attributes:
practice/kv_cache_manager.py plugs in yours, and its twin in solutions/ the reference ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .request import Request


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def blocks_to_allocate(request: Request, num_new_tokens: int, computed_blocks: Sequence[int], block_size: int,
                       ref_cnt: Sequence[int]) -> tuple[int, int]:
    """What `allocate_slots` takes from the pool: (new blocks, new blocks + prefix hits on free blocks). A hit on a
    free block takes it out of the free queue, so it counts against what is free too."""
    total = request.num_computed_tokens + len(computed_blocks) * block_size + num_new_tokens
    num_new_blocks = blocks_needed(total, block_size) - len(request.block_table) - len(computed_blocks)
    return num_new_blocks, num_new_blocks + sum(1 for b in computed_blocks if ref_cnt[b] == 0)


@dataclass
class BlockNames:
    """What the manager knows of one request's full blocks. A request's tokens only grow, so the hash of a full
    block never changes: it is computed once, when the block fills."""
    hashes: list[int] = field(default_factory=list)  # chained hashes of its full blocks so far, in order
    num_offered: int = 0  # blocks of its current block table offered to the prefix cache
    unregistered: list[int] = field(default_factory=list)  # offered while another block held the same hash


class KVCacheManagerBase:
    block_pool_cls: type  # BlockPool(num_blocks)
    prefix_cache_cls: type  # PrefixCache()
    block_hashes: Callable[[Sequence[int], int], list[int]]  # block_hashes(token_ids, block_size)

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size = block_size
        self.block_pool = self.block_pool_cls(num_blocks)
        self.prefix_cache = self.prefix_cache_cls() if enable_prefix_caching else None
        self.block_names: dict[Request, BlockNames] = {}  # running requests, with prefix caching on

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def get_computed_blocks(self, request: Request) -> list[int]:
        """Cached blocks holding a prefix of a new request's tokens. The last token is always recomputed, so
        that the step that finishes the prompt produces logits."""
        if self.prefix_cache is None:
            return []
        hashes = self.block_hashes(request.all_token_ids[: request.num_tokens - 1], self.block_size)
        return list(self.prefix_cache.lookup(hashes))  # a learner's lookup may return a tuple

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks: list[int] = ()) -> bool:
        """Grow `request.block_table` to hold `num_new_tokens` more tokens, first taking `computed_blocks`
        (prefix hits of a new request). All or nothing: returns False, changing nothing, when blocks run out."""
        pool = self.block_pool
        num_new_blocks, taken = blocks_to_allocate(request, num_new_tokens, computed_blocks, self.block_size,
                                                   pool.ref_cnt)
        if taken > pool.num_free_blocks:
            return False
        if not request.block_table:  # admitted, or readmitted after its blocks were freed: a new table to name
            self.block_names.pop(request, None)
        for b in computed_blocks:
            pool.incref(b)
        request.block_table.extend(computed_blocks)
        request.num_computed_tokens += len(computed_blocks) * self.block_size
        new_blocks = pool.allocate(max(num_new_blocks, 0))
        if self.prefix_cache is not None:
            for b in new_blocks:
                self.prefix_cache.evict(b)
        request.block_table.extend(new_blocks)
        self._cache_full_blocks(request, request.num_computed_tokens + num_new_tokens)
        return True

    def free(self, request: Request) -> None:
        """Return the request's blocks, tail first: the tail is the least likely to be shared by a later request."""
        self.block_pool.free(request.block_table[::-1])
        request.block_table = []
        self.block_names.pop(request, None)

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Name every full block among the first `num_tokens` tokens, so later requests can find it.

        Only blocks that filled since the last call are new; a block whose hash another block held when it filled
        is offered again on every call, so that it takes over the name once that block is evicted."""
        if self.prefix_cache is None:
            return
        names = self.block_names.setdefault(request, BlockNames())
        # Slots for draft tokens (framework/spec_decode.py) reach past the request's tokens: no name for them yet.
        num_full = min(num_tokens, request.num_tokens) // self.block_size
        if num_full > len(names.hashes):
            # `block_hashes` (exercise 132) chains from the first block, so naming new blocks costs one pass over
            # the prefix, once per filled block; the decode steps in between hash nothing.
            names.hashes = self.block_hashes(request.all_token_ids[: num_full * self.block_size], self.block_size)
        offered = names.unregistered + list(range(names.num_offered, num_full))
        names.num_offered = max(names.num_offered, num_full)
        names.unregistered = [i for i in offered if not self._register(names.hashes[i], request.block_table[i])]

    def _register(self, block_hash: int, block_id: int) -> bool:
        """Offer the name to the prefix cache; whether `block_id` now holds it (the first holder wins)."""
        self.prefix_cache.insert(block_hash, block_id)
        return list(self.prefix_cache.lookup([block_hash])) == [block_id]
