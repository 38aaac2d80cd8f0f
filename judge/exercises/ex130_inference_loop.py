from judge.registry import ENGINE_PARTS, Exercise

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
    # the parts its cases run in the grader (judge/drivers/hosts.py)
    part_references=tuple(m for m in ENGINE_PARTS if m != "solutions.engine"),
)
