"""The reference KV-cache manager (solutions/kv_cache_manager.py) over the block pool and the prefix cache."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from solutions.kv_cache_manager import KVCacheManager, blocks_needed
from solutions.prefix_cache import block_hashes
from framework.request import Request

BS = 4


def admit(kv: KVCacheManager, request: Request, num_new: int | None = None) -> bool:
    """What the scheduler does for a waiting request, then what the engine does after the forward pass."""
    computed = kv.get_computed_blocks(request)
    if num_new is None:
        num_new = request.num_tokens - request.num_computed_tokens - len(computed) * BS
    if not kv.allocate_slots(request, num_new, computed):
        return False
    request.num_computed_tokens += num_new
    return True


def decode(kv: KVCacheManager, request: Request, token: int) -> bool:
    """A sampled token joins the request; its K and V need a slot in the next step."""
    request.output_token_ids.append(token)
    if not kv.allocate_slots(request, 1):
        request.output_token_ids.pop()
        return False
    request.num_computed_tokens += 1
    return True


def test_blocks_needed():
    assert [blocks_needed(n, BS) for n in range(10)] == [0, 1, 1, 1, 1, 2, 2, 2, 2, 3]


def test_block_table_grows_one_block_per_block_size_tokens():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    request = Request([1, 2, 3])
    assert admit(kv, request)
    assert len(request.block_table) == 1 and kv.num_free_blocks == 7
    for t in range(4, 20):
        assert decode(kv, request, t)
        assert len(request.block_table) == blocks_needed(request.num_tokens, BS)
        assert kv.num_free_blocks == 8 - len(request.block_table)
    assert len(set(request.block_table)) == len(request.block_table)


def test_allocate_slots_is_all_or_nothing():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    a, b = Request(list(range(10))), Request(list(range(50, 58)))
    assert admit(kv, a)  # 10 tokens: 3 blocks
    assert kv.num_free_blocks == 1
    assert not admit(kv, b)  # 8 tokens need 2 blocks
    assert b.block_table == [] and b.num_computed_tokens == 0 and kv.num_free_blocks == 1
    assert admit(kv, b, num_new=4)  # a chunk of one block fits
    assert len(b.block_table) == 1 and kv.num_free_blocks == 0
    table = list(a.block_table)
    a.output_token_ids += [1, 2]  # the 11th and 12th tokens still fit in a's third block
    assert kv.allocate_slots(a, 2) and a.block_table == table
    a.num_computed_tokens += 2
    a.output_token_ids.append(3)  # the 13th needs a fourth block: none is free
    assert not kv.allocate_slots(a, 1) and a.block_table == table


def test_prefix_hit_shares_blocks_and_skips_computed_tokens():
    kv = KVCacheManager(num_blocks=16, block_size=BS, enable_prefix_caching=True)
    system = list(range(100, 108))  # two full blocks
    a, b = Request(system + [1, 2, 3]), Request(system + [7, 8])
    assert admit(kv, a)
    computed = kv.get_computed_blocks(b)
    assert computed == a.block_table[:2]
    free_before = kv.num_free_blocks
    assert kv.allocate_slots(b, b.num_tokens - 2 * BS, computed)
    assert b.num_computed_tokens == 2 * BS  # the manager counts the hits as computed ...
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [kv.block_pool.ref_cnt[x] for x in b.block_table] == [2, 2, 1]
    assert kv.num_free_blocks == free_before - 1  # ... and allocates only the tail block


def test_last_prompt_token_is_always_recomputed():
    kv = KVCacheManager(num_blocks=16, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(8)))
    assert admit(kv, a)
    twin = Request(list(range(8)))  # identical prompt of exactly two blocks
    computed = kv.get_computed_blocks(twin)
    assert computed == a.block_table[:1]  # not both: the last token must run to give logits
    assert twin.num_tokens - len(computed) * BS == 4


def test_no_hits_without_prefix_caching():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    a, b = Request(list(range(12))), Request(list(range(12)))
    assert admit(kv, a)
    assert kv.get_computed_blocks(b) == [] and kv.prefix_cache is None


def test_hit_on_a_free_cached_block_takes_it_out_of_the_free_queue():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(9)))
    assert admit(kv, a)
    first_two = a.block_table[:2]
    kv.free(a)
    assert kv.num_free_blocks == 8 and all(x in kv.block_pool.free_queue for x in first_two)
    b = Request(list(range(8)) + [42, 43])
    computed = kv.get_computed_blocks(b)
    assert computed == first_two  # the contents survive the free
    assert kv.allocate_slots(b, 2, computed)
    assert all(x not in kv.block_pool.free_queue and kv.block_pool.ref_cnt[x] == 1 for x in first_two)
    assert kv.num_free_blocks == 8 - 3


def test_free_hits_count_against_the_free_blocks():
    kv = KVCacheManager(num_blocks=3, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(8)) + [0])  # 9 tokens: 3 blocks, the first two full and cached
    assert admit(kv, a)
    cached = a.block_table[:2]
    kv.free(a)
    assert admit(kv, Request([900]))  # takes a's partial tail block; the two cached blocks stay free
    b = Request(list(range(4)) + [50, 51, 52, 53, 54])
    computed = kv.get_computed_blocks(b)
    assert computed == cached[:1]
    # The hit leaves the free queue and 2 new blocks are needed: 3 > 2 free, so nothing may change.
    assert not kv.allocate_slots(b, 5, computed)
    assert b.block_table == [] and b.num_computed_tokens == 0
    assert kv.num_free_blocks == 2 and kv.block_pool.ref_cnt[cached[0]] == 0
    assert kv.allocate_slots(b, 4, computed)  # a chunk: the hit plus one new block fit exactly
    assert b.block_table[0] == cached[0] and kv.num_free_blocks == 0


def test_reallocating_a_cached_free_block_evicts_its_hash():
    kv = KVCacheManager(num_blocks=6, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(13)))  # three full blocks (+1 token): blocks 0..3
    assert admit(kv, a)
    table = list(a.block_table)
    kv.free(a)
    assert list(kv.block_pool.free_queue)[-4:] == table[::-1]  # freed tail first
    probe = Request(list(range(13)))
    assert kv.get_computed_blocks(probe) == table[:3]
    b = Request(list(range(500, 508)))  # 2 blocks: the never-used blocks 4 and 5 go first (LRU)
    assert admit(kv, b)
    assert set(b.block_table) == {4, 5}
    assert kv.get_computed_blocks(probe) == table[:3]
    c = Request(list(range(600, 605)))  # 2 more blocks: a's partial tail, then its third block, are reused
    assert admit(kv, c)
    assert c.block_table == [table[3], table[2]]
    assert table[2] not in kv.prefix_cache.block_to_hash
    assert kv.get_computed_blocks(probe) == table[:2]  # the cached prefix shrank by the evicted block


def test_free_returns_blocks_tail_first():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    a = Request(list(range(14)))
    assert admit(kv, a)
    table = list(a.block_table)
    kv.free(a)
    assert a.block_table == []
    assert list(kv.block_pool.free_queue)[-len(table):] == table[::-1]


def test_double_free_is_caught():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    a = Request(list(range(6)))
    assert admit(kv, a)
    stale = list(a.block_table)
    kv.free(a)
    with pytest.raises(ValueError):
        kv.block_pool.free(stale)


def check_invariants(kv: KVCacheManager, live: list[Request]) -> None:
    pool = kv.block_pool
    holders = Counter(b for r in live for b in r.block_table)
    for r in live:
        assert len(set(r.block_table)) == len(r.block_table), "a request holds one block twice"
        assert len(r.block_table) == blocks_needed(r.num_computed_tokens, BS)
    assert all(pool.ref_cnt[b] == holders[b] for b in range(pool.num_blocks)), "ref counts != holders"
    assert set(pool.free_queue) == {b for b in range(pool.num_blocks) if holders[b] == 0}, "leak or double use"
    if kv.prefix_cache is not None:
        # A cached hash names the content the block really holds for every request that holds it.
        for r in live:
            for i, h in enumerate(block_hashes(r.all_token_ids[: r.num_computed_tokens], BS)):
                cached = kv.prefix_cache.block_to_hash.get(r.block_table[i])
                assert cached in (None, h), "a block is named by a hash of other tokens"
        assert {v: k for k, v in kv.prefix_cache.hash_to_block.items()} == kv.prefix_cache.block_to_hash


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_random_workload_keeps_the_books(seed, prefix_caching):
    rng = random.Random(seed)
    kv = KVCacheManager(num_blocks=24, block_size=BS, enable_prefix_caching=prefix_caching)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(BS + 1, 14))] for _ in range(3)]
    live: list[Request] = []
    hits = 0
    for _ in range(400):
        action = rng.random()
        if action < 0.3:  # a new request, often starting with a shared prefix
            prompt = rng.choice(prefixes)[:] if rng.random() < 0.7 else []
            prompt += [rng.randrange(1000) for _ in range(rng.randrange(1, 9))]
            request = Request(prompt)
            num_new = rng.randrange(1, request.num_tokens + 1)  # sometimes only a first chunk
            computed = kv.get_computed_blocks(request)
            num_new = max(1, min(num_new, request.num_tokens - len(computed) * BS))
            if kv.allocate_slots(request, num_new, computed):
                request.num_computed_tokens += num_new
                hits += len(computed)
                live.append(request)
            else:
                assert request.block_table == [] and request.num_computed_tokens == 0
        elif action < 0.75 and live:  # a step for a running request: the rest of its prompt, or a decode
            request = rng.choice(live)
            if request.num_computed_tokens == request.num_tokens:
                request.output_token_ids.append(rng.randrange(1000))
            before = (list(request.block_table), kv.num_free_blocks)
            num_new = request.num_tokens - request.num_computed_tokens
            if kv.allocate_slots(request, num_new):
                request.num_computed_tokens += num_new
            else:
                assert (request.block_table, kv.num_free_blocks) == before
        elif live:  # a request finishes or is preempted
            request = live.pop(rng.randrange(len(live)))
            kv.free(request)
        check_invariants(kv, live)
    for request in live:
        kv.free(request)
    assert kv.num_free_blocks == kv.block_pool.num_blocks and not any(kv.block_pool.ref_cnt)
    if prefix_caching:
        assert hits > 0, "the workload never exercised a prefix hit"


# ---------------------------------------------------------------- naming full blocks: only when a block fills

def test_block_hashes_run_only_when_a_block_fills():
    calls = []

    class Counting(KVCacheManager):
        block_hashes = staticmethod(lambda tokens, bs: calls.append(len(tokens)) or block_hashes(tokens, bs))

    kv = Counting(num_blocks=16, block_size=BS, enable_prefix_caching=True)
    request = Request(list(range(6)))
    assert admit(kv, request)
    calls.clear()  # admission looked the prompt up, then named its one full block
    for t in range(100, 140):  # 40 decode steps: tokens 7..46 of the request
        assert decode(kv, request, t)
    assert calls == [4 * n for n in range(2, 12)], "hashed on a step where no block filled"
    assert kv.prefix_cache.lookup(block_hashes(request.all_token_ids, BS)) == request.block_table[:11]


def test_a_prefix_cache_whose_lookup_returns_tuples_names_each_block_once():
    """A learner's lookup may return a tuple (132 accepts it): each full block is still offered to the cache once,
    and the hits come back as a list (a tuple never equalled [block_id], so every block was offered again at every
    step, 14,185 inserts for a 340-token request instead of 85)."""
    inserts = []

    class TupleLookups(KVCacheManager.prefix_cache_cls):
        def lookup(self, hashes):
            return tuple(super().lookup(hashes))

        def insert(self, block_hash, block_id):
            inserts.append(block_id)
            super().insert(block_hash, block_id)

    kv = type("Tuples", (KVCacheManager,), {"prefix_cache_cls": TupleLookups})(
        num_blocks=16, block_size=BS, enable_prefix_caching=True)
    request = Request(list(range(6)))
    assert admit(kv, request)
    for t in range(100, 126):
        assert decode(kv, request, t)
    assert sorted(inserts) == request.block_table[:8], "a block was offered to the prefix cache again"
    assert kv.get_computed_blocks(Request(list(range(6)) + list(range(100, 126)))) == request.block_table[:7]


def test_a_duplicate_block_takes_over_the_name_once_the_holder_is_evicted():
    kv = KVCacheManager(num_blocks=6, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(9)))  # blocks [0..3] [4..7] full, [8] partial
    assert admit(kv, a)
    twin = Request(list(range(8)))  # a hit on a's first block only: the last token is recomputed, so the twin
    assert admit(kv, twin)  # computes the second block again, into a block of its own
    shared, duplicate = twin.block_table
    assert shared == a.block_table[0] and duplicate != a.block_table[1]
    probe = block_hashes(list(range(8)), BS)
    assert kv.prefix_cache.lookup(probe) == a.block_table[:2]  # the first holder keeps the name
    kv.free(a)  # a's second block is free but still cached ...
    filler = Request(list(range(500, 516)))  # ... until the pool hands it out again: the filler takes every free
    assert admit(kv, filler)  # block, a's second one last (LRU)
    assert duplicate not in filler.block_table and kv.prefix_cache.lookup(probe) == [shared]
    kv.free(filler)
    assert decode(kv, twin, 42)  # the twin's next step offers its duplicate again: it now holds the name
    assert kv.prefix_cache.lookup(probe) == [shared, duplicate]
    late = Request(list(range(8)) + [7, 7])
    assert kv.get_computed_blocks(late) == [shared, duplicate]


def test_readmitted_request_names_its_new_table_even_if_freed_behind_the_managers_back():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_prefix_caching=True)
    a = Request(list(range(13)))
    assert admit(kv, a)
    kv.block_pool.free(a.block_table[::-1])  # what a preemption that bypasses kv.free does
    a.block_table, a.num_computed_tokens = [], 0
    filler = Request(list(range(100, 132)))
    assert admit(kv, filler)  # every block: a's cached ones are handed out again
    kv.free(filler)
    assert kv.get_computed_blocks(Request(list(range(13)))) == []
    assert admit(kv, a)
    assert kv.get_computed_blocks(Request(list(range(13)))) == a.block_table[:3]


@pytest.mark.parametrize("seed", range(8))
def test_prefix_cache_is_identical_to_rehashing_every_call(seed):
    """Differential: the manager before (rehash and re-offer every full block on every call) and now, driven by the
    same random admissions, chunks, decodes, frees and readmissions, hold the same names after every operation."""
    from benchmarks.prefix_hashing import RehashingKVCacheManager

    rng = random.Random(seed)
    # Prompts from few block-aligned prefixes, often identical, so that duplicate blocks and evictions happen.
    prefixes = [[rng.randrange(50) for _ in range(BS * rng.randrange(1, 4))] for _ in range(3)]
    managers = [RehashingKVCacheManager(16, BS, True), KVCacheManager(16, BS, True)]
    live: list[list[Request]] = []  # each entry: the same request in both managers
    waiting: list[list[Request]] = []  # freed (preempted) requests, to be readmitted
    for _ in range(300):
        action = rng.random()
        if action < 0.25 or (action < 0.35 and waiting):  # admit a new request or readmit a freed one
            if action < 0.25:
                prompt = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(0, 6))]
                pair = [Request(list(prompt)) for _ in managers]
            else:
                pair = waiting.pop(rng.randrange(len(waiting)))
            computed = [kv.get_computed_blocks(r) for kv, r in zip(managers, pair)]
            assert computed[0] == computed[1]
            num_new = pair[0].num_tokens - len(computed[0]) * BS
            num_new = rng.randrange(1, num_new + 1)  # sometimes only a first chunk
            done = [kv.allocate_slots(r, num_new, c) for kv, r, c in zip(managers, pair, computed)]
            assert done[0] == done[1]
            if done[0]:
                for r in pair:
                    r.num_computed_tokens += num_new
                live.append(pair)
            elif action >= 0.25:
                waiting.append(pair)
        elif action < 0.8 and live:  # a step: the rest of a prompt, or a decode
            pair = rng.choice(live)
            token = rng.randrange(50)
            for r in pair:
                if r.num_computed_tokens == r.num_tokens:
                    r.output_token_ids.append(token)
            num_new = pair[0].num_tokens - pair[0].num_computed_tokens
            done = [kv.allocate_slots(r, num_new) for kv, r in zip(managers, pair)]
            assert done[0] == done[1]
            if done[0]:
                for r in pair:
                    r.num_computed_tokens += num_new
        elif live:  # finished, or preempted to be recomputed later
            pair = live.pop(rng.randrange(len(live)))
            for kv, r in zip(managers, pair):
                kv.free(r)
                r.num_computed_tokens = 0
            if rng.random() < 0.5:
                waiting.append(pair)
        old, new = (kv.prefix_cache for kv in managers)
        assert (new.hash_to_block, new.block_to_hash) == (old.hash_to_block, old.block_to_hash)
        assert [r.block_table for r, _ in live] == [r.block_table for _, r in live]
        check_invariants(managers[1], [r for _, r in live])
