"""One switch for the whole course: which implementation of the engine the notebooks run.

    COURSE_IMPL=solutions   the reference engine (the default where every reference is shipped)
    COURSE_IMPL=practice    your own code, module by module, where you have written it (the default in a student
                            edition, which ships only the references your instructor released)

Notebooks load every engine module through `use("batch")`, `use("scheduler")`, ... so flipping the switch
(the environment variable, or `course.IMPL = "practice"` in the first cell) runs a chapter on your code.

With COURSE_IMPL=practice, one rule picks each exercise's module: it is YOURS (practice/<module>.py) when your
last judge run of that exercise passed every case on the file as it is now (`python practice/judge.py 125`;
`python practice/judge.py list` shows the same results), else the reference (solutions/<module>.py) where it is
shipped, else NOT PASSED YET. The pieces built from several modules are assembled from those choices: the
KV-cache manager from the block pool (125) and the prefix cache (132), the model runner from the batch layout
(128), the cache writes (126) and the attention (127), the scheduler from `schedule` (129) and preemption (131),
the engine from the loop (130) and all of these. `banner()` prints the map in one line.

A module that is not passed yet is a stand-in whose functions and classes raise `NotPassedYet`. In a chapter
started with `start("04_mixed_batch")` (course/notebook.py) a cell that meets one does not fail: it shows its
stored output, under one line naming the exercise, and the chapter goes on; with your modules in use, the chapter
says at its end whether your outputs equal the stored ones.

What a chapter runs as it is, never yours (a benchmark of benchmarks/, the references' batched attention kernel or
tensor-parallel loader, a file such as docs/serving.json), comes through `reference("benchmarks.throughput")` or
`repository_file("docs/serving.json")`: where a copy lacks it, NotInThisCopy stands in the same way.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from judge.practice_finder import forget
from judge.registry import OPTIONAL, PARTS, exercises_of, needs_text, span  # noqa: F401  (the course's names)

from . import notebook
from .notebook import awaited

IMPLEMENTATIONS = ("solutions", "practice")
COMPOSITES = ("kv_cache_manager", "model_runner", "scheduler", "engine")  # assembled from exercise modules
ON_THE_ENGINE = ("async_engine", "spec_decode", "tensor_parallel", "structured_output")  # built on the engine
ROOT = Path(__file__).resolve().parent.parent


def _shipped(module: str) -> bool:
    """Whether this copy holds the file of `module` (e.g. "solutions.batch"): the judge's one check."""
    from judge.registry import shipped

    return shipped(module)


def every_reference_shipped() -> bool:
    from judge import load_exercises

    return all(_shipped(ex.reference) for ex in load_exercises().values())


IMPL = os.environ.get("COURSE_IMPL") or ("solutions" if every_reference_shipped() else "practice")


class ExerciseNeeded(RuntimeError):
    """A module is neither yours (its exercise passed) nor shipped as a reference."""

    def __init__(self, choice: Choice, what: str) -> None:
        super().__init__(f"{what} needs {choice.module} (exercise {choice.exercise}), {choice.pending()}: do "
                         f"exercise {choice.exercise} first (`python practice/judge.py {choice.exercise}` must "
                         "pass), then run this cell again." if choice.exercise else
                         f"{what} needs {choice.module}, whose exercise this copy does not release.")
        self.choice = choice

    def _render_traceback_(self) -> list[str]:  # IPython shows this sentence instead of a traceback
        return [str(self)]


class NotPassedYet(ExerciseNeeded):
    """Raised by a stand-in's function or class: `name` (of module `choice.module`'s stand-in) cannot run yet."""

    def __init__(self, choice: Choice, name: str, module: str) -> None:
        super().__init__(choice, name)
        self.name, self.module = name, module

    def current(self) -> Choice:
        """The stand-in's choice as it is now: a cell above may have graded its exercise since (and failed it)."""
        now = choices().get(self.choice.module, self.choice)
        return self.choice if now.yours else now

    def missing(self) -> list[Choice]:
        """Every released exercise the cell needs that has not passed yet, in order (none: not released here)."""
        if not self.choice.exercise:
            return []
        picked = choices()
        parts = [picked[m] for m in PARTS.get(self.module, (self.module,)) if m in picked and m not in OPTIONAL]
        now = {p.exercise: p for p in [self.current(), *parts] if p.exercise and not p.yours and not p.has_reference}
        return sorted(now.values(), key=lambda m: m.exercise)  # an exercise once, as it is now

    def line(self) -> str:
        """The one line a chapter prints instead of failing: every exercise it needs that has not passed yet."""
        c, missing = self.current(), self.missing()
        if not c.exercise:
            return f"this cell runs {self.name}, which needs {c.module}, whose exercise this copy does not release"
        if self.module == c.module and missing == [c]:
            return f"this cell runs {self.name}, exercise {c.exercise}, {c.pending()}"
        if len(missing) == 1:
            return f"this cell runs {self.name}, which needs {c.module} (exercise {c.exercise}), {c.pending()}"
        return f"this cell runs {self.name}, which needs exercises {awaited(missing, '{exercise} ({module}{why})')}"


class NotInThisCopy(RuntimeError):
    """What a cell runs is in the course's repository but not in this copy (a benchmark, a reference)."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(f"{name} is in {path}, which your copy of the course does not have")
        self.name, self.path = name, path

    def line(self) -> str:
        """The one line a chapter prints instead of failing."""
        what = f"needs {self.path}" if self.name == self.path else f"runs {self.name}, from {self.path}"
        return f"this cell {what}, which your copy does not have"

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


@dataclass(frozen=True)
class Choice:
    module: str  # e.g. "block_pool"
    exercise: int | None  # e.g. 125; None where this copy does not release the exercise
    yours: bool  # the exercise passed on the current practice file
    has_reference: bool  # solutions/<module>.py is shipped
    public_only: bool = False  # the pass was on the public cases only (a student edition has no others)
    changed: bool = False  # it passed, on a practice file changed since (not graded again)

    def describe(self) -> str:
        if self.yours:
            return f"{self.module}: yours ({self.exercise} {'public cases ' if self.public_only else ''}✓)"
        state = (f"{self.exercise} changed since it passed" if self.changed else f"{self.exercise} not passed yet") \
            if self.exercise else "not released"
        return f"{self.module}: {'reference' if self.has_reference else 'stored outputs'} ({state})"

    def pending(self) -> str:
        """Why the exercise's module is not yours, as the end of a sentence."""
        return "whose file changed since it passed (grade it again)" if self.changed else "which you have not " \
            "passed yet"

    def needed(self, what: str) -> ExerciseNeeded:
        return ExerciseNeeded(self, what)


def _check_impl() -> None:
    if IMPL not in IMPLEMENTATIONS:
        raise ValueError(f"COURSE_IMPL={IMPL!r}: choose one of {IMPLEMENTATIONS}")


def choices() -> dict[str, Choice]:
    """Per exercise module, in exercise order: yours (its exercise passed, and COURSE_IMPL=practice or this copy
    has no reference of it), the reference where shipped, or not passed yet."""
    from judge import cache, load_exercises

    out = {}
    for ex in load_exercises().values():
        name = Path(ex.practice_file).stem
        mine = IMPL == "practice" or not _shipped(ex.reference)
        hit = cache.lookup(ex, ex.practice_path) if mine and ex.practice_path.is_file() else None
        passed = bool(hit) and hit["failed"] == 0 and hit["passed"] > 0
        current = passed and not hit["changed"]
        out[name] = Choice(name, ex.id, current, _shipped(ex.reference), current and bool(hit.get("public_only")),
                           passed and hit["changed"])
    for name in (*PARTS["engine"], *ON_THE_ENGINE):  # an exercise this copy does not release: maybe its reference
        out.setdefault(name, Choice(name, None, False, _shipped(f"solutions.{name}")))
    return out


def banner() -> None:
    """Print, in one line, where the chapter's engine modules come from."""
    print(banner_line())


def banner_line() -> str:
    _check_impl()
    picked = choices()
    if IMPL == "solutions" and all(c.has_reference for c in picked.values()):
        return "engine: the reference (solutions/) · COURSE_IMPL=practice runs your modules whose exercise passed"
    return " · ".join(c.describe() for c in picked.values())


def chapter_needs(chapter: str) -> str:
    """The line naming the exercises whose code the chapter's live cells run (from its `course.use` and
    `course.needs` calls, and its `against_reference` traces, which run the whole engine with your part)."""
    path = ROOT / "chapters" / f"{chapter}.ipynb"
    cells = json.loads(path.read_text())["cells"] if path.is_file() else []
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    calls = re.findall(r"course\.(?:use|needs)\(([^)]*)\)", source)
    traced = re.findall(r"against_reference\(\s*[\"']([a-z_]+)[\"']", source)
    text = needs_text(re.findall(r"[\"']([a-z_]+)[\"']", " ".join(calls)) + traced + ["engine"] * bool(traced))
    return (f"this chapter's live cells run {text}: each on your code once it passed" if text else
            "this chapter's cells run no exercise's code")


USED_YOURS: set[str] = set()  # your exercise modules that the chapter's `use` calls returned (course/notebook.py)


def use(module: str) -> ModuleType:
    """The engine module `module` (e.g. "batch") from the implementation chosen by `IMPL`; with "practice",
    yours, the reference or a stand-in, module by module (see the module docstring)."""
    _check_impl()
    picked = choices()
    if module not in picked and module not in COMPOSITES:  # the modules without an exercise (sampling, request)
        return importlib.import_module(f"framework.{module}")
    if IMPL == "solutions" and all(c.has_reference for c in picked.values()):
        return importlib.import_module(f"solutions.{module}")
    yours = {name for name in PARTS.get(module, (module,)) if name in picked and picked[name].yours}
    USED_YOURS.update(yours)
    notebook.using(yours)
    try:
        return _assembled(module, tuple(sorted(picked.items())))
    except ExerciseNeeded as e:
        return _StandIn(module, e.choice)


def needs(*modules: str) -> None:
    """Raise NotPassedYet for the first of `modules` (e.g. "scheduler") that is not passed yet: for a cell that
    needs them without calling them itself (the judge runs them in another process)."""
    for module in modules:
        found = use(module)
        if isinstance(found, _StandIn):
            raise NotPassedYet(found._choice, module, module)


def stands_in(found: object) -> bool:
    """Whether `found` (a module or class that `use` returned) stands in for a module not passed yet."""
    return isinstance(found, (_StandIn, _StandInClass))


def reference(name: str) -> ModuleType:
    """Module `name` (e.g. "benchmarks.throughput", "solutions.tensor_parallel"): code a chapter runs as it is,
    never the learner's, where this copy has it and what it imports; else a stand-in whose every name raises
    NotInThisCopy."""
    if not _shipped(name):
        return _NotInThisCopy(name)
    try:
        return importlib.import_module(name)
    except ImportError as e:  # a reference it imports is not shipped (the reference engine's scheduler)
        missing = _missing_module(e)
        if not missing.startswith("solutions.") or _shipped(missing):
            raise
        return _NotInThisCopy(name, missing.replace(".", "/") + ".py")


def _missing_module(e: ImportError) -> str:
    """The module whose absence `e` reports, or "": `import a.b` and `from .b import x` raise ModuleNotFoundError
    naming it, `from . import b` (129's reference imports 131's so) a plain ImportError, "cannot import name 'b' from
    'a'", which a missing name of a module raises too: only from a package can `b` be a module."""
    if isinstance(e, ModuleNotFoundError):
        return e.name or ""
    found = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(e))
    spec = importlib.util.find_spec(found[2]) if found else None
    return f"{found[2]}.{found[1]}" if spec is not None and spec.submodule_search_locations is not None else ""



def repository_file(path: str) -> Path:
    """The course repository's file `path` (e.g. "docs/serving.json"); NotInThisCopy where this copy lacks it."""
    found = ROOT / path
    if not found.is_file():
        raise NotInThisCopy(path, path)
    return found


class _NotInThisCopy(ModuleType):
    def __init__(self, name: str, missing: str | None = None) -> None:
        super().__init__(name)
        self._missing = missing or name.replace(".", "/") + ".py"  # the file this copy lacks

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotInThisCopy(name, self._missing)

    def __dir__(self):  # listing its names is using them
        raise NotInThisCopy(self._missing, self._missing)


# ----------------------------------------------------------------------------------------------------------
# Assembling the engine from the per-module choices


def runner_class(build_batch: Callable, write_kv: Callable, paged_attention: Callable | None) -> type:
    """The model runner on these pieces. `paged_attention=None` is the reference attention, which runs through
    the reference runner's batched kernel (the model runner of solutions/); any other is called per step exactly as
    exercise 127 defines it (framework/model_runner.py, whose `runner_class` assembles it)."""
    from framework.model_runner import ModelRunnerBase
    from framework.model_runner import runner_class as assemble

    if paged_attention is None:
        from solutions.model_runner import ModelRunner

        return assemble(ModelRunner, build_batch=build_batch, write_kv=write_kv)
    return assemble(ModelRunnerBase, build_batch=build_batch, write_kv=write_kv, paged_attention=paged_attention)


class _StandIn(ModuleType):
    """Module `module`, one of whose parts (`choice`) is neither yours nor shipped: the framework's names of the
    same module work; every other function or class raises NotPassedYet when called."""

    def __init__(self, module: str, choice: Choice) -> None:
        super().__init__(f"not_passed_yet.{module}")
        self._module, self._choice = module, choice
        shell = importlib.util.find_spec(f"framework.{module}")
        self._shell = importlib.import_module(f"framework.{module}") if shell else None

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if self._shell is not None and hasattr(self._shell, name):
            return getattr(self._shell, name)
        choice, module = self._choice, self._module
        if (module, name) == ("preemption", "allocate_or_preempt"):
            return _allocate_without_preempting(choice)

        def stop(*args, **kwargs):
            raise NotPassedYet(choice, name, module)

        return _StandInClass(name, (), {"__init__": stop, "_stand_in": (choice, module)}) if name[:1].isupper() \
            else stop


def _allocate_without_preempting(choice: Choice) -> Callable:
    """Exercise 131's allocate_or_preempt until it passes: the allocation, where the blocks are free (the
    statement's first step); a step that would preempt stops the cell. Every scheduler allocates through it."""
    def allocate_or_preempt(scheduler, request, num_new_tokens: int, out) -> bool:
        if scheduler.kv.allocate_slots(request, num_new_tokens):
            return True
        raise NotPassedYet(choice, "allocate_or_preempt", "preemption")

    return allocate_or_preempt


class _StandInClass(type):
    """A stand-in's class: subclassing it works; creating one, or reading an attribute it does not define (such as
    an engine's scheduler_cls), raises NotPassedYet."""

    def __getattr__(cls, attr: str):
        if attr.startswith("__") or attr == "_stand_in":
            raise AttributeError(attr)
        choice, module = cls._stand_in
        raise NotPassedYet(choice, f"{cls.__name__}.{attr}", module)


@functools.lru_cache(maxsize=None)
def _assembled(module: str, picked_items: tuple) -> ModuleType:
    """One module as chosen (cached per set of choices, so repeated `use` calls give the same classes)."""
    picked = dict(picked_items)

    def pick(name: str) -> ModuleType:
        c = picked[name]
        if c.yours:
            return importlib.import_module(f"practice.{name}")
        if c.has_reference:
            return from_solutions(name)
        if name in OPTIONAL:
            return _StandIn(name, c)
        raise c.needed("this chapter")

    def from_solutions(name: str) -> ModuleType:
        """solutions/<name>.py. A module of the engine it imports that this edition does not ship (the reference
        engine imports the KV-cache manager and the model runner, which no exercise gives) is lent as chosen here:
        yours, assembled, or ExerciseNeeded. What such an import brought in is then forgotten: `course.reference()`
        never returns a reference built on lent parts."""
        clean, lent = set(), []  # the modules there before each retry that imports lent parts; the lent names
        try:
            while True:
                try:
                    return importlib.import_module(f"solutions.{name}")
                except ImportError as e:
                    missing = _missing_module(e)
                    sibling = missing.removeprefix("solutions.")
                    lendable = missing == f"solutions.{sibling}" and sibling in {*picked, *builders}
                    if missing in sys.modules or not lendable:
                        raise
                    part = _assembled(sibling, picked_items)
                    clean |= set(sys.modules) - set(lent)
                    sys.modules[missing] = part
                    lent.append(missing)
        finally:
            if lent:
                forget([m for m in sys.modules if m.startswith("solutions.") and m not in clean])

    builders = {"batch": _batch, "kv_cache_manager": _kv_cache_manager, "model_runner": _model_runner,
                "scheduler": _scheduler, "engine": _engine}
    return builders[module](pick, picked) if module in builders else pick(module)


def _module(name: str, bases: list[ModuleType], **names) -> ModuleType:
    """A module with the public names of `bases` (later ones win), then `names`; its __file__ is the last base's."""
    mod = ModuleType(f"course.{name}", bases[-1].__doc__)
    mod.__file__ = getattr(bases[-1], "__file__", None)
    for base in bases:
        mod.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("_")})
    mod.__dict__.update(names)
    return mod


def _class(name: str, base: type, **attrs) -> type:
    return type(name, (base,), {"__module__": __name__, **attrs})


def _batch(pick, picked) -> ModuleType:
    """The chosen build_batch, its result read by the runner's own reader (framework.model_runner), so that a
    chapter calling it directly sees what the runner sees: int64 tensors, whatever exercise 128 accepts."""
    from framework.model_runner import as_runner_batch

    chosen = pick("batch")
    build_batch = functools.wraps(chosen.build_batch)(
        lambda items, block_size: as_runner_batch(chosen.build_batch(items, block_size)))
    return _module("batch", [chosen], build_batch=build_batch)


def _kv_cache_manager(pick, picked) -> ModuleType:
    from framework import kv_cache_manager as shell

    prefix = pick("prefix_cache")
    cls = _class("KVCacheManager", shell.KVCacheManagerBase, block_pool_cls=pick("block_pool").BlockPool,
                 prefix_cache_cls=prefix.PrefixCache, block_hashes=staticmethod(prefix.block_hashes))
    return _module("kv_cache_manager", [shell], KVCacheManager=cls)


def _model_runner(pick, picked) -> ModuleType:
    from framework import model_runner as shell

    # The reference attention runs through the reference runner's batched kernel where this copy has it; a student
    # edition has none, so there the shipped reference (or ExerciseNeeded, as for any missing part) is called per step.
    batched = not picked["paged_attention"].yours and _shipped("solutions.model_runner")
    attention = None if batched else pick("paged_attention").paged_attention
    cls = runner_class(pick("batch").build_batch, pick("paged_kv_cache").write_kv, attention)
    return _module("model_runner", [shell], ModelRunner=cls)


def _scheduler(pick, picked) -> ModuleType:
    from framework import scheduler as shell

    chosen = pick("scheduler")
    cls = _class("Scheduler", chosen.Scheduler, preemption=pick("preemption"))
    return _module("scheduler", [shell, chosen], Scheduler=cls)


def _engine(pick, picked) -> ModuleType:
    from framework import engine as shell

    parts = {name: _assembled(name, tuple(sorted(picked.items()))) for name in COMPOSITES[:3]}
    chosen = pick("engine")
    engine = _class("LLMEngine", chosen.LLMEngine, scheduler_cls=parts["scheduler"].Scheduler,
                    runner_cls=parts["model_runner"].ModelRunner,
                    kv_cache_manager_cls=parts["kv_cache_manager"].KVCacheManager)
    return _module("engine", [shell, chosen], LLMEngine=engine, LLM=_class("LLM", shell.LLMBase, engine_cls=engine))


def show_source(obj) -> None:
    """Print the source of a reference function or class, so that what a chapter shows is what is tested."""
    print(inspect.getsource(obj))


def start_text(chapter: str) -> str:
    """What a chapter's first cell prints first: the banner, then the exercises its live cells run."""
    return f"{banner_line()}\n{chapter_needs(chapter)}"


def start(chapter: str) -> None:
    """A chapter's first call: print the banner and, in Jupyter, let cells that meet a module not passed yet show
    their stored outputs instead of failing (course/notebook.py)."""
    print(start_text(chapter))
    USED_YOURS.clear()
    notebook.install(chapter, USED_YOURS, (NotPassedYet, NotInThisCopy))
