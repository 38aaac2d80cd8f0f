"""Class grading that no submission can stall, exhaust, spoof, or use to carry answers out.

tests/judge_cases/attacks_24/ holds one submission per attack (each file says what it does and what its honest
part earns) and two honest ones, one graded right after the memory bomb. They are graded as one class folder by
the CLI (`--impl DIR --csv`, isolated, the grader under a 2 GB address-space limit), on four cases with short
limits: each submission gets a row and scores no more than its honest part, the honest ones full marks, the run
ends within the caps, every report is within its size cap, printable (no terminal control character) and free of
any line of the reference and of the hidden inputs the recording submission printed. Also: the grader's memory
budget stops a submission and the next one starts clean; a non-editable install is refused before anything runs.

The CLI part needs bubblewrap; it is skipped, saying so, only where it cannot run (CI installs it).
"""

from __future__ import annotations

import csv
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import judge
from judge import cli, report, sandbox, worker_process
from judge.runner import IsolationUnavailable

ROOT = Path(__file__).resolve().parent.parent
ATTACKS = ROOT / "tests" / "judge_cases" / "attacks_24"
CASES = ["single prefill", "single decode", "prefill only", "many requests"]
TIMEOUT, TOTAL_TIMEOUT = 4, 12  # seconds per case and per submission
HONEST_PART = {  # cases each submission's honest part passes, of CASES
    "class_name_growth": 4, "endless_pipe_lines": 0, "escape_codes": 3, "exception_name_growth": 0,
    "forged_replies_ahead": 0, "honest": 4, "megabyte_exception": 0, "memory_bomb": 0,
    "memory_bomb_then_honest": 4, "pipe_garbage_at_import": 0, "records_and_dumps_inputs": 3,
}
needs_bwrap = pytest.mark.skipif(sandbox.bwrap_problem() is not None,
                                 reason=f"isolated grading needs bubblewrap: {sandbox.bwrap_problem()}")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[list[dict], dict[str, str], float]:
    """(CSV rows, {student: report text}, seconds) of the class folder graded by the CLI."""
    tmp = tmp_path_factory.mktemp("class24")
    out = tmp / "grades.csv"
    args = [sys.executable, str(ROOT / "practice" / "judge.py"), "128", "--impl", str(ATTACKS), "--csv", str(out),
            "--timeout", str(TIMEOUT), "--total-timeout", str(TOTAL_TIMEOUT), "--memory", "1024"]
    for c in CASES:
        args += ["--case", c]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=tmp,
                         preexec_fn=_limit_memory)
    seconds = time.monotonic() - t0
    assert out.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    reports = {}
    for block in run.stdout.split("== exercise ")[1:]:
        student = re.search(r"grading .*?([\w]+)\.py", block)[1]
        reports[student] = "== exercise " + block.split("\n-- ")[0]
    return list(csv.DictReader(out.open())), reports, seconds


@needs_bwrap
def test_each_submission_scores_at_most_its_honest_part(graded):
    rows, _, _ = graded
    passed = {r["student"]: int(r["passed"]) for r in rows}
    assert passed == HONEST_PART, passed
    assert all(int(r["passed"]) + int(r["failed"]) == len(CASES) for r in rows), rows


@needs_bwrap
def test_the_class_ends_within_its_caps(graded):
    _, _, seconds = graded
    assert seconds < len(HONEST_PART) * (TOTAL_TIMEOUT + 10), seconds


@needs_bwrap
def test_reports_are_bounded_printable_and_carry_no_answer(graded):
    _, reports, _ = graded
    assert set(reports) == set(HONEST_PART)
    reference = {ln.strip() for ln in (ROOT / "solutions" / "batch.py").read_text().splitlines()
                 if len(ln.strip()) > 25}
    for student, text in reports.items():
        assert len(text) <= report.REPORT_LIMIT + 200, (student, len(text))
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", text), student  # escape codes are shown escaped
        assert not [ln for ln in reference if ln in text], student
        assert str(ROOT) not in text, student  # no folder of the grader's machine
    dumped = reports["records_and_dumps_inputs"]
    assert dumped.count("<<INPUT") <= report.TEXT_LIMIT // 40  # only the capped message of its failing case
    assert "\\x1b[2J" in reports["escape_codes"]


def test_the_grader_memory_budget_ends_a_submission_and_the_next_starts_clean(monkeypatch):
    monkeypatch.setattr(worker_process, "GRADER_MEMORY_MB", 40)  # one padded reply of the bomb is ~150 MB
    bomb = judge.grade(128, ATTACKS / "memory_bomb.py", cases=CASES[:2], time_limit=TIMEOUT, memory_limit_mb=1024)
    assert [r.verdict for r in bomb.results] == ["grader memory", "not run"], bomb.text()
    honest = judge.grade(128, ATTACKS / "honest.py", cases=CASES[:2], time_limit=TIMEOUT)
    assert honest.ok, honest.text()


def test_a_non_editable_install_is_refused(tmp_path, monkeypatch, capsys):
    """`pip install .` copies solutions/ and judge/hidden/ into site-packages, which the sandbox mounts."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "__init__.py").write_text("")
    monkeypatch.setattr(sandbox, "site_packages", lambda: [str(tmp_path)])
    problem = sandbox.install_problem()
    assert problem and "pip install -e ." in problem and str(tmp_path / "solutions") in problem
    with pytest.raises(IsolationUnavailable, match="pip install -e"):
        judge.grade(128, ATTACKS / "honest.py", isolated=True)
    out = tmp_path / "grades.csv"
    assert cli.main(["128", "--impl", str(ATTACKS), "--csv", str(out)]) == 2
    assert "pip install -e ." in capsys.readouterr().err and not out.exists()


def test_hidden_cases_in_site_packages_are_refused_too(tmp_path, monkeypatch):
    (tmp_path / "judge" / "hidden").mkdir(parents=True)
    (tmp_path / "judge" / "__init__.py").write_text("")
    (tmp_path / "judge" / "hidden" / "__init__.py").write_text("")
    monkeypatch.setattr(sandbox, "site_packages", lambda: [str(tmp_path)])
    assert str(tmp_path / "judge" / "hidden") in sandbox.install_problem()
    monkeypatch.setattr(sandbox, "site_packages", lambda: [str(tmp_path / "nothing")])
    assert sandbox.install_problem() is None
