"""solutions/block_pool.py: the invariants of the block pool, by example and on random operation sequences.

Invariants: a block is free exactly when its reference count is 0 (no leak, no block both free and held); the
free blocks come out oldest-freed first (LRU); allocate is all or nothing; a bad free or incref raises and
changes nothing. The free-queue order is observed through `allocate` on a deep copy, so the tests rely only on
the public interface (num_blocks, ref_cnt, num_free_blocks, allocate, free, incref).
"""

from __future__ import annotations

import copy
import random

import pytest

from solutions.block_pool import BlockPool, NoFreeBlocksError


def free_order(pool: BlockPool) -> list[int]:
    """The free queue, front first, without touching `pool`."""
    probe = copy.deepcopy(pool)
    return probe.allocate(probe.num_free_blocks)


def snapshot(pool: BlockPool) -> tuple[list[int], list[int]]:
    return list(pool.ref_cnt), free_order(pool)


def test_new_pool_is_all_free_in_id_order():
    pool = BlockPool(5)
    assert pool.num_blocks == 5 and pool.num_free_blocks == 5
    assert pool.ref_cnt == [0] * 5
    assert free_order(pool) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", [0, -3])
def test_pool_needs_a_positive_size(n):
    with pytest.raises(ValueError):
        BlockPool(n)


def test_allocate_takes_from_the_front_with_count_one():
    pool = BlockPool(6)
    assert pool.allocate(2) == [0, 1]
    assert pool.allocate(3) == [2, 3, 4]
    assert pool.ref_cnt == [1, 1, 1, 1, 1, 0]
    assert pool.num_free_blocks == 1
    assert pool.allocate(0) == []
    with pytest.raises(ValueError):
        pool.allocate(-1)


def test_allocate_is_all_or_nothing():
    pool = BlockPool(4)
    pool.allocate(3)
    before = snapshot(pool)
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    assert snapshot(pool) == before
    assert pool.allocate(1) == [3]
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(1)


def test_freed_blocks_are_reused_least_recently_freed_first():
    pool = BlockPool(6)
    pool.allocate(6)
    pool.free([4, 1])
    pool.free([5])
    pool.free([0])
    assert free_order(pool) == [4, 1, 5, 0]
    assert pool.allocate(2) == [4, 1]
    pool.free([4])  # freed again: it goes behind 5 and 0
    assert free_order(pool) == [5, 0, 4]


def test_double_free_raises_and_changes_nothing():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    pool.free([a])
    before = snapshot(pool)
    with pytest.raises(ValueError, match="double free"):
        pool.free([b, a])  # b is fine, a is already free: nothing may change, not even b
    assert snapshot(pool) == before
    with pytest.raises(ValueError, match="double free"):
        pool.free([b, b])  # held once, released twice in one call
    assert snapshot(pool) == before
    with pytest.raises(ValueError):
        pool.free([3])  # never allocated
    assert snapshot(pool) == before


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_ids_out_of_range_raise(bad):
    pool = BlockPool(4)
    held = pool.allocate(2)
    before = snapshot(pool)
    with pytest.raises(ValueError):
        pool.free([held[0], bad])
    with pytest.raises(ValueError):
        pool.incref(bad)
    assert snapshot(pool) == before


def test_incref_shares_a_held_block():
    pool = BlockPool(3)
    (b,) = pool.allocate(1)
    pool.incref(b)
    assert pool.ref_cnt[b] == 2
    pool.free([b])
    assert pool.ref_cnt[b] == 1 and b not in free_order(pool)  # still held by its second owner
    pool.free([b])
    assert pool.ref_cnt[b] == 0 and free_order(pool)[-1] == b


def test_incref_of_a_free_block_takes_it_out_of_the_free_queue():
    """A prefix-cache hit on a freed block revives it: it must not be handed out again while held."""
    pool = BlockPool(4)
    pool.allocate(4)
    pool.free([2, 0, 3])
    pool.incref(0)
    assert pool.ref_cnt[0] == 1 and pool.num_free_blocks == 2
    assert free_order(pool) == [2, 3]
    assert pool.allocate(2) == [2, 3]
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(1)


class ModelPool:
    """An independent, obviously correct model: counts in a dict, the free queue as a plain list."""

    def __init__(self, n: int) -> None:
        self.ref = dict.fromkeys(range(n), 0)
        self.queue = list(range(n))

    def allocate(self, k: int) -> list[int]:
        if k > len(self.queue):
            raise NoFreeBlocksError
        taken, self.queue = self.queue[:k], self.queue[k:]
        for b in taken:
            self.ref[b] = 1
        return taken

    def incref(self, b: int) -> None:
        if self.ref[b] == 0:
            self.queue.remove(b)
        self.ref[b] += 1

    def free(self, blocks: list[int]) -> None:
        if any(blocks.count(b) > self.ref[b] for b in blocks):
            raise ValueError
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.queue.append(b)


def random_step(rng: random.Random, pool: BlockPool, model: ModelPool, owners: list[list[int]]) -> None:
    """One random operation on both pools; `owners` are the block lists the simulated requests hold."""
    op = rng.choice(["allocate", "allocate", "free", "incref", "bad_free"])
    if op == "allocate":
        k = rng.randint(0, pool.num_blocks // 2)
        expected = _outcome(model.allocate, k)
        got = _outcome(pool.allocate, k)
        assert got == expected
        if isinstance(got, list) and got:
            owners.append(got)
    elif op == "free" and owners:
        blocks = owners.pop(rng.randrange(len(owners)))
        rng.shuffle(blocks)
        model.free(blocks)
        pool.free(blocks)
    elif op == "incref":
        b = rng.randrange(pool.num_blocks)  # free or held: both are legal
        model.incref(b)
        pool.incref(b)
        owners.append([b])
    elif op == "bad_free":
        held = [b for blocks in owners for b in blocks]
        victim = rng.randrange(pool.num_blocks)
        blocks = held[: rng.randint(0, len(held))] + [victim] * (model.ref[victim] + 1)
        before = snapshot(pool)
        with pytest.raises(ValueError):
            pool.free(blocks)
        assert snapshot(pool) == before


def _outcome(fn, *args):
    try:
        return fn(*args)
    except NoFreeBlocksError:
        return NoFreeBlocksError


def check_invariants(pool: BlockPool, model: ModelPool, owners: list[list[int]]) -> None:
    order = free_order(pool)
    assert order == model.queue, "free queue out of LRU order"
    assert len(set(order)) == len(order), "a block is twice in the free queue"
    assert set(order) == {b for b in range(pool.num_blocks) if pool.ref_cnt[b] == 0}, "free iff count is 0"
    held = [b for blocks in owners for b in blocks]
    assert pool.ref_cnt == [held.count(b) for b in range(pool.num_blocks)], "counts differ from the owners (leak)"
    assert pool.num_free_blocks == len(order)


@pytest.mark.parametrize("seed", range(40))
def test_random_operation_sequences_keep_the_invariants(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 24)
    pool, model, owners = BlockPool(n), ModelPool(n), []
    for _ in range(200):
        random_step(rng, pool, model, owners)
        check_invariants(pool, model, owners)
    for blocks in owners:  # every owner releases: the pool is whole again
        pool.free(blocks)
    assert pool.num_free_blocks == n and pool.ref_cnt == [0] * n
