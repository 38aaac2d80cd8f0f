"""Driver of exercise 130 (the inference loop): the learner's `LLMEngine.step` and `generate` on fakes of the
scheduler, KV-cache manager and model runner, whose state-changing calls the grader answers in rounds
(judge/drivers/rounds.py) with the calls of the reference engine, run first through this same driver on its own
parts (`new_engine(..., record=True)`: its replies carry what its parts did, as "_script").

`new_engine` keeps an engine under a name the grader chooses; `add`, `step` and `generate` return the call the
learner's code is paused at, or their result (`answer` resumes it): one record per step, with what the scheduler
scheduled (each request as it was before the step ran), the items of every `execute_model` call and the greedy token
of each row of logits it returned, what `step` returned, every request's state after the step, and the departure if
any. Nothing here decides a verdict (judge/hidden/inference_loop.py does). Requests are named by their order of
arrival, "#0", "#1", ..., so that records do not depend on what ran before in the process.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Sequence

from framework.engine import EngineConfig, LLMEngineBase
from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge.crossing import learner_error
from judge.drivers import keep, kept, load_model
from judge.drivers.fakes import set_fields, status_of
from judge.drivers.rounds import Rounds
from judge.harness import int_values, plain_int, short


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


def plain_runner_item(item: Any) -> list:
    """An item of `execute_model` as plain values; TypeError (in the learner's code) when it is not one."""
    try:
        tokens, num_computed, table, need = item
    except (TypeError, ValueError):
        raise TypeError(f"an item is {item!r:.80}; each item is (token_ids, num_computed, block_table, "
                        "need_logits)") from None
    tokens, table = int_values(tokens), int_values(table)
    if tokens is None or table is None or isinstance(num_computed, bool) or not hasattr(num_computed, "__index__"):
        raise TypeError(f"an item is {item!r:.80}: token_ids and block_table are lists of ints, num_computed an int")
    return [tokens, operator.index(num_computed), table, bool(need)]


def plain_item(item: Any) -> dict:
    """A learner's item as recorded: {"item": [token_ids, num_computed, block_table, need_logits]}, or {"bad": its
    repr} when it is not such a 4-tuple."""
    try:
        return {"item": plain_runner_item(item)}
    except TypeError:
        return {"bad": short(item)}


# What the parts read and write of a request: its sampled tokens are the engine's answer, so only their number
FIELDS = ("num_computed_tokens", "num_output_tokens", "block_table", "status", "finish_reason", "num_cached_tokens",
          "num_preemptions", "error")
QUEUES = "scheduler"  # the name the scheduler's queues go by in a state


class Parts(Rounds):
    """One engine's scheduler, KV-cache manager and model runner, and its requests by name. Each state-changing call
    of the engine on them ([op, *args]) is recorded (`record`, the reference's parts) or posted to the grader
    (`replay`, the fakes) with the state it reads: `schedule()` reads every request and the queues, the other calls
    are checked on their arguments (a step's own updates are checked on its record)."""

    def __init__(self, recording: bool) -> None:
        super().__init__()
        self.recording = recording
        self.recorded: list[dict] = []  # entries recorded since the grader last took them
        self.requests: dict[str, Request] = {}
        self.names: dict[int, str] = {}  # id(request) -> name
        self.scheduler: Any = None
        self.kv: Any = None
        self.depth = 0  # > 0 inside a recorded call: the parts' calls of each other are theirs, not the engine's

    def name_of(self, request: Any, new: bool = False) -> str:
        """The request's name; a new name for a request the engine adds, a repr for anything else."""
        name = self.names.get(id(request))
        if name is None and new and isinstance(request, Request):
            name = self.names[id(request)] = f"#{len(self.requests)}"
            self.requests[name] = request
        return name if name is not None else short(request)

    def state(self, names: Sequence[str]) -> dict[str, dict]:
        """The fields of the named requests (and the queues, named QUEUES) as they are now."""
        out = {}
        for name in names:
            if name == QUEUES:
                s = self.scheduler
                out[name] = {"running": [self.name_of(r) for r in s.running],
                             "waiting": [self.name_of(r) for r in s.waiting]}
            elif name in self.requests:
                r = self.requests[name]
                out[name] = {f: _field(r, f) for f in FIELDS}
        return out

    def everything(self) -> list[str]:
        return [*self.requests, QUEUES]

    def call(self, call: list, reads: Sequence[str], run: Callable[[], Any]) -> Any:
        """The value of the call: `run`'s, recorded, or the grader's answer's."""
        return self.record(call, reads, run) if self.recording else self.replay(call, reads)

    def record(self, call: list, reads: Sequence[str], run: Callable[[], Any]) -> Any:
        """Run the reference's call and record it: what it read, its effect, what it returned (plain data)."""
        if self.depth:
            return run()
        before = self.state(self.everything())
        self.depth += 1
        try:
            result = run()
        finally:
            self.depth -= 1
        after = self.state(self.everything())
        effect = {name: {f: v for f, v in fields.items() if before.get(name, {}).get(f) != v}
                  for name, fields in after.items()}
        self.recorded.append({"op": call[0], "args": call[1:], "reads": {n: before[n] for n in reads if n in before},
                              "value": result, "effect": {n: e for n, e in effect.items() if e},
                              "free": self.kv.num_free_blocks})
        return result

    def replay(self, call: list, reads: Sequence[str]) -> Any:
        """Post the call, made on the requests as they are: the grader's entry's effect is applied to them, in
        place, and its value returned (or Departure raised)."""
        entry = self.post({"op": call[0], "args": call[1:], "reads": self.state(reads)})
        for name, fields in entry["effect"].items():
            if name == QUEUES:
                if "running" in fields:
                    self.scheduler.running[:] = [self.requests[n] for n in fields["running"]]
                if "waiting" in fields:
                    self.scheduler.waiting.clear()
                    self.scheduler.waiting.extend(self.requests[n] for n in fields["waiting"])
            else:
                set_fields(self.requests[name], fields, fields)
        self.kv.block_pool.num_free_blocks = entry["free"]
        return entry["value"]


def _field(r: Request, f: str) -> Any:
    value = getattr(r, f, None) if f != "num_output_tokens" else len(r.output_token_ids) \
        if isinstance(r.output_token_ids, list) else f"? (output_token_ids is a {type(r.output_token_ids).__name__})"
    return value.value if isinstance(value, RequestStatus) else list(value) if isinstance(value, list) else value


class FakeKV:
    """The KV-cache manager beside the learner's engine: its free blocks as the grader's last answer left them."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size, self.prefix_cache = block_size, None
        self.block_pool = SimpleNamespace(num_blocks=num_blocks, num_free_blocks=num_blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks


class FakeRunner:
    def __init__(self, model: Any, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size


def part_classes(engine_cls: type, parts: Parts, chunks_first: bool) -> tuple[type, type, type]:
    """The scheduler, KV-cache manager and model runner: with `parts.recording`, `engine_cls`'s own (the reference
    engine's, in the grader), recorded; else fakes whose state-changing calls the grader answers."""
    bases = (engine_cls.scheduler_cls, engine_cls.kv_cache_manager_cls, engine_cls.runner_cls) if parts.recording \
        else (SchedulerBase, FakeKV, FakeRunner)

    class Scheduler(bases[0]):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            parts.scheduler = self
            self.log: list[list[dict]] = []  # every schedule() call: the scheduled requests before the step ran
            self.states: list[dict[str, list[int]]] = []  # every unfinished request, as schedule() left it

        def has_unfinished_requests(self) -> bool:
            parts.live()  # a loop on it ends once the grading stops waiting
            return super().has_unfinished_requests()

        def name(self, request_id: Any) -> str:
            return next((n for n, r in parts.requests.items() if r.request_id == request_id), str(request_id))

        def add_request(self, request: Request) -> None:
            parts.call(["add_request", parts.name_of(request, new=True), list(request.prompt_token_ids),
                        plain_params(request.sampling_params)], (), lambda: super(Scheduler, self).add_request(request))

        def schedule(self) -> SchedulerOutput:
            out = SchedulerOutput()  # nothing to schedule: answered from the state
            if self.running or self.waiting:
                plan = parts.call(["schedule"], parts.everything(), self.planned)
                out = SchedulerOutput([ScheduledRequest(parts.requests[n], k) for n, k in plan["scheduled"]],
                                      [parts.requests[n] for n in plan["preempted"]])
            self.states.append({parts.name_of(r): [len(r.output_token_ids), r.num_computed_tokens]
                                for r in [*self.running, *self.waiting]})
            self.log.append([{"rid": parts.name_of(s.request), "num_new": s.num_new_tokens,
                              "num_computed": s.request.num_computed_tokens,
                              "token_ids": list(s.request.all_token_ids), "block_table": list(s.request.block_table),
                              "num_outputs": len(s.request.output_token_ids)} for s in out.scheduled])
            return out

        def planned(self) -> dict:
            out = super().schedule()
            if chunks_first:  # prompt chunks that sample nothing listed first: see the case "rows of logits"
                out.scheduled.sort(key=lambda s: s.completes_prompt)
            return {"scheduled": [[parts.name_of(s.request), s.num_new_tokens] for s in out.scheduled],
                    "preempted": [parts.name_of(r) for r in out.preempted]}

        def finish(self, request: Request, reason: str) -> None:
            parts.call(["finish", parts.name_of(request), reason if isinstance(reason, str) else short(reason)], (),
                       lambda: super(Scheduler, self).finish(request, reason))

    class KV(bases[1]):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            parts.kv = self

        def free(self, request: Request) -> None:
            parts.call(["free", parts.name_of(request)], (), lambda: super(KV, self).free(request))

    class Runner(bases[2]):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.calls: list[dict] = []  # every execute_model call: its items, and the greedy token of each row

        def execute_model(self, items: Any) -> Any:
            items = list(items)
            call = {"items": [plain_item(it) for it in items], "argmax": None}
            self.calls.append(call)  # recorded before running: wrong items may make the runner fail
            logits = parts.call(["execute_model", [plain_runner_item(it) for it in items]], (),
                                lambda: super(Runner, self).execute_model(items))
            call["argmax"] = [int(t) for t in logits.argmax(-1).tolist()]
            return logits

    return Scheduler, KV, Runner


def _checked_class(learner: type, parts: Parts, chunks_first: bool) -> type:
    scheduler, kv_manager, runner = part_classes(learner, parts, chunks_first)
    class Checked(learner):  # type: ignore[misc, valid-type]
        scheduler_cls, kv_cache_manager_cls, runner_cls = scheduler, kv_manager, runner

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
                run.departed(record)
                raise
            record.update(_step_facts(self, n_sched, n_calls), **plain_outputs(outs, self.scheduler.name))
            return outs

    return Checked


def _state(engine: Any, r: Request) -> dict:
    # ints, as the engine's own: a tensor token hashes by identity, and it or a numpy int breaks a trace's JSON
    return {"num_computed": plain_int(r.num_computed_tokens), "outputs": [plain_int(t) for t in r.output_token_ids],
            "finished": r.is_finished,
            "finish_reason": r.finish_reason, "status": status_of(r), "blocks": len(r.block_table),
            "in_running": any(x is r for x in engine.scheduler.running)}


def plain_output(o: Any, name: Any = str) -> dict | str:
    """A RequestOutput as plain data (its request named by `name`), or what is wrong with it, in words."""
    try:
        first = o.outputs[0]
        out = {"request_id": name(o.request_id), "prompt_token_ids": o.prompt_token_ids,
               "new_token_ids": o.new_token_ids, "finished": bool(o.finished), "token_ids": first.token_ids,
               "finish_reason": first.finish_reason}
    except (AttributeError, IndexError, TypeError, KeyError):
        return f"not a RequestOutput: {short(o)} ({type(o).__name__})"
    for key in ("prompt_token_ids", "new_token_ids", "token_ids"):
        value, out[key] = out[key], int_values(out[key])
        if out[key] is None:
            return f"a RequestOutput whose {key} is {short(value)} ({type(value).__name__}), not a list of ints"
    return out


def plain_outputs(outs: Any, name: Any = str) -> dict:
    """{"outputs": [...]} for a list of outputs, else {"outputs": what was returned, in words; "returned": its type's
    name}."""
    if not isinstance(outs, list):
        return {"outputs": f"not a list of RequestOutput: {short(outs)} ({type(outs).__name__})",
                "returned": type(outs).__name__}
    return {"outputs": [plain_output(o, name) for o in outs]}


@dataclass
class Run:
    """One engine under test and its step records."""

    engine: Any
    limit: int
    parts: Parts
    records: list[dict] = field(default_factory=list)
    reported: bool = False  # whether the departure, if any, is in a reply already

    def departed(self, reply: dict) -> dict:
        """`reply` with the departure, the first time it is there to report."""
        if self.parts.departure is not None and not self.reported:
            reply["departure"], self.reported = self.parts.departure, True
        return reply

    def reply(self, reply: dict) -> dict:
        """The reply of a driver call: with the departure, if any, and with what the reference's parts recorded."""
        if self.parts.recorded:
            reply["_script"], self.parts.recorded = self.parts.recorded, []
        return self.departed(reply)

    def rounds(self, fn: Callable[[], dict]) -> Any:
        """The reply of `fn` (the learner's call), run in rounds: the first call it pauses at, or its reply."""
        return self.parts.run(lambda: self.reply(fn()))


def _step_facts(engine: Any, n_sched: int, n_calls: int) -> dict:
    s = engine.scheduler
    return {"schedules": len(s.log) - n_sched, "sched": s.log[n_sched] if len(s.log) > n_sched else [],
            "before": s.states[n_sched] if len(s.states) > n_sched else {}, "calls": engine.runner.calls[n_calls:],
            "after": {name: _state(engine, r) for name, r in engine._judge_run.parts.requests.items()}}


# What the grader calls (the learner's module comes first)


def new_engine(impl: ModuleType, name: str, config: dict, eos: int | None, chunks_first: bool = False,
               tokenizer: bool = False, step_limit: int = 400, record: bool = False) -> dict:
    """{} once the engine under test is built and kept as `name`, or {"problem": ...} / {"error": ...} when it
    cannot be. Its scheduler, KV-cache manager and model runner are fakes the grader answers; with `record` (the
    grader's reference engine), its own parts, recording their calls."""
    learner = getattr(impl, "LLMEngine", None)
    if not (isinstance(learner, type) and issubclass(learner, LLMEngineBase)):
        return {"problem": "LLMEngine must be a class deriving from framework.engine.LLMEngineBase, as in the "
                           "starter file"}
    parts = Parts(record)
    try:
        c = EngineConfig(**config)
        cls = _checked_class(learner, parts, chunks_first)
        engine = cls(load_model(), c, BracketTokenizer() if tokenizer else None, eos_token_id=eos)
    except BaseException as exc:  # noqa: BLE001
        return {"error": learner_error(exc)}
    engine._judge_run = keep(name, Run(engine, step_limit, parts))
    return {}


def add(impl: ModuleType, name: str, prompt: list[int], params: dict | None) -> Any:
    run: Run = kept(name)

    def added() -> dict:
        try:
            r = run.engine.add_request(prompt, params_of(params))
        except BaseException as exc:  # noqa: BLE001
            return {"error": learner_error(exc)}
        return {"request_id": run.engine.scheduler.name(r.request_id)}

    return run.rounds(added)


def step(impl: ModuleType, name: str) -> Any:
    """One call of the learner's step: its record (with "error" if it raised)."""
    run: Run = kept(name)
    n = len(run.records)

    def stepped() -> dict:
        try:
            run.engine.step()
        except BaseException:  # noqa: BLE001 - in the record
            pass
        return run.records[n] if len(run.records) > n else {"problem": "step did not run"}

    return run.rounds(stepped)


def with_work(records: list) -> list:
    """The step records of steps that scheduled something: what the grader compares with the reference's, so that a
    loop that steps once more after its last request finished is right."""
    return [r for r in records if not isinstance(r, dict) or r.get("sched")]


def compared(answer: Any, fn: str, *args: Any) -> Any:
    """What a public case compares of an answer, as the hidden cases do: of generate's (the reply to `generate`, or
    to the `answer` that ended its rounds), the steps `with_work`; None: all of it."""
    if isinstance(answer, dict) and isinstance(answer.get("steps"), list):
        return {**answer, "steps": with_work(answer["steps"])}
    return None


def generate(impl: ModuleType, name: str, prompts: list[list[int]], params: Any) -> Any:
    """One call of the learner's generate: the records of the steps it took, and what it returned (or raised).
    `params`: None, one SamplingParams as a dict, or a list of them."""
    run: Run = kept(name)
    params = [params_of(p) for p in params] if isinstance(params, list) else params if params is None else \
        params_of(params)
    n = len(run.records)

    def generated() -> dict:
        out: dict[str, Any] = {}
        try:
            out.update(plain_outputs(run.engine.generate(prompts, params), run.engine.scheduler.name))
        except BaseException as exc:  # noqa: BLE001
            out["error"] = learner_error(exc)
        return {**out, "steps": run.records[n:]}

    return run.rounds(generated)


def answer(impl: ModuleType, name: str, entry: dict) -> Any:
    """The grader's answer to the call the engine kept as `name` is paused at; as `step`."""
    return kept(name).parts.answer(entry)


def final(impl: ModuleType, name: str) -> dict:
    """The engine after the run: unfinished work, free blocks, and each request's state, in order of arrival."""
    run: Run = kept(name)
    e = run.engine
    return {"unfinished": bool(e.scheduler.running or e.scheduler.waiting),
            "free": e.kv_cache_manager.num_free_blocks,
            "requests": [{"request_id": rid, "prompt": list(r.prompt_token_ids), **_state(e, r)}
                         for rid, r in run.parts.requests.items()]}


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
    if fn == "answer":
        return f"{call_text(args[0])} answered as the reference engine's part answered it" if "op" in args[0] else \
            None
    return "(read: every request's state, and the free blocks)"


def call_text(call: dict | None) -> str:
    """A call of the engine on its parts, as code."""
    if call is None:
        return "nothing more"
    op, args = call["op"], call["args"]
    if op == "execute_model":
        return f"self.runner.execute_model({short(args[0])})"
    owner = "self.kv_cache_manager" if op == "free" else "self.scheduler"
    shown = [f"request {a}" if isinstance(a, str) and a.startswith("#") else repr(a) for a in args[:2]]
    return f"{owner}.{op}({', '.join(shown)})"


def first_difference(made: dict, expected: dict | None) -> dict | None:
    """Where the same call as `expected` read requests in another state: the first field that differs."""
    if expected is None or [made["op"], made["args"]] != [expected["op"], expected["args"]]:
        return None
    for name, fields in expected["reads"].items():
        for f, value in fields.items():
            mine = made["reads"].get(name, {}).get(f)
            if mine != value:
                return {"request": name, "field": f, "want": value, "got": mine}
    return None


def departure_message(made: dict | None, expected: dict | None, where: str = "") -> str:
    """What the learner's engine called (in `where`, if given) where the reference engine called `expected` (`made`
    None: it returned)."""
    if made is None:
        return f"your engine returned without calling {call_text(expected)}, which the reference engine calls here"
    call, diff = call_text(made) + (f" ({where})" if where else ""), first_difference(made, expected)
    if diff is None:
        return f"your engine called {call} where the reference engine, on the same requests, called " \
            f"{call_text(expected)}"
    subject = "the scheduler's queue" if diff["request"] == QUEUES else f"request {diff['request']}"
    return f"when your engine called {call}, {subject} has {diff['field']} {short(diff['got'])}; the reference " \
        f"engine's had {short(diff['want'])} at that call"
