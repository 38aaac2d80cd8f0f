"""Class grading against a dishonest student: each submission in tests/judge_cases/attacks/ (one per class of attack,
each named after it) scores 0 on the CLI (`--impl DIR --csv`, isolated) and in `nbgrader autograde`, leaves the
checkout, the virtual environment and the process table as they were, and the CSV (and the gradebook) stays
identical 5 s after the grader exits. Exercise 128, one case, to stay fast. nbgrader grades a notebook's code with
the CLI's own isolated worker, so it gets the attacks on what lies around that worker (NBGRADER_ATTACKS: its
parent, its process table, its environment, the files and the grader's code), not every one.

These need bubblewrap; they are skipped, saying so, only where it cannot run (CI installs it).
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import judge
from judge import sandbox

ROOT = Path(__file__).resolve().parent.parent
ATTACKS = sorted((ROOT / "tests" / "judge_cases" / "attacks").glob("*.py"))
ATTACKS_130 = sorted((ROOT / "tests" / "judge_cases" / "attacks_130").glob("*.py"))
NBGRADER_ATTACKS = [p for p in ATTACKS if p.stem in ("kill_parent", "monkeypatch_grader", "read_parent_environment",
                                                       "setsid_daemon", "write_checkout_and_venv")]
CASES = ["single prefill"]
CANARY = "JUDGE_ATTACK_CANARY"

pytestmark = pytest.mark.skipif(sandbox.bwrap_problem() is not None,
                                reason=f"isolated grading needs bubblewrap: {sandbox.bwrap_problem()}")


def _tree_digest(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts:
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _state() -> dict:
    """What an attack must not change: the course's files, the site-packages folders' entries (a .pth file) and
    the home folder's entries."""
    sp = [Path(p) for p in {*site.getsitepackages(), *sandbox.site_packages()} if os.path.isdir(p)]
    return {
        "course": {d: _tree_digest(ROOT / d) for d in ("judge", "practice", "solutions", "framework", "course")},
        "site-packages": {str(p): sorted(os.listdir(p)) for p in sp},
        "home": sorted(os.listdir(os.path.expanduser("~"))),
    }


def _workers() -> set[int]:
    """Graded processes (isolated workers, and anything they started) of this checkout's venv alive now (not
    another course's on the same machine), except those of the tests another pytest-xdist worker runs beside this
    one (its descendants). A process that left its grader's tree (setsid, a double fork) counts."""
    mine = "\0".join(sandbox.site_packages()).encode()
    beside = _children(os.getppid()) - {os.getpid()}
    pids = set()
    for pid in os.listdir("/proc"):
        try:
            cmd = (Path("/proc") / pid / "cmdline").read_bytes()
        except OSError:
            continue
        if b"from judge.worker_main import main" in cmd and sandbox.COURSE.encode() in cmd and mine in cmd \
                and not _ancestors(int(pid)) & beside:
            pids.add(int(pid))
    return pids


def _parent(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _children(pid: int) -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == pid}


def _ancestors(pid: int) -> set[int]:
    found: set[int] = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        pid = _parent(pid)
    return found


def _settled(read, seconds: float = 5.0):
    first = read()
    time.sleep(seconds)
    assert read() == first, "changed after the grader exited"
    return first


def test_every_attack_class_is_present():
    names = {p.stem for p in ATTACKS}
    assert names >= {"import_reference", "call_reference_via_course", "read_reference_from_disk",
                     "monkeypatch_grader", "steal_signing_key", "forge_descriptors", "setsid_daemon",
                     "write_checkout_and_venv", "kill_parent", "read_parent_environment"}


def test_attacks_score_zero_on_the_cli(tmp_path):
    subs = tmp_path / "submissions"
    subs.mkdir()
    for p in ATTACKS:
        shutil.copy(p, subs / p.name)
    before, workers_before = _state(), _workers()
    out = tmp_path / "grades.csv"
    env = dict(os.environ, **{CANARY: "s3cret-canary"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    args = [sys.executable, str(ROOT / "practice" / "judge.py"), "128", "--impl", str(subs), "--csv", str(out)]
    for c in CASES:
        args += ["--case", c]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    rows = _settled(lambda: list(csv.DictReader(out.open())))
    assert {r["student"]: float(r["score"]) for r in rows} == {p.stem: 0.0 for p in ATTACKS}, rows
    assert "s3cret-canary" not in run.stdout + run.stderr
    assert "attack-daemon-was-here" not in out.read_text() + run.stdout
    assert _workers() - workers_before == set()
    assert _state() == before


@pytest.fixture(scope="module")
def attacked_course(tmp_path_factory, model_dir, nbgrader_generator, copy_generated_course) -> Path:
    course = copy_generated_course(tmp_path_factory.mktemp("attacked"))  # assignments generated and released
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               JUDGE_CASES=",".join(CASES), JUDGE_MODEL=model_dir, NBGRADER_EXCHANGE_ROOT=str(course / "exchange"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env[CANARY] = "s3cret-canary"
    name = nbgrader_generator.assignment_name(judge.get_exercise(128))
    nbg = [os.path.join(os.path.dirname(sys.executable), "nbgrader")]
    released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
    for p in NBGRADER_ATTACKS:
        nb = nbformat.from_dict(released)
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "solution").source = \
            p.read_text()
        path = course / "submitted" / p.stem / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    before, workers_before = _state(), _workers()
    run = subprocess.run([*nbg, "autograde", name], cwd=course, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    db = course / "gradebook.db"
    _settled(lambda: hashlib.sha256(db.read_bytes()).hexdigest())
    assert _workers() - workers_before == set()
    assert _state() == before
    assert "s3cret-canary" not in run.stdout + run.stderr
    return course


def test_attacks_score_zero_in_nbgrader(attacked_course):
    from nbgrader.api import Gradebook

    name = "ex128-batch-layout"
    with Gradebook(f"sqlite:///{attacked_course / 'gradebook.db'}") as gb:
        scores = {p.stem: gb.find_submission(name, p.stem).score for p in NBGRADER_ATTACKS}
    assert len(NBGRADER_ATTACKS) == 5 and scores == {p.stem: 0.0 for p in NBGRADER_ATTACKS}, scores
    for p in NBGRADER_ATTACKS:  # the feedback shows the student's code as submitted
        nb = nbformat.read(attacked_course / "autograded" / p.stem / name / f"{name}.ipynb", as_version=4)
        solution = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "solution")
        assert solution.cell_type == "code" and solution.source == p.read_text()


@pytest.mark.parametrize("path", ATTACKS_130, ids=lambda p: p.stem)
def test_exercise_130_attacks_score_zero(path, model_dir):
    """130 runs its engine on references in the worker: still none of its own answer, no hidden test on disk, and a
    driver replaced by one that answers with right tokens and no steps gains nothing (the grader compares every
    step with the reference engine it runs itself)."""
    report = judge.grade(130, str(path), isolated=True, options={"model": model_dir})
    assert len(report.results) == 14 and report.passed == 0, report.text()
    if path.stem == "read_hidden_from_disk":
        assert "searched; found: []" in report.output, report.output


DRIVER_FORGERIES = {"forge_132_lookups": (132, 10, []), "forge_136_empty_rows": (136, 13, []),
                    "forge_134_no_runs": (134, 13, ["greedy: no drafts, one token"])}  # what that code does right


@pytest.mark.parametrize("stem", sorted(DRIVER_FORGERIES))
def test_a_driver_that_reports_empty_lists_gains_nothing(stem):
    """A driver replaced at import by one that reports empty per-row, per-lookup or per-call lists (which a grader
    zipping them with its own would never compare) gains nothing: the grader checks every such list's length
    (harness.whole), and 134's end to end compares the drafts accepted with the reference's."""
    ex, count, passing = DRIVER_FORGERIES[stem]
    report = judge.grade(ex, str(ROOT / "tests" / "judge_cases" / "attacks_drivers" / f"{stem}.py"), isolated=True)
    assert len(report.results) == count and [r.name for r in report.results if r.passed] == passing, report.text()


def test_a_forged_133_report_scores_zero():
    """133's driver is replaced at import by one that builds its report from the script the grader sends, with no
    event loop (8 of 12 cases passed so before the grader replayed the engine's log): every case fails, on the
    grader's replay of the engine's calls where nothing else catches it."""
    report = judge.grade(133, str(ROOT / "tests" / "judge_cases" / "attacks_133" / "forge_the_report.py"),
                         isolated=True)
    assert len(report.results) == 12 and report.passed == 0, report.text()
    assert "is not what its calls did" in report.text(), report.text()
