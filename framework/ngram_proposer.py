"""Prompt-lookup drafts: guess a request's next tokens from its own earlier text (n-gram speculation).

As vLLM's `NgramProposer.propose` (vllm/v1/spec_decode/ngram_proposer.py at b31e9326a7), the guess costs no
model: take the request's last n tokens, find where the same n tokens occurred before, and propose the tokens
that followed them there. Text that repeats itself (code, quoted passages, stories retold) is where it hits.

One deliberate difference: of the earlier occurrences of the longest matching n-gram, vLLM's
`_find_longest_matched_ngram_and_propose_tokens` takes the earliest, this proposer the most recent (where a passage
was retold several times with changes, the latest retelling is the likelier one to be continued). Both give the
same drafts when the longest n-gram occurred once before.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class NgramProposer:
    """Propose up to `num_speculative_tokens` drafts for a request from the most recent earlier occurrence of the
    longest n-gram that ends it, n from `prompt_lookup_max` down to `prompt_lookup_min` (a longer match is a surer
    one; vLLM takes the earliest occurrence instead, see the module's docstring)."""

    def __init__(self, num_speculative_tokens: int = 4, prompt_lookup_min: int = 2, prompt_lookup_max: int = 4
                 ) -> None:
        if not 1 <= prompt_lookup_min <= prompt_lookup_max or num_speculative_tokens < 1:
            raise ValueError(f"need num_speculative_tokens >= 1 and 1 <= prompt_lookup_min <= prompt_lookup_max, got "
                             f"{num_speculative_tokens}, {prompt_lookup_min}, {prompt_lookup_max}")
        self.k, self.min_n, self.max_n = num_speculative_tokens, prompt_lookup_min, prompt_lookup_max

    def propose(self, token_ids: Sequence[int]) -> list[int]:
        """The drafts that follow the request's tokens `token_ids`: [] when no n-gram of it occurred before."""
        tokens = np.asarray(token_ids, dtype=np.int64)
        last = len(tokens) - 1
        # Candidates: every earlier position holding the last token (where a match would end), then, one token
        # further back at a time, those whose preceding tokens still match. The last survivor of the longest
        # match (up to max_n) is the most recent occurrence of the longest n-gram.
        ends = np.flatnonzero(tokens[:last] == tokens[last])
        found, n = None, 1
        while len(ends):
            if n >= self.min_n:
                found = ends[-1]
            if n == self.max_n:
                break
            ends = ends[ends >= n]
            ends = ends[tokens[ends - n] == tokens[last - n]]
            n += 1
        return [] if found is None else tokens[found + 1: found + 1 + self.k].tolist()
