"""Right: the update rolls the grammar back over every draft and has it accept every emitted token (vLLM's
order); the mask walks the rows with a SimpleNamespace of counters.

"""

from types import SimpleNamespace

from framework.structured_output import apply_token_bitmask


def apply_grammar_bitmask(logits, rows, bitmask):
    at = SimpleNamespace(row=0)
    for r in rows:
        if not r.need_logits:
            continue
        grammar = r.grammar
        if grammar is not None:
            grammar.fill_bitmask(bitmask, at.row)
        at.row += 1
        for draft in r.draft_token_ids:
            if grammar is not None:
                grammar.accept_token(draft)
                grammar.fill_bitmask(bitmask, at.row)
            at.row += 1
    apply_token_bitmask(logits, bitmask)


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    grammar.rollback(len(draft_token_ids))
    for token in token_ids:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason
