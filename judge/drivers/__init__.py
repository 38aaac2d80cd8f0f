"""Public drivers: code the worker runs for exercises whose learner code needs objects built beside it (a
scheduler with its KV-cache manager and requests, an engine with its model). Each function takes the learner's
module first, then plain arguments from the grader, and returns plain data (what the learner's objects did).
They hold no expected value: the grader computes those with the references. Shipped to students."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=2)
def _model_at(path: str):
    import torch

    from mini_llm import load_transformer

    return load_transformer(path, dtype=torch.float32, device="cpu")


def learner_error(exc: BaseException) -> dict:
    """The learner's exception as plain data, with their trimmed traceback, for the grader to show."""
    from judge import harness
    from judge._worker import _error

    return _error(exc, harness._STATE.get("learner_file"))


def load_model(path: str | None = None):
    """The checkpoint at `path`, else the one given with --model, else the embedded model: fp32 on the CPU (the
    worker has no GPU), loaded once per process. The one loader of the judge, grader and worker alike."""
    from judge.harness import option
    from mini_llm.settings import EMBEDDED_MODEL

    return _model_at(str(path or option("model") or EMBEDDED_MODEL))
