"""The scheduler exercises' workloads (129, 131), run in lockstep with the reference: the learner's scheduler (or,
for 131, the reference scheduler calling the learner's preemption) steps beside the reference's, and every step's
plan, request states and block pool, as the public driver (judge/drivers/scheduler.py) reports them, must match
it and keep the invariants. A failing random workload is shrunk to a small one.

Grader side only: the references run here; the learner's code runs in the worker, through the drivers.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, replace
from typing import Any, Callable, Iterator

from framework.kv_cache_manager import blocks_needed
from judge.drivers.scheduler import Config, Spec, Workload, World, facts, plan_of, script, snapshot
from judge.drivers import keep
from judge.drivers.hosts import register_host
from judge.drivers.hosts import RequestHost
from judge.harness import CaseFailure, rng as seeded, shrink
from judge.remote import Driver, learner_failure
from judge.traces import StepLog, add_step, offer, scheduler_log, scheduler_step, with_table
from solutions import scheduler as ref
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
    "running": "self.running stays in admission order: append admitted requests at the end",
    "waiting": "admitted requests leave self.waiting from the head (popleft); the others stay in order",
}


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


def reference_step(want: World, log: StepLog) -> tuple[Plan, list[str], dict[str, Any]]:
    """One step of the reference's world: its plan, preemptions and snapshot right after schedule(); logged."""
    before = snapshot(want)
    out = want.sched.schedule()
    plan, pre = plan_of(out)
    res = {"before": before, "facts": facts(want, out), "after": snapshot(want), "preempted": pre}
    want.update(out.scheduled)
    log.reference.append(scheduler_step(len(log.reference), {**res, "free": want.kv.num_free_blocks}, want.w))
    return plan, pre, res["after"]


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
    drv = Driver(impl, "scheduler")
    text = script(w)
    try:
        if graded == "preemption":  # the world runs here, calling the learner's functions in the worker
            keep(WORLD, world_calling_learner(w, drv))
            drv = Driver(None, "scheduler")
        else:
            drv.new_world(WORLD, w.plain())
    except TypeError as exc:
        return CaseFailure(str(exc), hint="keep `class Scheduler(SchedulerBase):` and write schedule")
    want = World(ref.Scheduler, w)
    history: list[tuple[Plan, list[str]]] = []
    for step in range(1, max_steps + 1):
        if not want.pending(step):
            break
        want.arrive(step)
        label = f"engine step {step}"
        where = text + ("\n" + history_text(history) if history else "")
        exp_plan, exp_pre, exp_after = reference_step(want, log)
        res = drv.step(WORLD, step)
        before = res["before"]
        if "error" in res and "plan" not in res:
            return learner_failure(res["error"], name, where)
        if "plan" in res:
            add_step(log.yours, res, w)
        try:  # the checks' failures are shown with the workload and the schedules so far
            if "problem" in res:
                raise CaseFailure(res["problem"]["message"], hint=res["problem"].get("hint"))
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
# 131: a reference scheduler here calling the learner's preemption in the worker (the hosts of the other parts
# are public: judge/drivers/hosts.py)


PREEMPTION_WORLD = "preemption world"  # the name of the worker's side of a world run here (131)


class LearnerRaised131(Exception):
    """The learner's preemption raised in the worker, called by a scheduler here: its record travels on."""

    def __init__(self, record: dict) -> None:
        super().__init__(str(record.get("message", "")))
        self.record = self._judge_record = record  # the driver reports the learner's own record


class LearnerPreemption:
    """`preemption` of a reference scheduler here (131): the learner's allocate_or_preempt and preempt, called in
    the worker (`judge.drivers.scheduler.preemption_call`) on a copy of the host's requests and queues, whose
    state comes back here. `attach` it to the scheduler's parts once they are built."""

    def __init__(self, drv: Any, c: Config) -> None:
        self.host, self.drv, self.config = RequestHost(c.num_blocks, c.block_size, c.prefix), drv, c
        self.scheduler_cls = type("Scheduler", (ref.Scheduler,), {"preemption": self})

    def attach(self, kv: Any, scheduler: Any) -> None:
        self.host.kv, self.host.scheduler = kv, scheduler
        self.drv.preemption_world(PREEMPTION_WORLD, register_host(self.host), asdict(self.config))

    def _call(self, fn: str, request: Any, n: int = 0, out: Any = None) -> Any:
        h = self.host
        plan = h.plan(out) if out is not None else {"scheduled": [], "preempted": []}
        reply = self.drv.preemption_call(PREEMPTION_WORLD, fn, h.state(), h.name_of(request), n, plan)
        if "error" in reply:
            raise LearnerRaised131(reply["error"])
        h.apply(reply["state"])
        ret, plan = reply["value"]
        if out is not None:
            new = h.output(plan)
            out.scheduled, out.preempted[:] = new.scheduled, new.preempted
        return ret

    def allocate_or_preempt(self, scheduler: Any, request: Any, num_new_tokens: int, out: Any) -> Any:
        return self._call("allocate_or_preempt", request, num_new_tokens, out)

    def preempt(self, scheduler: Any, request: Any) -> None:
        self._call("preempt", request)


def world_calling_learner(w: Workload, drv: Any) -> World:
    """131's workloads: a world here on the reference scheduler (129's answer) and KV-cache manager, whose
    preemption is the learner's (`LearnerPreemption`)."""
    preemption = LearnerPreemption(drv, w.config)
    world = World(preemption.scheduler_cls, w)
    preemption.attach(world.kv, world.sched)
    return world
