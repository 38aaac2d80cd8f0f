"""Exercise 135's hidden tests: the reference passes in the sandbox, the starter says "not implemented yet", every
deliberately wrong solution in tests/judge_cases/tensor_parallel/ is rejected with the diagnosis its EXPECT line
names, and differently written correct ones are accepted. The grading's summing all-reduce is checked against the
reference sharding run in one process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import judge
from judge.drivers.tensor_parallel import SummingGroup
from judge.hidden import tensor_parallel
from judge.loader import load_file

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases" / "tensor_parallel"
WRONG = sorted(CASES_DIR.glob("wrong_*.py"))
RIGHT = sorted(CASES_DIR.glob("right_*.py"))



def test_registered_with_statement_and_fixtures():
    ex = judge.get_exercise(135)
    assert ex == judge.get_exercise("tensor-parallel") and ex.practice_file == "practice/tensor_parallel.py"
    assert (ROOT / ex.statement).is_file() and ex.reference == "solutions.tensor_parallel"
    assert len(WRONG) >= 5 and len(RIGHT) >= 2
    assert "solutions" not in (ROOT / ex.practice_file).read_text()


def test_reference_passes_every_case_in_the_sandbox():
    report = judge.grade(135, reference=True)
    n = len(tensor_parallel.CASES)
    assert report.ok and len(report.results) == n, report.text()
    assert report.text().splitlines()[-1] == f"{n} passed, 0 failed"


def test_untouched_starter_says_not_implemented():
    ex = judge.get_exercise(135)
    if "raise NotImplementedError" not in (ROOT / ex.practice_file).read_text():
        pytest.skip(f"{ex.practice_file} has been filled in")
    report = judge.grade(135)
    assert report.passed == 0 and report.failed == len(tensor_parallel.CASES), report.text()
    assert {r.verdict for r in report.results} == {"not implemented"}, report.text()
    assert "not implemented yet" in report.text() and ex.practice_file in report.text()


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_solution_is_rejected(path):
    report = judge.grade_inprocess(135, load_file(path))
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("path", RIGHT, ids=[p.stem for p in RIGHT])
def test_correct_variants_are_accepted(path):
    report = judge.grade_inprocess(135, load_file(path))
    assert report.ok, report.text()


def test_summing_group_is_a_sum_over_ranks():
    """The oracle of the forward cases: the driver's all_reduce returns every rank the sum of their tensors."""
    import threading

    group, parts, got = SummingGroup(3), [torch.randn(2, 4) for _ in range(3)], [None] * 3
    threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, group.all_reduce_of(r)(parts[r])))
               for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.allclose(g, parts[0] + parts[1] + parts[2]) for g in got)
