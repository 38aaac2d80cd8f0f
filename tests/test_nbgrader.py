"""nbgrader grading from the judge's hidden tests (nbgrader/, docs/instructors.md).

A temporary course gets the generated assignments of exercises 128 and 130; nbgrader releases them and autogrades
a correct and a wrong submission of each, and a crashing, an endlessly looping and a process-killing one of 128
(the judge's limits are the same for every exercise): the gradebook must hold full marks, less than full marks,
zero, zero and zero. Cheaper checks cover every registered
exercise: its generated solution cell (the reference in solution regions) passes the judge, and clearing the
solutions gives back the learner's stub.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest

import judge
import judge.sandbox

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "judge_cases"
GRADED = (128, 130)
STUDENTS = {128: ("correct", "wrong", "crash", "loop", "dies", "no_judge_cell"), 130: ("correct", "wrong")}
JUDGE_TIMEOUT = "10"  # seconds per case while grading here
JUDGE_TOTAL_TIMEOUT = "25"  # seconds per submission: a loop submission times out twice, then the cap stops it


def _load_generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("make_assignments", ROOT / "nbgrader" / "make_assignments.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


# ------------------------------------------------------------------------------------------------------------
# The generator, for every registered exercise


@pytest.mark.parametrize("ex", list(judge.load_exercises().values()), ids=lambda e: str(e.id))
def test_generated_notebook_matches_the_judge(ex):
    nb = gen.make_notebook(ex)
    nbformat.validate(nb)
    names = [c.source.split("\n")[0] for c in nb.cells if c.metadata["nbgrader"]["grade"]]
    assert names == [f"# {'public' if n in ex.public_cases else 'hidden'} test case {i}: {n}"
                     for i, n in enumerate(gen.case_names(ex), 1)]
    assert sum(name.startswith("# public") for name in names) == len(ex.public_cases) >= 4
    assert all(c.metadata["nbgrader"]["points"] == 1 for c in nb.cells if c.metadata["nbgrader"]["grade"])
    judge_cell = _cell(nb, "judge").source
    assert f"judge.nbgrading.notebook_report({ex.id}, _cell_code(" in judge_cell
    assert all(c.source.rstrip().endswith(")") and c.source.count("\n") == 1  # `_case(...)`: returns None
               for c in nb.cells if c.metadata["nbgrader"]["grade"])


def _released(code: str) -> str:
    """What nbgrader's ClearSolutions makes of a solution cell (its default stub)."""
    from nbgrader.preprocessors import ClearSolutions

    cell = nbformat.v4.new_code_cell(code, metadata={"nbgrader": {"solution": True}})
    ClearSolutions()._replace_solution_region(cell, "python")
    return cell.source


@pytest.mark.parametrize("ex", list(judge.load_exercises().values()), ids=lambda e: str(e.id))
def test_released_code_is_the_stub(ex):
    """Clearing the solutions gives the learner's stub back (docstrings, signatures, imports made absolute): the
    notebook cannot drift from practice/. The only additions are helper methods of the reference."""
    stub = ex.practice_path.read_text()
    stub = "\n".join(stub.splitlines()[gen._code_start(ast.parse(stub)):])
    package = ex.practice_file.split("/")[0]
    stub = re.sub(r"(?m)^from \.(\S*) import", lambda m: f"from {package}{'.' if m[1] else ''}{m[1]} import", stub)
    stub_lines = re.sub(r"raise NotImplementedError\(.*\)", "raise NotImplementedError()", stub).strip().splitlines()
    released = [line for line in _released(gen.solution_code(ex)).strip().splitlines()
                if "# YOUR CODE HERE" not in line]
    ops = difflib.SequenceMatcher(a=stub_lines, b=released, autojunk=False).get_opcodes()
    assert ops, "empty solution cell"
    for tag, a0, a1, b0, b1 in ops:
        assert tag in ("equal", "insert"), f"{ex.practice_file} differs: {stub_lines[a0:a1]} -> {released[b0:b1]}"
        if tag == "insert":
            assert re.match(r"\s+(@|def )", next(line for line in released[b0:b1] if line.strip())), released[b0:b1]


@pytest.mark.parametrize("ex", list(judge.load_exercises().values()), ids=lambda e: str(e.id))
def test_solution_cell_passes_the_judge(ex, model_dir, tmp_path):
    """The reference code in the solution regions (the source notebook's solution cell) passes every case."""
    module = types.ModuleType(f"_nbgrader_solution_{ex.id}")
    sys.modules[module.__name__] = module  # as when the judge imports the cell's code (dataclasses look it up)
    path = tmp_path / f"solution_{ex.id}.py"  # a file, as autograding has: 132 runs it in other processes too
    path.write_text(gen.solution_code(ex))
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the judge's sandbox: the cases are small, threads only contend
    try:
        report = judge.grade_inprocess(ex, module, options={"model": model_dir})
    finally:
        torch.set_num_threads(threads)
    assert report.ok, report.text()


@pytest.mark.parametrize("ex", list(judge.load_exercises().values()), ids=lambda e: str(e.id))
def test_config_time_limits(ex, monkeypatch):
    """The judge cell may run longer than the judge's worst case (so its verdicts come through); other cells get
    the short limit."""
    from judge.runner import STARTUP_TIMEOUT

    monkeypatch.delenv("JUDGE_TIMEOUT", raising=False)
    ns: dict = {"get_config": _Config}
    exec((ROOT / "nbgrader" / "nbgrader_config.py").read_text(), ns)  # noqa: S102
    c = ns["c"]
    nb = gen.make_notebook(ex)
    cases = list(importlib.import_module(ex.tests).CASES)
    assert c.Execute.timeout_func(_cell(nb, "judge")) > ex.total_timeout + STARTUP_TIMEOUT
    monkeypatch.setenv("JUDGE_TIMEOUT", "100")
    assert c.Execute.timeout_func(_cell(nb, "judge")) > ex.total_timeout + STARTUP_TIMEOUT + 100 * len(cases)
    for cell in (_cell(nb, "solution"), _cell(nb, "case_01")):
        assert c.Execute.timeout_func(cell) == c.Execute.timeout == ns["CELL_TIMEOUT"] > 30
    assert c.Execute.interrupt_on_timeout is True


class _Config:
    """Enough of traitlets' Config for nbgrader_config.py: attributes spring into being."""

    def __getattr__(self, name):
        value = types.SimpleNamespace()
        setattr(self, name, value)
        return value


# ------------------------------------------------------------------------------------------------------------
# A course autograded by nbgrader


def _submissions(ex_id: int, solution: str) -> dict[str, str]:
    if ex_id == 128:
        wrong = (CASES / "batch_layout" / "wrong_positions_from_zero.py").read_text()
        crash = "import ctypes\n\n\ndef build_batch(items, block_size):\n    return ctypes.string_at(0)\n"
        loop = "def build_batch(items, block_size):\n    while True:\n        pass\n"
        dies = "import os\n\nos._exit(1)\n"  # kills its process: it never runs in the kernel; the judge gives it 0
        return {"correct": solution, "wrong": wrong, "crash": crash, "loop": loop, "dies": dies,
                "no_judge_cell": solution}  # its notebook lacks the judge cell: the case cells still grade it
    return {"correct": solution, "wrong": (CASES / "inference_loop" / "wrong_max_tokens_off_by_one.py").read_text()}


def _nbgrader(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    bin_dir = os.path.dirname(sys.executable)  # nbgrader runs `alembic` from the venv's bin
    return subprocess.run([os.path.join(bin_dir, "nbgrader"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory, model_dir, copy_generated_course) -> Path:
    course = copy_generated_course(tmp_path_factory.mktemp("course"))  # assignments generated and released
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               JUDGE_TIMEOUT=JUDGE_TIMEOUT, JUDGE_TOTAL_TIMEOUT=JUDGE_TOTAL_TIMEOUT, JUDGE_MODEL=model_dir,
               NBGRADER_EXCHANGE_ROOT=str(course / "exchange"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if judge.sandbox.bwrap_problem():  # autograding refuses to run unisolated unless told to
        env["JUDGE_UNISOLATED"] = "1"
    for ex_id in GRADED:
        name = gen.assignment_name(judge.get_exercise(ex_id))
        released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        solution = _cell(nbformat.read(course / "source" / name / f"{name}.ipynb", as_version=4), "solution").source
        for student, code in _submissions(ex_id, solution).items():
            nb = nbformat.from_dict(released)
            _cell(nb, "solution").source = code
            if student == "no_judge_cell":
                nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "judge"]
            path = course / "submitted" / student / name / f"{name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
    run = _nbgrader(["autograde", "*"], course, env)  # every assignment, in one run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Warning" not in run.stderr, run.stderr[-3000:]  # nothing for an instructor to worry about
    return course


@pytest.mark.parametrize("ex_id", GRADED)
def test_autograded_scores(graded_course, ex_id):
    from nbgrader.api import Gradebook

    name = gen.assignment_name(judge.get_exercise(ex_id))
    with Gradebook(f"sqlite:///{graded_course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission(name, s).score for s in STUDENTS[ex_id]}
        max_score = gb.find_assignment(name).max_score
    assert max_score == len(gen.case_names(judge.get_exercise(ex_id)))
    assert scores["correct"] == max_score == scores.get("no_judge_cell", max_score), scores
    assert 0 <= scores["wrong"] < max_score, scores
    if ex_id == 128:
        assert scores["crash"] == 0 and scores["loop"] == 0 and scores["dies"] == 0, scores


def test_feedback_and_grades_csv(graded_course):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    run = _nbgrader(["generate_feedback", gen.assignment_name(judge.get_exercise(128))], graded_course, env)
    assert run.returncode == 0, run.stdout + run.stderr
    html = (graded_course / "feedback" / "loop" / "ex128-batch-layout" / "ex128-batch-layout.html").read_text()
    assert "timeout" in html and "AssertionError: [timeout] time limit exceeded" in html, html[-3000:]
    assert "nbgrading.py" not in html and "most recent call last" not in html  # a failed case: its message alone
    run = _nbgrader(["export"], graded_course, env)
    assert run.returncode == 0, run.stdout + run.stderr
    import csv

    rows = list(csv.DictReader((graded_course / "grades.csv").open()))
    by = {(r["assignment"], r["student_id"]): float(r["score"]) for r in rows}
    assert by[("ex128-batch-layout", "correct")] == float(len(gen.case_names(judge.get_exercise(128))))
    assert by[("ex130-inference-loop", "wrong")] < float(len(gen.case_names(judge.get_exercise(130))))
    assert by[("ex128-batch-layout", "dies")] == 0.0
