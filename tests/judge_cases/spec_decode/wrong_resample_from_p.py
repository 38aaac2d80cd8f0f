"""Wrong: on rejection the token is sampled from p itself, not from p with the draft removed, so the draft
comes out more often than p says (and a call may end on the draft it rejected).

EXPECT: a rejected draft was emitted as its own replacement
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, tokens = request.sampling_params, []
    for i, draft in enumerate(draft_token_ids):
        if params.temperature == 0:
            best = int(logits[i].argmax())
            if best != draft:
                tokens.append(best)
                break
        else:
            p = sampling_probs(logits[i], params)
            if torch.rand((), generator=request.generator) >= p[draft]:
                tokens.append(int(torch.multinomial(p, 1, generator=request.generator)))
                break
        tokens.append(draft)
    else:
        tokens.append(sample_token(logits[len(draft_token_ids)], params, request.generator))
    out = []
    for t in tokens:
        request.output_token_ids.append(t)
        request.num_computed_tokens += 1
        out.append(t)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
