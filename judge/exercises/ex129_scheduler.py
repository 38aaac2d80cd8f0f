from judge.registry import Exercise

EXERCISE = Exercise(
    id=129,
    slug="scheduler",
    title="The scheduler: decodes, prefill chunks and new requests within a token budget",
    difficulty="medium",
    practice_file="practice/scheduler.py",
    reference="solutions.scheduler",
    tests="judge.hidden.scheduler",
    api={"Scheduler": ("kv_cache_manager",)},
    statement="practice/exercises/129-scheduler.md",
    case_timeout=10.0,
    # the parts its cases run in the grader (their calls sent to the worker as scripts: judge/hidden/lockstep.py)
    part_references=("solutions.kv_cache_manager", "solutions.block_pool", "solutions.prefix_cache",
                     "solutions.preemption"),
)
