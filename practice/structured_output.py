"""Exercise 136 — structured output: grammar masks in the flat batch.

Statement: practice/exercises/136-structured-output.md. Grade: `python practice/judge.py 136`.
The compiler, the matchers (`Grammar`) and the engine's plumbing are framework/structured_output.py; these two
functions run in every step of an engine with structured outputs.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.spec_decode import accepted_length  # noqa: F401
from framework.structured_output import Grammar, apply_token_bitmask  # noqa: F401


def apply_grammar_bitmask(logits: torch.Tensor, rows: Sequence, bitmask: torch.Tensor) -> None:
    """Mask the step's logits, in place, with each constrained request's grammar.

    `rows`: one entry per scheduled request, in batch order, with attributes `grammar` (a `Grammar`, or None for
    an unconstrained request), `need_logits` (whether it has logits rows this step) and `draft_token_ids` (its
    drafts, which its grammar accepts). `logits` is `[L, vocab]`: a request that needs logits has
    1 + len(draft_token_ids) consecutive rows, in the order of `rows`; one that does not has none.
    `bitmask` is int32 `[L, ceil(vocab / 32)]` with every token allowed.

    Fill each constrained request's rows of `bitmask` (`grammar.fill_bitmask(bitmask, row)`): its first row
    with its grammar as it is, row 1 + i after the grammar accepted draft i (`grammar.accept_token`; leave it
    advanced). Then apply the whole bitmask to `logits` in one call (`apply_token_bitmask`).
    """
    raise NotImplementedError("exercise 136: apply_grammar_bitmask is not implemented (practice/structured_output.py)")


def update_grammar(grammar: Grammar, draft_token_ids: list[int], token_ids: list[int],
                   finish_reason: str | None) -> str | None:
    """Bring the request's grammar up to date after the step, and say whether the request ends.

    The grammar went through all of `draft_token_ids` in `apply_grammar_bitmask`; the step emitted `token_ids`
    (the drafts it accepted, then at most one more token). Roll the grammar back by the drafts that were
    rejected (`grammar.rollback(n)`), accept the emitted tokens it has not accepted yet, and return "stop" if the
    grammar has ended (`grammar.is_terminated()`), else `finish_reason` (the engine's: None to go on).
    """
    raise NotImplementedError("exercise 136: update_grammar is not implemented yet (practice/structured_output.py)")
