"""The learner's path through the course, as a test: every chapter runs on the learner's own code at every stage.

In a temporary copy of the course whose practice/ starts as the untouched stubs, with its own judge cache:

1. With nothing written, the banner under COURSE_IMPL=practice names the reference for every module (the chapters
   then run the reference, which tests/test_notebooks.py runs already).
2. For each exercise, one of its CORRECT variants from tests/judge_cases/<slug>/right_*.py (written differently
   from the reference; never the reference itself) is graded by `python practice/judge.py all` (one run for all
   of them: in a copy with the references, the judge grades each exercise on the references of the others) and
   must pass; the stubs are then put back. The judge keeps each result by the file's content, so that writing
   the variants back one by one, in exercise order, is what makes `course.use` switch each module to the
   learner's; after each, the chapter(s) of that exercise run on it, with the banner naming exactly the exercises
   done so far.
3. Chapters 00, 05, 06 and 07, whose modules include one done after their own stage (131, 132), are not run
   again here once everything is the learner's: tests/test_student_edition.py runs them, and checks their outputs,
   on the same variants of 125-132 with no reference.

Chapter 01 is left out: it never loads an engine module (it builds the model itself), so the learner's code cannot
change it. The notebooks run in a plain Python process (one namespace, cells in order, `%` magics dropped, the
Agg backend; the chapters of one stage share a process), which is all that `runs and prints the right banner`
needs; tests/test_notebooks.py runs them in a Jupyter kernel. The timings of every run are printed (pytest -s),
so that the cost of the learner's per-request attention stays visible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "judge_cases"
COPIED = ("benchmarks", "chapters", "course", "framework", "judge", "mini_llm", "practice", "scripts", "solutions")

# In exercise order: (id, module, the correct variant used, the chapters that exercise changes)
JOURNEY = [
    (125, "block_pool", "block_pool/right_deque.py", ["02_block_pool"]),
    (126, "paged_kv_cache", "slot_mapping/right_loops.py", ["03_paged_attention"]),
    (127, "paged_attention", "paged_attention/right_loop_explicit_softmax.py", ["03_paged_attention"]),
    (128, "batch", "batch_layout/right_pure_python_lists.py", ["04_mixed_batch"]),  # a SimpleNamespace of lists
    (129, "scheduler", "scheduler/right_two_lists_and_helpers.py", ["05_scheduler"]),
    (130, "engine", "inference_loop/right_rows_by_index_streamed.py", ["00_life_of_a_request", "06_inference_loop"]),
    (131, "preemption", "preemption/right_pop_then_requeue.py", ["07_preemption"]),
    (132, "prefix_cache", "prefix_caching/right_sha256_two_dicts.py", ["08_prefix_caching"]),
    (133, "async_engine", "online_loop/right_dedicated_thread.py", []),
    (134, "spec_decode", "spec_decode/right_loop_appending.py", ["11_speculative_decoding"]),
    (135, "tensor_parallel", "tensor_parallel/right_functional.py", []),  # chapter 12: the student edition's test
    (136, "structured_output", "structured_output/right_collect_then_fill.py", ["13_structured_output"]),
]

# Prints course.banner() on the first line of stdout, then runs each notebook given (one fresh namespace each, code
# cells in order) and prints one line per notebook: "RAN <name> <seconds>" or "FAILED <name> <cell>: <error>".
# One process serves a whole stage: the practice files do not change within it, and torch is imported once. The
# cells tagged "grade" (a chapter's `python practice/judge.py N`) are left out: the journey runs the judge itself.
RUN_NOTEBOOKS = r"""
import json, sys, time, traceback
import matplotlib.pyplot as plt
import course
course.banner()
for name in sys.argv[1:]:
    t0, ns = time.perf_counter(), {"__name__": "__main__"}
    cells = [c for c in json.load(open(f"{name}.ipynb"))["cells"]
             if c["cell_type"] == "code" and "grade" not in c["metadata"].get("tags", [])]
    try:
        for i, cell in enumerate(cells):
            source = "\n".join(l for l in "".join(cell["source"]).splitlines() if not l.lstrip().startswith("%"))
            exec(compile(source, f"{name} cell {i}", "exec"), ns)
    except Exception as exc:
        traceback.print_exc()
        print(f"FAILED {name} cell {i}: {type(exc).__name__}: {exc}")
    else:
        print(f"RAN {name} {time.perf_counter() - t0:.1f}")
    plt.close("all")
    sys.stdout.flush()
"""


# Known chapter bugs, each excused only by its own error text ({chapter: (error text, ...)}); none today. Remove an
# entry once its chapter is fixed: the test then checks that chapter as it checks the others.
KNOWN: dict[str, tuple[str, ...]] = {}


def expected_banner(done: set[int]) -> str:
    """The journey grades every variant first, then puts the stubs back: a stub is a file changed since it passed."""
    return " · ".join(f"{module}: yours ({ex} ✓)" if ex in done else
                      f"{module}: reference ({ex} changed since it passed)" for ex, module, _, _ in JOURNEY)


@pytest.fixture(scope="module")
def course_copy(tmp_path_factory) -> Path:
    """A copy of the course with untouched practice stubs; the judge cache lives beside it."""
    root = tmp_path_factory.mktemp("learner") / "course"
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    stubs = [p for p in (root / "practice").glob("*.py") if "raise NotImplementedError" in p.read_text()]
    if len(stubs) != len(JOURNEY):
        pytest.skip("practice/ is not the untouched stubs (a learner's checkout)")
    return root


def env_for(root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(root), COURSE_IMPL="practice", JUDGE_CACHE_DIR=str(root.parent / "cache"),
                OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")


def run_chapters(root: Path, chapters: list[str], done: set[int], known: list[str]) -> None:
    """Run the chapters in one process; a failure excused by KNOWN is appended to `known`, any other fails."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN_NOTEBOOKS, *chapters], cwd=root / "chapters",
                          env=env_for(root), capture_output=True, text=True, timeout=1200)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines, f"the chapters' process failed:\n{proc.stderr[-4000:]}"
    assert lines[0] == expected_banner(done), f"banner\n{lines[0]}\nexpected\n{expected_banner(done)}"
    results = {line.split()[1]: line for line in lines[1:] if line.startswith(("RAN ", "FAILED "))}
    for chapter in chapters:
        result = results.get(chapter, f"FAILED {chapter}: no result")
        if result.startswith("FAILED"):
            assert any(text in result for text in KNOWN.get(chapter, ())), \
                f"{result}\nwith exercises {sorted(done)} done:\n{proc.stderr[-4000:]}"
            known.append(f"{result} (exercises done: {sorted(done)})")
    print(f"  {time.perf_counter() - t0:.0f}s for " + ", ".join(
        results[c].split(maxsplit=1)[1] if results[c].startswith("RAN") else f"{c} known failure" for c in chapters))


def test_learner_journey(course_copy: Path):
    root, done, known = course_copy, set(), []
    stubs = {module: (root / "practice" / f"{module}.py").read_text() for _, module, _, _ in JOURNEY}
    for _, module, variant, _ in JOURNEY:
        shutil.copy(CASES / variant, root / "practice" / f"{module}.py")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "practice/judge.py", "all"], cwd=root, env=env_for(root),
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"the judge rejects a variant:\n{proc.stdout[-3000:]}"
    print(f"\nevery variant graded in {time.perf_counter() - t0:.0f}s ({proc.stdout.splitlines()[-1]})")
    for module, stub in stubs.items():
        (root / "practice" / f"{module}.py").write_text(stub)
    print("with nothing written:")
    run_chapters(root, [], done, known)
    for ex, module, variant, chapters in JOURNEY:
        shutil.copy(CASES / variant, root / "practice" / f"{module}.py")  # the file the judge passed
        done.add(ex)
        print(f"exercise {ex} done with {variant}:")
        run_chapters(root, chapters, done, known)
    if known:
        pytest.xfail("known chapter bugs (KNOWN): " + "; ".join(known))


def probe_without(course_copy: Path, tmp_path: Path, references: tuple[str, ...], code: str,
                  **env: str) -> list[str]:
    """The lines `code` prints in a copy of the course whose solutions/ lacks `references`, run as a student's
    venv runs it: the import finder of an editable install of this checkout (pip install -e .), which would find
    the deleted references here, is dropped first."""
    root = tmp_path / "edition"
    for name in ("course", "framework", "judge", "mini_llm", "practice", "solutions"):
        shutil.copytree(course_copy / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in references:
        (root / "solutions" / f"{name}.py").unlink()
    code = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path "
            "if not getattr(f, '__module__', '').startswith('__editable__')]\n" + code)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                         env=dict(env_for(root), JUDGE_CACHE_DIR=str(tmp_path / "cache"), **env))
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_missing_reference_is_a_stand_in_that_names_the_exercise(course_copy: Path, tmp_path):
    """A student edition ships without some references: a module that needs one is a stand-in whose classes raise
    NotPassedYet, with one line naming the exercise (a chapter shows its stored output under that line), and the
    banner says which modules are not passed yet."""
    banner, message = probe_without(course_copy, tmp_path, ("scheduler",), (
        "import course\ncourse.banner()\ncourse.use('block_pool')\n"
        "try:\n    course.use('engine').LLMEngine(None)\nexcept course.NotPassedYet as e:\n    print(e.line())\n"))
    assert "scheduler: stored outputs (129 not passed yet)" in banner
    assert "block_pool: reference (125 not passed yet)" in banner
    assert message == "this cell runs LLMEngine, which needs scheduler (exercise 129), which you have not passed yet"


def test_a_released_reference_engine_runs_where_no_exercise_gives_its_composites(course_copy: Path, tmp_path):
    """An edition with the solutions of 125-133 ships solutions/engine.py, which imports the KV-cache manager and the
    model runner: no exercise gives those, so the edition lacks them. The engine is assembled all the same (they are
    lent as the course assembles them), and the reference engine, which this copy cannot build, is NotInThisCopy."""
    lines = probe_without(course_copy, tmp_path, ("kv_cache_manager", "model_runner"), (
        "import course\nfrom framework.engine import EngineConfig\nfrom framework.sampling import SamplingParams\n"
        "from mini_llm import load_transformer\n"
        "engine = course.use('engine').LLMEngine(load_transformer(), EngineConfig(num_blocks=64))\n"
        "out = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=3, ignore_eos=True))\n"
        "print(len(out[0].outputs[0].token_ids))\n"
        "try:\n    course.reference('solutions.engine').LLMEngine\n"
        "except course.NotInThisCopy as e:\n    print(e.path)\n"), COURSE_IMPL="practice")
    # the reference engine itself is not in this copy: a chapter's reference trace is the stored one, never one
    # computed on the parts lent to the engine above
    assert lines[-2:] == ["3", "solutions/kv_cache_manager.py"], lines


def test_a_released_reference_that_imports_an_unreleased_one_runs_on_what_is_lent(course_copy: Path, tmp_path):
    """An edition with the solutions of 125-129 ships 129's reference scheduler, whose `from . import preemption` (a
    plain ImportError, not ModuleNotFoundError) finds no 131 reference: the scheduler is assembled with 131 as
    chosen (here its stand-in), and the reference itself, which this copy cannot build, is NotInThisCopy. Chapters
    00 and 05-08 stopped at their first cell on it."""
    lines = probe_without(course_copy, tmp_path, ("preemption", "prefix_cache", "engine", "kv_cache_manager"), (
        "import course\nprint(course.use('scheduler').Scheduler.__name__)\n"
        "try:\n    course.reference('solutions.scheduler').Scheduler\n"
        "except course.NotInThisCopy as e:\n    print(e.path)\n"))
    assert lines == ["Scheduler", "solutions/preemption.py"], lines


def test_a_stop_inside_an_engines_step_error_is_still_a_stop():
    """The engine's step wraps what it raised (a stand-in's NotPassedYet) in a StepError: the chapter's handler finds
    the stop in the chain of causes."""
    from course.notebook import _stop_in
    from framework.engine import StepError

    class Stop(Exception):
        pass

    try:
        try:
            raise Stop("needs exercise 136")
        except Stop as cause:
            raise StepError("a step failed", ["r0"]) from cause
    except StepError as error:
        assert isinstance(_stop_in(error, (Stop,)), Stop)
    assert _stop_in(ValueError("a bug"), (Stop,)) is None


def test_a_file_changed_after_it_passed_says_so_until_graded_again(course_copy: Path, tmp_path):
    """125 passed, then its file edited: the banner and `list` say that it changed since it passed (they said "not
    passed yet" and "not graded", as for a file never graded), and grading it again makes it the learner's again."""
    root = tmp_path / "course"
    for name in COPIED:
        shutil.copytree(course_copy / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    mine = root / "practice" / "block_pool.py"
    shutil.copy(CASES / JOURNEY[0][2], mine)
    env = env_for(root)
    probe = ["-c", "import course\nprint(course.banner_line())"]

    def run(*args: str) -> list[str]:
        out = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
        return out.stdout.splitlines()

    assert run("practice/judge.py", "125")[-1].endswith(" 0 failed")
    assert run(*probe)[0].startswith("block_pool: yours (125 ✓)")
    mine.write_text(mine.read_text() + "\n# a comment\n")
    banner = run(*probe)[0]
    assert banner.startswith("block_pool: reference (125 changed since it passed)"), banner
    listed = next(ln for ln in run("practice/judge.py", "list") if ln.startswith("125 "))
    assert listed.endswith("changed since it passed (run: python practice/judge.py 125)"), listed
    run("practice/judge.py", "125")
    assert run(*probe)[0].startswith("block_pool: yours (125 ✓)")


def test_runner_class_takes_the_batched_kernel_only_with_the_reference_attention():
    import course
    from framework.model_runner import ModelRunnerBase
    from solutions import batch, paged_attention, paged_kv_cache
    from solutions.model_runner import ModelRunner

    reference = course.runner_class(batch.build_batch, paged_kv_cache.write_kv, None)
    assert issubclass(reference, ModelRunner) and reference.attention_for_step is ModelRunner.attention_for_step
    yours = course.runner_class(batch.build_batch, paged_kv_cache.write_kv, paged_attention.paged_attention)
    assert not issubclass(yours, ModelRunner) and yours.attention_for_step is ModelRunnerBase.attention_for_step


def test_the_runner_reads_whatever_exercise_128_accepts():
    """One reader for every batch object (framework.model_runner.as_runner_batch): a SimpleNamespace with plain
    lists and int32 tensors reads as int64 tensors; a wrong one gets a TypeError naming the attribute."""
    from types import SimpleNamespace

    import torch

    from framework.model_runner import as_runner_batch

    ints = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    fields = dict(input_ids=ints([5, 6, 7]), positions=ints([0, 1, 4]), slot_mapping=ints([8, 9, 20]),
                  query_start_loc=[0, 2, 3], seq_lens=(2, 5), block_tables=[[2], [3, 5]], logits_indices=ints([1, 2]))
    batch = as_runner_batch(SimpleNamespace(**fields))
    assert batch.query_start_loc.dtype == torch.long and batch.query_start_loc.tolist() == [0, 2, 3]
    assert batch.seq_lens.tolist() == [2, 5] and batch.block_tables == [[2], [3, 5]]
    for name, bad, says in (("positions", [0, 1, 4], "must be a 1-D integer torch tensor"),
                            ("seq_lens", [2.0, 5.0], "must be 1-D integers")):
        with pytest.raises(TypeError, match=f"{name}.*{says}"):
            as_runner_batch(SimpleNamespace(**{**fields, name: bad}))
    with pytest.raises(TypeError, match="no attribute.*logits_indices"):
        as_runner_batch(SimpleNamespace(**{k: v for k, v in fields.items() if k != "logits_indices"}))


def test_a_reference_this_copy_lacks_cannot_be_listed():
    """Listing the names of a reference this copy lacks raises NotInThisCopy, as using one does (chapter 11 merges a
    reference's names into the engine's: with an empty list it ran on, and failed on a name that was not there)."""
    import course

    stand_in = course.reference("solutions.not_in_any_copy")
    with pytest.raises(course.NotInThisCopy, match="solutions/not_in_any_copy.py"):
        dir(stand_in)


def test_the_names_a_skipped_cell_would_have_bound():
    """A later cell that fails on one of them is put down to that skipped cell's reason, not to the last one's."""
    from course.notebook import _bound_names, _what_it_did

    code = ("import numpy as np\nfrom a.b import c\nx, (y, z) = 1, (2, 3)\ndef f():\n    pass\nclass K:\n    pass\n"
            "for i in []:\n    pass\n")
    assert _bound_names(code) >= {"np", "c", "x", "y", "z", "f", "K", "i"}
    assert _bound_names("%time x = 1") == set()
    assert _what_it_did("this cell runs LLM, which needs engine (exercise 130)") == "runs LLM, which needs engine " \
        "(exercise 130)"
    assert _what_it_did("this cell uses a name from a cell above that needs docs/serving.json") == \
        "needs docs/serving.json"


def test_until_131_passes_its_stand_in_allocates_and_stops_only_a_preemption():
    """Every scheduler allocates through allocate_or_preempt: the stand-in of exercise 131 allocates where the blocks
    are free, so a chapter's cell that never preempts runs on the learner's 129; one that would preempt stops."""
    from types import SimpleNamespace

    import course

    choice = course.Choice("preemption", 131, yours=False, has_reference=False)
    stand_in = course._StandIn("preemption", choice)
    free = SimpleNamespace(kv=SimpleNamespace(allocate_slots=lambda request, n: True))
    full = SimpleNamespace(kv=SimpleNamespace(allocate_slots=lambda request, n: False))
    assert stand_in.allocate_or_preempt(free, object(), 4, None) is True
    with pytest.raises(course.NotPassedYet, match="allocate_or_preempt"):
        stand_in.allocate_or_preempt(full, object(), 4, None)
    with pytest.raises(course.NotPassedYet):
        stand_in.preempt(full, object())


def test_a_stand_in_gives_the_reason_of_now_not_of_when_it_was_made(monkeypatch):
    """A chapter takes its modules in its first cell; its grading cell may then fail a file that had passed before
    and changed since. A later cell that stops on the stand-in says what is true now ("not passed yet"), not
    "changed since it passed (grade it again)", which it had just been."""
    import course

    then = course.Choice("preemption", 131, yours=False, has_reference=False, changed=True)
    monkeypatch.setattr(course, "choices", lambda: {"preemption": course.Choice("preemption", 131, False, False)})
    stop = course.NotPassedYet(then, "allocate_or_preempt", "preemption")
    assert stop.line() == "this cell runs allocate_or_preempt, exercise 131, which you have not passed yet"
