"""Right: the greedy run found with tensor operations (cumprod of matches), random acceptance with bernoulli
and the residual by masking; tokens collected first, then appended with the stop checks; returns a list pair."""

import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def choose(request, drafts, logits):
    params, d = request.sampling_params, len(drafts)
    if params.temperature == 0:
        target = logits.argmax(dim=-1)
        if d == 0:
            return [int(target[0])]
        matches = (target[:d] == torch.tensor(drafts)).long().cumprod(0)
        n = int(matches.sum())
        return drafts[:n] + [int(target[n])]
    for i, x in enumerate(drafts):
        p = sampling_probs(logits[i], params)
        if torch.bernoulli(p[x].clamp(0, 1), generator=request.generator) == 0:
            residual = torch.where(torch.arange(p.numel()) == x, torch.zeros_like(p), p)
            return drafts[:i] + [int(torch.multinomial(residual, 1, generator=request.generator))]
    return list(drafts) + [sample_token(logits[d], params, request.generator)]


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    out = []
    for token in choose(request, list(draft_token_ids), logits):
        request.output_token_ids.append(token)
        out.append(token)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason is not None:
            request.num_computed_tokens += len(out)
            return [out, reason]
    request.num_computed_tokens += len(out)
    return [out, None]
