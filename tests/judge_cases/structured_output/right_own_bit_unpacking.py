"""Right: the rows' offsets computed first as plain lists, and the mask applied with the learner's own bit
unpacking and `masked_fill_` instead of `apply_token_bitmask`; the update through a helper of its own.

"""

import torch


def _offsets(rows):
    starts, at = [], 0
    for r in rows:
        starts.append(at if r.need_logits else None)
        at += (1 + len(r.draft_token_ids)) if r.need_logits else 0
    return starts


def apply_grammar_bitmask(logits, rows, bitmask):
    for r, start in zip(rows, _offsets(rows)):
        if start is None or r.grammar is None:
            continue
        r.grammar.fill_bitmask(bitmask, start)
        for k, draft in enumerate(r.draft_token_ids, start=1):
            r.grammar.accept_token(draft)
            r.grammar.fill_bitmask(bitmask, start + k)
    bits = (bitmask.to(torch.int64).unsqueeze(-1) >> torch.arange(32)) & 1
    allowed = bits.flatten(1)[:, : logits.shape[1]].bool()
    logits.masked_fill_(~allowed.to(logits.device), float("-inf"))


def _num_accepted(drafts, tokens):
    n = 0
    while n < len(drafts) and n < len(tokens) and drafts[n] == tokens[n]:
        n += 1
    return n


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    n = _num_accepted(draft_token_ids, token_ids)
    if len(draft_token_ids) > n:
        grammar.rollback(len(draft_token_ids) - n)
    for token in token_ids[n:]:
        grammar.accept_token(token)
    if grammar.is_terminated():
        return "stop"
    return finish_reason
