"""Class grading that no submission can stall, exhaust, spoof, or use to carry answers out.

tests/judge_cases/attacks_24/ holds one submission per attack (each file says what it does and what its honest
part earns) and two honest ones, one graded right after the memory bomb. They are graded as one class folder by
the CLI (`--impl DIR --csv`, isolated, the grader under a 2 GB address-space limit), on four cases with short
limits: each submission gets a row and scores no more than its honest part, the honest ones full marks, the run
ends within the caps, every report is within its size cap, printable (no terminal control character) and free of
any line of the reference and of the hidden inputs the recording submission printed. The attacks on nbgrader's
side go through `nbgrader autograde` with a 2 GB limit too: each exported with its honest part, the feedback
bounded. Also: the grader's memory budget stops a submission and the next one starts clean; a non-editable install
is refused before anything runs; no worker holds a reference (a 130 engine that searches its sandbox's disk and
memory finds none, no exercise's worker can import `solutions`, the sandbox binds none), and a message the grader
did not ask for (a call of its parts: the worker never calls the grader) is the protocol verdict.

The CLI part needs bubblewrap; it is skipped, saying so, only where it cannot run (CI installs it).
"""

from __future__ import annotations

import csv
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import judge
from judge import cli, crossing, report, sandbox, wire, worker_handle
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


@pytest.fixture(scope="module")
def autograded(tmp_path_factory, copy_generated_course) -> tuple[Path, float]:
    """The same class as notebooks, through `nbgrader autograde` with a 2 GB limit: (course folder, seconds)."""
    import nbformat

    course = copy_generated_course(tmp_path_factory.mktemp("class24nb"))  # assignments generated and released
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=str(ROOT), JUDGE_CASES=",".join(CASES), JUDGE_TIMEOUT=str(TIMEOUT),
               JUDGE_TOTAL_TIMEOUT=str(TOTAL_TIMEOUT), JUDGE_MEMORY_MB="1024", NBGRADER_KERNEL_MEMORY_MB="2048",
               NBGRADER_EXCHANGE_ROOT=str(course / "exchange"))
    nbg = [os.path.join(os.path.dirname(sys.executable), "nbgrader")]
    released = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    for p in (ATTACKS / f"{s}.py" for s in NOTEBOOK_CLASS):
        nb = nbformat.from_dict(released)
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "solution").source = \
            p.read_text()
        path = course / "submitted" / p.stem / NAME / f"{NAME}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    t0 = time.monotonic()
    run = subprocess.run([*nbg, "autograde", NAME], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return course, time.monotonic() - t0


NAME = "ex128-batch-layout"
# The attacks on nbgrader's side (the export, the feedback's size and content, its process's memory), to stay fast
NOTEBOOK_CLASS = ("megabyte_exception", "memory_bomb", "memory_bomb_then_honest", "pipe_garbage_at_import")


@needs_bwrap
def test_nbgrader_grades_and_exports_every_submission_within_its_caps(autograded):
    import nbformat
    from nbgrader.api import Gradebook

    course, seconds = autograded
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission(NAME, s).score for s in NOTEBOOK_CLASS}
    assert scores == {s: float(HONEST_PART[s]) for s in NOTEBOOK_CLASS}, scores
    assert seconds < len(NOTEBOOK_CLASS) * (TOTAL_TIMEOUT + 30), seconds
    reference = {ln.strip() for ln in (ROOT / "solutions" / "batch.py").read_text().splitlines()
                 if len(ln.strip()) > 25}
    for student in NOTEBOOK_CLASS:
        nb = nbformat.read(course / "autograded" / student / NAME / f"{NAME}.ipynb", as_version=4)
        shown = "".join(o.get("text", "") + "".join(o.get("traceback", [])) + o.get("evalue", "")
                        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert len(shown) <= report.REPORT_LIMIT + len(CASES) * (report.TEXT_LIMIT + 2000), (student, len(shown))
        assert not [ln for ln in reference if ln in shown], student
        assert "<<INPUT" not in shown or shown.count("<<INPUT") <= report.TEXT_LIMIT // 40, student


def test_the_grader_memory_budget_ends_a_submission_and_the_next_starts_clean(monkeypatch):
    monkeypatch.setattr(worker_handle, "GRADER_MEMORY_MB", 40)  # one padded reply of the bomb is ~150 MB
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


def _start_grading_a_loop(tmp: Path) -> tuple[subprocess.Popen, list[Path]]:
    """The CLI grading a submission that loops at import, and its temporary folders once they exist."""
    loop = tmp / "loop.py"
    loop.write_text("while True:\n    pass\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, str(ROOT / "practice" / "judge.py"), "128", "--impl", str(loop),
                             "--timeout", "60", "--case", "single prefill"], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp.glob(f"judge-{proc.pid}-*")) and time.monotonic() < deadline:
        time.sleep(0.002)  # soon after its first folder: a SIGTERM then lands while the worker starts
    return proc, list(tmp.glob(f"judge-{proc.pid}-*"))


@needs_bwrap
def test_temporary_folders_are_private_and_removed_when_the_grader_is_stopped_or_killed(tmp_path, monkeypatch):
    proc, folders = _start_grading_a_loop(tmp_path)
    assert folders and all(f.stat().st_mode & 0o777 == 0o700 for f in folders)
    proc.terminate()
    assert proc.wait(timeout=60) == 130
    assert not list(tmp_path.glob("judge-*"))
    proc, folders = _start_grading_a_loop(tmp_path)
    proc.kill()
    proc.wait(timeout=60)
    assert folders and all(f.exists() for f in folders)  # nothing ran after SIGKILL ...
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    sandbox._sweep_once.cache_clear()
    sandbox.remove_tmp(sandbox.private_tmp("next"))  # ... the next grader's first folder sweeps them
    assert not list(tmp_path.glob("judge-*"))


@pytest.mark.parametrize("line", [b"[" * 200_000, b'{"t": "' + b"x" * (9 << 20) + b'"}', b"[1, 2]"],
                         ids=["nesting", "size", "not an object"])
def test_a_message_past_the_wire_limits_is_a_wire_error(line):
    with pytest.raises(wire.WireError):
        wire.loads(line)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [{"__tensor__": "float32", "shape": [-1], "data": "AAAA"},
                                   {"__int__": "9" * 10_000}, {"__dict__": [[[1], 2]]}, {"__handle__": "x"},
                                   {"__tuple__": 5}, _nested(wire.MAX_DEPTH + 2)],
                         ids=["tensor shape", "int digits", "unhashable key", "unknown type", "tuple", "nesting"])
def test_a_malformed_value_is_a_wire_error(value):
    with pytest.raises(wire.WireError):
        wire.decode(value)


def test_values_a_learner_may_return_cross_the_wire():
    """Non-finite floats too, in plain, numpy and torch form (a NaN numpy scalar was once a protocol violation)."""
    import numpy as np
    import torch

    values = [float("nan"), float("-inf"), np.float32("nan"), np.float64("inf"), np.int64(7),
              np.array([1.5, float("nan")], dtype=np.float32), torch.tensor([float("nan"), 2.0])]
    got = wire.decode(json.loads(wire.dumps({"v": wire.encode(values)}))["v"])
    assert [type(g) for g in got] == [type(v) for v in values[:3]] + [float] + [type(v) for v in values[4:]]  # float64
    for g, v in zip(got, values):
        assert np.array_equal(np.asarray(g), np.asarray(v), equal_nan=True), (g, v)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "complex64", "float8_e4m3fn"])
def test_a_tensor_the_grader_cannot_receive_is_not_sent(dtype):
    """What the worker sends, the grader takes: a learner's uint16 tensor was sent, then refused on arrival as a
    malformed value, a protocol verdict that skipped the submission's other cases. It is refused before sending, so
    the driver says what the learner's value is instead."""
    import torch

    with pytest.raises(TypeError, match=f"cannot send a {dtype} tensor"):
        wire.encode(torch.zeros(2, dtype=getattr(torch, dtype)))


def test_exception_records_are_received_bounded():
    rec = crossing.received_error({"type": "E" * 10**6, "module": ["x"], "message": "m" * 10**6, "traceback": 5})
    assert rec["type"] == "LearnerError" and len(rec["message"]) < 2 * wire.TEXT_LIMIT and "traceback" not in rec


# -- no answer inside a sandbox that runs another exercise's student code (issue 24, item 3)

EXFILTRATE_130 = ATTACKS / "exercise_130" / "exfiltrate_references.py"  # graded as 130, not in the 128 class


def _reference_lines() -> set[str]:
    return {ln.strip() for p in (ROOT / "solutions").glob("*.py") for ln in p.read_text().splitlines()
            if len(ln.strip()) > 25}


@needs_bwrap
def test_an_engine_that_searches_the_130_sandbox_finds_no_reference():
    """A right engine that searches the isolated worker's file system, sys.modules and every object for the
    references (and raises what it found into its report) finds none; graded unisolated, with the checkout on
    sys.path, the same search finds them: it is not blind."""
    cases = ["one request: step by step"]
    isolated = judge.grade(130, EXFILTRATE_130, isolated=True, cases=cases)
    assert isolated.ok, isolated.text()
    assert not [ln for ln in _reference_lines() if ln in isolated.text()]
    self_study = judge.grade(130, EXFILTRATE_130, cases=cases)
    assert not self_study.ok and "FOUND importable: solutions" in self_study.text(), self_study.text()


def test_the_sandbox_binds_no_reference():
    binds = sandbox.course_binds()
    seen = [binds[i + 2] for i, a in enumerate(binds) if a == "--ro-bind"]
    assert f"{sandbox.COURSE}/judge/drivers" in seen  # the public parts are there
    assert not [d for d in seen if d.startswith((f"{sandbox.COURSE}/solutions", f"{sandbox.COURSE}/judge/hidden"))]


@needs_bwrap
@pytest.mark.parametrize("ex_id", [126, 127, 129, 130, 131, 133, 134])
def test_no_solutions_module_is_importable_in_the_isolated_worker(ex_id, tmp_path):
    """A submission that raises at import when `solutions` is importable gets only the API error."""
    probe = tmp_path / "probe.py"
    probe.write_text("import importlib.util\nif importlib.util.find_spec('solutions') is not None:\n"
                     "    raise ImportError('solutions is importable here')\n")
    report = judge.grade(ex_id, probe, isolated=True)
    assert "does not define" in (report.fatal or ""), report.text()


@pytest.mark.parametrize("kind", ["callback", "reply"])
def test_a_message_the_grader_did_not_ask_for_is_the_protocol_verdict(kind, tmp_path):
    """The worker never calls the grader: a step that writes on its reply pipe a call of the grader's parts, or a
    reply to a request never sent, ends its submission with `protocol`."""
    forged = tmp_path / f"unasked_{kind}.py"
    forged.write_text((ATTACKS / "exercise_130" / "unasked_message.py").read_text())
    report = judge.grade(130, forged, cases=["one request: step by step", "several requests"], time_limit=20)
    assert [r.verdict for r in report.results] == ["protocol", "not run"], report.text()


def test_the_worker_serves_driver_calls_only():
    """No request reads or calls the learner's module directly (the generic proxies are gone): only a public
    driver's function, and a kept object is reached by the name the grader gave it, the latest one kept."""
    from judge import drivers
    from judge.worker_main import Worker

    worker = Worker({"exercise": 127, "impl_module": "solutions.paged_attention"}, lambda msg: None, lambda: b"")
    worker.load()
    for req in ({"op": "getattr", "attr": "paged_attention"}, {"op": "call", "attr": "paged_attention"},
                {"op": "call", "driver": "paged_attention", "attr": "_private"},
                {"op": "setattr", "attr": "x", "value": 1}):
        reply = worker.handle(req)
        assert not reply["ok"] and reply["error"]["type"] == "ProtocolError", req
    drivers.keep("thing", [1])
    drivers.keep("thing", [2])
    assert drivers.kept("thing") == [2]
    drivers.forget()
    with pytest.raises(LookupError):
        drivers.kept("thing")
