"""The header lines of a judge fixture (tests/judge_cases/<folder>/*.py), read alike by every test of the fixtures:
`EXPECT: <what its report must say>`, and `CASES: <text>`, which grades a slow fixture only on the cases whose
name holds the text (those that show its diagnosis)."""

from __future__ import annotations

import re
from pathlib import Path


def header(path: Path, name: str) -> str | None:
    """The text after `NAME: ` in the fixture, or None if it has no such line."""
    found = re.search(rf"{name}: (.+)", path.read_text())
    return found.group(1).strip() if found else None


def expect_of(path: Path) -> str:
    """The diagnosis a wrong fixture's report must show."""
    expect = header(path, "EXPECT")
    assert expect, f"{path.name} has no EXPECT line"
    return expect


def cases_of(path: Path) -> list[str] | None:
    """The cases to grade the fixture on: those its CASES line names, else every case (None)."""
    cases = header(path, "CASES")
    return [cases] if cases else None
