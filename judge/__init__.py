"""The course judge: hidden tests for the practice exercises, run safely on the learner's code (judge/README.md:
the CLI, adding an exercise, the Python API)."""

from .registry import ROOT, Exercise, get_exercise, load_exercises
from .report import CaseResult, Report
from .runner import check, grade, grade_inprocess

__all__ = ["ROOT", "CaseResult", "Exercise", "Report", "check", "get_exercise", "grade", "grade_inprocess",
           "load_exercises"]
