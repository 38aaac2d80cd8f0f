"""Hidden tests of exercise 129 (Scheduler.schedule); the workload machinery is shared with exercise 131.

The learner's `schedule` runs with the REFERENCE `allocate_or_preempt` and `preempt` (so 129 is graded whatever
the learner did in 131). Every workload runs twice in lockstep, on the reference `Scheduler` and on the learner's,
driven by a fake model loop: after each `schedule()` every scheduled request's `num_computed_tokens` advances by
its `num_new_tokens`, a request that completed its pending tokens gets a dummy output token, and a request with
`max_tokens` tokens is retired with `Scheduler.finish`. After every step the checker compares the learner's
schedule (request ids and `num_new_tokens`, preempted ids) and the queues and request states with the
reference's, and checks invariants that do not depend on the reference: the token budget, `max_num_seqs`, no
request lost or duplicated, blocks for every scheduled token, consistent reference counts, every block free at
the end.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from judge.harness import CaseFailure, Cases, learner_call, shrink, short
from framework.scheduler import SchedulerBase
from solutions import scheduler as ref
from solutions.kv_cache_manager import KVCacheManager, blocks_needed
from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams

CASES = Cases()

Plan = list[tuple[str, int]]


# ----------------------------------------------------------------------------------------------------------
# Workloads: a configuration, requests already running at the start (hand-built states) and arrivals


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
        for s in self.requests:
            need = len(s.prompt) + s.max_tokens
            if not s.prompt or s.max_tokens < 1 or need > c.capacity or (not c.chunked and need > c.token_budget):
                return False
        return True


def make_request(s: Spec) -> Request:
    return Request(list(s.prompt), SamplingParams(max_tokens=s.max_tokens, ignore_eos=True), request_id=s.rid)


def dummy_token(r: Request) -> int:
    """The fake model's 'sampled' token: deterministic, different per request and position."""
    return 500 + 7 * len(r.output_token_ids) + sum(r.prompt_token_ids) % 89


def script(w: Workload) -> str:
    """The workload as code a learner can paste (with the running requests placed by hand)."""
    c = w.config
    lines = [f"kv = KVCacheManager(num_blocks={c.num_blocks}, block_size={c.block_size}, "
             f"enable_prefix_caching={c.prefix})",
             f"s = Scheduler(kv, token_budget={c.token_budget}, max_num_seqs={c.max_num_seqs}, "
             f"enable_chunked_prefill={c.chunked})"]
    for sp in sorted(w.requests, key=lambda sp: -1 if sp.computed is not None else sp.arrival):
        req = f"Request({list(sp.prompt)}, SamplingParams(max_tokens={sp.max_tokens}, ignore_eos=True), " \
              f"request_id={sp.rid!r})"
        if sp.computed is None:
            lines.append(f"s.add_request({req})  # before step {sp.arrival}")
        else:
            lines.append(f"running at the start: {req} with num_computed_tokens={sp.computed}, "
                         f"output_token_ids={list(sp.outputs)}, its blocks allocated")
    lines.append("each step: out = s.schedule(); then, as the engine does: num_computed_tokens += num_new_tokens, "
                 "one token appended when a request completes its pending tokens, s.finish(r, 'length') at "
                 "max_tokens")
    return "\n".join(lines)


class World:
    """One scheduler (of class `cls`) and its requests, driven by the fake model loop."""

    def __init__(self, cls: type, w: Workload) -> None:
        c = w.config
        self.w = w
        self.kv = KVCacheManager(c.num_blocks, c.block_size, c.prefix)
        self.sched = cls(self.kv, c.token_budget, c.max_num_seqs, c.chunked)
        self.requests: dict[str, Request] = {}
        for sp in w.requests:
            if sp.computed is not None:
                self.place_running(sp)

    def place_running(self, sp: Spec) -> None:
        r = make_request(sp)
        r.output_token_ids = list(sp.outputs)
        if not self.kv.allocate_slots(r, sp.computed):
            raise AssertionError(f"course bug: no blocks to place {sp.rid}")
        r.num_computed_tokens, r.status = sp.computed, RequestStatus.RUNNING
        self.sched.running.append(r)
        self.requests[sp.rid] = r

    def arrive(self, step: int) -> None:
        for sp in self.w.requests:
            if sp.computed is None and sp.arrival == step:
                r = make_request(sp)
                ref.Scheduler.add_request(self.sched, r)
                self.requests[sp.rid] = r

    def pending(self, step: int) -> bool:
        """Whether anything is left to do at or after `step`."""
        return ref.Scheduler.has_unfinished_requests(self.sched) or any(
            sp.computed is None and sp.arrival >= step for sp in self.w.requests)

    def update(self, scheduled: list) -> None:
        for s in scheduled:
            r, n = s.request, s.num_new_tokens
            completes = r.num_computed_tokens + n == r.num_tokens
            r.num_computed_tokens += n
            if completes:
                r.output_token_ids.append(dummy_token(r))
                if len(r.output_token_ids) >= r.sampling_params.max_tokens:
                    ref.Scheduler.finish(self.sched, r, "length")


def snapshot(world: World) -> dict[str, Any]:
    s = world.sched
    return {
        "running": [r.request_id for r in s.running],
        "waiting": [r.request_id for r in s.waiting],
        "requests": {rid: {"status": r.status.value, "num_computed_tokens": r.num_computed_tokens,
                           "num_cached_tokens": r.num_cached_tokens, "blocks held": len(r.block_table),
                           "num_preemptions": r.num_preemptions, "output_token_ids": list(r.output_token_ids),
                           "num_tokens": r.num_tokens}
                     for rid, r in world.requests.items()},
        "free blocks": world.kv.num_free_blocks,
    }


# ----------------------------------------------------------------------------------------------------------
# Calling learner code and reading what it returned


def read_output(out: Any) -> tuple[Plan, list[str]]:
    """The learner's SchedulerOutput as [(request_id, num_new_tokens)] and the preempted request ids."""
    if out is None:
        raise CaseFailure("schedule returned None", hint="return the SchedulerOutput you filled in")
    scheduled, preempted = getattr(out, "scheduled", None), getattr(out, "preempted", None)
    if not isinstance(scheduled, list) or not isinstance(preempted, list):
        raise CaseFailure(f"schedule returned {short(out)}; it must return a SchedulerOutput",
                          hint="out = SchedulerOutput(); out.scheduled.append(ScheduledRequest(request, n)); "
                               "return out")
    plan = []
    for s in scheduled:
        r, n = getattr(s, "request", None), getattr(s, "num_new_tokens", None)
        if not isinstance(r, Request) or not isinstance(n, int) or isinstance(n, bool):
            raise CaseFailure(f"out.scheduled holds {short(s)}; each entry must be ScheduledRequest(request, "
                              "num_new_tokens) with an int number of tokens")
        plan.append((r.request_id, n))
    for r in preempted:
        if not isinstance(r, Request):
            raise CaseFailure(f"out.preempted holds {short(r)}; it must hold the preempted Request objects")
    return plan, [r.request_id for r in preempted]


# ----------------------------------------------------------------------------------------------------------
# Invariants that hold whatever the reference does


def check_invariants(world: World, out: Any, label: str) -> None:
    s, kv, c = world.sched, world.kv, world.w.config
    n_total = sum(x.num_new_tokens for x in out.scheduled)
    if n_total > c.token_budget:
        raise CaseFailure(f"{label}: {n_total} tokens scheduled, more than token_budget={c.token_budget}",
                          hint="the tokens scheduled in one step never exceed the budget: each request gets at "
                               "most the budget left, and a new prompt larger than that gets a chunk (or, without "
                               "chunked prefill, waits)")
    if len(s.running) > c.max_num_seqs:
        raise CaseFailure(f"{label}: {len(s.running)} requests running, more than max_num_seqs={c.max_num_seqs}",
                          hint="admit a waiting request only while len(self.running) < self.max_num_seqs")
    seen = Counter(x.request.request_id for x in out.scheduled)
    dup = [rid for rid, k in seen.items() if k > 1]
    if dup:
        raise CaseFailure(f"{label}: request(s) {dup} scheduled twice in one step")
    running = {id(r) for r in s.running}
    for x in out.scheduled:
        r, n = x.request, x.num_new_tokens
        if n < 1:
            raise CaseFailure(f"{label}: request {r.request_id} scheduled with {n} tokens",
                              hint="schedule a request only when it gets at least one token (stop once the budget "
                                   "is spent)")
        if id(r) not in running:
            preempted = r.status == RequestStatus.WAITING and r.num_preemptions > 0
            raise CaseFailure(f"{label}: request {r.request_id} is scheduled but not in self.running",
                              hint="it was preempted earlier in this step: skip a request that is no longer in "
                                   "self.running (allocate_or_preempt returns False when the request preempted "
                                   "itself)" if preempted else
                                   "an admitted request moves from self.waiting to the end of self.running")
        if r.num_computed_tokens + n > r.num_tokens:
            raise CaseFailure(f"{label}: request {r.request_id} is scheduled for {n} tokens but has only "
                              f"{r.num_tokens - r.num_computed_tokens} left to compute",
                              hint="tokens left = request.num_tokens - request.num_computed_tokens (after prefix "
                                   "hits)")
        if len(r.block_table) < blocks_needed(r.num_computed_tokens + n, kv.block_size):
            raise CaseFailure(f"{label}: request {r.request_id} is scheduled for {n} tokens without the blocks to "
                              "hold them", hint="allocate before scheduling: self.allocate_or_preempt for running "
                                                "requests, self.kv.allocate_slots for new ones")
    places = Counter([r.request_id for r in s.running] + [r.request_id for r in s.waiting]
                     + [rid for rid, r in world.requests.items() if r.is_finished])
    lost = [rid for rid in world.requests if places[rid] == 0]
    twice = [rid for rid, k in places.items() if k > 1]
    if lost or twice:
        what = f"request(s) {lost} are neither waiting, running nor finished" if lost else \
            f"request(s) {twice} are in more than one of waiting/running/finished"
        raise CaseFailure(f"{label}: {what}", hint="an admitted request is removed from self.waiting "
                                                   "(popleft) and appended to self.running")


def check_blocks(world: World, label: str) -> None:
    """Reference counts equal the number of requests holding each block; the free queue holds the others."""
    pool = world.kv.block_pool
    held = Counter(b for r in world.requests.values() for b in r.block_table)
    bad = [b for b in range(pool.num_blocks) if pool.ref_cnt[b] != held.get(b, 0)]
    if bad or set(pool.free_queue) != {b for b in range(pool.num_blocks) if pool.ref_cnt[b] == 0}:
        b = bad[0] if bad else None
        raise CaseFailure(f"{label}: the block pool is inconsistent"
                          + (f": block {b} has ref_cnt {pool.ref_cnt[b]} but {held.get(b, 0)} requests hold it"
                             if bad else ": the free queue is not the set of blocks with ref_cnt 0"),
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
    lines = [f"  step {first + i}: {plan}" + (f", preempted {pre}" if pre else "") for i, (plan, pre) in
             enumerate(shown)]
    return "schedules of the steps before (yours agreed):\n" + "\n".join(lines) if lines else ""


HintFn = Callable[[dict[str, Any], Config, Plan, Plan, list[str], list[str]], str]


def run_lockstep(w: Workload, learner_cls: type, hint: HintFn, field_hints: dict[str, str] = FIELD_HINTS,
                 name: str = "Scheduler.schedule", max_steps: int = 400) -> CaseFailure | None:
    """None if the learner's scheduler does what the reference does on `w` at every step, else the failure."""
    want, got = World(ref.Scheduler, w), World(learner_cls, w)
    text = script(w)
    history: list[tuple[Plan, list[str]]] = []
    for step in range(1, max_steps + 1):
        if not want.pending(step):
            break
        want.arrive(step)
        got.arrive(step)
        before = snapshot(got)
        label = f"step {step}"
        where = text + ("\n" + history_text(history) if history else "")
        exp_out = want.sched.schedule()
        try:
            out = learner_call(got.sched.schedule, name, input=where)
            plan, pre = read_output(out)
            check_invariants(got, out, label)
        except CaseFailure as f:
            f.input = f.input or where
            return f
        exp_plan = [(x.request.request_id, x.num_new_tokens) for x in exp_out.scheduled]
        exp_pre = [r.request_id for r in exp_out.preempted]
        if (plan, pre) != (exp_plan, exp_pre):
            field = "scheduled (request_id, num_new_tokens)" if plan != exp_plan else "preempted"
            return CaseFailure(f"{label}: wrong {'schedule' if plan != exp_plan else 'preempted requests'}",
                               input=where, field=field, expected=exp_plan if plan != exp_plan else exp_pre,
                               got=plan if plan != exp_plan else pre,
                               hint=hint(before, w.config, exp_plan, plan, exp_pre, pre) or None)
        diff = first_difference(snapshot(want), snapshot(got))
        if diff:
            key, e, g = diff
            return CaseFailure(f"{label}: after schedule(), {key} differs", input=where, field=key, expected=e,
                               got=g, hint=field_hints.get(key.rsplit(".", 1)[-1], None)
                               or hint(before, w.config, exp_plan, plan, exp_pre, pre) or None)
        history.append((plan, pre))
        want.update(exp_out.scheduled)
        got.update(out.scheduled)
        try:
            check_blocks(got, label)
        except CaseFailure as f:
            f.input = where
            return f
    if want.pending(max_steps + 1):
        raise AssertionError("course bug: the reference did not finish the workload")
    if got.kv.num_free_blocks != w.config.num_blocks:
        return CaseFailure(f"at the end {got.kv.num_free_blocks} of {w.config.num_blocks} blocks are free",
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


def check_workloads(workloads: list[Workload], learner_cls: type, hint: HintFn,
                    field_hints: dict[str, str] = FIELD_HINTS, name: str = "Scheduler.schedule") -> None:
    def run(v: Workload) -> CaseFailure | None:
        return run_lockstep(v, learner_cls, hint, field_hints, name)

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
    rng = random.Random(seed)
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


# ----------------------------------------------------------------------------------------------------------
# Exercise 129: the learner's schedule with the reference preemption


def learner_scheduler(impl) -> type:
    learner = getattr(impl, "Scheduler", None)
    if not (isinstance(learner, type) and callable(getattr(learner, "schedule", None))):
        raise CaseFailure("Scheduler must be a class with a schedule method, as in the starter file",
                          hint="keep `class Scheduler(SchedulerBase):` and write schedule")
    # The learner's schedule on the framework's shell, with the reference preemption (exercise 131 is graded apart).
    bases = (learner,) if issubclass(learner, SchedulerBase) else (learner, SchedulerBase)
    return type("Graded", bases, {"preemption": ref.preemption})


def kinds(before: dict[str, Any]) -> dict[str, str]:
    """Each request before the step: 'decode' (running, one token left), 'chunk' (running, more) or 'new'."""
    out = {}
    for rid, r in before["requests"].items():
        if rid in before["running"]:
            out[rid] = "decode" if r["num_tokens"] - r["num_computed_tokens"] == 1 else "chunk"
        elif rid in before["waiting"]:
            out[rid] = "new"
    return out


def hint_129(before: dict[str, Any], c: Config, exp: Plan, got: Plan, exp_pre: list[str], got_pre: list[str]) -> str:
    kind = kinds(before)
    got_kinds = [kind.get(rid, "?") for rid, _ in got]
    running_kinds = [k for k in got_kinds if k in ("decode", "chunk")]
    if "chunk" in running_kinds and "decode" in running_kinds[running_kinds.index("chunk"):]:
        return "decodes (one token left) go first, then running prompts still being prefilled"
    if "new" in got_kinds and any(k in ("decode", "chunk") for k in got_kinds[got_kinds.index("new"):]):
        return "running requests (decodes, then prompts still being prefilled) go before waiting ones"
    if exp_pre and any(rid not in dict(exp) for rid, _ in got):
        return "nothing is admitted in a step that preempted a request (not even the victim)"
    if sorted(exp) == sorted(got):
        return "within decodes and within prefill chunks, keep admission order (the order of self.running)"
    new_exp = {rid: n for rid, n in exp if kind.get(rid) == "new"}
    new_got = {rid: n for rid, n in got if kind.get(rid) == "new"}
    if len(before["running"]) + len(new_got) > c.max_num_seqs:
        return f"at most max_num_seqs={c.max_num_seqs} requests run at once"
    if c.prefix and any(new_got[rid] > new_exp[rid] for rid in set(new_exp) & set(new_got)):
        return ("prefix-cache hits are not recomputed: tokens to compute = num_tokens - num_computed_tokens - "
                "len(computed) * block_size, with computed = self.kv.get_computed_blocks(request)")
    if new_got and list(new_got)[0] != before["waiting"][0]:
        if not c.chunked:
            return ("first come first served: without chunked prefill a prompt that does not fit the budget left "
                    "stops admission; later, smaller requests do not overtake it")
        return "waiting requests are admitted first come first served: self.waiting[0] first"
    if c.chunked and len(new_got) < len(new_exp):
        return ("with chunked prefill a waiting prompt larger than the budget left is admitted with a chunk of "
                "budget-left tokens")
    if not c.chunked and any(n < before["requests"][rid]["num_tokens"] for rid, n in new_got.items()):
        return "without chunked prefill a prompt is admitted whole or not at all"
    if len(new_got) < len(new_exp):
        return "keep admitting waiting requests while budget, max_num_seqs and blocks allow"
    return ("each running request gets min(tokens it has left, budget left) tokens; the budget left is "
            "token_budget minus the tokens already in out.scheduled (a preempted victim's tokens come back)")


def check_129(impl, workloads: list[Workload]) -> None:
    check_workloads(workloads, learner_scheduler(impl), hint_129)


def spec_running(rid: str, n_prompt: int, computed: int, outputs: int = 0, max_tokens: int = 4,
                 first: int = 1) -> Spec:
    return Spec(rid, tuple(range(first, first + n_prompt)), max_tokens, computed=computed,
                outputs=tuple(range(900, 900 + outputs)))


def spec_new(rid: str, n_prompt: int, max_tokens: int = 3, arrival: int = 1, first: int = 30) -> Spec:
    return Spec(rid, tuple(range(first, first + n_prompt)), max_tokens, arrival)


@CASES("one request: a prompt that fits, then its decodes")
def _(impl):
    check_129(impl, [Workload(Config(16, 4, 16, 4), (spec_new("a", 7, max_tokens=4),))])


@CASES("decodes first, then prefill chunks, then new requests")
def _(impl):
    c = Config(64, 4, 20, 8)
    check_129(impl, [Workload(c, (spec_running("chunking", 20, 8), spec_running("decoding", 3, 3, outputs=1),
                                  spec_new("new", 4))),
                     Workload(c, (spec_running("p1", 30, 4, first=100), spec_running("d1", 5, 5, outputs=1),
                                  spec_running("p2", 9, 2, first=200), spec_running("d2", 6, 6, outputs=2),
                                  spec_new("n1", 3), spec_new("n2", 2, first=70)))])


@CASES("the budget left after decodes limits a running prefill chunk")
def _(impl):
    check_129(impl, [Workload(Config(64, 4, 10, 8), (spec_running("chunking", 20, 8),
                                                     spec_running("decoding", 3, 3, outputs=1), spec_new("new", 4)))])


@CASES("a long prompt is cut into budget-sized chunks")
def _(impl):
    check_129(impl, [Workload(Config(32, 4, 16, 4), (spec_new("long", 50, max_tokens=2),)),
                     Workload(Config(32, 4, 7, 4), (spec_new("a", 17, 5), spec_new("b", 3, 5, 2, first=60),
                                                    spec_new("c", 12, 5, 3, first=80)))])


@CASES("with chunked prefill the last request admitted gets the budget left")
def _(impl):
    c = Config(64, 4, 16, 8)
    check_129(impl, [Workload(c, (spec_running("d0", 2, 2, outputs=1), spec_running("d1", 2, 2, outputs=1, first=5),
                                  spec_new("big", 15, max_tokens=1, first=20), spec_new("next", 3, first=50))),
                     Workload(c, (spec_new("a", 10), spec_new("b", 10, first=60), spec_new("c", 4, first=80)))])


@CASES("without chunked prefill a prompt that does not fit waits, and so do later ones")
def _(impl):
    c = Config(64, 4, 16, 8, chunked=False)
    check_129(impl, [Workload(c, (spec_running("d0", 2, 2, outputs=1), spec_running("d1", 2, 2, outputs=1, first=5),
                                  spec_new("big", 14, max_tokens=1, first=20), spec_new("small", 2, first=50))),
                     Workload(c, (spec_new("a", 9, 4), spec_new("b", 9, 4, first=60), spec_new("c", 3, 2, first=80)))])


@CASES("max_num_seqs caps the running requests")
def _(impl):
    specs = tuple(spec_new(f"r{i}", 4, max_tokens=mt, first=10 * i + 1) for i, mt in enumerate([1, 3, 3, 3, 2]))
    check_129(impl, [Workload(Config(64, 4, 100, 2), specs), Workload(Config(64, 4, 100, 3), specs)])


@CASES("waiting requests are admitted first come first served")
def _(impl):
    specs = tuple(spec_new(f"r{i}", n, max_tokens=2, first=10 * i + 1, arrival=1 + i // 3)
                  for i, n in enumerate([3, 5, 2, 6, 4, 2]))
    check_129(impl, [Workload(Config(64, 4, 9, 8), specs), Workload(Config(64, 4, 9, 8, chunked=False), specs)])


@CASES("prefix-cache hits are not recomputed")
def _(impl):
    shared = tuple(range(1, 9))  # two full blocks of 4
    specs = (Spec("first", shared + (50, 51), 1), Spec("second", shared + (60, 61, 62), 2, arrival=3),
             Spec("third", shared, 1, arrival=5), Spec("fourth", shared[:5] + (70,), 2, arrival=5))
    check_129(impl, [Workload(Config(64, 4, 64, 8, prefix=True), specs),
                     Workload(Config(64, 4, 6, 8, prefix=True), specs)])


@CASES("blocks run out: admission stops")
def _(impl):
    check_129(impl, [Workload(Config(6, 4, 64, 8), (spec_new("a", 9, 3), spec_new("b", 9, 3, first=50),
                                                    spec_new("c", 2, 2, first=70))),
                     Workload(Config(5, 2, 64, 8), (spec_new("a", 3, 2), spec_new("b", 5, 2, first=50),
                                                    spec_new("c", 1, 1, first=70)))])


@CASES("preemption: a skipped victim, its tokens back in the budget, no admission that step")
def _(impl):
    check_129(impl, [
        Workload(Config(3, 4, 3, 8), (spec_running("a", 4, 4, outputs=1, max_tokens=5),
                                      spec_running("b", 10, 8, max_tokens=2, first=20), spec_new("c", 1))),
        Workload(Config(4, 4, 64, 8), (spec_new("a", 7, 4), spec_new("b", 7, 4, first=20),
                                       spec_new("c", 2, 4, arrival=2, first=40))),
        # the victim (admitted last) is a decode already scheduled this step: its token returns to the budget
        Workload(Config(5, 4, 6, 8), (spec_running("p", 12, 6, max_tokens=2, first=40),
                                      spec_running("q", 8, 2, max_tokens=2, first=20),
                                      spec_running("d", 4, 4, outputs=1, max_tokens=2, first=60))),
    ])


def _cfg_chunked(rng: random.Random) -> Config:
    return Config(64, rng.choice([2, 4, 8]), rng.choice([6, 8, 12, 16, 32]), rng.choice([2, 3, 4, 8]))


def _cfg_whole(rng: random.Random) -> Config:
    return Config(64, rng.choice([2, 4]), rng.choice([12, 16, 24]), rng.choice([2, 3, 8]), chunked=False)


def _cfg_small(rng: random.Random) -> Config:
    return Config(rng.randint(6, 12), rng.choice([2, 4]), rng.choice([6, 8, 16, 32]), rng.choice([3, 4, 8]))


def _cfg_prefix(rng: random.Random) -> Config:
    return Config(rng.choice([16, 64]), rng.choice([2, 4]), rng.choice([8, 16, 32]), rng.choice([3, 8]),
                  chunked=rng.random() < 0.7, prefix=True)


@CASES("random workloads: chunked prefill")
def _(impl):
    check_129(impl, random_workloads(129, 30, _cfg_chunked, (2, 8), (1, 30), (1, 8)))


@CASES("random workloads: without chunked prefill")
def _(impl):
    check_129(impl, random_workloads(130, 30, _cfg_whole, (2, 8), (1, 16), (1, 6)))


@CASES("random workloads: small KV cache (preemptions)")
def _(impl):
    check_129(impl, random_workloads(131, 40, _cfg_small, (2, 6), (1, 14), (1, 10), last_arrival=4))


@CASES("random workloads: prefix caching")
def _(impl):
    check_129(impl, random_workloads(132, 30, _cfg_prefix, (3, 8), (1, 10), (1, 5), shared_prefixes=True))
