"""The learner's code as the grader sees it: proxies that forward calls to the worker and return plain data.

A hidden case receives `impl`, a RemoteModule, and observes the learner's code through a public driver run beside
it (`driver(impl, "batch").build(items, 4)`), which answers with plain data (judge/wire.py). The generic proxies
remain for exercise 127: `impl.paged_attention(...)` sends the arguments to the worker, which calls the learner's
function and answers with the result; an object the worker keeps (a driver's engine) comes back as a Remote, whose
attributes and methods are read through the worker. Learner exceptions come back as their
type name, message and trimmed traceback, and are raised here as an exception of the same builtin type (or of
judge.errors / framework.errors), or as a LearnerError named after it: nothing of the learner's runs here.

Lists, dicts and tensors passed to a learner function are written back after the call (the worker returns them as
they ended up), so that a case can see an in-place write, or check that the inputs were left alone.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

from . import wire


class WorkerLost(BaseException):
    """The worker died, hung or flooded its output while the case waited for it (the runner gives the verdict)."""


class LearnerError(Exception):
    """An exception of a class the grader does not know (defined in the learner's code, or a library's)."""


_KNOWN_MODULES = ("builtins", "framework.errors")
# Classes made for names the worker sends: at most _MAX_CLASSES each, dropped after every submission (`forget`).
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
    def make() -> type:
        try:
            return type(name, (LearnerError,) if base is Exception else (base, LearnerError), {})
        except TypeError:  # a base whose layout cannot be mixed in
            return type(name, (LearnerError,), {})

    return _cached_class(_classes, f"{name}({base.__name__})", make)


def _cached_class(cache: dict[str, type], key: str, make: Callable[[], type]) -> type:
    """cache[key], made by `make` when missing; kept only while the cache holds fewer than _MAX_CLASSES, so that a
    worker that invents names cannot grow the grader."""
    cls = cache.get(key)
    if cls is None:
        cls = make()
        if len(cache) < _MAX_CLASSES:
            cache[key] = cls
    return cls


def forget() -> None:
    """Drop the classes made for what a submission's worker sent, and the parts the grader ran for its stand-ins
    (the runner calls it after each submission)."""
    from . import drivers

    _classes.clear()
    drivers.forget()


class Session:
    """What the proxies need from the runner: one request, one plain answer (or WorkerLost)."""

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


def _encode_arg(value: Any) -> Any:
    def handle_of(obj: Any) -> dict:
        if isinstance(obj, Remote):
            return {"__handle__": object.__getattribute__(obj, "_handle")}
        raise TypeError(f"cannot send a {type(obj).__name__} to the graded code (plain data and its own objects only)")

    return wire.encode(value, handle_of)


def _write_back(old: Any, new: Any) -> None:
    """Make `old` (a case's list, dict or tensor) equal to `new` (what the learner left it as), in place."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if isinstance(old, list) and isinstance(new, list):
        if len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new)):
                if isinstance(a, (list, dict)) or (torch is not None and isinstance(a, torch.Tensor)):
                    _write_back(a, b)
                    if type(a) is type(b) or isinstance(a, torch.Tensor if torch else ()):
                        continue
                old[i] = b
        else:
            old[:] = new
    elif isinstance(old, dict) and isinstance(new, dict):
        old.clear()
        old.update(new)
    elif torch is not None and isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if old.shape == new.shape:
            with torch.no_grad():
                old.copy_(new.to(old.dtype))


class _Base:
    __slots__ = ("_session", "_handle", "_path")

    def __init__(self, session: Session, handle: int | None, path: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_path", path)

    def _call(self, attr: str | None, args: tuple, kwargs: dict) -> Any:
        s, h = object.__getattribute__(self, "_session"), object.__getattribute__(self, "_handle")
        msg = {"op": "call", "handle": h, "attr": attr, "args": [_encode_arg(a) for a in args],
               "kwargs": {k: _encode_arg(v) for k, v in kwargs.items()}, "writeback": True}
        reply = s.request(msg)
        if not reply.get("ok"):
            raise _exception(reply.get("error") or {})
        changed = reply.get("changed") or {}
        for i, old in enumerate(args):
            if str(i) in changed and (isinstance(old, (list, dict)) or type(old).__name__ == "Tensor"):
                _write_back(old, decode(s, changed[str(i)]))
        return decode(s, reply.get("value"))

    def _getattr(self, attr: str) -> Any:
        s, h = object.__getattribute__(self, "_session"), object.__getattribute__(self, "_handle")
        reply = s.request({"op": "getattr", "handle": h, "attr": attr})
        if not reply.get("ok"):
            exc = _exception(reply.get("error") or {})
            if isinstance(exc, AttributeError):
                raise AttributeError(attr) from None
            raise exc
        return decode(s, reply.get("value"))


class RemoteModule(_Base):
    """The learner's module: its attributes read through the worker (functions and classes become callables, kept
    for the next calls)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        s = object.__getattribute__(self, "_session")
        cache = s.__dict__.setdefault("_module_callables", {})
        if name in cache:
            return cache[name]
        value = self._getattr(name)
        if isinstance(value, Remote) and object.__getattribute__(value, "_callable"):
            cache[name] = value
        return value

    def __repr__(self) -> str:
        return "<your module>"


class Remote(_Base):
    """A learner object (or function, or class) held by the worker."""

    __slots__ = ("_callable",)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._getattr(name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(None, args, kwargs)

    def __repr__(self) -> str:
        return f"<your {type(self).__name__}>"


_remote_types: dict[str, type] = {}


def _remote_type(name: str) -> type:
    """A proxy class named like the learner's class (so that messages can say 'a Batch has no attribute ...')."""
    name = name if name.isidentifier() and len(name) <= wire.NAME_LIMIT else "Remote"
    return _cached_class(_remote_types, name, lambda: type(name, (Remote,), {"__slots__": ()}))


def decode(session: Session, data: Any) -> Any:
    def from_handle(d: dict) -> Remote:
        cls = _remote_type(str(d.get("type", "Remote")))
        proxy = cls.__new__(cls)
        _Base.__init__(proxy, session, int(d["__handle__"]))
        object.__setattr__(proxy, "_callable", bool(d.get("callable")))
        return proxy

    try:
        return wire.decode(data, from_handle)
    except wire.WireError as err:
        raise session.violation(str(err)) from None


class Driver:
    """The public driver `judge/drivers/<name>.py`, run in the worker: `driver(impl, "scheduler").step(world)` calls
    `judge.drivers.scheduler.step(learner_module, world)` there and returns its plain answer."""

    def __init__(self, impl: RemoteModule, name: str) -> None:
        self._session, self._name = object.__getattribute__(impl, "_session"), name

    def __getattr__(self, fn: str) -> Any:
        if fn.startswith("_"):
            raise AttributeError(fn)
        return lambda *args, **kwargs: self.begin(fn, *args, **kwargs)()

    def begin(self, fn: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """Start `fn` in the worker; the function returned waits for its answer (the grader works meanwhile)."""
        wait = self._session.send({"op": "call", "driver": self._name, "attr": fn,
                                   "args": [_encode_arg(a) for a in args],
                                   "kwargs": {k: _encode_arg(v) for k, v in kwargs.items()}})

        def answer() -> Any:
            reply = wait()
            if not reply.get("ok"):
                raise _exception(reply.get("error") or {})
            return decode(self._session, reply.get("value"))

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
