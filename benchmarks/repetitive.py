"""A workload where prompt lookup hits: the model retells a passage it is shown (`--workload repetitive`).

Each prompt is the beginning of a story from the course's generator (scripts/story_generator.py), the
continuation the model itself writes for it (greedy, `output_len` tokens, by `engine_cls`: the benchmark and the
tests pass the reference, chapter 11 the engine it runs, so that a student edition, which ships this module but no
reference, makes the same prompts on the student's engine), the end-of-text token, and the same beginning again.
The model then tends to write the same continuation a second time: the text to produce is in the prompt, as when
a model edits a document, quotes its sources or rewrites code. A story of the generator's own would not do: the
embedded model has learnt stories like it, not that one, and tells its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from framework.sampling import SamplingParams
from framework.engine import EngineConfig

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def story_beginnings(num_stories: int, seed: int) -> list[str]:
    """The first quarter of each of `num_stories` generated stories, cut before a space (a prompt ending in a
    space is one the model never saw in training: the space is a word's first character)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import story_generator
    finally:
        sys.path.pop(0)
    stories = story_generator.generate_stories(num_stories, seed)
    return [s[: max(s.rfind(" ", 0, len(s) // 4), 1)] for s in stories]


def repetitive_prompts(model, tokenizer, num_requests: int, seed: int, output_lens: tuple[int, int], *,
                       engine_cls: type) -> tuple[list[list[int]], list[int]]:
    """Prompts (beginning, the model's continuation, end of text, beginning) and the drawn output lengths."""
    lens = np.random.default_rng(seed).integers(output_lens[0], output_lens[1] + 1, num_requests).tolist()
    beginnings = [tokenizer.encode(text) for text in story_beginnings(num_requests, seed)]
    engine = engine_cls(model, EngineConfig(num_blocks=4096, token_budget=1024, max_num_seqs=num_requests))
    written = engine.generate(beginnings, [SamplingParams(max_tokens=n, ignore_eos=True) for n in lens])
    eos = tokenizer.encode(tokenizer.eos_token or "<|endoftext|>")
    prompts = [b + w.outputs[0].token_ids + eos + b for b, w in zip(beginnings, written)]
    return prompts, lens
