"""Public cases: the cases of each exercise a student can run on their copy (the student edition). judge/edition.py
records each driver call a public case makes on the reference and its answer (judge/public/<slug>.json); here the
calls are replayed to the student's code and each answer is compared with the reference's by judge/compare.py, an
exception by its class. No reference and no hidden case is needed to replay them."""

from __future__ import annotations

import importlib
import json
import re
from types import ModuleType
from typing import Any

from . import wire
from .compare import TOL, difference, plain
from .drivers.rounds import handling
from .harness import short
from .registry import Exercise, public_path
from .remote import Session, another_stub

__all__ = ["load", "public_path", "raised_as", "replay"]
LONG = 200  # characters past which two lists of different lengths are shown by their lengths


def load(ex: Exercise) -> dict[str, list] | None:
    path = public_path(ex)
    return json.loads(path.read_text())["cases"] if path.is_file() else None


def _raised(err: dict) -> str:
    return f"your code raised {err.get('type')}: {err.get('message')}" + \
        (f"\n{err['traceback']}" if err.get("traceback") else "")


def replay(session: Session, log: list, answers: list | None = None) -> str | None:
    """Replay one recorded case to the student's code; None if every answer matches, else the first difference.
    `answers`, if given, receives (request, the recorded answer, the student's) for each call made."""
    calls: list[tuple[Any, str]] = []  # (the driver function called, the call as code)
    for req, want in log:
        got = session.request({k: v for k, v in req.items() if k != "id"})
        if answers is not None:
            answers.append((req, want, got))
        calls.append((req.get("attr"), _described(req)))
        problem = _problem(want, got, calls[-1][1], req)
        if problem:  # the calls that passed before a stub's (this exercise's or another's) say nothing
            return problem if problem.startswith(("not implemented", "exercise ")) else problem + _earlier(calls[:-1])
    return None


def _another_stub(err: dict, what: str) -> str | None:
    """Another exercise's stub raised `err` in the call `what`: that exercise first, then the call."""
    other = another_stub(err)
    return f"{other}\ninput: {what}" if other else None


def _earlier(calls: list[tuple[Any, str]]) -> str:
    """The calls of the case before the failing one, if any: from the last that builds what the others use (a call
    of the case's first function, such as a new world of several in one case), at most 5 shown."""
    if not calls:
        return ""
    start = max(i for i, (fn, _) in enumerate(calls) if fn == calls[0][0])
    texts = [text for _, text in calls[start:]]
    shown = texts if len(texts) <= 6 else texts[:1] + [f"... {len(texts) - 5} more calls"] + texts[-4:]
    skipped = f"({start} call{'s' * (start > 1)} of this case before, for other inputs, passed too)\n" if start else ""
    return "\nearlier calls of this case (they passed):\n" + skipped + "\n".join(shown)


def _problem(want: dict, got: dict, what: str, req: dict) -> str | None:
    """What is wrong with the student's answer `got` to the call `what` (the driver request `req`), given the
    reference's `want`."""
    err = got.get("error") or {}
    if not got.get("ok") and err.get("type") == "NotImplementedError":
        return _another_stub(err, what) or f"not implemented yet: {what} raises NotImplementedError"
    if want.get("ok") != got.get("ok"):
        return f"{what}: {_raised(err)}" if want.get("ok") else \
            f"{what}: expected {want['error']['type']} to be raised, but it returned"
    if not want.get("ok"):
        return None if raised_as(err, want["error"]) else \
            f"{what}: expected {want['error']['type']}, got {err.get('type')}"
    w, g = wire.decode(want.get("value")), wire.decode(got.get("value"))
    w, g = (_driver_says(req, "compared", v) or v for v in (w, g))  # what the driver compares of its answers
    # the learner's exception as a driver reported it ({"error": ...}) where the reference's answer had none
    driver_err = g.get("error") if isinstance(g, dict) and not (isinstance(w, dict) and "error" in w) else None
    if isinstance(driver_err, dict):
        if driver_err.get("type") == "NotImplementedError":
            return _another_stub(driver_err, what) or \
                f"not implemented yet: {driver_err.get('message') or what + ' raises NotImplementedError'}"
        return f"{what}: {_raised(driver_err)}"
    d = difference(w, g, tol=getattr(_driver(req), "TOLERANCE", TOL))
    if d is None:
        return None
    hint = _recorded_hint(want.get("hints"), d[0], g)
    said = next((g[key] for key in ("problem", "hung") if isinstance(g, dict) and isinstance(g.get(key), str)), None)
    if said:  # what the driver found wrong, or a wait that never ended
        return f"{said}\ninput: {what}" + (f"\nhint: {g['hint']}" if isinstance(g.get("hint"), str) else "")
    departure = _departure(w, g, req)
    if departure:
        return f"{departure}\ninput: {what}" + (f"\nhint: {hint}" if hint else "")
    where, expected, value = _whole_list(w, g, *d)
    unexpected = _unexpected_error(w, g)
    if unexpected and unexpected.get("type") == "NotImplementedError":
        return _another_stub(unexpected, what) or f"not implemented yet: {unexpected.get('message') or what}"
    cut_short = isinstance(value, list) and isinstance(expected, list) and value == expected[:len(value)]
    if unexpected and (value is None or cut_short):  # the student's code raised before making it (all of it)
        return f"{what}: {_raised(unexpected)}"
    if where == "['raised']" and value is None:  # a driver's answer names the exception raised, if any
        return f"{what}: expected {expected} to be raised, but it returned" + (f"\nhint: {hint}" if hint else "")
    raised = f"\n{_raised(unexpected)}" if unexpected else ""
    long_lists = isinstance(expected, list) and isinstance(value, list) and len(repr(expected)) > LONG
    shown = f"{len(expected)} items expected, got {len(value)}" if long_lists else \
        f"expected {_value(expected)}, got {_value(value)}"
    if _increasing(expected) and _increasing(value):  # a set of ids (tokens masked, blocks): what differs
        shown = (f"{short(sorted(set(value) - set(expected)))} in yours only, "
                 f"{short(sorted(set(expected) - set(value)))} missing from yours")
    return (f"{_named(req, where) or 'the result'}: {shown}\ninput: {what}{raised}"
            + (f"\nhint: {hint}" if hint else ""))


def _value(v: Any) -> str:
    """A value of an answer as the learner reads it: a string quoted (an empty one, a space, stop vs 'stop')."""
    return repr(v) if isinstance(v, str) else short(v)


def _recorded_hint(hints: Any, where: str, got: Any) -> str | None:
    """The hint the hidden cases give for this answer, recorded with the reference's (judge/edition.py): the first
    [path, value, hint] whose path holds `where` and whose value is what the student's answer has there (None: any
    value)."""
    for path, value, hint in wire.decode(hints) if hints else []:
        try:
            if where.startswith(path) and (value is None or difference(value, _at(got, path)) is None):
                return hint
        except (KeyError, IndexError, TypeError):  # the student's answer has nothing at `path`
            continue
    return None


def _paused(answer: Any) -> bool:
    """Whether a driver's answer is the call a part is paused at (judge/drivers/rounds.py)."""
    return isinstance(answer, dict) and isinstance(answer.get("call"), dict)


def _departure(want: Any, got: Any, req: dict) -> str | None:
    """Where the student's code paused at another call of a part than the reference's, or at none (or one) where the
    reference's code did (not), in the words of the driver's `departure_message`; else None."""
    if not (_paused(want) or _paused(got)) or (_paused(want) and _paused(got) and got["call"] == want["call"]):
        return None
    message = _driver(req).departure_message
    return message(got["call"] if _paused(got) else None, want["call"] if _paused(want) else None) + \
        (handling(got) if _paused(got) else "")


def _whole_list(want: Any, got: Any, where: str, expected: Any, value: Any) -> tuple[str, Any, Any]:
    """A difference inside a short list of numbers, shown as the whole list (`[4, 0]` against `[4, 5]` says more
    than one element)."""
    outer = re.sub(r"\[\d+\]$", "", where)
    if outer == where:
        return where, expected, value
    w, g = _at(want, outer), _at(got, outer)
    numbers = isinstance(w, list) and isinstance(g, list) and all(isinstance(x, (int, float)) for x in w)
    return (outer, w, g) if numbers and len(w) <= 16 or _increasing(w) and _increasing(g) else (where, expected, value)


def _increasing(value: Any) -> bool:
    """A list of more than 16 ints in increasing order: a set of ids, which is read by what one side lacks."""
    return isinstance(value, list) and len(value) > 16 and all(type(x) is int for x in value) and \
        all(a < b for a, b in zip(value, value[1:]))


def _at(value: Any, where: str) -> Any:
    """The item at `where` (a path of difference(): ['key'][0]...) in the decoded trace `value` as compared."""
    value = plain(value)
    for key, index in re.findall(r"\['([^']*)'\]|\[(\d+)\]", where):
        value = value[key] if index == "" else value[int(index)]
    return value


def _named(req: dict, where: str) -> str:
    """Where in a driver's answer, in the driver's own words (its `where`, if any) or read as attributes."""
    path = _path(where)
    return _driver_says(req, "where", path) or path


def _driver_says(req: dict, hook: str, *first: Any) -> Any:
    """What the driver of request `req` says of it through its function `hook` (describe, where, compared), given
    `first`, the request's function and its arguments; None where the driver has no such function."""
    fn = getattr(_driver(req), hook, None)
    return fn(*first, req.get("attr"), *[wire.decode(a) for a in req.get("args", [])]) if fn else None


def _driver(req: dict) -> ModuleType:
    """The public driver module that request `req` calls (judge/drivers/<name>.py)."""
    return importlib.import_module(f"judge.drivers.{req['driver']}")


def raised_as(got: dict, want: dict) -> bool:
    """Whether the exception `got` (as the worker reported it) is an instance of the class of `want`: the same
    class or a subclass (a learner's `class TableTooShort(ValueError)` is a ValueError)."""
    mro = got.get("mro") or [[got.get("module"), got.get("type")]]
    return [want.get("module"), want.get("type")] in [list(m) for m in mro]


def _described(req: dict) -> str:
    """A driver call as the Python it stands for, from the driver's own `describe`, else (no describe, or it gives
    None) as the driver's function and its arguments."""
    text = _driver_says(req, "describe")
    if text:
        return text
    args = [wire.decode(a) for a in req.get("args", [])]
    text = ", ".join(_value(a) for a in args)
    return f"{req.get('attr')}({text if len(text) < 200 else text[:200] + ' ...'})"


def _unexpected_error(want: Any, got: Any) -> dict | None:
    """The first learner exception a driver's answer reports (its "_error" diagnostics) where the reference's
    answer raised nothing of that kind."""
    if isinstance(got, dict):
        if isinstance(got.get("_error"), dict) and not (isinstance(want, dict) and want.get("raised")
                                                         and want.get("raised") == got.get("raised")):
            return got["_error"]
        pairs = [((want or {}).get(k) if isinstance(want, dict) else None, v) for k, v in got.items()]
    elif isinstance(got, list):
        pairs = [(want[i] if isinstance(want, list) and i < len(want) else None, v) for i, v in enumerate(got)]
    else:
        return None
    return next((e for e in (_unexpected_error(w, g) for w, g in pairs) if e), None)


def _path(where: str) -> str:
    """['steps'][0]['returned'] -> steps[0].returned: where in a driver's answer, read as attributes."""
    return re.sub(r"\['([^']*)'\]", r".\1", where).lstrip(".")
