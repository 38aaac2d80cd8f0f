"""The judge's sandbox: whatever a learner's build_batch does (print a fake summary, forge results, exit, crash,
loop, exhaust memory, flood output, be missing or mis-declared), it never passes and gets a clear verdict.
Also the CLI contract (last line, exit code, slug, `list`, running from inside practice/)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import judge

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).parent / "judge_cases" / "misbehave"
ONE = ["single prefill"]


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
    assert any("unsigned" in n for n in r.notes)


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


def test_segfault_is_a_crash_and_the_next_cases_still_run():
    r = grade_bad("segfault", cases=["single prefill", "single decode", "decode only"], max_restarts=1)
    assert verdicts(r) == ["crash", "crash", "not run"]
    assert "SIGSEGV" in r.results[0].message


def test_ctypes_segfault_is_a_crash():
    r = grade_bad("segfault_ctypes")
    assert verdicts(r) == ["crash"] and "SIGSEGV" in r.results[0].message


def test_infinite_loop_times_out():
    t0 = time.monotonic()
    r = grade_bad("infinite_loop", time_limit=2)
    assert verdicts(r) == ["timeout"] and "time limit" in r.results[0].message
    assert time.monotonic() - t0 < 60


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
    assert "syntax error" in grade_bad("syntax_error").fatal
    r = grade_bad("exit_at_import")
    assert "importing your module" in r.fatal and "15 passed, 0 failed" in r.output


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


def test_cli_failure_exit_code_and_list_from_inside_practice():
    p = cli("128", "--impl", str(BAD / "sys_exit.py"), "--case", "single decode")
    assert p.returncode == 1 and p.stdout.splitlines()[-1] == "0 passed, 1 failed", p.stdout + p.stderr
    # run as `cd practice && python judge.py`: the script must not shadow the judge package
    p = cli("list", cwd=ROOT / "practice", script="judge.py")
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("128 "))
    assert "batch-layout" in line and "practice/batch.py" in line and "medium" in line


def test_cli_unknown_exercise():
    p = cli("999")
    assert p.returncode == 2 and "no exercise" in p.stderr
    assert p.stdout.splitlines()[-1] == "0 passed, 1 failed"
