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
    # the learner's loop wraps an engine whose step and parts the grader runs (judge/drivers/hosts.py)
    part_references=ENGINE_PARTS,
    # the schedules whose replies are the same for every right loop (in the others, what a request got before an
    # abort, a close or a failing step depends on when the loop stepped)
    public_cases=("one request streams the offline engine's tokens",
                  "a stop string and max_tokens end their streams: finish_reason 'stop' and 'length'",
                  "many streams at once: each gets its own tokens",
                  "aborting a finished request does nothing; the idle loop wakes for the next request",
                  "a refused request raises at add_request; the loop serves on"),
)
