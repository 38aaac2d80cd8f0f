"""Wrong: a prompt chunk that needs no logits is given a row, so every later request's mask lands on the wrong row.

EXPECT: outside the bitmask
PUBLIC: caught
"""

from framework.spec_decode import accepted_length
from framework.structured_output import apply_token_bitmask


def apply_grammar_bitmask(logits, rows, bitmask):
    row = 0
    for r in rows:
        if r.grammar is not None and r.need_logits:
            r.grammar.fill_bitmask(bitmask, row)
            for i, draft in enumerate(r.draft_token_ids):
                r.grammar.accept_token(draft)
                r.grammar.fill_bitmask(bitmask, row + 1 + i)
        row += 1 + len(r.draft_token_ids)
    apply_token_bitmask(logits, bitmask[:logits.shape[0]])


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    accepted = accepted_length(draft_token_ids, token_ids)
    grammar.rollback(len(draft_token_ids) - accepted)
    for token in token_ids[accepted:]:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason
