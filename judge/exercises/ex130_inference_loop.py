"""Exercise 130 metadata (see judge/README.md)."""
from judge.registry import Exercise

EXERCISE = Exercise(
    id=130,
    slug="inference-loop",
    title="The inference loop: step and generate",
    difficulty="medium",
    practice_file="practice/engine.py",
    reference="solutions.engine",
    tests="judge.hidden.inference_loop",
    api={"LLMEngine": ("model",)},
    statement="practice/exercises/130-inference-loop.md",
    case_timeout=60.0,
    grading="inworker",  # not split yet: see judge/README.md
)
