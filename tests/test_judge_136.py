"""Exercise 136's hidden tests: the reference passes in the sandbox, the starter says "not implemented yet", every
deliberately wrong fixture in tests/judge_cases/structured_output/ is rejected with the expected diagnosis, and
differently written correct ones are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge.hidden import structured_output
from judge.loader import load_file

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases" / "structured_output"
WRONG = sorted(CASES_DIR.glob("wrong_*.py"))
RIGHT = sorted(CASES_DIR.glob("right_*.py"))



def test_registered():
    ex = judge.get_exercise(136)
    assert ex == judge.get_exercise("structured-output")
    assert ex.practice_file == "practice/structured_output.py" and ex.reference == "solutions.structured_output"
    assert (ROOT / ex.statement).is_file()
    assert set(ex.public_cases) <= set(structured_output.CASES.names())
    assert len(WRONG) >= 8 and len(RIGHT) >= 3


def test_reference_passes_every_case_in_the_sandbox():
    report = judge.grade(136, reference=True)
    assert report.ok, report.text()
    assert report.text().splitlines()[-1] == f"{len(structured_output.CASES)} passed, 0 failed"


def test_untouched_starter_says_not_implemented():
    starter = ROOT / "practice" / "structured_output.py"
    if "raise NotImplementedError" not in starter.read_text():
        pytest.skip("practice/structured_output.py has been filled in")
    assert "solutions" not in starter.read_text()  # the stub never imports the answer
    names = structured_output.CASES.names()[:2]
    report = judge.grade(136, cases=names)
    assert report.passed == 0 and report.failed == 2
    assert {r.verdict for r in report.results} == {"not implemented"}
    assert "not implemented yet: apply_grammar_bitmask raises NotImplementedError" in report.text()


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_fixture_is_rejected(path):
    report = judge.grade_inprocess(136, load_file(path))
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("path", RIGHT, ids=[p.stem for p in RIGHT])
def test_correct_variants_are_accepted(path):
    report = judge.grade_inprocess(136, load_file(path))
    assert report.ok, report.text()
