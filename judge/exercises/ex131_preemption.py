"""Exercise 131 metadata (see judge/README.md)."""
from judge.registry import Exercise

EXERCISE = Exercise(
    id=131,
    slug="preemption",
    title="When memory runs out: preemption by recomputation",
    difficulty="medium",
    practice_file="practice/preemption.py",
    reference="solutions.preemption",
    tests="judge.hidden.preemption",
    api={"preempt": ("scheduler", "request"), "allocate_or_preempt": ("scheduler", "request", "num_new_tokens", "out")},
    statement="practice/exercises/131-preemption.md",
    case_timeout=10.0,
    grading="inworker",  # not split yet: see judge/README.md
)
