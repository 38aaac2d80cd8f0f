"""Wrong: after all drafts are accepted, no bonus token from the last row.

EXPECT: wrong returned after the call
PUBLIC: caught
"""


from framework.engine import stop_reason
from framework.sampling import sample_token


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    params, tokens = request.sampling_params, []
    for i, draft in enumerate(draft_token_ids):
        best = int(logits[i].argmax())
        if best != draft:
            tokens.append(best)
            break
        tokens.append(draft)
    if not draft_token_ids:
        tokens.append(sample_token(logits[0], params, request.generator))
    out = []
    for t in tokens:
        request.output_token_ids.append(t)
        request.num_computed_tokens += 1
        out.append(t)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
