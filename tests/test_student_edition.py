"""The student edition (`python -m judge.edition`): no hidden test, no reference of an exercise released without
its solution, no secret seed; its public cases run on a student's copy (the stub fails them, a right file passes);
its chapters run at every stage.

Two editions are written once for the whole file (writing one records the public cases on the references): every
exercise released without solutions (the tests that change it work on a copy), and 125, 128, 129 with the solutions
of 125 and 128. Everything runs as a student's Python does: the edition alone on sys.path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import judge
from judge import edition
from judge.registry import load_exercises

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "judge_cases"
EVERY = ",".join(str(i) for i in range(125, 137))

# A student's Python: the edition alone on sys.path. This sitecustomize drops the import finder of this checkout's
# editable install (pip install -e .), which would otherwise find solutions/ and judge/hidden/ here.
SITECUSTOMIZE = "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]\n"


def _write_edition(folder: Path, released: str, solutions: str = "") -> tuple[Path, Path]:
    """(the edition, the instructor's config folder, which holds the secret seed)."""
    out, config = folder / "edition", folder / "config"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config), JUDGE_CACHE_DIR=str(folder / "cache"))
    env.pop("JUDGE_SECRET_SEED", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    args = ["--released", released] + (["--with-solutions", solutions] if solutions else [])
    p = subprocess.run([sys.executable, "-m", "judge.edition", str(out), *args], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return out, config


@pytest.fixture(scope="module")
def bare_edition(tmp_path_factory) -> Path:
    """Every exercise released, no solution: what the tests below read (a test that writes works on a copy)."""
    return _write_edition(tmp_path_factory.mktemp("bare"), EVERY)[0]


@pytest.fixture(scope="module")
def partial_edition(tmp_path_factory) -> tuple[Path, Path]:
    return _write_edition(tmp_path_factory.mktemp("partial"), "125,128,129", "125,128")


def _student(edition: Path, tmp_path: Path) -> dict:
    """A student's environment for `edition`: its own judge cache, the edition alone on sys.path."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_IMPL", "JUDGE_SECRET_SEED")}
    env.update(PYTHONPATH=os.pathsep.join([str(edition), str(site)]), JUDGE_CACHE_DIR=str(tmp_path / "cache"),
               XDG_CONFIG_HOME=str(tmp_path / "student-config"), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
               MINI_LLM_DEVICE="cpu", PYTHONDONTWRITEBYTECODE="1")
    return env


def _judge(edition: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """`python practice/judge.py ARGS` in the edition."""
    return subprocess.run([sys.executable, "practice/judge.py", *args], capture_output=True, text=True, cwd=edition,
                          env=env, timeout=600)


def _judge_each(edition: Path, env: dict, tmp_path: Path, ex: int, files: list[Path]) -> dict[str, tuple[str, str]]:
    """`python practice/judge.py EX --impl DIR --unisolated` on a folder of these files, as a class is graded (one
    judge process for them all): {file stem: (its report, its last line "N passed, M failed")}."""
    folder = tmp_path / f"class_{ex}"
    folder.mkdir()
    for f in files:
        shutil.copy(f, folder / f.name)
    out = _judge(edition, env, str(ex), "--impl", str(folder), "--unisolated").stdout
    reports = {}
    for block in re.split(r"^== exercise ", out, flags=re.MULTILINE)[1:]:
        stem = re.search(r"grading \S*?(\w+)\.py", block)[1]
        reports[stem] = (block, re.search(r"^-- (\d+ passed, \d+ failed)", block, re.MULTILINE)[1])
    assert set(reports) == {f.stem for f in files}, out
    return reports


def _copy(edition: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(edition, tmp_path / "edition"))


def test_the_edition_holds_what_students_receive_and_nothing_else(partial_edition, tmp_path):
    out, config = partial_edition
    env = _student(out, tmp_path)
    files = {str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()}
    assert not any(f.startswith("judge/hidden") for f in files)
    assert {f for f in files if f.startswith("solutions/")} == {"solutions/__init__.py", "solutions/block_pool.py",
                                                                "solutions/batch.py"}
    assert {f for f in files if f.startswith("judge/exercises/ex")} == {
        "judge/exercises/ex125_block_pool.py", "judge/exercises/ex128_batch_layout.py",
        "judge/exercises/ex129_scheduler.py"}
    assert {"judge/public/batch_layout.json", "judge/public/block_pool.json", "practice/batch.py",
            "framework/engine.py", "mini_llm/__init__.py"} <= files
    assert not any(f.startswith(("nbgrader/", "tests/")) or f == "docs/instructors.md" for f in files)
    cells = [c for p in (out / "chapters").glob("*.ipynb") for c in json.loads(p.read_text())["cells"]]
    grading = [c for c in cells if "grade" in c["metadata"].get("tags", [])]  # the repository's reports list the
    assert len(grading) >= 10 and not any(c["outputs"] for c in grading)  # hidden cases; so does chapter 06's run
    assert [c["outputs"] for c in cells if "judge.grade(130" in "".join(c["source"])] == [  # of its buggy loop
        [{"output_type": "stream", "name": "stdout", "text": edition.CUT_OUTPUT}]]
    hidden = {c.name for ex in load_exercises().values() for c in ex.hidden_cases() if not c.public}
    shown = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                    for c in cells for o in c.get("outputs", []))
    assert not [name for name in hidden if len(name) > 30 and name in shown]
    readme = (out / "README.md").read_text()
    assert "| 128 |" in readme and "`solutions/block_pool.py`" in readme and "hidden tests" not in readme
    assert "Once exercises 125–133 pass" in readme and "Exercises 126, 127, 130–133 are not released" in readme
    row129 = next(line for line in readme.splitlines() if line.startswith("| 129 |"))
    assert row129.endswith(" | 125 | |"), row129  # what 129 runs besides the learner's code, among the released
    secret = (config / "mini-llm-judge" / "secret_seed").read_text().strip()
    assert len(secret) == 32 and not any(secret in (out / f).read_text(errors="replace") for f in files)

    n128, n125 = (len(judge.get_exercise(i).public_cases) for i in (128, 125))
    # contract-level replay: a NamedTuple batch with extra fields is right, a dict of lists is not; the stub is not
    graded = _judge_each(out, env, tmp_path, 128, [out / "practice" / "batch.py"] + [
        CASES / "batch_layout" / f"{name}.py" for name in (
            "right_pure_python_lists", "wrong_positions_from_zero", "right_namedtuple_extra_field",
            "wrong_returns_dict")])
    stub, verdict = graded["batch"]
    assert verdict == f"0 passed, {n128} failed" and "not implemented yet" in stub, stub
    graded |= _judge_each(out, env, tmp_path, 125, [CASES / "block_pool" / f"{name}.py" for name in (
        "right_array_ref_cnt_error_subclass", "right_own_free_queue", "wrong_lifo")])
    for name, n in (("right_pure_python_lists", n128), ("right_namedtuple_extra_field", n128),
                    ("right_array_ref_cnt_error_subclass", n125), ("right_own_free_queue", n125)):
        assert graded[name][1] == f"{n} passed, 0 failed", graded[name][0]
    wrong = graded["wrong_positions_from_zero"][0]
    assert "batch.positions: expected [0, 1, 2, 3, 4, 6, 2, 3, 4], got [0, 1, 2, 3, 4, 0, 0, 1, 2]" in wrong, wrong
    assert "input: build_batch([([11, 12, 13, 14, 15], 0, [7, 2], True)," in wrong, wrong
    assert "hint: positions start at num_computed, not at 0" in wrong, wrong  # the hidden cases' hint, recorded
    shown = graded["wrong_lifo"][0] + graded["wrong_returns_dict"][0]
    assert "pool = BlockPool(4); pool.allocate(3)" in shown, shown
    assert "call 1, pool.allocate(3), returned: expected [0, 1, 2]" in shown, shown
    assert not any(word in shown for word in ("__handle__", "null", "true", "false")), shown


def test_an_exercise_whose_parts_are_not_released_runs_on_their_recorded_answers(bare_edition, tmp_path):
    """130 without the references it runs on (scheduler, KV-cache manager, runner) and with the other exercises
    still stubs: its public cases replay what the reference parts answered when the edition was made, so the stub
    fails on its own code only, a right engine passes and a wrong one does not."""
    out = _copy(bare_edition, tmp_path)
    env = _student(out, tmp_path)
    assert {f.name for f in (out / "solutions").iterdir()} == {"__init__.py"}
    n130 = len(judge.get_exercise(130).public_cases)
    stub = _judge(out, env, "130").stdout
    assert stub.splitlines()[-1] == f"0 passed, {n130} failed", stub
    assert "not implemented yet: exercise 130" in stub and "is not done yet" not in stub, stub
    cases = CASES / "inference_loop"
    graded = _judge_each(out, env, tmp_path, 130, [
        cases / "right_rows_by_index_streamed.py", cases / "wrong_items_after_update.py",
        cases / "wrong_row_by_scheduled_index.py", ROOT / "chapters" / "stall_free_loop.py"])  # chapter 6's bug
    assert graded["right_rows_by_index_streamed"][1] == f"{n130} passed, 0 failed", graded
    assert graded["wrong_items_after_update"][1].startswith("0 passed"), graded["wrong_items_after_update"][0]
    rows, verdict = graded["wrong_row_by_scheduled_index"]
    assert not verdict.endswith(" 0 failed"), rows  # the sampling row mix-up is public too
    loop = graded["stall_free_loop"][0]
    assert re.search(r"^FAIL  several requests share each forward pass", loop, re.MULTILINE), loop


def test_an_interpreter_with_the_course_installed_elsewhere_grades_the_editions_public_cases(bare_edition, tmp_path):
    """Run by this repository's interpreter (the course installed editable: its import finder maps `judge.*` here),
    the edition's judge still grades the public cases it holds (it found this repository's hidden cases)."""
    env = dict(_student(bare_edition, tmp_path), PYTHONPATH=str(bare_edition))  # no sitecustomize: the finder stays
    stub = _judge(bare_edition, env, "125").stdout
    assert stub.splitlines()[-1] == f"0 passed, {len(judge.get_exercise(125).public_cases)} failed", stub


def test_a_chapter_that_needs_an_exercise_not_passed_yet_names_it(bare_edition, tmp_path):
    """A student who has passed 125, 126 and 128 but not 127: the engine's model runner needs their paged attention
    (the edition has no reference runner), so a chapter's cell says which exercise to do, not a missing module."""
    out = _copy(bare_edition, tmp_path)
    env = _student(out, tmp_path)
    for ex, module, variant in ((125, "block_pool", "block_pool/right_deque.py"),
                                (126, "paged_kv_cache", "slot_mapping/right_loops.py"),
                                (128, "batch", "batch_layout/right_pure_python_lists.py")):
        shutil.copy(CASES / variant, out / "practice" / f"{module}.py")
    graded = _judge(out, env, "125", "126", "128")
    assert graded.returncode == 0, graded.stdout
    used = subprocess.run([sys.executable, "-c", "import course; course.needs('model_runner')"], cwd=out, env=env,
                          capture_output=True, text=True, timeout=120)
    assert "NotPassedYet" in used.stderr and "paged_attention (exercise 127)" in used.stderr, used.stderr


def test_chapter_06s_buggy_loop_loads_with_a_practice_file_that_does_not(bare_edition, tmp_path):
    """A syntax error in any practice/ file: chapter 06's stall_free_loop still imports (its cells then show their
    stored outputs under the line naming the exercise), as every other chapter runs on (it raised SyntaxError)."""
    out = _copy(bare_edition, tmp_path)
    broken = out / "practice" / "block_pool.py"
    broken.write_text(broken.read_text() + "\ndef oops(:\n")
    run = subprocess.run([sys.executable, "-c", "import course, stall_free_loop; "
                          "print(course.stands_in(stall_free_loop.the_loop()))"], cwd=out / "chapters",
                         env=_student(out, tmp_path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["True"], run.stderr[-3000:]


def test_133_public_cases_replay_on_the_students_copy(bare_edition, tmp_path):
    """133 without its reference: with the engine's modules written (here: the references copied into practice/),
    the public cases pass a right loop written differently from the reference and reject a wrong one."""
    out = _copy(bare_edition, tmp_path)
    env = _student(out, tmp_path)
    assert not (out / "solutions" / "async_engine.py").exists()
    for module in ("block_pool", "prefix_cache", "paged_kv_cache", "paged_attention", "batch", "scheduler",
                   "preemption", "engine", "kv_cache_manager", "model_runner"):
        (out / "practice" / f"{module}.py").write_text((ROOT / "solutions" / f"{module}.py").read_text())

    n133 = len(judge.get_exercise(133).public_cases)
    graded = _judge_each(out, env, tmp_path, 133, [out / "practice" / "async_engine.py"] + [
        CASES / "online_loop" / f"{name}.py" for name in (
            "right_dedicated_thread", "right_lock_and_queue", "wrong_step_on_loop_thread")])
    assert graded["async_engine"][1] == f"0 passed, {n133} failed", graded["async_engine"][0]
    for name in ("right_dedicated_thread", "right_lock_and_queue"):
        assert graded[name][1] == f"{n133} passed, 0 failed", graded[name][0]
    assert graded["wrong_step_on_loop_thread"][1] == f"0 passed, {n133} failed", graded["wrong_step_on_loop_thread"][0]


# Stages in exercise order: the exercises done in the stage (id, module, a correct variant), then the chapters run
# once they passed. Each chapter runs once untouched and once after the last exercise most of its cells need
# (chapters 00 and 09 need the whole engine). Without references, the judge runs an exercise on the student's own
# other modules, so 129 waits for 131 (its scheduler calls preemption's helpers, and 131 is graded inside the
# scheduler) and for 132 (a public case of 129 has prefix-cache hits): the three are one stage.
STAGES = [
    ([(125, "block_pool", "block_pool/right_deque.py")], ["02_block_pool"]),
    ([(126, "paged_kv_cache", "slot_mapping/right_loops.py"),
      (127, "paged_attention", "paged_attention/right_loop_explicit_softmax.py")], ["03_paged_attention"]),
    ([(128, "batch", "batch_layout/right_pure_python_lists.py")], ["04_mixed_batch"]),
    ([(129, "scheduler", "scheduler/right_two_lists_and_helpers.py"),
      (131, "preemption", "preemption/right_pop_then_requeue.py"),
      (132, "prefix_cache", "prefix_caching/right_sha256_two_dicts.py")], ["05_scheduler"]),
    ([(130, "engine", "inference_loop/right_rows_by_index_streamed.py")],
     ["06_inference_loop", "07_preemption", "08_prefix_caching", "00_life_of_a_request", "09_performance"]),
    ([(133, "async_engine", "online_loop/right_dedicated_thread.py"),
      (134, "spec_decode", "spec_decode/right_loop_appending.py"),
      (135, "tensor_parallel", "tensor_parallel/right_functional.py"),
      (136, "structured_output", "structured_output/right_collect_then_fill.py")],
     ["10_serving", "11_speculative_decoding", "12_tensor_parallel", "13_structured_output"]),
]
# What a student keeps of a stub when filling it in, and a fixture (written for the judge's driver, which plugs the
# rest in itself) lacks: the scheduler's link to preemption, used when the scheduler runs under the engine of 130;
# the engine's parts and its LLM, which chapter 10's server runs (python -m course.serve --impl practice).
KEPT_FROM_STUB = {"scheduler": "\n\nfrom . import preemption  # noqa: E402\nScheduler.preemption = preemption\n",
                  "engine": "\n\nfrom framework.engine import LLMBase  # noqa: E402\n"
                            "from .kv_cache_manager import KVCacheManager  # noqa: E402\n"
                            "from .model_runner import ModelRunner  # noqa: E402\n"
                            "from .scheduler import Scheduler  # noqa: E402\n\n"
                            "LLMEngine.scheduler_cls, LLMEngine.runner_cls = Scheduler, ModelRunner\n"
                            "LLMEngine.kv_cache_manager_cls = KVCacheManager\n\n\n"
                            "class LLM(LLMBase):\n    engine_cls = LLMEngine\n"}
# The chapters with cells that need a file no edition ships (benchmarks/throughput.py, docs/serving.json, ...): those
# cells show their stored outputs at every stage. No other chapter may wait on a file.
NEEDS_FILES = {"09_performance", "10_serving", "12_tensor_parallel"}
WRONG = (125, "block_pool", "block_pool/wrong_lifo.py")  # a wrong variant that the public cases catch
RESET = "%reset -f"  # between two chapters run in one kernel: each starts from an empty namespace


def _bodies_in(text: str, bodies: list[str]) -> list[str]:
    from judge.edition import stripped_lines

    lines = stripped_lines(text)
    return [b.splitlines()[0] for b in bodies if b in lines]


def _notebook_texts(nb, kinds: tuple[str, ...] = ("markdown", "code")) -> list[str]:
    """The sources of a notebook's cells of these kinds, and the text of every output."""
    texts = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] in kinds]
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            parts = [out.get("text", "")] + list(out.get("data", {}).values()) + [out.get("traceback", "")]
            texts.append("".join("".join(p) if isinstance(p, list) else str(p) for p in parts))
    return texts


def _mentioned_files(text: str) -> set[str]:
    """Paths of this repository that a text mentions (`judge/README.md`, `solutions/engine.py`, ...), except those a
    note of the edition says the copy lacks."""
    from judge.edition import NOT_IN_COPY

    tops = "|".join(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
    found = re.compile(rf"(?<![\w/.-])((?:{tops})/[\w/.-]*\w\.(?:py|md|ipynb|json|sh|csv))")
    noted = {f for line in text.splitlines() if line.startswith(NOT_IN_COPY) for f in found.findall(line)}
    return set(found.findall(text)) - noted


def test_a_second_edition_shows_exactly_the_released_solutions(partial_edition):
    from judge import load_exercises
    from judge.edition import reference_bodies

    out, _ = partial_edition
    exercises = load_exercises()
    shown, hidden = reference_bodies([exercises[125], exercises[128]]), reference_bodies(
        [ex for i, ex in exercises.items() if i not in (125, 128)])
    texts = {p.name: _notebook_texts(json.loads(p.read_text())) for p in (out / "chapters").glob("*.ipynb")}
    assert set(texts) == {p.name for p in (ROOT / "chapters").glob("*.ipynb")}  # every chapter, 09-12 included
    found = {name for name, t in texts.items() if any(_bodies_in(x, shown) for x in t)}
    assert found == {"02_block_pool.ipynb", "04_mixed_batch.ipynb"}, found
    leaked = {name: b for name, t in texts.items() for x in t for b in _bodies_in(x, hidden)}
    assert not leaked, leaked
    headings = [x.splitlines()[0] for t in texts.values() for x in t if x.startswith("## Solution")]
    assert sorted(headings) == sorted(["## Solution to exercise 125: the reference `BlockPool`",
                                       "## Solution to exercise 128: the reference `build_batch`"]
                                      + [f"## Solution to exercise {i}" for i in (126, 127, 129, 130, 131, 132, 133,
                                                                                  134)])  # chapter 12 has none


def test_chapters_of_unreleased_exercises_run_on_stored_outputs(partial_edition, tmp_path):
    """Chapters 12 and 13 in an edition that releases neither 135 nor 136 (nor holds their references): every cell
    runs, the banner names both modules as not released, and their judge cells say the exercise is not released."""
    out, _ = partial_edition
    ran = _run_chapters(out, ["12_tensor_parallel", "13_structured_output"], _student(out, tmp_path))
    for name, ex in (("12_tensor_parallel", "135 (tensor-parallel)"), ("13_structured_output",
                                                                          "136 (structured-output)")):
        texts = ran[name]
        assert "tensor_parallel: stored outputs (not released)" in texts[0], texts[0]
        assert "structured_output: stored outputs (not released)" in texts[0], texts[0]
        assert any(t.startswith("(stored output: this cell ") for t in texts), name
        assert any(f"exercise {ex} is not released in this copy of the course yet" in t for t in texts), texts[-3:]


def _run_chapters(edition: Path, names: list[str], env: dict) -> dict[str, list[str]]:
    """Run All of each chapter, one after the other in one Jupyter kernel of this Python (an empty namespace for
    each): per chapter, the text of each code cell. The kernel starts once, the modules are imported once."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    books = [nbformat.read(edition / "chapters" / f"{name}.ipynb", as_version=4) for name in names]
    combined = nbformat.v4.new_notebook(metadata=books[0].metadata)
    spans = []
    for name, nb in zip(names, books):
        if combined.cells:
            combined.cells.append(nbformat.v4.new_code_cell(RESET))
        spans.append((name, len(combined.cells), len(combined.cells) + len(nb.cells)))
        combined.cells.extend(nb.cells)
    share = edition.parent / "jupyter"
    spec = share / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "language": "python"}))
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(share)
    try:
        NotebookClient(combined, timeout=300, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(edition / "chapters")}}).execute(
            env=dict(env, JUPYTER_PATH=str(share)))
    except CellExecutionError as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel colours its tracebacks
        failed = [name for name, lo, hi in spans if any(o.get("output_type") == "error" for c in combined.cells[lo:hi]
                                                        for o in c.get("outputs", []))]
        pytest.fail(f"{failed} failed in the edition:\n{plain[-3000:]}", pytrace=False)
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved
    return {name: ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
                   for c in combined.cells[lo:hi] if c.cell_type == "code"] for name, lo, hi in spans}


def test_a_student_works_through_the_edition(bare_edition, tmp_path):
    """The edition without solutions, in a student's environment: untouched, every chapter runs to the end with no
    reference source in any output; a wrong file stays 'not passed yet'; after each exercise (a correct variant)
    the judge passes it, and the chapters it completes run on it and reproduce their stored outputs."""
    from course.notebook import stdout_text
    from judge import load_exercises
    from judge.edition import reference_bodies

    t0 = time.perf_counter()
    out = _copy(bare_edition, tmp_path)
    env = _student(out, tmp_path)
    timings = []
    bodies = reference_bodies(list(load_exercises().values()))
    files = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".json", ".toml")]
    for p in files:
        text = p.read_text()
        nb = json.loads(text) if p.suffix == ".ipynb" else None
        texts = _notebook_texts(nb) if nb else [text]
        assert not [b for t in texts for b in _bodies_in(t, bodies)], f"{p} holds reference source"
        if p.suffix in (".md", ".ipynb"):  # READMEs, statements, chapters' text and outputs (code: course.reference)
            read = _notebook_texts(nb, ("markdown",)) if nb else texts
            missing = {f for t in read for f in _mentioned_files(t) if not (out / f).exists()}
            assert not missing, f"{p.relative_to(out)} mentions files the edition lacks: {sorted(missing)}"
        elif p.suffix == ".py":  # a docstring or message that sends the student to a reference this copy lacks
            missing = {f for f in re.findall(r"solutions/\w+\.py", text) if not (out / f).exists()}
            assert not missing, f"{p.relative_to(out)} names references the edition lacks: {sorted(missing)}"

    modules = sorted((ex, module) for done_in_stage, _ in STAGES for ex, module, _ in done_in_stage)

    def banner(done: set[int]) -> str:
        return " · ".join(f"{module}: yours ({ex} public cases ✓)" if ex in done else
                          f"{module}: stored outputs ({ex} not passed yet)" for ex, module in modules)

    def chapters(names: list[str], done: set[int]) -> dict[str, list[str]]:
        start = time.perf_counter()
        ran = _run_chapters(out, names, env)
        timings.append(f"{len(names)} chapters {time.perf_counter() - start:.0f}s")
        for name, texts in ran.items():
            assert texts[0].splitlines()[0] == banner(done), f"{name}: {texts[0].splitlines()[0]}"
            assert not [b for t in texts for b in _bodies_in(t, bodies)], f"{name} printed reference source"
        return ran

    def judge_cli(*ids: int) -> subprocess.CompletedProcess:
        start = time.perf_counter()
        graded = _judge(out, env, *map(str, ids))
        timings.append(f"judge {ids} {time.perf_counter() - start:.0f}s")
        return graded

    for name, texts in chapters(sorted(p.stem for p in (out / "chapters").glob("*.ipynb")), set()).items():
        if name not in ("01_kv_cache",):  # chapter 01 runs no exercise module
            assert any(t.startswith("(stored output: this cell ") for t in texts), name

    ex, module, variant = WRONG
    shutil.copy(CASES / variant, out / "practice" / f"{module}.py")
    assert judge_cli(ex).returncode == 1
    shown = subprocess.run([sys.executable, "-c", "import course; course.banner()"], cwd=out, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout.splitlines()[0] == banner(set()), shown.stdout + shown.stderr

    done: set[int] = set()
    for done_in_stage, names in STAGES:
        for ex, module, variant in done_in_stage:
            text = (CASES / variant).read_text() + KEPT_FROM_STUB.get(module, "")
            (out / "practice" / f"{module}.py").write_text(text)
        graded = judge_cli(*(ex for ex, _, _ in done_in_stage))
        assert graded.returncode == 0 and graded.stdout.splitlines()[-1].endswith(" passed, 0 failed"), graded.stdout
        done |= {ex for ex, _, _ in done_in_stage}
        for name, texts in chapters(names, done).items():
            verdict = texts[-1].splitlines()[-1]
            assert name in NEEDS_FILES or "your copy does not have" not in verdict, f"{name}: {verdict}"
            # cells that need an exercise of a later stage, or a file the edition lacks (a benchmark), show stored
            # outputs, and the verdict names what they need; a chapter whose every such cell needs a file may run none
            later = re.fullmatch(r"(.*?)(?:; \d+ cells? showed stored outputs: (?:they need|it needs) (.*))?", verdict)
            waits = {int(n) for n in re.findall(r"\(exercise (\d+)\)", later[2] or "")}
            only_files = later[2] and not waits and later[2].endswith("which your copy does not have")
            if waits & done or not re.fullmatch(
                    r"your [\w, ]+ reproduces? (all \d+ checked outputs|the 1 checked output) of this chapter that "
                    r"ran (it|them) \(counted from 0: [^()]*\)", later[1]) and not (
                    only_files and re.fullmatch(r"your [\w, ]+: no checked output of this chapter ran (it|them)",
                                                later[1])):
                listed = verdict.split("code cells [")[1].split("]")[0] if "code cells [" in verdict else ""
                cells = [int(i) for i in re.findall(r"\d+", listed)]
                stored = [c for c in json.loads((out / "chapters" / f"{name}.ipynb").read_text())["cells"]
                          if c["cell_type"] == "code"]
                pytest.fail(f"{name} after exercises {sorted(done)}: {verdict}\n" + "\n".join(
                    f"--- code cell {i}, stored:\n{stdout_text(stored[i]['outputs'])}--- yours:\n{texts[i]}"
                    for i in cells))
    print(f"\n{time.perf_counter() - t0:.0f}s in all: " + "; ".join(timings))


def test_exercise_135_released_alone_runs_its_public_cases(bare_edition, tmp_path):
    """135's driver ships with the edition and its public cases replay on the student's copy: the stub says not
    implemented in every case (layer_forward's too, which raises on each rank's thread), a right file passes, a
    wrong one fails."""
    out, env = bare_edition, _student(bare_edition, tmp_path)
    assert (out / "judge/drivers/tensor_parallel.py").is_file() and not (out / "solutions/tensor_parallel.py").exists()

    graded = _judge_each(out, env, tmp_path, 135, [out / "practice" / "tensor_parallel.py"] + [
        CASES / "tensor_parallel" / f"{name}.py" for name in (
            "right_functional", "right_mini_llm_modules", "wrong_residual_reduced")])
    n135 = len(judge.get_exercise(135).public_cases)
    stub, verdict = graded["tensor_parallel"]
    assert verdict == f"0 passed, {n135} failed" and stub.count("[not implemented]") == n135, stub
    for right in ("right_functional", "right_mini_llm_modules"):
        assert graded[right][1] == f"{n135} passed, 0 failed", graded[right][0]
    assert not graded["wrong_residual_reduced"][1].endswith(" 0 failed"), graded["wrong_residual_reduced"][0]


def test_spec_decode_released_alone_grades_its_public_cases(bare_edition, tmp_path):
    """134 without its reference: no solutions/spec_decode.py in the edition; the stub fails its public cases, right
    verify_and_updates (two ways of drawing the random numbers) pass them, and wrong ones do not: a rejection
    sampler that resamples from p with the draft left in fails the distribution case."""
    out, env = bare_edition, _student(bare_edition, tmp_path)
    assert not (out / "solutions" / "spec_decode.py").exists() and (out / "judge/public/spec_decode.json").is_file()

    n134 = len(judge.get_exercise(134).public_cases)
    graded = _judge_each(out, env, tmp_path, 134, [out / "practice" / "spec_decode.py"] + [
        CASES / "spec_decode" / f"{name}.py" for name in (
            "right_loop_appending", "right_vectorised_then_append", "wrong_no_bonus_token", "wrong_resample_from_p")])
    assert graded["spec_decode"][1] == f"0 passed, {n134} failed", graded["spec_decode"][0]
    for name in ("right_loop_appending", "right_vectorised_then_append"):
        assert graded[name][1] == f"{n134} passed, 0 failed", graded[name][0]
    assert not graded["wrong_no_bonus_token"][1].endswith(" 0 failed"), graded["wrong_no_bonus_token"][0]
    rows, verdict = graded["wrong_resample_from_p"]
    assert verdict == f"{n134 - 1} passed, 1 failed" and "emitted as its own replacement" in rows, rows


def test_a_fresh_edition_says_what_it_holds_and_serves_only_the_students_engine(bare_edition, tmp_path):
    """Nothing passed yet: each chapter's stored first lines are the ones this copy prints (no reference named), the
    statements and the README say what each exercise needs, and `python -m course.serve` (also with --impl
    solutions) names the missing exercises and exits 2, with no traceback."""
    env = _student(bare_edition, tmp_path)
    printed = json.loads(subprocess.run(
        [sys.executable, "-c", "import course, json; print(json.dumps([course.banner_line(), course.IMPL]))"],
        cwd=bare_edition, env=env, capture_output=True, text=True, timeout=120, check=True).stdout)
    for path in sorted((bare_edition / "chapters").glob("*.ipynb")):
        first = next(c for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code" and "course.start(" in "".join(c["source"]))
        stored = "".join("".join(o["text"]) for o in first["outputs"] if o.get("name") == "stdout").splitlines()
        assert stored[0] == printed[0] and stored[1].startswith("this chapter's "), f"{path.name}: {stored[:2]}"
        assert not any(line.startswith(("engine: the reference", "implementation: solutions")) for line in stored)
    assert "**Needs:** no other exercise passed first: its cases run the course's code of exercises 125–129" in \
        (bare_edition / judge.get_exercise(130).statement).read_text()
    readme = (bare_edition / "README.md").read_text()
    assert "| `practice/exercises/130-inference-loop.md` | 125–129 (131, 132) |" in readme, readme
    assert "Once exercises 125–133 pass, `.venv/bin/python -m course.serve`" in readme, readme
    for args in ([], ["--impl", "solutions"], ["--impl", "practice"]):
        served = subprocess.run([sys.executable, "-m", "course.serve", *args], cwd=bare_edition, env=env,
                                capture_output=True, text=True, timeout=300)
        assert served.returncode == 2 and "Traceback" not in served.stderr, served.stderr
        assert served.stderr.startswith("python -m course.serve: "), served.stderr
    assert "not passed yet: 125 (block_pool)" in served.stderr and "133 (async_engine)" in served.stderr


def test_the_edition_command_takes_ranges_and_says_what_is_wrong(tmp_path, capsys):
    assert edition._ids("125-128, 132") == [125, 126, 127, 128, 132]
    with pytest.raises(SystemExit):  # argparse's error: the option, the value, the forms it takes
        edition.main([str(tmp_path / "e"), "--released", "125-12x"])
    assert "argument --released: '125-12x' is not an exercise id nor a range" in capsys.readouterr().err
    assert edition.main([str(tmp_path / "e"), "--released", "126", "--with-solutions", "125"]) == 2
    assert "add [125] to --released" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_the_modules_that_assemble_released_references_ship_with_them(tmp_path):
    """With 125-132's solutions, the KV-cache manager and the model runner ship too, and the reference engine
    imports from what the edition holds; with some of their parts only, neither ships."""
    from judge import load_exercises
    from judge.edition import shipped_references

    exercises = load_exercises()
    shipped = shipped_references([exercises[i] for i in range(125, 133)])
    assert {"solutions/kv_cache_manager.py", "solutions/model_runner.py"} <= {str(p) for p in shipped}
    partial = {p.name for p in shipped_references([exercises[i] for i in (125, 126, 127)])}
    assert partial == {"block_pool.py", "paged_kv_cache.py", "paged_attention.py"}, partial
    for rel in [Path("solutions/__init__.py"), *shipped]:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    code = SITECUSTOMIZE + "import solutions.engine\nprint(solutions.engine.__file__)"
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}"))
    assert p.returncode == 0 and p.stdout.startswith(str(tmp_path)), p.stdout + p.stderr
