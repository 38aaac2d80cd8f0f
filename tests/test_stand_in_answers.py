"""The stand-in KV-cache manager (judge/drivers/stand_ins.py) answers some allocations itself, without crossing to
the grader: each of those answers is what the grader's KV-cache manager answers on the same state, and changes
nothing there; and they are most of the allocations of a scheduler's workload (what keeps 129 quick to grade)."""

from __future__ import annotations

from collections import Counter

import pytest

import judge.drivers as drivers
from judge import harness
from judge.drivers import host_call, hosts, stand_ins
from judge.drivers import scheduler as drv
from judge.hidden import scheduler as hidden
from judge.hidden.lockstep import Config, Workload, random_workloads, spec_new
from solutions import scheduler as ref


def run(workloads) -> None:
    with harness.grading(harness.Context(options={})):
        for w in workloads:
            drv.new_world(ref, "world", w.plain())
            step = 1
            while drivers.kept("world").pending(step):
                drv.step(ref, "world", step)
                step += 1


# blocks run out (admissions fail), with and without prefix caching, then random ones of each kind
FULL = (spec_new("a", 9, 3), spec_new("b", 9, 3, first=50), spec_new("c", 2, 2, first=70))
WORKLOADS = [Workload(Config(6, 4, 64, 8), FULL), Workload(Config(6, 4, 64, 8, prefix=True), FULL),
             *random_workloads(5, 12, hidden._cfg_small, (2, 6), (1, 14), (1, 10), last_arrival=4),
             *random_workloads(6, 8, hidden._cfg_prefix, (3, 8), (1, 10), (1, 5), shared_prefixes=True)]


def test_answers_given_in_the_worker_are_the_graders(monkeypatch):
    checked = Counter()
    known_allocation = stand_ins.Link.known_allocation

    def checking(link, name, request, n, computed):
        got = known_allocation(link, name, request, n, computed)
        if got is not None:
            answer = host_call(link.host, "allocate_slots", link.state(), name, n, computed)
            assert answer["value"] is got
            state = answer["state"]
            assert not state["requests"] and "free" not in state and not state.get("named"), state
            checked[got, link.layout[2]] += 1
        return got

    monkeypatch.setattr(stand_ins.Link, "known_allocation", checking)
    run(WORKLOADS)
    # every kind of answer was checked: success and failure, with and without prefix caching
    assert set(checked) == {(True, False), (False, False), (True, True), (False, True)}, checked


@pytest.mark.parametrize("prefix", [False, True])
def test_most_allocations_do_not_cross(monkeypatch, prefix):
    crossed, asked = Counter(), Counter()
    serve = hosts.serve_callback
    monkeypatch.setattr(hosts, "serve_callback", lambda host, name, args, allowed=None: (
        crossed.update([name]), serve(host, name, args, allowed))[1])
    for cls, op in ((stand_ins.RemoteKVCacheManager, "allocate_slots"),
                    (stand_ins.RemotePreemption, "allocate_or_preempt")):
        def counted(self, *args, _op=op, _fn=getattr(cls, op)):
            asked.update([_op])
            return _fn(self, *args)
        monkeypatch.setattr(cls, op, counted)
    run([w for w in WORKLOADS if w.config.prefix == prefix])
    allocations = asked["allocate_slots"] + asked["allocate_or_preempt"]
    assert crossed["allocate_slots"] + crossed["allocate_or_preempt"] < 0.8 * allocations, (crossed, asked)
