"""Every statement's Grading section maps each sentence that states a requirement to the cases that fail when it
is broken: a table whose header starts with "| Requirement", each row naming one or more cases in backticks in its
last column. Each case named must exist in the exercise's hidden tests, loaded as the judge loads them (the
exercise's `tests` module and its CASES), so that a renamed or removed case cannot leave a table pointing at
nothing. 133's cases quote the statement's sentences they check; each quote must still be in the statement."""

from __future__ import annotations

import importlib
import re

import pytest

import judge
from judge.hidden import online_loop

EXERCISES = sorted(judge.load_exercises())


def grading_section(text: str) -> str:
    start = text.index("\n## Grading\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def requirement_rows(text: str) -> list[tuple[str, list[str]]]:
    """(requirement, [case names]) for each row of the Grading section's requirement tables."""
    rows, in_table = [], False
    for line in grading_section(text).splitlines():
        if line.startswith("| Requirement"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not re.fullmatch(r"\|[\s|:-]+\|", line):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[-1])))
    return rows


def case_names(ex: judge.Exercise) -> set[str]:
    return set(importlib.import_module(ex.tests).CASES.names())


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_each_requirement_names_cases_that_exist(ex_id: int) -> None:
    ex = judge.get_exercise(ex_id)
    rows = requirement_rows((judge.ROOT / ex.statement).read_text())
    assert rows, f"{ex.statement}: its Grading section has no '| Requirement | Cases ... |' table"
    names = case_names(ex)
    for requirement, cases in rows:
        assert cases, f"{ex.statement}: no case named for {requirement!r}"
        missing = [c for c in cases if c not in names]
        assert not missing, f"{ex.statement}: {requirement!r} names cases the judge does not have: {missing}"


def test_the_parser_reads_a_table_and_stops_at_its_end() -> None:
    text = ("# x\n\n## Grading\n\n| Requirement | Cases |\n| --- | --- |\n| a `b` c | `one`, `two: three` |\n\n"
            "| weight | split |\n| --- | --- |\n| `q` | `dim 0` |\n\n## Next\n| Requirement | Cases |\n| r | `z` |\n")
    assert requirement_rows(text) == [("a `b` c", ["one", "two: three"])]


def plain(markdown: str) -> str:
    """Statement text as a sentence reads: no emphasis or code marks, one space between words."""
    return " ".join(re.sub(r"[*`]", "", markdown).split())


def test_online_loop_cases_quote_sentences_the_statement_has() -> None:
    statement = plain((judge.ROOT / judge.get_exercise(133).statement).read_text())
    quotes = {name: re.search(r'"(.+?)"', getattr(online_loop, name)).group(1)
              for name in dir(online_loop) if name.endswith("_RULE")}
    assert len(quotes) >= 4
    for name, quote in quotes.items():
        assert plain(quote) in statement, f"online_loop.{name} quotes {quote!r}, which the statement does not say"
