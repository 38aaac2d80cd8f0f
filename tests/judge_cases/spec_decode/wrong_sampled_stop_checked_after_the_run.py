"""Wrong: greedy right, but with temperature > 0 the whole run is appended and stop_reason is checked once, after
it: a sampled request emits past an accepted end-of-sequence draft, and past max_tokens.

EXPECT: yet it appended
PUBLIC: hidden only (no public random case has a stop inside its run)
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, drafts = request.sampling_params, list(draft_token_ids)
    if params.temperature > 0:
        tokens = []
        for i, draft in enumerate(drafts):
            p = sampling_probs(logits[i], params)
            if torch.rand((), generator=request.generator) < p[draft]:
                tokens.append(draft)
                continue
            p = p.clone()
            p[draft] = 0.0
            tokens.append(int(torch.multinomial(p, 1, generator=request.generator)))
            break
        else:
            tokens.append(sample_token(logits[len(drafts)], params, request.generator))
        request.output_token_ids.extend(tokens)
        request.num_computed_tokens += len(tokens)
        return tokens, stop_reason(request, eos_token_id, tokenizer)
    out = []
    for i in range(len(drafts) + 1):
        best = int(logits[i].argmax())
        request.output_token_ids.append(best)
        request.num_computed_tokens += 1
        out.append(best)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason or i == len(drafts) or best != drafts[i]:
            return out, reason
    return out, None
