"""Exceptions crossing from the worker to the grader, both ends: the worker sends a record of the learner's exception
(`learner_error`), the grader bounds what it received (`received_error`) and rebuilds it (`rebuilt`)."""

from __future__ import annotations

import importlib
import os
import traceback
from contextlib import suppress
from typing import Any

from .harness import context, is_memory_error, trimmed_traceback
from .wire import NAME_LIMIT, cut


def learner_error(exc: BaseException, learner_file: str | None = None) -> dict:
    """The learner's exception as plain data: its class and MRO, its message, exit code and traceback (trimmed to
    `learner_file`, default the context's), cut to wire.TEXT_LIMIT, and the other exercise's stub it came from."""
    relayed = getattr(exc, "_judge_record", None)  # raised by the learner's code the grader's part called back
    if isinstance(relayed, dict):
        return relayed
    learner_file = learner_file or context().learner_file
    err: dict[str, Any] = {"type": type(exc).__name__, "module": type(exc).__module__, "message": cut(exc)}
    if isinstance(exc, SystemExit):
        err["code"] = exc.code if isinstance(exc.code, (int, str, type(None))) else cut(exc.code)
    with suppress(Exception):  # a traceback that cannot be formatted is left out
        err["traceback"] = cut(trimmed_traceback(exc, learner_file))
    err["mro"] = [[c.__module__, c.__name__] for c in type(exc).__mro__[:16]]
    err["stub"] = _other_stub(exc, learner_file)
    if is_memory_error(exc):
        err["memory"] = True
    return err


def _other_stub(exc: BaseException, learner_file: str | None) -> list[str] | None:
    """[practice file, function] when the learner's own code called another exercise's untouched practice stub
    directly (e.g. 129's Scheduler calling practice/preemption.py): that NotImplementedError is not theirs."""
    frames = traceback.extract_tb(exc.__traceback__)[-2:]
    if not isinstance(exc, NotImplementedError) or len(frames) < 2 or not learner_file:
        return None
    caller, raiser = frames
    same = lambda a, b: os.path.realpath(a) == os.path.realpath(b)  # noqa: E731
    if not same(caller.filename, learner_file) or same(raiser.filename, learner_file) or \
            os.path.basename(os.path.dirname(raiser.filename)) != "practice":
        return None
    return [f"practice/{os.path.basename(raiser.filename)}", raiser.name]


def known_class(module: str, name: str) -> type | None:
    """The builtin or framework.errors exception class `module.name`, or None."""
    if module not in ("builtins", "framework.errors"):
        return None
    cls = getattr(importlib.import_module(module), name, None)
    ok = isinstance(cls, type) and issubclass(cls, BaseException) and cls not in (KeyboardInterrupt, GeneratorExit)
    return cls if ok else None


def received_error(rec: dict) -> dict:
    """An exception record as the grader may use it, whatever the worker sent: bounded strings, a type name that is
    a short identifier (else "LearnerError")."""
    name = rec.get("type")
    name = name if isinstance(name, str) and name.isidentifier() and len(name) <= NAME_LIMIT else "LearnerError"
    code = rec.get("code")
    out = {"type": name, "module": cut(rec.get("module"), NAME_LIMIT), "message": cut(rec.get("message", "")),
           "code": code if isinstance(code, (int, type(None))) and not isinstance(code, bool) else cut(code, 200),
           "memory": rec.get("memory") is True}
    if isinstance(rec.get("traceback"), str):
        out["traceback"] = cut(rec["traceback"])
    mro = rec.get("mro")
    if isinstance(mro, list):  # the exception's bases, so that a learner's ValueError subclass is a ValueError
        out["mro"] = [[cut(m, NAME_LIMIT), cut(n, NAME_LIMIT)] for m, n in
                      (pair for pair in mro[:16] if isinstance(pair, list) and len(pair) == 2)]
    stub = rec.get("stub")
    if isinstance(stub, list) and len(stub) == 2 and all(isinstance(x, str) for x in stub):
        out["stub"] = [cut(x, 200) for x in stub]
    return out


class LearnerError(Exception):
    """An exception of a class the grader does not know (defined in the learner's code, or a library's)."""


# Classes made for names the worker sends: at most _MAX_CLASSES, dropped after every submission (`forget`).
_MAX_CLASSES = 256
_classes: dict[str, type] = {}


def rebuilt(err: dict) -> BaseException:
    """The learner's exception, rebuilt here: the very class when it is a builtin or framework.errors one, else a
    LearnerError of the same name deriving from the nearest known class of its MRO (a subclass of ValueError is a
    ValueError here too; a look-alike NoFreeBlocksError is not the real one)."""
    name, module, message = str(err.get("type")), str(err.get("module")), str(err.get("message", ""))
    cls: Any = MemoryError if err.get("memory") else known_class(module, name)
    if cls is None:
        mro = [m for m in err.get("mro") or [] if isinstance(m, list) and len(m) == 2]
        base = next((k for k in (known_class(str(m), str(n)) for m, n in mro[1:]) if k is not None), Exception)
        cls = _learner_class(name, base)
    try:
        exc = cls(err.get("code")) if cls is SystemExit else cls(message)
    except Exception:  # noqa: BLE001 - an exception class with a different constructor
        exc = _learner_class(name, Exception)(message)
    exc._judge_traceback = err.get("traceback")  # type: ignore[attr-defined]
    return exc


def _learner_class(name: str, base: type) -> type:
    """A class named `name` deriving from LearnerError (and `base`); at most _MAX_CLASSES are kept, so that a worker
    that invents names cannot grow the grader."""
    key = f"{name}({base.__name__})"
    cls = _classes.get(key)
    if cls is None:
        try:
            cls = type(name, (LearnerError,) if base is Exception else (base, LearnerError), {})
        except TypeError:  # a base whose layout cannot be mixed in
            cls = type(name, (LearnerError,), {})
        if len(_classes) < _MAX_CLASSES:
            _classes[key] = cls
    return cls


def forget() -> None:
    """Drop the classes made for what a submission's worker sent (after each submission)."""
    _classes.clear()
