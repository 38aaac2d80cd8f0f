"""The judge's import graph, read from the source (ast, every import statement, those inside functions too): no
cycle, and the worker (judge/worker_main.py and the public drivers it loads by name) imports nothing of the
grader's (the runner, the worker handle, the grader's view of the learner's module, the hidden cases)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRADER = {"judge.runner", "judge.worker_handle", "judge.remote", "judge.public", "judge.edition", "judge.cli",
          "judge.nbgrading", "judge.sandbox"}


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (ROOT / "judge").rglob("*.py")}


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.update([base, *(f"{base}.{a.name}" for a in node.names)])
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def reachable(g: dict[str, set[str]], start: list[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += g[m]
    return seen


def test_no_import_cycle_in_the_judge():
    g = graph()
    cycles = [m for m in g if any(m in reachable(g, [d]) for d in g[m])]
    assert not cycles, f"modules on an import cycle: {sorted(cycles)}"


def test_the_worker_imports_nothing_of_the_graders():
    g = graph()
    drivers = [m for m in g if m.startswith("judge.drivers.") and m not in GRADER]
    assert not reachable(g, ["judge.worker_main", *drivers]) & GRADER
