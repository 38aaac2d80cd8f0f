"""Exercise 134 — speculative decoding: verifying drafts and rolling back.

Statement: practice/exercises/134-spec-decode.md. Grade: `python practice/judge.py 134`.
The proposer (framework/ngram_proposer.py) and the scheduling of drafts (framework/spec_decode.py) are given;
this function runs after the forward pass, once per request whose last token was computed.
"""

from __future__ import annotations

import torch

from framework.engine import stop_reason  # noqa: F401
from framework.sampling import sample_token, sampling_probs  # noqa: F401


def verify_and_update(request, draft_token_ids: list[int], logits: torch.Tensor, eos_token_id: int | None,
                      tokenizer=None) -> tuple[list[int], str | None]:
    """Turn the request's `[d + 1, vocab]` rows of `logits` into the tokens it emits, and roll back the rest.

    Greedy: accept drafts while each equals its row's argmax, then emit the argmax at the first mismatch (or the
    bonus token, row d's argmax, after all d). Temperature > 0: accept draft x with probability p(x)
    (`sampling_probs(logits[i], request.sampling_params)`, uniform from `request.generator`); on rejection
    sample from p with x removed and renormalised; after all d, `sample_token(logits[d], ...)`.
    Append the tokens one at a time, stopping at the first `stop_reason(request, eos_token_id, tokenizer)`;
    advance `request.num_computed_tokens` by the number appended. Return (appended tokens, reason or None).
    """
    raise NotImplementedError("exercise 134: verify_and_update is not implemented yet (practice/spec_decode.py)")
