"""The course judge: hidden tests for the practice exercises, run safely on the learner's code.

    import judge
    judge.check(128)                           # the learner's practice/batch.py; AssertionError on failure
    judge.check(128, "path/to/batch.py")       # any file
    judge.check(128, source=code_text)         # code as text (e.g. collected from a notebook)
    judge.check(128, build_batch)              # a function object: runs in this process (no sandbox)
    report = judge.grade(128)                  # the same, returning a judge.Report (never raises for bad code)

See judge/README.md (adding an exercise, the API) and `python practice/judge.py --help` (the CLI).
"""

from .registry import ROOT, Exercise, get_exercise, load_exercises
from .report import CaseResult, Report
from .runner import check, grade, grade_inprocess

__all__ = ["ROOT", "CaseResult", "Exercise", "Report", "check", "get_exercise", "grade", "grade_inprocess",
           "load_exercises"]
