"""A step trace of any engine on the framework, written in the Chrome Trace Event format (Perfetto, chrome://tracing).

`StepTracer(engine)` records every step from what the framework sees, never from an engine's private state: it
wraps, on that engine object only, the public `step`, `add_request`, the runner's `execute_model` (its items, the
batch of exercise 128) and `build_batch`; observes the scheduler's `schedule` (its `SchedulerOutput`) through the
framework's hook, framework/observe.py, which the server's metrics share; and reads the KV-cache manager's
`num_free_blocks` and each scheduled `Request`'s public fields. So it traces the reference engine, the learner's
(`COURSE_IMPL=practice`), speculation and tensor parallelism alike. Nothing is wrapped until a tracer is made, so
tracing off costs nothing; `close()` unwraps. While it is on, the phases are also `torch.profiler.record_function`
ranges (schedule, forward, with prepare inside it, and sample: the rest of the step), so a `torch.profiler` trace
of the run names them beside the kernels.

    llm = LLM(trace="run.json")                  # written after each generate() and at shutdown()
    python -m course.serve --trace run.json      # written when the server stops
    with tracing(llm, "run.json") as tracer:     # any engine or LLM, e.g. in a notebook
        llm.generate(prompts, params)

The file is a JSON object `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`; open it in
https://ui.perfetto.dev or chrome://tracing. Times (`ts`, `dur`) are microseconds of wall clock from the tracer's
start. Process 1 ("engine"), thread 1 ("steps"): one complete event (`"ph": "X"`, category "step") per step
that scheduled something, its `args` the `StepRecord`; inside it, category "phase" slices; counters
(`"ph": "C"`) "KV blocks" (used, free), "rows" (prefill, decode, draft) and "tokens" (scheduled, budget left);
instant events (`"ph": "i"`) "preemption" and "prefix hit". Process 2 ("requests"): one thread per request, with a
slice from arrival to finish (its `args` the `RequestRecord`) and a "queued" slice inside it up to its first step.
`load_trace(path)` reads the records back, and `chrome_trace(steps, requests, info)` writes records made without a
tracer (the judge's, from its step results); `framework/trace_compare.py` finds the first step where two traces of
one workload plan differently (your engine against the reference's).

FLOPs and bytes of a step are computed from its items and the model's shapes (`step_cost`): the projections and
the output head for each new token (logits rows only), attention over each request's context; the weights read
once per step, each request's K and V read once per layer and the new tokens' K and V written. Activations,
norms and rotary embeddings are left out (they are a few percent at most).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from mini_llm import sync

from .observe import observe_schedule
from .spec_decode import DraftedRequest

FORMAT = "mini-llm-course step trace 1"
ENGINE_PID, REQUESTS_PID, STEPS_TID = 1, 2, 1


@dataclass
class StepRecord:
    index: int
    start: float  # seconds of wall clock since the tracer started
    end: float
    cpu_start: float  # seconds of this process's CPU time since the tracer started
    cpu_end: float
    phases: dict[str, list[float]]  # name -> [start, end], wall clock
    scheduled: list[dict]  # per request: request_id, kind ("prefill" or "decode"), tokens, drafts, context, blocks
    # (the length of its block table once scheduled)
    rows: dict[str, int]  # new tokens by kind: prefill, decode, draft
    token_budget: int
    tokens_scheduled: int
    kv_blocks_used: int
    kv_blocks_free: int
    prefix_hit_tokens: int  # prompt tokens found in the prefix cache by requests admitted in this step
    preempted: list[str]
    drafts_proposed: int
    drafts_accepted: int
    finished: list[str]
    flops: int
    bytes: int
    error: str | None = None


@dataclass
class RequestRecord:
    request_id: str
    num_prompt_tokens: int
    arrival: float | None = None  # None: added before the tracer started
    first_token: float | None = None
    finish: float | None = None
    finish_reason: str | None = None
    num_output_tokens: int = 0
    steps: list[int] = field(default_factory=list)


def step_cost(cfg: Any, items: list, dtype_bytes: int) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one forward pass over `items`, `(token_ids, num_computed, block_table, need_logits
    [, num_drafts])` as the runner takes them, for a model of config `cfg` with `dtype_bytes`-byte weights and KV."""
    h, hd, layers = cfg.hidden_size, cfg.head_dim, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    layer_params = h * q + 2 * h * kv + q * h + 3 * h * cfg.intermediate_size
    tokens = sum(len(item[0]) for item in items)
    logits_rows = sum(int(item[3]) * (1 + (item[4] if len(item) > 4 else 0)) for item in items)
    # new token j (1-based) of a chunk starting at s attends to s + j positions
    attended = sum(len(t) * s + len(t) * (len(t) + 1) // 2 for t, s, *_ in items)
    context = sum(s + len(t) for t, s, *_ in items)
    flops = 2 * tokens * layers * layer_params + 4 * layers * cfg.num_attention_heads * hd * attended \
        + 2 * logits_rows * h * cfg.vocab_size
    moved = layers * layer_params + cfg.vocab_size * h + tokens * h + layers * 2 * kv * (context + tokens)
    return flops, moved * dtype_bytes


class StepTracer:
    """Records `engine`'s steps and requests until `close()`; `save(path)` writes the Chrome trace. FLOPs and bytes
    are those of a model of config `cfg`, by default the engine's model's; under tensor parallelism that is rank 0's
    shard, so pass the whole model's config to count the whole step (LLM does)."""

    def __init__(self, engine: Any, path: str | Path | None = None, cfg: Any = None) -> None:
        self.engine, self.path, self.cfg = engine, path, cfg or engine.model.cfg
        self.steps: list[StepRecord] = []
        self.requests: dict[str, RequestRecord] = {}
        self._admitted: set[str] = set()
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        self._current: dict = {}
        self._wrapped: list[tuple[Any, str]] = []
        self._wrap(engine, "step", self._step)
        self._wrap(engine, "add_request", self._add_request)
        self._detach = observe_schedule(engine.scheduler, self)
        self._wrap(engine.runner, "execute_model", self._execute_model)
        if hasattr(engine.runner, "build_batch"):
            self._wrap(engine.runner, "build_batch", self._phase("prepare"))

    def _wrap(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        setattr(obj, name, make(getattr(obj, name)))  # an instance attribute: the class is left alone
        self._wrapped.append((obj, name))

    def close(self) -> None:
        """Stop recording: the engine's own methods again."""
        for obj, name in reversed(self._wrapped):
            delattr(obj, name)
        self._wrapped.clear()
        self._detach()
        self._detach = lambda: None

    def _now(self) -> float:
        return time.perf_counter() - self._wall0

    def _phase(self, name: str) -> Callable[[Callable], Callable]:
        def make(fn: Callable) -> Callable:
            def timed(*args, **kwargs):
                start = self._now()
                try:
                    with torch.profiler.record_function(name):
                        return fn(*args, **kwargs)
                finally:
                    self._current.setdefault("phases", {})[name] = [start, self._now()]
            return timed
        return make

    def _add_request(self, add: Callable) -> Callable:
        def traced(prompt_token_ids, params=None):
            request = add(prompt_token_ids, params)
            self.requests[request.request_id] = RequestRecord(request.request_id, request.num_prompt_tokens,
                                                              arrival=self._now())
            return request
        return traced

    def before_schedule(self) -> None:
        self._current["schedule_start"] = self._now()
        self._current["scheduling"] = torch.profiler.record_function("schedule").__enter__()

    def after_schedule(self, out: Any) -> None:
        self._current.pop("scheduling").__exit__(None, None, None)
        self._current.setdefault("phases", {})["schedule"] = [self._current.pop("schedule_start"), self._now()]
        self._current["sched"] = out
        # read now, before the step advances the requests
        self._current["before"] = [(s.request.num_computed_tokens, s.request.num_tokens,
                                    s.request.num_accepted_tokens, len(s.request.block_table))
                                   for s in out.scheduled]

    def _execute_model(self, execute: Callable) -> Callable:
        def synced(items):  # on a GPU the phase ends when the forward pass's kernels have run, not when queued
            logits = execute(items)
            if isinstance(logits, torch.Tensor):
                sync(logits.device)
            return logits

        timed = self._phase("forward")(synced)

        def traced(items):
            self._current["items"] = items
            logits = timed(items)
            # the rest of the step, up to its end (closed in _step): sampling and the requests' updates
            self._current["sample"] = torch.profiler.record_function("sample").__enter__()
            return logits
        return traced

    def _step(self, step: Callable) -> Callable:
        def traced():
            self._current = {}
            start, cpu_start, error = self._now(), time.process_time() - self._cpu0, None
            try:
                with torch.profiler.record_function("step"):
                    try:
                        return step()
                    finally:  # inside "step", so that they nest under it; "scheduling" is open if schedule() raised
                        for name in ("scheduling", "sample"):
                            if name in self._current:
                                self._current.pop(name).__exit__(None, None, None)
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"
                raise
            finally:
                if self._current.get("sched"):
                    self._record(start, cpu_start, error)
        return traced

    def _record(self, start: float, cpu_start: float, error: str | None) -> None:
        end, cur, engine = self._now(), self._current, self.engine
        sched, phases = cur["sched"], cur.setdefault("phases", {})
        if "forward" in phases:
            phases["sample"] = [phases["forward"][1], end]
        index, scheduled = len(self.steps), []
        rows = {"prefill": 0, "decode": 0, "draft": 0}
        hits = proposed = accepted = 0
        for s, (computed, num_tokens, accepted_before, blocks) in zip(sched.scheduled, cur["before"]):
            r = s.request
            drafts = len(s.draft_token_ids) if isinstance(s, DraftedRequest) else 0
            kind = "prefill" if num_tokens - computed > 1 else "decode"
            rows[kind] += s.num_new_tokens - drafts
            rows["draft"] += drafts
            proposed += drafts
            accepted += r.num_accepted_tokens - accepted_before
            if r.request_id not in self._admitted:  # admitted (or readmitted after a preemption) in this step
                self._admitted.add(r.request_id)
                hits += r.num_cached_tokens
            scheduled.append({"request_id": r.request_id, "kind": kind, "tokens": s.num_new_tokens - drafts,
                              "drafts": drafts, "context": computed + s.num_new_tokens, "blocks": blocks})
            self._note_request(r, index, end)
        for r in sched.preempted:
            self._admitted.discard(r.request_id)
        kv = engine.kv_cache_manager
        flops, moved = step_cost(self.cfg, cur.get("items", []), engine.model.dtype.itemsize)
        free = kv.num_free_blocks
        self.steps.append(StepRecord(
            index, start, end, cpu_start, time.process_time() - self._cpu0, phases, scheduled, rows,
            engine.config.token_budget, sched.num_scheduled_tokens, engine.config.num_blocks - free, free, hits,
            [r.request_id for r in sched.preempted], proposed, accepted,
            [s.request.request_id for s in sched.scheduled if s.request.is_finished], flops, moved, error))

    def _note_request(self, request: Any, index: int, end: float) -> None:
        record = self.requests.setdefault(request.request_id,
                                          RequestRecord(request.request_id, request.num_prompt_tokens))
        record.steps.append(index)
        record.num_output_tokens = len(request.output_token_ids)
        if record.first_token is None and request.output_token_ids:
            record.first_token = end
        if request.is_finished and record.finish is None:
            record.finish, record.finish_reason = end, request.finish_reason

    def chrome_trace(self) -> dict:
        """The trace as a Chrome Trace Event JSON object (see the module's docstring)."""
        cfg = self.cfg
        return chrome_trace(self.steps, list(self.requests.values()),
                            {"engine": type(self.engine).__name__,
                             "model": {k: getattr(cfg, k) for k in ("hidden_size", "intermediate_size",
                                       "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                       "head_dim", "vocab_size")},
                             "dtype": str(self.engine.model.dtype), "num_blocks": self.engine.config.num_blocks})

    def save(self, path: str | Path | None = None) -> Path:
        """Write the trace to `path` (default: the tracer's); returns the path."""
        path = Path(path or self.path)
        path.write_text(json.dumps(self.chrome_trace()))
        return path


def chrome_trace(steps: list[StepRecord], requests: list[RequestRecord], info: dict) -> dict:
    """Steps (indexed from 0, in order) and requests as a Chrome Trace Event JSON object that `load_trace` reads
    back; `info` joins the format's name in `otherData`. The judge writes its step traces with it too."""
    events = [_meta("process_name", ENGINE_PID, 0, "engine"), _meta("thread_name", ENGINE_PID, STEPS_TID, "steps"),
              _meta("process_name", REQUESTS_PID, 0, "requests")]
    for step in steps:
        events += _step_events(step)
    for tid, record in enumerate(requests, 1):
        events += _request_events(record, tid, steps[record.steps[0]].start if record.steps else None)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"format": FORMAT, **info}}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _meta(name: str, pid: int, tid: int, value: str) -> dict:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": {"name": value}}


def _slice(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict | None = None) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": _us(start),
            "dur": _us(max(end - start, 0.0)), "args": args or {}}


def _step_events(step: StepRecord) -> list[dict]:
    at = {"pid": ENGINE_PID, "tid": STEPS_TID, "ts": _us(step.start)}
    events = [_slice(f"step {step.index}", "step", ENGINE_PID, STEPS_TID, step.start, step.end, asdict(step))]
    events += [_slice(name, "phase", ENGINE_PID, STEPS_TID, a, b) for name, (a, b) in step.phases.items()]
    events += [{"ph": "C", "name": "KV blocks", **at,
                "args": {"used": step.kv_blocks_used, "free": step.kv_blocks_free}},
               {"ph": "C", "name": "rows", **at, "args": dict(step.rows)},
               {"ph": "C", "name": "tokens", **at, "args": {"scheduled": step.tokens_scheduled,
                                                           "budget left": step.token_budget - step.tokens_scheduled}}]
    if step.preempted:
        events.append({"ph": "i", "s": "t", "name": "preemption", **at, "args": {"requests": step.preempted}})
    if step.prefix_hit_tokens:
        events.append({"ph": "i", "s": "t", "name": "prefix hit", **at, "args": {"tokens": step.prefix_hit_tokens}})
    return events


def _request_events(record: RequestRecord, tid: int, first_step: float | None) -> list[dict]:
    arrival = record.arrival if record.arrival is not None else first_step
    if arrival is None:  # added, never scheduled
        return [_meta("thread_name", REQUESTS_PID, tid, record.request_id)]
    end = record.finish if record.finish is not None else arrival
    events = [_meta("thread_name", REQUESTS_PID, tid, record.request_id),
              _slice(record.request_id, "request", REQUESTS_PID, tid, arrival, max(end, arrival), asdict(record))]
    if first_step is not None:
        events.append(_slice("queued", "request", REQUESTS_PID, tid, arrival, first_step))
    return events


def load_trace(path: str | Path) -> tuple[list[StepRecord], list[RequestRecord]]:
    """The steps and requests of a trace written by `StepTracer.save`, in order."""
    trace = json.loads(Path(path).read_text())
    if trace.get("otherData", {}).get("format") != FORMAT:
        raise ValueError(f"{path} is not a step trace of this course (otherData.format is not {FORMAT!r})")
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    steps = [StepRecord(**e["args"]) for e in events if e["cat"] == "step"]
    requests = [RequestRecord(**e["args"]) for e in events if e["cat"] == "request" and e["args"]]
    return sorted(steps, key=lambda s: s.index), requests


@contextmanager
def tracing(engine_or_llm: Any, path: str | Path | None = None, cfg: Any = None) -> Iterator[StepTracer]:
    """Trace the steps run inside the block (of an engine, or an LLM's engine); written to `path`, if given, at
    the end. `cfg` as for `StepTracer`, by default an LLM's whole model's."""
    engine = getattr(engine_or_llm, "engine", engine_or_llm)
    tracer = StepTracer(engine, path, cfg or getattr(engine_or_llm, "model_config", None))
    try:
        yield tracer
    finally:
        tracer.close()
        if path is not None:
            tracer.save()
