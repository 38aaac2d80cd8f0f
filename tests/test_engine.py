"""The reference inference loop (solutions/engine.py) on the embedded model, fp32 on the CPU.

The independent reference is `mini_llm.generate`, one request at a time with a contiguous KV cache: whatever
the engine batches, chunks, preempts or takes from the prefix cache, greedy tokens must be identical.
"""

from __future__ import annotations

import random

import pytest
import torch

import mini_llm
from mini_llm.prompts import STANDARD_PROMPTS
from framework.engine import StepError, stop_reason
from framework.request import IncrementalDetokenizer, Request
from framework.sampling import SamplingParams
from solutions.engine import LLM, EngineConfig, LLMEngine

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def model():
    return mini_llm.load_transformer(dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def tokenizer():
    return mini_llm.load_tokenizer()


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(p) for p in STANDARD_PROMPTS]


@pytest.fixture(scope="module")
def random_prompts(model) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(model.cfg.vocab_size) for _ in range(rng.randrange(1, 40))] for _ in range(10)]


_reference_cache: dict[tuple, list[int]] = {}


def reference(model, prompt: list[int], max_tokens: int, eos: int | None) -> list[int]:
    """mini_llm.generate of one request alone (memoized: several tests ask for the same continuation)."""
    key = (id(model), tuple(prompt), max_tokens, eos)
    if key not in _reference_cache:
        _reference_cache[key] = mini_llm.generate(model, prompt, max_tokens, eos_token_id=eos)
    return list(_reference_cache[key])


def run(model, prompts, config: EngineConfig, params: SamplingParams, eos=None, tokenizer=None) -> tuple:
    engine = LLMEngine(model, config, tokenizer=tokenizer, eos_token_id=eos)
    outputs = engine.generate(prompts, params)
    return engine, [o.outputs[0].token_ids for o in outputs], outputs


CONFIGS = {
    "default": EngineConfig(),
    "chunked-prefill": EngineConfig(token_budget=7, block_size=4, num_blocks=128),
    "no-chunking": EngineConfig(token_budget=80, enable_chunked_prefill=False, block_size=8, num_blocks=64),
    "preemption": EngineConfig(num_blocks=18, block_size=4, token_budget=64, max_num_seqs=8),
    "prefix-caching": EngineConfig(num_blocks=64, block_size=4, token_budget=16, enable_prefix_caching=True),
    "one-seq": EngineConfig(max_num_seqs=1, block_size=16, num_blocks=16),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_matches_generate_alone(model, prompts, random_prompts, name):
    config = CONFIGS[name]
    workload = prompts + random_prompts
    if name == "prefix-caching":  # shared prefixes, including a whole prompt repeated
        workload = prompts + [prompts[0] + p for p in prompts[1:]] + [prompts[0]]
    eos = model.cfg.eos_token_id
    engine, got, outputs = run(model, workload, config, SamplingParams(max_tokens=MAX_TOKENS), eos=eos)
    expected = [reference(model, p, MAX_TOKENS, eos) for p in workload]
    mismatches = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    print(f"{name}: {len(workload)} requests, {engine.runner.num_forward_passes} forward passes, "
          f"mismatches {mismatches}")
    assert not mismatches
    requests = list(engine.requests.values())
    if name == "preemption":
        assert sum(r.num_preemptions for r in requests) > 0
    if name == "prefix-caching":
        assert sum(r.num_cached_tokens for r in requests) > 0
    pool = engine.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks and not any(pool.ref_cnt)


def test_chunked_prefill_actually_chunks(model, prompts):
    engine = LLMEngine(model, CONFIGS["chunked-prefill"])
    engine.add_requests(prompts, SamplingParams(max_tokens=2))
    sched = engine.scheduler.schedule()
    assert sched.num_scheduled_tokens == 7 and not sched.scheduled[-1].completes_prompt


def test_max_tokens_is_exact_with_ignore_eos(model, prompts):
    lengths = [1, 2, 5, 9, 13, 17]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in lengths]
    _, got, outputs = run(model, prompts, EngineConfig(block_size=4, num_blocks=64), params)
    assert [len(t) for t in got] == lengths
    assert all(o.finished and o.outputs[0].finish_reason == "length" for o in outputs)
    for p, n, g in zip(prompts, lengths, got):
        assert g == reference(model, p, n, None)


def test_eos_stops_exactly_at_the_first_end_of_sequence(model, prompts):
    # Make the 4th greedy token of the first prompt the end-of-sequence token: that request must stop right
    # after it (reason "stop") and the others must stop at their own first occurrence of it, if any.
    free_run = [reference(model, p, 12, None) for p in prompts]
    eos = free_run[0][3]
    _, got, outputs = run(model, prompts, EngineConfig(), SamplingParams(max_tokens=12), eos=eos)
    for tokens, out, full in zip(got, outputs, free_run):
        cut = full[: full.index(eos) + 1] if eos in full else full
        assert tokens == cut
        assert out.outputs[0].finish_reason == ("stop" if eos in full else "length")
    assert len(got[0]) == free_run[0].index(eos) + 1 <= 4
    # ignore_eos runs through it.
    _, got, _ = run(model, prompts[:1], EngineConfig(), SamplingParams(max_tokens=12, ignore_eos=True), eos=eos)
    assert got[0] == free_run[0]


def test_stop_string_stops_at_the_token_that_completes_it(model, tokenizer, prompts):
    full = reference(model, prompts[1], 16, None)
    text = tokenizer.decode(full)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    # The first token count whose decoded text contains the stop string, computed from the reference.
    expected_len = next(n for n in range(1, len(full) + 1) if stop in tokenizer.decode(full[:n]))
    params = SamplingParams(max_tokens=16, stop=[stop], ignore_eos=True)
    _, got, outputs = run(model, prompts[1:2], EngineConfig(), params, tokenizer=tokenizer)
    assert got[0] == full[:expected_len]
    assert outputs[0].outputs[0].finish_reason == "stop" and stop in outputs[0].outputs[0].text


def test_stream_yields_every_token_in_order(model, prompts):
    engine = LLMEngine(model, EngineConfig(token_budget=8, block_size=4, num_blocks=64))
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    seen: dict[str, list[int]] = {}
    finished: list[str] = []
    for out in engine.stream(prompts, params):
        assert len(out.new_token_ids) == 1 and out.request_id not in finished
        seen.setdefault(out.request_id, []).extend(out.new_token_ids)
        assert out.outputs[0].token_ids == seen[out.request_id]  # cumulative output so far
        if out.finished:
            finished.append(out.request_id)
    assert len(finished) == len(prompts)
    for request_id, p in zip(sorted(seen, key=lambda r: int(r.split("-")[1])), prompts):
        assert seen[request_id] == reference(model, p, 6, None)


def test_llm_text_api(model, tokenizer):
    llm = LLM(dtype=torch.float32, device="cpu", num_blocks=64, block_size=8)
    outputs = llm.generate(STANDARD_PROMPTS[:3], SamplingParams(max_tokens=10))
    assert len(outputs) == 3
    for prompt, out in zip(STANDARD_PROMPTS, outputs):
        ids = tokenizer.encode(prompt)
        assert out.prompt_token_ids == ids and out.finished
        assert out.outputs[0].token_ids == reference(model, ids, 10, model.cfg.eos_token_id)
        assert out.outputs[0].text == tokenizer.decode(out.outputs[0].token_ids)
    single = llm.generate(STANDARD_PROMPTS[0], SamplingParams(max_tokens=10))  # one string is fine too
    assert single[0].outputs[0].token_ids == outputs[0].outputs[0].token_ids


def test_seeded_sampling_is_reproducible_and_independent_of_batching(model, prompts):
    sampled = SamplingParams(max_tokens=12, temperature=0.9, seed=1234, ignore_eos=True)
    others = [SamplingParams(max_tokens=n, temperature=1.0, seed=n, ignore_eos=True) for n in (5, 9, 12, 7, 3)]
    _, alone, _ = run(model, prompts[:1], EngineConfig(), sampled)
    _, batched, _ = run(model, prompts, EngineConfig(token_budget=9, block_size=4), [sampled] + others)
    _, again, _ = run(model, prompts[:1], EngineConfig(), sampled)
    assert alone[0] == batched[0] == again[0]
    # The same seed through mini_llm.generate's own sampler: the same draws.
    assert alone[0] == mini_llm.generate(model, prompts[0], 12, temperature=0.9, seed=1234)
    other_seed = SamplingParams(max_tokens=12, temperature=0.9, seed=4321, ignore_eos=True)
    assert run(model, prompts[:1], EngineConfig(), other_seed)[1][0] != alone[0]


def test_continuous_batching_shares_forward_passes(model, prompts):
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    batched, _, _ = run(model, prompts, EngineConfig(), params)
    alone = sum(run(model, [p], EngineConfig(), params)[0].runner.num_forward_passes for p in prompts)
    # Alone: one prefill pass plus MAX_TOKENS - 1 decode passes per request; batched: the same passes shared.
    assert alone == len(prompts) * MAX_TOKENS
    assert batched.runner.num_forward_passes == MAX_TOKENS


BAD_PARAMS = [  # (field, value, what the message says), each refused by SamplingParams and again by add_request
    ("max_tokens", 0, "at least 1"), ("max_tokens", 2.0, "be an int"), ("max_tokens", True, "be an int"),
    ("temperature", float("nan"), "finite"), ("temperature", float("inf"), "finite"), ("temperature", -0.5, ">= 0"),
    ("temperature", "hot", "a number"), ("top_k", -2, "0 or -1"), ("top_k", 2.5, "be an int"),
    ("top_p", 0.0, r"\(0, 1\]"), ("top_p", float("nan"), "finite"), ("stop", [""], "non-empty"),
    ("stop", [1], "non-empty"), ("ignore_eos", 1, "True or False"), ("seed", -1, r"\[0, 2\*\*64\)"),
    ("seed", 1.5, "be an int"),
]


@pytest.mark.parametrize("field,value,message", BAD_PARAMS, ids=[f"{f}={v!r}" for f, v, _ in BAD_PARAMS])
def test_bad_sampling_params_are_refused(model, field, value, message):
    with pytest.raises(ValueError, match=f"{field} must.*{message}"):
        SamplingParams(**{field: value})
    params = SamplingParams()
    setattr(params, field, value)  # changed after it was made: add_request checks again
    engine = LLMEngine(model, EngineConfig(num_blocks=8, block_size=4))
    with pytest.raises(ValueError, match=f"{field} must.*{message}"):
        engine.add_request([1, 2, 3], params)
    assert not engine.has_unfinished_requests() and not engine.requests


def test_bad_input_is_refused_clearly(model):
    engine = LLMEngine(model, EngineConfig(num_blocks=4, block_size=4))
    vocab = model.cfg.vocab_size
    with pytest.raises(ValueError, match="at least one prompt token"):
        engine.add_request([])
    with pytest.raises(ValueError, match="max_tokens"):
        engine.add_request([1, 2, 3], SamplingParams(max_tokens=0))
    with pytest.raises(ValueError, match="whole cache holds 16"):
        engine.add_request(list(range(1, 15)), SamplingParams(max_tokens=3))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        engine.add_request([1] * model.cfg.max_position_embeddings, SamplingParams(max_tokens=1))
    for token in (10**6, vocab, -1, 1.0, True, "a"):  # the first two used to fail inside step with an IndexError
        with pytest.raises(ValueError, match=rf"prompt token 1 is .*ints in \[0, {vocab}\)"):
            engine.add_request([5, token])
    with pytest.raises(ValueError, match="must be a list of token ids.*got str"):
        engine.add_request("Once upon a time")
    with pytest.raises(ValueError, match="params must be a SamplingParams"):
        engine.add_request([1], {"max_tokens": 3})
    with pytest.raises(ValueError, match="2 prompts but 1 SamplingParams"):
        engine.add_requests([[1], [2]], [SamplingParams()])
    with pytest.raises(ValueError, match="prompt 1 of 2 refused, so none was added: prompt token 0 is"):
        engine.add_requests([[1], [vocab]], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="EngineConfig.token_budget must be an int >= 1, got 0"):
        EngineConfig(token_budget=0)
    assert not engine.has_unfinished_requests() and not engine.requests
    assert engine.kv_cache_manager.num_free_blocks == 4


def test_top_k_zero_and_minus_one_mean_no_cut(model, prompts):
    # As in vLLM, top_k 0 and -1 keep every token: the same seeded draws as a cut at the whole vocabulary.
    got = [run(model, prompts[:1], EngineConfig(), SamplingParams(max_tokens=8, temperature=1.0, seed=3, top_k=k,
                                                                   ignore_eos=True))[1][0]
           for k in (0, -1, model.cfg.vocab_size)]
    assert got[0] == got[1] == got[2]


def fail_on_call(runner, calls: set[int], where: str = "before"):
    """Make the runner raise on the given calls of execute_model (counted from 0): before the forward pass, in
    the middle of it (after the first layers wrote their K and V), or after it (as a failed sampling would)."""
    execute, write_kv, count = runner.execute_model, runner.write_kv, [0, 0]

    def failing_write_kv(*args):
        count[1] += 1
        if count[1] == 3:
            raise RuntimeError("injected failure (middle)")
        return write_kv(*args)

    def failing_execute(items):
        call, count[0], count[1] = count[0], count[0] + 1, 0
        if call not in calls:
            return execute(items)
        if where == "before":
            raise RuntimeError("injected failure (before)")
        if where == "middle":
            runner.write_kv = failing_write_kv
            try:
                return execute(items)
            finally:
                runner.write_kv = write_kv
        execute(items)
        raise RuntimeError("injected failure (after)")

    runner.execute_model = failing_execute


@pytest.mark.parametrize("where", ["before", "middle", "after"])
def test_a_failed_step_finishes_its_requests_and_the_engine_goes_on(model, prompts, where):
    # Prefix caching on, and a failure in the very first step: the blocks that step named in the prefix cache
    # were never (fully) written, and a later request with the same prompt must not find them.
    engine = LLMEngine(model, EngineConfig(num_blocks=32, block_size=4, token_budget=64, enable_prefix_caching=True))
    for cache in (engine.runner.kv_cache.key_caches, engine.runner.kv_cache.value_caches):
        cache.normal_(std=10)  # stale values, as in a long-lived engine: reading a block never written shows
    fail_on_call(engine.runner, {0}, where)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    failed = engine.add_requests(prompts[:2], params)
    with pytest.raises(StepError, match=rf"injected failure \({where}\)") as caught:
        engine.step()
    assert caught.value.request_ids == [r.request_id for r in failed]
    assert isinstance(caught.value.__cause__, RuntimeError)
    for r in failed:
        out = engine.make_output(r, [])
        assert out.finished and out.outputs[0].finish_reason == "error" and "injected failure" in out.error
    pool = engine.kv_cache_manager.block_pool
    assert not engine.has_unfinished_requests() and pool.num_free_blocks == pool.num_blocks and not any(pool.ref_cnt)
    # The same prompts again, and others: exactly the tokens each gets alone, and every block back.
    workload = prompts[:2] + prompts[2:]
    outputs = engine.generate(workload, params)
    assert [o.outputs[0].token_ids for o in outputs] == [reference(model, p, 6, None) for p in workload]
    assert pool.num_free_blocks == pool.num_blocks and not any(pool.ref_cnt)


def test_a_failed_step_spares_the_requests_it_did_not_run(model, prompts):
    # max_num_seqs=2: the third request waits while the first two fail; it then runs as if nothing happened.
    engine = LLMEngine(model, EngineConfig(max_num_seqs=2, block_size=4, num_blocks=32))
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    requests = engine.add_requests(prompts[:3], params)
    engine.step()
    fail_on_call(engine.runner, {0}, "middle")
    with pytest.raises(StepError) as caught:
        engine.step()
    assert caught.value.request_ids == [r.request_id for r in requests[:2]]
    while engine.has_unfinished_requests():
        engine.step()
    assert requests[2].finish_reason == "length"
    assert requests[2].output_token_ids == reference(model, prompts[2], 5, None)
    assert engine.kv_cache_manager.num_free_blocks == 32


def test_generate_and_stream_abort_their_requests_when_they_stop_early(model, prompts):
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=64, token_budget=8))
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    fail_on_call(engine.runner, {3})
    with pytest.raises(StepError):
        engine.generate(prompts, params)
    reasons = {r.finish_reason for r in engine.requests.values()}
    assert not engine.has_unfinished_requests() and reasons <= {"error", "abort", "length"} and "error" in reasons
    assert engine.kv_cache_manager.num_free_blocks == 64
    for out in engine.stream(prompts, params):  # leaving the loop early closes the stream
        break
    assert not engine.has_unfinished_requests() and engine.kv_cache_manager.num_free_blocks == 64
    outputs = engine.generate(prompts[:2], params)
    assert [o.outputs[0].token_ids for o in outputs] == [reference(model, p, 4, None) for p in prompts[:2]]


def test_finished_requests_are_not_kept_forever(model, prompts):
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=64, max_finished_requests=3))
    params = SamplingParams(max_tokens=1)
    for p in prompts:
        engine.generate([p], params)
    assert len(engine.requests) == 4  # the 3 kept, and the last one, added after the others finished
    waiting = engine.add_requests(prompts, params)  # unfinished requests are never dropped
    assert all(r.request_id in engine.requests for r in waiting)


def test_incremental_text_is_the_full_decode(tokenizer):
    # Random ids, half of them among the single-byte tokens that split multi-byte characters: after every
    # token, the text must be exactly tokenizer.decode of all tokens so far, U+FFFD included.
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(len(tokenizer)) if rng.random() < 0.5 else rng.randrange(300)
               for _ in range(rng.randrange(1, 30))]
        detokenizer = IncrementalDetokenizer()
        for n in range(1, len(ids) + 1):
            assert detokenizer.decode(tokenizer, ids[:n]) == tokenizer.decode(ids[:n]), ids[:n]


def test_stop_strings_are_found_where_a_full_search_finds_them(tokenizer):
    rng = random.Random(1)
    for _ in range(200):
        ids = [rng.randrange(len(tokenizer)) for _ in range(20)]
        text = tokenizer.decode(ids)
        start = rng.randrange(len(text))
        stops = [text[start: start + rng.randrange(1, 4)], "\ufffd\ufffd", "zzqx"]
        first = next((n for n in range(1, 21) if any(s in tokenizer.decode(ids[:n]) for s in stops)), None)
        request = Request([1], SamplingParams(max_tokens=20, stop=stops, ignore_eos=True))
        for n, token in enumerate(ids, 1):
            request.output_token_ids.append(token)
            reason = stop_reason(request, None, tokenizer)
            assert stop_reason(request, None, tokenizer) == reason  # asking twice gives the same answer
            if reason == "stop":
                break
        assert n == first
