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
    for package in (IMPL, "framework"):  # the modules without an exercise (sampling, request) are shared
        try:
            return importlib.import_module(f"{package}.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{module}":
                raise
    raise ModuleNotFoundError(f"no engine module {module!r} in {IMPL}/ or framework/")


ENGINE_MODULES = ("block_pool", "paged_kv_cache", "paged_attention", "batch", "scheduler", "engine", "preemption",
                  "prefix_cache")


def banner() -> None:
    """Print, in one line, where the chapter's engine modules come from."""
    print(f"engine modules from {IMPL}/: " + " · ".join(ENGINE_MODULES))


def show_source(obj) -> None:
    """Print the source of a reference function or class, so that what a chapter shows is what is tested."""
    print(inspect.getsource(obj))
