"""The student edition (`python -m judge.edition`): no hidden test, no reference of an exercise released without
its solution, no secret seed; its public cases run on a student's copy (the stub fails them, a right file passes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run the edition's CLI as a student's Python would: the edition first on sys.path, and without the finder of
# this checkout's editable install (which would bring judge.hidden back from here).
RUN = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
       "sys.path.insert(0, sys.argv[1]); from judge.cli import run; sys.exit(run(sys.argv[2:]))")


def test_the_edition_holds_what_students_receive_and_nothing_else(tmp_path):
    out, config = tmp_path / "edition", tmp_path / "config"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config), JUDGE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("JUDGE_SECRET_SEED", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, "-m", "judge.edition", str(out), "--released", "125,128",
                        "--with-solutions", "125"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    files = {str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()}
    assert not any(f.startswith("judge/hidden") for f in files)
    assert {f for f in files if f.startswith("solutions/")} == {"solutions/__init__.py", "solutions/block_pool.py"}
    assert {f for f in files if f.startswith("judge/exercises/ex")} == {"judge/exercises/ex125_block_pool.py",
                                                                       "judge/exercises/ex128_batch_layout.py"}
    assert {"judge/public/batch_layout.json", "judge/public/block_pool.json", "practice/batch.py",
            "framework/engine.py", "mini_llm/__init__.py"} <= files
    assert not any(f.startswith(("nbgrader/", "tests/")) or f == "docs/instructors.md" for f in files)
    readme = (out / "README.md").read_text()
    assert "| 128 |" in readme and "`solutions/block_pool.py`" in readme and "hidden tests" not in readme
    secret = (config / "mini-llm-judge" / "secret_seed").read_text().strip()
    assert len(secret) == 32 and not any(secret in (out / f).read_text(errors="replace") for f in files)

    def judge_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RUN, str(out), *args], capture_output=True, text=True,
                              cwd=out, env=env, timeout=300)

    stub = judge_cli("128")
    assert stub.stdout.splitlines()[-1] == "0 passed, 2 failed", stub.stdout + stub.stderr
    assert "not implemented yet" in stub.stdout
    right = judge_cli("128", "--impl", str(ROOT / "tests/judge_cases/batch_layout/right_pure_python_lists.py"),
                      "--unisolated")
    assert right.stdout.splitlines()[-1] == "2 passed, 0 failed", right.stdout + right.stderr
    wrong = judge_cli("128", "--impl", str(ROOT / "tests/judge_cases/batch_layout/wrong_positions_from_zero.py"),
                      "--unisolated")
    assert "positions[0]: expected 9, got 0" in wrong.stdout, wrong.stdout


def test_an_exercise_whose_parts_are_not_released_runs_on_the_students_own(tmp_path):
    """130 released without the references it runs on (scheduler, KV-cache manager, runner): on the student's copy
    their own practice modules stand in, said in a note; with the other exercises still stubs the public cases say
    which one is missing, and once they are written a right engine passes and a wrong one does not."""
    out, config = tmp_path / "edition", tmp_path / "config"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config), JUDGE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, "-m", "judge.edition", str(out), "--released", "130"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {f.name for f in (out / "solutions").iterdir()} == {"__init__.py"}

    def judge_cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-c", RUN, str(out), "130", *args], capture_output=True, text=True,
                              cwd=out, env=env, timeout=300).stdout

    stub = judge_cli()
    assert stub.splitlines()[-1] == "0 passed, 2 failed", stub
    assert "not implemented yet: exercise 125: BlockPool" in stub and "runs in its place" in stub, stub
    for module in ("block_pool", "prefix_cache", "paged_kv_cache", "paged_attention", "batch", "scheduler",
                   "preemption"):  # the student has done the other exercises
        (out / "practice" / f"{module}.py").write_text((ROOT / "solutions" / f"{module}.py").read_text())
    cases = ROOT / "tests" / "judge_cases" / "inference_loop"
    right = judge_cli("--impl", str(cases / "right_rows_by_index_streamed.py"), "--unisolated")
    assert right.splitlines()[-1] == "2 passed, 0 failed", right
    wrong = judge_cli("--impl", str(cases / "wrong_items_after_update.py"), "--unisolated")
    assert wrong.splitlines()[-1] == "0 passed, 2 failed", wrong


def test_spec_decode_released_alone_grades_its_public_cases(tmp_path):
    """134 released by itself: no solutions/spec_decode.py in the edition; the stub fails its public cases, a
    right verify_and_update passes them and a wrong one does not."""
    out, config = tmp_path / "edition", tmp_path / "config"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config), JUDGE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, "-m", "judge.edition", str(out), "--released", "134"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not (out / "solutions" / "spec_decode.py").exists() and (out / "judge/public/spec_decode.json").is_file()

    def judge_cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-c", RUN, str(out), "134", *args], capture_output=True, text=True,
                              cwd=out, env=env, timeout=300).stdout

    assert judge_cli().splitlines()[-1] == "0 passed, 2 failed"
    cases = ROOT / "tests" / "judge_cases" / "spec_decode"
    right = judge_cli("--impl", str(cases / "right_loop_appending.py"), "--unisolated")
    assert right.splitlines()[-1] == "2 passed, 0 failed", right
    wrong = judge_cli("--impl", str(cases / "wrong_no_bonus_token.py"), "--unisolated")
    assert wrong.splitlines()[-1] == "1 passed, 1 failed", wrong
