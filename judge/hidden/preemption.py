"""Hidden tests of exercise 131 (preempt and allocate_or_preempt); the reference is solutions/preemption.py.

The learner's two functions run inside the REFERENCE `schedule` (so 131 is graded whatever the learner did in
129). Hand-built states check each function alone against the reference on a twin scheduler; seeded workloads
with small KV caches run in lockstep with the reference (judge/hidden/lockstep.py); a last case generates on
the embedded model with a pool too small for every request at once: each greedy output must equal generating
that request alone, and preemptions must have happened.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from judge.harness import CaseFailure, Cases, rng as seeded
from judge.drivers.scheduler import call_preemption, script, world_state
from judge.hidden.end_to_end import alone, load_model
from judge.hidden.lockstep import (Config, LearnerRaised131, Plan, Workload, WorkerPreemption, check_blocks,
                                   check_workloads, departure_failure, field_hint_paths, first_difference,
                                   learner_preemption, plan_of, random_workloads, reference_script, reference_world,
                                   snapshot, spec_new, spec_running)
from judge.remote import Driver, learner_failure
from framework.sampling import SamplingParams
from framework.scheduler import ScheduledRequest, SchedulerOutput
from solutions.engine import EngineConfig, LLMEngine

CASES = Cases()


# ----------------------------------------------------------------------------------------------------------
# The learner's functions inside the reference scheduler


LEARNER_FNS = "preempt / allocate_or_preempt"  # how failures inside the reference schedule name the culprit
FIELD_HINTS = {
    "running": "the victim leaves scheduler.running (and only the victim)",
    "waiting": "a preempted request goes to the HEAD of scheduler.waiting (appendleft), to be readmitted first",
    "blocks held": "scheduler.kv.free(request) returns the victim's blocks to the pool and empties its block table",
    "free blocks": "scheduler.kv.free(request) returns the victim's blocks to the pool",
    "num_computed_tokens": "reset the victim's num_computed_tokens to 0: its KV cache is gone, it is recomputed",
    "output_token_ids": "keep the victim's output_token_ids: recomputation replays prompt + outputs",
    "status": "a preempted request's status is RequestStatus.WAITING",
    "num_preemptions": "count it: request.num_preemptions += 1",
    "num_cached_tokens": "preemption does not change num_cached_tokens",
}


def hint_131(before: dict[str, Any], c: Config, exp: Plan, got: Plan, exp_pre: list[str], got_pre: list[str]) -> str:
    if exp_pre != got_pre:
        if got_pre and before["running"] and got_pre[0] == before["running"][0] != exp_pre[:1] and exp_pre:
            return "the victim is the most recently admitted running request, scheduler.running[-1], not the oldest"
        if not got_pre and exp_pre:
            return "when allocate_slots fails, preempt scheduler.running[-1] and record it in out.preempted"
        return ("preempt (and record in out.preempted) one victim at a time, the newest running request, until "
                "allocate_slots succeeds or the request itself was the victim")
    if set(got) - set(exp) and exp_pre:
        return "a victim already scheduled in this step must be removed from out.scheduled"
    return ("allocate_or_preempt returns True when the allocation succeeded, False when the request preempted "
            "itself (then it is not scheduled)")


# ----------------------------------------------------------------------------------------------------------
# One call on a hand-built state, against the reference on a twin scheduler


def call_text(w: Workload, fn: str, rid: str, n: int, scheduled: tuple[str, ...]) -> str:
    """131's one call on a hand-built state, as code."""
    text = script(w).rsplit("\n", 1)[0]
    if scheduled:
        text += f"\nalready scheduled in this step (one token each, blocks allocated): {list(scheduled)}"
    if fn == "preempt":
        return text + f"\npreempt(s, {rid})"
    return text + f"\nout = SchedulerOutput(); allocate_or_preempt(s, {rid}, {n}, out)"


def check_call(impl, w: Workload, fn: str, rid: str, n: int = 0, scheduled: tuple[str, ...] = ()) -> None:
    """Call `fn` ('preempt' or 'allocate_or_preempt') on request `rid`: the learner's in the worker (the driver,
    with the script of the reference KV-cache manager's calls), the reference's on a twin scheduler here, and
    compare everything."""
    want = reference_world(w)[0]
    want.arrive(0)  # the requests waiting before any step (a new request of arrival 0)
    before = snapshot(want)
    out = SchedulerOutput()
    for other in scheduled:  # requests already scheduled in this step, one token each
        r = want.requests[other]
        assert want.kv.allocate_slots(r, 1), "course bug: no blocks for an already-scheduled request"
        out.scheduled.append(ScheduledRequest(r, 1))
    text = call_text(w, fn, rid, n, scheduled)
    state, request = world_state(want.sched, out), want.requests[rid]
    recorded = reference_script(fn, want.sched, request, n, out)
    exp_ret = call_preemption(want.sched.preemption, fn, want.sched, request, n, out)
    res = learner_preemption(Driver(impl, "scheduler"), asdict(w.config), state, fn, rid, n, recorded)
    if "error" in res:
        raise learner_failure(res["error"], fn, text)
    if "problem" in res:
        raise CaseFailure(res["problem"], input=text, hint=res.get("hint"))
    if "departure" in res:
        failure = departure_failure(res["departure"], "in the call", before, w.config, [], ([], []), hint_131,
                                    "preemption")
        failure.input = text
        raise failure
    exp_plan, exp_pre = plan_of(out)
    plan, pre, ret = [tuple(x) for x in res["plan"]], res["preempted"], res["returned"]
    if pre != exp_pre:
        raise CaseFailure("wrong out.preempted", input=text, field="out.preempted", expected=exp_pre, got=pre,
                          hint=hint_131(before, w.config, exp_plan, plan, exp_pre, pre))
    if plan != exp_plan:
        raise CaseFailure("wrong out.scheduled after the call", input=text, field="out.scheduled", expected=exp_plan,
                          got=plan, hint="a victim already scheduled in this step must be removed from "
                                         "out.scheduled; the others stay, in order")
    if fn != "preempt" and ret != exp_ret:
        hint = ("the request was its own victim (it is scheduler.running[-1]): it is preempted and the function "
                "returns False" if exp_ret is False else "return True once scheduler.kv.allocate_slots succeeds")
        raise CaseFailure(f"allocate_or_preempt returned {ret!r}", input=text, field="return value",
                          expected=exp_ret, got=ret, hint=hint)
    if res["others changed"]:
        rid, names = next(iter(res["others changed"].items()))
        raise CaseFailure(f"after the call, request {rid}'s {', '.join(names)} changed", input=text,
                          field=f"{rid}'s other fields", expected="left as they are", got=f"{', '.join(names)} changed",
                          hint="preemption changes a request's queue, blocks, num_computed_tokens, status and "
                               "num_preemptions, and nothing else: its generator, logprobs and other fields stay as "
                               "they are (the request resumes where it was)")
    diff = first_difference(snapshot(want), res["after"])
    if diff:
        key, e, g = diff
        raise CaseFailure(f"after the call, {key} differs", input=text, field=key, expected=e, got=g,
                          hint=FIELD_HINTS.get(key.rsplit(".", 1)[-1]))
    check_blocks(res["blocks"], w.config.num_blocks, "after the call", input=text)


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of a public case's answers: each field that preemption changes or leaves as it is."""
    return list(field_hint_paths(value, FIELD_HINTS)) if driver == "scheduler" else []


def check_131(impl, workloads: list[Workload]) -> None:
    check_workloads(workloads, impl, "preemption", hint_131, FIELD_HINTS, LEARNER_FNS)


# Running requests, oldest first, with every block in use. TWO: a (1 block, a decode) and b (2 blocks,
# mid-prefill). THREE: a (1 block, a decode), b (2 blocks, a decode with 2 outputs) and c (1 block, mid-prefill).
TWO = Workload(Config(3, 4, 64, 8), (spec_running("a", 4, 4, outputs=1, max_tokens=5),
                                     spec_running("b", 10, 8, outputs=0, max_tokens=2, first=20)))
THREE = Workload(Config(4, 4, 64, 8), (spec_running("a", 4, 4, outputs=1, max_tokens=5),
                                       spec_running("b", 6, 6, outputs=2, max_tokens=5, first=20),
                                       spec_running("c", 12, 4, outputs=0, max_tokens=2, first=40)))


@CASES("preempt: back to the head of the queue, blocks freed, outputs kept", public=True)
def _(impl):
    check_call(impl, TWO, "preempt", "b")
    check_call(impl, THREE, "preempt", "b")  # a request with output tokens, from the middle of running
    w = Workload(THREE.config, THREE.requests + (spec_new("w", 3, arrival=0),))
    check_call(impl, w, "preempt", "c")  # ahead of a request already waiting


@CASES("allocate_or_preempt: enough free blocks, nobody preempted", public=True)
def _(impl):
    check_call(impl, Workload(Config(8, 4, 64, 8), TWO.requests), "allocate_or_preempt", "a", 1)
    check_call(impl, Workload(Config(8, 4, 64, 8), THREE.requests), "allocate_or_preempt", "c", 8)


@CASES("allocate_or_preempt: the most recently admitted request is the victim", public=True)
def _(impl):
    check_call(impl, TWO, "allocate_or_preempt", "a", 1)
    check_call(impl, THREE, "allocate_or_preempt", "a", 1)


@CASES("allocate_or_preempt: several victims until the blocks fit", public=True)
def _(impl):
    check_call(impl, THREE, "allocate_or_preempt", "a", 9)  # a needs 3 more blocks: c, then b, go


@CASES("allocate_or_preempt: a victim already scheduled this step leaves out.scheduled", public=True)
def _(impl):
    w = Workload(Config(2, 4, 64, 8), (spec_running("p", 6, 4, max_tokens=2),
                                       spec_running("d", 4, 3, outputs=0, max_tokens=2, first=20)))
    check_call(impl, w, "allocate_or_preempt", "p", 2, scheduled=("d",))


@CASES("allocate_or_preempt: the request is its own victim, returns False", timeout=5, public=True)
def _(impl):
    check_call(impl, TWO, "allocate_or_preempt", "b", 2)
    check_call(impl, THREE, "allocate_or_preempt", "c", 5)  # c needs 2 more blocks: it is the newest


@CASES("workloads: the reference schedule with your preemption, small KV caches")
def _(impl):
    check_131(impl, random_workloads(1310, 40, lambda rng: Config(rng.randint(5, 10), rng.choice([2, 4]),
                                                                   rng.choice([6, 8, 16, 32]), rng.choice([3, 4, 8])),
                                     (2, 6), (1, 14), (1, 10), last_arrival=4))


@CASES("workloads: preempted requests with output tokens are recomputed, preempted again")
def _(impl):
    check_131(impl, random_workloads(1311, 30, lambda rng: Config(rng.randint(4, 7), 2, rng.choice([4, 8, 64]), 8),
                                     (3, 5), (1, 4), (4, 8), last_arrival=2))


@CASES("workloads: preemption with prefix caching")
def _(impl):
    check_131(impl, random_workloads(1312, 30, lambda rng: Config(rng.randint(7, 12), rng.choice([2, 4]),
                                                                   rng.choice([8, 16, 32]), 8, prefix=True),
                                     (3, 6), (1, 8), (2, 8), last_arrival=3, shared_prefixes=True))


# ----------------------------------------------------------------------------------------------------------
# End to end on the embedded model


@CASES("end to end: a small KV cache, preemptions, every output equals generating it alone", timeout=120)
def _(impl):
    model = load_model()
    config = {"num_blocks": 14, "block_size": 4, "token_budget": 16, "max_num_seqs": 4}
    rng = seeded(131)
    lengths, params = (11, 7, 14, 5, 9), SamplingParams(max_tokens=12, ignore_eos=True)
    prompts = [[rng.randrange(model.cfg.vocab_size) for _ in range(n)] for n in lengths]
    text = (f"LLMEngine(model, EngineConfig(num_blocks=14, block_size=4, token_budget=16, max_num_seqs=4)) with "
            f"your preemption; generate({prompts}, SamplingParams(max_tokens=12, ignore_eos=True))")
    res = generate_small_cache(impl, prompts, 12, config)
    if "error" in res:
        raise learner_failure(res["error"], LEARNER_FNS, text)
    if "problem" in res:
        raise CaseFailure(res["problem"], input=text, hint=res.get("hint"))
    if "departure" in res:
        failure = departure_failure(res["departure"], "end to end", {"running": []}, Config(**config), [],
                                    ([], []), hint_131, "preemption")
        failure.input = text
        raise failure
    if res["unfinished"]:
        raise CaseFailure("requests still unfinished after 300 steps", input=text,
                          hint="a preempted request must come back (head of scheduler.waiting) and finish")
    for i, (p, got) in enumerate(zip(prompts, res["outputs"])):
        want = alone(model, p, params, None)
        if got != want:
            raise CaseFailure(f"request {i}: its tokens differ from generating it alone", input=text,
                              field=f"request {i} output_token_ids", expected=want, got=got,
                              hint="a preempted request restarts from scratch: num_computed_tokens 0, blocks freed, "
                                   "output tokens kept (they are recomputed with the prompt)")
    if sum(res["preemptions"]) == 0:
        raise CaseFailure("no request was preempted, although the KV cache cannot hold them all", input=text,
                          hint="when allocate_slots fails, preempt scheduler.running[-1]; count it in "
                               "num_preemptions")
    if res["free"] != config["num_blocks"]:
        raise CaseFailure(f"at the end {res['free']} of {config['num_blocks']} blocks are free", input=text,
                          hint="scheduler.kv.free(request) returns a victim's blocks")


def generate_small_cache(impl, prompts: list[list[int]], max_tokens: int, config: dict) -> dict[str, Any]:
    """131 end to end: the reference engine here with the learner's preemption (called in the worker), on the
    embedded model, with a KV cache too small for every request at once. Each request's output tokens and
    preemptions, or the learner's error, or the first KV-cache call of theirs the reference's script did not hold."""
    cfg = EngineConfig(**config)
    preemption = WorkerPreemption(Driver(impl, "scheduler"),
                                  Config(cfg.num_blocks, cfg.block_size, cfg.token_budget, cfg.max_num_seqs))

    class Engine(LLMEngine):
        scheduler_cls = preemption.scheduler_cls

    engine = Engine(load_model(), cfg, eos_token_id=None)
    requests = engine.add_requests(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    steps = 0
    while engine.has_unfinished_requests() and steps < 300:
        steps += 1
        try:
            engine.step()
        except Exception as exc:  # noqa: BLE001 - the step fails (StepError) when the learner's code raised
            cause = exc.__cause__ if isinstance(exc.__cause__, (LearnerRaised131, CaseFailure)) else exc
            if isinstance(cause, CaseFailure):  # the learner's call left a request or `out` unusable
                named = [f"{r.request_id!r} is prompts[{i}]" for i, r in enumerate(requests)
                         if repr(r.request_id) in cause.message]  # the engine's ids, which the learner never sees
                return {"problem": cause.message + (f" (request {', '.join(named)})" if named else ""),
                        "hint": cause.hint}
            if isinstance(cause, LearnerRaised131) and preemption.departure:
                return {"departure": renamed(cause.record, {r.request_id: str(i) for i, r in enumerate(requests)})}
            if isinstance(cause, LearnerRaised131):
                return {"error": cause.record}
            raise
    return {"unfinished": engine.has_unfinished_requests(), "outputs": [list(r.output_token_ids) for r in requests],
            "preemptions": [r.num_preemptions for r in requests], "free": engine.kv_cache_manager.num_free_blocks}


def renamed(departure: dict, names: dict[str, str]) -> dict:
    """A departure with the engine's request ids (numbered per process) named by the requests' order instead."""
    for call in (departure["made"], departure["expected"]):
        if call is not None:
            call["args"][0] = names.get(call["args"][0], call["args"][0])
    departure["running"] = [names.get(rid, rid) for rid in departure["running"]]
    return departure
