"""The reference scheduler (solutions/scheduler.py): hand-built situations, then properties over seeded random
workloads driven by a fake model that only advances `num_computed_tokens` and appends a dummy token."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from solutions.kv_cache_manager import KVCacheManager, blocks_needed
from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams
from solutions.scheduler import Scheduler, SchedulerOutput


def make_scheduler(num_blocks=64, block_size=4, token_budget=16, max_num_seqs=8, chunked=True, prefix=False):
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=prefix)
    return Scheduler(kv, token_budget, max_num_seqs, enable_chunked_prefill=chunked)


def req(n_prompt: int, max_tokens: int = 4, first: int = 1, rid: str | None = None, tokens=None) -> Request:
    ids = list(tokens) if tokens is not None else list(range(first, first + n_prompt))
    kwargs = {"request_id": rid} if rid else {}
    return Request(ids, SamplingParams(max_tokens=max_tokens, ignore_eos=True), **kwargs)


def dummy_token(request: Request) -> int:
    """A deterministic 'sampled' token, different per request and position (so prefix hashes differ)."""
    return 1000 + 7 * len(request.output_token_ids) + sum(request.prompt_token_ids) % 97


def fake_update(sched: Scheduler, out: SchedulerOutput) -> None:
    """What the engine does after the forward pass, minus the model: advance, append a token, retire."""
    for s in out.scheduled:
        request, sampled = s.request, s.completes_prompt
        request.num_computed_tokens += s.num_new_tokens
        if sampled:
            request.output_token_ids.append(dummy_token(request))
            if len(request.output_token_ids) >= request.sampling_params.max_tokens:
                sched.finish(request, "length")


def plan(out: SchedulerOutput) -> list[tuple[str, int]]:
    return [(s.request.request_id, s.num_new_tokens) for s in out.scheduled]


def place_running(sched: Scheduler, request: Request, num_computed: int, outputs: list[int] = ()) -> None:
    """Put a request in the running list as if it had already computed `num_computed` tokens."""
    request.output_token_ids = list(outputs)
    assert sched.kv.allocate_slots(request, num_computed)
    request.num_computed_tokens = num_computed
    request.status = RequestStatus.RUNNING
    sched.running.append(request)


# ---------------------------------------------------------------- hand-built situations


def test_decodes_then_prefill_chunks_then_new_requests():
    sched = make_scheduler(token_budget=20)
    chunking = req(20, rid="chunking")  # admitted first, 8 of its 20 prompt tokens computed
    decoding = req(3, rid="decoding")  # admitted second, prompt done, one output token to feed back
    place_running(sched, chunking, 8)
    place_running(sched, decoding, 3, outputs=[42])
    sched.add_request(req(4, rid="new"))
    out = sched.schedule()
    # The decode goes first although it was admitted later; the chunk takes all 12 tokens it has left;
    # the new request gets the remaining 20 - 1 - 12 = 7 >= 4 tokens.
    assert plan(out) == [("decoding", 1), ("chunking", 12), ("new", 4)]
    assert [s.completes_prompt for s in out.scheduled] == [True, True, True]


def test_budget_left_after_decodes_limits_the_chunk_and_blocks_new_requests():
    sched = make_scheduler(token_budget=10)
    place_running(sched, req(20, rid="chunking"), 8)
    place_running(sched, req(3, rid="decoding"), 3, outputs=[42])
    sched.add_request(req(4, rid="new"))
    out = sched.schedule()
    assert plan(out) == [("decoding", 1), ("chunking", 9)]
    assert not out.scheduled[1].completes_prompt  # 8 + 9 < 20: no token sampled from this chunk
    assert [r.request_id for r in sched.waiting] == ["new"]


def test_long_prompt_is_cut_into_budget_sized_chunks():
    sched = make_scheduler(token_budget=16)
    sched.add_request(req(50, max_tokens=2, rid="long"))
    chunks, completes = [], []
    while sched.has_unfinished_requests():
        out = sched.schedule()
        chunks += [s.num_new_tokens for s in out.scheduled]
        completes += [s.completes_prompt for s in out.scheduled]
        fake_update(sched, out)
    # 50 = 16 + 16 + 16 + 2; then one decode for the second output token.
    assert chunks == [16, 16, 16, 2, 1]
    assert completes == [False, False, False, True, True]


def test_budget_exhaustion_by_decodes_admits_nothing():
    sched = make_scheduler(token_budget=3, max_num_seqs=8)
    for i in range(5):
        place_running(sched, req(2, first=10 * i + 1, rid=f"d{i}"), 2, outputs=[5])
    sched.add_request(req(2, rid="new"))
    out = sched.schedule()
    assert plan(out) == [("d0", 1), ("d1", 1), ("d2", 1)]  # admission order, budget 3
    assert out.num_scheduled_tokens == 3 and len(sched.waiting) == 1


def test_max_num_seqs_caps_running_requests():
    sched = make_scheduler(token_budget=100, max_num_seqs=2)
    for i, max_tokens in enumerate([1, 3, 3, 3]):
        sched.add_request(req(4, max_tokens=max_tokens, first=10 * i + 1, rid=f"r{i}"))
    out = sched.schedule()
    assert [rid for rid, _ in plan(out)] == ["r0", "r1"] and len(sched.running) == 2
    fake_update(sched, out)  # r0 (max_tokens=1) finishes and frees its seat
    out = sched.schedule()
    assert plan(out) == [("r1", 1), ("r2", 4)]
    assert len(sched.running) == 2 and [r.request_id for r in sched.waiting] == ["r3"]


def test_without_chunked_prefill_a_prompt_that_does_not_fit_waits():
    for chunked, expected in [(False, [("d0", 1), ("d1", 1)]), (True, [("d0", 1), ("d1", 1), ("big", 14)])]:
        sched = make_scheduler(token_budget=16, chunked=chunked)
        place_running(sched, req(2, first=1, rid="d0"), 2, outputs=[5])
        place_running(sched, req(2, first=5, rid="d1"), 2, outputs=[5])
        sched.add_request(req(15, max_tokens=1, first=20, rid="big"))  # 15 > 16 - 2 tokens left
        assert plan(sched.schedule()) == expected


def test_without_chunked_prefill_a_request_larger_than_the_budget_is_refused():
    sched = make_scheduler(token_budget=16, chunked=False)
    with pytest.raises(ValueError, match="token_budget"):
        sched.add_request(req(15, max_tokens=2))


def test_request_larger_than_the_whole_cache_is_refused():
    sched = make_scheduler(num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="whole cache"):
        sched.add_request(req(14, max_tokens=3))
    sched.add_request(req(14, max_tokens=2))  # 16 tokens: exactly the cache


def test_prefix_cached_tokens_are_not_recomputed():
    sched = make_scheduler(block_size=4, token_budget=64, prefix=True)
    shared = list(range(1, 9))  # two full blocks
    first = req(0, max_tokens=1, tokens=shared + [50, 51])
    sched.add_request(first)
    out = sched.schedule()
    first_blocks = list(first.block_table)
    fake_update(sched, out)
    assert first.is_finished and first.block_table == []
    second = req(0, max_tokens=1, tokens=shared + [60, 61, 62])
    sched.add_request(second)
    out = sched.schedule()
    # Two cached blocks (8 tokens) are taken over; only the 3 new tokens are computed.
    assert plan(out) == [(second.request_id, 3)]
    assert second.num_cached_tokens == 8 and second.num_computed_tokens == 8
    assert second.block_table[:2] == first_blocks[:2]  # freed, but still holding their K and V
    fake_update(sched, out)
    # The very same 8-token prompt: its last token is always recomputed (to get logits), so only the first
    # block (tokens 0..3) is a hit and 4 tokens are computed.
    third = req(0, max_tokens=1, tokens=shared)
    sched.add_request(third)
    out = sched.schedule()
    assert plan(out) == [(third.request_id, 4)] and third.num_cached_tokens == 4


def test_prefix_hit_takes_over_the_blocks_of_the_earlier_request():
    sched = make_scheduler(block_size=4, token_budget=64, prefix=True)
    shared = list(range(1, 9))
    first = req(0, max_tokens=3, tokens=shared + [50])
    sched.add_request(first)
    fake_update(sched, sched.schedule())  # first keeps running (1 of 3 tokens)
    second = req(0, max_tokens=1, tokens=shared + [60])
    sched.add_request(second)
    sched.schedule()
    assert second.block_table[:2] == first.block_table[:2]
    assert all(sched.kv.block_pool.ref_cnt[b] == 2 for b in first.block_table[:2])


def test_preemption_frees_the_latest_request_and_pauses_admission():
    # 4 blocks of 4 tokens. Two 7-token prompts take 2 blocks each; their decodes need a third block each.
    sched = make_scheduler(num_blocks=4, block_size=4, token_budget=64)
    a, b = req(7, max_tokens=4, first=1, rid="a"), req(7, max_tokens=4, first=20, rid="b")
    sched.add_request(a)
    sched.add_request(b)
    fake_update(sched, sched.schedule())  # both prefilled: 8 tokens each, 0 free blocks
    sched.add_request(req(2, rid="c"))
    out = sched.schedule()
    # a's decode (its 8th token) fits its 2 blocks; b's too. Next step both need a third block.
    fake_update(sched, out)
    out = sched.schedule()
    assert [r.request_id for r in out.preempted] == ["b"]
    assert plan(out) == [("a", 1)]  # nothing admitted in a step that preempted
    assert b.status == RequestStatus.WAITING and b.num_computed_tokens == 0 and b.block_table == []
    assert b.num_preemptions == 1 and sched.waiting[0] is b


def test_a_request_that_is_itself_the_latest_preempts_itself():
    sched = make_scheduler(num_blocks=2, block_size=4, token_budget=64)
    x = req(3, max_tokens=5, first=1, rid="x")
    a = req(4, max_tokens=5, first=20, rid="a")
    place_running(sched, x, 3, outputs=[9])  # its 4th token still fits its one block
    place_running(sched, a, 4, outputs=[9])  # its 5th token needs a second block; the pool is empty
    out = sched.schedule()
    assert plan(out) == [("x", 1)] and [r.request_id for r in out.preempted] == ["a"]
    assert sched.waiting[0] is a and a.block_table == []


def test_no_admission_in_a_step_that_preempted():
    # After the preemption one block is free and 2 tokens of budget are left: enough for a 2-token chunk of
    # the victim, but a step that preempted admits nothing (vLLM does the same), so it cannot thrash.
    sched = make_scheduler(num_blocks=3, block_size=4, token_budget=3)
    a = req(4, max_tokens=5, first=1, rid="a")
    b = req(10, max_tokens=2, first=20, rid="b")
    place_running(sched, a, 4, outputs=[9])  # 1 block, its decode needs a second
    place_running(sched, b, 8)  # 2 blocks, mid-prefill
    out = sched.schedule()
    assert plan(out) == [("a", 1)] and [r.request_id for r in out.preempted] == ["b"]
    assert sched.kv.num_free_blocks == 1 and list(sched.waiting) == [b]
    out = sched.schedule()  # the next step readmits it, with a chunk
    assert plan(out) == [("a", 1), ("b", 2)]


# ---------------------------------------------------------------- properties over random workloads


def check_invariants(sched: Scheduler, out: SchedulerOutput, all_requests: list[Request]) -> None:
    pool, kv = sched.kv.block_pool, sched.kv
    assert out.num_scheduled_tokens <= sched.token_budget
    assert len(sched.running) <= sched.max_num_seqs
    # Every request is in exactly one place.
    waiting, running = list(sched.waiting), list(sched.running)
    finished = [r for r in all_requests if r.is_finished]
    assert len(waiting) + len(running) + len(finished) == len(all_requests)
    assert len({id(r) for r in waiting + running + finished}) == len(all_requests)
    assert all(r.block_table == [] and r.num_computed_tokens == 0 for r in waiting)
    assert all(r.block_table == [] for r in finished)
    # Scheduled requests run, get at least one token, and own the blocks those tokens need.
    assert len({id(s.request) for s in out.scheduled}) == len(out.scheduled)
    for s in out.scheduled:
        r = s.request
        assert r.status == RequestStatus.RUNNING and r in running and s.num_new_tokens >= 1
        assert r.num_computed_tokens + s.num_new_tokens <= r.num_tokens
        assert len(r.block_table) >= blocks_needed(r.num_computed_tokens + s.num_new_tokens, kv.block_size)
    # Reference counts equal the number of running requests holding each block; the free queue is the rest.
    held = Counter(b for r in running for b in r.block_table)
    assert all(pool.ref_cnt[b] == held.get(b, 0) for b in range(pool.num_blocks))
    assert set(pool.free_queue) == {b for b in range(pool.num_blocks) if pool.ref_cnt[b] == 0}
    assert all(len(r.block_table) == len(set(r.block_table)) for r in running)


def random_workload(rng: random.Random, n: int, capacity: int, shared_prefixes: bool) -> list[Request]:
    prefixes = [[rng.randrange(1, 500) for _ in range(rng.randrange(4, 24))] for _ in range(3)]
    requests = []
    for _ in range(n):
        tail = [rng.randrange(1, 500) for _ in range(rng.randrange(1, 30))]
        prompt = (rng.choice(prefixes) + tail) if shared_prefixes and rng.random() < 0.7 else tail
        max_tokens = rng.randrange(1, 20)
        prompt = prompt[: capacity - max_tokens]
        requests.append(Request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
    return requests


CONFIGS = {
    "roomy": dict(num_blocks=256, block_size=4, token_budget=32, max_num_seqs=6),
    "tiny-budget": dict(num_blocks=256, block_size=4, token_budget=5, max_num_seqs=16),
    "no-chunking": dict(num_blocks=256, block_size=4, token_budget=64, max_num_seqs=8, chunked=False),
    "small-pool": dict(num_blocks=14, block_size=4, token_budget=24, max_num_seqs=8),
    "small-pool-prefix": dict(num_blocks=14, block_size=4, token_budget=24, max_num_seqs=8, prefix=True),
    "prefix": dict(num_blocks=128, block_size=4, token_budget=32, max_num_seqs=8, prefix=True),
    "block-16-prefix": dict(num_blocks=12, block_size=16, token_budget=40, max_num_seqs=4, prefix=True),
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_workload_properties(name: str, seed: int):
    config = CONFIGS[name]
    sched = make_scheduler(**config)
    rng = random.Random(1000 * seed + len(name))
    capacity = config["num_blocks"] * config["block_size"]
    if not config.get("chunked", True):
        capacity = min(capacity, config["token_budget"])
    requests = random_workload(rng, 30, capacity, shared_prefixes=config.get("prefix", False))
    arrivals = sorted(rng.randrange(0, 40) for _ in requests)  # the step each request arrives at
    step, num_preemptions = 0, 0
    while step < 2000:
        while arrivals and arrivals[0] <= step:
            arrivals.pop(0)
            sched.add_request(requests[len(requests) - len(arrivals) - 1])
        if not arrivals and not sched.has_unfinished_requests():
            break
        out = sched.schedule()
        if sched.has_unfinished_requests():
            assert out, f"step {step}: unfinished requests but nothing scheduled (deadlock)"
        num_preemptions += len(out.preempted)
        check_invariants(sched, out, requests[: len(requests) - len(arrivals)])
        fake_update(sched, out)
        step += 1
    assert not arrivals and not sched.has_unfinished_requests(), "workload did not finish in 2000 steps"
    # Every request ran to exactly max_tokens; every block is back and nothing is referenced.
    for r in requests:
        assert r.is_finished and r.finish_reason == "length"
        assert len(r.output_token_ids) == r.sampling_params.max_tokens
    pool = sched.kv.block_pool
    assert pool.num_free_blocks == pool.num_blocks and not any(pool.ref_cnt)
    if name.startswith("small-pool"):
        assert num_preemptions > 0, "the small pool was meant to force preemption"


def test_prefix_caching_saves_computed_tokens_on_shared_prefixes():
    """The same workload with and without prefix caching: same outputs, fewer tokens computed."""
    computed = {}
    for prefix in (False, True):
        sched = make_scheduler(num_blocks=128, block_size=4, token_budget=32, prefix=prefix)
        requests = random_workload(random.Random(7), 20, 512, shared_prefixes=True)
        total = 0
        for r in requests:
            sched.add_request(r)
        while sched.has_unfinished_requests():
            out = sched.schedule()
            total += out.num_scheduled_tokens
            fake_update(sched, out)
        computed[prefix] = total
        assert all(len(r.output_token_ids) == r.sampling_params.max_tokens for r in requests)
    assert computed[True] < computed[False]
