"""Wrong: no roll-back: the grammar keeps the rejected drafts and then accepts the token emitted in their place.

EXPECT: the grammar is not where it should be after update_grammar
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
    for token in token_ids[accepted:]:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason
