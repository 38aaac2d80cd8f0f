"""Public drivers: code the worker runs for exercises whose learner code needs objects built beside it (a
scheduler with its KV-cache manager and requests, an engine with its model). Each function takes the learner's
module first, then plain arguments from the grader, and returns plain data (what the learner's objects did).
They hold no expected value: the grader computes those with the references. Shipped to students."""

from __future__ import annotations

import functools
import operator
from typing import Any


@functools.lru_cache(maxsize=2)
def _model_at(path: str):
    import torch

    from mini_llm import load_transformer

    return load_transformer(path, dtype=torch.float32, device="cpu")


def learner_error(exc: BaseException) -> dict:
    """The learner's exception as plain data, with their trimmed traceback, for the grader to show."""
    from judge import harness
    from judge._worker import _error

    return _error(exc, harness.context().learner_file)


def plain_ints(value: Any) -> list[int] | None:
    """The integers of a list, tuple, deque, 1-D integer tensor or array, or of any other sequence of ints (an
    `array.array`, a range, ...), as a list of ints; None if `value` is none of those. Imports torch only for a
    tensor the learner made (pure-Python exercises stay quick to grade)."""
    if _array_module(value):
        from judge.harness import int_values

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
            from judge.harness import int_values

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
    from judge.harness import option
    from mini_llm.settings import EMBEDDED_MODEL

    return _model_at(str(path or option("model") or EMBEDDED_MODEL))
