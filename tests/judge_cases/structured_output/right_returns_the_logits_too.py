"""Right: the mask applied in place, and the logits returned too (the statement grades the logits it leaves; a
caller that ignores the return value sees the same)."""

from framework.spec_decode import accepted_length
from framework.structured_output import apply_token_bitmask


def apply_grammar_bitmask(logits, rows, bitmask):
    work, row = [], 0
    for r in rows:
        if r.need_logits:
            if r.grammar is not None:
                work.append((r.grammar, row, list(r.draft_token_ids)))
            row += 1 + len(r.draft_token_ids)
    for grammar, first, drafts in work:
        grammar.fill_bitmask(bitmask, first)
        for offset, token in enumerate(drafts, start=1):
            grammar.accept_token(token)
            grammar.fill_bitmask(bitmask, first + offset)
    if work:
        apply_token_bitmask(logits, bitmask)
    return logits


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    kept = accepted_length(draft_token_ids, token_ids)
    rejected = len(draft_token_ids) - kept
    grammar.rollback(rejected)
    for token in token_ids[kept:]:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason
