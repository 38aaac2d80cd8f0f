"""The top-level packages import one another without a cycle (course -> judge -> framework, never back), read
from every import statement, the ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("judge", "course", "framework", "solutions", "mini_llm", "practice")
# Imports known to close a cycle, each with who removes it (empty when none is left).
PENDING: dict[tuple[str, str], str] = {}


def imports() -> dict[str, dict[str, list[str]]]:
    """{package: {package it imports: [files that do]}}."""
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in PACKAGES}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                for top in {n.split(".")[0] for n in names} & set(PACKAGES) - {pkg}:
                    if (rel, top) not in PENDING:
                        graph[pkg].setdefault(top, []).append(rel)
    return graph


def test_no_import_cycle_between_the_packages():
    graph = imports()

    def cycle_from(pkg: str, path: list[str]) -> list[str] | None:
        for nxt in graph[pkg]:
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            found = cycle_from(nxt, path + [nxt])
            if found:
                return found
        return None

    for pkg in PACKAGES:
        cycle = cycle_from(pkg, [pkg])
        assert cycle is None, " -> ".join(cycle) + ": " + "; ".join(
            f"{a}->{b} in {graph[a][b][:3]}" for a, b in zip(cycle, cycle[1:]))
