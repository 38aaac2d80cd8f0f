"""Wrong: one row per request, as if nobody had drafts: a drafted request's rows go to the next request.

EXPECT: wrong mask on logits row
PUBLIC: caught
"""

from framework.spec_decode import accepted_length
from framework.structured_output import apply_token_bitmask


def apply_grammar_bitmask(logits, rows, bitmask):
    row = 0
    for r in rows:
        if not r.need_logits:
            continue
        if r.grammar is not None:
            r.grammar.fill_bitmask(bitmask, row)
        row += 1
    apply_token_bitmask(logits, bitmask)


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    accepted = accepted_length(draft_token_ids, token_ids)
    grammar.rollback(len(draft_token_ids) - accepted)
    for token in token_ids[accepted:]:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason
