"""The step trace (framework/trace.py): a traced run gives the tokens of an untraced one; its Chrome Trace Event
file holds every step and request, is valid by the format's rules, and reads back; the counts agree with the
engine's own counters; FLOPs agree with torch's FLOP counter; a torch.profiler trace names the phases; with
tensor parallelism too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.repetitive import repetitive_prompts
from benchmarks.throughput import make_workload, prompt_vocab
from framework.sampling import SamplingParams
from framework.spec_decode import SpeculativeConfig
from framework.trace import StepTracer, load_trace, step_cost, tracing
from mini_llm.settings import EMBEDDED_MODEL
from solutions import spec_decode
from solutions.engine import LLM, LLMEngine


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def workload(llm, num: int, max_tokens: int) -> tuple[list[list[int]], list[SamplingParams]]:
    """The first `num` requests of benchmarks/throughput.py's default workload, outputs cut to `max_tokens`."""
    w = make_workload(64, 0, prompt_vocab(EMBEDDED_MODEL, llm.model.cfg.vocab_size))
    return w.prompts[:num], [SamplingParams(max_tokens=min(n, max_tokens), ignore_eos=True)
                             for n in w.output_lens[:num]]


def check_format(trace: dict) -> None:
    """The Chrome Trace Event format's rules for the events used here."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    for e in trace["traceEvents"]:
        assert {"ph", "ts", "pid", "tid", "name"} <= e.keys(), e
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        else:
            assert e["ph"] == "M" and "name" in e["args"], e


def check_trace(path: Path, llm, prompts, outputs) -> tuple[list, list]:
    trace = json.loads(path.read_text())
    check_format(trace)
    steps, requests = load_trace(path)
    engine = llm.engine
    assert len(steps) == engine.runner.num_forward_passes  # one slice per step, none lost
    assert [s.index for s in steps] == list(range(len(steps)))
    assert {r.request_id for r in requests} == {o.request_id for o in outputs}
    for r, o in zip(requests, outputs):
        assert r.request_id == o.request_id and r.arrival <= r.first_token <= r.finish
        assert r.num_output_tokens == len(o.outputs[0].token_ids) and r.finish_reason == "length"
        assert r.steps == sorted(r.steps) and r.steps[-1] == next(s.index for s in steps if r.request_id in s.finished)
    for s in steps:
        assert s.start <= s.phases["schedule"][0] <= s.phases["forward"][1] <= s.end
        assert s.cpu_start <= s.cpu_end
        assert sum(s.rows.values()) == s.tokens_scheduled <= s.token_budget
        assert s.kv_blocks_used + s.kv_blocks_free == engine.config.num_blocks
        assert s.flops > 0 and s.bytes > 0
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"KV blocks", "rows", "tokens"}
    return steps, requests


def test_speculation_with_preemption_and_prefix_hits(tmp_path):
    """Speculation on (benchmarks/repetitive.py's prompts, which n-grams find), a cache so small that requests are
    preempted, and prefix caching on shared prompts."""
    config = dict(dtype=torch.float32, num_blocks=24, token_budget=64, enable_prefix_caching=True,
                  speculative=SpeculativeConfig())
    plain = spec_decode.LLM(**config)
    prompts, lens = repetitive_prompts(plain.model, plain.tokenizer, 6, 0, (8, 24), engine_cls=LLMEngine)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in lens]
    want = [o.outputs[0].token_ids for o in plain.engine.generate(prompts, params)]
    path = tmp_path / "spec.json"
    llm = spec_decode.LLM(trace=str(path), **config)
    outputs = llm.engine.generate(prompts, params)
    num_steps = len(llm.tracer.steps)
    # a repeat of the prompt that finished last: its blocks, freed last, are still in the prefix cache
    last = [o.request_id for o in outputs].index(llm.tracer.steps[-1].finished[-1])
    outputs += llm.engine.generate(prompts[last: last + 1], params[last: last + 1])
    llm.tracer.save()
    assert [o.outputs[0].token_ids for o in outputs] == want + [want[last]]  # tracing changes nothing
    steps, _ = check_trace(path, llm, prompts, outputs)
    assert sum(s.drafts_proposed for s in steps) == llm.engine.num_draft_tokens > 0
    assert sum(s.drafts_accepted for s in steps) == llm.engine.num_accepted_tokens > 0
    assert sum(s.rows["draft"] for s in steps) == llm.engine.num_draft_tokens
    assert sum(len(s.preempted) for s in steps) == sum(r.num_preemptions for r in llm.engine.requests.values()) > 0
    repeat = llm.engine.requests[outputs[-1].request_id]
    assert sum(s.prefix_hit_tokens for s in steps[num_steps:]) == repeat.num_cached_tokens > 0
    assert {row["kind"] for s in steps for row in s.scheduled} == {"prefill", "decode"}


def test_llm_generate_writes_the_trace_and_close_unwraps(tmp_path):
    path = tmp_path / "run.json"
    llm = LLM(dtype=torch.float32, trace=str(path))
    out = llm.generate(["Once upon a time"], SamplingParams(max_tokens=4, ignore_eos=True))
    steps, requests = load_trace(path)
    assert len(steps) == 4 and requests[0].request_id == out[0].request_id
    llm.tracer.close()
    assert not {"step", "add_request"} & vars(llm.engine).keys()
    assert "schedule" not in vars(llm.engine.scheduler) and "execute_model" not in vars(llm.engine.runner)


def test_torch_profiler_names_the_phases():
    llm = LLM(dtype=torch.float32)
    with tracing(llm), torch.profiler.profile() as prof:
        llm.generate(["Once upon a time"], SamplingParams(max_tokens=3, ignore_eos=True))
    names = {e.key for e in prof.key_averages()}
    assert {"step", "schedule", "prepare", "forward", "sample"} <= names
    steps = [e.time_range for e in prof.events() if e.name == "step"]
    phases = [e for e in prof.events() if e.name in ("schedule", "prepare", "forward", "sample")]
    outside = [e.name for e in phases if not any(s.start <= e.time_range.start and e.time_range.end <= s.end
                                                 for s in steps)]
    assert len(steps) == 3 and len(phases) == 12 and not outside, outside  # each phase nests under its step


def test_step_cost_matches_torch_flop_counter():
    """FLOPs of a step from the shapes against torch's FLOP counter on the runner's forward pass, for a decode
    batch and a prefill chunk. The counter sees matmuls only; it counts what the attention kernel computes."""
    llm = LLM(dtype=torch.float32)
    engine, cfg = llm.engine, llm.model.cfg
    items = [(list(range(1, 40)), 0, [0, 1, 2], True), ([7], 20, [3, 4], True), ([9], 31, [5, 6], True)]
    counter = FlopCounterMode(display=False)
    with counter:
        engine.runner.execute_model(items)
    flops, _ = step_cost(cfg, items, 4)
    attention = sum(4 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * len(t) * (s + len(t))
                    for t, s, *_ in items)  # an upper bound: every query against the whole context
    assert flops - attention <= counter.get_total_flops() <= flops + attention


def test_step_cost_reads_the_weights_once():
    """With no tokens, the bytes of a step are the weights: the model's parameters, less its norms."""
    llm = LLM(dtype=torch.float32)
    _, moved = step_cost(llm.model.cfg, [], 4)
    params = dict(llm.model.named_parameters())
    assert moved == 4 * sum(p.numel() for name, p in params.items() if "norm" not in name)


def test_tensor_parallel_trace(tmp_path):
    """TP=2 (two processes on CPU, as tests/test_tensor_parallel.py): the same steps, rows and FLOPs as TP=1."""
    one = LLM(dtype=torch.float32)
    prompts, params = workload(one, 3, 6)
    with tracing(one) as tp1:
        one.engine.generate(prompts, params)
    path = tmp_path / "tp2.json"
    two = LLM(dtype=torch.float32, tensor_parallel_size=2, trace=str(path))
    try:
        outputs = two.engine.generate(prompts, params)
        two.tracer.save()
        steps, _ = check_trace(path, two, prompts, outputs)
    finally:
        two.shutdown()
    assert [(s.rows, s.flops, s.bytes) for s in steps] == [(s.rows, s.flops, s.bytes) for s in tp1.steps]


def test_tracer_on_any_engine_object():
    """A tracer needs only the framework's public surface: an engine built directly works too."""
    llm = LLM(dtype=torch.float32)
    tracer = StepTracer(llm.engine)
    llm.engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2, ignore_eos=True))
    tracer.close()
    assert [s.rows for s in tracer.steps] == [{"prefill": 3, "decode": 0, "draft": 0},
                                              {"prefill": 0, "decode": 1, "draft": 0}]
