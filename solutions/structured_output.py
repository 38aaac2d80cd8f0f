"""Structured output (exercise 136): each step's grammar masks over the sampled logits rows, and each request's
matcher advanced, finished and rolled back after the step. The compiler, the matchers and the engine's plumbing
are framework/structured_output.py; `LLM` is the reference engine with structured outputs.

The shapes follow vLLM: one bitmask row per sampled row, filled by the matchers and applied in one call before
the sampler (`StructuredOutputManager.grammar_bitmask` in vllm/v1/structured_output/__init__.py at b31e9326a7d9).
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.engine import LLMBase
from framework.spec_decode import accepted_length
from framework.structured_output import Grammar, apply_token_bitmask, structured_engine

from .engine import LLMEngine


def apply_grammar_bitmask(logits: torch.Tensor, rows: Sequence, bitmask: torch.Tensor) -> None:
    """Mask `logits` in place: the rows of each constrained request get its grammar's allowed tokens, row i of a
    drafted one those after its first i drafts (its matcher advances through them); one call applies them all."""
    row = 0
    for r in rows:
        if not r.need_logits:  # a chunk of a prompt: no logits row this step
            continue
        if r.grammar is not None:
            r.grammar.fill_bitmask(bitmask, row)
            for i, draft in enumerate(r.draft_token_ids):
                r.grammar.accept_token(draft)  # the scheduler cut the drafts the grammar forbids
                r.grammar.fill_bitmask(bitmask, row + 1 + i)
        row += 1 + len(r.draft_token_ids)
    apply_token_bitmask(logits, bitmask)


def update_grammar(grammar: Grammar, draft_token_ids: list[int], token_ids: list[int],
                   finish_reason: str | None) -> str | None:
    """After the step emitted `token_ids`: roll back the drafts the matcher went through but the verification
    rejected, accept the tokens after the accepted drafts; "stop" once the grammar has ended, else
    `finish_reason` (the engine's)."""
    accepted = accepted_length(draft_token_ids, token_ids)
    grammar.rollback(len(draft_token_ids) - accepted)
    for token in token_ids[accepted:]:
        grammar.accept_token(token)
    return "stop" if grammar.is_terminated() else finish_reason


class StructuredLLMEngine(structured_engine(LLMEngine, apply_grammar_bitmask, update_grammar)):
    """The reference engine with structured outputs."""


class LLM(LLMBase):
    """`LLM().generate(prompts, SamplingParams(structured_outputs=StructuredOutputsParams(json=schema)))`."""

    engine_cls = StructuredLLMEngine
