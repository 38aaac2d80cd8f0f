"""Wrong: the drafts are verified against softmax(logits / temperature), without the top-k and top-p cuts of
sampling_probs (the bonus token, through sample_token, has them).

EXPECT: give it probability 0: take p from sampling_probs(logits[i], params)
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, emitted = request.sampling_params, []

    def emit(token):
        request.output_token_ids.append(int(token))
        request.num_computed_tokens += 1
        emitted.append(int(token))
        return stop_reason(request, eos_token_id, tokenizer)

    for i, draft in enumerate(draft_token_ids):
        if params.temperature == 0:
            best = int(logits[i].argmax())
            if best != draft:
                return emitted, emit(best)
        else:
            p = (logits[i].float() / params.temperature).softmax(-1)
            if not torch.rand((), generator=request.generator) < p[draft]:
                p = p.clone()
                p[draft] = 0.0
                return emitted, emit(torch.multinomial(p / p.sum(), 1, generator=request.generator))
        reason = emit(draft)
        if reason:
            return emitted, reason
    return emitted, emit(sample_token(logits[len(draft_token_ids)], params, request.generator))
