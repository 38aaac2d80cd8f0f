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
    public_cases=(
        "preempt: back to the head of the queue, blocks freed, outputs kept",
        "allocate_or_preempt: enough free blocks, nobody preempted",
        "allocate_or_preempt: the most recently admitted request is the victim",
        "allocate_or_preempt: several victims until the blocks fit",
        "allocate_or_preempt: a victim already scheduled this step leaves out.scheduled",
        "allocate_or_preempt: the request is its own victim, returns False",
    ),
)
