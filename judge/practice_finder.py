"""The import finder that lends a student's practice module where a reference is not there (in the worker, and in
the grader of a student edition). It imports nothing of the judge."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


class PracticeFinder:
    """An import finder, last on sys.meta_path: a `solutions.<name>` module that is not here (the graded
    exercise's own answer, or an unreleased reference in a student edition) is the file practice/<name>.py, loaded
    under that name so that its relative imports resolve the same way."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.rpartition(".")
        file = os.path.join(self.root, "practice", name + ".py")
        if package != "solutions" or not name.isidentifier() or not os.path.isfile(file):
            return None
        return importlib.util.spec_from_file_location(fullname, file)

    @staticmethod
    def withdraw() -> None:
        """Take the finder off sys.meta_path and forget the modules it lent, so that a process that goes on after
        grading (a notebook's kernel) finds `solutions.<name>` only where it is."""
        finders = [f for f in sys.meta_path if isinstance(f, PracticeFinder)]
        sys.meta_path[:] = [f for f in sys.meta_path if f not in finders]
        practice = {os.path.join(f.root, "practice") for f in finders}
        forget([name for name, module in sys.modules.items() if name.startswith("solutions.") and
                os.path.dirname(getattr(module, "__file__", None) or "") in practice])


def forget(modules: list[str]) -> None:
    """Drop the modules `modules` (solutions.<name>) from sys.modules and from their package: the next import of
    one finds it afresh, where it is."""
    package = sys.modules.get("solutions")
    for name in modules:
        module = sys.modules.pop(name)
        if getattr(package, name.rpartition(".")[2], None) is module:
            delattr(package, name.rpartition(".")[2])
