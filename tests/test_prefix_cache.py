"""The reference prefix cache (solutions/prefix_cache.py): chained block hashes and the hash <-> block map."""

from __future__ import annotations

import random

import pytest

from solutions.prefix_cache import NONE_HASH, PrefixCache, block_hashes, hash_block

BS = 4


def test_hash_block_depends_on_parent_and_tokens():
    assert hash_block(NONE_HASH, [1, 2, 3, 4]) == hash_block(NONE_HASH, (1, 2, 3, 4))  # deterministic, any sequence
    assert hash_block(NONE_HASH, [1, 2, 3, 4]) != hash_block(NONE_HASH, [1, 2, 3, 5])
    assert hash_block(NONE_HASH, [1, 2, 3, 4]) != hash_block(12345, [1, 2, 3, 4])
    assert hash_block(NONE_HASH, [1, 2, 3, 4]) != hash_block(NONE_HASH, [4, 3, 2, 1])  # order matters


def test_block_hashes_are_chained():
    tokens = list(range(10, 22))  # three full blocks
    hashes = block_hashes(tokens, BS)
    expected, parent = [], NONE_HASH
    for start in (0, 4, 8):
        parent = hash_block(parent, tokens[start : start + BS])
        expected.append(parent)
    assert hashes == expected


def test_same_block_after_different_prefixes_hashes_differently():
    shared_block = [7, 7, 7, 7]
    a = block_hashes([1, 2, 3, 4] + shared_block, BS)
    b = block_hashes([9, 9, 9, 9] + shared_block, BS)
    assert a[0] != b[0]
    assert a[1] != b[1], "the second block's hash must carry the first block's content"
    # ... and equal prefixes give equal hashes, block by block, whatever follows.
    c = block_hashes([1, 2, 3, 4] + shared_block + [5, 6, 7, 8], BS)
    assert c[:2] == a


@pytest.mark.parametrize("n, full", [(0, 0), (3, 0), (4, 1), (7, 1), (8, 2), (9, 2)])
def test_partial_block_is_not_hashed(n, full):
    tokens = list(range(100, 100 + n))
    hashes = block_hashes(tokens, BS)
    assert len(hashes) == full
    assert hashes == block_hashes(tokens[: full * BS], BS)  # the trailing partial block adds nothing


def test_lookup_returns_longest_cached_prefix():
    hashes = block_hashes(list(range(16)), BS)
    cache = PrefixCache()
    assert cache.lookup(hashes) == []
    for h, block in zip(hashes[:3], (5, 9, 2)):
        cache.insert(h, block)
    assert cache.lookup(hashes) == [5, 9, 2]
    assert cache.lookup(hashes[:2]) == [5, 9]
    assert cache.lookup([]) == []
    # A hole stops the lookup even though later blocks are cached: the prefix must be contiguous.
    cache.evict(9)
    assert cache.lookup(hashes) == [5]
    other = block_hashes([99] + list(range(1, 16)), BS)  # differs in the first token only
    assert cache.lookup(other) == []


def test_insert_first_holder_wins():
    cache = PrefixCache()
    cache.insert(111, 3)
    cache.insert(111, 4)  # same content computed again in another block: the first block stays the one named
    assert cache.lookup([111]) == [3]
    assert 4 not in cache.block_to_hash
    cache.insert(222, 3)  # block 3 already holds hash 111: it cannot hold two contents
    assert cache.lookup([222]) == []
    assert cache.block_to_hash[3] == 111


def test_evict_forgets_both_directions_and_ignores_unknown_blocks():
    cache = PrefixCache()
    cache.insert(111, 3)
    cache.insert(222, 4)
    cache.evict(3)
    assert cache.lookup([111]) == [] and 3 not in cache.block_to_hash
    assert cache.lookup([222]) == [4]
    cache.evict(3)  # nothing cached there any more: a no-op
    cache.evict(17)
    cache.insert(111, 4)  # block 4 still holds 222
    cache.insert(111, 3)  # block 3 is free to be named again
    assert cache.lookup([111, 222]) == [3, 4]


def test_random_inserts_and_evictions_keep_the_two_maps_inverse():
    rng = random.Random(0)
    cache, model = PrefixCache(), {}
    for _ in range(2000):
        h, b = rng.randrange(30), rng.randrange(20)
        if rng.random() < 0.6:
            cache.insert(h, b)
            if h not in model and b not in model.values():
                model[h] = b
        else:
            cache.evict(b)
            model = {k: v for k, v in model.items() if v != b}
        assert cache.hash_to_block == model
        assert cache.block_to_hash == {v: k for k, v in model.items()}
