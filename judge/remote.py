"""The learner's code as the grader sees it: public drivers run beside it in the worker, answering plain data.

A hidden case receives `impl`, a RemoteModule (the worker's session), and observes the learner's code only through
a public driver run beside it (`driver(impl, "batch").build(items, 4)`): the driver calls the learner's code
natively there and answers with plain data (judge/wire.py); an object a driver keeps for later calls (a scheduler
world, an engine) stays there, under a name the case chooses (judge/drivers, `keep`). Learner exceptions come back
as their type name, message and trimmed traceback, and are raised here as an exception of the same builtin type (or
of framework.errors), or as a LearnerError named after it: nothing of the learner's runs here.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

from . import wire
from .harness import CaseFailure, LearnerRaised, raised_failure


class WorkerLost(BaseException):
    """The worker died, hung or flooded its output while the case waited for it (the runner gives the verdict)."""


class LearnerError(Exception):
    """An exception of a class the grader does not know (defined in the learner's code, or a library's)."""


_KNOWN_MODULES = ("builtins", "framework.errors")
# Classes made for names the worker sends: at most _MAX_CLASSES, dropped after every submission (`forget`).
_MAX_CLASSES = 256
_classes: dict[str, type] = {}


def _known_class(module: str, name: str) -> type | None:
    """The builtin or framework.errors exception class `module.name`, or None."""
    if module not in _KNOWN_MODULES:
        return None
    import importlib

    cls = getattr(builtins if module == "builtins" else importlib.import_module(module), name, None)
    ok = isinstance(cls, type) and issubclass(cls, BaseException) and cls not in (KeyboardInterrupt, GeneratorExit)
    return cls if ok else None


def _exception(err: dict) -> BaseException:
    """The learner's exception, rebuilt here: the very class when it is a builtin or framework.errors one, else a
    LearnerError of the same name that also derives from the nearest known class of its bases, so that a
    `class TableTooShort(ValueError)` is a ValueError here too (and a look-alike NoFreeBlocksError is not the real
    one)."""
    name, module, message = str(err.get("type")), str(err.get("module")), str(err.get("message", ""))
    cls: Any = MemoryError if err.get("memory") else _known_class(module, name)
    if cls is None:
        mro = [m for m in err.get("mro") or [] if isinstance(m, list) and len(m) == 2]
        base = next((k for k in (_known_class(str(m), str(n)) for m, n in mro[1:]) if k is not None), Exception)
        cls = _learner_class(name, base)
    try:
        exc = cls(err.get("code")) if cls is SystemExit else cls(message)
    except Exception:  # noqa: BLE001 - an exception class with a different constructor
        exc = _learner_class(name, Exception)(message)
    exc._judge_traceback = err.get("traceback")  # type: ignore[attr-defined]
    exc._judge_stub = err.get("stub")  # type: ignore[attr-defined]
    return exc


def _learner_class(name: str, base: type) -> type:
    """A class named `name` deriving from LearnerError (and `base`); kept only while fewer than _MAX_CLASSES are,
    so that a worker that invents names cannot grow the grader."""
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
    """Drop the classes made for what a submission's worker sent, and the parts the grader ran for its stand-ins
    (the runner calls it after each submission)."""
    from . import drivers

    _classes.clear()
    drivers.forget()


class Session:
    """What the drivers need from the runner: one request, one plain answer (or WorkerLost)."""

    def request(self, msg: dict) -> dict:  # pragma: no cover - implemented by runner.WorkerProcess
        raise NotImplementedError

    def send(self, msg: dict) -> Callable[[], dict]:
        """Send a request; the function returned gives its reply. Here at once (runner.WorkerProcess lets the
        grader work while the worker does)."""
        reply = self.request(msg)
        return lambda: reply

    def violation(self, what: str) -> BaseException:
        """The exception to raise for a reply the grader cannot receive (runner.WorkerProcess also stops it)."""
        return WorkerLost(what)


class RemoteModule:
    """The learner's module in the worker, as a case receives it: the session its drivers talk through."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        object.__setattr__(self, "_session", session)

    def __repr__(self) -> str:
        return "<your module>"


def _encode(value: Any) -> Any:
    try:
        return wire.encode(value)
    except TypeError as exc:
        raise TypeError(f"course bug: a driver's argument must be plain data ({exc})") from None


class Driver:
    """The public driver `judge/drivers/<name>.py`, run in the worker: `driver(impl, "scheduler").step("world", 3)`
    calls `judge.drivers.scheduler.step(learner_module, "world", 3)` there and returns its plain answer."""

    def __init__(self, impl: RemoteModule, name: str) -> None:
        self._session, self._name = object.__getattribute__(impl, "_session"), name

    def __getattr__(self, fn: str) -> Any:
        if fn.startswith("_"):
            raise AttributeError(fn)
        return lambda *args, **kwargs: self.begin(fn, *args, **kwargs)()

    def begin(self, fn: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """Start `fn` in the worker; the function returned waits for its answer (the grader works meanwhile)."""
        wait = self._session.send({"op": "call", "driver": self._name, "attr": fn,
                                   "args": [_encode(a) for a in args],
                                   "kwargs": {k: _encode(v) for k, v in kwargs.items()}})

        def answer() -> Any:
            reply = wait()
            if not reply.get("ok"):
                raise _exception(reply.get("error") or {})
            try:
                return wire.decode(reply.get("value"))
            except wire.WireError as err:
                raise self._session.violation(str(err)) from None

        return answer


class LocalDriver:
    """The same driver for code graded in this process (grade_inprocess): its functions called directly."""

    def __init__(self, impl: Any, name: str) -> None:
        import importlib

        self._impl, self._module = impl, importlib.import_module(f"judge.drivers.{name}")

    def __getattr__(self, fn: str) -> Any:
        f = getattr(self._module, fn)
        return lambda *args, **kwargs: f(self._impl, *args, **kwargs)

    def begin(self, fn: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        value = getattr(self, fn)(*args, **kwargs)
        return lambda: value


def driver(impl: Any, name: str) -> Driver | LocalDriver:
    """The public driver judge/drivers/<name>.py, run where the learner's code is."""
    return Driver(impl, name) if isinstance(impl, RemoteModule) else LocalDriver(impl, name)


def learner_failure(err: dict, name: str, where: str) -> CaseFailure:
    """The learner's exception (as the driver reported it) as a readable failure naming `name`."""
    return raised_failure(LearnerRaised(_exception(err)), name, input=where)
