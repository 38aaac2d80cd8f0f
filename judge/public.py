"""Public cases: the few cases of each exercise a student can run on their own copy (the student edition).

A public case is recorded on the instructor's side (judge/edition.py, `record`): its case function runs against
the reference (in a worker, like any graded code), and every request the case sent and every answer the reference
gave is written to judge/public/<slug>.json. On the student's side the recorded requests are replayed to the
student's code and each answer is compared with the reference's by judge/compare.py (the one comparer: a tensor,
an array, a list or a tuple of the same numbers are equal, floats within its tolerance). An object the worker
keeps (a driver's engine) is an opaque reference, never compared; an exception must be an instance of the same
class. No reference and no hidden case is needed to replay them.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

from . import wire
from .compare import diagnostic, difference
from .harness import short
from .registry import ROOT, Exercise
from .remote import Session

PUBLIC_DIR = ROOT / "judge" / "public"
__all__ = ["diagnostic", "load", "public_path", "raised_as", "replay"]  # diagnostic: for judge/edition.py


def public_path(ex: Exercise) -> Path:
    return PUBLIC_DIR / f"{ex.slug.replace('-', '_')}.json"


def load(ex: Exercise) -> dict[str, list] | None:
    path = public_path(ex)
    return json.loads(path.read_text())["cases"] if path.is_file() else None


def _value(data: Any) -> Any:
    """A reply's value; an object the worker keeps (numbered differently in the recording) as "<an object>"."""
    return wire.decode(data, lambda d: "<an object>")


def _handles(data: Any, out: list[int]) -> list[int]:
    """The numbers of the objects the worker keeps, in a reply, in order."""
    if isinstance(data, dict):
        if "__handle__" in data:
            out.append(int(data["__handle__"]))
        for v in data.values():
            _handles(v, out)
    elif isinstance(data, list):
        for v in data:
            _handles(v, out)
    return out


def _remap(data: Any, mapping: dict[int, int]) -> Any:
    if isinstance(data, dict):
        if "__handle__" in data and set(data) == {"__handle__"}:
            return {"__handle__": mapping.get(int(data["__handle__"]), -1)}
        return {k: (mapping.get(v, -1) if k == "handle" and isinstance(v, int) else _remap(v, mapping))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_remap(v, mapping) for v in data]
    return data


def _raised(err: dict) -> str:
    return f"your code raised {err.get('type')}: {err.get('message')}" + \
        (f"\n{err['traceback']}" if err.get("traceback") else "")


def replay(session: Session, log: list) -> str | None:
    """Replay one recorded case to the student's code; None if every answer matches, else the first difference."""
    mapping: dict[int, int] = {}
    names: dict[int, str] = {}  # recorded handle -> the name it was read as (paged_attention, ...)
    for req, want in log:
        got = session.request(_remap({k: v for k, v in req.items() if k != "id"}, mapping))
        what = _described(req) or _call_text(req, names)
        if req.get("op") == "getattr" and isinstance(want.get("value"), dict) and "__handle__" in want["value"]:
            names[int(want["value"]["__handle__"])] = str(req.get("attr"))
        problem = _problem(want, got, what)
        if problem:
            return problem
        for a, b in zip(_handles(want.get("value"), []), _handles(got.get("value"), [])):
            mapping.setdefault(a, b)
    return None


def _problem(want: dict, got: dict, what: str) -> str | None:
    """What is wrong with the student's answer `got` to the call `what`, given the reference's `want`."""
    err = got.get("error") or {}
    if not got.get("ok") and err.get("type") == "NotImplementedError":
        return f"not implemented yet: {what} raises NotImplementedError"
    if want.get("ok") != got.get("ok"):
        return f"{what}: {_raised(err)}" if want.get("ok") else \
            f"{what}: expected {want['error']['type']} to be raised, but it returned"
    if not want.get("ok"):
        return None if raised_as(err, want["error"]) else \
            f"{what}: expected {want['error']['type']}, got {err.get('type')}"
    w, g = _value(want.get("value")), _value(got.get("value"))
    driver_err = _driver_error(w, g)
    if driver_err:
        if driver_err.get("type") == "NotImplementedError":
            return f"not implemented yet: {driver_err.get('message') or what + ' raises NotImplementedError'}"
        return f"{what}: {_raised(driver_err)}"
    d = difference(w, g)
    if d is None:
        return None
    if isinstance(g, dict) and isinstance(g.get("problem"), str):
        return f"{g['problem']}\n      input: {what}"
    where, expected, value = d
    unexpected = _unexpected_error(w, g)
    if unexpected and unexpected.get("type") == "NotImplementedError":
        return f"not implemented yet: {unexpected.get('message') or what}"
    raised = f"\n      {_raised(unexpected)}" if unexpected else ""
    return (f"{_path(where) or 'the result'}: expected {short(expected)}, got {short(value)}\n      input: {what}"
            f"{raised}")


def raised_as(got: dict, want: dict) -> bool:
    """Whether the exception `got` (as the worker reported it) is an instance of the class of `want`: the same
    class or a subclass (a learner's `class TableTooShort(ValueError)` is a ValueError)."""
    mro = got.get("mro") or [[got.get("module"), got.get("type")]]
    return [want.get("module"), want.get("type")] in [list(m) for m in mro]


def _driver_error(want: Any, got: Any) -> dict | None:
    """The learner's exception, as a driver reported it in its answer ({"error": ...}) where the reference's answer
    had none."""
    expected = isinstance(want, dict) and "error" in want
    if isinstance(got, dict) and isinstance(got.get("error"), dict) and not expected:
        return got["error"]
    return None


def _described(req: dict) -> str | None:
    """A driver call as the Python it stands for, from the driver's own `describe` (None: it has none)."""
    if "driver" not in req:
        return None
    describe = getattr(importlib.import_module(f"judge.drivers.{req['driver']}"), "describe", None)
    return describe(req.get("attr"), *[_value(a) for a in req.get("args", [])]) if describe else None


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


def _call_text(req: dict, names: dict[int, str]) -> str:
    """A call through the generic proxies (exercise 127) as Python."""
    if req.get("op") == "getattr":
        return f"reading .{req.get('attr')}"
    name = req.get("attr") or names.get(req.get("handle"), "the function")
    args = ", ".join(_arg_text(_value(a)) for a in req.get("args", []))
    return f"{name}({args if len(args) < 200 else args[:200] + ' ...'})"


def _arg_text(value: Any) -> str:
    """An argument as Python: a tensor by its shape and dtype (its numbers are too many to paste)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"<{value.dtype} tensor of shape {list(value.shape)}>"
    return short(value)
