"""Wrong: after appending, request.output_token_ids is replaced by a tuple. Every case passed (the driver sent a
list of it back), and the speculating engine then failed: "can only concatenate list (not "tuple") to list".

EXPECT: not a list
PUBLIC: caught
"""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def _vu(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
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
            p = sampling_probs(logits[i], params)
            if not torch.rand((), generator=request.generator) < p[draft]:
                p = p.clone()
                p[draft] = 0.0
                return emitted, emit(torch.multinomial(p / p.sum(), 1, generator=request.generator))
        reason = emit(draft)
        if reason:
            return emitted, reason
    return emitted, emit(sample_token(logits[len(draft_token_ids)], params, request.generator))


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    toks, reason = _vu(request, draft_token_ids, logits, eos_token_id, tokenizer)
    request.output_token_ids = tuple(request.output_token_ids)
    return toks, reason
