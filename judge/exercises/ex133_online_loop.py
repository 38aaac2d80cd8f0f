from judge.registry import ENGINE_PARTS, Exercise

EXERCISE = Exercise(
    id=133,
    slug="online-loop",
    title="The online loop: requests arriving at any time, streamed",
    difficulty="medium",
    practice_file="practice/async_engine.py",
    reference="solutions.async_engine",
    tests="judge.hidden.online_loop",
    api={"AsyncLLM": ("engine",)},
    statement="practice/exercises/133-online-loop.md",
    case_timeout=30.0,
    # the learner's loop wraps an engine replaying what the reference engine generates, run in the grader
    part_references=ENGINE_PARTS,
)
