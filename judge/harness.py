"""What hidden test modules are written with (judge/README.md): the case list, the failure type, the grading context
and helpers. Anything else a case raises is reported as an error, with the traceback trimmed to the learner's file."""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import reprlib
import sys
import time
import traceback
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping

from .report import CaseResult
from .secret import rng  # noqa: E402,F401 - random.Random for a hidden case, mixed with the instructor's secret


@dataclass(frozen=True)
class Context:
    """What the cases of one submission are graded with: set by the runner (`grading`), and once in the worker."""

    learner_file: str | None = None  # for trimming tracebacks to it
    learner_display: str | None = None  # how the runner names it ("your code": code given as text)
    exercise: Any = None  # the Exercise (runner.another_process loads the learner's file again for it)
    options: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"model": "/path/to/checkpoint"}
    memory_mb: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


_context = Context()


def context() -> Context:
    """The context of the submission being graded (an empty one outside grading)."""
    return _context


@contextlib.contextmanager
def grading(ctx: Context) -> Iterator[Context]:
    global _context
    saved, _context = _context, ctx
    try:
        yield ctx
    finally:
        _context = saved


def option(name: str, default: Any = None) -> Any:
    return _context.options.get(name, default)


@dataclass
class Case:
    name: str
    fn: Callable[[Any], None]
    timeout: float | None = None  # seconds; None: the exercise's case_timeout
    public: bool = False  # recorded into the student edition (judge/public.py replays it on a student's copy)


class Cases:
    """An ordered list of named cases, registered by decorating with an instance. `after_each` runs only when the
    case returned (it may still fail it)."""

    def __init__(self, before_each: Callable[[], None] | None = None,
                 after_each: Callable[[], None] | None = None) -> None:
        self._cases: list[Case] = []
        self.before_each, self.after_each = before_each, after_each

    def __call__(self, name: str, *, timeout: float | None = None, public: bool = False) -> Callable:
        """Register a case; `public`: a student can run it on their copy (its inputs are not secret)."""
        if any(c.name == name for c in self._cases):
            raise ValueError(f"duplicate case name {name!r}")

        def register(fn: Callable[[Any], None]) -> Callable[[Any], None]:
            def case(impl: Any) -> None:
                if self.before_each:
                    self.before_each()
                fn(impl)
                if self.after_each:
                    self.after_each()

            self._cases.append(Case(name, case if self.before_each or self.after_each else fn, timeout, public))
            return fn

        return register

    def __iter__(self) -> Iterator[Case]:
        return iter(self._cases)

    def __len__(self) -> int:
        return len(self._cases)

    def names(self) -> list[str]:
        return [c.name for c in self._cases]


class CaseFailure(AssertionError):
    """A failed case: `input` the (smallest) failing input, `field`/`expected`/`got` the first difference."""

    def __init__(self, message: str, *, input: str | None = None, field: str | None = None,
                 expected: Any = None, got: Any = None, hint: str | None = None, traceback: str | None = None,
                 kind: str = "fail") -> None:
        super().__init__(message)
        self.message, self.input, self.field, self.hint, self.traceback = message, input, field, hint, traceback
        self.expected, self.got, self.kind = expected, got, kind

    def details(self) -> dict[str, Any]:
        d = {"input": self.input, "field": self.field, "hint": self.hint, "traceback": self.traceback}
        if self.field is not None:
            d["expected"], d["got"] = short(self.expected), short(self.got)
        return {k: v for k, v in d.items() if v is not None}


_repr = reprlib.Repr()
_repr.maxlist = _repr.maxtuple = 40
_repr.maxstring = _repr.maxother = 200
_repr.maxlevel = 4


def whole(reported: Any, count: int, what: str) -> list:
    """`reported`, a list a public driver returns with one entry per `what` (its length is the driver's to set, never
    the learner's code's), if it has `count` entries; else CaseFailure: the report is not the driver's. A grader
    that zips such a list with its own must check it first: an empty one would compare nothing."""
    if not isinstance(reported, list) or len(reported) != count:
        raise CaseFailure(f"the judge's driver reported {len(reported) if isinstance(reported, list) else 'no'} "
                          f"{what} where it reports {count}: this report is not the public driver's (is "
                          "judge/drivers/ replaced or changed by your code?)")
    return reported


def short(value: Any) -> str:
    """A readable, bounded repr (long lists are cut with '...')."""
    if isinstance(value, str):
        return value if len(value) <= 2000 else value[:2000] + " ..."
    return _repr.repr(value)


def plain_int(value: Any) -> Any:
    """A count or a token id as the grader compares it: an int as it is, anything else (8.0, a tensor, a numpy int)
    as text that no int equals, saying what it is (a string quoted: '8' (str))."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return f"{short(repr(value) if isinstance(value, str) else value)} ({type(value).__name__})"


def unchanged(value: Any, saved: Any) -> bool:
    """Whether an input the learner's code was given still equals its saved copy: False where comparing them raises
    or gives no plain truth (a row replaced by a numpy array)."""
    try:
        return bool(value == saved)
    except Exception:  # noqa: BLE001 - whatever the learner's objects raise
        return False


def holds_tensor(value: Any) -> bool:
    """Whether `value` is a torch tensor or a list or tuple holding one: ids that key a dict (block ids, in the free
    queue and the prefix cache) must not be, as a tensor hashes by identity and is never found again."""
    torch = sys.modules.get("torch")
    return torch is not None and (isinstance(value, torch.Tensor) or isinstance(value, (list, tuple)) and
                                  any(isinstance(x, torch.Tensor) for x in value))


def int_values(value: Any) -> list[int] | None:
    """The ints of any sequence of ints (numpy ints and 0-d integer tensors too) or of a 1-D integer tensor or array;
    None for anything else, a generator or other one-pass iterator included (it has no length: what it yields may
    depend on when it is read). Imports torch only for a torch or numpy value: pure-Python exercises grade quickly."""
    if type(value) is list and all(type(x) is int for x in value):  # the usual case, quickly
        return list(value)
    if _of_arrays(value):
        return _array_ints(value, dims=1)
    if isinstance(value, (str, bytes, dict, set, frozenset)) or not hasattr(value, "__len__"):
        return None
    try:  # `__iter__`, or `__getitem__` up to an IndexError, as Python iterates; never more than its length
        items = list(itertools.islice(iter(value), len(value) + 1))
        if len(items) != len(value):
            return None
    except Exception:  # noqa: BLE001 - not iterable, or an iteration that fails: not a sequence of ints
        return None
    out = []
    for x in items:
        if _of_arrays(x):  # a 0-d tensor or a numpy integer
            got = _array_ints(x, dims=0)
            if got is None:
                return None
            out += got
        elif isinstance(x, bool) or not hasattr(x, "__index__"):
            return None
        else:
            out.append(operator.index(x))
    return out


def _of_arrays(value: Any) -> bool:
    return type(value).__module__.split(".")[0] in ("torch", "numpy")


def _array_ints(value: Any, dims: int) -> list[int] | None:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        bad = value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool
        return None if bad or value.dim() != dims else [int(x) for x in value.reshape(-1).tolist()]
    if isinstance(value, np.integer) and dims == 0:
        return [int(value)]
    if isinstance(value, np.ndarray) and value.ndim == dims and np.issubdtype(value.dtype, np.integer):
        return [int(x) for x in value.reshape(-1).tolist()]
    return None


def is_memory_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "DefaultCPUAllocator" in text
                                           or "out of memory" in text.lower()))


def trimmed_traceback(exc: BaseException, learner_file: str | None = None) -> str:
    """The traceback of `exc`, keeping only frames in the learner's file (all frames if none is theirs)."""
    remote = getattr(exc, "_judge_traceback", None)  # raised in the worker: trimmed there already
    if remote:
        return remote
    learner_file = learner_file or _context.learner_file
    frames = traceback.extract_tb(exc.__traceback__)
    theirs = [f for f in frames if learner_file and os.path.realpath(f.filename) == os.path.realpath(learner_file)]
    shown = theirs or frames[-3:]
    lines = ["Traceback (your code):" if theirs else "Traceback (most recent call last, last frames):"]
    for f in shown:
        lines.append(f'  File "{f.filename}", line {f.lineno}, in {f.name}')
        if f.line:
            lines.append(f"    {f.line}")
    lines.extend(s.rstrip("\n") for s in traceback.format_exception_only(type(exc), exc))
    return "\n".join(lines)


def shrink(value: Any, fails: Callable[[Any], bool], candidates: Callable[[Any], Iterable[Any]],
           max_calls: int = 400) -> Any:
    """Greedy shrinking: replace `value` by its first smaller candidate that still `fails`, until none does."""
    calls = 0
    improved = True
    while improved and calls < max_calls:
        improved = False
        for cand in candidates(value):
            calls += 1
            if fails(cand):
                value, improved = cand, True
                break
            if calls >= max_calls:
                break
    return value


def check_each(values: Iterable[Any], diff: Callable[[Any], CaseFailure | None],
               candidates: Callable[[Any], Iterable[Any]], max_calls: int = 400,
               explain: Callable[[Any], CaseFailure | None] | None = None) -> None:
    """Raise the failure of the first value `diff` rejects, on its smallest failing variant (diagnosed by `explain`
    if given); a "not implemented" failure is raised as it is."""
    for value in values:
        failure = diff(value)
        if failure is None:
            continue
        if failure.kind == "not implemented":
            raise failure
        smallest = shrink(value, lambda v: diff(v) is not None, candidates, max_calls=max_calls)
        raise (explain or diff)(smallest) or failure


def run_case(c: Case, impl: Any) -> CaseResult:
    """Run one case in this process and classify what happened. With one torch thread, as in the worker: the
    grader's arithmetic matches the worker's."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        c.fn(impl)
    except CaseFailure as f:
        return CaseResult(c.name, False, time.perf_counter() - t0, f.kind, f.message, f.details())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001
        dt = time.perf_counter() - t0
        if is_memory_error(exc):
            limit = f" ({_context.memory_mb} MB)" if _context.memory_mb else ""
            detail = f": {short(str(exc))}" if str(exc) else ""
            return CaseResult(c.name, False, dt, "memory", f"memory limit{limit} exceeded ({type(exc).__name__}"
                              f"{detail})", {"traceback": trimmed_traceback(exc)})
        if isinstance(exc, SystemExit):
            return CaseResult(c.name, False, dt, "exit", f"your code called sys.exit({exc.code!r}) during the test")
        return CaseResult(c.name, False, dt, "error", f"{type(exc).__name__}: {short(str(exc))}",
                          {"traceback": trimmed_traceback(exc)})
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    return CaseResult(c.name, True, time.perf_counter() - t0)
