"""Wrong: num_computed_tokens advances by 1 + d, the drafts counted whether accepted or not.

EXPECT: advance num_computed_tokens by the number of tokens appended
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
    else:
        tokens.append(sample_token(logits[len(draft_token_ids)], params, request.generator))
    request.num_computed_tokens += 1 + len(draft_token_ids)
    out = []
    for t in tokens:
        request.output_token_ids.append(t)
        out.append(t)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            return out, reason
    return out, None
