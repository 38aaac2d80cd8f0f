"""The scripted parts of 129 and 131 (judge/drivers/scripted.py): the worker answers some calls from its state,
without the script, and each of those answers is the reference's; a right scheduler never departs from the script;
a departure is reported with the call made and the call expected, even when the learner's code swallows it."""

from __future__ import annotations

from collections import Counter

from judge import harness
from judge.drivers import kept, scripted
from judge.drivers import scheduler as drv
from judge.hidden import scheduler as hidden
from judge.hidden.lockstep import Config, Workload, plan_of, random_workloads, reference_world, spec_new
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


def test_answers_given_in_the_worker_are_the_references(monkeypatch):
    """The reference scheduler on the scripted parts: no departure, the same plans, and exactly the allocations the
    reference KV-cache manager refused are refused from the state, in the same order."""
    local: list = []
    allocate = scripted.ScriptedKVCacheManager.allocate_slots

    def answered(self, request, n, computed=()):
        consumed = self.replay.consumed
        ok = allocate(self, request, n, computed)
        if self.replay.consumed == consumed:
            local.append([request.request_id, n, list(computed)])
        return ok

    monkeypatch.setattr(scripted.ScriptedKVCacheManager, "allocate_slots", answered)
    refused, kinds = [], Counter()
    with harness.grading(harness.Context(options={})):
        for w in WORKLOADS:
            before = len(refused)
            want, rec = reference_world(w)
            failed_allocations(rec, refused)
            drv.new_world(ref, "world", w.plain(), rec.script())
            step = 1
            while want.pending(step):
                want.arrive(step)
                rec.begin()
                out = want.sched.schedule()
                scheduled = rec.script()
                want.update(out.scheduled)
                res = drv.step(ref, "world", step, {"schedule": scheduled, "update": rec.script()})
                assert "departure" not in res and [tuple(p) for p in res["plan"]] == plan_of(out)[0], res
                assert res["free"] == want.kv.num_free_blocks == kept("world").kv.num_free_blocks
                step += 1
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
        drv.new_world(Swallowing, "world", w.plain(), rec.script())
        want.arrive(1)
        rec.begin()
        out = want.sched.schedule()
        scheduled = rec.script()
        want.update(out.scheduled)
        assert "departure" not in drv.step(Swallowing, "world", 1, {"schedule": scheduled, "update": rec.script()})
        want.arrive(2)
        rec.begin()
        out = want.sched.schedule()
        scheduled = rec.script()
        want.update(out.scheduled)
        res = drv.step(Swallowing, "world", 2, {"schedule": scheduled, "update": rec.script()})
    made, expected = res["departure"]["made"], res["departure"]["expected"]
    assert made["op"] == "free" and made["args"] == ["a"], res
    assert expected["op"] == "allocate_or_preempt" and expected["args"][:2] == ["a", 1], res
