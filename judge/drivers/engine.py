"""Driver of exercise 130 (the inference loop): the learner's `LLMEngine.step` and `generate` on stand-ins for the
scheduler, KV-cache manager and model runner (judge/drivers/stand_ins.py), each recording what it was asked.

The grader builds an engine here (`new_engine`, kept under a name it chooses), adds requests, steps it or calls its
`generate`, and receives one record per step: what the scheduler scheduled (each request as it was before the step
ran), the items of every `execute_model` call and the greedy token of each row of logits it returned, what `step`
returned, and every request's state after the step. Nothing here decides a verdict (judge/hidden/inference_loop.py
does). Requests are named by their order of arrival, "#0", "#1", ..., so that records do not depend on what ran
before in the process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Sequence

from framework.engine import EngineConfig, LLMEngineBase
from framework.request import Request
from framework.sampling import SamplingParams
from judge.crossing import learner_error
from judge.drivers import OPENER, host_call, keep, kept, load_model
from judge.drivers.stand_ins import engine_parts, plain_runner_item
from judge.harness import int_values, short


class BracketTokenizer:
    """A tokenizer for stop strings that needs no files: token t decodes to "<t>"."""

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(f"<{int(t)}>" for t in token_ids)


class StepLimit(BaseException):
    """Raised into the learner's loop after too many steps (a BaseException: `except Exception` lets it through)."""


def params_of(d: dict | None) -> SamplingParams:
    return SamplingParams(**d) if d is not None else SamplingParams()


def plain_params(p: SamplingParams) -> dict:
    return asdict(p)


def ints(xs: Any) -> list[int]:
    """A list, tuple or 1-D integer tensor of token ids (or block ids) as a list of ints; ValueError otherwise."""
    values = int_values(xs)
    if values is None:
        raise ValueError("not a list of ints")
    return values


def plain_item(item: Any) -> dict:
    """A learner's item as the stand-in runner sends it: {"item": [token_ids, num_computed, block_table,
    need_logits]}, or {"bad": its repr} when it is not such a 4-tuple."""
    try:
        return {"item": plain_runner_item(item)}
    except TypeError:
        return {"bad": short(item)}


# ---------------------------------------------------------------------------------------------------------------
# The engine under test, on parts run in the grader (judge/drivers/stand_ins.py) that record what they are asked


def _checked_class(learner: type, host: int) -> type:
    scheduler, kv_manager, runner = engine_parts(host)

    class RecordingScheduler(scheduler):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.log: list[list[dict]] = []  # every schedule() call: the scheduled requests before the step ran
            self.states: list[dict[str, list[int]]] = []  # every unfinished request, as schedule() left it
            self.added: list[Request] = []

        def add_request(self, request: Request) -> None:
            super().add_request(request)
            self.added.append(request)

        def name(self, request_id: Any) -> str:
            return next((n for n, r in self.link.requests.items() if r.request_id == request_id), str(request_id))

        def schedule(self):
            out = super().schedule()
            names = self.link.names
            self.states.append({names[r]: [len(r.output_token_ids), r.num_computed_tokens]
                                for r in [*self.running, *self.waiting]})
            self.log.append([{"rid": names[s.request], "num_new": s.num_new_tokens,
                              "num_computed": s.request.num_computed_tokens,
                              "token_ids": list(s.request.all_token_ids), "block_table": list(s.request.block_table),
                              "num_outputs": len(s.request.output_token_ids)} for s in out.scheduled])
            return out

    class RecordingRunner(runner):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.calls: list[dict] = []

        def execute_model(self, items):
            items = list(items)
            call = {"items": [plain_item(it) for it in items], "argmax": None}
            self.calls.append(call)  # recorded before running: wrong items may make the runner fail
            logits = super().execute_model(items)
            call["argmax"] = [int(t) for t in logits.argmax(-1).tolist()]
            return logits

    class Checked(learner):  # type: ignore[misc, valid-type]
        scheduler_cls = RecordingScheduler
        runner_cls = RecordingRunner
        kv_cache_manager_cls = kv_manager

        def step(self):
            run: Run = self._judge_run
            if len(run.records) >= run.limit:
                run.records.append({"limit": run.limit})
                raise StepLimit(f"still running after {run.limit} steps")
            n_sched, n_calls = len(self.scheduler.log), len(self.runner.calls)
            record: dict[str, Any] = {}
            run.records.append(record)
            try:
                outs = super().step()
            except BaseException as exc:  # noqa: BLE001 - recorded, and raised on into the learner's code
                record.update(_step_facts(self, n_sched, n_calls), error=learner_error(exc))
                raise
            record.update(_step_facts(self, n_sched, n_calls), **plain_outputs(outs, self.scheduler.name))
            return outs

    return Checked


def _state(engine: Any, r: Request) -> dict:
    return {"num_computed": r.num_computed_tokens, "outputs": list(r.output_token_ids), "finished": r.is_finished,
            "finish_reason": r.finish_reason, "status": r.status.value, "blocks": len(r.block_table),
            "in_running": any(x is r for x in engine.scheduler.running)}


def plain_output(o: Any, name: Any = str) -> dict:
    """A RequestOutput as plain data (its request named by `name`), or {"bad": its repr} when it is not one."""
    try:
        first = o.outputs[0]
        return {"request_id": name(o.request_id), "prompt_token_ids": ints(o.prompt_token_ids),
                "new_token_ids": ints(o.new_token_ids), "finished": bool(o.finished),
                "token_ids": ints(first.token_ids), "finish_reason": first.finish_reason}
    except (AttributeError, IndexError, TypeError, ValueError, KeyError):
        return {"bad": short(o)}


def plain_outputs(outs: Any, name: Any = str) -> dict:
    """{"outputs": [...]} for a list of outputs, else {"returned": the type's name and a repr}."""
    if not isinstance(outs, list):
        return {"returned": type(outs).__name__, "repr": short(outs)}
    return {"outputs": [plain_output(o, name) for o in outs]}


@dataclass
class Run:
    """One engine under test and its step records."""

    engine: Any
    limit: int
    records: list[dict] = field(default_factory=list)


def _step_facts(engine: Any, n_sched: int, n_calls: int) -> dict:
    s = engine.scheduler
    return {"schedules": len(s.log) - n_sched, "sched": s.log[n_sched] if len(s.log) > n_sched else [],
            "before": s.states[n_sched] if len(s.states) > n_sched else {}, "calls": engine.runner.calls[n_calls:],
            "after": {s.name(r.request_id): _state(engine, r) for r in s.added}}


# ---------------------------------------------------------------------------------------------------------------
# What the grader calls (the learner's module comes first)


def new_engine(impl: ModuleType, name: str, config: dict, eos: int | None, chunks_first: bool = False,
               tokenizer: bool = False, step_limit: int = 400) -> dict:
    """{} once the engine under test is built and kept as `name`, or {"problem": ...} / {"error": ...} when it
    cannot be. Its scheduler, KV-cache manager and model runner run in the grader (judge/drivers/hosts.py,
    EngineHost), asked for here."""
    learner = getattr(impl, "LLMEngine", None)
    if not (isinstance(learner, type) and issubclass(learner, LLMEngineBase)):
        return {"problem": "LLMEngine must be a class deriving from framework.engine.LLMEngineBase, as in the "
                           "starter file"}
    sizes = ("num_blocks", "block_size", "token_budget", "max_num_seqs", "enable_chunked_prefill",
             "enable_prefix_caching")
    try:  # in a student edition the grader's parts may be the student's own stubs, which raise here
        c = EngineConfig(**config)
        cls = _checked_class(learner, host_call(OPENER, "engine", {k: getattr(c, k) for k in sizes}, chunks_first))
        engine = cls(load_model(), c, BracketTokenizer() if tokenizer else None, eos_token_id=eos)
    except BaseException as exc:  # noqa: BLE001
        return {"error": learner_error(exc)}
    engine._judge_run = keep(name, Run(engine, step_limit))
    return {}


def add(impl: ModuleType, name: str, prompt: list[int], params: dict | None) -> dict:
    run: Run = kept(name)
    try:
        r = run.engine.add_request(prompt, params_of(params))
    except BaseException as exc:  # noqa: BLE001
        return {"error": learner_error(exc)}
    return {"request_id": run.engine.scheduler.name(r.request_id)}


def step(impl: ModuleType, name: str) -> dict:
    """One call of the learner's step: its record (with "error" if it raised)."""
    run: Run = kept(name)
    n = len(run.records)
    try:
        run.engine.step()
    except BaseException:  # noqa: BLE001 - in the record
        pass
    return run.records[n] if len(run.records) > n else {"problem": "step did not run"}


def generate(impl: ModuleType, name: str, prompts: list[list[int]], params: Any) -> dict:
    """One call of the learner's generate: the records of the steps it took, and what it returned (or raised).
    `params`: None, one SamplingParams as a dict, or a list of them."""
    run: Run = kept(name)
    if isinstance(params, list):
        params = [params_of(p) for p in params]
    elif params is not None:
        params = params_of(params)
    n = len(run.records)
    out: dict[str, Any] = {}
    try:
        outs = run.engine.generate(prompts, params)
    except BaseException as exc:  # noqa: BLE001
        out["error"] = learner_error(exc)
    else:
        out.update(plain_outputs(outs, run.engine.scheduler.name))
    out["steps"] = run.records[n:]
    return out


def final(impl: ModuleType, name: str) -> dict:
    """The engine after the run: unfinished work, free blocks, and each request's state, in order of arrival."""
    e = kept(name).engine
    return {"unfinished": bool(e.scheduler.running or e.scheduler.waiting),
            "free": e.kv_cache_manager.num_free_blocks,
            "requests": [{"request_id": e.scheduler.name(r.request_id), "prompt": list(r.prompt_token_ids), **_state(e, r)}
                         for r in e.scheduler.added]}


# ---------------------------------------------------------------------------------------------------------------
# The calls as a learner reads them (the public replay's messages)


def _params_text(params: Any) -> str:
    if isinstance(params, list):
        return "[" + ", ".join(_params_text(p) for p in params) + "]"
    if params is None:
        return "None"
    default = plain_params(SamplingParams())
    return "SamplingParams(" + ", ".join(f"{k}={v!r}" for k, v in params.items() if default.get(k) != v) + ")"


def describe(fn: str, name: str, *args: Any) -> str:
    """A call of this driver as the code the learner's engine ran (the model is the embedded checkpoint)."""
    if fn == "new_engine":
        config, eos = args[0], args[1]
        tokenizer = ", a tokenizer" if len(args) > 3 and args[3] else ""
        return f"engine = LLMEngine(model, EngineConfig(**{config!r}){tokenizer}, eos_token_id={eos})"
    if fn == "add":
        return f"engine.add_request({args[0]!r}, {_params_text(args[1])})"
    if fn == "generate":
        return f"engine.generate({args[0]!r}, {_params_text(args[1])})"
    if fn == "step":
        return "engine.step()"
    return "(read: every request's state, and the free blocks)"
