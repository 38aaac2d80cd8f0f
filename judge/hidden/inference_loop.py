"""Hidden tests of exercise 130 (LLMEngine.step and LLMEngine.generate).

The learner's engine runs on the REFERENCE scheduler, KV-cache manager and model runner (so that 130 can be
graded whatever else the learner has written), each wrapped to record what happened. After every `step` a
checker compares what the step did with what the scheduler asked for: one forward pass carrying every scheduled
request with the right items, `num_computed_tokens` advanced, one token sampled from the right row of logits for
exactly the requests that completed their pending tokens, finished requests retired (blocks freed), and one
output per request that got a token. The independent reference for the tokens is `mini_llm.generate`, each
request alone with a contiguous KV cache (greedy, fp32 on the CPU).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

import mini_llm
from judge.harness import CaseFailure, Cases, LearnerRaised, is_memory_error, option, raised_failure, short
from judge.hidden.support import alone, load_model, random_prompts  # noqa: F401
from framework.engine import LLMEngineBase
from solutions import engine as ref
from solutions.kv_cache_manager import KVCacheManager
from solutions.model_runner import ModelRunner
from framework.request import Request
from framework.sampling import SamplingParams
from solutions.scheduler import Scheduler

CASES = Cases()


# ----------------------------------------------------------------------------------------------------------
# The model and the independent reference


# ----------------------------------------------------------------------------------------------------------
# The reference components, recording what they were asked


@dataclass
class Scheduled:
    """A scheduled request as the scheduler left it, before the step ran."""

    request: Request
    num_new: int
    num_computed: int
    token_ids: list[int]
    block_table: list[int]
    num_outputs: int

    @property
    def completes(self) -> bool:
        return self.num_computed + self.num_new == len(self.token_ids)

    def item(self) -> tuple[list[int], int, list[int], bool]:
        new = self.token_ids[self.num_computed: self.num_computed + self.num_new]
        return new, self.num_computed, self.block_table, self.completes


class RecordingScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[list[Scheduled]] = []
        self.states: list[dict[str, tuple[int, int]]] = []  # every unfinished request, as schedule() left it

    def schedule(self):
        out = super().schedule()
        self.states.append({r.request_id: (len(r.output_token_ids), r.num_computed_tokens)
                            for r in [*self.running, *self.waiting]})
        self.log.append([Scheduled(s.request, s.num_new_tokens, s.request.num_computed_tokens,
                                   list(s.request.all_token_ids), list(s.request.block_table),
                                   len(s.request.output_token_ids)) for s in out.scheduled])
        return out


class RecordingRunner(ModelRunner):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list, torch.Tensor]] = []  # (items as given, logits returned)
        self.check_items: Callable[[list], None] = lambda items: None  # set by the engine under test

    def execute_model(self, items):
        items = list(items)
        self.check_items(items)  # before running: a wrong item would fail inside the runner, less clearly
        logits = super().execute_model(items)
        self.calls.append((items, logits))
        return logits


class ChunksFirstScheduler(RecordingScheduler):
    """The reference schedule with prompt chunks that sample nothing listed first. The order of
    sched.scheduled is the scheduler's business; the reference happens to list such a chunk last (it is cut by
    the budget), so this order is what tells 'the j-th item that needs logits' from 'the j-th item'."""

    def schedule(self):
        out = super().schedule()
        out.scheduled.sort(key=lambda s: s.completes_prompt)
        self.log[-1].sort(key=lambda s: s.completes)
        return out


# ----------------------------------------------------------------------------------------------------------
# The engine under test: the learner's step/generate on the reference components, checked after every step


def engine_class(impl, scheduler: type = RecordingScheduler) -> type:
    learner = getattr(impl, "LLMEngine", None)
    if not (isinstance(learner, type) and issubclass(learner, LLMEngineBase)):
        raise CaseFailure("LLMEngine must be a class deriving from framework.engine.LLMEngineBase, as in the "
                          "starter file", hint="keep `class LLMEngine(LLMEngineBase):` and write step and generate")

    class Checked(learner):
        scheduler_cls = scheduler
        runner_cls = RecordingRunner
        kv_cache_manager_cls = KVCacheManager

        def __init__(self, *args: Any, step_limit: int = 400, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.step_limit, self.num_steps = step_limit, 0
            self.runner.check_items = lambda items: check_items(self.num_steps, self.scheduler.log[-1], items)

        def step(self):
            self.num_steps += 1
            if self.num_steps > self.step_limit:
                raise CaseFailure(f"still running after {self.step_limit} steps: some request never finishes",
                                  hint="a request is done when stop_reason(...) returns a reason; then call "
                                       "self.scheduler.finish(request, reason), which frees its blocks")
            n_sched, n_calls = len(self.scheduler.log), len(self.runner.calls)
            outs = call_learner(super().step, "LLMEngine.step")
            check_step(self, n_sched, n_calls, outs)
            return outs

    return Checked


def crash_hint(exc: BaseException) -> str | None:
    """A hint for each way a learner's step or generate commonly crashes."""
    text = str(exc)
    if isinstance(exc, IndexError) and "out of bounds" in text:
        return ("the logits have one row per item whose need_logits is true, in item order, not one per scheduled "
                "request: keep a row counter that advances only when a request samples a token (and decide "
                "whether it samples from completes_prompt read before num_computed_tokens is updated)")
    if "NoneType" in text:
        return ("something is None: does every function end with its `return` (step returns a list of "
                "RequestOutput, [] when nothing is scheduled; generate returns the final outputs)?")
    if isinstance(exc, AttributeError) and ("SchedulerOutput" in text or "ScheduledRequest" in text):
        return ("sched.scheduled is a list of ScheduledRequest; each has .request, .num_new_tokens and "
                ".completes_prompt")
    if isinstance(exc, TypeError) and "not iterable" in text:
        return "step returns a list of RequestOutput and generate a list with one final output per prompt"
    return None


def call_learner(fn: Callable, name: str, *args: Any, input: str | None = None) -> Any:
    """`learner_call` with a hint for the usual crashes of a step or a generate."""
    try:
        return fn(*args)
    except (CaseFailure, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001
        inner = exc.exc if isinstance(exc, LearnerRaised) else exc
        if isinstance(inner, CaseFailure):
            raise inner from None
        if is_memory_error(inner):
            raise
        failure = raised_failure(LearnerRaised(inner), name, input=input)
        if failure.kind == "error":
            failure.hint = crash_hint(inner)
        raise failure from None


class BracketTokenizer:
    """A tokenizer for stop strings that needs no files: token t decodes to "<t>"."""

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(f"<{int(t)}>" for t in token_ids)


def make_engine(impl, model, eos: int | None, step_limit: int = 400, scheduler: type = RecordingScheduler,
                tokenizer: Any = None, **config: Any):
    cls = engine_class(impl, scheduler)
    try:
        return cls(model, ref.EngineConfig(**config), tokenizer, eos_token_id=eos, step_limit=step_limit)
    except CaseFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's class could not even be built
        raise raised_failure(LearnerRaised(exc), "LLMEngine(...)") from None


def _fail(step: int, message: str, hint: str = "", **kw: Any) -> CaseFailure:
    return CaseFailure(f"step {step}: {message}", hint=hint or None, **kw)


def _plain_item(item: Any) -> tuple:
    """A learner's item as plain values (token ids and block tables may be lists, tuples or tensors)."""
    try:
        tokens, nc, table, need = item
        as_ints = lambda xs: [int(x) for x in (xs.tolist() if isinstance(xs, torch.Tensor) else xs)]  # noqa: E731
        return as_ints(tokens), int(nc), as_ints(table), bool(need)
    except (TypeError, ValueError):
        return ("<not a (token_ids, num_computed, block_table, need_logits) tuple>", short(item))


def check_items(k: int, sched: list[Scheduled], items: list) -> None:
    if len(items) != len(sched):
        ids = [s.request.request_id for s in sched]
        raise _fail(k, f"the forward pass carried {len(items)} item(s) but {len(sched)} requests were scheduled "
                       f"({ids})", hint="one item per ScheduledRequest in sched.scheduled, all in ONE call to "
                                        "self.runner.execute_model")
    names = ("token_ids", "num_computed", "block_table", "need_logits")
    hints = {
        "token_ids": "the next num_new_tokens tokens of request.all_token_ids, starting at num_computed_tokens",
        "num_computed": "num_computed is request.num_computed_tokens as the scheduler left it (before this step)",
        "block_table": "pass request.block_table",
        "need_logits": "need_logits is true only when this step computes the request's last pending token "
                       "(ScheduledRequest.completes_prompt); a prompt chunk that is not the last needs no logits",
    }
    for s, item in zip(sched, items):
        got, exp = _plain_item(item), s.item()
        if len(got) != 4:
            raise _fail(k, f"item for request {s.request.request_id} is {got[1]}",
                        hint="each item is (token_ids, num_computed, block_table, need_logits)")
        for name, g, e in zip(names, got, exp):
            if g != e:
                hint = hints[name]
                if got[1] == s.num_computed + s.num_new and s.num_computed != got[1]:
                    hint = ("build every item BEFORE you update num_computed_tokens: the item describes the "
                            "tokens this step computes, from the count the scheduler left")
                raise _fail(k, f"wrong {name} in the item of request {s.request.request_id}", field=name,
                            expected=e, got=g, hint=hint)


def check_step(engine, n_sched: int, n_calls: int, outs: Any) -> None:
    """What one learner step did, against what the reference scheduler asked for."""
    k = engine.num_steps
    new_scheds = engine.scheduler.log[n_sched:]
    if len(new_scheds) != 1:
        raise _fail(k, f"step called self.scheduler.schedule() {len(new_scheds)} times; once per step",
                    hint="start the step with sched = self.scheduler.schedule()")
    sched, calls = new_scheds[0], engine.runner.calls[n_calls:]
    if outs is None:
        raise _fail(k, "step returned None; it must return a list of RequestOutput",
                    hint="end step with `return outputs` (the list of self.make_output(request, [token])); "
                         "return [] when nothing is scheduled")
    if not isinstance(outs, list):
        raise _fail(k, f"step returned a {type(outs).__name__}; it must return a list of RequestOutput",
                    hint="return a list, [self.make_output(request, [token]), ...], even for one request")
    if not sched:
        if calls or outs:
            raise _fail(k, "nothing was scheduled, yet the step ran the model or returned outputs",
                        hint="if nothing is scheduled, return []")
        return
    if len(calls) != 1:
        raise _fail(k, f"step ran the model {len(calls)} times for {len(sched)} scheduled requests; one forward "
                       "pass must carry every scheduled request",
                    hint="build all the items first, then call self.runner.execute_model(items) once")
    logits = calls[0][1]
    expected_outs, row = [], 0
    for s in sched:
        r = s.request
        rid = r.request_id
        if r.num_computed_tokens != s.num_computed + s.num_new:
            raise _fail(k, f"request {rid} has num_computed_tokens {r.num_computed_tokens} after a step that "
                           f"computed {s.num_new} token(s) from {s.num_computed}", field="num_computed_tokens",
                        expected=s.num_computed + s.num_new, got=r.num_computed_tokens,
                        hint="every scheduled request: num_computed_tokens += num_new_tokens")
        new = r.output_token_ids[s.num_outputs:]
        if not s.completes:
            if new:
                raise _fail(k, f"request {rid} got token(s) {new} from a prompt chunk that is not its last "
                               f"({s.num_computed + s.num_new} of {len(s.token_ids)} tokens computed)",
                            hint="only a request whose pending tokens are all computed samples a token")
            continue
        if not new:
            raise _fail(k, f"request {rid} completed its pending tokens ({s.num_computed} + {s.num_new} = "
                           f"{len(s.token_ids)}) but got 0 new tokens; exactly one is sampled",
                        hint="read s.completes_prompt BEFORE num_computed_tokens += num_new_tokens: after the "
                             "update it compares the new count and is false; then append the sampled token to "
                             "request.output_token_ids")
        if len(new) != 1:
            raise _fail(k, f"request {rid} completed its pending tokens but got {len(new)} new tokens ({new}); "
                           "exactly one is sampled", hint="append the sampled token to request.output_token_ids")
        if r.sampling_params.temperature == 0:
            want = int(logits[row].argmax())
            if new[0] != want:
                raise _fail(k, f"request {rid} got token {new[0]}, but its row of the logits (row {row}: it is "
                               f"number {row} among this step's items that need logits) gives {want}",
                            hint="row j of the logits belongs to the j-th item whose need_logits is true, not to "
                                 "the j-th scheduled request")
        row += 1
        check_stop(k, engine, r)
        expected_outs.append((rid, new, r.is_finished))
    check_outputs(k, outs, expected_outs, engine)
    scheduled = {s.request.request_id for s in sched}
    for rid, state in engine.scheduler.states[n_sched].items():
        r = engine.requests[rid]
        if rid not in scheduled and state != (len(r.output_token_ids), r.num_computed_tokens):
            raise _fail(k, f"request {rid} was not scheduled, yet the step changed its tokens or "
                           "num_computed_tokens", hint="update only the requests in sched.scheduled")


def hit_stop_string(r: Request, tokenizer: Any) -> bool:
    return bool(r.sampling_params.stop and tokenizer is not None
                and any(stop in tokenizer.decode(r.output_token_ids) for stop in r.sampling_params.stop))


def expected_reason(r: Request, eos: int | None, tokenizer: Any = None) -> str | None:
    if r.output_token_ids[-1] == eos and not r.sampling_params.ignore_eos:
        return "stop"
    if hit_stop_string(r, tokenizer):
        return "stop"
    if len(r.output_token_ids) >= r.sampling_params.max_tokens:
        return "length"
    return None


def check_stop(k: int, engine, r: Request) -> None:
    reason, rid = expected_reason(r, engine.eos_token_id, engine.tokenizer), r.request_id
    n, limit = len(r.output_token_ids), r.sampling_params.max_tokens
    if reason is None:
        if r.is_finished or r not in engine.scheduler.running:
            raise _fail(k, f"request {rid} was retired after {n} token(s) (max_tokens={limit}, last token "
                           f"{r.output_token_ids[-1]} is not end-of-sequence {engine.eos_token_id})",
                        hint="finish a request only when stop_reason(request, self.eos_token_id, self.tokenizer) "
                             "returns a reason")
        return
    why = "its last token is end-of-sequence" if reason == "stop" else f"it has max_tokens={limit} tokens"
    hint = ("when stop_reason(...) returns a reason call self.scheduler.finish(request, reason): it retires the "
            "request and frees its blocks")
    if reason == "stop" and r.output_token_ids[-1] != engine.eos_token_id:
        why = f"its text {engine.tokenizer.decode(r.output_token_ids)!r} contains a stop string of {r.sampling_params.stop}"
        hint = ("stop strings are seen through the tokenizer: call stop_reason(request, self.eos_token_id, "
                "self.tokenizer), with all three arguments")
    if r in engine.scheduler.running or not r.is_finished or r.block_table:
        raise _fail(k, f"request {rid} should have finished ({why}) but is still running or holds blocks "
                       f"(status {r.status.value}, {len(r.block_table)} blocks)", hint=hint)
    if r.finish_reason != reason:
        raise _fail(k, f"request {rid} finished with reason {r.finish_reason!r}, expected {reason!r} ({why})",
                    hint="pass stop_reason's result to self.scheduler.finish")


def check_outputs(k: int, outs: list, expected: list[tuple[str, list[int], bool]], engine) -> None:
    got = []
    for o in outs:
        if not hasattr(o, "request_id") or not hasattr(o, "new_token_ids"):
            raise _fail(k, f"step returned {short(o)}; each output must be a RequestOutput",
                        hint="return self.make_output(request, [token]) for each request that got a token")
        got.append((o.request_id, list(o.new_token_ids), bool(o.finished)))
    if got != expected:
        raise _fail(k, "wrong outputs returned by step", field="(request_id, new_token_ids, finished)",
                    expected=expected, got=got,
                    hint="one self.make_output(request, [token]) per request that received a token this step, in "
                         "scheduled order; none for a prompt chunk that sampled nothing")
    for o in outs:
        r = engine.requests[o.request_id]
        if [int(t) for t in o.outputs[0].token_ids] != r.output_token_ids:
            raise _fail(k, f"the output of request {r.request_id} does not hold all its tokens so far",
                        hint="build outputs with self.make_output(request, [token]) after appending the token")


# ----------------------------------------------------------------------------------------------------------
# Running workloads and comparing with each request alone


def call_generate(engine, prompts: list[list[int]], params) -> list:
    text = f"engine.generate({prompts!r}, {params!r})"
    outs = call_learner(engine.generate, "LLMEngine.generate", [list(p) for p in prompts], params, input=text)
    if outs is None:
        raise CaseFailure("generate returned None", input=text,
                          hint="end generate with `return [self.make_output(r, []) for r in requests]`")
    if not isinstance(outs, list):
        raise CaseFailure(f"generate returned a {type(outs).__name__}; it must return a list", input=text,
                          hint="one final output per prompt, in a list: [self.make_output(r, []) for r in requests]")
    if len(outs) != len(prompts):
        raise CaseFailure(f"generate returned {len(outs)} outputs for {len(prompts)} prompts", input=text,
                          hint="one final output per prompt: [self.make_output(r, []) for r in requests]")
    return outs


def check_final(engine, model, prompts: list[list[int]], params_list: list[SamplingParams], outs: list,
                text: str) -> None:
    """generate's outputs against each request alone; every request retired, every block back in the pool."""
    got_prompts = [list(o.prompt_token_ids) for o in outs]
    if got_prompts != prompts:
        order = [prompts.index(p) if p in prompts else None for p in got_prompts]
        raise CaseFailure(f"generate returned the outputs in the order of prompts {order}, not in prompt order",
                          input=text, hint="keep the requests add_requests returned and make one output per "
                                           "request in that order, not in the order they finished")
    if engine.has_unfinished_requests():
        raise CaseFailure("generate returned while requests were still unfinished", input=text,
                          hint="a step may return no outputs (a step of prompt chunks samples nothing): loop while "
                               "self.has_unfinished_requests(), not until a step returns []")
    for i, (p, params, o) in enumerate(zip(prompts, params_list, outs)):
        want = alone(model, p, params, engine.eos_token_id, engine.tokenizer)
        got = [int(t) for t in o.outputs[0].token_ids]
        if got != want:
            hint = "compare with mini_llm.generate(model, prompt, max_tokens, eos_token_id=eos) on this prompt"
            if got[: len(want)] == want:
                hint = ("too many tokens: stop when the request has max_tokens tokens or its last token is "
                        "end-of-sequence (stop_reason does both)")
            raise CaseFailure(f"prompt {i}: the engine's tokens differ from generating it alone", input=text,
                              field=f"outputs[{i}].outputs[0].token_ids", expected=want, got=got, hint=hint)
        if not o.finished:
            raise CaseFailure(f"prompt {i}: its final output says finished=False", input=text)
        if list(o.new_token_ids) != []:
            raise CaseFailure(f"prompt {i}: its final output has new_token_ids {short(list(o.new_token_ids))}; "
                              "a final output has none", input=text, field=f"outputs[{i}].new_token_ids",
                              expected=[], got=list(o.new_token_ids),
                              hint="new_token_ids are what one step produced; generate's final outputs are "
                                   "self.make_output(request, []) (all tokens are in outputs[0].token_ids)")
    free, total = engine.kv_cache_manager.num_free_blocks, engine.config.num_blocks
    if free != total:
        raise CaseFailure(f"after generate only {free} of {total} KV-cache blocks are free", input=text,
                          hint="self.scheduler.finish(request, reason) frees a finished request's blocks")


def run_generate(impl, model, prompts: list[list[int]], params, eos: int | None = None, step_limit: int = 400,
                 tokenizer: Any = None, **config: Any):
    eos = model.cfg.eos_token_id if eos is None else eos
    engine = make_engine(impl, model, eos, step_limit, tokenizer=tokenizer, **config)
    outs = call_generate(engine, prompts, params)
    plist = list(params) if isinstance(params, (list, tuple)) else [params or SamplingParams()] * len(prompts)
    text = f"engine.generate({prompts!r}, {params!r}) with EngineConfig({config}), eos_token_id={eos}"
    check_final(engine, model, prompts, plist, outs, text)
    return engine, outs


def forward_sizes(engine) -> list[int]:
    return [len(items) for items, _ in engine.runner.calls]


# ----------------------------------------------------------------------------------------------------------
# The cases


@CASES("one request: step by step", timeout=60)
def _(impl):
    model = load_model()
    eos = model.cfg.eos_token_id
    engine = make_engine(impl, model, eos, num_blocks=32, block_size=4)
    if call_learner(engine.step, "LLMEngine.step") != []:
        raise CaseFailure("step() on an engine with no requests must return []")
    prompt, params = random_prompts(model, 1, [9])[0], SamplingParams(max_tokens=6)
    request = engine.add_request(prompt, params)
    tokens = []
    while engine.has_unfinished_requests():
        outs = call_learner(engine.step, "LLMEngine.step")
        tokens += [t for o in outs for t in o.new_token_ids]
    want = alone(model, prompt, params, eos)
    if tokens != want or request.output_token_ids != want:
        raise CaseFailure("the tokens differ from generating the prompt alone",
                          input=f"engine.add_request({prompt}, {params}); step() until done",
                          field="tokens", expected=want, got=tokens)


@CASES("one request: generate (default SamplingParams)", timeout=60)
def _(impl):
    model = load_model()
    run_generate(impl, model, random_prompts(model, 2, [7]), None, num_blocks=32, block_size=4)


@CASES("several requests share each forward pass", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 3, [5, 11, 3, 8])
    engine, _ = run_generate(impl, model, prompts, SamplingParams(max_tokens=8), num_blocks=64, block_size=4)
    sizes = forward_sizes(engine)
    if max(sizes) < len(prompts):
        raise CaseFailure(f"forward passes carried {sizes} requests; all {len(prompts)} fit in one",
                          hint="one item per scheduled request, one execute_model call per step")


@CASES("max_tokens respected exactly (different per request)", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 4, [6, 4, 9, 5])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (1, 5, 2, 9)]
    run_generate(impl, model, prompts, params, num_blocks=64, block_size=4)


@CASES("end-of-sequence stops a request (and ignore_eos does not)", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 5, [6, 10, 4])
    free_run = alone(model, prompts[0], SamplingParams(max_tokens=10, ignore_eos=True), None)
    eos = free_run[2]  # a token the model does emit: prompt 0 stops at its third token at the latest
    prompts.append(list(prompts[0]))
    params = [SamplingParams(max_tokens=10)] * 3 + [SamplingParams(max_tokens=10, ignore_eos=True)]
    engine, outs = run_generate(impl, model, prompts, params, eos=eos, num_blocks=64, block_size=4)
    for i, o in enumerate(outs):
        want = expected_reason(engine.requests[o.request_id], eos)
        if o.outputs[0].finish_reason != want:
            raise CaseFailure(f"prompt {i} finished with reason {o.outputs[0].finish_reason!r}, expected {want!r}",
                              hint="pass stop_reason's result to self.scheduler.finish(request, reason)")


@CASES("chunked prefill: a prompt chunk samples nothing, step returns no output for it", timeout=60)
def _(impl):
    model = load_model()
    eos = model.cfg.eos_token_id
    engine = make_engine(impl, model, eos, num_blocks=64, block_size=4, token_budget=7, max_num_seqs=4)
    prompts = random_prompts(model, 6, [17, 3, 12])
    params = SamplingParams(max_tokens=5)
    requests = []
    for p in prompts:
        requests.append(engine.add_request(p, params))
        call_learner(engine.step, "LLMEngine.step")  # a new request arrives while others are mid-prompt
    while engine.has_unfinished_requests():
        call_learner(engine.step, "LLMEngine.step")
    if not any(not s.completes for sched in engine.scheduler.log for s in sched):
        raise CaseFailure("the workload was meant to cut prompts into chunks (a course bug)", kind="error")
    for i, (p, r) in enumerate(zip(prompts, requests)):
        want = alone(model, p, params, eos)
        if r.output_token_ids != want:
            raise CaseFailure(f"request {i}: the tokens differ from generating it alone", field="output_token_ids",
                              expected=want, got=r.output_token_ids)


@CASES("rows of logits: the j-th row is the j-th item that needs logits", timeout=60)
def _(impl):
    model = load_model()
    eos = model.cfg.eos_token_id
    engine = make_engine(impl, model, eos, scheduler=ChunksFirstScheduler, num_blocks=64, block_size=4,
                         token_budget=8, max_num_seqs=4)
    prompts = random_prompts(model, 12, [3, 2, 20, 4])
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    requests = [engine.add_request(p, params) for p in prompts[:2]]
    call_learner(engine.step, "LLMEngine.step")  # two prompts: decodes from now on
    requests += [engine.add_request(p, params) for p in prompts[2:]]
    while engine.has_unfinished_requests():  # a 20-token prompt in chunks, listed before the decodes
        call_learner(engine.step, "LLMEngine.step")
    for i, (p, r) in enumerate(zip(prompts, requests)):
        want = alone(model, p, params, eos)
        if r.output_token_ids != want:
            raise CaseFailure(f"request {i}: the tokens differ from generating it alone", field="output_token_ids",
                              expected=want, got=r.output_token_ids)


@CASES("continuous batching: a waiting request starts as soon as a slot frees", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 7, [6, 4, 8, 5])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (12, 3, 5, 4)]
    engine, _ = run_generate(impl, model, prompts, params, num_blocks=64, block_size=4, max_num_seqs=2)
    seen: set[str] = set()
    for sched in engine.scheduler.log:
        ids = {s.request.request_id for s in sched}
        if ids - seen and ids & seen:
            return  # a request was admitted while one admitted earlier was still running
        seen |= ids
    raise CaseFailure("no request was ever admitted while an earlier one was still running: the requests ran in "
                      "groups (static batching)",
                      input=f"max_num_seqs=2, engine.generate({prompts}, {params})",
                      hint="add every prompt at once (self.add_requests) and step until none is unfinished: "
                           "the scheduler admits a waiting request as soon as a running one finishes")


@CASES("generate returns outputs in prompt order", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 8, [5, 7, 3])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (9, 2, 5)]  # the first finishes last
    run_generate(impl, model, prompts, params, num_blocks=64, block_size=4)
    engine = make_engine(impl, model, None, num_blocks=8, block_size=4)
    if call_generate(engine, [], None) != []:
        raise CaseFailure("generate([]) must return []")


@CASES("a small KV cache: blocks are freed and reused", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 9, [9, 6, 11, 7, 10])
    params = SamplingParams(max_tokens=7, ignore_eos=True)
    # 6 blocks of 4 hold at most about one and a half requests: later ones need blocks of finished ones.
    run_generate(impl, model, prompts, params, num_blocks=6, block_size=4, step_limit=200)


@CASES("seeded sampling uses each request's own generator", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 10, [6, 9, 4])
    params = [SamplingParams(max_tokens=8, temperature=1.0, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    engine = make_engine(impl, model, None, num_blocks=64, block_size=4)
    outs = call_generate(engine, prompts, params)
    expected = ref.LLMEngine(model, ref.EngineConfig(num_blocks=64, block_size=4)).generate(prompts, params)
    for i, (o, e) in enumerate(zip(outs, expected)):
        got, want = [int(t) for t in o.outputs[0].token_ids], e.outputs[0].token_ids
        if got != want:
            raise CaseFailure(f"prompt {i} (temperature 1, seed {params[i].seed}): wrong tokens", field="token_ids",
                              expected=want, got=got,
                              hint="sample with sample_token(row, request.sampling_params, request.generator)")


@CASES("a mixed workload: chunks, decodes, admissions and a full cache", timeout=90)
def _(impl):
    model = load_model()
    rng = random.Random(11)
    prompts = random_prompts(model, 11, [rng.randint(1, 24) for _ in range(8)])
    params = [SamplingParams(max_tokens=rng.randint(1, 10), ignore_eos=rng.random() < 0.5) for _ in prompts]
    run_generate(impl, model, prompts, params, num_blocks=16, block_size=4, token_budget=16, max_num_seqs=4,
                 step_limit=300)


@CASES("generate: a long prompt with a small token budget (steps that return no outputs)", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 13, [30, 26])
    # token_budget 6: the first steps compute only prompt chunks and sample nothing
    run_generate(impl, model, prompts, SamplingParams(max_tokens=4, ignore_eos=True), num_blocks=32, block_size=4,
                 token_budget=6, max_num_seqs=2)


@CASES("stop strings (through the tokenizer)", timeout=60)
def _(impl):
    model = load_model()
    tokenizer = BracketTokenizer()
    prompts = random_prompts(model, 14, [7, 5, 9])
    free = alone(model, prompts[0], SamplingParams(max_tokens=10, ignore_eos=True), None)
    stop = tokenizer.decode(free[2:4])[1:-1]  # spans two tokens: the whole text must be decoded, not the last token
    params = [SamplingParams(max_tokens=10, ignore_eos=True, stop=[stop]),
              SamplingParams(max_tokens=6, ignore_eos=True, stop=["<no such token>"]),
              SamplingParams(max_tokens=10, ignore_eos=True, stop=[stop])]
    engine, outs = run_generate(impl, model, prompts[:2] + [list(prompts[0])], params, tokenizer=tokenizer,
                                num_blocks=64, block_size=4)
    for i, o in enumerate(outs):
        want = expected_reason(engine.requests[o.request_id], None, tokenizer)
        if o.outputs[0].finish_reason != want:
            raise CaseFailure(f"prompt {i} finished with reason {o.outputs[0].finish_reason!r}, expected {want!r}",
                              hint="pass stop_reason(request, self.eos_token_id, self.tokenizer) to finish")
