# VIOLATES: Draw random numbers with the request's generator, so that a seeded request is reproducible
"""Accepts or rejects each draft with a number from torch's global generator, not the request's."""
import torch

from framework.engine import stop_reason
from framework.sampling import sample_token, sampling_probs


def _first_argmax(row):
    values = row.tolist()
    return max(range(len(values)), key=values.__getitem__)


def _greedy(drafts, logits):
    out = []
    for i, x in enumerate(drafts):
        best = _first_argmax(logits[i])
        out.append(best)
        if best != x:
            return out
    out.append(_first_argmax(logits[len(drafts)]))
    return out


def _sampled(request, drafts, logits):
    params, gen = request.sampling_params, request.generator
    out = []
    for i, x in enumerate(drafts):
        p = sampling_probs(logits[i], params)
        u = torch.rand(())
        if u.item() < p[x].item():
            out.append(x)
            continue
        residual = p.clone()
        residual[x] = 0
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
        return out
    out.append(sample_token(logits[len(drafts)], params, gen))
    return out


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    drafts = list(draft_token_ids)
    if request.sampling_params.temperature == 0:
        chosen = _greedy(drafts, logits)
    else:
        chosen = _sampled(request, drafts, logits)
    appended, reason = [], None
    for token in chosen:
        request.output_token_ids.append(token)
        appended.append(token)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            break
    request.num_computed_tokens += len(appended)
    return appended, reason
