"""Step traces of a case: the learner's run and the reference's run of one workload, side by side.

They are built from the plain step results the grader already has (a driver's answers, the reference run here),
never from the learner's objects. `StepLog.divergence` is the first step where the two plans differ as
framework/trace_compare.py's table, for a failure's message; with `--trace DIR` (the option "trace") the last
`StepLog` a case offered is written after the case as two files in framework/trace.py's format (Perfetto,
chrome://tracing; `load_trace` reads them back). The judge has no clock worth drawing: step i spans [i, i+1]
seconds, as in the chapters' stored traces. In a student edition only the recorded public cases run, and they offer
no log, so no file is written there.

framework.trace is imported where it is used: it needs torch, which grading a pure-Python exercise never imports.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from . import wire
from .harness import CaseFailure, option

if TYPE_CHECKING:
    from framework.trace import RequestRecord, StepRecord, StepTracer
    from judge.drivers.scheduler import Workload

SIDES = ("yours", "reference")


def step_record(index: int, rows: list[dict], token_budget: int, kv_used: int, kv_free: int,
                preempted: Sequence[str] = (), finished: Sequence[str] = (), prefix_hits: int = 0) -> StepRecord:
    """Step `index` (from 0) of a judge's trace. `rows`: framework/trace.py's `scheduled` entries (request_id, kind,
    tokens, drafts, context, blocks)."""
    from framework.trace import StepRecord

    rows = [dict(r) for r in rows]
    counts = {"prefill": 0, "decode": 0, "draft": 0}
    for r in rows:
        counts[r["kind"]] += r["tokens"]
        counts["draft"] += r["drafts"]
    return StepRecord(index, float(index), float(index + 1), float(index), float(index + 1), {}, rows, counts,
                      token_budget, sum(r["tokens"] + r["drafts"] for r in rows), kv_used, kv_free, prefix_hits,
                      list(preempted), sum(r["drafts"] for r in rows), 0, list(finished), 0, 0)


def row(request_id: str, num_computed: int, num_tokens: int, new: int, blocks: int) -> dict:
    """One scheduled request as a trace row, from its state once scheduled: prefill while more than one token is
    pending (a prompt, a chunk of it, a recomputation), else decode; as framework/trace.py classifies it."""
    return {"request_id": request_id, "kind": "prefill" if num_tokens - num_computed > 1 else "decode",
            "tokens": new, "drafts": 0, "context": num_computed + new, "blocks": blocks}


@dataclass
class StepLog:
    """Both runs of one workload: each side's steps (`step_record`), with the requests in order of arrival."""

    prompts: dict[str, int]  # request id -> prompt length, in order of arrival
    arrivals: dict[str, int] = field(default_factory=dict)  # request id -> index of the step it arrived before
    yours: list[StepRecord] = field(default_factory=list)
    reference: list[StepRecord] = field(default_factory=list)

    def divergence(self, index: int) -> str | None:
        """`divergence_table` of the two runs; requests keep their ids: both runs name them alike."""
        return divergence_table((self.yours, []), (self.reference, []), index)

    def requests(self, steps: list[StepRecord]) -> list[RequestRecord]:
        """Each request's slice: from its arrival to the end of the step that finished it."""
        from framework.trace import RequestRecord

        out = []
        for rid, prompt in self.prompts.items():
            ran = [s.index for s in steps if any(r["request_id"] == rid for r in s.scheduled)]
            finish = next((s.end for s in steps if rid in s.finished), None)
            out.append(RequestRecord(rid, prompt, float(self.arrivals.get(rid, ran[0] if ran else 0)), finish=finish,
                                     steps=ran))
        return out

    def chrome_traces(self) -> dict[str, dict]:
        """side -> its Chrome Trace Event JSON object."""
        from framework.trace import chrome_trace

        return {side: chrome_trace(steps, self.requests(steps), {"engine": f"judge: {side}"})
                for side, steps in zip(SIDES, (self.yours, self.reference))}


def scheduler_step(index: int, res: dict[str, Any], w: Workload) -> StepRecord:
    """A step result of the scheduler driver (129, 131: yours, or the reference's in the same form) as step `index`
    of a trace: the rows it scheduled, its preemptions, the requests the fake model finished (sorted: the rows'
    order is compared once, as "order"), prefix hits and the pool after the step."""
    c, after, sched = w.config, res["after"], res["facts"]["scheduled"]
    states = {x["rid"]: after["requests"].get(x["rid"], {}) for x in sched}
    max_tokens = {s.rid: s.max_tokens for s in w.requests}
    finished = sorted(x["rid"] for x in sched if x["num_computed"] + x["n"] == x["num_tokens"]
                      and len(states[x["rid"]].get("output_token_ids", ())) + 1 >= max_tokens.get(x["rid"], 0))
    hits = sum(states[x["rid"]].get("num_cached_tokens", 0) for x in sched if x["rid"] in res["before"]["waiting"])
    free = res.get("free", after["free blocks"])
    return step_record(index, [row(x["rid"], x["num_computed"], x["num_tokens"], x["n"], x["blocks"]) for x in sched],
                       c.token_budget, c.num_blocks - free, free, res["preempted"], finished, hits)


ALLOCATIONS = ("allocate_slots", "allocate_or_preempt")


def allocations(departure: dict, calls: list[dict]) -> list[dict]:
    """129: the allocations a schedule() made before it departed from the script (`calls`: the reference's calls
    of that step, of which the first `departure["consumed"]` matched) and the one it was making, as recorded calls
    (args: request id, tokens, then the computed blocks or the plan)."""
    made = [x for x in calls[:departure["consumed"]] if x["op"] in ALLOCATIONS and x["value"]]
    return made + ([departure["made"]] if departure["made"]["op"] in ALLOCATIONS else [])


def departed_step(index: int, res: dict[str, Any], calls: list[dict], w: Workload) -> StepRecord:
    """129: your step `index` as far as your schedule() got when it departed from the script (`res`: the driver's
    result, with its "before" and "departure"; `calls`: the reference's calls of that step, of which the first
    `departure["consumed"]` matched, each with its effect): each allocation answered as the row it gave, less the
    requests preempted since, then the one your code was making as the row it would give once made."""
    c, departure = w.config, res["departure"]
    state = {rid: dict(s) for rid, s in res["before"]["requests"].items()}
    rows: dict[str, dict] = {}
    free, preempted = res["before"]["free blocks"], []
    for call in calls[:departure["consumed"]]:
        effect = call.get("effect") or {}
        for rid, values in effect.get("requests", {}).items():  # a victim: its tokens and blocks gone
            if "num_computed_tokens" in values:
                state[rid]["num_computed_tokens"] = values["num_computed_tokens"]
            if "block_table" in values:
                state[rid]["blocks held"] = len(values["block_table"])
        preempted = effect.get("plan", {}).get("preempted", preempted)
        rows = {rid: x for rid, x in rows.items() if rid not in preempted}
        free = effect.get("free", free)
        if call["op"] in ALLOCATIONS and call["value"]:
            rows[call["args"][0]] = _allocated(call, state, c)[0]
    if departure["made"]["op"] in ALLOCATIONS:
        made, new_blocks = _allocated(departure["made"], state, c)
        rows[made["request_id"]], free = made, free - new_blocks
    return step_record(index, list(rows.values()), c.token_budget, c.num_blocks - free, free, preempted)


def _allocated(call: dict, state: dict[str, dict], c: Any) -> tuple[dict, int]:
    """The row an allocation (args: request id, tokens, then the computed blocks) gives its request, and the blocks
    it takes from the free ones, given the requests' `state` before it."""
    from framework.kv_cache_manager import blocks_needed

    rid, n, *rest = call["args"]
    hits = len(rest[0]) if call["op"] == "allocate_slots" and rest else 0  # prefix hits: blocks shared
    computed = state[rid]["num_computed_tokens"] + hits * c.block_size
    blocks = blocks_needed(computed + n, c.block_size)
    return row(rid, computed, state[rid]["num_tokens"], n, blocks), max(0, blocks - state[rid]["blocks held"] - hits)


def scheduler_log(w: Workload) -> StepLog:
    """An empty log of `w`'s two runs, its requests in order of arrival (those running at the start first)."""
    order = sorted(w.requests, key=lambda s: -1 if s.computed is not None else s.arrival)
    return StepLog({s.rid: len(s.prompt) for s in order},
                   {s.rid: 0 if s.computed is not None else s.arrival - 1 for s in order})


NEW_WORLD = ("scheduler", "new_world")


def replayed(recorded: list[list[dict]], answers: list[tuple[dict, dict, dict]]) -> StepLog | None:
    """The two runs of a replayed public case of the scheduler driver (129): the workload of its `new_world`, your
    steps from the calls replayed (`answers`: (request, the recorded reference's answer, yours)), a step whose
    schedule() paused at another call than the reference's as far as it got (after the calls answered since its
    `step`), and as many of the reference's steps of that world from the case's record `recorded` ([request,
    answer] pairs). None for a case of any other driver."""
    log = workload = before = None
    answered: list[dict] = []
    for req, want, got in answers:
        call = (req.get("driver"), req.get("attr"))
        if call == NEW_WORLD:
            from .drivers.scheduler import Workload  # here: a pure-Python exercise's replay imports no framework

            workload = Workload.from_plain(wire.decode(req["args"][1]))
            log = scheduler_log(workload)
        elif call == ("scheduler", "step"):
            answered = []
        elif call == ("scheduler", "answer"):
            answered.append(wire.decode(req["args"][1]))
        yours, reference = (_step_value(req, side) for side in (got, want))
        if log is None or yours is None:
            continue
        before = yours.get("before", before)  # with a step's first paused call
        if "plan" in yours:
            add_step(log.yours, yours, workload)
        elif yours.get("phase") == "schedule" and yours != reference:
            departure = {"made": yours.get("call"), "consumed": len(answered)}
            add_step(log.yours, {"before": before, "departure": departure}, workload, answered)
    if log is not None:  # the reference's steps of the same world: from its last `new_world` replayed
        worlds = [i for i, (req, _) in enumerate(recorded) if (req.get("driver"), req.get("attr")) == NEW_WORLD]
        start = max(i for i in worlds if i < len(answers))
        for req, want in recorded[start + 1:min([i for i in worlds if i > start], default=len(recorded))]:
            reference = _step_value(req, want)
            if len(log.reference) == len(log.yours):
                break
            if reference is not None and "plan" in reference:
                add_step(log.reference, reference, workload)
    return log


def _step_value(req: dict, answer: dict) -> dict | None:
    """The scheduler driver's answer to a `step` or `answer` request: a step's result or a paused call."""
    if req.get("driver") != "scheduler" or req.get("attr") not in ("step", "answer") or not answer.get("ok"):
        return None
    value = wire.decode(answer.get("value"))
    return value if isinstance(value, dict) else None


def add_step(steps: list[StepRecord], res: dict[str, Any], w: Workload, calls: list[dict] | None = None) -> None:
    """A scheduler step result appended to `steps` (with `calls`, the script of a step that departed from it); a
    malformed one (from a worker) is left out: its checks say why."""
    try:
        steps.append(scheduler_step(len(steps), res, w) if calls is None else departed_step(len(steps), res, calls, w))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass


@dataclass
class TracedEngines:
    """Two engines run here under framework/trace.py's StepTracer (134: the speculating engine calling your
    function, and calling the reference's); requests are named by arrival, as engines number them apart."""

    yours: StepTracer
    reference: StepTracer

    def divergence(self, index: int) -> str | None:
        return divergence_table(self.yours, self.reference, index)

    def chrome_traces(self) -> dict[str, dict]:
        return {side: tracer.chrome_trace() for side, tracer in zip(SIDES, (self.yours, self.reference))}


def divergence_table(yours: Any, reference: Any, index: int) -> str | None:
    """The table of the first step where the plans of two traces differ (framework/trace_compare.py's, steps called
    engine steps), if that is step `index` or a later one (a step's other results may differ before its plan does),
    and how many steps before it matched; else None."""
    from framework.trace_compare import first_difference

    diff = first_difference(yours, reference, SIDES)
    if diff is None or diff.step < index:
        return None
    matched = f"the plans of engine steps 1..{diff.step} matched" if diff.step else "no engine step before it"
    return f"{diff.table('engine step')}\n{matched}"


def with_table(f: CaseFailure, runs: StepLog | TracedEngines, index: int) -> CaseFailure:
    """`f`, a failure at step `index`, with the table of the first step whose plans differ (`divergence_table`)
    under its first line."""
    table = runs.divergence(index)
    if table:
        first, _, rest = f.message.partition("\n")
        f.message = "\n".join(part for part in (first, table, rest) if part)
        f.args = (f.message,)
    return f


_offered: list[StepLog | TracedEngines] = []  # the last log the running case offered, until `save` takes it


def offer(log: StepLog | TracedEngines) -> None:
    """Keep `log` to be written after the case, where `--trace DIR` asks for it (the case's last log wins: after
    a shrink, the smallest failing workload's)."""
    if option("trace"):
        _offered[:] = [log]


def save(exercise: Any, case: str) -> list[Path]:
    """Write the log the case `case` offered, if any, as DIR/<exercise>-<case>-yours.json and -reference.json;
    their paths. Called after every case (nothing to do without --trace)."""
    logs, _offered[:] = list(_offered), []
    folder = option("trace")
    if not logs or not folder:
        return []
    slug = re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")[:80]
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = []
    for side, trace in logs[0].chrome_traces().items():
        path = Path(folder) / f"{exercise.id}-{slug}-{side}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    return paths
