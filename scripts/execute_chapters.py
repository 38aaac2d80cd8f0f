"""Run the chapters and store their outputs in the notebooks, so that they can be read (figures included) without
running anything, for example on GitHub.

    python scripts/execute_chapters.py            # every chapters/*.ipynb
    python scripts/execute_chapters.py 04 06      # chapters whose file name starts with 04 or 06
    python scripts/execute_chapters.py -j 2       # two chapters at a time

Each chapter runs in a fresh kernel of this Python, from chapters/, on the reference engine (COURSE_IMPL=solutions),
on the CPU with one thread and the embedded model, whatever the caller's environment says: the stored outputs are
then the ones `tests/test_notebooks.py` reproduces. The notebook is rewritten only when the run succeeds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
MAX_OUTPUT_BYTES = 5 * 2**20  # all chapters' stored outputs together


def kernel_env(impl: str = "solutions", pythonpath: Path | None = None) -> dict[str, str]:
    """The environment every chapter runs in: the same for regeneration and for the test that compares."""
    env = {k: v for k, v in os.environ.items() if k not in ("MINI_LLM_MODEL", "COURSE_IMPL", "JUPYTER_PLATFORM_DIRS")}
    paths = [str(pythonpath)] if pythonpath else []
    env.update(COURSE_IMPL=impl, MINI_LLM_DEVICE="cpu", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(paths + [str(ROOT)]))
    return env


def install_kernelspec(folder: Path) -> Path:
    """A kernelspec "python3" running this very interpreter, for JUPYTER_PATH: no other Python's kernel is used."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "course venv", "language": "python"}))
    return folder


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


PROFILER_LOG = re.compile(r"^USDT:.*profiler_(start|stop)\n?", re.MULTILINE)  # torch.profiler's, with date and pid


def coalesce_streams(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Merge consecutive stdout (stderr) outputs of a cell: how the kernel splits a stream depends on timing, and
    the stored notebook must not change when nothing else did. The profiler's log lines are dropped."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stderr":
                out.text = PROFILER_LOG.sub("", out.text)
                if not out.text:
                    continue
            if merged and out.output_type == "stream" and merged[-1].output_type == "stream" \
                    and merged[-1].name == out.name:
                merged[-1].text += out.text
            else:
                merged.append(out)
        if cell.cell_type == "code":
            cell.outputs = merged
    return nb


def execute(nb: nbformat.NotebookNode, env: dict[str, str], timeout: int = 600) -> nbformat.NotebookNode:
    """Execute `nb` (outputs cleared first) in a fresh kernel with cwd chapters/; raises CellExecutionError."""
    nb = strip_outputs(nb)
    with tempfile.TemporaryDirectory() as share:
        kernelspec = str(install_kernelspec(Path(share)))
        jupyter_path = os.pathsep.join(filter(None, [kernelspec, os.environ.get("JUPYTER_PATH")]))
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": str(CHAPTERS)}})
        saved = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = jupyter_path  # read when the kernel manager looks the kernelspec up
        try:
            client.execute(env=dict(env, JUPYTER_PATH=jupyter_path))
        finally:
            if saved is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = saved
    return coalesce_streams(nb)


def output_bytes(nb: nbformat.NotebookNode) -> int:
    return sum(len(json.dumps(cell.get("outputs", []))) for cell in nb.cells if cell.cell_type == "code")


def select(names: list[str]) -> list[Path]:
    notebooks = sorted(CHAPTERS.glob("*.ipynb"))
    if not names:
        return notebooks
    chosen = [p for p in notebooks if any(p.name.startswith(n) or p.stem == n for n in names)]
    unknown = [n for n in names if not any(p.name.startswith(n) or p.stem == n for p in notebooks)]
    if unknown:
        raise SystemExit(f"no chapter matches {unknown}; chapters are: {[p.name for p in notebooks]}")
    return chosen


def regenerate(path: Path, timeout: int) -> str | None:
    """Run one chapter and store its outputs; the error text if it failed (the notebook is then left as it was)."""
    start = time.perf_counter()
    try:
        nb = execute(nbformat.read(path, as_version=4), kernel_env(), timeout)
    except CellExecutionError as e:
        return re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel colours its tracebacks
    nbformat.write(nb, path)
    print(f"{path.name}: {time.perf_counter() - start:.0f} s, {output_bytes(nb) / 1024:.0f} KiB of outputs", flush=True)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="file-name prefixes, e.g. 04 (default: all chapters)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="chapters run at the same time (default 1)")
    args = parser.parse_args()
    paths = select(args.chapters)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        errors = dict(zip(paths, pool.map(regenerate, paths, [args.timeout] * len(paths))))
    for path, error in errors.items():
        if error:
            print(f"{path.name}: FAILED, not rewritten\n{error}", file=sys.stderr)
    total = sum(output_bytes(nbformat.read(p, as_version=4)) for p in CHAPTERS.glob("*.ipynb"))
    print(f"all chapters: {total / 2**20:.2f} MiB of stored outputs (limit {MAX_OUTPUT_BYTES / 2**20:.0f} MiB)")
    if total > MAX_OUTPUT_BYTES:
        print("over the limit: lower course.figures.DPI or the figure sizes", file=sys.stderr)
        return 1
    return 1 if any(errors.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
