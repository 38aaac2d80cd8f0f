"""Fuzzing the engine's door and its recovery from failed steps, with hypothesis.

Each example drives the reference engine (solutions/engine.py, embedded model, fp32, CPU) through a random
interleaving of valid requests, invalid ones (bad token ids, bad sampling parameters, prompts too long) and steps,
some of which fail inside the model runner: before the forward pass, halfway through it (some layers' K and V
written), or after it (as a failed sampling would). Whatever the interleaving:

- every invalid request is refused at `add_request` with a ValueError and leaves no trace;
- a step fails with one StepError naming exactly the requests it ran, which end with reason "error";
- after every operation, each block is either free or held by the running requests that reference it;
- every valid request that was not in a failed step ends with exactly the tokens it gets alone
  (`mini_llm.generate`, the independent reference), cut after the token that completes a stop string;
- at the end no request is unfinished and every block is free.
"""

from __future__ import annotations

import functools
import random
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

import mini_llm
from framework.engine import StepError
from framework.request import Request
from framework.sampling import SamplingParams
from solutions.engine import EngineConfig, LLMEngine

MAX_TOKENS = 6
CONFIGS = [  # preemption and prefix caching; chunked prefill; whole prompts only; tiny blocks and prefix caching
    dict(num_blocks=5, block_size=4, token_budget=16, max_num_seqs=4, enable_prefix_caching=True),
    dict(num_blocks=40, block_size=4, token_budget=6),
    dict(num_blocks=40, block_size=8, token_budget=64, enable_chunked_prefill=False),
    dict(num_blocks=24, block_size=2, token_budget=32, enable_prefix_caching=True),
]
SAMPLING = [(0.0, None), (0.8, 1), (0.8, 2)]  # (temperature, seed): greedy, and two seeded samplers
STOPS = [[], [], ["e"], [" t", "."]]
BAD_PARAMS = [("top_k", -2), ("temperature", float("nan")), ("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5),
              ("max_tokens", 0), ("max_tokens", 2.0), ("stop", [""]), ("seed", -1), ("ignore_eos", "yes"),
              ("stop_token_ids", [10**6]), ("stop_token_ids", [-1])]
FAILURES = ["before", "middle", "after"]


@functools.cache
def model():
    return mini_llm.load_transformer(dtype=torch.float32, device="cpu")


@functools.cache
def tokenizer():
    return mini_llm.load_tokenizer()


@functools.cache
def prompts() -> list[list[int]]:
    """Three prompts sharing an 8-token prefix (prefix-cache hits), three unrelated ones."""
    rng, vocab = random.Random(0), model().cfg.vocab_size
    shared = [rng.randrange(vocab) for _ in range(8)]
    return ([shared + [rng.randrange(vocab) for _ in range(rng.randrange(1, 6))] for _ in range(3)]
            + [[rng.randrange(vocab) for _ in range(rng.randrange(1, 14))] for _ in range(3)])


@functools.cache
def alone(prompt: int, temperature: float, seed: int | None) -> tuple[int, ...]:
    """The prompt's first MAX_TOKENS tokens, generated alone by mini_llm (computed once per prompt and sampler)."""
    return tuple(mini_llm.generate(model(), prompts()[prompt], MAX_TOKENS, temperature=temperature, seed=seed))


def expected(prompt: int, params: SamplingParams) -> tuple[list[int], str]:
    """Tokens and finish reason alone: up to max_tokens, cut after the token that completes a stop string."""
    tokens = list(alone(prompt, params.temperature, params.seed))[: params.max_tokens]
    for n in range(1, len(tokens) + 1):
        if any(s in tokenizer().decode(tokens[:n]) for s in params.stop):
            return tokens[:n], "stop"
    return tokens, "length"


class FailingRunner:
    """Wraps the engine's runner so that the next call of execute_model fails, when armed."""

    def __init__(self, runner) -> None:
        self.runner, self.execute, self.write_kv = runner, runner.execute_model, runner.write_kv
        self.armed: str | None = None
        self.fired = False
        runner.execute_model = self

    def __call__(self, items):
        where, self.armed = self.armed, None
        if where is None:
            return self.execute(items)
        self.fired = True
        if where == "before":
            raise RuntimeError("injected failure (before)")
        if where == "middle":
            self.runner.write_kv = self.write_kv_then_fail(layers_left=2)
            try:
                return self.execute(items)
            finally:
                self.runner.write_kv = self.write_kv
        self.execute(items)
        raise RuntimeError("injected failure (after)")

    def write_kv_then_fail(self, layers_left: int):
        def write_kv(*args):
            nonlocal layers_left
            if layers_left == 0:
                raise RuntimeError("injected failure (middle)")
            layers_left -= 1
            return self.write_kv(*args)
        return write_kv


def invalid_request(kind: str, choice: int, engine: LLMEngine) -> tuple[list, SamplingParams]:
    vocab, prompt = engine.model.cfg.vocab_size, list(prompts()[choice % len(prompts())])
    if kind == "bad id":
        prompt[choice // 6 % len(prompt)] = [-1, vocab, vocab + 7, 10**6, 1.5, True][choice % 6]
        return prompt, SamplingParams(max_tokens=2)
    if kind == "bad params":
        params = SamplingParams(max_tokens=2)
        setattr(params, *BAD_PARAMS[choice % len(BAD_PARAMS)])  # changed after it was made: add_request checks
        return prompt, params
    if kind == "longer than the cache":
        capacity = engine.config.num_blocks * engine.config.block_size
        return [1] * (capacity - choice % 3), SamplingParams(max_tokens=3)
    return [1] * engine.model.cfg.max_position_embeddings, SamplingParams(max_tokens=1)  # past the model's positions


def check_blocks(engine: LLMEngine) -> None:
    """Each block is free, or held by exactly the running requests whose block tables name it."""
    sched, pool = engine.scheduler, engine.kv_cache_manager.block_pool
    assert all(not r.block_table for r in sched.waiting)
    held = Counter(b for r in sched.running for b in r.block_table)
    assert [pool.ref_cnt[b] for b in range(pool.num_blocks)] == [held[b] for b in range(pool.num_blocks)]
    assert pool.num_free_blocks == pool.num_blocks - len(held)


VALID = st.tuples(st.just("valid"), st.integers(0, 5), st.sampled_from([1, 3, MAX_TOKENS, MAX_TOKENS]),
                  st.sampled_from(SAMPLING), st.sampled_from(STOPS))
INVALID = st.tuples(st.sampled_from(["bad id", "bad params", "longer than the cache", "longer than the model"]),
                    st.integers(0, 59))
STEP = st.tuples(st.just("step"), st.sampled_from([None, None, None, *FAILURES]))
OPS = st.one_of(VALID, VALID, INVALID, STEP, STEP)  # one_of picks a branch uniformly: valid requests and steps weigh 2


@pytest.mark.parametrize("config", CONFIGS, ids=["preemption", "chunked-prefill", "no-chunking", "block-size-2"])
@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=10, max_size=40))
def test_invalid_requests_are_refused_and_failed_steps_spare_the_others(config, ops):
    engine = LLMEngine(model(), EngineConfig(**config), tokenizer=tokenizer())
    for cache in (engine.runner.kv_cache.key_caches, engine.runner.kv_cache.value_caches):
        cache.normal_(std=10)  # stale values: a request reading a block no one wrote gets wrong tokens
    runner = FailingRunner(engine.runner)
    schedules, schedule = [], engine.scheduler.schedule
    engine.scheduler.schedule = lambda: schedules.append(schedule()) or schedules[-1]
    valid: list[tuple[Request, int]] = []
    failed: set[str] = set()
    for op in ops:
        if op[0] == "valid":
            _, prompt, max_tokens, (temperature, seed), stop = op
            params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop,
                                    ignore_eos=True)
            valid.append((engine.add_request(prompts()[prompt], params), prompt))
        elif op[0] == "step":
            runner.armed, runner.fired = op[1], False
            try:
                engine.step()
                assert not runner.fired, "the runner failed but step did not raise"
            except StepError as error:
                assert runner.fired and f"injected failure ({op[1]})" in str(error.__cause__)
                ran = [s.request for s in schedules[-1].scheduled]  # none finished: the failure precedes sampling
                assert error.request_ids == [r.request_id for r in ran]
                assert all(r.finish_reason == "error" and "injected failure" in r.error for r in ran)
                failed.update(error.request_ids)
            runner.armed = None
        else:
            prompt, params = invalid_request(*op, engine)
            before = (list(engine.requests), list(engine.scheduler.waiting))
            with pytest.raises(ValueError):
                engine.add_request(prompt, params)
            assert (list(engine.requests), list(engine.scheduler.waiting)) == before
        check_blocks(engine)
    for _ in range(1000):  # drain, with no more failures
        if not engine.has_unfinished_requests():
            break
        engine.step()
        check_blocks(engine)
    assert not engine.has_unfinished_requests()
    for request, prompt in valid:
        want, reason = expected(prompt, request.sampling_params)
        if request.request_id in failed:  # ended early, with what it had so far
            assert request.finish_reason == "error"
            assert request.output_token_ids == want[: len(request.output_token_ids)]
        else:
            assert (request.output_token_ids, request.finish_reason) == (want, reason), request
    # What this example exercised (pytest --hypothesis-show-statistics).
    reasons = Counter(r.finish_reason for r, _ in valid)
    for what, happened in [("a step failed", failed), ("a stop string ended a request", reasons["stop"]),
                           ("a request was preempted", any(r.num_preemptions for r, _ in valid)),
                           ("a prefix-cache hit", any(r.num_cached_tokens for r, _ in valid)),
                           ("a step failed and others completed", failed and reasons["length"] + reasons["stop"])]:
        if happened:
            event(what)
    # Served after everything: a repeated prompt (prefix-cache hits on blocks a failed step may have named).
    final = engine.generate([prompts()[0]], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert final[0].outputs[0].token_ids == list(alone(0, 0.0, None))
    pool = engine.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks and not any(pool.ref_cnt)
