"""What the public drivers (judge/drivers/<module>.py, shipped to students) share. A driver's function takes the
learner's module first, then plain arguments, and returns plain data, holding no expected value; this process never
calls the grader (judge/drivers/fakes.py, rounds.py). An object a driver's later calls reuse is kept in its
process under a name the grader chooses (`keep`, `kept`)."""

from __future__ import annotations

import functools
from typing import Any

from judge.practice_finder import PracticeFinder
from judge.harness import option


@functools.lru_cache(maxsize=2)
def _model_at(path: str):
    import torch
    from mini_llm import load_transformer

    return load_transformer(path, dtype=torch.float32, device="cpu")


def load_model(path: str | None = None):
    """The checkpoint at `path`, else the one given with --model, else the embedded model: fp32 on the CPU (the
    worker has no GPU), loaded once per process; the judge's one loader."""
    from mini_llm.settings import EMBEDDED_MODEL

    return _model_at(str(path or option("model") or EMBEDDED_MODEL))


def model_problem(path: str) -> str | None:
    """Why the checkpoint at `path` cannot serve the end-to-end cases (None: it loads). Checked before a class is
    graded: a wrong path would fail every student's end-to-end case as theirs."""
    try:
        load_model(path)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the setup's problem
        return f"{type(exc).__name__}: {exc}"
    return None


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


def forget() -> None:
    """Drop the kept objects and the practice modules lent for missing references (after each submission)."""
    _kept.clear()
    PracticeFinder.withdraw()
