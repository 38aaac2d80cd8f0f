"""Hidden tests of exercise 129 (Scheduler.schedule), on the workloads of judge/hidden/lockstep.py.

The learner's `schedule` runs with the REFERENCE `allocate_or_preempt` and `preempt` (so 129 is graded whatever
the learner did in 131), step by step beside the reference `Scheduler`: the same schedule, queues and request
states, and the invariants that do not depend on the reference (the token budget, `max_num_seqs`, no request lost
or duplicated, blocks for every scheduled token, consistent reference counts, every block free at the end).
"""

from __future__ import annotations

import random
from typing import Any

from judge.harness import Cases
from judge.hidden.lockstep import (FIELD_HINTS, Config, Plan, Spec, Workload, check_workloads,  # noqa: F401
                                  field_hint_paths, random_workloads, spec_new, spec_running)

CASES = Cases()


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of a public case's answers: each field of a request or queue that schedule sets or keeps, after
    the step (the state before it is the previous step's after)."""
    if driver != "scheduler" or not isinstance(value, dict):
        return []
    return list(field_hint_paths({key: v for key, v in value.items() if key != "before"}, FIELD_HINTS))


# ----------------------------------------------------------------------------------------------------------
# Exercise 129: the learner's schedule with the reference preemption


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
    ran = [rid for rid, _ in got if kind.get(rid) in ("decode", "chunk") and rid in before["running"]]
    if ran != sorted(ran, key=lambda rid: (kind[rid] != "decode", before["running"].index(rid))):
        return ("the running requests in order: decodes (exactly one token left to compute) first, then prompts still "
                "being prefilled (request.is_prefilling), each group in the order of self.running")
    if exp_pre and any(rid not in dict(exp) for rid, _ in got):
        return "nothing is admitted in a step that preempted a request (not even the victim)"
    if exp_pre and len(got) < len(exp) and all(x in exp for x in got):
        return ("in a step that preempts: a preempted victim's tokens come back (budget left = token_budget - "
                "out.num_scheduled_tokens, read after each call); a request whose allocate_or_preempt returned False "
                "is skipped and the loop goes on with the next; and a preemption may put a new list in "
                "out.scheduled: append to out.scheduled, not to a list you kept from before the call")
    if any(n <= 0 and sum(m for _, m in got[:i]) >= c.token_budget for i, (_, n) in enumerate(got)):
        return "no request is scheduled with 0 tokens: once the budget left is 0, stop (running and waiting alike)"
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
        return ("without chunked prefill a prompt is admitted whole or not at all: all its num_tokens - "
                "num_computed_tokens tokens (its outputs too, after a preemption), less its prefix hits")
    if len(new_got) < len(new_exp):
        return "keep admitting waiting requests while budget, max_num_seqs and blocks allow"
    if any(new_got[rid] != new_exp[rid] for rid in set(new_exp) & set(new_got)):
        return ("a waiting request's tokens to compute = request.num_tokens - request.num_computed_tokens - "
                "len(computed) * block_size: num_tokens counts its output tokens too (a preempted request has some)")
    return ("each running request gets min(tokens it has left, budget left) tokens; the budget left is "
            "token_budget minus the tokens already in out.scheduled (a preempted victim's tokens come back)")


def check_129(impl, workloads: list[Workload]) -> None:
    check_workloads(workloads, impl, "schedule", hint_129)


@CASES("one request: a prompt that fits, then its decodes", public=True)
def _(impl):
    check_129(impl, [Workload(Config(16, 4, 16, 4), (spec_new("a", 7, max_tokens=4),))])


@CASES("decodes first, then prefill chunks, then new requests", public=True)
def _(impl):
    c = Config(64, 4, 20, 8)
    check_129(impl, [Workload(c, (spec_running("chunking", 20, 8), spec_running("decoding", 3, 3, outputs=1),
                                  spec_new("new", 4))),
                     Workload(c, (spec_running("p1", 30, 4, first=100), spec_running("d1", 5, 5, outputs=1),
                                  spec_running("p2", 9, 2, first=200), spec_running("d2", 6, 6, outputs=2),
                                  spec_new("n1", 3), spec_new("n2", 2, first=70)))])


@CASES("the budget left after decodes limits a running prefill chunk", public=True)
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


@CASES("without chunked prefill a prompt that does not fit waits, and so do later ones", public=True)
def _(impl):
    c = Config(64, 4, 16, 8, chunked=False)
    check_129(impl, [Workload(c, (spec_running("d0", 2, 2, outputs=1), spec_running("d1", 2, 2, outputs=1, first=5),
                                  spec_new("big", 14, max_tokens=1, first=20), spec_new("small", 2, first=50))),
                     Workload(c, (spec_new("a", 9, 4), spec_new("b", 9, 4, first=60), spec_new("c", 3, 2, first=80)))])


@CASES("max_num_seqs caps the running requests", public=True)
def _(impl):
    specs = tuple(spec_new(f"r{i}", 4, max_tokens=mt, first=10 * i + 1) for i, mt in enumerate([1, 3, 3, 3, 2]))
    check_129(impl, [Workload(Config(64, 4, 100, 2), specs), Workload(Config(64, 4, 100, 3), specs)])


@CASES("waiting requests are admitted first come first served")
def _(impl):
    specs = tuple(spec_new(f"r{i}", n, max_tokens=2, first=10 * i + 1, arrival=1 + i // 3)
                  for i, n in enumerate([3, 5, 2, 6, 4, 2]))
    check_129(impl, [Workload(Config(64, 4, 9, 8), specs), Workload(Config(64, 4, 9, 8, chunked=False), specs)])


@CASES("prefix-cache hits are not recomputed", public=True)
def _(impl):
    shared = tuple(range(1, 9))  # two full blocks of 4
    specs = (Spec("first", shared + (50, 51), 1), Spec("second", shared + (60, 61, 62), 2, arrival=3),
             Spec("third", shared, 1, arrival=5), Spec("fourth", shared[:5] + (70,), 2, arrival=5))
    # "second" hits first's blocks, is preempted, and while it waits "hog" reuses them: readmitted with no hit, its
    # num_cached_tokens is 0 again
    evicted = (Spec("first", shared + (50, 51), 1), Spec("hog", tuple(range(90, 96)), 16, arrival=2),
               Spec("second", shared + (60, 61, 62), 6, arrival=3))
    check_129(impl, [Workload(Config(64, 4, 64, 8, prefix=True), specs),
                     Workload(Config(64, 4, 6, 8, prefix=True), specs),
                     Workload(Config(6, 4, 16, 4, prefix=True), evicted)])


@CASES("blocks run out: admission stops", public=True)
def _(impl):
    check_129(impl, [Workload(Config(6, 4, 64, 8), (spec_new("a", 9, 3), spec_new("b", 9, 3, first=50),
                                                    spec_new("c", 2, 2, first=70))),
                     Workload(Config(5, 2, 64, 8), (spec_new("a", 3, 2), spec_new("b", 5, 2, first=50),
                                                    spec_new("c", 1, 1, first=70)))])


@CASES("preemption: a skipped victim, its tokens back in the budget, no admission that step", public=True)
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
        # the decode is its own victim: skipped, and the prompt after it gets the blocks it freed
        Workload(Config(3, 4, 64, 8), (spec_running("p", 8, 4, max_tokens=2, first=40),
                                      spec_running("d", 8, 8, outputs=1, max_tokens=3, first=60))),
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


# The random workloads come after the hand-built cases above, which already pin each rule down: 24 to 32 of each
# kind (with the course's seed, 147 prompt chunks, 45 preemptions, 55 prefix hits) keep every kind of step.
@CASES("random workloads: chunked prefill")
def _(impl):
    check_129(impl, random_workloads(129, 24, _cfg_chunked, (2, 8), (1, 30), (1, 8)))


@CASES("random workloads: without chunked prefill")
def _(impl):
    check_129(impl, random_workloads(130, 24, _cfg_whole, (2, 8), (1, 16), (1, 6)))


@CASES("random workloads: small KV cache (preemptions)")
def _(impl):
    check_129(impl, random_workloads(131, 32, _cfg_small, (2, 6), (1, 14), (1, 10), last_arrival=4))


@CASES("random workloads: prefix caching")
def _(impl):
    check_129(impl, random_workloads(132, 24, _cfg_prefix, (3, 8), (1, 10), (1, 5), shared_prefixes=True))
