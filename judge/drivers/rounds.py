"""Rounds: how the grader answers the calls the learner's code makes of the parts it calls but does not write
(129, 130, 131). The learner's code runs in a thread of the worker; each state-changing call of a fake part pauses
it and is posted to the grader as plain data, {"op", "args", "reads"} (the driver's call returns {"call": it}); the
grader compares it with the next call the references made on the same inputs (`answered`) and answers through the
driver's `answer` with that call's record (its "value" and "effect", applied in the worker), or with a departure,
raised into the learner's code as `Departure`. No recorded call reaches the worker before the learner's code has
made it: a departure carries no call, and the grader keeps the call made and the call expected to itself. A
departure is final, whatever the worker does next: every later call of that world departs too, and the grader
reports its own record of the first one. The worker never calls the grader. Read-only calls are answered by the
fakes from the current state.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections import Counter
from typing import Any, Callable

CALL_KEYS = ("op", "args", "reads")  # what a posted call holds; a recorded one adds "value" and "effect"


class Departure(BaseException):
    """Raised into the learner's code at its first call that differs from the references' (a BaseException:
    `except Exception` lets it through), and at every call after it."""


class Rounds:
    """One world's paused calls: the learner's code runs in `run`'s thread, each call of a part is `post`ed."""

    def __init__(self) -> None:
        self.departure: dict | None = None
        self.abandoned = False
        self.shown: dict[str, Any] = {}  # what goes with the next posted call
        self.posted: queue.SimpleQueue = queue.SimpleQueue()  # (True, a paused call or the result) or (False, exc)
        self.answers: queue.SimpleQueue = queue.SimpleQueue()

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (the learner's code and the driver's around it) in a thread: the first call it pauses at, as
        {"call": made, ...}, or what it returned (its exception is raised here)."""
        def body() -> None:
            try:
                self.posted.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the driver's thread
                self.posted.put((False, exc))

        threading.Thread(target=body, daemon=True).start()
        return self.next()

    def answer(self, entry: dict) -> Any:
        """Resume the paused call with the grader's `entry` (a recorded call, or {"departure": ...}); as `run`."""
        self.answers.put(entry)
        return self.next()

    def next(self) -> Any:
        try:
            ok, value = self.posted.get()
        except BaseException:  # the wait was cut short (an in-process time limit): stop the learner's thread too
            self.abandon()
            raise
        if not ok:
            raise value
        return value

    def abandon(self) -> None:
        """No one waits for the learner's thread any more: each later call of a part raises, and a paused one
        resumes raising, so that a loop over the parts ends (a grading worker is killed instead; a grading in the
        test's own process is not)."""
        self.abandoned = True
        self.answers.put({"departure": {"message": "the grading stopped waiting for this code"}})

    def live(self) -> None:
        """Raise Departure once the rounds have departed or been abandoned: every call of a part checks it."""
        if self.abandoned:
            raise Departure("the grading stopped waiting for this code")
        if self.departure is not None:
            raise Departure(self.departure["message"])

    def post(self, made: dict) -> dict:
        """Pause on the call `made` until the grader answers: its recorded entry, or Departure raised. Beside the
        call goes the exception the learner's code is handling, if any (an engine's own `except`), for the report."""
        self.live()
        handled = sys.exc_info()[1]
        note = {"handling": f"{type(handled).__name__}: {str(handled)[:200]}"} if isinstance(handled, Exception) \
            else {}
        self.posted.put((True, {"call": made, **self.shown, **note}))
        self.shown = {k: v for k, v in self.shown.items() if k == "phase"}
        entry = self.answers.get()
        if "departure" in entry:
            self.departure = entry["departure"]
            raise Departure(self.departure["message"])
        return entry


DEPARTED = "this call is not the one the reference's code makes here: the case fails (its report says why)"


def answered(drv: Any, name: str, reply: Any, scripts: dict[Any, list[dict]],
             message: Callable[[dict, dict | None], str]) -> Any:
    """Grader side: the driver's result once each call the learner's code pauses at (`reply`, then each answer's;
    its rounds kept as `name`) is answered from the references' calls of its phase (`scripts`; no phase: None): the
    next recorded call if it is the same call on the same state, else a departure, which ends the world: this and
    every later call of it departs, and the result carries the grader's record of the first departure (the call
    made, the call expected, `message(made, expected)`), whatever the worker reported."""
    consumed: Counter = Counter()
    departures = vars(drv).setdefault("_departures", {})  # kept on the grader's driver: name -> the first departure
    departed = departures.get(name)
    while isinstance(reply, dict) and isinstance(reply.get("call"), dict):
        phase, made = reply.get("phase"), reply["call"]
        calls = scripts.get(phase, [])
        want = calls[consumed[phase]] if consumed[phase] < len(calls) else None
        expected = want and {k: want[k] for k in CALL_KEYS}
        if departed is None and expected is not None and made == expected:
            consumed[phase] += 1
            reply = drv.answer(name, want)
            continue
        if departed is None:
            departed = departures[name] = {"made": made, "expected": expected, "consumed": consumed[phase],
                                          "message": _message(message, made, expected)}
            if isinstance(reply.get("handling"), str):
                departed["handling"] = reply["handling"][:300]
        reply = drv.answer(name, {"departure": {"message": DEPARTED}})
    if departed is None:
        return reply
    worker = reply.get("departure") if isinstance(reply, dict) else None  # its facts beside the call (131: the queue)
    return {**(reply if isinstance(reply, dict) else {}), "departure": {**(worker or {}), **departed}}


def handling(departure: dict) -> str:
    """The end of a departure's message: the exception the learner's code was handling when it made the call."""
    return f" (your code made this call while handling {departure['handling']})" if departure.get("handling") else ""


def departure_of(drv: Any, name: str) -> dict | None:
    """Grader side: the grader's record of the first departure of the rounds `name` that `drv` answered, if any."""
    return vars(drv).get("_departures", {}).get(name)


def _message(message: Callable[[dict, dict | None], str], made: Any, expected: dict | None) -> str:
    try:
        return message(made, expected)
    except Exception:  # noqa: BLE001 - a call no part makes, posted by the learner's code itself
        return f"your code posted a call that no part makes: {str(made)[:200]}"
