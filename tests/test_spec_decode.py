"""Speculative decoding (framework/spec_decode.py, solutions/spec_decode.py): n-gram drafts verified in the flat
batch are exact.

- Greedy: the engine with speculation emits token for token what it emits without, on a slice of the
  benchmark's two workloads and on a hypothesis fuzz (prompts with and without repeats, token budgets that cut
  drafts short, so few blocks that drafted requests are preempted).
- Random: the first token a drafted step emits is distributed as p, the model's own distribution, by a
  chi-square test at a fixed seed (the engine's seeded per-request generators).
"""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mini_llm  # noqa: E402
from benchmarks.repetitive import repetitive_prompts  # noqa: E402
from benchmarks.measure import make_workload  # noqa: E402
from framework.engine import EngineConfig  # noqa: E402
from framework.ngram_proposer import NgramProposer  # noqa: E402
from framework.sampling import SamplingParams, sampling_probs  # noqa: E402
from framework.spec_decode import SpeculativeConfig  # noqa: E402
from solutions.engine import LLMEngine  # noqa: E402
from solutions.spec_decode import SpecDecodeEngine, rejection_sample  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.cache
def model():
    return mini_llm.load_transformer(dtype=torch.float32, device="cpu")


@functools.cache
def alone(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """Greedy tokens of the prompt generated alone by mini_llm, the independent reference."""
    return mini_llm.generate(model(), list(prompt), max_tokens, temperature=0.0)


def run(engine_cls, prompts, max_tokens, **config) -> tuple[list[list[int]], object]:
    engine = engine_cls(model(), EngineConfig(**config))
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in max_tokens]
    return [o.outputs[0].token_ids for o in engine.generate(prompts, params)], engine


def test_ngram_proposer_takes_the_most_recent_longest_match():
    propose = NgramProposer(3, 1, 3).propose
    assert propose([1, 2, 3, 4, 1, 2, 3]) == [4, 1, 2]  # 3-gram [1, 2, 3]
    assert propose([1, 2, 9, 9, 1, 2, 7, 1, 2]) == [7, 1, 2]  # no earlier [7, 1, 2]; latest [1, 2]
    assert propose([5, 6, 7, 5]) == [6, 7, 5] and NgramProposer(4, 1, 1).propose([5, 6, 5]) == [6, 5]  # to the end
    assert propose([1, 2, 3]) == [] and propose([4]) == []
    assert NgramProposer(2, 2, 3).propose([1, 2, 3, 1]) == []  # below prompt_lookup_min
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        SpeculativeConfig(prompt_lookup_min=3, prompt_lookup_max=2)
    with pytest.raises(ValueError, match="does not speculate"):
        LLMEngine(model(), EngineConfig(speculative=SpeculativeConfig()))


def brute_force_lookup(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The proposer's rule, spelled out: the longest n, then the latest start."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start: start + n] == tokens[-n:]:
                return tokens[start + n: start + n + k]
    return []


@settings(max_examples=300, deadline=None, derandomize=True)
@given(tokens=st.lists(st.integers(0, 3), min_size=1, max_size=30), k=st.integers(1, 5), min_n=st.integers(1, 3),
       extra=st.integers(0, 3))
def test_ngram_proposer_agrees_with_brute_force(tokens, k, min_n, extra):
    assert NgramProposer(k, min_n, min_n + extra).propose(tokens) == brute_force_lookup(tokens, k, min_n, min_n + extra)


@pytest.mark.parametrize("workload", ["default", "repetitive"])
def test_greedy_is_identical_on_the_benchmark_workloads(workload):
    """A slice of each benchmark workload (8 requests, shorter outputs), with the benchmark's limits."""
    if workload == "default":
        w = make_workload(8, 0, list(range(model().cfg.vocab_size)), (16, 96), (8, 32))
        prompts, lens = w.prompts, w.output_lens
    else:
        prompts, lens = repetitive_prompts(model(), mini_llm.load_tokenizer(), 8, 0, (8, 32), engine_cls=LLMEngine)
    config = dict(num_blocks=256, token_budget=256, max_num_seqs=16)
    plain, plain_engine = run(LLMEngine, prompts, lens, **config)
    spec, engine = run(SpecDecodeEngine, prompts, lens, speculative=SpeculativeConfig(), **config)
    assert spec == plain
    if workload == "repetitive":  # the drafts did something
        assert engine.num_accepted_tokens > sum(lens) / 2
        assert engine.runner.num_forward_passes < 0.8 * plain_engine.runner.num_forward_passes


@functools.cache
def fuzz_prompts() -> list[tuple[int, ...]]:
    """Repeating prompts (a pattern and copies of it) and prompts of random tokens."""
    rng, vocab = random.Random(1), model().cfg.vocab_size
    repeating = []
    for _ in range(4):
        pattern = [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]
        repeating.append(tuple((pattern * 6)[: rng.randrange(3, 12)]))
    return repeating + [tuple(rng.randrange(vocab) for _ in range(rng.randrange(1, 10))) for _ in range(4)]


CONFIGS = [  # blocks so few that drafted requests are preempted; budgets that cut drafts; prefix caching
    dict(num_blocks=9, block_size=2, token_budget=8, max_num_seqs=4),
    dict(num_blocks=40, block_size=4, token_budget=5),
    dict(num_blocks=12, block_size=2, token_budget=16, enable_prefix_caching=True),
]


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 8)), min_size=1, max_size=5),
       config=st.sampled_from(CONFIGS), k=st.integers(1, 5), lookup=st.sampled_from([(1, 1), (1, 3), (2, 2)]))
def test_greedy_is_identical_under_fuzz(picks, config, k, lookup):
    prompts = [list(fuzz_prompts()[i]) for i, _ in picks]
    lens = [n for _, n in picks]
    spec, engine = run(SpecDecodeEngine, prompts, lens, speculative=SpeculativeConfig(k, *lookup), **config)
    assert spec == [alone(tuple(p), n) for p, n in zip(prompts, lens)]
    event(f"drafts: {'some' if engine.num_draft_tokens else 'none'}")
    assert engine.kv_cache_manager.num_free_blocks == config["num_blocks"]


def test_a_drafted_request_is_preempted_and_still_exact():
    """Two requests drafting into the last free blocks: the later one is preempted by the earlier one's growth."""
    prompts = [[7, 8, 9] * 3, [5, 6] * 4]
    spec, engine = run(SpecDecodeEngine, prompts, [8, 8], num_blocks=10, block_size=2, token_budget=8,
                       speculative=SpeculativeConfig(3, 1, 2))
    assert engine.num_draft_tokens > 0
    assert sum(r.num_preemptions for r in engine.requests.values()) > 0
    assert spec == [alone(tuple(p), 8) for p in prompts]


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """P-value of the counts under the distribution `probs` (cells below 5 expected are merged into one)."""
    expected = probs * counts.sum()
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def test_rejection_sampling_emits_p_at_every_position():
    """On a vocabulary of 6, with drafts p likes, dislikes and never picks: the first token, and the second
    given the first draft was accepted, are distributed as p at their positions."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -9.0], [0.0, 0.2, 1.5, -0.5, 0.3, 0.0],
                           [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    params = SamplingParams(temperature=0.9, seed=0)
    generator = torch.Generator().manual_seed(0)
    for drafts in ([0, 2], [3, 2], [5, 1]):
        firsts, seconds = np.zeros(6), np.zeros(6)
        for _ in range(3000):
            tokens = rejection_sample(logits, drafts, params, generator)
            firsts[tokens[0]] += 1
            if len(tokens) > 1:  # the first draft was accepted
                seconds[tokens[1]] += 1
        tested = [(firsts, 0)] + [(seconds, 1)] * int(seconds.sum() >= 300)  # a draft p never picks: no second
        for counts, row in tested:
            p = sampling_probs(logits[row], params).numpy()
            assert chi_square_p_value(counts, p) > 1e-3, (drafts, row, counts, p)


def test_the_engines_first_drafted_token_is_distributed_as_p():
    """600 seeded requests with one repetitive prompt, in one engine: the prompt is in the prefix cache (blocks of
    one token), so each request's first step computes its last prompt token with 4 drafts, and emits its first
    token by rejection sampling. Its distribution is p, the model's own (mini_llm's forward pass, temperature 2,
    where p(draft) is near one half)."""
    prompt = repetitive_prompts(model(), mini_llm.load_tokenizer(), 1, 0, (8, 8), engine_cls=LLMEngine)[0][0]
    engine = SpecDecodeEngine(model(), EngineConfig(num_blocks=len(prompt) + 600 * 5, block_size=1,
                                                    token_budget=600 * 5, max_num_seqs=600,
                                                    enable_prefix_caching=True, speculative=SpeculativeConfig(4, 1, 4)))
    engine.generate([prompt], SamplingParams(max_tokens=1))  # fills the prefix cache
    params = [SamplingParams(temperature=2.0, max_tokens=5, seed=s) for s in range(600)]
    requests = engine.add_requests([prompt] * 600, params)
    engine.step()
    assert engine.num_draft_tokens == 600 * 4
    draft = engine.scheduler.proposer.propose(prompt)[0]
    firsts = np.bincount([r.output_token_ids[0] for r in requests], minlength=model().cfg.vocab_size)
    with torch.inference_mode():
        logits = model()(torch.tensor([prompt]))[0, -1].float()
    p = sampling_probs(logits, params[0]).numpy()
    assert 0.2 < p[draft] < 0.8  # the draft is plausible, so acceptance and rejection both happen
    assert chi_square_p_value(firsts, p) > 1e-3
