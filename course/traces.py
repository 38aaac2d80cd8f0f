"""Your engine against the reference, in a chapter: one workload traced on both (framework/trace.py), and the
first step where their plans differ (framework/trace_compare.py), as a table and a figure.

    course.traces.against_reference("scheduler", make=lambda m: m.LLMEngine(model, config), drive=run_workload,
                                    title="...")

`make(module)` builds an engine from `module.LLMEngine` (and, for a part built on the engine such as
spec_decode, that part's own names, e.g. `module.verify_and_update`); `drive(engine)` runs the workload on it.
"Yours" is the engine with practice/<part>.py AS IT IS NOW, passed or not (a comparison is most useful while the
judge still fails it), and every other part as the chapter chooses it (yours where passed, else the reference);
the reference is solutions/ throughout. With COURSE_IMPL=solutions the cell draws the reference's trace alone.
Where your part is not written yet, the cell says so.

A copy without the reference engine (a student edition) compares with the reference's trace stored in
chapters/traces/<part>.json, which the cell writes wherever it runs the reference: the public workload of the
chapter, with each step's wall-clock times replaced by its number (step i from i to i + 1 s), so that the file is
the same on every run. Without either, the cell shows its stored output (course.NotInThisCopy).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import sys
import traceback
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

import course
from framework.trace import StepTracer, load_trace
from framework.trace_compare import Divergence, Trace, as_trace, first_difference, namer

from . import figures


def reference_modules(part: str) -> Any:
    """The reference engine's module, with the names of solutions/<part>.py where `part` is built on the engine;
    NotInThisCopy where this copy lacks them."""
    engine = course.reference("solutions.engine")
    names = dict(vars(engine), LLMEngine=engine.LLMEngine)  # NotInThisCopy here, where it is not shipped
    if part in course.ON_THE_ENGINE:
        own = course.reference(f"solutions.{part}")
        names = {**{k: getattr(own, k) for k in dir(own)}, **names}  # the engine's LLMEngine, not one it imports
    return SimpleNamespace(**{k: v for k, v in names.items() if not k.startswith("_")})


def your_modules(part: str) -> Any:
    """The engine with practice/<part>.py as the file is now (re-read, so that an edited file counts), every other
    part as the chapter chooses it."""
    loaded = sys.modules.get(f"practice.{part}")
    if loaded is not None:
        importlib.reload(loaded)
        course._assembled.cache_clear()  # the composites built on the file as it was
    picked = course.choices()
    picked[part] = dataclasses.replace(picked[part], yours=True)
    try:
        engine = course._assembled("engine", tuple(sorted(picked.items())))
    except course.ExerciseNeeded as e:  # another part, neither yours nor shipped: the cell shows its stored output
        raise course.NotPassedYet(e.choice, "your engine" if part == "engine" else f"your {part} in the engine",
                                  part) from None
    if part not in course.ON_THE_ENGINE:
        return engine
    own: ModuleType = importlib.import_module(f"practice.{part}")
    # the part's names, then the engine's (its LLMEngine, not one the part's file imports)
    return SimpleNamespace(**{k: v for base in (own, engine) for k, v in vars(base).items() if not k.startswith("_")})


STORED = course.ROOT / "chapters" / "traces"


def timed_by_steps(tracer: StepTracer) -> StepTracer:
    """`tracer` with its times replaced by step numbers: step i runs from i to i + 1 (wall and CPU, no phases), a
    request arrives at the start of the first step after its arrival and has its first token and finish at the end
    of their steps; its id is "#i", i its order of arrival (engines number requests across a process). What it
    planned is unchanged; the file it writes is the same on every run."""
    starts, ends = [s.start for s in tracer.steps], [s.end for s in tracer.steps]
    name = namer(list(tracer.requests.values()))
    for r in tracer.requests.values():
        arrival, first, finish = (figures._step_of(times, t) for times, t in
                                  ((starts, r.arrival), (ends, r.first_token), (ends, r.finish)))
        r.request_id, r.arrival = name(r.request_id), None if arrival is None else float(arrival)
        r.first_token, r.finish = (None if k is None else float(k + 1) for k in (first, finish))
    tracer.requests = {r.request_id: r for r in tracer.requests.values()}
    for s in tracer.steps:
        s.start = s.cpu_start = float(s.index)
        s.end = s.cpu_end = float(s.index + 1)
        s.phases = {}
        s.scheduled = [dict(row, request_id=name(row["request_id"])) for row in s.scheduled]
        s.preempted, s.finished = [name(r) for r in s.preempted], [name(r) for r in s.finished]
    return tracer


def reference_trace(part: str, make: Callable[[Any], Any], drive: Callable[[Any], Any]) -> Trace:
    """The reference's trace of the workload, timed by steps: run here where this copy has the reference engine
    (and stored in chapters/traces/<part>.json), else read from there; NotInThisCopy without either."""
    path = STORED / f"{part}.json"
    try:
        modules = reference_modules(part)
    except course.NotInThisCopy:
        if path.is_file():
            return load_trace(path)
        raise
    tracer, error = traced(make(modules), drive, max_steps=100_000)
    if error is not None:
        raise error
    tracer = timed_by_steps(tracer)
    text = json.dumps(tracer.chrome_trace())
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    return as_trace(tracer)


def _raised_in(error: BaseException, fn: Callable) -> bool:
    """Whether `error` was raised by the code of `fn` itself (a chapter's cell), not by what it called."""
    frames = traceback.extract_tb(error.__traceback__)
    code = getattr(fn, "__code__", None)
    return bool(frames) and code is not None and frames[-1].filename == code.co_filename


def traced(engine: Any, drive: Callable[[Any], Any], max_steps: int) -> tuple[StepTracer, BaseException | None]:
    """Run `drive(engine)` with a step tracer on; the tracer and what the run raised (None if nothing). More than
    `max_steps` steps stop the run (an engine that never finishes)."""
    step, count = engine.step, itertools.count(1)

    def capped():
        if next(count) > max_steps:
            raise RuntimeError(f"stopped after {max_steps} steps: the workload never finished")
        return step()

    engine.step = capped
    tracer = StepTracer(engine)
    try:
        drive(engine)
    except (course.ExerciseNeeded, course.NotInThisCopy):
        raise
    except Exception as e:  # the learner's code failed: what ran until then is the trace
        if isinstance(e, NameError) and _raised_in(e, drive):  # a name of the chapter's a skipped cell did not bind
            raise
        return tracer, e
    finally:
        tracer.close()
    return tracer, None


def against_reference(part: str, make: Callable[[Any], Any], drive: Callable[[Any], Any], title: str) \
        -> Divergence | None:
    """Trace the workload on the reference and, with COURSE_IMPL=practice, on your `part`; print the first step
    where the plans differ, as a table, and draw both traces up to it (or the one trace, where there is no
    difference or nothing of yours to run). Returns the difference, if any."""
    reference = reference_trace(part, make, drive)
    ref_steps, ref_requests = reference
    where = f"practice/{part}.py"
    if course.IMPL != "practice":
        print(f"The reference's trace, {len(ref_steps)} steps. Where your {where} runs (COURSE_IMPL=practice, a "
              "student copy's default), this cell runs it on the same workload and shows the first step where its "
              "plan differs from this one.")
        figures.step_timeline(ref_steps, ref_requests, f"{title}: the reference")
        return None
    try:
        yours, error = traced(make(your_modules(part)), drive, max_steps=10 * len(ref_steps) + 100)
    except NotImplementedError:  # raised while the engine was built
        yours, error = None, NotImplementedError()
    if isinstance(error, NotImplementedError):
        print(f"your {where} is not written yet (it raises NotImplementedError): once it is, this cell shows "
              "its trace beside the reference's. The reference's trace on this workload:")
        figures.step_timeline(ref_steps, ref_requests, f"{title}: the reference")
        return None
    if error is not None:
        print(f"your engine stopped after {len(yours.steps)} traced steps: {type(error).__name__}: {error}")
    elif not yours.steps:  # the tracer sees the steps that LLMEngine.step runs
        print("no step of your engine was traced: the trace records each call of LLMEngine.step, which generate "
              "must call for every step")
    diff = first_difference(yours, reference)
    if diff is None:
        print(f"your {where} plans all {len(ref_steps)} steps as the reference does: the same requests, "
              "kinds, tokens, blocks, preemptions and prefix hits")
        figures.step_timeline(yours.steps, list(yours.requests.values()),
                              f"{title}: yours (the reference's is the same)")
        return None
    print(diff.table())
    figures.trace_comparison(diff, title)
    return diff
