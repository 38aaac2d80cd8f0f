"""Wrong: every accepted token is appended, and the stop conditions are checked once, after the run: a
request emits past max_tokens (and past its end-of-sequence token).

EXPECT: the request emitted past its stop
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
    request.output_token_ids.extend(tokens)
    request.num_computed_tokens += len(tokens)
    return tokens, stop_reason(request, eos_token_id, tokenizer)
