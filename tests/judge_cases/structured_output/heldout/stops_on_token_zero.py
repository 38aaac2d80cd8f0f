# VIOLATES: Return "stop" if the grammar has ended, whatever the engine said; else return `finish_reason` as it is
"""Stops on token 0, the first vocabulary's end of sequence, instead of on the grammar's end."""
from framework.spec_decode import accepted_length
from framework.structured_output import apply_token_bitmask


def _fill_rows(grammar, drafts, bitmask, first):
    grammar.fill_bitmask(bitmask, first)
    for i, tok in enumerate(drafts):
        grammar.accept_token(tok)
        grammar.fill_bitmask(bitmask, first + 1 + i)


def apply_grammar_bitmask(logits, rows, bitmask):
    at = 0
    for r in rows:
        if not r.need_logits:
            continue
        drafts = list(r.draft_token_ids)
        if r.grammar is not None:
            _fill_rows(r.grammar, drafts, bitmask, at)
        at += 1 + len(drafts)
    apply_token_bitmask(logits, bitmask)


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    n_ok = accepted_length(list(draft_token_ids), list(token_ids))
    grammar.rollback(len(draft_token_ids) - n_ok)
    for tok in token_ids[n_ok:]:
        grammar.accept_token(tok)
    if token_ids and token_ids[-1] == 0:
        return "stop"
    return finish_reason
