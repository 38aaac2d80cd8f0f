"""Write the student edition: what students receive, and nothing the grading must keep to itself.

    python -m judge.edition OUT --released 125,126,128 [--with-solutions 125] [--force]

OUT gets sandbox.STUDENT_FILES, the released exercises' metadata and public cases (recorded from the references), a
README for students, and the chapters without the solution sections and reference sources of the exercises not given
--with-solutions. Never judge/hidden/, nbgrader/, tests/ nor the instructor's secret seed (created here, once, so that
the random hidden cases differ from anything a student can run).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import harness, wire
from .cli import needs_cell
from .compare import diagnostic
from .registry import ROOT, Exercise, exercises_of, load_exercises, public_path, span
from .remote import RemoteModule, Session
from .runner import _case_list, _Output, _Run
from .sandbox import student_files
from .secret import ensure_secret

SOLUTION_HEADING = re.compile(r"^(#+) Solutions? to exercises? (\d+)")
AUTHORS_HEADING = "## For chapter authors"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


def _ids(text: str) -> list[int]:
    """"125,126,128" or "125-128,132" as exercise ids (argparse's type: a clear error for anything else)."""
    ids = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, dash, last = (x.strip() for x in part.partition("-"))
        if not first.isdigit() or (dash and not last.isdigit()):
            raise argparse.ArgumentTypeError(f"{part!r} is not an exercise id nor a range of them (e.g. 125,126 or "
                                             "125-128)")
        ids += list(range(int(first), int(last) + 1)) if dash else [int(first)]
    return ids


class Recorder(Session):
    """A session that forwards to a worker running the reference and logs every exchange, with the hints the
    hidden cases give for wrong answers to it (their module's `public_hints(driver, fn, args, value)`: [path in
    the answer, a wrong value there or None for any, the hint], judge/public.py)."""

    def __init__(self, inner: Session, hints: Any = None) -> None:
        self.inner, self.hints, self.log = inner, hints, []

    def request(self, msg: dict) -> dict:
        reply = self.inner.request(msg)
        entry = _public({k: v for k, v in reply.items() if k not in ("id", "t")})
        if self.hints is not None and reply.get("ok"):
            found = self.hints(msg["driver"], msg["attr"], [wire.decode(a) for a in msg.get("args", [])],
                               wire.decode(reply["value"]))
            if found:
                entry["hints"] = wire.encode([list(h) for h in found])
        self.log.append([msg, entry])
        return reply


def _public(reply: Any) -> Any:
    """A reference's reply without what is not compared and would show its code: tracebacks and diagnostics."""
    if isinstance(reply, dict):
        return {k: _public(v) for k, v in reply.items() if k != "traceback" and not diagnostic(k)}
    if isinstance(reply, list):
        return [_public(v) for v in reply]
    return reply


def record(ex: Exercise) -> dict[str, list]:
    """{case name: [[request, reference's reply], ...]} of the exercise's public cases, for judge/public.py."""
    out: dict[str, list] = {}
    every = _case_list(ex, None)
    run = _Run(ex, {"impl_module": ex.reference, "display": ex.reference}, False, ex.memory_limit_mb, {}, _Output(),
               10 ** 7, None, float("inf"))
    try:
        for case in [c for c in every if c.public]:  # one worker for them all, as grading runs them
            fatal = run.start() if run.worker is None else None
            if fatal:
                raise RuntimeError(f"the reference of {ex.id} does not load: {fatal}")
            run.worker.set_deadline(600)
            rec = Recorder(run.worker, getattr(importlib.import_module(ex.tests), "public_hints", None))
            result = harness.run_case(case, RemoteModule(rec))
            if not result.passed:
                raise RuntimeError(f"public case {case.name!r} fails on the reference: {result.message}")
            out[case.name] = rec.log
    finally:
        run.stop()
    return out


def student_readme(released: list[Exercise], with_solutions: list[Exercise]) -> str:
    """The edition's README: what the copy holds and the commands a student runs."""
    served = sorted({i for ids in exercises_of(["engine", "async_engine"]) for i in ids})
    later = [i for i in served if i not in {ex.id for ex in released}]
    solved, ids = {ex.id for ex in with_solutions}, {ex.id for ex in released}
    rows = "\n".join(f"| {ex.id} | {ex.title} | `{ex.practice_file}` | `{ex.statement}` | {needs_cell(ex, ids)} |"
                      + (f" `{ex.reference.replace('.', '/')}.py` |" if ex.id in solved else " |")
                      for ex in released)
    return f"""# Build an LLM inference engine from scratch: your copy

The chapters (`chapters/`) build an inference engine piece by piece and explain each one; you write the pieces in
`practice/`, where each file is a stub with precise docstrings and each exercise has a statement in
`practice/exercises/`. `framework/` is the engine's plumbing your code builds on, `mini_llm/` the Qwen3 model
with a tiny embedded checkpoint: everything runs offline on a laptop CPU.

## Set up and open the course

```bash
python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e .
.venv/bin/jupyter labextension disable @jupyter/nbgrader  # nbgrader's tools for instructors: not yours
.venv/bin/jupyter lab chapters/
```

## Your exercises

| id | exercise | your file | statement | runs the course's | reference given |
| --- | --- | --- | --- | --- | --- |
{rows}

"Runs the course's": the exercises whose code this exercise's cases run besides yours (in brackets: only in cases
that preempt or cache prefixes; "e2e": only in the end-to-end case, which your instructor runs). The course's own
code of them runs, or in your copy the answers recorded from it, so you need not pass them first; the chapters run
yours of them once they pass. Each statement's "Needs" line says it in words. A reference given is there to read
(and the chapters run it for that module until yours passes): nothing needs copying into `practice/`.

Check your work with `.venv/bin/python practice/judge.py ID` (e.g. `{released[0].id if released else 128}`): it runs
the public cases of the exercise (its statement's worked examples and at least four cases over the whole contract;
`practice/judge.py list` gives how many) and ends with `N passed, N failed`.
Your instructor grades the hidden cases.

## The chapters at every stage

Every chapter runs top to bottom ("Run All") whatever you have done. A module is yours once its exercise passed
on the file as it is now (each chapter's exercise section has a cell that grades it; edit a passed file and the
first line says "changed since it passed" until you grade it again); a cell that needs a module
you have not passed yet shows the output stored with the chapter, under one line that names the exercise. With
your modules in use, the chapter's last cell says whether your outputs equal the stored ones. The first line of
every chapter says which module is which, the second which exercises its live cells run.

## Serve your engine

Once exercises {span(served)} pass, `.venv/bin/python -m course.serve` serves your engine and online loop as an
OpenAI-compatible server on 127.0.0.1:8000 (chapter 10 shows how to call it); until then it says which exercises
are missing and exits.{not_yet(later)}
"""


def not_yet(later: list[int]) -> str:
    if not later:
        return ""
    return f" Exercise {later[0]} is not released to you yet." if len(later) == 1 else \
        f" Exercises {span(later)} are not released to you yet."


def reference_bodies(unreleased: list[Exercise]) -> list[str]:
    """What no file or stored output of the edition may contain: every function and class of at least three lines
    of these exercises' references, each line stripped."""
    bodies = []
    for ex in unreleased:
        text = ex.reference_path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body = stripped_lines(ast.get_source_segment(text, node) or "")
                if body.count("\n") >= 2:
                    bodies.append(body)
    return bodies


def stripped_lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _text(output: dict) -> str:
    parts = [output.get("text", "")] + list(output.get("data", {}).values()) + [output.get("traceback", "")]
    return "".join("".join(p) if isinstance(p, list) else p for p in parts if isinstance(p, (str, list)))


CUT_OUTPUT = ("(not in your copy: this output named the judge's hidden cases or showed a reference's code; the cell "
              "prints its own once it can run)\n")


def names_a_case(text: str, names: set[str]) -> bool:
    """Whether a report line of `text` ("PASS  name ...", "FAIL  name ...") names one of `names`."""
    return any(line[:6] in ("PASS  ", "FAIL  ") and any(line[6:].startswith(n) for n in names)
               for line in text.splitlines())


def strip_notebook(nb: dict, solved: set[int], bodies: list[str], hidden: set[str]) -> dict:
    """The chapter without the solution sections of exercises outside `solved` (a note stands in their place),
    and without any stored output that shows one of `bodies` or names one of the `hidden` cases (the repository's
    reports list them; in the edition, a grading cell run by the student grades the public ones)."""
    cells, level = [], None  # level: the heading depth of the section being cut
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            heading = re.match(r"(#+) ", source)
            if level is not None and heading and len(heading.group(1)) <= level:
                level = None
            match = SOLUTION_HEADING.match(source)
            if match and int(match.group(2)) not in solved:
                level = len(match.group(1))
                cells.append({"cell_type": "markdown", "id": cell.get("id", "solution"), "metadata": {}, "source":
                              f"{match.group(0)}\n\nNot in your copy: your instructor releases the solution "
                              "of this exercise separately."})
                continue
        if level is not None:
            continue
        if cell["cell_type"] == "code":
            kept = [o for o in cell.get("outputs", []) if not names_a_case(_text(o), hidden)
                    and not any(b in stripped_lines(_text(o)) for b in bodies)]
            if len(kept) < len(cell.get("outputs", [])) and "grade" not in cell["metadata"].get("tags", []):
                kept.append({"output_type": "stream", "name": "stdout", "text": CUT_OUTPUT})  # what was there
            cell = dict(cell, outputs=kept)
        cells.append(cell)
    return dict(nb, cells=cells)


def shipped_markdown(text: str, folder: Path) -> str:
    """A README of `folder` as shipped: no section for chapter authors, no table row linking to a missing file."""
    def dead(line: str) -> bool:
        links = re.findall(r"\]\(([^)#:]+)\)", line)
        return line.startswith("|") and any(not (folder / link).exists() for link in links)

    text = text.split(AUTHORS_HEADING)[0].rstrip() + "\n"
    return "".join(line for line in text.splitlines(keepends=True) if not dead(line))


def write_chapters(out: Path, with_solutions: list[Exercise]) -> None:
    """chapters/ as the edition has them; written last, so that what the copy lacks is known."""
    shutil.copytree(ROOT / "chapters", out / "chapters", ignore=IGNORE)
    bodies = reference_bodies([ex for ex in load_exercises().values() if ex not in with_solutions])
    hidden = {c.name for ex in load_exercises().values() for c in ex.hidden_cases() if not c.public}
    paths = sorted((out / "chapters").glob("*.ipynb"))
    starts = start_texts(out, [p.stem for p in paths])
    for path in paths:
        nb = strip_notebook(json.loads(path.read_text()), {ex.id for ex in with_solutions}, bodies, hidden)
        note_missing_files(nb, out)
        restart(nb, starts[path.stem], starts[""])
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    readme = out / "chapters" / "README.md"
    readme.write_text(shipped_markdown(readme.read_text(), out / "chapters"))


def start_texts(out: Path, chapters: list[str]) -> dict[str, str]:
    """What `course.start(chapter)` prints first in the fresh copy `out` (its banner differs from the course's)."""
    code = ("import json, sys, course; print(json.dumps({c: course.start_text(c) for c in sys.argv[1:]} | "
            "{'': course.IMPL}))")
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_IMPL", "PYTHONPATH")}
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, "-c", code, *chapters], cwd=out, capture_output=True, text=True,
                              env={**env, "JUDGE_CACHE_DIR": cache, "PYTHONDONTWRITEBYTECODE": "1"}, check=True)
    return json.loads(done.stdout)


def restart(nb: dict, text: str, impl: str) -> None:
    """The chapter's first cell with `text` in place of its stored start lines, and "implementation: `impl`"."""
    cell = next((c for c in nb["cells"] if c["cell_type"] == "code" and "course.start(" in "".join(c["source"])), None)
    stream = next((o for o in (cell or {}).get("outputs", []) if o.get("name") == "stdout"), None)
    if stream is None:
        return
    lines = "".join(stream["text"]).splitlines(keepends=True)
    kept = lines[1:][1:] if lines[1:2] and lines[1].startswith("this chapter's ") else lines[1:]
    kept = [re.sub(r"^implementation: solutions\b", f"implementation: {impl}", line) for line in kept]
    stream["text"] = [f"{line}\n" for line in text.splitlines()] + kept


NOT_IN_COPY = "> Your copy of the course does not have "
REPOSITORY_FILE = re.compile(r"(?<![\w/.-])((?:benchmarks|docs|nbgrader|scripts|solutions|tests)/[\w/.-]*\w\."
                             r"(?:py|md|ipynb|json|sh|csv))")


def note_missing_files(nb: dict, out: Path) -> None:
    """Under each markdown cell that names files of the repository the copy lacks, one line that says so."""
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        missing = [] if cell["cell_type"] != "markdown" else sorted(
            {f for f in REPOSITORY_FILE.findall(text) if not (out / f).exists()})
        if missing:
            names = ", ".join(f"`{f}`" for f in missing)
            cell["source"] = (f"{text}\n\n{NOT_IN_COPY}{names}: {'it is' if len(missing) == 1 else 'they are'} in "
                              "the course's repository.")


def shipped_references(with_solutions: list[Exercise]) -> list[Path]:
    """The released references, and each reference module that only assembles them (the KV-cache manager on 125
    and 132, the model runner on 126-128) where every module it imports ships: `solutions.engine` then imports."""
    answers = {ex.reference_path for ex in load_exercises().values()}
    shipped = {ex.reference_path for ex in with_solutions}
    for module in sorted(set((ROOT / "solutions").glob("*.py")) - answers - {ROOT / "solutions" / "__init__.py"}):
        imported = {ROOT / "solutions" / f"{node.module}.py" for node in ast.walk(ast.parse(module.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}
        if imported <= shipped:
            shipped.add(module)
    return sorted(p.relative_to(ROOT) for p in shipped)


def write_edition(out: Path, released: list[Exercise], with_solutions: list[Exercise]) -> list[str]:
    """Write the edition into `out` (which must not exist); return its files, relative to out."""
    ids = {ex.id for ex in released}
    metadata = [p.relative_to(ROOT) for p in sorted((ROOT / "judge" / "exercises").glob("ex*.py"))
                if int(p.name[2:5]) in ids]
    references = shipped_references(with_solutions)
    out.mkdir(parents=True)
    (out / "README.md").write_text(student_readme(released, with_solutions))
    for rel in [*student_files(), "judge/exercises/__init__.py", *metadata, "solutions/__init__.py", *references]:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, out / rel, ignore=IGNORE)
        else:
            shutil.copy2(ROOT / rel, out / rel)
    (out / "judge" / "public").mkdir()
    for ex in released:
        (out / "judge" / "public" / public_path(ex).name).write_text(
            json.dumps({"exercise": ex.id, "cases": record(ex)}, indent=0))
    write_chapters(out, with_solutions)
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m judge.edition", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the folder to write (must not exist, unless --force)")
    ap.add_argument("--released", required=True, type=_ids,
                    help="the exercises students get: ids and ranges, comma-separated (125-128,132)")
    ap.add_argument("--with-solutions", default=[], type=_ids,
                    help="released exercises whose reference students get too (same form)")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = ap.parse_args(argv)
    exercises = load_exercises()
    released, solved = args.released, args.with_solutions
    unknown = sorted(set(released + solved) - set(exercises))
    if unknown:
        print(f"no exercise {unknown}; registered: {sorted(exercises)}", file=sys.stderr)
        return 2
    if not set(solved) <= set(released):
        print(f"--with-solutions must name released exercises: add {sorted(set(solved) - set(released))} to --released "
              "(an earlier week's exercise is released again with its solution)", file=sys.stderr)
        return 2
    if args.out.exists():
        if not args.force:
            print(f"{args.out} exists (use --force to replace it)", file=sys.stderr)
            return 2
        shutil.rmtree(args.out)
    secret = ensure_secret()
    files = write_edition(args.out, [exercises[i] for i in released], [exercises[i] for i in solved])
    print(f"wrote the student edition to {args.out} ({len(files)} files; exercises {released}, "
          f"references of {solved or 'none'})")
    print(f"the secret seed of the hidden cases stays in {secret} (never give it out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
