"""The scheduler exercises' workloads (129, 131), run in lockstep with the reference: the learner's scheduler (or,
for 131, the reference scheduler calling the learner's preemption) steps beside the reference's, and every step's
plan, request states and block pool, as the public driver (judge/drivers/scheduler.py) reports them, must match
it and keep the invariants. A failing random workload is shrunk to a small one.

Grader side only: the references run here, recorded (`Recorder`) as scripts; the learner's code runs in the worker,
through the drivers, which never call back: each call of the worker's fakes (judge/drivers/fakes.py) pauses the
learner's code until `answered` answers it from the script, one call at a time.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from dataclasses import asdict, replace
from typing import Any, Callable, Iterator

from framework.kv_cache_manager import blocks_needed
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge.drivers.scheduler import (PREEMPTION, Config, Spec, Workload, World, call_preemption, facts, plan_of,
                                    script, snapshot, step_world, world_state)
from judge.drivers.fakes import KV_OPS, departure_message, describe, fields, ids, plan, set_fields
from judge.drivers.fakes import made as made_call
from judge.drivers import rounds
from judge.harness import CaseFailure, rng as seeded, shrink
from judge.remote import Driver, learner_failure
from judge.traces import StepLog, add_step, allocations, offer, scheduler_log, scheduler_step, with_table
from solutions import preemption as ref_preemption, scheduler as ref
from solutions.kv_cache_manager import KVCacheManager
from framework.request import RequestStatus

Plan = list[tuple[str, int]]


# ----------------------------------------------------------------------------------------------------------
# Invariants that hold whatever the reference does


def check_invariants(f: dict[str, Any], after: dict[str, Any], c: Config, label: str) -> None:
    """`f`, `after`: the facts and the snapshot the driver reported right after the learner's schedule()."""
    n_total = sum(x["n"] for x in f["scheduled"])
    if n_total > c.token_budget:
        raise CaseFailure(f"{label}: {n_total} tokens scheduled, more than token_budget={c.token_budget}",
                          hint="the tokens scheduled in one step never exceed the budget: each request gets at "
                               "most the budget left, and a new prompt larger than that gets a chunk (or, without "
                               "chunked prefill, waits)")
    if len(after["running"]) > c.max_num_seqs:
        raise CaseFailure(f"{label}: {len(after['running'])} requests running, more than max_num_seqs={c.max_num_seqs}",
                          hint="admit a waiting request only while len(self.running) < self.max_num_seqs")
    seen = Counter(x["rid"] for x in f["scheduled"])
    dup = [rid for rid, k in seen.items() if k > 1]
    if dup:
        raise CaseFailure(f"{label}: request(s) {dup} scheduled twice in one step")
    for x in f["scheduled"]:
        rid, n = x["rid"], x["n"]
        if n < 1:
            raise CaseFailure(f"{label}: request {rid} scheduled with {n} tokens",
                              hint="schedule a request only when it gets at least one token (stop once the budget "
                                   "is spent)")
        if not x["in_running"]:
            preempted = x["status"] == RequestStatus.WAITING.value and x["num_preemptions"] > 0
            raise CaseFailure(f"{label}: request {rid} is scheduled but not in self.running",
                              hint="it was preempted earlier in this step: skip a request that is no longer in "
                                   "self.running (allocate_or_preempt returns False when the request preempted "
                                   "itself)" if preempted else
                                   "an admitted request moves from self.waiting to the end of self.running")
        if x["num_computed"] + n > x["num_tokens"]:
            raise CaseFailure(f"{label}: request {rid} is scheduled for {n} tokens but has only "
                              f"{x['num_tokens'] - x['num_computed']} left to compute",
                              hint="tokens left = request.num_tokens - request.num_computed_tokens (after prefix "
                                   "hits)")
        if x["blocks"] < blocks_needed(x["num_computed"] + n, c.block_size):
            raise CaseFailure(f"{label}: request {rid} is scheduled for {n} tokens without the blocks to "
                              "hold them", hint="allocate before scheduling: self.allocate_or_preempt for running "
                                                "requests, self.kv.allocate_slots for new ones")
    places = Counter(after["running"] + after["waiting"] + f["finished"])
    lost = [rid for rid in after["requests"] if places[rid] == 0]
    twice = [rid for rid, k in places.items() if k > 1]
    if lost or twice:
        what = f"request(s) {lost} are neither waiting, running nor finished" if lost else \
            f"request(s) {twice} are in more than one of waiting/running/finished"
        raise CaseFailure(f"{label}: {what}", hint="an admitted request is removed from self.waiting "
                                                   "(popleft) and appended to self.running")


def check_blocks(data: dict[str, Any], num_blocks: int, label: str, input: str | None = None) -> None:
    """Reference counts equal the number of requests holding each block; num_free_blocks counts the others."""
    held, ref_cnt = Counter(data["held"]), data["ref_cnt"]
    bad = [b for b in range(num_blocks) if ref_cnt[b] != held.get(b, 0)]
    if bad:
        problem = f"block {bad[0]} has ref_cnt {ref_cnt[bad[0]]} but {held.get(bad[0], 0)} requests hold it"
    elif data["num_free_blocks"] != ref_cnt.count(0):
        problem = "num_free_blocks is not the number of blocks with ref_cnt 0"
    else:
        return
    raise CaseFailure(f"{label}: the block pool is inconsistent: {problem}", input=input,
                      hint="blocks are taken only through self.kv.allocate_slots and returned only through "
                           "self.kv.free(request)")


# ----------------------------------------------------------------------------------------------------------
# Running a workload in lockstep with the reference


FIELD_HINTS = {
    "status": "an admitted request gets status RequestStatus.RUNNING",
    "num_cached_tokens": "an admitted request's num_cached_tokens = len(computed) * block_size (its prefix hits)",
    "num_computed_tokens": "schedule never changes num_computed_tokens itself: allocate_slots adds the prefix hits, "
                           "the engine adds the computed tokens after the forward pass",
    "running": "self.running stays in admission order: append admitted requests at the end, and do not sort it "
               "(iterate over a sorted copy)",
    "waiting": "admitted requests leave self.waiting from the head (popleft); the others stay in order",
}


def field_hint_paths(value: Any, hints: dict[str, str], path: str = "") -> Iterator[tuple[str, None, str]]:
    """The hint of each field named in `hints`, wherever a scheduler driver's answer `value` holds it: what the
    hidden cases say of it, recorded with a public case's answer (judge/edition.py)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        where = f"{path}[{key!r}]"
        if key in hints:
            yield where, None, hints[key]
        else:
            yield from field_hint_paths(inner, hints, where)


def first_difference(exp: dict[str, Any], got: dict[str, Any]) -> tuple[str, Any, Any] | None:
    for key in ("running", "waiting"):
        if exp[key] != got[key]:
            return key, exp[key], got[key]
    for rid, e in exp["requests"].items():
        g = got["requests"].get(rid, {})
        for key, value in e.items():
            if g.get(key) != value:
                return f"{rid}.{key}", value, g.get(key)
    if exp["free blocks"] != got["free blocks"]:
        return "free blocks", exp["free blocks"], got["free blocks"]
    return None


def history_text(history: list[tuple[Plan, list[str]]]) -> str:
    shown = history[-6:]
    first = len(history) - len(shown) + 1
    lines = [f"  engine step {first + i}: {plan}" + (f", preempted {pre}" if pre else "") for i, (plan, pre) in
             enumerate(shown)]
    return "schedules of the engine steps before (yours agreed):\n" + "\n".join(lines) if lines else ""


HintFn = Callable[[dict[str, Any], Config, Plan, Plan, list[str], list[str]], str]


WORLD = "world"  # the name the scheduler driver keeps a case's world under (one world at a time)


def reference_step(want: World, rec: Recorder, log: StepLog) -> tuple[Plan, list[str], dict[str, Any], dict]:
    """One step of the reference's world: its plan, preemptions and snapshot right after schedule(), and the
    scripts of its parts' calls during schedule() and the update after it; logged for the trace."""
    before = snapshot(want)
    rec.begin()
    out = want.sched.schedule()
    plan, pre = plan_of(out)
    res = {"before": before, "facts": facts(want, out), "after": snapshot(want), "preempted": pre}
    scheduled = rec.script()
    want.update(out.scheduled)
    log.reference.append(scheduler_step(len(log.reference), {**res, "free": want.kv.num_free_blocks}, want.w))
    return plan, pre, res["after"], {"schedule": scheduled, "update": rec.script()}


def run_lockstep(w: Workload, impl, graded: str, hint: HintFn, field_hints: dict[str, str] = FIELD_HINTS,
                 name: str = "Scheduler.schedule", max_steps: int = 400) -> CaseFailure | None:
    """None if the learner's scheduler (in the worker, `graded` = "schedule" or "preemption") does what the
    reference does on `w` at every step, else the failure. Both runs' steps are offered as traces (--trace)."""
    log = scheduler_log(w)
    try:
        return _run_lockstep(w, impl, graded, hint, field_hints, name, max_steps, log)
    finally:
        offer(log)


def _run_lockstep(w: Workload, impl, graded: str, hint: HintFn, field_hints: dict[str, str], name: str,
                  max_steps: int, log: StepLog) -> CaseFailure | None:
    text = script(w)
    want, rec = reference_world(w)
    try:
        step_of = learner_world(w, impl, graded, rec.script())
    except TypeError as exc:
        return CaseFailure(str(exc), hint="keep `class Scheduler(SchedulerBase):` and write schedule")
    history: list[tuple[Plan, list[str]]] = []
    for step in range(1, max_steps + 1):
        if not want.pending(step):
            break
        want.arrive(step)
        label = f"engine step {step}"
        where = text + ("\n" + history_text(history) if history else "")
        exp_plan, exp_pre, exp_after, recorded = reference_step(want, rec, log)
        scheduled = recorded["schedule"]
        try:
            res = step_of(step, recorded)
        except CaseFailure as f:  # 131: the learner's preemption, called by the reference here, left out unusable
            f.input = where
            return f
        before = res["before"]
        if "error" in res and "plan" not in res:
            return learner_failure(res["error"], name, where)
        if "plan" in res:
            add_step(log.yours, res, w)
        try:  # the checks' failures are shown with the workload and the schedules so far
            if "departure" in res and "plan" not in res:
                if graded == "schedule":
                    add_step(log.yours, res, w, scheduled["calls"])
                raise departure_failure(res["departure"], label, before, w.config, scheduled["calls"],
                                        (exp_plan, exp_pre), hint, graded)
            if "problem" in res:
                raise CaseFailure(res["problem"], hint=res.get("hint"))
            check_invariants(res["facts"], res["after"], w.config, label)
            plan, pre = [tuple(x) for x in res["plan"]], res["preempted"]
            if (plan, pre) != (exp_plan, exp_pre):
                field = "scheduled (request_id, num_new_tokens)" if plan != exp_plan else "preempted"
                raise CaseFailure(f"{label}: wrong {'schedule' if plan != exp_plan else 'preempted requests'}",
                                  field=field, expected=exp_plan if plan != exp_plan else exp_pre,
                                  got=plan if plan != exp_plan else pre,
                                  hint=hint(before, w.config, exp_plan, plan, exp_pre, pre) or None)
            diff = first_difference(exp_after, res["after"])
            if diff:
                key, e, g = diff
                raise CaseFailure(f"{label}: after schedule(), {key} differs", field=key, expected=e, got=g,
                                  hint=field_hints.get(key.rsplit(".", 1)[-1], None)
                                  or hint(before, w.config, exp_plan, plan, exp_pre, pre) or None)
            if "error" in res:
                return learner_failure(res["error"], name, where)
            if "departure" in res:
                raise departure_failure(res["departure"], f"{label}, after schedule()", before, w.config, [],
                                        (exp_plan, exp_pre), hint, graded)
            check_blocks(res["blocks"], w.config.num_blocks, label)
        except CaseFailure as f:
            f.input = f.input or where
            return with_table(f, log, step - 1) if len(log.yours) == step else f  # no table without your plan
        history.append((plan, pre))
    if want.pending(max_steps + 1):
        raise AssertionError("course bug: the reference did not finish the workload")
    if history and res["free"] != w.config.num_blocks:
        return CaseFailure(f"at the end {res['free']} of {w.config.num_blocks} blocks are free",
                           input=text, hint="every block returns to the pool once every request has finished")
    return None


def learner_world(w: Workload, impl, graded: str, setup: dict) -> Callable[[int, dict], dict]:
    """The learner's world of `w`: a function that runs its step (the step number, the scripts of the reference's
    calls) and returns the driver's record. 129: in the worker (`setup`: the script that places the running
    requests); 131: here, on the reference scheduler calling the learner's preemption in the worker."""
    drv = Driver(impl, "scheduler")
    if graded == "schedule":
        answered(drv, WORLD, drv.new_world(WORLD, w.plain()), {"setup": setup["calls"]})
        return lambda step, recorded: answered(drv, WORLD, drv.step(WORLD, step, recorded["schedule"]["lookups"]),
                                               {phase: recorded[phase]["calls"] for phase in ("schedule", "update")})
    preemption = WorkerPreemption(drv, w.config)
    c = w.config
    world = World(preemption.scheduler_cls, w, KVCacheManager(c.num_blocks, c.block_size, c.prefix))
    return lambda step, recorded: step_world(world, step, preemption)


def answered(drv: Driver, name: str, reply: Any, scripts: dict[str, list[dict]]) -> Any:
    """The driver's result once each paused call is answered from the reference's calls of its phase
    (judge/drivers/rounds.py `answered`)."""
    return rounds.answered(drv, name, reply, scripts, departure_message)


def learner_preemption(drv: Driver, config: dict, state: dict, fn: str, rid: str, n: int, recorded: dict) -> dict:
    """131: the driver's result of the learner's `fn` on `state` (`preemption_call`), its KV-cache calls answered
    from the script `recorded` of the reference's."""
    reply = drv.preemption_call(config, state, fn, rid, n, recorded["lookups"])
    return answered(drv, PREEMPTION, reply, {PREEMPTION: recorded["calls"]})


def workload_candidates(w: Workload) -> Iterator[Workload]:
    """Smaller variants: fewer requests, shorter prompts, fewer output tokens, earlier arrivals."""
    reqs = w.requests
    arriving = [i for i, s in enumerate(reqs) if s.computed is None]
    for i in arriving:
        yield replace(w, requests=reqs[:i] + reqs[i + 1:])
    for i in arriving:
        s = reqs[i]
        smaller = []
        if len(s.prompt) > 1:
            smaller += [replace(s, prompt=s.prompt[: len(s.prompt) // 2]), replace(s, prompt=s.prompt[:-1])]
        if s.max_tokens > 1:
            smaller += [replace(s, max_tokens=s.max_tokens // 2), replace(s, max_tokens=s.max_tokens - 1)]
        if s.arrival > 1:
            smaller.append(replace(s, arrival=s.arrival - 1))
        for t in smaller:
            yield replace(w, requests=reqs[:i] + (t,) + reqs[i + 1:])


def check_workloads(workloads: list[Workload], impl, graded: str, hint: HintFn,
                    field_hints: dict[str, str] = FIELD_HINTS, name: str = "Scheduler.schedule") -> None:
    def run(v: Workload) -> CaseFailure | None:
        return run_lockstep(v, impl, graded, hint, field_hints, name)

    for w in workloads:
        failure = run(w)
        if failure is None:
            continue
        if failure.kind != "fail" or any(s.computed is not None for s in w.requests):
            raise failure  # not implemented / an exception / a hand-built state: shown as is
        small = shrink(w, lambda v: v.valid() and run(v) is not None, workload_candidates, max_calls=300)
        raise run(small) or failure


# ----------------------------------------------------------------------------------------------------------
# Seeded random workloads


def random_workloads(seed: int, count: int, configs: Callable[[random.Random], Config], n_req: tuple[int, int],
                     prompt_len: tuple[int, int], max_tokens: tuple[int, int], last_arrival: int = 8,
                     shared_prefixes: bool = False) -> list[Workload]:
    rng = seeded(seed)
    out = []
    while len(out) < count:
        c = configs(rng)
        prefixes = [tuple(rng.randrange(1, 60) for _ in range(rng.randint(c.block_size, 3 * c.block_size + 2)))
                    for _ in range(2)]
        specs = []
        for i in range(rng.randint(*n_req)):
            prompt = tuple(rng.randrange(1, 60) for _ in range(rng.randint(*prompt_len)))
            if shared_prefixes and rng.random() < 0.75:
                prompt = rng.choice(prefixes) + prompt[: rng.randint(0, len(prompt))]
            mt = rng.randint(*max_tokens)
            limit = c.capacity if c.chunked else min(c.capacity, c.token_budget)
            prompt = prompt[: max(1, limit - mt)]
            specs.append(Spec(f"r{i}", prompt, min(mt, limit - len(prompt)), rng.randint(1, last_arrival)))
        w = Workload(c, tuple(specs))
        if w.valid():
            out.append(w)
    return out


def spec_running(rid: str, n_prompt: int, computed: int, outputs: int = 0, max_tokens: int = 4,
                 first: int = 1) -> Spec:
    return Spec(rid, tuple(range(first, first + n_prompt)), max_tokens, computed=computed,
                outputs=tuple(range(900, 900 + outputs)))


def spec_new(rid: str, n_prompt: int, max_tokens: int = 3, arrival: int = 1, first: int = 30) -> Spec:
    return Spec(rid, tuple(range(first, first + n_prompt)), max_tokens, arrival)


# ----------------------------------------------------------------------------------------------------------
# Scripts: the reference parts' calls, recorded for the worker's fakes (judge/drivers/fakes.py)


class Recorder:
    """Records the state-changing calls that the code it watches makes of the reference KV-cache manager `kv` (and
    of `RecordedPreemption`), each with what the part read, returned and changed (the requests it changed, as
    `fields`; the queues; the pool; `out`), as the script the worker's fakes replay. The parts' calls of each other
    are theirs, not recorded. The world it watches sets `scheduler` and `requests`."""

    def __init__(self, kv: Any) -> None:
        self.kv, self.scheduler, self.requests = kv, None, {}
        self.calls: list[dict] = []
        self.start: dict[str, list[int]] = {}
        self.depth = 0
        allocate, free = kv.allocate_slots, kv.free
        kv.allocate_slots = lambda request, n, computed=(): self.around(
            "allocate_slots", lambda: allocate(request, n, computed), request, [n, [int(b) for b in computed]])
        kv.free = lambda request: self.around("free", lambda: free(request), request, [])

    def around(self, op: str, real: Callable[[], Any], request: Any, args: list, out: Any = None) -> Any:
        if self.depth:
            return real()
        made = made_call(op, self.scheduler, request, args, out)
        before = self.state()
        self.depth += 1
        try:
            value = real()
        finally:
            self.depth -= 1
        if op == "allocate_slots" and not value:
            return value  # it changed nothing: the worker answers it from the state
        after = self.state()
        changed = {rid: {k: v for k, v in f.items() if before["requests"].get(rid, {}).get(k) != v}
                   for rid, f in after["requests"].items()}
        effect: dict[str, Any] = {"requests": {rid: f for rid, f in changed.items() if f}}  # what the call changed
        effect.update({k: after[k] for k in ("running", "waiting") if after[k] != before[k]})
        if after["pool"] != before["pool"]:
            effect["free"], effect["ref_cnt"] = after["pool"]
        if out is not None:
            effect["plan"] = plan(out)
        if self.kv.prefix_cache is not None:
            effect["lookups"] = self.lookups()
        self.calls.append({**made, "value": value, "effect": effect})
        return value

    def state(self) -> dict[str, Any]:
        s = self.scheduler
        return {"requests": {rid: fields(r) for rid, r in self.requests.items()},
                "running": ids(s.running) if s else [], "waiting": ids(s.waiting) if s else [],
                "pool": [self.kv.num_free_blocks, [int(c) for c in self.kv.block_pool.ref_cnt]]}

    def lookups(self) -> dict[str, list[int]]:
        """The prefix hits of each request in the queues, as the KV-cache manager is now."""
        s = self.scheduler
        return {r.request_id: list(self.kv.get_computed_blocks(r)) for r in ([*s.waiting, *s.running] if s else ())}

    def begin(self) -> None:
        self.calls, self.start = [], self.lookups() if self.kv.prefix_cache is not None else {}

    def script(self) -> dict[str, Any]:
        """The calls recorded since `begin`, with the prefix hits they started from; the next script begins."""
        recorded = {"calls": self.calls, "lookups": self.start}
        self.begin()
        return recorded


class RecordedPreemption:
    """The reference preemption (131's answer) as a scheduler's `preemption`, recorded."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def allocate_or_preempt(self, scheduler: Any, request: Any, num_new_tokens: int, out: Any) -> bool:
        return self.rec.around("allocate_or_preempt", lambda: ref_preemption.allocate_or_preempt(
            scheduler, request, num_new_tokens, out), request, [num_new_tokens], out)

    def preempt(self, scheduler: Any, request: Any) -> None:
        self.rec.around("preempt", lambda: ref_preemption.preempt(scheduler, request), request, [])


def reference_world(w: Workload) -> tuple[World, Recorder]:
    """The reference's world of `w`, recorded: the script of its placements is the recorder's first."""
    c = w.config
    rec = Recorder(KVCacheManager(c.num_blocks, c.block_size, c.prefix))
    rec.begin()
    cls = type("Scheduler", (ref.Scheduler,), {"preemption": RecordedPreemption(rec)})
    return World(cls, w, rec.kv, rec), rec


def departure_failure(dep: dict, label: str, before: dict, c: Config, calls: list[dict],
                      expected: tuple[Plan, list[str]], hint: HintFn, graded: str = "schedule") -> CaseFailure:
    """The learner's code made a call the script does not hold (`dep`, after `dep["consumed"]` of the reference's
    `calls` matched): the step, the call made and the call expected, with a hint (129: that of the plan it was
    making; 131: of the victim)."""
    made, want = dep["made"], dep["expected"]
    broken = attempted_failure(dep, before, c, calls, label) if graded == "schedule" else None
    if broken is not None:
        return broken
    tip = victim_hint(made, want, dep.get("running", before["running"])) if graded == "preemption" else \
        guess_hint(dep, before, c, calls, expected, hint)
    message = f"{label}: {departure_message(made, want)}{rounds.handling(dep)}"
    if want is None:
        return CaseFailure(message, field="call", expected="no call", got=describe(made), hint=tip)
    key = next((k for k in want["reads"] if want["reads"][k] != made["reads"].get(k)), None)
    if want["op"] == made["op"] and want["args"] == made["args"] and key:
        tip = FIELD_HINTS.get(key, tip) if graded == "schedule" else tip
        return CaseFailure(message, field=key, expected=want["reads"][key], got=made["reads"][key], hint=tip)
    return CaseFailure(message, field="call", expected=describe(want), got=describe(made), hint=tip)


def attempted(dep: dict, calls: list[dict]) -> Plan:
    """129: the tokens the learner's schedule was allocating when it departed: the allocations that matched the
    script, then the one that did not."""
    return [(x["args"][0], x["args"][1]) for x in allocations(dep, calls)]


def guess_hint(dep: dict, before: dict, c: Config, calls: list[dict], expected: tuple[Plan, list[str]],
               hint: HintFn) -> str | None:
    """The hint of the plan the learner's code was making: what it was allocating, then the rest of the
    reference's plan."""
    if appended_first(dep["made"], dep["expected"]):
        return ("call self.allocate_or_preempt(request, n, out) before appending the request to out.scheduled: out "
                "holds what is scheduled so far, and the request is scheduled once the call returned True")
    exp_plan, exp_pre = expected
    got = attempted(dep, calls)
    got += [x for x in exp_plan if x[0] not in {rid for rid, _ in got}]
    return hint(before, c, exp_plan, got, exp_pre, exp_pre if dep["consumed"] else []) or None


def appended_first(made: Any, want: dict | None) -> bool:
    """129: the request was in `out.scheduled` already when the learner's code asked allocate_or_preempt for it."""
    try:
        same = want is not None and made["op"] == want["op"] == "allocate_or_preempt" and made["args"][:2] == \
            want["args"][:2]
        return same and made["args"][:2] in made["args"][2]["scheduled"] and \
            made["args"][:2] not in want["args"][2]["scheduled"]
    except (KeyError, TypeError, IndexError):  # a call the learner's code posted itself
        return False


def attempted_failure(dep: dict, before: dict, c: Config, calls: list[dict], label: str) -> CaseFailure | None:
    """129: the rule the call the learner's schedule departed with breaks: a request preempted earlier in the step
    given tokens, the budget, max_num_seqs."""
    made = dep["made"]
    if made["op"] == "allocate_or_preempt" and made["args"][0] not in made["reads"]["running"]:
        return CaseFailure(f"{label}: your code calls {describe(made)} for a request that is not in self.running",
                           hint="it was preempted earlier in this step: skip a request that is no longer in "
                                "self.running (allocate_or_preempt returns False when the request preempted itself)")
    got = attempted(dep, calls)
    total = sum(n for _, n in got)
    if got and got[-1][0] == made["args"][0] and total > c.token_budget:
        return CaseFailure(f"{label}: your code allocates {total} tokens in this step, more than token_budget="
                           f"{c.token_budget}", hint="the tokens scheduled in one step never exceed the budget: each "
                           "request gets at most the budget left, and a new prompt larger than that gets a chunk (or, "
                           "without chunked prefill, waits)")
    admitted = [rid for rid, _ in got if rid in before["waiting"]]
    running = len(before["running"]) + len(admitted)
    if made["op"] == "allocate_slots" and running > c.max_num_seqs:
        return CaseFailure(f"{label}: your code admits {admitted[-1]}, which makes {running} requests running, more "
                           f"than max_num_seqs={c.max_num_seqs}",
                           hint="admit a waiting request only while len(self.running) < self.max_num_seqs")
    return None


def victim_hint(made: dict, want: dict | None, order: list[str]) -> str:
    """131: what the learner's preemption did instead of the reference's KV-cache call `want` (`order`: the
    running requests it was called with)."""
    rid = made["args"][0]
    if want is None:
        return ("stop once allocate_slots succeeds, or once the request was its own victim (then return False)"
                if made["op"] == "allocate_slots" else "preempt one victim at a time, until allocate_slots succeeds")
    if made["op"] == "free" and want["op"] == "allocate_slots":
        return "call scheduler.kv.allocate_slots(request, num_new_tokens) first: preempt only when it fails"
    if made["op"] == want["op"] == "free" and rid != want["args"][0]:
        older = rid in order and want["args"][0] in order and order.index(rid) < order.index(want["args"][0])
        return "the victim is the most recently admitted running request, scheduler.running[-1]" + \
            (", not the oldest" if older else "")
    if made["op"] == "free":
        return "free the victim's blocks with scheduler.kv.free(request) before changing the request"
    return "allocate_or_preempt asks scheduler.kv.allocate_slots(request, num_new_tokens) for the request's tokens"


# ----------------------------------------------------------------------------------------------------------
# 131: a reference scheduler here calling the learner's preemption in the worker, with the script of the reference
# KV-cache manager's calls for the state it reached


class LearnerRaised131(Exception):
    """The learner's preemption raised (or departed from the script) in the worker, called by a scheduler here: its
    record travels on."""

    def __init__(self, record: dict) -> None:
        super().__init__(str(record.get("message", "")))
        self.record = self._judge_record = record  # the driver reports the learner's own record


STATUSES = {s.value for s in RequestStatus}


class WorkerPreemption:
    """`preemption` of a reference scheduler here (131): the learner's allocate_or_preempt and preempt, called in
    the worker (`judge.drivers.scheduler.preemption_call`) on the state the scheduler reached, with the script of
    the reference's KV-cache calls from that state (`reference_script`); the state the learner's code left comes
    back here. `departure`: the first call of theirs the script did not hold."""

    def __init__(self, drv: Any, c: Config) -> None:
        self.drv, self.config, self.departure = drv, asdict(c), None
        self.scheduler_cls = type("Scheduler", (ref.Scheduler,), {"preemption": self})

    def _call(self, fn: str, scheduler: Any, request: Any, n: int = 0, out: Any = None) -> Any:
        out = SchedulerOutput() if out is None else out
        recorded = reference_script(fn, scheduler, request, n, out)
        reply = learner_preemption(self.drv, self.config, world_state(scheduler, out), fn, request.request_id, n,
                                   recorded)
        if "departure" in reply:
            self.departure = reply["departure"]
        if "error" in reply or "departure" in reply:
            raise LearnerRaised131(reply.get("error") or reply["departure"])
        if "problem" in reply:
            raise CaseFailure(reply["problem"], hint=reply.get("hint"))
        odd = {rid: v["status"] for rid, v in reply["state"].items() if v["status"] not in STATUSES}
        if odd:  # a status the scheduler here cannot take: the string "waiting"
            rid, status = next(iter(odd.items()))
            raise CaseFailure(f"after {fn}, the status of request {rid!r} is {status}, not a RequestStatus",
                              hint="a preempted request's status is RequestStatus.WAITING")
        adopt(scheduler, recorded["calls"][:reply["consumed"]], reply, out)
        return reply["returned"]

    def allocate_or_preempt(self, scheduler: Any, request: Any, num_new_tokens: int, out: Any) -> Any:
        return self._call("allocate_or_preempt", scheduler, request, num_new_tokens, out)

    def preempt(self, scheduler: Any, request: Any) -> None:
        self._call("preempt", scheduler, request)


def reference_script(fn: str, scheduler: Any, request: Any, n: int, out: Any) -> dict[str, Any]:
    """The script of the KV-cache calls the reference `fn` makes from the scheduler's state: run on a copy (of the
    requests, their fields only; of the KV-cache manager, whose per-request records then name the copies)."""
    twins = {id(r): _twin(r) for r in [*scheduler.running, *scheduler.waiting]}
    kv = copy.deepcopy(scheduler.kv, dict(twins))
    for op in KV_OPS:  # a recorded manager's copy: its own methods
        vars(kv).pop(op, None)
    twin = SchedulerBase(kv, scheduler.token_budget, scheduler.max_num_seqs, scheduler.enable_chunked_prefill)
    twin.preemption = ref_preemption
    twin.running = [twins[id(r)] for r in scheduler.running]
    twin.waiting.extend(twins[id(r)] for r in scheduler.waiting)
    twin_out = SchedulerOutput([ScheduledRequest(twins[id(s.request)], s.num_new_tokens) for s in out.scheduled],
                               [twins[id(r)] for r in out.preempted])
    rec = Recorder(kv)
    rec.scheduler, rec.requests = twin, {r.request_id: r for r in twins.values()}
    rec.begin()
    call_preemption(ref_preemption, fn, twin, twins[id(request)], n, twin_out)
    return rec.script()


def _twin(r: Any) -> Any:
    twin = copy.copy(r)
    twin.block_table, twin.output_token_ids = list(r.block_table), list(r.output_token_ids)
    return twin


def adopt(scheduler: Any, calls: list[dict], reply: dict, out: Any) -> None:
    """Make the scheduler's world what the learner's code left: the KV-cache calls it made (the script's first
    `calls`, each on the state it read), then the requests, queues and `out` it answered."""
    requests = {r.request_id: r for r in [*scheduler.running, *scheduler.waiting]}
    for call in calls:
        r = requests[call["args"][0]]
        r.block_table = list(call["reads"]["block_table"])
        r.num_computed_tokens = call["reads"].get("num_computed_tokens", r.num_computed_tokens)
        getattr(scheduler.kv, call["op"])(r, *call["args"][1:])
    for rid, values in reply["state"].items():
        set_fields(requests[rid], values)
    scheduler.running[:] = [requests[rid] for rid in reply["running"]]
    scheduler.waiting.clear()
    scheduler.waiting.extend(requests[rid] for rid in reply["waiting"])
    kept = {(id(s.request), s.num_new_tokens): s for s in out.scheduled}
    out.scheduled = [kept.get((id(requests[rid]), k)) or ScheduledRequest(requests[rid], k) for rid, k in reply["plan"]]
    out.preempted[:] = [requests[rid] for rid in reply["preempted"]]
