"""Wrong: greedy argmax ties go to the last index (the rows read backwards), not the first as torch.argmax does.

EXPECT: wrong returned after the call
PUBLIC: hidden only (no public case has a tied row)
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def last_argmax(row) -> int:
    return len(row) - 1 - int(row.flip(0).argmax())


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, tokens = request.sampling_params, []
    for i, draft in enumerate(draft_token_ids):
        if params.temperature == 0:
            best = last_argmax(logits[i])
        else:  # the rule, right
            p = sampling_probs(logits[i], params)
            rejected = torch.rand((), generator=request.generator) >= p[draft]
            best = int(torch.multinomial(p.index_fill(0, torch.tensor([draft]), 0), 1,
                                         generator=request.generator)) if rejected else draft
        if best != draft:
            tokens.append(best)
            break
        tokens.append(draft)
    else:
        last = logits[len(draft_token_ids)]
        tokens.append(last_argmax(last) if params.temperature == 0 else sample_token(last, params, request.generator))
    out = []
    for token in tokens:
        request.output_token_ids.append(token)
        request.num_computed_tokens += 1
        out.append(token)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
