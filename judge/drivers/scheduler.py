"""Driver of exercises 129 (schedule) and 131 (preemption): a scheduler world built beside the learner's code.

A workload (a configuration, requests already running, arrivals) runs on a KV-cache manager and a scheduler driven
by a fake model loop; the grader runs the same World on the references and compares what `step` and
`preemption_call` return (plain data). 129: the learner's `Scheduler.schedule` on the framework's shell; 131: the
learner's `preempt` and `allocate_or_preempt`, called from the reference scheduler in the grader. The grader answers
the parts' calls one at a time (judge/drivers/fakes.py): a call returns the call the learner's code is paused at,
or its result; `answer` resumes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields as dataclass_fields
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from judge.crossing import learner_error
from judge.harness import CaseFailure, plain_int
from judge.drivers import keep, kept
from judge.wire import WorkerLost
from judge.drivers.fakes import (FIELD_NAMES, FakeKVCacheManager, FakePreemption, Replay, describe as describe_call,
                                 fields, ids, plan, set_fields, status_of)
from judge.drivers.fakes import departure_message  # noqa: F401 - judge/public.py's words for a departure
from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams
from framework.scheduler import SchedulerBase, SchedulerOutput


@dataclass(frozen=True)
class Config:
    num_blocks: int
    block_size: int
    token_budget: int
    max_num_seqs: int
    chunked: bool = True
    prefix: bool = False

    @property
    def capacity(self) -> int:
        return self.num_blocks * self.block_size

    def setup_text(self) -> list[str]:
        """The KV-cache manager and the scheduler of this configuration, as code."""
        return [f"kv = KVCacheManager(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"enable_prefix_caching={self.prefix})",
                f"s = Scheduler(kv, token_budget={self.token_budget}, max_num_seqs={self.max_num_seqs}, "
                f"enable_chunked_prefill={self.chunked})"]


@dataclass(frozen=True)
class Spec:
    """One request. `computed` None: it arrives with add_request before step `arrival` (1-based); otherwise it
    is already running at the start with `computed` tokens in the cache and `outputs` sampled."""

    rid: str
    prompt: tuple[int, ...]
    max_tokens: int
    arrival: int = 1
    computed: int | None = None
    outputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Workload:
    config: Config
    requests: tuple[Spec, ...]

    def valid(self) -> bool:
        c = self.config
        limit = c.capacity if c.chunked else min(c.capacity, c.token_budget)
        return all(s.prompt and s.max_tokens >= 1 and len(s.prompt) + s.max_tokens <= limit for s in self.requests)

    def plain(self) -> dict:
        return {"config": asdict(self.config), "requests": [asdict(s) for s in self.requests]}

    @staticmethod
    def from_plain(d: dict) -> "Workload":
        specs = tuple(Spec(str(s["rid"]), tuple(s["prompt"]), int(s["max_tokens"]), int(s["arrival"]),
                           s["computed"], tuple(s["outputs"])) for s in d["requests"])
        return Workload(Config(**d["config"]), specs)


def make_request(s: Spec) -> Request:
    return Request(list(s.prompt), SamplingParams(max_tokens=s.max_tokens, ignore_eos=True), request_id=s.rid)


class World:
    """One scheduler (of class `cls`) and its requests on the KV-cache manager `kv` (a fake in the worker, the
    reference in the grader); `parts` (what replays or records the parts' calls) is shown its scheduler and requests."""

    def __init__(self, cls: type, w: Workload, kv: Any, parts: Any = None) -> None:
        c = w.config
        self.w, self.kv = w, kv
        self.sched = cls(self.kv, c.token_budget, c.max_num_seqs, c.chunked)
        self.requests: dict[str, Request] = {}
        if parts is not None:
            parts.scheduler, parts.requests = self.sched, self.requests
        for sp in w.requests:
            if sp.computed is not None:
                self.place_running(sp)

    def place_running(self, sp: Spec) -> None:
        r = make_request(sp)
        r.output_token_ids = list(sp.outputs)
        self.requests[sp.rid] = r
        if not self.kv.allocate_slots(r, sp.computed):
            raise AssertionError(f"course bug: no blocks to place {sp.rid}")
        r.num_computed_tokens, r.status = sp.computed, RequestStatus.RUNNING
        self.sched.running.append(r)

    def arrive(self, step: int) -> None:
        for sp in self.w.requests:
            if sp.computed is None and sp.arrival == step:
                r = make_request(sp)
                SchedulerBase.add_request(self.sched, r)
                self.requests[sp.rid] = r

    def pending(self, step: int) -> bool:
        """Whether anything is left to do at or after `step`."""
        return SchedulerBase.has_unfinished_requests(self.sched) or any(
            sp.computed is None and sp.arrival >= step for sp in self.w.requests)

    def update(self, scheduled: list) -> None:
        """The fake model: computed tokens advance; a request that completes its pending tokens gets a token, and is
        finished at `max_tokens`."""
        for s in scheduled:
            r, n = s.request, s.num_new_tokens
            completes = r.num_computed_tokens + n == r.num_tokens
            r.num_computed_tokens += n
            if completes:  # the fake model's 'sampled' token: deterministic, different per request and position
                r.output_token_ids.append(500 + 7 * len(r.output_token_ids) + sum(r.prompt_token_ids) % 89)
                if len(r.output_token_ids) >= r.sampling_params.max_tokens:
                    SchedulerBase.finish(self.sched, r, "length")


def snapshot(world: World) -> dict[str, Any]:
    """The queues and every request's state: what the grader compares with the reference's."""
    s = world.sched
    return {
        "running": [r.request_id for r in s.running],
        "waiting": [r.request_id for r in s.waiting],
        "requests": {rid: {"status": status_of(r), "num_computed_tokens": plain_int(r.num_computed_tokens),
                           "num_cached_tokens": plain_int(r.num_cached_tokens), "blocks held": len(r.block_table),
                           "num_preemptions": plain_int(r.num_preemptions),
                           "output_token_ids": list(r.output_token_ids),
                           "num_tokens": r.num_tokens}
                     for rid, r in world.requests.items()},
        "free blocks": world.kv.num_free_blocks,
    }


def output_problem(out: Any, fn: str = "schedule") -> dict | None:
    """Why `out`, returned by schedule or filled in by `fn`, is not a usable SchedulerOutput ({"problem": what,
    "hint": ...}), or None."""
    if out is None:
        return {"problem": "schedule returned None", "hint": "return the SchedulerOutput you filled in"}
    scheduled, preempted = getattr(out, "scheduled", None), getattr(out, "preempted", None)
    if not isinstance(scheduled, list) or not isinstance(preempted, list):
        if fn != "schedule":
            return {"problem": f"after {fn}, out.scheduled is a {type(scheduled).__name__} and out.preempted a "
                               f"{type(preempted).__name__}; both are the lists of the SchedulerOutput it was given",
                    "hint": "change them in place (append, del, remove): the scheduler and the engine read those "
                            "lists"}
        return {"problem": f"schedule returned {type(out).__name__} {str(out)[:200]}; it must return a "
                           "SchedulerOutput",
                "hint": "out = SchedulerOutput(); out.scheduled.append(ScheduledRequest(request, n)); return out"}
    for s in scheduled:
        r, n = getattr(s, "request", None), getattr(s, "num_new_tokens", None)
        if not isinstance(r, Request) or not isinstance(n, int) or isinstance(n, bool):
            shown = f"request {r.request_id!r}" if isinstance(r, Request) else f"request={str(r)[:100]}"
            return {"problem": f"out.scheduled holds ScheduledRequest({shown}, num_new_tokens={plain_int(n)}); "
                               "each entry must be ScheduledRequest(request, num_new_tokens) with an int number of "
                               "tokens", "hint": "num_new_tokens is a Python int (int(n) of a numpy or tensor value)"}
    for r in preempted:
        if not isinstance(r, Request):
            return {"problem": f"out.preempted holds {plain_int(r)}; it must hold the preempted Request objects",
                    "hint": "out.preempted.append(victim): the Request itself, not its request_id"}
    return None


def plan_of(out: SchedulerOutput) -> tuple[list, list[str]]:
    return [(s.request.request_id, s.num_new_tokens) for s in out.scheduled], [r.request_id for r in out.preempted]


def facts(world: World, out: SchedulerOutput) -> dict[str, Any]:
    """What the invariants are checked on, right after schedule() (with its snapshot)."""
    running = {id(r) for r in world.sched.running}
    return {
        "scheduled": [{"rid": x.request.request_id, "n": x.num_new_tokens, "in_running": id(x.request) in running,
                       "status": status_of(x.request), "num_preemptions": x.request.num_preemptions,
                       "num_computed": x.request.num_computed_tokens, "num_tokens": x.request.num_tokens,
                       "blocks": len(x.request.block_table)} for x in out.scheduled],
        "finished": [rid for rid, r in world.requests.items() if r.is_finished],
    }


def blocks(world: World) -> dict[str, Any]:
    """The pool's reference counts and free blocks (125's public contract), and the blocks each request holds."""
    pool = world.kv.block_pool
    return {"ref_cnt": [int(c) for c in pool.ref_cnt], "num_free_blocks": int(pool.num_free_blocks),
            "held": [b for r in world.requests.values() for b in r.block_table]}


def graded_scheduler(impl: ModuleType, replay: Replay) -> type:
    """129: the learner's schedule on the framework's shell, with the reference preemption replayed."""
    learner = getattr(impl, "Scheduler", None)
    if not (isinstance(learner, type) and callable(getattr(learner, "schedule", None))):
        raise TypeError("Scheduler must be a class with a schedule method, as in the starter file")
    bases = (learner,) if issubclass(learner, SchedulerBase) else (learner, SchedulerBase)
    return type("Graded", bases, {"preemption": FakePreemption(replay)})


# What the grader calls (the learner's module comes first)


def new_world(impl: ModuleType, name: str, workload: dict) -> Any:
    """129: the world of a workload on the learner's scheduler, its parts kept as `name`; the KV-cache manager's
    calls that place the requests already running are answered as phase "setup"."""
    w = Workload.from_plain(workload)
    c = w.config
    replay = keep(name, Replay(c.num_blocks, c.block_size, c.prefix))
    replay.load("setup")

    def build() -> None:
        replay.world = World(graded_scheduler(impl, replay), w, FakeKVCacheManager(replay), replay)

    return replay.run(build)


def step(impl: ModuleType, name: str, step: int, lookups: dict[str, list[int]]) -> dict[str, Any]:
    """One step of the world kept as `name`: arrivals, the learner's schedule() (its parts' calls: phase "schedule",
    from the prefix hits `lookups`), its checks' data, then the fake model's update (phase "update"). A call the
    grader answers with a departure ends the phase with "departure": the call made and the call expected."""
    replay: Replay = kept(name)
    return replay.run(lambda: step_world(replay.world, step, replay, lookups))


def answer(impl: ModuleType, name: str, entry: dict) -> Any:
    """The grader's answer to the call the learner's code kept as `name` is paused at; as `step`."""
    return kept(name).answer(entry)


def step_world(world: World, step: int, parts: Any, lookups: dict | None = None) -> dict[str, Any]:
    """`step` on `world`, whose `parts` the grader answers (from the prefix hits `lookups`; None: 131's world in the
    grader, on the reference parts, calling the learner's preemption in the worker); a departure ends the phase."""
    world.arrive(step)
    result: dict[str, Any] = {"before": snapshot(world)}
    if lookups is not None:
        parts.load("schedule", lookups, before=result["before"])
    try:
        out = world.sched.schedule()
    except BaseException as exc:  # noqa: BLE001 - the learner's exception, for the grader to show
        if isinstance(exc, WorkerLost) or lookups is None and isinstance(exc, CaseFailure):
            raise  # 131, run in the grader: the worker running the learner's preemption died or hung, or it left
            # the request or `out` unusable
        if parts.departure is None:
            return {**result, "error": learner_error(exc)}
    if parts.departure is not None:
        return {**result, "departure": parts.departure}
    problem = output_problem(out)
    if problem:
        return {**result, **problem}
    scheduled, preempted = plan_of(out)
    result.update(plan=scheduled, preempted=preempted, facts=facts(world, out), after=snapshot(world))
    if lookups is not None:
        parts.load("update")
    try:
        world.update(out.scheduled)
    except BaseException as exc:  # noqa: BLE001
        if parts.departure is None:
            return {**result, "error": learner_error(exc)}
    if parts.departure is not None:
        return {**result, "departure": parts.departure}
    return {**result, "blocks": blocks(world), "free": world.kv.num_free_blocks}


PREEMPTION = "preemption"  # the name 131's calls keep their parts under, for `answer`


def preemption_call(impl: ModuleType, config: dict, state: dict, fn: str, rid: str, n: int,
                    lookups: dict[str, list[int]]) -> dict[str, Any]:
    """131: the learner's `fn` ('preempt' or 'allocate_or_preempt') once on request `rid` of `state` (`world_state`:
    the requests, queues, pool and SchedulerOutput a scheduler reached), its KV-cache calls (phase "preemption")
    answered by the grader (kept as PREEMPTION), from the prefix hits `lookups`. What it returned and the state it
    left, or {"error": ...}, or {"departure": ...}; or the call it is paused at, as `step`."""
    c = Config(**config)
    replay = keep(PREEMPTION, Replay(c.num_blocks, c.block_size, c.prefix))
    replay.load(PREEMPTION, lookups)
    kv = FakeKVCacheManager(replay)
    sched = type("Graded", (SchedulerBase,), {"preemption": impl})(kv, c.token_budget, c.max_num_seqs, c.chunked)
    world = SimpleNamespace(sched=sched, kv=kv, requests={})
    replay.scheduler, replay.requests = sched, world.requests
    params: dict[int, SamplingParams] = {}  # shared by the requests of one max_tokens: nothing changes them
    for rec in state["requests"]:
        shared = params.setdefault(rec["max_tokens"], SamplingParams(max_tokens=rec["max_tokens"], ignore_eos=True))
        r = Request(list(rec["prompt"]), shared, request_id=rec["rid"])
        set_fields(r, rec)
        r.generator = torch.Generator()  # a field preemption leaves as it is, not None: replacing it shows
        world.requests[r.request_id] = r
    out = SchedulerOutput()
    replay.apply({key: state[key] for key in ("running", "waiting", "free", "ref_cnt", "plan")}, out)
    return replay.run(lambda: preemption_result(impl, fn, world, rid, n, out, state["running"]))


def preemption_result(impl: ModuleType, fn: str, world: Any, rid: str, n: int, out: SchedulerOutput,
                      running: list[str]) -> dict[str, Any]:
    """`preemption_call`'s result, from the learner's call run here (`running`: the queue it was called on)."""
    replay, sched = world.kv.replay, world.sched
    kept_before = {rid: others(r) for rid, r in world.requests.items()}
    try:
        ret = call_preemption(impl, fn, sched, world.requests[rid], n, out)
    except BaseException as exc:  # noqa: BLE001
        if replay.departure is None:
            return {"error": learner_error(exc)}
    if replay.departure is not None:  # with the queue it was called on: the victims it could choose
        return {"departure": {**replay.departure, "running": running}}
    problem = output_problem(out, fn)
    if problem:
        return problem
    scheduled, preempted = plan_of(out)
    if type(ret) is int and ret in (0, 1):  # 1 == True: the statement's True and False, as the hidden cases read it
        ret = bool(ret)
    return {"returned": ret if isinstance(ret, (bool, int, type(None))) else repr(ret)[:200], "plan": scheduled,
            "preempted": preempted, "consumed": replay.consumed,
            "state": {rid: fields(r) for rid, r in world.requests.items()}, "running": ids(sched.running),
            "waiting": ids(sched.waiting), "after": snapshot(world), "blocks": blocks(world),
            "others changed": {rid: names for rid, r in world.requests.items()
                               if (names := changed(kept_before[rid], others(r)))}}


COMPARED = {*FIELD_NAMES, "request_id"}  # the fields `fields` reports, compared with the reference's


def others(r: Request) -> dict[str, tuple]:
    """A request's fields that neither part changes (its generator, logprobs, sampling_params, ...): each one's
    identity and, for a list, a copy of its items."""
    return {f.name: (id(v), list(v) if isinstance(v, list) else None)
            for f in dataclass_fields(Request) if f.name not in COMPARED for v in [getattr(r, f.name, None)]}


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return sorted(name for name in before if after.get(name) != before[name])


def world_state(scheduler: Any, out: SchedulerOutput) -> dict[str, Any]:
    """What `preemption_call` is called on: the requests in the scheduler's queues, the queues, the pool and `out`
    (in the grader, from the scheduler that calls the learner's preemption)."""
    pool, queued = scheduler.kv.block_pool, [*scheduler.running, *scheduler.waiting]
    return {"requests": [{"rid": r.request_id, "prompt": list(r.prompt_token_ids),
                          "max_tokens": r.sampling_params.max_tokens, **fields(r)} for r in queued],
            "running": ids(scheduler.running), "waiting": ids(scheduler.waiting), "free": pool.num_free_blocks,
            "ref_cnt": [int(x) for x in pool.ref_cnt], "plan": plan(out)}


def call_preemption(preemption: Any, fn: str, scheduler: Any, request: Request, n: int, out: SchedulerOutput) -> Any:
    """What `fn` ('preempt' or 'allocate_or_preempt') of the module `preemption` returns, called on `request`."""
    if fn == "preempt":
        return preemption.preempt(scheduler, request)
    return preemption.allocate_or_preempt(scheduler, request, n, out)


# The calls as a learner reads them (the public replay's messages)


def script(w: Workload) -> str:
    """The workload as code a learner can paste (with the running requests placed by hand)."""
    lines = w.config.setup_text()
    for sp in sorted(w.requests, key=lambda sp: -1 if sp.computed is not None else sp.arrival):
        req = f"Request({list(sp.prompt)}, SamplingParams(max_tokens={sp.max_tokens}, ignore_eos=True), " \
              f"request_id={sp.rid!r})"
        if sp.computed is None:
            lines.append(f"s.add_request({req})  # before engine step {sp.arrival}")
        else:
            lines.append(f"running at the start: {req} with num_computed_tokens={sp.computed}, "
                         f"output_token_ids={list(sp.outputs)}, its blocks allocated")
    lines.append("each step: out = s.schedule(); then, as the engine does: num_computed_tokens += num_new_tokens, "
                 "one token appended when a request completes its pending tokens, s.finish(r, 'length') at "
                 "max_tokens")
    return "\n".join(lines)


def describe(fn: str, *args: Any) -> str | None:
    """A call of this driver as what the learner's code was asked to do (None: the replay shows the call)."""
    if fn == "new_world":
        return script(Workload.from_plain(args[1]))
    if fn == "step":
        return f"engine step {args[1]}: out = s.schedule()"
    if fn == "preemption_call":
        return state_text(*args[:5])
    if fn == "answer" and isinstance(args[1], dict) and "op" in args[1]:
        return f"{describe_call(args[1])} answered as the reference's part answered it"
    return None


def state_text(config: dict, state: dict, fn: str, rid: str, n: int) -> str:
    """131's one call on the state a scheduler reached, as a learner reads it."""
    kv, sched = Config(**config).setup_text()
    lines = [f"{kv} with {state['free']} free blocks, ref_cnt {state['ref_cnt']}",
             f"{sched}; s.running = {state['running']}; s.waiting = {state['waiting']}"]
    lines += [f"{r['rid']}: prompt {r['prompt']}, output_token_ids={r['output_token_ids']}, num_computed_tokens="
              f"{r['num_computed_tokens']}, block_table={r['block_table']}, status={r['status']}" for r in
              state["requests"]]
    lines.append(f"out.scheduled = {state['plan']['scheduled']}, out.preempted = {state['plan']['preempted']}")
    lines.append(f"preempt(s, {rid})" if fn == "preempt" else f"allocate_or_preempt(s, {rid}, {n}, out)")
    return "\n".join(lines)
