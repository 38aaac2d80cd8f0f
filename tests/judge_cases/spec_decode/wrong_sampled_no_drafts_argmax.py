"""Wrong: with no drafts there is nothing to verify, so the call takes the row's argmax, even with temperature > 0:
a sampled request with no drafts never samples (its bonus token is not sample_token's).

EXPECT: bonus token is not distributed as p of row d
PUBLIC: hidden only (no public random case has no drafts)
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def choose(request, drafts, logits):
    params = request.sampling_params
    if not drafts:
        return [int(logits[0].argmax())]
    tokens = []
    for i, draft in enumerate(drafts):
        if params.temperature == 0:
            accepted = int(logits[i].argmax()) == draft
        else:
            accepted = bool(torch.rand((), generator=request.generator) < sampling_probs(logits[i], params)[draft])
        if not accepted:
            if params.temperature == 0:
                return tokens + [int(logits[i].argmax())]
            p = sampling_probs(logits[i], params).clone()
            p[draft] = 0.0
            return tokens + [int(torch.multinomial(p, 1, generator=request.generator))]
        tokens.append(draft)
    return tokens + [sample_token(logits[len(drafts)], params, request.generator)]


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    out = []
    for t in choose(request, list(draft_token_ids), logits):
        request.output_token_ids.append(t)
        request.num_computed_tokens += 1
        out.append(t)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
