"""nbgrader autograding with the judge, without running any student code in the notebook's kernel (there it would
have the instructor's rights). nbgrader_config.py puts two preprocessors around nbgrader's Execute: JudgeAutograde
grades the solution cell isolated, in nbgrader's process, as `practice/judge.py --impl` does, and leaves the kernel
only the course's code (the other code cells become raw cells); JudgeRestore then puts back the cells as submitted.
The JUDGE_* variables (docs/instructors.md) set the judge's options; JUDGE_UNISOLATED=1 grades without bubblewrap."""

from __future__ import annotations

import json
import os
import re
import tempfile
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import sandbox
from .drivers import model_problem
from .registry import Exercise, get_exercise
from .report import CaseResult, Report, clean

REPORT_ENV = "JUDGE_NOTEBOOK_REPORT"
HIDDEN_NOTE = "a hidden test case: graded after you submit"


def options_from_env() -> dict[str, Any]:
    env = os.environ.get
    return {"time_limit": float(env("JUDGE_TIMEOUT")) if env("JUDGE_TIMEOUT") else None,
            "memory_limit_mb": int(env("JUDGE_MEMORY_MB")) if env("JUDGE_MEMORY_MB") else None,
            "options": {"model": env("JUDGE_MODEL")} if env("JUDGE_MODEL") else None,
            "total_limit": float(env("JUDGE_TOTAL_TIMEOUT")) if env("JUDGE_TOTAL_TIMEOUT") else None,
            "cases": [c for c in env("JUDGE_CASES", "").split(",") if c] or None}


def notebook_report(exercise: int, code: str) -> Report:
    """The judge cell's report: the one JudgeAutograde wrote, else graded here (a student checking their work)."""
    path = os.environ.get(REPORT_ENV)
    if path and os.path.isfile(path):
        saved = json.loads(Path(path).read_text())
        results = [CaseResult(**r) for r in saved.pop("results", [])]
        return Report(**saved, results=results)
    from .runner import grade

    print(sandbox.NOT_ISOLATED)
    return grade(exercise, source=code, **options_from_env())


class CaseFailed(AssertionError):
    """A test case's cell failed (0 points). IPython shows its message alone: the feedback shows no traceback, so
    no folder of the grader's machine and no line of the course's code."""

    def _render_traceback_(self) -> list[str]:
        return [f"AssertionError: {self}"]


def case_check(report: Report, name: str) -> None:
    """Raise CaseFailed unless case `name` passed; one this copy lacks (a hidden one) is announced."""
    found = [r for r in report.results if r.name == name]
    if not found:
        if report.fatal:
            raise CaseFailed(clean(report.fatal))
        print(HIDDEN_NOTE)
        return
    if not found[0].passed:  # the details are in the judge cell's report (bounded once there)
        raise CaseFailed(f"[{found[0].verdict}] {found[0].message}\n(the judge's report above says more)")


TRUSTED_JUDGE_CELL = """\
# The report of the judge, graded outside this notebook (see judge/nbgrading.py).
import judge.nbgrading

_report = judge.nbgrading.notebook_report({id}, "")
print(_report.text())
"""
# A case cell reads the report itself: a notebook whose judge cell was deleted is graded all the same
TRUSTED_CASE_CELL = """\
import judge.nbgrading

judge.nbgrading.case_check(judge.nbgrading.notebook_report({id}, ""), {name!r})
"""


def _exercise_of(assignment: str) -> int:
    m = re.match(r"ex(\d+)-", assignment)
    if not m:
        raise ValueError(f"assignment {assignment!r} is not one of the judge's (ex<id>-<slug>)")
    return int(m[1])


def _grade_id(cell) -> str:
    return str((cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id", ""))


try:
    from nbgrader.preprocessors import NbGraderPreprocessor as _Base
except ImportError:  # pragma: no cover - nbgrader not installed: the preprocessors are not used
    _Base = object  # type: ignore[assignment,misc]


class JudgeAutograde(_Base):
    """Grade the solution cell outside the kernel; leave the kernel nothing but the course's own code."""

    def preprocess(self, nb, resources):
        from .cli import case_names

        ex = get_exercise(_exercise_of(resources["nbgrader"]["assignment"]))
        report = _graded(ex, nb)
        graded = {r.name for r in report.results}  # every case gets a result: one not run scores 0
        names = case_names(ex)
        report.results += [CaseResult(n, False, 0.0, "not run", "not run (JUDGE_CASES)") for n in names
                           if n not in graded and not report.fatal]
        fd, path = tempfile.mkstemp(prefix=f"judge-{os.getpid()}-report-", suffix=".json")  # swept if killed
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(report), f)
        os.environ[REPORT_ENV] = path
        resources["judge_report"] = path
        originals = {}
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            originals[i] = (cell.cell_type, cell.source)
            gid = _grade_id(cell)
            m = re.fullmatch(r"case_(\d+)", gid)
            if gid == "judge":
                cell.source = TRUSTED_JUDGE_CELL.format(id=ex.id)
            elif m and 1 <= int(m[1]) <= len(names):
                cell.source = TRUSTED_CASE_CELL.format(id=ex.id, name=names[int(m[1]) - 1])
            else:  # the solution cell and anything a student added: never executed
                cell.cell_type = "raw"
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
        resources["judge_originals"] = originals
        return nb, resources


def _graded(ex: Exercise, nb: Any) -> Report:
    """The report of the notebook's solution cell, graded isolated unless JUDGE_UNISOLATED=1."""
    from .runner import IsolationUnavailable, grade, joined_cells

    solutions = [c for c in nb.cells if c.cell_type == "code" and _grade_id(c) == "solution"]
    report = Report(ex.id, ex.slug, ex.title, "the submitted notebook")
    if not solutions:
        report.fatal = "the notebook has no solution cell (grade_id 'solution'): nothing to grade"
        return report
    isolated = os.environ.get("JUDGE_UNISOLATED") != "1"
    model = os.environ.get("JUDGE_MODEL")
    problem = model and model_problem(model)
    if problem:  # as a missing sandbox: no student is graded, none gets a zero for the course's setup
        raise RuntimeError(f"refusing to autograde: JUDGE_MODEL={model}: the end-to-end cases cannot load this "
                           f"checkpoint ({problem})")
    try:
        source = joined_cells([c.source for c in solutions])
        return grade(ex, source=source, isolated=isolated, **options_from_env())
    except IsolationUnavailable as exc:
        advice = "" if sandbox.install_problem() else \
            " (JUDGE_UNISOLATED=1 grades without bubblewrap, for code you trust.)"
        reason = str(exc).removeprefix("refusing to grade a class: ").rstrip(".")
        raise RuntimeError(f"refusing to autograde: {reason}.{advice}") from None
    except Exception:  # noqa: BLE001 - a judge bug: this notebook scores 0 and is still exported
        traceback.print_exc()  # for the instructor, in nbgrader's log; the feedback names no file of theirs
        report.fatal = "the judge failed on this submission (a bug of the course, not of your code)"
        return report


class JudgeRestore(_Base):
    """Put back the cells as submitted, keeping the outputs of the course's cells."""

    def preprocess(self, nb, resources):
        for i, (cell_type, source) in (resources.pop("judge_originals", None) or {}).items():
            cell = nb.cells[i]
            if cell.cell_type == "raw" and cell_type == "code":
                cell.cell_type = "code"
                cell.outputs, cell.execution_count = [], None
            cell.source = source
        path = resources.pop("judge_report", None)
        if path:
            os.environ.pop(REPORT_ENV, None)
            Path(path).unlink(missing_ok=True)
        return nb, resources
