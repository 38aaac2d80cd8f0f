"""What a student edition ships, taken from its source as it is now, for the candidates in this folder: a function
or class defined in a chapter's code cells, found by name, by its parameters or by its methods, and defined afresh
in a namespace of the candidate's choosing. A candidate imports this file by path (the judge loads a candidate as
the learner's module, outside any package):

    shipped = importlib.import_module("_shipped")  # after putting this folder on sys.path, as candidates do

`NotShipped` says that the source no longer defines what the candidate looks for: nothing there to grade."""

from __future__ import annotations

import ast
import json
import math
import random
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]


class NotShipped(LookupError):
    """The shipped source defines nothing the candidate looks for."""


def chapter_source(chapter: str) -> str:
    """The code cells of chapters/<chapter>.ipynb as one module (IPython's % and ! lines left out)."""
    cells = json.loads((ROOT / "chapters" / f"{chapter}.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n\n".join("\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
                       for src in code)


def find(chapter: str, *, name: str | None = None, params: tuple[str, ...] | None = None,
         methods: tuple[str, ...] = ()) -> ast.FunctionDef | ast.ClassDef:
    """The first function or class (at any depth) of the chapter's code cells with this name, these parameters
    (a function) or these methods (a class)."""
    for node in ast.walk(ast.parse(chapter_source(chapter))):
        if isinstance(node, ast.FunctionDef) and (name is None or node.name == name) and not methods \
                and (params is None or tuple(a.arg for a in node.args.args) == params):
            return node
        if isinstance(node, ast.ClassDef) and methods and (name is None or node.name == name):
            defined = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            if set(methods) <= defined:
                return node
    wanted = name or (f"function of ({', '.join(params)})" if params else f"class with {', '.join(methods)}")
    raise NotShipped(f"chapters/{chapter}.ipynb defines no {wanted}")


def define(node: ast.AST, **names) -> object:
    """Define `node` (a def or class found by `find`) afresh, with the usual modules and `names` as globals."""
    namespace = {"math": math, "random": random, "np": np, "torch": torch, **names}
    exec(compile(ast.Module([node], []), "<shipped>", "exec"), namespace)
    return namespace[node.name]


def statements(chapter: str, contains: str) -> list[ast.stmt]:
    """The top-level statements of the chapter's code whose source contains `contains` (for code that is no
    function, such as a loop in a check cell)."""
    source = chapter_source(chapter)
    found = [n for n in ast.parse(source).body if contains in (ast.get_source_segment(source, n) or "")]
    if not found:
        raise NotShipped(f"chapters/{chapter}.ipynb has no statement containing {contains!r}")
    return found


SHIPPED_MODULES = ("chapters", "framework", "course")  # the packages and folders of .py files an edition ships


def named(*names: str) -> dict[str, object]:
    """For each of `names`, the first function, class or method of that name the edition ships: in the .py files
    of SHIPPED_MODULES (imported, as they run), else in a chapter's code cells (defined afresh). A method comes as
    its function, whose first parameter (self) takes the API's first argument."""
    found = {}
    for name in names:
        obj = _in_modules(name)
        if obj is None:
            obj = _in_chapters(name)
        if obj is None:
            raise NotShipped(f"the edition ships nothing named {name}")
        found[name] = obj
    return found


def _in_modules(name: str) -> object | None:
    import importlib
    import inspect

    for path in sorted(p for folder in SHIPPED_MODULES for p in (ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if "__main__" in rel.parts:
            continue
        try:
            module = importlib.import_module(".".join(p for p in rel.parts if p != "__init__"))
        except ImportError:
            continue
        if inspect.isfunction(getattr(module, name, None)) or inspect.isclass(getattr(module, name, None)):
            if getattr(getattr(module, name), "__module__", None) == module.__name__:
                return getattr(module, name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and inspect.isfunction(vars(cls).get(name)):
                return vars(cls)[name]
    return None


def _in_chapters(name: str) -> object | None:
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        try:
            return define(find(path.stem, name=name))
        except NotShipped:
            continue
    return None
