"""Wrong: greedy right, but with temperature > 0 the tokens are right in distribution and only returned: none is
appended to request.output_token_ids, num_computed_tokens advances by 1 + d, and stop_reason is never called.

EXPECT: the tokens returned are not those appended
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def sampled(request, drafts, logits):
    params, tokens = request.sampling_params, []
    for i, draft in enumerate(drafts):
        p = sampling_probs(logits[i], params)
        if torch.rand((), generator=request.generator) >= p[draft]:
            p = p.clone()
            p[draft] = 0.0
            return tokens + [int(torch.multinomial(p, 1, generator=request.generator))]
        tokens.append(draft)
    return tokens + [sample_token(logits[len(drafts)], params, request.generator)]


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    drafts = list(draft_token_ids)
    if request.sampling_params.temperature > 0:
        request.num_computed_tokens += 1 + len(drafts)  # every position of the pass was computed
        return sampled(request, drafts, logits), None
    tokens = []
    for i, draft in enumerate(drafts):
        best = int(logits[i].argmax())
        tokens.append(best)
        if best != draft:
            break
    else:
        tokens.append(int(logits[len(drafts)].argmax()))
    out = []
    for t in tokens:
        request.output_token_ids.append(t)
        request.num_computed_tokens += 1
        out.append(t)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
