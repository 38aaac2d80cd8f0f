"""Grading: the cases run here, in the grader, and observe the learner's code through a worker process
(judge/worker_handle.py, judge/README.md "How the sandbox works"); `grade_inprocess` runs them on objects of this
process instead. Nothing the worker does, prints or forges can pass a case: the grader computes every verdict.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib.util
import os
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Iterator

from . import harness, public, remote, sandbox, traces
from .loader import SetupError, check_api
from .notebooks import solution_source
from .registry import ROOT as COURSE_ROOT, Exercise, get_exercise
from .remote import RemoteModule
from .report import CaseResult, Report
from .wire import WorkerLost
from .worker_handle import ENDS_SUBMISSION, OUTPUT_LIMIT, STARTUP_TIMEOUT, WorkerHandle, _Output, memory_ceiling

__all__ = ["STARTUP_TIMEOUT", "IsolationUnavailable", "another_process", "check", "grade", "grade_inprocess"]


class IsolationUnavailable(RuntimeError):
    """Isolated grading was asked for and cannot run here (no bubblewrap, or an install that exposes the answers)."""


@contextmanager
def another_process(impl: Any) -> Iterator[Any]:
    """The learner's code loaded afresh in another process (its own hash seed), for a case that compares what two
    processes compute: a sibling worker of a graded one, or for an in-process module, a plain worker on its file."""
    if isinstance(impl, RemoteModule):
        w = object.__getattribute__(impl, "_session").sibling()
    else:
        path = getattr(impl, "__file__", None) or harness.context().learner_file
        ex = harness.context().exercise
        if not path or not os.path.isfile(path) or ex is None:
            raise RuntimeError("this case loads your code again in a fresh process, which needs it in a file: grade "
                               "the file (judge.check(ID, 'path/to/file.py')) rather than objects defined here")
        w = WorkerHandle(ex, {"impl": path}, False, ex.memory_limit_mb, {}, _Output(), OUTPUT_LIMIT).ready(
            ex.case_timeout)
    try:
        yield RemoteModule(w)
    finally:
        w.close()


def _release_memory() -> None:
    """What a submission left behind in the grader, dropped before the next one starts."""
    remote.forget()
    gc.collect()
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc: hand freed memory back, so that the next budget starts low


def _target_for(ex: Exercise, impl: Any, source: str | None, reference: bool) -> tuple[dict[str, Any], str, Any]:
    """(worker target, display name, temp dir to delete or None)."""
    if reference:
        return {"impl_module": ex.reference, "display": ex.reference}, f"{ex.reference} (reference)", None
    if source is not None:
        tmp = sandbox.private_tmp("src")
        path = Path(tmp) / Path(ex.practice_file).name
        path.write_text(source)
        return {"impl": str(path), "display": "your code"}, "your code (source text)", tmp
    if impl is None:
        path = ex.practice_path
    elif isinstance(impl, ModuleType):
        if not getattr(impl, "__file__", None):
            raise TypeError("a module without a file cannot be graded in a subprocess; pass its functions")
        path = Path(impl.__file__)
    else:
        text = str(impl)
        if not text.endswith(".py") and "/" not in text and not Path(text).exists():
            try:
                found = importlib.util.find_spec(text) is not None
            except (ImportError, ValueError):
                found = False
            if found:  # a dotted module name, e.g. "solutions.batch"
                return {"impl_module": text, "display": text}, text, None
        path = Path(impl)
    path = path.resolve()
    if path.suffix == ".ipynb":
        src, problem = solution_source(path)
        if problem:
            return {"fatal": problem}, str(path), None
        target, _, tmp = _target_for(ex, None, src, False)
        return target, _display(path), tmp
    return {"impl": str(path), "display": _display(path)}, _display(path), None


def _display(path: Path) -> str:
    """The file as a report names it: relative to the current folder or, as from a chapter, to the course's."""
    base = next((b for b in (Path.cwd(), COURSE_ROOT) if path.is_relative_to(b)), None)
    return str(path if base is None else path.relative_to(base))


def _case_list(ex: Exercise, cases: list[str] | None) -> list:
    try:
        every = list(importlib.import_module(ex.tests).CASES)
    except ModuleNotFoundError as exc:
        every = _public_cases(ex, exc)
    return _chosen(every, cases)


def _chosen(every: list, cases: list[str] | None) -> list:
    """The cases `cases` names (None: all): by exact case names, or else by case-insensitive parts of names."""
    if cases is None:
        return every
    names = {c.name for c in every}
    parts = [w.lower() for w in cases if w not in names]
    return [c for c in every if c.name in cases or any(p in c.name.lower() for p in parts)]


def _not_run(cases: list, message: str = "not run: see above", verdict: str = "not run") -> list[CaseResult]:
    return [CaseResult(c.name, False, 0.0, verdict, message) for c in cases]


def _public_cases(ex: Exercise, missing: ModuleNotFoundError) -> list:
    """The recorded public cases, where the hidden ones are not installed (a student's copy of the course)."""
    logs = public.load(ex)
    if logs is None or not (missing.name and ex.tests.startswith(missing.name)):
        raise missing

    return [harness.Case(name, functools.partial(_replayed, log)) for name, log in logs.items()]


def _replayed(log: list, impl: Any) -> None:
    """A recorded public case, replayed to the student's code; a scheduler's case (129) also as step traces (your
    run's and the recorded reference's: a public case's input only), with the first differing step's table."""
    answers: list = []
    problem = public.replay(object.__getattribute__(impl, "_session"), log, answers)
    runs = traces.replayed(log, answers)
    if runs is not None:
        traces.offer(runs)
    if problem:
        failure = harness.CaseFailure(problem, kind="not implemented" if problem.startswith("not implemented")
                                      else "fail")
        both = runs is not None and runs.yours and len(runs.yours) == len(runs.reference)  # your failing step ran
        raise traces.with_table(failure, runs, 0) if both and failure.kind == "fail" else failure


def _graded(case: harness.Case, impl: Any, ex: Exercise, notes: list[str]) -> CaseResult:
    """Run one case, then write the step traces it offered where --trace asks (`notes` says where)."""
    out = harness.run_case(case, impl)
    try:
        paths = traces.save(ex, case.name)
    except OSError as exc:
        notes.append(f"step traces of {case.name!r} not written: {exc}")
        return out
    if paths:
        notes.append(f"step traces for https://ui.perfetto.dev: {paths[0]}, {', '.join(p.name for p in paths[1:])}")
    return out


def grade(exercise: int | str | Exercise, impl: Any = None, *, source: str | None = None, reference: bool = False,
          time_limit: float | None = None, memory_limit_mb: int | None = None, cases: list[str] | None = None,
          options: dict[str, Any] | None = None, isolated: bool = False, total_limit: float | None = None) -> Report:
    """Grade one exercise and return a Report (never raises for learner misbehaviour). What `impl` and `source` may
    be: judge/README.md, "Python API" (a function, namespace or class runs in this process: `grade_inprocess`).
    time_limit: seconds per case and for importing the learner's module; total_limit: for the whole submission;
    cases: exact case names, or else case-insensitive parts of names; reference: grade the reference instead (the
    instructor's own code, never isolated); isolated: under bubblewrap (IsolationUnavailable if it cannot run)."""
    ex = get_exercise(exercise)
    if impl is not None and not isinstance(impl, (str, os.PathLike, ModuleType)):
        return grade_inprocess(ex, impl, cases=cases, options=options)
    if isolated and not reference:
        problem = sandbox.install_problem() or sandbox.bwrap_problem()
        if problem:
            raise IsolationUnavailable(problem)
    t0 = time.monotonic()
    target, display, tmp = _target_for(ex, impl, source, reference)
    report = Report(ex.id, ex.slug, ex.title, display)
    memory_mb = ex.memory_limit_mb if memory_limit_mb is None else memory_limit_mb
    cap = t0 + (total_limit or ex.total_timeout)
    output = _Output()
    try:
        if target.get("fatal"):
            report.fatal = target["fatal"]
            return report
        if "impl" in target and not Path(target["impl"]).is_file():
            report.fatal = f"{display} does not exist (exercise {ex.id} is edited in {ex.practice_file})"
            return report
        run = _Run(ex, target, isolated and not reference, memory_mb, dict(options or {}), output, OUTPUT_LIMIT,
                   time_limit, cap)
        try:
            run.spawn()  # the worker starts Python and imports while this process imports the cases
            selected = _case_list(ex, cases)
            if not selected:
                if cases:
                    report.fatal = f"no case of exercise {ex.id} matches {cases}"
                return report
            report.results, report.fatal = run.cases(selected)
            report.notes += run.notes
        except MemoryError:  # the grader's own memory ran out on this submission: it scores 0, the next starts clean
            report.results = _not_run(selected, "not run", "grader memory")
            report.fatal = "the grader ran out of memory while grading this submission"
        finally:
            run.stop()
        if run.capped:
            report.notes.append(f"the total time cap of {cap - t0:g}s for one submission was reached: "
                                f"{run.capped} case(s) not run")
        report.output, report.output_bytes = output.text(), output.total
        return report.for_class() if isolated and not reference else report
    finally:
        report.seconds = time.monotonic() - t0
        if tmp:
            sandbox.remove_tmp(tmp)
        _release_memory()


class _Run:
    """The cases of one submission, each with a live worker (a fresh one after a worker was lost)."""

    def __init__(self, ex, target, isolated, memory_mb, options, output, output_limit, time_limit, cap) -> None:
        self.ex, self.target, self.isolated, self.memory_mb = ex, target, isolated, memory_mb
        self.options, self.output, self.output_limit = options, output, output_limit
        self.time_limit, self.cap = time_limit, cap
        self.worker: WorkerHandle | None = None
        self.capped = 0
        self.notes: list[str] = []  # where the cases' step traces were written (--trace)
        self.ceiling: int | None = None  # the grader's memory budget for this submission, from its first start

    def spawn(self) -> None:
        """Start a worker (it imports while the grader goes on)."""
        self.worker = WorkerHandle(self.ex, self.target, self.isolated, self.memory_mb, self.options, self.output,
                                    self.output_limit, self.ceiling)

    def start(self) -> str | None:
        """A worker with the learner's module loaded; the reason if that fails (for every case)."""
        if self.worker is None:
            self.spawn()
        if self.ceiling is None:  # the cases are imported by now: the budget counts what the submission causes
            self.ceiling = memory_ceiling()
        self.worker.ceiling = self.ceiling
        try:
            self.worker.ready(self.time_limit or self.ex.case_timeout, self.cap)
        except WorkerLost as lost:
            self.stop()
            return str(lost)
        return None

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def cases(self, selected: list) -> tuple[list[CaseResult], str | None]:
        ctx = harness.Context(options=self.options, memory_mb=self.memory_mb, exercise=self.ex,
                              learner_file=self.target.get("impl") or self.ex.practice_file,
                              learner_display=self.target.get("display"))
        results: list[CaseResult] = []
        for i, case in enumerate(selected):
            fatal = None
            if (self.worker is None or self.worker.phase != "case") and time.monotonic() < self.cap:
                fatal = self.start()
            if time.monotonic() >= self.cap:
                self.capped = len(selected) - i
                return results + _not_run(selected[i:], "not run: the total time cap for one submission was used up",
                                          "timeout"), None
            if fatal:
                return results + _not_run(selected[i:]), fatal
            w = self.worker
            w.set_deadline(self.time_limit or case.timeout or self.ex.case_timeout, self.cap)
            t0 = time.perf_counter()
            with harness.grading(ctx):
                out = _graded(case, RemoteModule(w), self.ex, self.notes)
            if w.lost:  # whatever the case made of it, the worker's end is the verdict
                out = CaseResult(case.name, False, time.perf_counter() - t0, *w.lost)
                self.stop()
            results.append(out)
            if out.verdict in ENDS_SUBMISSION:
                return results + _not_run(selected[i + 1:]), None
        return results, None


def grade_inprocess(exercise: int | str | Exercise, impl: Any, *, cases: list[str] | None = None,
                    options: dict[str, Any] | None = None) -> Report:
    """Run the cases in this process on `impl`: a module, a namespace, or (for one-function exercises) the
    function itself. No sandbox: no time limit and no isolation (for tests and trusted code)."""
    ex = get_exercise(exercise)
    t0 = time.monotonic()
    if callable(impl) and not isinstance(impl, (ModuleType, SimpleNamespace)) and len(ex.api) == 1 \
            and not any(hasattr(impl, n) for n in ex.api):
        impl = SimpleNamespace(**{next(iter(ex.api)): impl})  # graded under the expected name
    display = getattr(impl, "__name__", None) or type(impl).__name__
    report = Report(ex.id, ex.slug, ex.title, f"{display} (in this process)")
    try:
        selected = _chosen(list(importlib.import_module(ex.tests).CASES), cases)
        try:
            check_api(impl, ex, "your code")
        except SetupError as err:
            report.fatal = err.message
            report.results = _not_run(selected)
            return report
        first = getattr(impl, next(iter(ex.api)), None) if ex.api else None
        code = getattr(first, "__code__", None)
        ctx = harness.Context(learner_file=getattr(impl, "__file__", None) or (code.co_filename if code else None),
                              options=options or {}, exercise=ex)
        with harness.grading(ctx):
            for c in selected:
                report.results.append(_graded(c, impl, ex, report.notes))
        return report
    finally:
        report.seconds = time.monotonic() - t0


def check(exercise: int | str | Exercise, impl: Any = None, **kwargs: Any) -> None:
    """Grade and raise AssertionError with the readable report unless every case passes (for nbgrader cells)."""
    report = grade(exercise, impl, **kwargs)
    if not report.ok:
        raise AssertionError("\n" + report.text())

