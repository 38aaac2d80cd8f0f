"""Attack on 136: nothing written. The driver's mask and decode are replaced at import by ones that report no rows
and no requests; a grader that zipped them with its own compared nothing (seven cases passed)."""

import judge.drivers.structured_output as driver


def apply_grammar_bitmask(logits, rows, bitmask):
    raise NotImplementedError


def update_grammar(grammar, draft_token_ids, token_ids, finish_reason):
    raise NotImplementedError


driver.mask = lambda impl, rows, logits: {"masked": [], "changed": [], "states": [], "returned": None}
driver.decode = lambda impl, requests, seed, max_steps=40: {"outputs": []}
