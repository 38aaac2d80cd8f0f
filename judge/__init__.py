"""The course judge: hidden tests for the practice exercises, run safely on the learner's code (judge/README.md).
The API is imported on first use, so that the worker loads nothing of the grader's."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_API = {"ROOT": "registry", "Exercise": "registry", "get_exercise": "registry", "load_exercises": "registry",
        "CaseResult": "report", "Report": "report", "check": "runner", "grade": "runner", "grade_inprocess": "runner"}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(f"judge.{_API[name]}"), name)
    if not name.startswith("_") and importlib.util.find_spec(f"judge.{name}") is not None:
        return importlib.import_module(f"judge.{name}")  # `judge.runner` without importing it first
    raise AttributeError(f"module 'judge' has no attribute {name!r}")
