"""Public fakes of the parts exercises 129 and 131 call but do not write: the KV-cache manager and preemption. They
hold no answer: each state-changing call is answered by the grader in rounds (judge/drivers/rounds.py), its record's
effect on the worker's own requests, queues and `SchedulerOutput` applied here in place.

Read-only calls are answered from the current state: `block_size`, `num_free_blocks`, `block_pool.ref_cnt`,
`get_computed_blocks` (the KV-cache manager's prefix hits for each queued request, which come with the step and
with each answer), and an `allocate_slots` that needs more blocks than are free (framework/kv_cache_manager.py
decides that, and it changes nothing), so only the order of the calls that change something is enforced.
"""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any

from framework.kv_cache_manager import blocks_to_allocate
from framework.request import Request, RequestStatus
from framework.scheduler import ScheduledRequest
from judge.drivers.rounds import Rounds
from judge.harness import plain_int

KV_OPS = ("allocate_slots", "free")  # the KV-cache manager's state-changing operations
PREEMPTION_OPS = ("allocate_or_preempt", "preempt")


FIELD_NAMES = ("status", "num_computed_tokens", "num_cached_tokens", "num_preemptions", "block_table",
               "output_token_ids")


def status_of(r: Request) -> str:
    """A request's status as the grader compares it: a RequestStatus's value, anything else (the string "running")
    as text that no status equals, saying what it is."""
    return r.status.value if isinstance(r.status, RequestStatus) else plain_int(r.status)


def fields(r: Request) -> dict[str, Any]:
    """A request's state as the parts read and write it."""
    return {"status": status_of(r), "num_computed_tokens": r.num_computed_tokens,
            "num_cached_tokens": r.num_cached_tokens, "num_preemptions": r.num_preemptions,
            "block_table": list(r.block_table), "output_token_ids": list(r.output_token_ids)}


def set_fields(r: Request, values: dict[str, Any], names: Any = FIELD_NAMES) -> None:
    """Set the fields `names` of a request from a record of them (`fields`', or a recorded call's effect, which holds
    the fields the call changed: `names=values`); lists in place (the learner's code may hold them)."""
    for key in names:
        old, value = getattr(r, key, None), values[key]
        if isinstance(old, list) and isinstance(value, list):
            old[:] = value
        else:
            setattr(r, key, RequestStatus(value) if key == "status" else list(value) if isinstance(value, list)
                    else value)


def reads(op: str, scheduler: Any, request: Request) -> dict[str, Any]:
    """What the reference part reads when `op` is called on `request`, besides its arguments and its own state:
    the request's computed tokens and blocks, and for preemption the scheduler's queues."""
    seen: dict[str, Any] = {"num_computed_tokens": request.num_computed_tokens,
                            "block_table": list(request.block_table)}
    if op == "free":
        del seen["num_computed_tokens"]
    if op in PREEMPTION_OPS:
        seen["running"] = ids(scheduler.running)
        seen["waiting"] = ids(scheduler.waiting)
    return seen


def made(op: str, scheduler: Any, request: Request, args: list, out: Any = None) -> dict[str, Any]:
    """A call of a part as recorded and as replayed alike: the operation, its arguments (the request by id, the
    plan `out` of allocate_or_preempt as ids) and what it reads."""
    call = {"op": op, "args": [request.request_id, *args], "reads": reads(op, scheduler, request)}
    if out is not None:
        call["args"].append(plan(out))
    return call


def ids(requests: Any) -> list[str]:
    return [r.request_id if isinstance(r, Request) else repr(r)[:60] for r in requests]


def plan(out: Any) -> dict[str, list]:
    """A SchedulerOutput as request ids: {"scheduled": [[id, num_new_tokens], ...], "preempted": [id, ...]}."""
    scheduled, preempted = getattr(out, "scheduled", None), getattr(out, "preempted", None)
    if not isinstance(scheduled, list) or not isinstance(preempted, list):
        raise TypeError(f"out is {type(out).__name__}; it must be a SchedulerOutput")
    return {"scheduled": [[ids([getattr(s, "request", None)])[0], getattr(s, "num_new_tokens", None)]
                          for s in scheduled], "preempted": ids(preempted)}


class Replay(Rounds):
    """The parts' calls of one world, in rounds (judge/drivers/rounds.py): its requests by id, the scheduler whose
    queues the parts change, the pool as the grader's last answer left it."""

    def __init__(self, num_blocks: int, block_size: int, prefix: bool) -> None:
        super().__init__()
        self.block_size, self.prefix = block_size, prefix
        self.pool = SimpleNamespace(num_blocks=num_blocks, num_free_blocks=num_blocks, ref_cnt=[0] * num_blocks)
        self.requests: dict[str, Request] = {}
        self.scheduler: Any = None
        self.world: Any = None
        self.lookups: dict[str, list[int]] = {}
        self.consumed = 0

    def load(self, phase: str, lookups: dict[str, list[int]] | None = None, **shown: Any) -> None:
        """The calls that follow belong to `phase` (the grader's name for the script it compares them with), from
        the prefix hits `lookups`, if given; `shown` goes with the phase's first paused call."""
        self.consumed, self.shown = 0, {"phase": phase, **shown}
        self.lookups = self.lookups if lookups is None else lookups

    def call(self, op: str, request: Any, args: list, out: Any = None) -> Any:
        """Play the state-changing call `op(request, *args)`: posted to the grader, which answers with the recorded
        value, whose effect is applied, or with Departure if it is not the reference's next call."""
        self.live()
        if not isinstance(request, Request):
            raise TypeError(f"{type(request).__name__} {str(request)[:60]} is not a framework.request.Request")
        entry = self.post(made(op, self.scheduler, request, args, out))
        self.consumed += 1
        self.apply(entry["effect"], out)
        return entry["value"]

    def apply(self, effect: dict, out: Any = None) -> None:
        for rid, values in effect.get("requests", {}).items():
            set_fields(self.requests[rid], values, values)
        for key in ("running", "waiting"):
            queue = getattr(self.scheduler, key, None)
            if key in effect and queue is not None and ids(queue) != effect[key]:
                queue.clear()
                queue.extend(self.requests[rid] for rid in effect[key])
        if "free" in effect:
            self.pool.num_free_blocks, self.pool.ref_cnt = effect["free"], list(effect["ref_cnt"])
        self.lookups = effect.get("lookups", self.lookups)
        if "plan" in effect and effect["plan"] != plan(out):  # as the reference: a new list where it changed
            kept = {(id(s.request), s.num_new_tokens): s for s in out.scheduled}
            out.scheduled = [kept.get((id(self.requests[rid]), n)) or ScheduledRequest(self.requests[rid], n)
                             for rid, n in effect["plan"]["scheduled"]]
            out.preempted[:] = [self.requests[rid] for rid in effect["plan"]["preempted"]]


def departure_message(made: dict | None, expected: dict | None) -> str:
    """What the learner's code called where the script held `expected` (None: no more calls; `made` None: it
    returned instead)."""
    if made is None:
        return f"your code returned without calling {describe(expected)}, which the reference's code calls here"
    shown = f"your code called {describe(made)}"
    if expected is None:
        return f"{shown}, where the reference's code calls nothing more"
    if expected["op"] == made["op"] and expected["args"] == made["args"]:
        key = next(k for k in expected["reads"] if expected["reads"][k] != made["reads"].get(k))
        return (f"{shown} with {key} = {made['reads'][key]}; the reference's code makes this call with {key} = "
                f"{expected['reads'][key]}")
    return f"{shown}; the reference's code calls {describe(expected)} here"


def describe(call: dict) -> str:
    """A call as the learner's code made it (request ids as names)."""
    rid, *rest = call["args"]
    shown = [f"<request {rid}>", *(repr(a) for a in rest)]
    if call["op"] == "allocate_or_preempt":
        shown[-1] = f"out (scheduled {call['args'][-1]['scheduled']}, preempted {call['args'][-1]['preempted']})"
    owner = "preemption" if call["op"] in PREEMPTION_OPS else "kv"
    return f"{owner}.{call['op']}({', '.join(shown)})"


class FakeKVCacheManager:
    """The KV-cache manager, replayed: `get_computed_blocks`, `allocate_slots`, `free`, `block_size`,
    `num_free_blocks` and `block_pool` (its `num_blocks`, `num_free_blocks`, `ref_cnt`)."""

    def __init__(self, replay: Replay) -> None:
        self.replay, self.block_size, self.block_pool = replay, replay.block_size, replay.pool

    @property
    def num_free_blocks(self) -> int:
        self.replay.live()
        return self.block_pool.num_free_blocks

    def get_computed_blocks(self, request: Request) -> list[int]:
        self.replay.live()
        if not self.replay.prefix:  # as framework.kv_cache_manager's: no cache, no hit
            return []
        rid = getattr(request, "request_id", None)
        if rid not in self.replay.lookups:
            raise TypeError(f"get_computed_blocks({str(request)[:60]}): a request neither waiting nor running")
        return list(self.replay.lookups[rid])

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks: Any = ()) -> bool:
        if isinstance(num_new_tokens, bool) or not hasattr(num_new_tokens, "__index__"):
            raise TypeError("allocate_slots(request, num_new_tokens: int, computed_blocks: list of ints)")
        self.replay.live()
        n, computed = operator.index(num_new_tokens), [operator.index(b) for b in computed_blocks]
        pool = self.block_pool
        if isinstance(request, Request) and all(0 <= b < pool.num_blocks for b in computed):
            _, taken = blocks_to_allocate(request, n, computed, self.block_size, pool.ref_cnt)
            if taken > pool.num_free_blocks:  # framework's rule: all or nothing, nothing changes
                return False
        return self.replay.call("allocate_slots", request, [n, computed])

    def free(self, request: Request) -> None:
        self.replay.call("free", request, [])


class FakePreemption:
    """Exercise 131's `allocate_or_preempt` and `preempt`, replayed, for a scheduler the learner writes (129)."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def allocate_or_preempt(self, scheduler: Any, request: Request, num_new_tokens: int, out: Any) -> bool:
        if isinstance(num_new_tokens, bool) or not hasattr(num_new_tokens, "__index__"):
            raise TypeError("allocate_or_preempt(scheduler, request, num_new_tokens: int, out)")
        return self.replay.call("allocate_or_preempt", request, [operator.index(num_new_tokens)], out)

    def preempt(self, scheduler: Any, request: Request) -> None:
        self.replay.call("preempt", request, [])
