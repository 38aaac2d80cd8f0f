"""Wrong: the engine's "stop" (a stop string, say) is dropped while the grammar goes on; only "length" is passed on.

EXPECT: wrong finish reason
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
            for i, draft in enumerate(r.draft_token_ids):
                r.grammar.accept_token(draft)
                r.grammar.fill_bitmask(bitmask, row + 1 + i)
        row += 1 + len(r.draft_token_ids)
    apply_token_bitmask(logits, bitmask)


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    accepted = accepted_length(draft_token_ids, token_ids)
    grammar.rollback(len(draft_token_ids) - accepted)
    for token in token_ids[accepted:]:
        grammar.accept_token(token)
    if grammar.is_terminated():
        return "stop"
    return "length" if finish_reason == "length" else None  # the grammar, not a stop string, ends the output
