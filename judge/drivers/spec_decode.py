"""Driver of exercise 134 (verify_and_update): the learner's function called on requests built beside it.

`verify` makes one call on a request and logits the grader chose (the grader's speculating engine calls it so for
every request of every step); `first_tokens` makes many, on requests seeded 0, 1, ..., and returns what each
emitted. The grader computes the expected values with the reference.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from framework.request import Request
from framework.sampling import SamplingParams, make_generator
from judge.drivers import learner_error


def _call(impl: ModuleType, case: dict[str, Any], seed: int | None = None, tokenizer=None) -> dict[str, Any]:
    """One call on a request whose last token and drafts were just computed (every token before its last is
    cached): what it returned and the request's state after it."""
    params = SamplingParams(**case["params"] | ({"seed": seed} if seed is not None else {}))
    request = Request(list(case["prompt"]), params, output_token_ids=list(case["outputs"]))
    request.num_computed_tokens = request.num_tokens - 1
    request.generator = make_generator(params, torch.device("cpu"))
    logits = torch.as_tensor(case["logits"], dtype=torch.float32)  # a list, or a tensor from the grader's engine
    try:
        tokens, reason = impl.verify_and_update(request, list(case["drafts"]), logits, case["eos"], tokenizer)
        tokens = [int(t) for t in tokens]
    except Exception as exc:  # noqa: BLE001 - the learner's error, reported as data
        return {"error": learner_error(exc)}
    return {"returned": tokens, "reason": reason, "output_token_ids": [int(t) for t in request.output_token_ids],
            "num_computed_tokens": int(request.num_computed_tokens)}


def verify(impl: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    """One call, with the course's tokenizer where the case has a stop string."""
    if case["params"].get("stop"):
        from mini_llm import load_tokenizer

        return _call(impl, case, tokenizer=load_tokenizer())
    return _call(impl, case)


def first_tokens(impl: ModuleType, case: dict[str, Any], trials: int) -> dict[str, Any]:
    """`trials` calls on fresh requests seeded 0, 1, ...: each call's emitted tokens (its first error ends it)."""
    runs = []
    for seed in range(trials):
        result = _call(impl, case, seed)
        if "error" in result:
            return result
        runs.append(result["returned"])
    return {"runs": runs}
