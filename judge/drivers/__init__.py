"""What the public drivers (judge/drivers/<module>.py, shipped to students) share: each function of a driver takes
the learner's module first, then plain arguments, and returns plain data (what the learner's objects did), holding
no expected value. The parts the learner's code calls but does not write run in the grader as hosts
(`register_host`), which the stand-ins (judge/drivers/stand_ins.py) reach with `host_call`; an object a driver's
later calls reuse is kept in its process under a name the grader chooses (`keep`, `kept`)."""

from __future__ import annotations

import contextvars
import functools
import itertools
import json
import operator
import os
import traceback
from typing import Any, Callable

from judge import wire
from judge.harness import context, int_values, is_memory_error, option, trimmed_traceback


@functools.lru_cache(maxsize=2)
def _model_at(path: str):
    import torch

    from mini_llm import load_transformer

    return load_transformer(path, dtype=torch.float32, device="cpu")


def learner_error(exc: BaseException, learner_file: str | None = None) -> dict:
    """The learner's exception as plain data for the grader to show: its type, the classes of its MRO, their
    traceback trimmed to `learner_file` (default: the context's), the other exercise's stub it came from."""
    relayed = getattr(exc, "_judge_record", None)  # raised by the learner's code the grader's part called back
    if isinstance(relayed, dict):
        return relayed
    learner_file = learner_file or context().learner_file
    try:
        tb = trimmed_traceback(exc, learner_file)
    except Exception:  # noqa: BLE001 - a traceback that cannot be formatted is left out
        tb = None
    err = wire.error_record(exc, tb)
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


def plain_ints(value: Any) -> list[int] | None:
    """The integers of a list, tuple, deque, 1-D integer tensor or array, or of any other sequence of ints (an
    `array.array`, a range, ...), as a list of ints; None if `value` is none of those. Imports torch only for a
    tensor the learner made (pure-Python exercises stay quick to grade)."""
    if type(value) is list and all(type(x) is int for x in value):  # the usual case, quickly
        return list(value)
    if _array_module(value):
        return int_values(value)
    if isinstance(value, (str, bytes, dict, set, frozenset)) or not hasattr(value, "__iter__"):
        return None
    try:
        items = list(value)
    except Exception:  # noqa: BLE001 - an iterable that fails is not a sequence of ints
        return None
    out = []
    for x in items:
        if _array_module(x):  # a 0-d tensor or a numpy integer
            got = int_values([x])
            if got is None:
                return None
            out += got
        elif isinstance(x, bool) or not hasattr(x, "__index__"):
            return None
        else:
            out.append(operator.index(x))
    return out


def _array_module(value: Any) -> bool:
    return type(value).__module__.split(".")[0] in ("torch", "numpy")


def load_model(path: str | None = None):
    """The checkpoint at `path`, else the one given with --model, else the embedded model: fp32 on the CPU (the
    worker has no GPU), loaded once per process. The one loader of the judge, grader and worker alike."""
    from mini_llm.settings import EMBEDDED_MODEL

    return _model_at(str(path or option("model") or EMBEDDED_MODEL))


_kept: dict[str, Any] = {}  # name -> the object a driver keeps in this process (one per name)


def keep(name: str, obj: Any) -> Any:
    """Keep `obj` under `name` for the driver's next calls (dropping what that name held before); returns it."""
    _kept[name] = obj
    return obj


def kept(name: str) -> Any:
    """The object kept under `name`; LookupError if none is (the grader asked for one it never made)."""
    try:
        return _kept[name]
    except (KeyError, TypeError):
        raise LookupError(f"no object kept under the name {str(name)[:40]!r}") from None


# ---------------------------------------------------------------------------------------------------------------
# Callbacks: the stand-ins in the worker calling the parts the grader runs


class CallbackRefused(Exception):
    """A callback the grader does not serve (no such host or operation, arguments that are not the plain data the
    stand-ins send): whoever sent it forged it, and it is the submission's `protocol` verdict."""


_hosts: dict[int, Any] = {}  # host number -> an object whose `ops` maps operation names to functions
_numbers = itertools.count(1)
OPENER = 0  # the host that makes the others (judge/drivers/hosts.py, Opener), for the drivers that ask
# The references the hosts may use while serving a callback: the graded exercise's `part_references`, so that no
# submission can use the grader's parts to run its own answer (None: the grader's own call, or trusted code).
allowed_references: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "allowed_references", default=None)


def register_host(host: Any) -> int:
    """In the grader: make `host.ops` callable by the stand-ins; the number to give the driver (or that the
    opener, host 0, answers a driver that asked for a host)."""
    number = next(_numbers)
    _hosts[number] = host
    return number


def drop_host(number: int) -> None:
    _hosts.pop(number, None)


def forget() -> None:
    """Drop the hosts, the kept objects and the practice modules lent for missing references (after each
    submission)."""
    from judge._worker import PracticeStandIns

    _hosts.clear()
    _kept.clear()
    PracticeStandIns.withdraw()


def serve_callback(host: Any, name: Any, args: Any, allowed: tuple[str, ...] | None = None) -> dict:
    """In the grader: run operation `name` of host number `host` on `args` (JSON as received: the host checks
    every value before a reference sees it), using only the references `allowed` (None: any). {"value": its
    result, JSON} or {"error": the exception it raised} (bad values of the right kinds: the learner's error);
    CallbackRefused for anything the stand-ins never send, or a part the graded exercise does not run on."""
    if host == OPENER and type(host) is int and OPENER not in _hosts:
        from judge.drivers.hosts import Opener

        _hosts[OPENER] = Opener()
    target = _hosts.get(host) if type(host) is int else None
    op = target.ops.get(name) if target is not None and type(name) is str else None
    if op is None or not isinstance(args, list):
        raise CallbackRefused(f"no operation {str(name)[:40]!r} of host {str(host)[:20]}")
    if len(args) != op.__code__.co_argcount - 1:  # a host's operations are methods without defaults
        raise CallbackRefused(f"{name} called with {len(args)} argument(s)")
    token = allowed_references.set(allowed)
    try:
        value = op(*args)
    except CallbackRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - the part's own error on the learner's values, raised in their code
        relayed = getattr(exc, "record", None)  # the learner's code, called back by the part, raised it
        if isinstance(relayed, dict):
            return {"error": {**relayed, "relayed": True}}
        return {"error": wire.error_record(exc, None)}
    finally:
        allowed_references.reset(token)
    return {"value": value}


def _in_process(host: int, name: str, args: list) -> dict:
    """The channel in the grader: the host called directly, on the JSON that would have crossed."""
    return json.loads(json.dumps(serve_callback(host, name, json.loads(json.dumps(args)))))


channel: Callable[[int, str, list], dict] = _in_process  # the worker sets its pipes' (judge/_worker.py)


def host_call(host: int, name: str, *args: Any) -> Any:
    """A stand-in's call of operation `name` of the grader's host `host` (`args`: JSON-able): its result as JSON,
    or the exception it raised, raised here (a builtin or framework.errors class of the same name, else
    RuntimeError)."""
    answer = channel(host, name, list(args))
    if "error" in answer:
        exc = _rebuilt(answer["error"])
        if answer["error"].get("relayed"):
            exc._judge_record = {k: v for k, v in answer["error"].items() if k != "relayed"}
        raise exc
    return answer.get("value")


def _rebuilt(err: Any) -> Exception:
    err = err if isinstance(err, dict) else {}
    name, message = str(err.get("type")), str(err.get("message", ""))
    cls = wire.known_class(str(err.get("module")), name)
    if cls is not None and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - a class with another constructor
            pass
    return RuntimeError(f"{name}: {message}")
