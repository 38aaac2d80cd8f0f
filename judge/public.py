"""Public cases: the few cases of each exercise a student can run on their own copy (the student edition).

A public case is recorded on the instructor's side (judge/edition.py, `record`): its case function runs against
the reference (in a worker, like any graded code), and every request the case sent and every answer the reference
gave is written to judge/public/<slug>.json. On the student's side the recorded requests are replayed to the
student's code and each answer is compared with the reference's, as the engine would read it: a tensor, a numpy array, a list or a
tuple of the same numbers are equal (floats within 1e-4 relative and absolute), an object must have each public
attribute the reference's had, and an exception must be of the same type. No reference and no hidden case is
needed to replay them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .registry import ROOT, Exercise
from .remote import Session

PUBLIC_DIR = ROOT / "judge" / "public"
TOL = 1e-4


def public_path(ex: Exercise) -> Path:
    return PUBLIC_DIR / f"{ex.slug.replace('-', '_')}.json"


def load(ex: Exercise) -> dict[str, list] | None:
    path = public_path(ex)
    return json.loads(path.read_text())["cases"] if path.is_file() else None


def diagnostic(key: str) -> bool:
    """Whether a key of a driver's answer is a diagnostic (one leading "_"; "__" marks wire types)."""
    return key.startswith("_") and not key.startswith("__")


def _plain(v: Any) -> Any:
    """A wire value as the engine would read it: arrays and tensors as nested lists of numbers."""
    if isinstance(v, dict):
        if "__tensor__" in v or "__ndarray__" in v:
            from . import wire

            x = wire.decode(v)
            return x.tolist() if hasattr(x, "tolist") else x
        if "__tuple__" in v:
            return [_plain(x) for x in v["__tuple__"]]
        if "__npscalar__" in v:
            return v["value"]
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def difference(want: Any, got: Any, where: str = "the result") -> str | None:
    """None if `got` (the student's answer) matches `want` (the reference's), else where they first differ."""
    if isinstance(want, dict) and "__handle__" in want:
        if not (isinstance(got, dict) and "__handle__" in got):
            return f"{where}: expected an object ({want.get('type')}), got {_short(_plain(got))}"
        for k, v in (want.get("attrs") or {}).items():
            if k not in (got.get("attrs") or {}):
                return f"{where}: the object has no attribute {k!r}"
            d = difference(v, got["attrs"][k], f"{where}.{k}")
            if d:
                return d
        return None
    w, g = _plain(want), _plain(got)
    return _diff_plain(w, g, where)


def _diff_plain(w: Any, g: Any, where: str) -> str | None:
    if isinstance(w, bool) or isinstance(g, bool):
        return None if w == g else f"{where}: expected {_short(w)}, got {_short(g)}"
    if isinstance(w, (int, float)) and isinstance(g, (int, float)):
        if isinstance(w, float) or isinstance(g, float):
            ok = math.isclose(w, g, rel_tol=TOL, abs_tol=TOL) or (math.isnan(w) and math.isnan(g))
        else:
            ok = w == g
        return None if ok else f"{where}: expected {_short(w)}, got {_short(g)}"
    if isinstance(w, list) and isinstance(g, list):
        if len(w) != len(g):
            return f"{where}: expected {len(w)} values, got {len(g)}: expected {_short(w)}, got {_short(g)}"
        for i, (a, b) in enumerate(zip(w, g)):
            d = _diff_plain(a, b, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(w, dict) and "__handle__" in w:  # an object inside a value: its attributes, not its number
        return difference(w, g, where)
    if isinstance(w, dict) and isinstance(g, dict):
        for k in w:
            if diagnostic(k):  # a driver's diagnostics (the learner's traceback): never compared
                continue
            if k not in g:
                return f"{where}: no {k!r}"
            d = _diff_plain(w[k], g[k], f"{where}[{k!r}]")
            if d:
                return d
        return None
    return None if w == g else f"{where}: expected {_short(w)}, got {_short(g)}"


def _short(v: Any) -> str:
    text = repr(v)  # plain data: Python literals (None, True), as a learner would paste them
    return text if len(text) <= 300 else text[:300] + " ..."


def _handles(data: Any, out: list[int]) -> list[int]:
    """The handle numbers in a reply, in order."""
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


def replay(session: Session, log: list) -> str | None:
    """Replay one recorded case to the student's code; None if every answer matches, else the first difference."""
    mapping: dict[int, int] = {}
    names: dict[int, str] = {}  # recorded handle -> the attribute it was read as (build_batch, allocate, ...)
    for step, (req, want) in enumerate(log, 1):
        msg = _remap({k: v for k, v in req.items() if k != "id"}, mapping)
        got = session.request(msg)
        what = _call_text(req, names)
        if not got.get("ok") and (got.get("error") or {}).get("type") == "NotImplementedError":
            return f"not implemented yet: {what} raises NotImplementedError"
        if req.get("op") == "getattr" and isinstance(want.get("value"), dict) and "__handle__" in want["value"]:
            names[int(want["value"]["__handle__"])] = str(req.get("attr"))
        if want.get("ok") != got.get("ok"):
            if want.get("ok"):
                err = got.get("error") or {}
                return f"step {step}, {what}: your code raised {err.get('type')}: {err.get('message')}" + \
                       (f"\n{err['traceback']}" if err.get("traceback") else "")
            return f"step {step}, {what}: expected {want['error']['type']} to be raised, but it returned"
        if not want.get("ok"):
            if not raised_as(got.get("error") or {}, want["error"]):
                return f"step {step}, {what}: expected {want['error']['type']}, got {got['error'].get('type')}"
            continue
        described = _described(req)
        problem = _driver_error(want.get("value"), got.get("value"), described or what)
        if problem:
            return problem
        if described:
            d = difference(want.get("value"), got.get("value"), "")
            if not d:
                continue
            problem = (got.get("value") or {}).get("problem") if isinstance(got.get("value"), dict) else None
            if isinstance(problem, str):
                return f"{problem}\n      input: {described}"
            err = _unexpected_error(want.get("value"), got.get("value"))
            if err and err.get("type") == "NotImplementedError":
                return f"not implemented yet: {err.get('message') or described}"
            raised = f"\n      your code raised {err.get('type')}: {err.get('message')}" + (
                f"\n{err['traceback']}" if err.get("traceback") else "") if err else ""
            return f"{_path(d)}\n      input: {described}{raised}"
        d = difference(want.get("value"), got.get("value"), what)
        if d:
            return f"step {step}: {d}"
        for a, b in zip(_handles(want.get("value"), []), _handles(got.get("value"), [])):
            mapping.setdefault(a, b)
    return None


def raised_as(got: dict, want: dict) -> bool:
    """Whether the exception `got` (as the worker reported it) is an instance of the class of `want`: the same
    class or a subclass (a learner's `class TableTooShort(ValueError)` is a ValueError)."""
    mro = got.get("mro") or [[got.get("module"), got.get("type")]]
    return [want.get("module"), want.get("type")] in [list(m) for m in mro]


def _driver_error(want: Any, got: Any, what: str) -> str | None:
    """The learner's exception, as a driver reported it in its answer ({"error": ...}) where the reference's answer
    had none."""
    if not (isinstance(got, dict) and isinstance(got.get("error"), dict)) or \
            (isinstance(want, dict) and "error" in want):
        return None
    err = got["error"]
    if err.get("type") == "NotImplementedError":
        return f"not implemented yet: {err.get('message') or what + ' raises NotImplementedError'}"
    return f"{what}: your code raised {err.get('type')}: {err.get('message')}" + \
        (f"\n{err['traceback']}" if err.get("traceback") else "")


def _described(req: dict) -> str | None:
    """A driver call as the Python it stands for, from the driver's own `describe` (None: it has none)."""
    import importlib

    from . import wire

    if "driver" not in req:
        return None
    describe = getattr(importlib.import_module(f"judge.drivers.{req['driver']}"), "describe", None)
    return describe(req.get("attr"), *[wire.decode(a) for a in req.get("args", [])]) if describe else None


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
    if req.get("op") == "getattr":
        return f"reading .{req.get('attr')}"
    name = req.get("attr") or names.get(req.get("handle"), "the object")
    args = ", ".join(_short(_plain(a)) for a in req.get("args", []))
    return f"{name}({args if len(args) < 200 else args[:200] + ' ...'})"
