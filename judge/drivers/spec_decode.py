"""Driver of exercise 134 (verify_and_update): requests built beside the learner's code, and the speculating
engine with the learner's function in it.

`verify` calls the function once on a hand-built request and logits (the grader's speculating engine, which
runs the reference engine there, calls it so for every request of every step); `first_tokens` calls it on many
seeded requests and counts what they emitted. Each returns plain data (what the learner's code did), never a verdict: the
grader computes the expected values with the reference.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from framework.request import Request
from framework.sampling import SamplingParams, make_generator
from judge.drivers import learner_error


def make_request(case: dict[str, Any], seed: int | None = None) -> Request:
    """A request whose last token and drafts were just computed: every token before its last is cached."""
    params = SamplingParams(**case["params"] | ({"seed": seed} if seed is not None else {}))
    request = Request(list(case["prompt"]), params, output_token_ids=list(case["outputs"]))
    request.num_computed_tokens = request.num_tokens - 1
    request.generator = make_generator(params, torch.device("cpu"))
    return request


def _tokenizer(case: dict[str, Any]):
    if not case["params"].get("stop"):
        return None
    from mini_llm import load_tokenizer
    return load_tokenizer()


def _call(impl: ModuleType, request: Request, case: dict[str, Any], tokenizer) -> dict[str, Any]:
    logits = torch.as_tensor(case["logits"], dtype=torch.float32)  # a list, or a tensor from the grader's engine
    try:
        tokens, reason = impl.verify_and_update(request, list(case["drafts"]), logits, case["eos"], tokenizer)
        tokens = [int(t) for t in tokens]
    except Exception as exc:  # noqa: BLE001 - the learner's error, reported as data
        return {"error": learner_error(exc)}
    return {"returned": tokens, "reason": reason, "output_token_ids": [int(t) for t in request.output_token_ids],
            "num_computed_tokens": int(request.num_computed_tokens)}


def verify(impl: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    """One call: what it returned and the request's state after it."""
    return _call(impl, make_request(case), case, _tokenizer(case))


def first_tokens(impl: ModuleType, case: dict[str, Any], trials: int) -> dict[str, Any]:
    """`trials` calls on fresh requests seeded 0, 1, ...: each call's emitted tokens (its first error ends it)."""
    runs = []
    for seed in range(trials):
        result = _call(impl, make_request(case, seed), case, None)
        if "error" in result:
            return result
        runs.append(result["returned"])
    return {"runs": runs}
