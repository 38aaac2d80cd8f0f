"""Exercises 129 (scheduler) and 131 (preemption): the reference passes in the sandbox, the untouched starter says
"not implemented yet", every deliberately wrong solution in tests/judge_cases/<slug>/wrong_*.py is rejected with
the diagnosis its EXPECT line names (an infinite loop by the sandbox's time limit), differently written correct
ones are accepted, and the workloads really exercise what the case names promise."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge.hidden import preemption, scheduler
from judge.hidden.lockstep import reference_world
from judge.loader import load_file
from solutions import scheduler as ref

from fixture_header import cases_of, expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases"
EXERCISES = {129: ("scheduler", scheduler), 131: ("preemption", preemption)}
LOOPS = CASES_DIR / "preemption" / "wrong_loops_forever_on_self.py"
E2E = next(n for n in preemption.CASES.names() if n.startswith("end to end"))


def fixtures(prefix: str) -> list[tuple[int, Path]]:
    return [(ex, p) for ex, (folder, _) in EXERCISES.items()
            for p in sorted((CASES_DIR / folder).glob(f"{prefix}_*.py")) if p != LOOPS]


WRONG, RIGHT = fixtures("wrong"), fixtures("right")



@pytest.mark.parametrize("ex_id", EXERCISES)
def test_registered_with_statement_and_enough_fixtures(ex_id):
    ex = judge.get_exercise(ex_id)
    assert judge.get_exercise(ex.slug) == ex
    assert (ROOT / ex.statement).is_file() and (ROOT / ex.practice_file).is_file()
    assert sum(1 for e, _ in WRONG if e == ex_id) >= 8 and sum(1 for e, _ in RIGHT if e == ex_id) >= 2


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_reference_passes_every_case_in_the_sandbox(ex_id, model_dir):
    report = judge.grade(ex_id, reference=True, options={"model": model_dir})
    n = len(EXERCISES[ex_id][1].CASES)
    assert report.ok and len(report.results) == n, report.text()
    assert report.text().splitlines()[-1] == f"{n} passed, 0 failed"


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_untouched_starter_says_not_implemented(ex_id, model_dir):
    ex = judge.get_exercise(ex_id)
    if "raise NotImplementedError" not in (ROOT / ex.practice_file).read_text():
        pytest.skip(f"{ex.practice_file} has been filled in")
    report = judge.grade(ex_id, options={"model": model_dir})
    assert report.passed == 0 and report.failed == len(EXERCISES[ex_id][1].CASES), report.text()
    assert {r.verdict for r in report.results} == {"not implemented"}, report.text()
    assert "not implemented yet" in report.text() and ex.practice_file in report.text()


@pytest.mark.parametrize("ex_id,path", WRONG, ids=[p.stem for _, p in WRONG])
def test_wrong_solution_is_rejected_with_its_diagnosis(ex_id, path, model_dir):
    report = judge.grade_inprocess(ex_id, load_file(path), cases=cases_of(path), options={"model": model_dir})
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("ex_id,path", RIGHT, ids=[p.stem for _, p in RIGHT])
def test_correct_variant_is_accepted(ex_id, path, model_dir):
    report = judge.grade_inprocess(ex_id, load_file(path), options={"model": model_dir})
    assert report.ok, report.text()


def test_infinite_loop_on_self_preemption_is_a_timeout():
    case = "allocate_or_preempt: the request is its own victim, returns False"
    report = judge.grade(131, LOOPS, cases=[case, "allocate_or_preempt: enough free blocks"], time_limit=3)
    verdicts = {r.name: r.verdict for r in report.results}
    assert verdicts[case] == "timeout" and report.passed == 1, report.text()


# (Dropping the outputs of a greedy request only wastes work: it regenerates the same tokens; the lockstep
# workloads catch that one.)
@pytest.mark.parametrize("name", ["wrong_num_computed_not_reset", "wrong_blocks_dropped_not_freed",
                                  "wrong_true_after_self_preemption"])
def test_end_to_end_case_catches_wrong_preemption(name, model_dir):
    report = judge.grade_inprocess(131, load_file(CASES_DIR / "preemption" / f"{name}.py"), cases=[E2E],
                                   options={"model": model_dir})
    assert report.failed == 1, report.text()


def test_a_failing_random_workload_is_shrunk_to_a_few_requests():
    report = judge.grade_inprocess(129, load_file(CASES_DIR / "scheduler" / "wrong_lifo_admission.py"),
                                   cases=["random workloads: chunked prefill"])
    shown = report.results[0].details["input"]
    assert shown.startswith("kv = KVCacheManager(") and shown.count("s.add_request(") == 2, shown


# ---------------------------------------------------------------- the workloads exercise what they claim

def reference_stats(workloads: list[scheduler.Workload]) -> dict[str, int]:
    """What the reference does on the workloads: preemptions, prompt chunks, prefix hits, admissions refused."""
    stats = {"preempted": 0, "chunks": 0, "hits": 0, "steps": 0}
    for w in workloads:
        world = reference_world(w)[0]
        for step in range(1, 400):
            if not world.pending(step):
                break
            world.arrive(step)
            out = world.sched.schedule()
            stats["steps"] += 1
            stats["preempted"] += len(out.preempted)
            stats["chunks"] += sum(1 for s in out.scheduled if not s.completes_prompt)
            world.update(out.scheduled)
        assert not world.pending(400) and world.kv.num_free_blocks == w.config.num_blocks
        stats["hits"] += sum(r.num_cached_tokens > 0 for r in world.requests.values())
    return stats


def test_random_workloads_chunk_preempt_and_hit_the_prefix_cache():
    h = scheduler
    chunked = reference_stats(h.random_workloads(129, 24, h._cfg_chunked, (2, 8), (1, 30), (1, 8)))
    whole = reference_stats(h.random_workloads(130, 24, h._cfg_whole, (2, 8), (1, 16), (1, 6)))
    small = reference_stats(h.random_workloads(131, 32, h._cfg_small, (2, 6), (1, 14), (1, 10), last_arrival=4))
    prefix = reference_stats(h.random_workloads(132, 24, h._cfg_prefix, (3, 8), (1, 10), (1, 5),
                                                shared_prefixes=True))
    assert chunked["chunks"] > 50 and whole["chunks"] == 0
    assert small["preempted"] > 20 and prefix["hits"] > 20


def test_unit_states_of_131_preempt_as_described():
    """The hand-built states: who is preempted and what allocate_or_preempt returns, per the reference."""
    def run(w, rid, n, scheduled=()):
        world = reference_world(w)[0]
        out = ref.SchedulerOutput()
        for other in scheduled:
            assert world.kv.allocate_slots(world.requests[other], 1)
            out.scheduled.append(ref.ScheduledRequest(world.requests[other], 1))
        ok = world.sched.allocate_or_preempt(world.requests[rid], n, out)
        return ok, [r.request_id for r in out.preempted], [s.request.request_id for s in out.scheduled]

    assert run(preemption.TWO, "a", 1) == (True, ["b"], [])
    assert run(preemption.THREE, "a", 1) == (True, ["c"], [])
    assert run(preemption.THREE, "a", 9) == (True, ["c", "b"], [])
    assert run(preemption.TWO, "b", 2) == (False, ["b"], [])
    assert run(preemption.THREE, "c", 5) == (False, ["c"], [])
    w = scheduler.Workload(scheduler.Config(2, 4, 64, 8), (scheduler.spec_running("p", 6, 4, max_tokens=2),
                                                          scheduler.spec_running("d", 4, 3, max_tokens=2, first=20)))
    assert run(w, "p", 2, scheduled=("d",)) == (True, ["d"], [])
