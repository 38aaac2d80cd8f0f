"""Nothing a student edition ships outside practice/ answers an exercise.

Each file of tests/leak_candidates/ (but those starting with `_`, its helpers) is one candidate: a module with an
exercise's API (its first line `# EXERCISE: <id>`), made with the least glue (renaming, a missing argument check)
from code the edition ships (a chapter's code cells, chapters/*.py, framework/, course/), taken from that source
as it is now, never copied. Each is graded on the exercise's hidden cases; one that passes them all is an answer
the edition gives away, and fails this test. A candidate whose source no longer defines what it looks for raises
`_shipped.NotShipped` on import and is skipped, with the reason: nothing there to grade.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import judge

CANDIDATES = sorted(p for p in (Path(__file__).parent / "leak_candidates").glob("*.py") if not p.name.startswith("_"))


def exercise_of(path: Path) -> int:
    found = re.fullmatch(r"# EXERCISE: (\d+)", path.read_text().splitlines()[0])
    assert found, f"{path.name}: its first line must be '# EXERCISE: <id>'"
    return int(found[1])


def not_shipped(path: Path) -> str | None:
    """Why there is nothing to grade (the candidate's NotShipped), found in this process before a worker starts."""
    spec = importlib.util.spec_from_file_location(f"_leak_candidate_{path.stem}", path)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except LookupError as e:
        if type(e).__name__ == "NotShipped":
            return str(e)
        raise
    return None


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_shipped_code_is_no_answer(path: Path):
    exercise = exercise_of(path)
    reason = not_shipped(path)
    if reason:
        pytest.skip(f"{path.name}: {reason}")
    report = judge.grade(exercise, impl=str(path))
    assert not report.ok, (f"{path.name} passes every hidden case of exercise {exercise}: the edition ships an "
                           f"answer to it\n{report.text()}")


def test_every_exercise_has_candidates():
    assert {exercise_of(p) for p in CANDIDATES} >= set(judge.load_exercises())
