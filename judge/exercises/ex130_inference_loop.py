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
    # the parts whose calls its cases record in the grader, for the engine under test to replay
    part_references=tuple(m for m in ENGINE_PARTS if m != "solutions.engine"),
)
