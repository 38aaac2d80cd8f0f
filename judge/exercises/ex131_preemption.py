from judge.registry import ENGINE_PARTS, Exercise

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
    # the parts its cases run in the grader (their calls sent to the worker as scripts: judge/hidden/lockstep.py)
    part_references=tuple(m for m in ENGINE_PARTS if m != "solutions.preemption"),
)
