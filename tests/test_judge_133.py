"""Exercise 133 (the online loop): the reference passes in the sandbox, the untouched starter says "not
implemented yet", every deliberately wrong loop in tests/judge_cases/online_loop/ is rejected with the expected
diagnosis, and differently written correct ones are accepted. A fixture's `CASES:` line, when it has one, names
the cases it is graded on (a stream that hangs costs the driver's read timeout in every case)."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge.hidden import online_loop
from judge.loader import load_file

from fixture_header import cases_of, expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases" / "online_loop"
WRONG = sorted(CASES_DIR.glob("wrong_*.py"))
RIGHT = sorted(CASES_DIR.glob("right_*.py"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_registered():
    ex = judge.get_exercise(133)
    assert ex == judge.get_exercise("online-loop")
    assert ex.practice_file == "practice/async_engine.py" and ex.reference == "solutions.async_engine"
    assert (ROOT / ex.statement).is_file()
    assert len(WRONG) >= 8 and len(RIGHT) >= 2
    assert "solutions" not in (ROOT / ex.practice_file).read_text().split('"""', 2)[2]


def test_reference_passes_in_the_sandbox(model_dir):
    report = judge.grade(133, reference=True, options={"model": model_dir})
    assert report.ok, report.text()
    assert report.text().splitlines()[-1] == f"{len(online_loop.CASES)} passed, 0 failed"


def test_untouched_starter_says_not_implemented(model_dir):
    if "raise NotImplementedError" not in (ROOT / "practice/async_engine.py").read_text():
        pytest.skip("practice/async_engine.py has been filled in")
    report = judge.grade(133, options={"model": model_dir})
    assert report.passed == 0, report.text()
    assert {r.verdict for r in report.results} == {"not implemented"}, report.text()
    assert "not implemented yet: AsyncLLM" in report.text()


@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_wrong_version_is_rejected(path, model_dir):
    report = judge.grade_inprocess(133, load_file(path), cases=cases_of(path), options={"model": model_dir})
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()
    assert all(r.verdict in ("pass", "fail", "error") for r in report.results), report.text()


@pytest.mark.parametrize("path", RIGHT, ids=lambda p: p.stem)
def test_correct_version_is_accepted(path, model_dir):
    report = judge.grade_inprocess(133, load_file(path), options={"model": model_dir})
    assert report.ok, report.text()


def test_a_request_whose_failed_step_came_before_its_abort_ends_with_error():
    """Aborting a finished request does nothing: a request that a failing step ended before its abort reached the
    engine is expected to end with 'error', whatever the schedule meant to abort (a loop that lags a few steps
    behind the schedule under load is still right). The order is the one of the worker's engine calls."""
    run = online_loop.Run.__new__(online_loop.Run)
    run.steps = [{"scheduled": ["a", "b"], "failed": False}, {"scheduled": ["b"], "failed": True}]
    run.log = [["add", "a"], ["add", "b"], ["step"], ["step"], ["abort", ["b"], "abort"]]
    assert run.failed_before_abort("b") and not run.failed_before_abort("a")
    run.log = [["add", "a"], ["add", "b"], ["step"], ["abort", ["b"], "abort"], ["step"]]
    assert not run.failed_before_abort("b")
