"""Exercise 132 — prefix caching.

Statement: practice/exercises/132-prefix-caching.md. Grade: `python practice/judge.py 132`.
"""

from __future__ import annotations

from typing import Sequence

NONE_HASH = 0  # the parent hash of a request's first block


def hash_block(parent_hash: int, token_ids: Sequence[int]) -> int:
    """The hash naming a full block: its tokens chained with its parent block's hash, so that equal hashes mean
    equal prefixes, not merely equal blocks. Must be deterministic, equal in every process, and depend on
    both arguments (Python's `hash` of a tuple of ints is; its `hash` of a str changes with PYTHONHASHSEED)."""
    raise NotImplementedError("exercise 132: hash_block is not implemented yet (practice/prefix_cache.py)")


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of every FULL block of `token_ids`, in order (a trailing partial block has none).
    The first block's parent is NONE_HASH."""
    raise NotImplementedError("exercise 132: block_hashes is not implemented yet (practice/prefix_cache.py)")


class PrefixCache:
    """Maps block hashes to the block ids holding them and back. The KV-cache manager calls:

    - `lookup(hashes)` when a request is admitted, to reuse the blocks of the longest cached prefix;
    - `insert(block_hash, block_id)` when a block becomes full;
    - `evict(block_id)` when the block pool hands a block out again for new tokens.
    """

    def __init__(self) -> None:
        raise NotImplementedError("exercise 132: PrefixCache is not implemented yet (practice/prefix_cache.py)")

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """The block ids of the longest prefix of `hashes` that is cached, in order: stop at the first miss."""
        raise NotImplementedError("exercise 132: PrefixCache.lookup is not implemented yet")

    def insert(self, block_hash: int, block_id: int) -> None:
        """Record that `block_id` holds `block_hash`. If the hash is already cached, or the block already holds
        another hash, keep the existing entry (the first holder wins)."""
        raise NotImplementedError("exercise 132: PrefixCache.insert is not implemented yet")

    def evict(self, block_id: int) -> None:
        """Forget whatever `block_id` held, if anything: its contents are about to be overwritten."""
        raise NotImplementedError("exercise 132: PrefixCache.evict is not implemented yet")
