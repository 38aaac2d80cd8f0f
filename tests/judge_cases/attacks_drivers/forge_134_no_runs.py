"""Attack on 134: verify_and_update never looks at its drafts (it emits row 0's token), and the driver's
distribution is replaced at import by one that reports zero calls: a binomial test on no calls finds every count in
range (the three random cases passed), and the end-to-end case, whose drafts were never accepted, passed too."""

import judge.drivers.spec_decode as driver
from framework.engine import stop_reason
from framework.sampling import sample_token


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    token = sample_token(logits[0], request.sampling_params, request.generator)
    request.output_token_ids.append(token)
    request.num_computed_tokens += 1
    return [token], stop_reason(request, eos_token_id, tokenizer)


driver.distribution = lambda impl, case, trials, repeats=0: {"problem": None, "_runs": [], "_again": []}
