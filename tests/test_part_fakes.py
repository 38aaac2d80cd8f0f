"""The fakes of the parts 129 and 131 run on (judge/drivers/fakes.py): the worker answers some calls from its state,
without the grader, and each of those answers is the reference's; a right scheduler never departs from the script;
a departure is reported with the call made and the call expected, even when the learner's code swallows it."""

from __future__ import annotations

from collections import Counter


from alarm import cut_short_by_an_alarm
from judge import harness
from judge.drivers import fakes, kept
from judge.hidden import scheduler as hidden
from judge.hidden.lockstep import Config, Workload, answered, plan_of, random_workloads, reference_world, spec_new
from judge.remote import Driver
from solutions import scheduler as ref

# blocks run out (admissions fail), with and without prefix caching, then random ones of each kind
FULL = (spec_new("a", 9, 3), spec_new("b", 9, 3, first=50), spec_new("c", 2, 2, first=70))
WORKLOADS = [Workload(Config(6, 4, 64, 8), FULL), Workload(Config(6, 4, 64, 8, prefix=True), FULL),
             *random_workloads(5, 12, hidden._cfg_small, (2, 6), (1, 14), (1, 10), last_arrival=4),
             *random_workloads(6, 8, hidden._cfg_prefix, (3, 8), (1, 10), (1, 5), shared_prefixes=True)]


def failed_allocations(rec, log: list) -> None:
    """Log every allocate_slots the scheduler makes of the recorded reference KV-cache manager that returns False
    (its request, tokens; not those of the preemption, which the worker replays as a whole)."""
    kv = rec.kv
    allocate = kv.allocate_slots

    def logged(request, n, computed=()):
        outer = rec.depth == 0
        ok = allocate(request, n, computed)
        if not ok and outer:
            log.append([request.request_id, n, list(computed)])
        return ok

    kv.allocate_slots = logged


def start(impl, w: Workload, rec) -> Driver:
    """The driver of `impl`'s world of `w`, kept as "world", its running requests placed (the first script of
    `rec`, the reference world's recorder)."""
    d = Driver(impl, "scheduler")
    answered(d, "world", d.new_world("world", w.plain()), {"setup": rec.script()["calls"]})
    return d


def step(d: Driver, n: int, want, rec) -> tuple[dict, list]:
    """Step `n` of the reference's world `want` (recorded by `rec`), then of the driver's, its calls answered from
    the reference's: the driver's result and the reference's plan."""
    want.arrive(n)
    rec.begin()
    out = want.sched.schedule()
    scheduled = rec.script()
    want.update(out.scheduled)
    res = answered(d, "world", d.step("world", n, scheduled["lookups"]),
                   {"schedule": scheduled["calls"], "update": rec.script()["calls"]})
    return res, plan_of(out)[0]


def test_answers_given_in_the_worker_are_the_references(monkeypatch):
    """The reference scheduler on the scripted parts: no departure, the same plans, and exactly the allocations the
    reference KV-cache manager refused are refused from the state, in the same order."""
    local: list = []
    allocate = fakes.FakeKVCacheManager.allocate_slots

    def answered_here(self, request, n, computed=()):
        consumed = self.replay.consumed
        ok = allocate(self, request, n, computed)
        if self.replay.consumed == consumed:
            local.append([request.request_id, n, list(computed)])
        return ok

    monkeypatch.setattr(fakes.FakeKVCacheManager, "allocate_slots", answered_here)
    refused, kinds = [], Counter()
    with harness.grading(harness.Context(options={})):
        for w in WORKLOADS:
            before = len(refused)
            want, rec = reference_world(w)
            failed_allocations(rec, refused)
            d = start(ref, w, rec)
            n = 1
            while want.pending(n):
                res, plan = step(d, n, want, rec)
                assert "departure" not in res and [tuple(p) for p in res["plan"]] == plan, res
                assert res["free"] == want.kv.num_free_blocks == kept("world").pool.num_free_blocks
                n += 1
            kinds[w.config.prefix] += len(refused) - before
    assert local == refused and kinds[True] and kinds[False], (local, refused)


class Swallowing:
    """A scheduler that frees a request the reference never frees, and hides the exception that stops it."""

    class Scheduler(ref.Scheduler):
        def schedule(self):
            try:
                self.kv.free(self.running[0])
            except BaseException:  # noqa: BLE001 - what a learner may write
                pass
            return super().schedule()


def test_a_departure_is_reported_with_both_calls_even_when_swallowed():
    w = Workload(Config(16, 4, 16, 4), (spec_new("a", 7, max_tokens=4),))
    want, rec = reference_world(w)
    with harness.grading(harness.Context(options={})):
        d = start(Swallowing, w, rec)
        assert "departure" not in step(d, 1, want, rec)[0]
        res = step(d, 2, want, rec)[0]
    made, expected = res["departure"]["made"], res["departure"]["expected"]
    assert made["op"] == "free" and made["args"] == ["a"], res
    assert expected["op"] == "allocate_or_preempt" and expected["args"][:2] == ["a", 1], res


class Spinning:
    """A scheduler that waits for blocks to come free, which never happens while it waits."""

    class Scheduler(ref.Scheduler):
        def schedule(self):
            while self.kv.num_free_blocks < self.kv.block_pool.num_blocks + 1:
                pass


def test_a_grading_that_stops_waiting_stops_the_learners_thread():
    """In the test's own process nothing kills a looping learner: once the wait for their code is cut short (here by
    an alarm, as tests/test_public_verdicts.py's time limit cuts it), their next call of a part raises."""
    w = Workload(Config(16, 4, 16, 4), (spec_new("a", 7, max_tokens=4),))
    want, rec = reference_world(w)
    with harness.grading(harness.Context(options={})):
        d = start(Spinning, w, rec)
        with cut_short_by_an_alarm("the learner's thread"):
            step(d, 1, want, rec)
