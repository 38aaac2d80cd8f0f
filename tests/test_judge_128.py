"""Exercise 128's hidden tests: the reference passes, the starter says "not implemented yet", every deliberately
wrong build_batch in tests/judge_cases/batch_layout/ is rejected with the expected diagnosis, and differently
written correct ones are accepted (values are compared, not containers)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

import judge
from judge.hidden import batch_layout
from judge.loader import load_file
from judge.sandbox import bwrap_problem

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases" / "batch_layout"
WRONG = sorted(CASES_DIR.glob("wrong_*.py"))
RIGHT = sorted(CASES_DIR.glob("right_*.py"))
E2E = next(n for n in batch_layout.CASES.names() if n.startswith("end to end"))
FAST = [n for n in batch_layout.CASES.names() if n != E2E]



def test_registered():
    ex = judge.get_exercise(128)
    assert ex is judge.get_exercise("batch-layout") or ex == judge.get_exercise("batch-layout")
    assert ex.practice_file == "practice/batch.py" and ex.reference == "solutions.batch"
    assert (ROOT / ex.statement).is_file()
    assert len(WRONG) >= 10 and len(RIGHT) >= 3


def test_reference_passes_every_case_in_the_sandbox():
    report = judge.grade(128, reference=True)
    assert report.ok, report.text()
    assert len(report.results) == len(batch_layout.CASES)
    assert report.text().splitlines()[-1] == f"{len(batch_layout.CASES)} passed, 0 failed"


def test_reference_passes_in_process(model_dir):
    from solutions import batch

    report = judge.grade_inprocess(128, batch, options={"model": model_dir})
    assert report.ok, report.text()


def test_untouched_starter_says_not_implemented():
    starter = ROOT / "practice" / "batch.py"
    if "raise NotImplementedError" not in starter.read_text():
        pytest.skip("practice/batch.py has been filled in")
    report = judge.grade(128, cases=FAST[:3])
    assert report.passed == 0 and report.failed == 3
    assert {r.verdict for r in report.results} == {"not implemented"}
    text = report.text()
    assert "not implemented yet: build_batch raises NotImplementedError" in text
    assert "practice/batch.py" in text
    with pytest.raises(AssertionError, match="not implemented yet"):
        judge.check(128, starter, cases=FAST[:1])


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_build_batch_is_rejected(path):
    report = judge.grade_inprocess(128, load_file(path), cases=FAST)
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("path", RIGHT, ids=[p.stem for p in RIGHT])
def test_correct_variants_are_accepted(path, model_dir):
    report = judge.grade_inprocess(128, load_file(path), options={"model": model_dir})
    assert report.ok, report.text()


@pytest.mark.parametrize("name", ["wrong_positions_from_zero", "wrong_seq_lens_without_cached",
                                  "wrong_slot_off_at_block_boundary"])
def test_end_to_end_case_catches_wrong_batches(name, model_dir):
    report = judge.grade_inprocess(128, load_file(CASES_DIR / f"{name}.py"), cases=[E2E],
                                   options={"model": model_dir})
    assert report.failed == 1, report.text()
    assert "differ from running it alone" in report.results[0].message


def test_shrinking_shows_a_small_input():
    report = judge.grade_inprocess(128, load_file(CASES_DIR / "wrong_slot_off_at_block_boundary.py"),
                                   cases=["mixed prefills, chunks and decodes"])
    shown = report.results[0].details["input"]
    items = eval(shown[len("build_batch("):].rsplit(", block_size=", 1)[0])  # noqa: S307 - our own output
    assert len(items) == 1 and len(items[0][0]) <= 8, shown
    assert "at block boundaries" in report.results[0].details["hint"]


def test_check_api_for_functions_and_source(model_dir):
    from solutions.batch import build_batch

    assert judge.check(128, build_batch, cases=FAST) is None  # a function object: in process
    with pytest.raises(AssertionError, match="wrong positions"):
        judge.check(128, load_file(CASES_DIR / "wrong_positions_from_zero.py").build_batch, cases=FAST[:3])
    source = (CASES_DIR / "right_pure_python_lists.py").read_text()
    assert judge.check(128, source=source, cases=FAST[:2]) is None  # source text: in the sandbox


def test_cli_grades_a_folder_into_csv(tmp_path):
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name in ("right_numpy_vectorized.py", "wrong_positions_from_zero.py"):
        (folder / name).write_text((CASES_DIR / name).read_text())
    out = tmp_path / "grades.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "practice" / "judge.py"), "128", "--impl", str(folder),
                           "--csv", str(out), "--case", "single", "--case", "mixed",
                           *([] if bwrap_problem() is None else ["--unisolated"])],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # positions from zero are right for a prefill (single prefill passes), wrong elsewhere
    assert proc.stdout.rstrip("\n").splitlines()[-1] == "4 passed, 2 failed"
    rows = list(csv.DictReader(out.open()))
    assert [r["student"] for r in rows] == ["right_numpy_vectorized", "wrong_positions_from_zero"]  # file stems
    assert [(r["exercise"], r["passed"], r["failed"], r["score"]) for r in rows] == [
        ("128", "3", "0", "100.0"), ("128", "1", "2", "33.3")]


@pytest.mark.parametrize("name, field", [("wrong_local_logits_indices", "logits_indices"),
                                         ("wrong_positions_from_zero", "positions")])
def test_end_to_end_failure_is_shrunk_labelled_and_names_its_attribute(name, field, model_dir):
    """The end-to-end case shows the smallest part of the step's batch that is still wrong, each item labelled
    with its request and what it is, and the hint of the attribute that differs (not a generic one)."""
    report = judge.grade_inprocess(128, load_file(CASES_DIR / f"{name}.py"), cases=[E2E],
                                   options={"model": model_dir})
    details = report.results[0].details
    assert details["field"] == field, report.text()
    assert "# request " in details["input"] and details["input"].count("# request ") <= 2, report.text()
    other = "positions" if field == "logits_indices" else "logits_indices"
    assert other not in details["hint"], report.text()
    items = eval(details["input"][len("build_batch("):].rsplit(", block_size=", 1)[0])  # noqa: S307 - our output
    assert all(len(it) == 4 for it in items)
