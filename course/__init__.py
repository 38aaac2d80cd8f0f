"""One switch for the whole course: which implementation of the engine the notebooks run.

    COURSE_IMPL=solutions   the reference engine (default)
    COURSE_IMPL=practice    your own code, module by module, where you have written it

Notebooks load every engine module through `use("batch")`, `use("scheduler")`, ... so flipping the switch
(the environment variable, or `course.IMPL = "practice"` in the first cell) runs a chapter on your code.

With COURSE_IMPL=practice, one rule picks each exercise's module: it is YOURS (practice/<module>.py) when your
last judge run of that exercise passed every case on the file as it is now (`python practice/judge.py 125`;
`python practice/judge.py list` shows the same results), and the reference (solutions/<module>.py) otherwise.
The pieces built from several modules are assembled from those choices: the KV-cache manager from the block pool
(125) and the prefix cache (132), the model runner from the batch layout (128), the cache writes (126) and the
attention (127), the scheduler from `schedule` (129) and preemption (131), the engine from the loop (130) and all
of these. `banner()` prints the map in one line. Where a module is neither yours nor shipped as a reference, the
chapter stops with one sentence naming the exercise to do first.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

IMPL = os.environ.get("COURSE_IMPL", "solutions")
IMPLEMENTATIONS = ("solutions", "practice")
COMPOSITES = ("kv_cache_manager", "model_runner", "scheduler", "engine")  # assembled from exercise modules
OPTIONAL = ("prefix_cache", "preemption")  # needed only when prefix caching is on, or memory runs out


class ExerciseNeeded(RuntimeError):
    """A chapter needs a module that is neither yours (its exercise passed) nor shipped as a reference."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this sentence instead of a traceback
        return [str(self)]


@dataclass(frozen=True)
class Choice:
    module: str  # e.g. "block_pool"
    exercise: int  # e.g. 125
    yours: bool  # the exercise passed on the current practice file
    has_reference: bool  # solutions/<module>.py is shipped

    def describe(self) -> str:
        if self.yours:
            return f"{self.module}: yours ({self.exercise} ✓)"
        if self.has_reference:
            return f"{self.module}: reference ({self.exercise} not passed yet)"
        return f"{self.module}: missing ({self.exercise} not passed yet, no reference shipped)"

    def needed(self, what: str) -> ExerciseNeeded:
        return ExerciseNeeded(f"{what} needs {self.module} (exercise {self.exercise}), which has no reference "
                              f"here: do exercise {self.exercise} first (`python practice/judge.py "
                              f"{self.exercise}` must pass), then run this cell again.")


def _check_impl() -> None:
    if IMPL not in IMPLEMENTATIONS:
        raise ValueError(f"COURSE_IMPL={IMPL!r}: choose one of {IMPLEMENTATIONS}")


def choices() -> dict[str, Choice]:
    """Per exercise module, in exercise order: whether yours or the reference runs (COURSE_IMPL=practice)."""
    from judge import cache, load_exercises

    out = {}
    for ex in load_exercises().values():
        name = Path(ex.practice_file).stem
        hit = cache.lookup(ex, ex.practice_path) if ex.practice_path.is_file() else None
        passed = bool(hit) and hit["failed"] == 0 and hit["passed"] > 0
        out[name] = Choice(name, ex.id, passed, importlib.util.find_spec(f"solutions.{name}") is not None)
    return out


def banner() -> None:
    """Print, in one line, where the chapter's engine modules come from."""
    _check_impl()
    if IMPL == "solutions":
        print("engine: the reference (solutions/) · COURSE_IMPL=practice runs your modules whose exercise passed")
    else:
        print(" · ".join(c.describe() for c in choices().values()))


def use(module: str) -> ModuleType:
    """The engine module `module` (e.g. "batch") from the implementation chosen by `IMPL`; with "practice",
    yours or the reference module by module (see the module docstring)."""
    _check_impl()
    picked = choices()
    if IMPL == "practice" and (module in picked or module in COMPOSITES):
        return _assembled(module, tuple(sorted(picked.items())))
    for package in (IMPL, "framework"):  # the modules without an exercise (sampling, request) are shared
        try:
            return importlib.import_module(f"{package}.{module}")
        except ModuleNotFoundError as e:
            missing = picked.get((e.name or "").removeprefix("solutions."))
            if missing is not None and e.name.startswith("solutions."):  # an edition without that reference
                raise ExerciseNeeded(f"this chapter needs {missing.module} (exercise {missing.exercise}), which has "
                                     "no reference here: run it with COURSE_IMPL=practice and do exercise "
                                     f"{missing.exercise} first.") from None
            if e.name != f"{package}.{module}":
                raise
    raise ModuleNotFoundError(f"no engine module {module!r} in {IMPL}/ or framework/")


# ----------------------------------------------------------------------------------------------------------
# Assembling the engine from the per-module choices


def runner_class(build_batch: Callable, write_kv: Callable, paged_attention: Callable | None) -> type:
    """The model runner on these pieces. `paged_attention=None` is the reference attention, which runs through
    the reference runner's batched kernel (solutions/model_runner.py); any other is called per step exactly as
    exercise 127 defines it (framework/model_runner.py). The judge's end-to-end cases use this very function."""
    if paged_attention is None:
        from solutions.model_runner import ModelRunner as base

        paged_attention = base.paged_attention
    else:
        from framework.model_runner import ModelRunnerBase as base
    return type("ModelRunner", (base,), {"build_batch": staticmethod(build_batch), "write_kv": staticmethod(write_kv),
                                         "paged_attention": staticmethod(paged_attention), "__module__": __name__})


class _Missing(ModuleType):
    """An optional module that is neither yours nor shipped: using any of its names stops the chapter."""

    def __init__(self, choice: Choice) -> None:
        super().__init__(f"missing.{choice.module}")
        self._choice = choice

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        choice = self._choice

        def stop(*args, **kwargs):
            raise choice.needed("this step")

        return type(name, (), {"__init__": stop}) if name[:1].isupper() else stop


@functools.lru_cache(maxsize=None)
def _assembled(module: str, picked_items: tuple) -> ModuleType:
    """One module as chosen (cached per set of choices, so repeated `use` calls give the same classes)."""
    picked = dict(picked_items)

    def pick(name: str) -> ModuleType:
        c = picked[name]
        if c.yours:
            return importlib.import_module(f"practice.{name}")
        if c.has_reference:
            try:
                return importlib.import_module(f"solutions.{name}")
            except ModuleNotFoundError as e:  # a reference importing a sibling this edition does not ship
                sibling = picked.get((e.name or "").removeprefix("solutions."))
                if sibling is None or sibling.yours:
                    raise
                raise sibling.needed("this chapter") from None
        if name in OPTIONAL:
            return _Missing(c)
        raise c.needed("this chapter")

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

    attention = pick("paged_attention").paged_attention if picked["paged_attention"].yours else None
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
