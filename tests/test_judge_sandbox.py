"""The judge's sandbox: whatever a learner's build_batch does (print a fake summary, forge results, exit, crash,
loop, exhaust memory, flood output, be missing or mis-declared), it never passes and gets a clear verdict, and
each case gets its own. Also the CLI contract (last line, exit code, slug, `list`, running from inside practice/,
the class-grading CSV, the refusal to grade a class unisolated)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import judge
import judge.sandbox

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).parent / "judge_cases" / "misbehave"
ONE = ["single prefill"]
UNISOLATED_IF_NEEDED = [] if judge.sandbox.bwrap_problem() is None else ["--unisolated"]  # --impl needs isolation


def grade_bad(name: str, **kw) -> judge.Report:
    kw.setdefault("cases", ONE)
    report = judge.grade(128, BAD / f"{name}.py", **kw)
    assert report.passed == 0 and not report.ok, report.text()
    assert report.text().splitlines()[-1] == f"0 passed, {report.failed} failed"
    return report


def verdicts(report: judge.Report) -> list[str]:
    return [r.verdict for r in report.results]


def test_printing_a_fake_summary_does_not_pass():
    r = grade_bad("fake_pass_print")
    assert verdicts(r) == ["fail"] and "returned None" in r.results[0].message
    assert "15 passed, 0 failed" in r.output  # captured, shown as the learner's output


def test_forged_results_on_every_descriptor_are_ignored():
    r = grade_bad("forge_channel")
    assert verdicts(r) == ["fail"]


def test_sys_exit_is_a_failure():
    r = grade_bad("sys_exit")
    assert verdicts(r) == ["exit"] and "sys.exit(0)" in r.results[0].message


def test_os_exit_is_a_failure():
    r = grade_bad("os_exit")
    assert verdicts(r) == ["exit"] and "os._exit()" in r.results[0].message


def test_exception_shows_the_learners_traceback_only():
    r = grade_bad("raises")
    res = r.results[0]
    assert res.verdict == "error" and "NameError" in res.message
    tb = res.details["traceback"]
    assert "raises.py" in tb and "judge/" not in tb and "undefined_name" in tb


def test_segfault_is_a_crash_and_every_case_gets_its_own_verdict():
    r = grade_bad("segfault", cases=["single prefill", "single decode", "decode only"])
    assert verdicts(r) == ["crash", "crash", "crash"]
    assert "SIGSEGV" in r.results[0].message


@pytest.mark.parametrize("isolated", [False, True])
def test_a_hang_costs_its_case_only(tmp_path, isolated):
    """Only the second case loops: the first and third still pass (with a fresh worker for the third)."""
    if isolated and judge.sandbox.bwrap_problem():
        pytest.skip(f"needs bubblewrap: {judge.sandbox.bwrap_problem()}")
    code = (Path(judge.ROOT / "solutions" / "batch.py").read_text() + "\n\n_right = build_batch\n\n\n"
            "def build_batch(items, block_size):\n    while items == [([42], 9, [5, 2, 7], True)]:\n        pass\n"
            "    return _right(items, block_size)\n")
    r = judge.grade(128, source=code, cases=["single prefill", "single decode", "prefill only"], time_limit=3,
                    isolated=isolated)
    assert verdicts(r) == ["pass", "timeout", "pass"], r.text()


def test_the_total_time_cap_stops_the_rest_and_says_so():
    r = grade_bad("infinite_loop", cases=["single prefill", "single decode", "decode only"], time_limit=2,
                  total_limit=3)
    assert verdicts(r) == ["timeout", "timeout", "timeout"]
    assert "total time cap" in r.results[-1].message and any("total time cap" in n for n in r.notes)


def test_ctypes_segfault_is_a_crash():
    r = grade_bad("segfault_ctypes")
    assert verdicts(r) == ["crash"] and "SIGSEGV" in r.results[0].message


def test_infinite_loop_times_out():
    t0 = time.monotonic()
    r = grade_bad("infinite_loop", time_limit=2)
    assert verdicts(r) == ["timeout"] and "time limit" in r.results[0].message  # CPU time, or on a very busy
    # machine the wall-clock bound
    assert time.monotonic() - t0 < 60


def test_a_case_that_sleeps_is_stopped_by_the_wall_clock_bound():
    """Sleeping uses no CPU time: the wall-clock bound (WALL_FACTOR times the limit) stops it."""
    code = "import time\n\n\ndef build_batch(items, block_size):\n    time.sleep(3600)\n"
    t0 = time.monotonic()
    r = judge.grade(128, source=code, cases=["single prefill"], time_limit=1)
    assert verdicts(r) == ["timeout"] and "wall-clock" in r.results[0].message, r.text()
    assert time.monotonic() - t0 < 60


def test_the_graders_own_time_between_requests_does_not_count():
    """Only the grader's waits for the worker count against the wall-clock bound: a grader slower than the bound
    (busy, or on a loaded machine) between two requests does not time out a worker that answers at once."""
    from judge.remote import Driver, RemoteModule
    from judge.worker_handle import WorkerHandle, _Output

    w = WorkerHandle(judge.get_exercise(128), {"impl_module": "solutions.batch"}, False, None, {}, _Output(), 10**6)
    try:
        w.ready(60).set_deadline(0.25)
        time.sleep(2 * judge.worker_handle.WALL_FACTOR * 0.25 * w.load)  # the grader's work: twice the bound
        assert Driver(RemoteModule(w), "batch").build([], 4)
    finally:
        w.close()


@pytest.mark.parametrize("name", ["memory_hog", "memory_torch"])
def test_memory_exhaustion_hits_the_limit(name):
    r = grade_bad(name, memory_limit_mb=1200, time_limit=60)
    assert verdicts(r) == ["memory"] and "memory limit" in r.results[0].message


def test_output_flood_is_stopped_and_truncated():
    r = grade_bad("output_flood")
    assert verdicts(r) == ["output"]
    assert r.output_bytes > 1_000_000 and len(r.output) < 5000


def test_missing_function_says_what_is_expected():
    r = grade_bad("missing_function")
    assert "does not define build_batch: expected build_batch(items, block_size)" in r.fatal
    assert verdicts(r) == ["not run"]


def test_wrong_signature_says_what_is_expected():
    r = grade_bad("wrong_signature")
    assert "build_batch(items) cannot be called as build_batch(items, block_size)" in r.fatal


def test_syntax_error_and_exit_at_import():
    assert "syntax error" in grade_bad("syntax_error").fatal and "%magics" not in grade_bad("syntax_error").fatal
    magic = judge.grade(128, source="import torch\n  %timeit torch.ones(3)\n", cases=ONE).fatal  # a notebook's cell
    assert "line 2" in magic and "remove IPython's %magics and !commands" in magic, magic
    r = grade_bad("exit_at_import")
    assert "importing your module" in r.fatal and "15 passed, 0 failed" in r.output


def test_code_that_does_nothing_scores_zero():
    r = judge.grade(128, source="def build_batch(items, block_size):\n    return None\n")
    assert r.passed == 0 and r.results, r.text()


def test_missing_file():
    r = judge.grade(128, BAD / "no_such_file.py")
    assert r.failed == 1 and "does not exist" in r.fatal
    assert r.text().splitlines()[-1] == "0 passed, 1 failed"


def test_learner_files_are_never_written():
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in BAD.iterdir()}
    judge.grade(128, BAD / "raises.py", cases=ONE)
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in BAD.iterdir()}
    assert before == after and not (BAD / "__pycache__").exists()


def cli(*args: str, cwd: Path = ROOT, script: str = "practice/judge.py") -> subprocess.CompletedProcess:
    env = dict(os.environ, JUDGE_CACHE_DIR=str(Path(os.environ.get("PYTEST_TMP", "/tmp")) / "judge-cache-tests"))
    return subprocess.run([sys.executable, script, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=env)


def test_cli_reference_passes_with_exit_code_0():
    p = cli("test", "batch-layout", "--reference", "--case", "single")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "2 passed, 0 failed"
    assert "PASS  single prefill" in p.stdout


def test_cli_case_that_matches_nothing_is_a_usage_error():
    p = cli("128", "--reference", "--case", "no such case")
    assert p.returncode == 2 and not p.stdout.strip(), p.stdout + p.stderr
    assert "matches no case of exercise 128" in p.stderr and "single prefill" in p.stderr
    p = cli("125", "128", "--reference", "--case", "single prefill")  # 125 has no such case: only 128 is graded
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "1 passed, 0 failed", p.stdout + p.stderr


def test_cli_failure_exit_code_and_list_from_inside_practice():
    p = cli("128", "--impl", str(BAD / "sys_exit.py"), "--case", "single decode", *UNISOLATED_IF_NEEDED)
    assert p.returncode == 1 and p.stdout.splitlines()[-1] == "0 passed, 1 failed", p.stdout + p.stderr
    # run as `cd practice && python judge.py`: the script must not shadow the judge package
    p = cli("list", cwd=ROOT / "practice", script="judge.py")
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("128 "))
    assert "batch-layout" in line and "practice/batch.py" in line and "medium" in line


def test_cli_grades_a_folder_of_files_and_notebooks_into_one_csv(tmp_path):
    """Plain files (one with the stub's relative imports), a submitted notebook, nbgrader's folder layout: one row
    per student, named by file stem or nbgrader id, the score in percent."""
    if judge.sandbox.bwrap_problem():
        pytest.skip(f"needs bubblewrap: {judge.sandbox.bwrap_problem()}")
    import nbformat

    subs = tmp_path / "subs"
    (subs / "carol" / "ex129-scheduler").mkdir(parents=True)
    solution = (ROOT / "solutions" / "scheduler.py").read_text()
    (subs / "alice.py").write_text(solution)  # `from . import preemption`: the stub's relative import
    (subs / "bob.py").write_text((ROOT / "practice" / "scheduler.py").read_text())
    cell = nbformat.v4.new_code_cell(solution.replace("from . import", "from practice import"),
                                     metadata={"nbgrader": {"grade_id": "solution", "solution": True}})
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), subs / "carol" / "ex129-scheduler" / "x.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), subs / "dave.ipynb")
    stub = nbformat.v4.new_code_cell((ROOT / "practice" / "scheduler.py").read_text().replace(
        "from . import", "from practice import"), metadata=cell.metadata)  # erin wrote hers in a copy of the cell
    nbformat.write(nbformat.v4.new_notebook(cells=[stub, cell]), subs / "erin.ipynb")
    out = tmp_path / "grades.csv"
    p = cli("129", "--impl", str(subs), "--csv", str(out), "--case", "one request")
    assert out.read_text().splitlines() == ["student,exercise,passed,failed,score", "alice,129,1,0,100.0",
                                            "bob,129,0,1,0.0", "dave,129,1,0,100.0", "erin,129,1,0,100.0",
                                            "carol,129,1,0,100.0"], p.stdout[-3000:] + p.stderr


def test_cli_refuses_to_grade_a_class_unisolated(monkeypatch):
    from judge import cli as judge_cli

    monkeypatch.setattr(judge.sandbox, "bwrap_problem", lambda: "bubblewrap (bwrap) is not installed")
    args = judge_cli._parser().parse_args(["128", "--impl", "x.py"])
    assert "refusing to grade submissions unisolated" in judge_cli.isolation_problem(args)
    args = judge_cli._parser().parse_args(["128", "--impl", "x.py", "--unisolated"])
    assert judge_cli.isolation_problem(args) is None
    assert judge_cli.isolation_problem(judge_cli._parser().parse_args(["128"])) is None


def test_a_checkpoint_that_does_not_load_is_refused_before_anyone_is_graded(tmp_path, monkeypatch):
    """A mistyped --model (JUDGE_MODEL in nbgrader) would fail every student's end-to-end case as theirs: the CLI
    and autograding refuse instead, as they do without bubblewrap."""
    import nbformat

    from judge import nbgrading

    missing = str(tmp_path / "no-such-checkpoint")
    right = ROOT / "tests" / "judge_cases" / "batch_layout" / "right_pure_python_lists.py"
    p = cli("128", "--impl", str(right), "--model", missing, "--unisolated")
    assert p.returncode == 2 and f"--model {missing}: the end-to-end cases cannot load" in p.stderr, p.stderr
    assert "does not exist" in p.stderr and "passed" not in p.stdout, p.stdout
    monkeypatch.setenv("JUDGE_MODEL", missing)
    cell = nbformat.v4.new_code_cell(right.read_text(), metadata={"nbgrader": {"grade_id": "solution"}})
    with pytest.raises(RuntimeError, match="refusing to autograde: JUDGE_MODEL=.*cannot load"):
        nbgrading._graded(judge.get_exercise(128), nbformat.v4.new_notebook(cells=[cell]))


def test_cli_unknown_exercise():
    p = cli("999")
    assert p.returncode == 2 and "no exercise '999'" in p.stderr and "125 (block-pool)" in p.stderr, p.stderr
    assert "passed" not in p.stdout  # an error, not a grade


def test_the_sandbox_command_line_names_no_folder_of_the_course():
    """bubblewrap, PID 1 inside the sandbox, reads its binds from a descriptor: /proc/1/cmdline, which the graded
    code can read, shows neither judge/hidden nor solutions/ nor any other folder of the checkout it binds."""
    argv, inner, fd = judge.sandbox.command(judge.get_exercise(130), True, Path("/somewhere/sub.py"), [], (0, 1))
    try:
        binds = os.pread(fd, 1 << 20, 0).split(b"\0")
    finally:
        os.close(fd)
    assert argv[:3] == ["bwrap", "--args", str(fd)] and inner == "/submission/sub.py"
    assert str(ROOT / "judge" / "drivers").encode() in binds  # what a student receives, bound from here
    assert not any(b.startswith(str(ROOT / "solutions").encode()) for b in binds)  # no reference, not even 130's parts
    assert not any(str(ROOT / d) in a for a in argv for d in ("judge", "solutions", "practice", "framework"))


@pytest.mark.skipif(judge.sandbox.bwrap_problem() is not None, reason="bubblewrap cannot run here")
def test_the_sandbox_shows_the_students_files_and_nothing_else():
    """What a worker finds under /course is judge.sandbox.student_files() (what a student edition copies as it is)
    and the edition's judge folders: no reference (not even of the parts an exercise runs on, which the grader
    runs), never judge/hidden, chapters/ (whose solution sections show references) or tests/."""
    args = ["--unshare-all", "--die-with-parent", "--proc", "/proc", "--dev", "/dev", *judge.sandbox._system_binds(),
            *judge.sandbox.course_binds()]
    p = subprocess.run(["bwrap", *args, "find", "/course", "-type", "f", "-not", "-path", "*/__pycache__/*"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    seen = {line.removeprefix("/course/") for line in p.stdout.split()}
    expected = set()
    for rel in judge.sandbox.visible_files():
        found = [ROOT / rel] if (ROOT / rel).is_file() else (ROOT / rel).rglob("*")
        expected |= {str(f.relative_to(ROOT)) for f in found if f.is_file() and "__pycache__" not in f.parts}
    assert seen == expected
    assert not any(f.startswith(("solutions/", "judge/hidden", "chapters/", "tests/")) for f in seen)


def test_a_judge_bug_scores_every_chosen_case_zero_by_name(monkeypatch, capsys):
    """When grading itself raises (a bug of the course), the report still has one failed row per case it would
    have graded: those --case chose, by their names here (in a student's copy, the public ones)."""
    from judge import cli as judge_cli

    def broken(*args, **kwargs):
        raise RuntimeError("a bug of the judge")

    monkeypatch.setattr(judge_cli, "grade", broken)
    args = judge_cli._parser().parse_args(["128", "--case", "single decode", "--reference"])
    report = judge_cli._grade_one(judge.get_exercise(128), args, None)
    assert report.fatal and [r.name for r in report.results] == judge.runner.case_names_here(
        judge.get_exercise(128), ["single decode"]) == ["single decode"]
    assert "a bug of the judge" in capsys.readouterr().err


def test_a_syntax_error_in_a_file_the_submission_imports_names_that_file(tmp_path):
    """130's practice/engine.py imports the learner's other modules: a syntax error in one of them is reported in
    that file, not at its line number in engine.py."""
    from judge.loader import SetupError, load_file

    (tmp_path / "helper.py").write_text("x = 1\ndef oops(:\n    pass\n")
    (tmp_path / "sub.py").write_text("import importlib.util, pathlib\n"
                                     "spec = importlib.util.spec_from_file_location('h', pathlib.Path(__file__)"
                                     ".with_name('helper.py'))\nspec.loader.exec_module(importlib.util"
                                     ".module_from_spec(spec))\n")
    with pytest.raises(SetupError) as caught:
        load_file(tmp_path / "sub.py")
    assert f"{tmp_path / 'helper.py'} (which sub.py imports) has a syntax error, line 2" in str(caught.value)
