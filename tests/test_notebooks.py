"""Every chapter notebook runs top to bottom, and gives the same results on practice/ filled with the reference.

1. `test_notebook_runs[<chapter>]` executes each chapters/*.ipynb (found by glob, so new chapters join
   automatically) on the reference engine (COURSE_IMPL=solutions), with cwd chapters/; any error fails the test
   with the cell's traceback.
2. `test_practice_matches_solutions[<chapter>]` builds a package `practice` in a temporary folder from copies of
   solutions/*.py (they import each other relatively, so the copy is complete), puts that folder first on the
   kernel's PYTHONPATH, sets COURSE_IMPL=practice and executes the chapter again. The text outputs of every cell
   must equal those of run 1, except in cells tagged "timing".

Convention for chapter authors: tag (cell metadata "tags") with "timing" every cell whose output holds timings or
other run-to-run variation; its output is then not compared (it must still run without error).
Environment: NOTEBOOK_CELL_TIMEOUT (seconds per cell, default 300); OMP_NUM_THREADS for the kernels (default 1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))
TIMING_TAG = "timing"
CELL_TIMEOUT = int(os.environ.get("NOTEBOOK_CELL_TIMEOUT", "300"))
PROBE_TAG = "test-probe"
# Run first in every kernel: which Python runs it and which implementation `course.use` resolves to.
PROBE = (
    "import json, sys, course\n"
    "print(json.dumps({'executable': sys.executable, 'impl': course.IMPL, "
    "'batch': course.use('batch').__file__, 'block_pool': course.use('block_pool').__file__}))"
)
_solution_runs: dict[str, nbformat.NotebookNode] = {}


@pytest.fixture(scope="session", autouse=True)
def venv_kernel(tmp_path_factory):
    """A kernelspec "python3" that runs this very interpreter (the venv's), first on JUPYTER_PATH, so that no
    user- or system-wide "python3" kernel of another Python is picked up."""
    share = tmp_path_factory.mktemp("jupyter")
    spec = share / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "course venv", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(share), os.environ.get("JUPYTER_PATH")])))
        yield


@pytest.fixture(scope="session")
def filled_practice(tmp_path_factory) -> Path:
    """A folder holding a package `practice` whose modules are the reference code."""
    root = tmp_path_factory.mktemp("filled")
    pkg = root / "practice"
    pkg.mkdir()
    for src in (ROOT / "solutions").glob("*.py"):
        shutil.copy(src, pkg / src.name)
    learner_modules = {p.name for p in (ROOT / "practice").glob("*.py")} - {"judge.py"}
    missing = learner_modules - {p.name for p in pkg.glob("*.py")}
    assert not missing, f"practice modules with no namesake in solutions/: {sorted(missing)}"
    return root


def execute(path: Path, impl: str, pythonpath: Path | None = None) -> nbformat.NotebookNode:
    """Run the notebook in a fresh kernel (cwd chapters/) with COURSE_IMPL=impl; return it with its outputs."""
    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell(PROBE, metadata={"tags": [PROBE_TAG]})
    nb.cells.insert(0, probe)
    env = dict(os.environ, COURSE_IMPL=impl)
    # One intra-op thread unless the caller chose: on a loaded machine (CI, several test runs at once) torch's
    # spinning OpenMP threads make small-model cells tens of times slower than one thread.
    env.setdefault("OMP_NUM_THREADS", "1")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(CHAPTERS)}})
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel colours its tracebacks
        pytest.fail(f"{path.name} (COURSE_IMPL={impl}) failed:\n{plain}", pytrace=False)
    info = json.loads(_text(nb.cells[0]))
    assert Path(info["executable"]).resolve() == Path(sys.executable).resolve(), \
        f"the kernel ran {info['executable']}, not this venv's {sys.executable}"
    assert info["impl"] == impl
    return nb


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


def _comparable(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(cell index, normalised text) of each code cell that is neither the probe nor tagged timing."""
    rows = []
    for i, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type != "code" or PROBE_TAG in tags or TIMING_TAG in tags:
            continue
        text = re.sub(r"0x[0-9a-f]+", "0x…", _text(cell))  # object addresses differ per process
        rows.append((i, re.sub(r"\bpractice\b", "solutions", text)))  # so do the implementation's names, by design
    return rows


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path):
    nb = execute(path, "solutions")
    info = json.loads(_text(nb.cells[0]))
    assert Path(info["batch"]).resolve().is_relative_to(ROOT / "solutions")
    _solution_runs[path.name] = nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_practice_matches_solutions(path: Path, filled_practice: Path):
    reference = _solution_runs.get(path.name) or execute(path, "solutions")
    nb = execute(path, "practice", pythonpath=filled_practice)
    info = json.loads(_text(nb.cells[0]))
    for module in ("batch", "block_pool"):
        assert Path(info[module]).resolve().is_relative_to(filled_practice.resolve()), \
            f"the kernel imported {info[module]}, not the filled practice package in {filled_practice}"
    for (i, expected), (_, got) in zip(_comparable(reference), _comparable(nb), strict=True):
        assert got == expected, (
            f"{path.name}, cell {i - 1} (0-based; source below) prints differently on practice/ filled with the reference. "
            f"If its output varies from run to run (timings), tag the cell '{TIMING_TAG}'.\n"
            f"--- source\n{nb.cells[i].source}\n--- solutions\n{expected}\n--- practice\n{got}"
        )
