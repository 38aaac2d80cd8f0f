"""Wrong: makes its own generator from sampling_params.seed at every call instead of using the request's: a seeded
request is reproducible and each call is right in distribution, but every step of one request draws the same numbers.
EXPECT: they drew the same random numbers
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, emitted = request.sampling_params, []
    generator = torch.Generator().manual_seed(params.seed if params.seed is not None else 0)

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
            p = sampling_probs(logits[i], params)
            if not torch.rand((), generator=generator) < p[draft]:
                p = p.clone()
                p[draft] = 0.0
                return emitted, emit(torch.multinomial(p / p.sum(), 1, generator=generator))
        reason = emit(draft)
        if reason:
            return emitted, reason
    return emitted, emit(sample_token(logits[len(draft_token_ids)], params, generator))
