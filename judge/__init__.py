"""The course judge: hidden tests for the practice exercises, run safely on the learner's code (judge/README.md:
the CLI, adding an exercise, the Python API). The API is imported on first use, so that the worker, which imports
judge.worker_main and the public drivers, loads nothing of the grader's."""

from __future__ import annotations

import importlib
from typing import Any

_API = {"ROOT": "registry", "Exercise": "registry", "get_exercise": "registry", "load_exercises": "registry",
        "CaseResult": "report", "Report": "report", "check": "runner", "grade": "runner", "grade_inprocess": "runner"}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'judge' has no attribute {name!r}")
    return getattr(importlib.import_module(f"judge.{_API[name]}"), name)
