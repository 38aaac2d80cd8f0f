"""Exercise 134's hidden tests: the reference passes, the starter says "not implemented yet", every deliberately
wrong verify_and_update in tests/judge_cases/spec_decode/ is rejected with the expected diagnosis, and
differently written correct ones are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge.hidden import spec_decode
from judge.loader import load_file

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases" / "spec_decode"
WRONG = sorted(CASES_DIR.glob("wrong_*.py"))
RIGHT = sorted(CASES_DIR.glob("right_*.py"))



def test_registered():
    ex = judge.get_exercise(134)
    assert ex == judge.get_exercise("spec-decode")
    assert ex.practice_file == "practice/spec_decode.py" and ex.reference == "solutions.spec_decode"
    assert (ROOT / ex.statement).is_file()
    assert set(ex.public_cases) <= set(spec_decode.CASES.names())
    assert len(WRONG) >= 5 and len(RIGHT) >= 2


def test_reference_passes_every_case_in_the_sandbox():
    report = judge.grade(134, reference=True)
    assert report.ok, report.text()
    assert report.text().splitlines()[-1] == f"{len(spec_decode.CASES)} passed, 0 failed"


def test_untouched_starter_says_not_implemented():
    starter = ROOT / "practice" / "spec_decode.py"
    if "raise NotImplementedError" not in starter.read_text():
        pytest.skip("practice/spec_decode.py has been filled in")
    assert "solutions" not in starter.read_text()  # the stub never imports the answer
    names = spec_decode.CASES.names()[:2]
    report = judge.grade(134, cases=names)
    assert report.passed == 0 and report.failed == 2
    assert {r.verdict for r in report.results} == {"not implemented"}
    assert "not implemented yet: verify_and_update raises NotImplementedError" in report.text()


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_verify_and_update_is_rejected(path):
    report = judge.grade_inprocess(134, load_file(path))
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("path", RIGHT, ids=[p.stem for p in RIGHT])
def test_correct_variants_are_accepted(path):
    report = judge.grade_inprocess(134, load_file(path))
    assert report.ok, report.text()
