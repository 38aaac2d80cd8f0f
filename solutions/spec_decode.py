"""Verifying drafts and rolling back (exercise 134), and the speculating engine built on it.

The forward pass computed the request's last token and its d drafts; `logits` row i is the model's prediction
after the request's tokens and the first i drafts. Greedy: the drafts are right while each equals the argmax at
its position; the first wrong one is replaced by the argmax, and after d right ones row d gives one more token
(the bonus), so every step emits at least one token. Random: for an n-gram draft, a point mass on x, the rule of
speculative sampling (Leviathan et al., 2023) is to accept x with probability p(x), and on rejection to sample
from p with x removed and renormalised: then each emitted token is distributed exactly as p. This is vLLM's
`rejection_sample` with `draft_probs=None` (vllm/v1/sample/rejection_sampler.py at b31e9326a7, called from
`RejectionSampler.forward`; the recovered token there is the residual sample here).
"""

from __future__ import annotations

import torch

from framework.engine import LLMBase, stop_reason
from framework.request import Request
from framework.sampling import SamplingParams, sample_token, sampling_probs
from framework.spec_decode import speculating_engine

from .engine import LLMEngine


def rejection_sample(logits: torch.Tensor, draft_token_ids: list[int], params: SamplingParams,
                     generator: torch.Generator | None) -> list[int]:
    """The tokens a step emits for one request before stop conditions: the accepted drafts, then the model's
    own token (at the first rejection, or the bonus token after all of them). `logits` is `[d + 1, vocab]`."""
    if params.temperature == 0:
        target = logits.argmax(-1).tolist()
        n = 0
        while n < len(draft_token_ids) and draft_token_ids[n] == target[n]:
            n += 1
        return draft_token_ids[:n] + [target[n]]
    for i, draft in enumerate(draft_token_ids):
        probs = sampling_probs(logits[i], params)
        if torch.rand((), generator=generator, device=probs.device) >= probs[draft]:
            residual = probs.clone()
            residual[draft] = 0  # multinomial renormalises
            return draft_token_ids[:i] + [int(torch.multinomial(residual, 1, generator=generator))]
    return draft_token_ids + [sample_token(logits[-1], params, generator)]


def verify_and_update(request: Request, draft_token_ids: list[int], logits: torch.Tensor, eos_token_id: int | None,
                      tokenizer=None) -> tuple[list[int], str | None]:
    """Append the tokens the drafts earn to `request.output_token_ids`, one at a time, stopping at the first that
    ends the request (`stop_reason`); advance `num_computed_tokens` by the tokens appended, whose predecessors' K
    and V this step wrote (the rejected drafts' K and V are overwritten later). Returns (tokens, finish reason)."""
    appended: list[int] = []
    for token in rejection_sample(logits, draft_token_ids, request.sampling_params, request.generator):
        request.output_token_ids.append(token)
        request.num_computed_tokens += 1
        appended.append(token)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return appended, reason
    return appended, None


class SpecDecodeEngine(speculating_engine(LLMEngine, verify_and_update)):
    """The reference engine with n-gram speculation: `SpecDecodeEngine(model, EngineConfig(speculative=...))`."""


class LLM(LLMBase):
    """`LLM(speculative=SpeculativeConfig(num_speculative_tokens=4)).generate(prompts, params)`."""

    engine_cls = SpecDecodeEngine
