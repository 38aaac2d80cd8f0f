"""The exercise registry: one metadata module per exercise in judge/exercises/, found by scanning (judge/README.md).
Metadata modules must stay light (no torch import): `list` reads them all."""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import exercises as pkg

ROOT = Path(__file__).resolve().parent.parent  # the repository root
# The references of a whole engine, for the exercises whose cases run one around the learner's code
ENGINE_PARTS = ("solutions.engine", "solutions.scheduler", "solutions.kv_cache_manager", "solutions.model_runner",
                "solutions.block_pool", "solutions.prefix_cache", "solutions.preemption", "solutions.batch",
                "solutions.paged_attention", "solutions.paged_kv_cache")
OPTIONAL = {"prefix_cache": "caches prefixes", "preemption": "preempts"}  # needed only where something does that
# The exercise modules each assembled module (course.use) is built from: a chapter or case using it runs them all.
PARTS = {"kv_cache_manager": ("block_pool", "prefix_cache"),
         "model_runner": ("batch", "paged_kv_cache", "paged_attention"),
         "scheduler": ("scheduler", "preemption")}
PARTS["engine"] = ("engine", *PARTS["kv_cache_manager"], *PARTS["model_runner"], *PARTS["scheduler"])


def shipped(module: str, root: Path = ROOT) -> bool:
    """Whether this copy holds the file of `module` (e.g. "solutions.batch", or the package "judge.hidden"). Not an
    import lookup: judge/practice_finder.py may lend a practice module the name of a missing reference."""
    path = root / module.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@dataclass(frozen=True)
class Exercise:
    id: int  # stable number, e.g. 128
    slug: str  # e.g. "batch-layout"; `python practice/judge.py batch-layout` works too
    title: str
    difficulty: str  # "easy" | "medium" | "hard"
    practice_file: str  # the learner's file, relative to the repo root, e.g. "practice/batch.py"
    reference: str  # the reference module, e.g. "solutions.batch"
    tests: str  # the hidden test module, e.g. "judge.hidden.batch_layout"; it defines CASES = judge.harness.Cases()
    # Names the learner's module must define, with the positional parameters each must accept, e.g.
    # {"build_batch": ("items", "block_size")}. For a class, the parameters of its constructor (without self).
    api: dict[str, tuple[str, ...]] = field(default_factory=dict)
    statement: str = ""  # the statement, relative to the repo root, e.g. "practice/exercises/128-batch-layout.md"
    case_timeout: float = 20.0  # default seconds per case (a case may set its own); `time_limit=` overrides
    memory_limit_mb: int = 4096  # address-space limit of the grading process
    total_timeout: float = 600.0  # seconds for one submission, all cases together (the rest are not run)
    # the references of the parts the learner's code calls, run in the grader (a student edition lacking one: the
    # student's practice module of that name), and the cases that run them, e.g. "its end-to-end case" ("": all)
    part_references: tuple[str, ...] = ()
    parts_run_by: str = ""

    @property
    def practice_path(self) -> Path:
        return ROOT / self.practice_file

    @property
    def reference_path(self) -> Path:
        return ROOT / (self.reference.replace(".", "/") + ".py")

    def needs(self) -> str | None:
        """In words, the exercises whose code this exercise's cases run besides the learner's (the course's own, or
        its recorded answers in a student edition); None for none."""
        return needs_text([Path(self.practice_file).stem], skip=self.id, where="a case")

    def needs_line(self) -> str:
        """The statement's "Needs" line."""
        text = self.needs()
        if text is None:
            return "**Needs:** no other exercise: its cases run only your code, on the framework."
        who = self.parts_run_by or "its cases"
        return (f"**Needs:** no other exercise passed first: {who} run{'s' * bool(self.parts_run_by)} the course's "
                f"code of {text} (in a student edition, its answers recorded when the copy was made). The chapters "
                "run yours of them once they pass.")

    @property
    def public_cases(self) -> tuple[str, ...]:
        """The cases a student can run on their copy: marked `public=True`, or in an edition, the recorded ones."""
        cases = self.hidden_cases()
        if cases is not None:
            return tuple(c.name for c in cases if c.public)
        recorded = public_path(self)
        return tuple(json.loads(recorded.read_text())["cases"]) if recorded.is_file() else ()

    def case_counts(self) -> tuple[int, int | None]:
        """(public cases, all cases; None where the hidden tests are not installed)."""
        cases = self.hidden_cases()
        return len(self.public_cases), None if cases is None else len(cases)

    def hidden_cases(self) -> Any:
        """The hidden module's CASES; None where this copy does not hold it (a student's copy, even run by an
        interpreter that has the course installed from elsewhere). The one place that tells whether they are here."""
        return importlib.import_module(self.tests).CASES if shipped(self.tests) else None


def public_path(ex: Exercise) -> Path:
    """Where the student edition keeps the recorded public cases of `ex` (judge/public.py)."""
    return ROOT / "judge" / "public" / f"{ex.slug.replace('-', '_')}.json"


def load_exercises() -> dict[int, Exercise]:
    """Every registered exercise by id, discovered from judge/exercises/ex*.py."""
    found: dict[int, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("ex"):
            continue
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        ex = getattr(mod, "EXERCISE", None)
        if not isinstance(ex, Exercise):
            raise TypeError(f"judge/exercises/{info.name}.py must define EXERCISE = judge.Exercise(...)")
        if ex.id in found:
            raise ValueError(f"exercise id {ex.id} is registered twice ({found[ex.id].slug!r} and {ex.slug!r})")
        found[ex.id] = ex
    return dict(sorted(found.items()))


def get_exercise(key: int | str | Exercise) -> Exercise:
    """An exercise by id (128 or "128"), slug ("batch-layout") or the Exercise itself."""
    if isinstance(key, Exercise):
        return key
    exercises = load_exercises()
    text = str(key).strip()
    if text.isdigit() and int(text) in exercises:
        return exercises[int(text)]
    for ex in exercises.values():
        if text.lower() in (ex.slug, f"{ex.id}-{ex.slug}"):
            return ex
    known = ", ".join(f"{e.id} ({e.slug})" for e in exercises.values())
    statement = next((ROOT / "practice" / "exercises").glob(f"{text}-*.md"), None) if text.isdigit() else None
    if statement is not None:  # a student edition holds the statements of exercises it does not release yet
        raise KeyError(f"exercise {text} ({statement.stem.split('-', 1)[1]}) is not released in this copy of the "
                       f"course yet; released: {known}")
    raise KeyError(f"no exercise {key!r}; known exercises: {known}")


def exercises_of(modules: Iterable[str]) -> tuple[list[int], dict[int, str]]:
    """The released exercises whose code runs where `modules` (e.g. "engine") run, through PARTS and the modules'
    `part_references`: (always needed, {exercise: what needs it} for the OPTIONAL modules)."""
    by_module = {Path(ex.practice_file).stem: ex for ex in load_exercises().values()}
    names = set()
    for module in modules:
        names.update(PARTS.get(module, (module,)))
        if module in by_module:
            names.update(ref.removeprefix("solutions.") for ref in by_module[module].part_references)
    parts = {part for name in names for part in PARTS.get(name, (name,))}
    found = {by_module[part].id: part for part in parts if part in by_module}
    return (sorted(i for i, part in found.items() if part not in OPTIONAL),
            {i: OPTIONAL[found[i]] for i in sorted(found) if found[i] in OPTIONAL})


def needs_text(modules: Iterable[str], skip: int | None = None, where: str = "a cell") -> str | None:
    """The exercises `modules` need, in words ("exercises 125–130, and 131, 132 where a cell preempts or caches
    prefixes"), without exercise `skip` (the one that writes them); None for none."""
    needed, optional = exercises_of(modules)
    needed, optional = [i for i in needed if i != skip], {i: use for i, use in optional.items() if i != skip}
    if not needed and not optional:
        return None
    text = f"exercise{'s' if len(needed) > 1 else ''} {span(needed)}" if needed else ""
    if optional:
        lead = ", and" if text else "exercise" + "s" * (len(optional) > 1)
        text += f"{lead} {span(list(optional))} where {where} {' or '.join(optional.values())}"
    return text


def span(ids: list[int]) -> str:
    """125, 126, 127, 129 as "125–127, 129"."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
