"""Your engine against the reference, in a chapter: one workload traced on both (framework/trace.py), and the
first step where their plans differ (framework/trace_compare.py), as a table and a figure.

    course.traces.against_reference("scheduler", make=lambda m: m.LLMEngine(model, config), drive=run_workload,
                                    title="...")

`make(module)` builds an engine from `module.LLMEngine` (and, for a part built on the engine such as
spec_decode, that part's own names, e.g. `module.verify_and_update`); `drive(engine)` runs the workload on it.
"Yours" is the engine with practice/<part>.py AS IT IS NOW, passed or not (a comparison is most useful while the
judge still fails it), and every other part as the chapter chooses it (yours where passed, else the reference);
the reference is solutions/ throughout. With COURSE_IMPL=solutions the cell draws the reference's trace alone.
Where your part is not written yet, or this copy has no reference engine, the cell says so (the second through
the chapter's stored output, course.NotInThisCopy).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import sys
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

import course
from framework.trace import StepTracer
from framework.trace_compare import Divergence, first_difference

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
    engine = course._assembled("engine", tuple(sorted(picked.items())))
    if part not in course.ON_THE_ENGINE:
        return engine
    own: ModuleType = importlib.import_module(f"practice.{part}")
    # the part's names, then the engine's (its LLMEngine, not one the part's file imports)
    return SimpleNamespace(**{k: v for base in (own, engine) for k, v in vars(base).items() if not k.startswith("_")})


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
        return tracer, e
    finally:
        tracer.close()
    return tracer, None


def against_reference(part: str, make: Callable[[Any], Any], drive: Callable[[Any], Any], title: str) \
        -> Divergence | None:
    """Trace the workload on the reference and, with COURSE_IMPL=practice, on your `part`; print the first step
    where the plans differ, as a table, and draw both traces up to it (or the one trace, where there is no
    difference or nothing of yours to run). Returns the difference, if any."""
    reference, error = traced(make(reference_modules(part)), drive, max_steps=100_000)
    if error is not None:
        raise error
    where = f"practice/{part}.py"
    if course.IMPL != "practice":
        print(f"COURSE_IMPL={course.IMPL}: the reference's trace, {len(reference.steps)} steps. With "
              f"COURSE_IMPL=practice this cell runs your {where} on the same workload and shows the first step "
              "where its plan differs from this one.")
        figures.step_timeline(reference.steps, list(reference.requests.values()), f"{title}: the reference")
        return None
    try:
        yours, error = traced(make(your_modules(part)), drive, max_steps=10 * len(reference.steps) + 100)
    except NotImplementedError:  # raised while the engine was built
        yours, error = None, NotImplementedError()
    if isinstance(error, NotImplementedError):
        print(f"your {where} is not written yet (it raises NotImplementedError): once it is, this cell shows "
              "its trace beside the reference's. The reference's trace on this workload:")
        figures.step_timeline(reference.steps, list(reference.requests.values()), f"{title}: the reference")
        return None
    if error is not None:
        print(f"your engine stopped after {len(yours.steps)} traced steps: {type(error).__name__}: {error}")
    diff = first_difference(yours, reference)
    if diff is None:
        print(f"your {where} plans all {len(reference.steps)} steps as the reference does: the same requests, "
              "kinds, tokens, blocks, preemptions and prefix hits")
        figures.step_timeline(yours.steps, list(yours.requests.values()), f"{title}: yours (the reference's is the same)")
        return None
    print(diff.table())
    figures.trace_comparison(diff, title)
    return diff
