"""The learner's code as the grader sees it: public drivers run beside it in the worker, answering plain data
(judge/README.md); nothing of the learner's runs here."""

from __future__ import annotations

import importlib
import os
import re
from typing import Any, Callable

from . import crossing, drivers, wire
from .wire import WorkerLost
from .harness import CaseFailure, context, is_memory_error, short, trimmed_traceback
from .registry import ROOT, load_exercises


def forget() -> None:
    """Drop what a submission left here: the classes made for its exceptions, the objects its drivers kept."""
    crossing.forget()
    drivers.forget()


class Session:
    """What the drivers need from the runner: one request, one plain answer (or WorkerLost)."""

    def request(self, msg: dict) -> dict:  # pragma: no cover - implemented by every session
        raise NotImplementedError

    def send(self, msg: dict) -> Callable[[], dict]:
        """Send a request; the function returned gives its reply."""
        reply = self.request(msg)
        return lambda: reply

    def violation(self, what: str) -> BaseException:
        """The exception to raise for a reply the grader cannot receive."""
        return WorkerLost(what)


class RemoteModule:
    """The learner's module in the worker, as a case receives it: the session its drivers talk through."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    def __repr__(self) -> str:
        return "<your module>"


def _encode(value: Any) -> Any:
    try:
        return wire.encode(value)
    except TypeError as exc:
        raise TypeError(f"course bug: a driver's argument must be plain data ({exc})") from None


class Driver:
    """The public driver `judge/drivers/<name>.py`, run where the learner's code is: `Driver(impl, "scheduler")
    .step("world", 3)` calls `judge.drivers.scheduler.step(learner_module, "world", 3)` in the worker (or here, on
    code graded in this process) and returns its plain answer."""

    def __init__(self, impl: Any, name: str) -> None:
        self._impl, self._name = impl, name

    def __getattr__(self, fn: str) -> Any:
        if fn.startswith("_"):
            raise AttributeError(fn)
        return lambda *args, **kwargs: self.begin(fn, *args, **kwargs)()

    def begin(self, fn: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """Start `fn`; the function returned waits for its answer (the grader works meanwhile)."""
        if not isinstance(self._impl, RemoteModule):  # code of this process: the driver's function called here
            value = getattr(importlib.import_module(f"judge.drivers.{self._name}"), fn)(self._impl, *args, **kwargs)
            return lambda: value
        session = self._impl._session
        wait = session.send({"op": "call", "driver": self._name, "attr": fn, "args": [_encode(a) for a in args],
                             "kwargs": {k: _encode(v) for k, v in kwargs.items()}})

        def answer() -> Any:
            reply = wait()
            if not reply.get("ok"):
                raise crossing.rebuilt(reply.get("error") or {})
            try:
                return wire.decode(reply.get("value"))
            except wire.WireError as err:
                raise session.violation(str(err)) from None

        return answer


def learner_failure(err: dict, name: str, where: str) -> CaseFailure:
    """The learner's exception (as the driver reported it) as a readable failure naming `name`."""
    exc = crossing.rebuilt(err)
    if is_memory_error(exc):  # a driver caught it beside the learner's code: the verdict is 'memory limit'
        raise exc
    if err.get("stub"):
        return _stub_failure(name, err["stub"])
    other = another_stub(err)
    if other:
        return CaseFailure(other, input=where, kind="not implemented")
    if isinstance(exc, NotImplementedError):
        file = context().learner_file
        shown = "your code" if context().learner_display == "your code" else \
            _display_path(file) if file else "your practice file"
        return CaseFailure(f"not implemented yet: {name} raises NotImplementedError",
                           hint=f"write {name} in {shown}", kind="not implemented")
    if isinstance(exc, SystemExit):
        return CaseFailure(f"{name} called sys.exit({exc.code!r}); it must return its result", input=where,
                           kind="exit")
    return CaseFailure(f"{name} raised {type(exc).__name__}: {short(str(exc))}", input=where,
                       traceback=trimmed_traceback(exc), kind="error")


def _display_path(path: str) -> str:
    return os.path.relpath(path, ROOT) if os.path.realpath(path).startswith(str(ROOT) + os.sep) else path


_STUB_MESSAGE = re.compile(r"exercise (\d+): ")  # how every practice stub's NotImplementedError begins


def another_stub(err: dict) -> str | None:
    """What to say first when `err` is the NotImplementedError of another exercise's untouched practice stub (a part
    this case runs, in a copy without its reference); None for any other exception."""
    found = _STUB_MESSAGE.match(str(err.get("message") or ""))
    graded = context().exercise
    if err.get("type") != "NotImplementedError" or not found or graded is None or graded.id == int(found.group(1)):
        return None
    other = load_exercises().get(int(found.group(1)))
    if other is None:
        return None
    return (f"exercise {other.id} is not done yet: this case runs {other.practice_file}, which is still a stub "
            f"({err['message']}). Write exercise {other.id} first (python practice/judge.py {other.id}); this case "
            f"cannot pass before it does")


# What to call instead of another exercise's stub: the framework shell's method, wired to the reference.
_SHELL_METHODS = {"allocate_or_preempt": "self.allocate_or_preempt(request, num_new_tokens, out)",
                  "preempt": "self.preempt(request)"}


def _stub_failure(fn_name: str, stub: list[str]) -> CaseFailure:
    """129's Scheduler calling practice/preemption.py's stub, say: that NotImplementedError is not theirs."""
    rel, fn = stub
    ex = next((e for e in load_exercises().values() if e.practice_file == rel), None)
    owner = f"exercise {ex.id}'s stub" if ex else "another exercise's stub"
    instead = _SHELL_METHODS.get(fn)
    hint = (f"call {instead} instead: the framework's method, which the judge connects to the reference while it "
            f"grades this exercise" if instead else
            f"do not call {rel} from here: use what the framework gives you, so that this exercise is graded on "
            "its own")
    return CaseFailure(f"{fn_name} calls {fn} in {rel}, {owner}, which raises NotImplementedError", hint=hint,
                       kind="error")
