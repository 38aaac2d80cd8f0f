"""Every sentence of a statement that states a requirement is graded: for each row of each statement's requirement
table (tests/test_requirement_tables.py reads them), a held-out solution in tests/judge_cases/<folder>/heldout/
breaks exactly that sentence (a row that states two things may have a file for each), and at least one of the
cases the row names must fail on it. The held-out solutions are written from the statements alone, in a learner's
styles, not from solutions/: each folder's correct.py is one such solution that passes every case, and each other
file is that solution with one sentence broken, named on its first line `# VIOLATES: <the row's requirement, as
the table writes it>`. Every row must have its file, so a new row without one fails here.

A sentence that states what the other rules give together (an end-to-end row: "plugged into the model runner,
every request's logits equal running it alone") cannot be broken alone: its file breaks another rule, and is
checked to fail the end-to-end case that row names.

Each file differs from its folder's correct.py by one small edit (`diff heldout/correct.py heldout/<file>.py`
shows the broken sentence). Only the row's cases run, in this process. A break the judge sees only by timing or
under a given machine load (an abort applied while a step runs; an idle loop that spins) has no file here: its
verdict would vary from run to run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_requirement_tables import requirement_rows

import judge
from judge.loader import load_file

CASES_DIR = Path(__file__).parent / "judge_cases"
FOLDERS = {125: "block_pool", 126: "slot_mapping", 127: "paged_attention", 128: "batch_layout", 129: "scheduler",
           130: "inference_loop", 131: "preemption", 132: "prefix_caching", 133: "online_loop", 134: "spec_decode",
           135: "tensor_parallel", 136: "structured_output"}


def rows_of(ex_id: int) -> list[tuple[str, list[str]]]:
    return requirement_rows((judge.ROOT / judge.get_exercise(ex_id).statement).read_text())


def violated(path: Path) -> str | None:
    found = re.match(r"# VIOLATES: (.+)\n", path.read_text())
    return found.group(1) if found else None


def heldout(ex_id: int) -> list[Path]:
    return sorted((CASES_DIR / FOLDERS[ex_id] / "heldout").glob("*.py"))


def table_rows() -> list[tuple[int, str, list[str], Path | None]]:
    """(exercise, requirement, its cases, a held-out file that breaks it) for every such file, and (..., None) for
    every row that no file breaks."""
    out = []
    for ex_id in FOLDERS:
        files = heldout(ex_id)
        for row, cases in rows_of(ex_id):
            breaking = [p for p in files if violated(p) == row]
            out += [(ex_id, row, cases, p) for p in breaking] or [(ex_id, row, cases, None)]
    return out


ROWS = table_rows()


def test_every_exercise_is_covered() -> None:
    assert sorted(FOLDERS) == sorted(judge.load_exercises())


@pytest.mark.parametrize("ex_id", FOLDERS)
def test_each_heldout_file_breaks_a_row_of_the_table_and_each_row_has_one(ex_id: int) -> None:
    rows = [row for row, _ in rows_of(ex_id)]
    files = [p for p in heldout(ex_id) if p.name != "correct.py"]
    broken = [violated(p) for p in files]
    assert (CASES_DIR / FOLDERS[ex_id] / "heldout" / "correct.py").is_file()
    assert not [p.name for p, row in zip(files, broken) if row not in rows], "a file names no row of the table"
    assert not [row for row in rows if row not in broken], "a row has no held-out file that breaks it"


@pytest.mark.parametrize("ex_id", FOLDERS)
def test_the_heldout_correct_solution_passes(ex_id: int) -> None:
    report = judge.grade_inprocess(ex_id, load_file(CASES_DIR / FOLDERS[ex_id] / "heldout" / "correct.py"))
    assert report.ok, report.text()


@pytest.mark.parametrize("ex_id,row,cases,path", ROWS,
                         ids=[f"{ex}-{p.stem if p else 'MISSING'}" for ex, _, _, p in ROWS])
def test_breaking_the_sentence_fails_a_case_its_row_names(ex_id: int, row: str, cases: list[str],
                                                         path: Path | None) -> None:
    assert path is not None, f"no held-out solution breaks {row!r}"
    report = judge.grade_inprocess(ex_id, load_file(path), cases=cases)
    assert sorted(r.name for r in report.results) == sorted(cases), report.text()
    assert not report.ok and any(not r.passed for r in report.results), \
        f"{path.name} breaks {row!r}, and every case the row names passes:\n{report.text()}"
