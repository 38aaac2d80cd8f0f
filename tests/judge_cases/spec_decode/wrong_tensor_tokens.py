"""Wrong: the greedy token is the argmax tensor, appended as it is: request.output_token_ids holds 0-dim tensors
(equal to the right ints, but a server's JSON of the outputs fails on them).
EXPECT: token ids and counts are Python ints
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, emitted = request.sampling_params, []

    def emit(token):
        request.output_token_ids.append(token)
        request.num_computed_tokens += 1
        emitted.append(token)
        return stop_reason(request, eos_token_id, tokenizer)

    for i, draft in enumerate(draft_token_ids):
        if params.temperature == 0:
            best = logits[i].argmax()
            if best != draft:
                return emitted, emit(best)
        else:
            p = sampling_probs(logits[i], params)
            if not torch.rand((), generator=request.generator) < p[draft]:
                p = p.clone()
                p[draft] = 0.0
                return emitted, emit(torch.multinomial(p / p.sum(), 1, generator=request.generator))
        reason = emit(draft)
        if reason:
            return emitted, reason
    return emitted, emit(sample_token(logits[len(draft_token_ids)], params, request.generator))
