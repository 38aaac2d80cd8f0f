"""Every chapter is committed with its outputs, and a fresh run reproduces them, also on the learner's side.

1. `test_stored_outputs`: every code cell of every chapters/*.ipynb has been run and stored its outputs (figures
   as PNG), and all chapters' outputs together stay under 5 MiB. No kernel: a fraction of a second.
2. `test_grade_cells_list_the_judges_cases`: the judge's output stored in every grade cell lists exactly the
   cases the judge has, in its order. No kernel either.
3. `test_chapter_reproduces_its_outputs[<chapter>]` runs the chapter on the reference (the environment of
   scripts/execute_chapters.py: CPU, one thread, the embedded model) and compares the text every code cell shows
   with the stored text: the stored outputs are current (`python scripts/execute_chapters.py <chapter>`
   regenerates them). The chapters on a learner's own code, at every stage of the course, are
   tests/test_learner_journey.py.

Normalised before comparing: object addresses, the implementation's name (practice / solutions), the line that
`course.start()` prints first (the banner names the implementation in use) and numbers in scientific notation (rounding
errors such as 4.8e-07 differ between CPUs; the cells assert their bounds). Convention for chapter authors: tag
(cell metadata "tags") with "timing" every cell whose output holds timings or other run-to-run variation; what
does not vary in it is still compared: every number is masked, runs of spaces are one space and absolute paths
lose their folders, so a table keeps its rows and columns, a judge's output its case names and verdicts, and "knee
at None" differs from "knee at 4.0". A cell whose very wording varies with the timings (a profiler's listing) is
tagged "varies" instead: it must still run without error, nothing of its output is compared.
Environment: NOTEBOOK_CELL_TIMEOUT (seconds per cell, default 300).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from course.notebook import TIMING_TAG, VARIES_TAG, normalised

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
GRADE_TAG = "grade"
PROBE_TAG = "test-probe"
CELL_TIMEOUT = int(os.environ.get("NOTEBOOK_CELL_TIMEOUT", "300"))
# Run first in every kernel: which Python runs it and which implementation `course.use` resolves to.
PROBE = (
    "import json, sys, course\n"
    "print(json.dumps({'executable': sys.executable, 'impl': course.IMPL, "
    "'batch': course.use('batch').__file__, 'block_pool': course.use('block_pool').__file__}))"
)


def _load_executor():
    spec = importlib.util.spec_from_file_location("execute_chapters", ROOT / "scripts" / "execute_chapters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


executor = _load_executor()


def _text(cell) -> str:
    """The text a cell showed: streams, plain-text results and errors, in order."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" not in data:  # widgets are progress bars: skip them
                parts.append(data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
    return "".join(parts)


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def timing_invariant(text: str) -> str:
    """What a timing cell's output keeps from run to run: its words and layout, with every number masked, runs of
    spaces made one and absolute paths without their folders (a judge's output names the file it grades)."""
    text = re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+", "…/", text)
    text = re.sub(r"\d+(?:\.\d+)?", "#", text)
    return re.sub(r"[ \t]+", " ", text)


def _normalised(cell) -> str:
    text = _text(cell)
    if "course.start(" in cell.source:  # its first line, the banner, names the implementation in use
        text = text.split("\n", 1)[1] if "\n" in text else ""
    text = normalised(text)  # the same rule as the chapters' own comparison with your code
    return timing_invariant(text) if TIMING_TAG in _tags(cell) else text


def _comparable(cells) -> list[tuple[int, str, str]]:
    """(index, source, normalised text) of each code cell not tagged "varies"."""
    return [(i, cell.source, _normalised(cell)) for i, cell in enumerate(cells)
            if cell.cell_type == "code" and VARIES_TAG not in _tags(cell)]


def judge_cases_shown(text: str) -> list[tuple[int, list[str]]]:
    """(exercise, case names in order) of each judge's output in the text."""
    blocks = re.split(r"^(?=== exercise \d+ )", text, flags=re.M)[1:]
    return [(int(re.match(r"== exercise (\d+)", block)[1]),
             re.findall(r"^(?:PASS|FAIL)  (.+?) +\d+\.\d+s", block, re.M)) for block in blocks]


def test_stored_outputs():
    total = 0
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
        assert not unrun, (f"{path.name}: code cells {unrun} have no stored outputs; run "
                           f"`python scripts/execute_chapters.py {path.name[:2]}` and commit the notebook")
        errors = [i for i, c in enumerate(nb.cells) if any(o.output_type == "error" for o in c.get("outputs", []))]
        assert not errors, f"{path.name}: cells {errors} stored an error"
        total += executor.output_bytes(nb)
    assert total <= executor.MAX_OUTPUT_BYTES, \
        f"the chapters store {total / 2**20:.1f} MiB of outputs; keep it under 5 MiB (course.figures.DPI, figure sizes)"


def test_timing_invariant_keeps_what_does_not_vary():
    run = "FAIL  a case   0.21s\n   grading /tmp/a/practice/x.py\nknee at 4.0 requests/s (58%)\n"
    other = "FAIL  a case      3.10s\n   grading /work/b/practice/x.py\nknee at 16.5 requests/s (7%)\n"
    assert timing_invariant(run) == timing_invariant(other)
    assert timing_invariant(run) != timing_invariant(run.replace("knee at 4.0", "knee at None"))
    assert timing_invariant(run) != timing_invariant(run.replace("FAIL", "PASS"))
    shown = "== exercise 134 x: y\n   grading …/x.py\nFAIL  one case   0.01s\nPASS  two   1.20s  [error]\n"
    assert judge_cases_shown(shown + shown.replace("134", "135")) == [(134, ["one case", "two"]),
                                                                      (135, ["one case", "two"])]


def test_grade_cells_list_the_judges_cases():
    from judge.cli import case_names
    from judge.registry import get_exercise

    stale = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            for exercise, shown in judge_cases_shown(_text(cell)) if GRADE_TAG in _tags(cell) else []:
                has = case_names(get_exercise(exercise))
                if shown != has:
                    stale.append(f"{path.name}, cell {i}: exercise {exercise}'s stored output lists {len(shown)} "
                                 f"cases, the judge has {len(has)}; missing {sorted(set(has) - set(shown))}, "
                                 f"extra {sorted(set(shown) - set(has))}")
    assert not stale, "\n".join(stale) + "\nregenerate: `python scripts/execute_chapters.py <chapter>`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_reproduces_its_outputs(path: Path):
    stored = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE, metadata={"tags": [PROBE_TAG]}))
    try:
        nb = executor.execute(nb, executor.kernel_env("solutions"), timeout=CELL_TIMEOUT)
    except CellExecutionError as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel colours its tracebacks
        pytest.fail(f"{path.name} failed:\n{plain}", pytrace=False)
    info = json.loads(_text(nb.cells[0]))
    assert Path(info["executable"]).resolve() == Path(sys.executable).resolve(), \
        f"the kernel ran {info['executable']}, not {sys.executable}"
    assert info["impl"] == "solutions"
    for module in ("batch", "block_pool"):
        assert Path(info[module]).resolve().is_relative_to(ROOT / "solutions"), \
            f"the kernel imported {info[module]}, not the reference in {ROOT / 'solutions'}"
    fresh, expected = _comparable(nb.cells[1:]), _comparable(stored.cells)
    assert [i for i, *_ in fresh] == [i for i, *_ in expected], f"{path.name}: cells differ from the stored notebook"
    for (i, source, got), (_, _, want) in zip(fresh, expected):
        assert got == want, (
            f"{path.name}, cell {i} (0-based; source below) shows something else than its stored output. If the "
            f"chapter changed, regenerate it: `python scripts/execute_chapters.py {path.name[:2]}`. If its output "
            f"varies from run to run (timings), tag the cell '{TIMING_TAG}': its numbers are then masked.\n"
            f"--- source\n{source}\n--- stored\n{want}\n--- fresh run\n{got}"
        )


def test_a_cell_watches_your_module_that_its_own_course_use_returns():
    """A chapter's verdict names, for each checked cell, your modules that ran in it. A module the cell itself first
    gets from `course.use` (chapter 13's drafting cell and spec_decode) is watched from then on, loaded or not."""
    from course import notebook

    watch = notebook._Watch(set())  # the cell starts with none of your modules in use
    sys.modules.pop("practice.block_pool", None)
    watch.add({"block_pool"})  # what course.use("block_pool") does, before it imports the module
    try:
        importlib.import_module("practice.block_pool").BlockPool(4)
    except NotImplementedError:  # the untouched stub
        pass
    assert watch.stop() == {"block_pool"}
