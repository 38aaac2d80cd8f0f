"""The standard prompts every chapter and test uses with the embedded tiny model.

They sit in the training domain of `mini_llm/models/tiny-qwen3` (short children's stories), so its greedy
continuations read as English. Larger checkpoints (MINI_LLM_MODEL) continue them just as well.
"""

from __future__ import annotations

STANDARD_PROMPTS: list[str] = [
    "Once upon a time, a little fox",
    "One sunny morning, a girl named Lily",
    "The old wizard opened the door and",
    "In a small village by the sea,",
    "Tom found a shiny key",
    "The little robot wanted to",
]
