"""One switch for the whole course: which implementation of the engine the notebooks run.

    COURSE_IMPL=solutions   the reference engine (default)
    COURSE_IMPL=practice    your own code in practice/

Notebooks load every engine module through `use("batch")`, `use("scheduler")`, ... so flipping the switch
(the environment variable, or `course.IMPL = "practice"` in the first cell) runs a chapter on your code.
"""

from __future__ import annotations

import importlib
import inspect
import os
from types import ModuleType

IMPL = os.environ.get("COURSE_IMPL", "solutions")
IMPLEMENTATIONS = ("solutions", "practice")


def use(module: str) -> ModuleType:
    """The engine module `module` (e.g. "batch") from the implementation chosen by `IMPL`."""
    if IMPL not in IMPLEMENTATIONS:
        raise ValueError(f"COURSE_IMPL={IMPL!r}: choose one of {IMPLEMENTATIONS}")
    try:
        return importlib.import_module(f"{IMPL}.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"{IMPL}.{module}":
            raise
        # practice/ holds only the modules with exercises; the rest (sampling, request) is shared.
        return importlib.import_module(f"solutions.{module}")


def show_source(obj) -> None:
    """Print the source of a reference function or class, so that what a chapter shows is what is tested."""
    print(inspect.getsource(obj))
