"""A script: what the parts the learner's code calls, but does not write, answer for one case's inputs. The grader
records it from the references (their answers only, never their code) and sends it with the driver call; the
worker's fakes replay it, and the worker never calls the grader.

Each entry is one state-changing call, in order: the call as plain data, the state of the requests it reads as the
reference engine had it just before (checked), its effect on that state and the value it returns (applied and
returned by the fake). The first call that differs from the next entry, or that finds a different state, is the
departure: the run ends there (`Departure`), and the grader reports the step, the call made and the one expected.
Read-only calls (queues, free blocks) are answered by the fakes from the current state, not from the script.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from judge.harness import int_values, short


class Departure(BaseException):
    """Raised into the learner's code at its first call that differs from the script (a BaseException: `except
    Exception` lets it through), and at every call after it."""


def plain(value: Any) -> Any:
    """`value` as plain data for a departure record: ints, strs, None, lists of ints as they are, else a repr."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    values = int_values(value)
    return values if values is not None else short(value)


class Script:
    """The entries not yet replayed, and the departure once there is one (plain data)."""

    def __init__(self) -> None:
        self.entries: deque[dict] = deque()
        self.departure: dict | None = None

    def load(self, entries: list[dict]) -> None:
        """The entries of the next driver call (what the previous one left unused is the learner's to explain)."""
        self.entries = deque(entries)

    def take(self, call: list, state: dict[str, dict]) -> dict:
        """The next entry, if it is `call` made while the requests it reads are in `state` ({name: {field:
        value}}); else the departure, recorded and raised."""
        if self.departure is None:
            want = self.entries[0] if self.entries else None
            if want is not None and want["call"] == call:
                found = _first_difference(want.get("state", {}), state)
                if found is None:
                    return self.entries.popleft()
            else:
                found = {}
            self.departure = {"call": call, "expected": None if want is None else want["call"], **found}
        raise Departure(f"your code called {short(call)}, where the reference engine's did "
                        f"{short(self.departure['expected'])}")


def _first_difference(want: dict[str, dict], got: dict[str, dict]) -> dict | None:
    for name, fields in want.items():
        for field, value in fields.items():
            mine = got.get(name, {}).get(field)
            if mine != value:
                return {"request": name, "field": field, "want": value, "got": plain(mine)}
    return None
