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
    # the parts its cases run in the grader (judge/drivers/hosts.py)
    part_references=("solutions.kv_cache_manager", "solutions.block_pool", "solutions.prefix_cache",
                     "solutions.preemption"),
    public_cases=(
        "one request: a prompt that fits, then its decodes",
        "decodes first, then prefill chunks, then new requests",
        "the budget left after decodes limits a running prefill chunk",
        "without chunked prefill a prompt that does not fit waits, and so do later ones",
        "max_num_seqs caps the running requests",
        "prefix-cache hits are not recomputed",
        "blocks run out: admission stops",
        "preemption: a skipped victim, its tokens back in the budget, no admission that step",
    ),
)
