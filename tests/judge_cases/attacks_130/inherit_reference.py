"""Attack on 130: the reference engine under the learner's name (step and generate inherited)."""

from solutions.engine import LLMEngine  # noqa: F401
