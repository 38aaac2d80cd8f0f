"""The dependency map has one source, the exercises' metadata (`part_references`, `parts_run_by`, read through
course.exercises_of): each statement's "Needs" line, `practice/judge.py list` and each chapter's first lines say
what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import course
from judge import load_exercises

ROOT = Path(__file__).resolve().parent.parent


def test_each_statement_says_what_the_metadata_says():
    for ex in load_exercises().values():
        text = (ROOT / ex.statement).read_text()
        found = re.search(r"^\*\*Needs:\*\*.*?(?=\n\n)", text, re.MULTILINE | re.DOTALL)
        assert found, f"{ex.statement} has no Needs paragraph"
        assert " ".join(found.group(0).split()) == ex.needs_line(), f"{ex.statement}: write {ex.needs_line()!r}"


def test_the_map_names_what_each_exercise_runs():
    """130 runs the whole engine but its own loop; 134's end-to-end case runs the engine, 130 included; the
    exercises that run no other exercise's code need none."""
    exercises = load_exercises()
    assert course.exercises_of(["engine"]) == ([125, 126, 127, 128, 129, 130],
                                               {131: "preempts", 132: "caches prefixes"})
    assert exercises[130].needs() == "exercises 125–129, and 131, 132 where a case preempts or caches prefixes"
    assert "130" in exercises[134].needs() and exercises[134].needs_line().count("its end-to-end case") == 1
    assert [i for i, ex in exercises.items() if ex.needs() is None] == [125, 128, 132, 135, 136]
    assert course.span([125, 126, 127, 129, 131, 132]) == "125–127, 129, 131, 132"


def test_list_and_chapters_show_it():
    shown = subprocess.run([sys.executable, "practice/judge.py", "list"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120).stdout
    row = next(line for line in shown.splitlines() if line.startswith("130 "))
    assert "125–129 (131, 132)" in row, shown
    assert course.chapter_needs("01_kv_cache") == "this chapter's cells run no exercise's code"
    assert course.chapter_needs("02_block_pool").startswith("this chapter's live cells run exercise 125:")
