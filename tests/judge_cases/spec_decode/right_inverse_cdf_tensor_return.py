"""Right: every random token drawn by inverse CDF from one uniform of the request's generator (searchsorted on the
cumulative p; the bonus token too, so other random numbers than sample_token's, in the same distribution), with no
drafts handled by the same path; the tokens and the finish reason found first, then appended with num_computed_tokens
advanced once; returns the tokens as a tensor."""

import torch

from framework.engine import stop_reason
from framework.sampling import sampling_probs


def draw(p, generator):
    cdf = p.double().cumsum(0)
    u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    return min(int(torch.searchsorted(cdf, u, right=True)), p.numel() - 1)


def run_of(request, drafts, logits):
    params = request.sampling_params
    for i in range(len(drafts) + 1):
        if params.temperature == 0:
            token = int(logits[i].argmax())
        else:
            p = sampling_probs(logits[i], params)
            if i < len(drafts) and torch.rand((), generator=request.generator) < p[drafts[i]]:
                token = drafts[i]
            else:
                token = draw(p.index_fill(0, torch.tensor([drafts[i]]), 0) if i < len(drafts) else p,
                             request.generator)
        yield token
        if i == len(drafts) or token != drafts[i]:
            return


def verify_and_update(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    before, reason = len(request.output_token_ids), None
    for token in run_of(request, list(draft_token_ids), logits):
        request.output_token_ids.append(token)
        reason = stop_reason(request, eos_token_id, tokenizer)
        if reason:
            break
    emitted = request.output_token_ids[before:]
    request.num_computed_tokens += len(emitted)
    return torch.tensor(emitted, dtype=torch.long), reason
