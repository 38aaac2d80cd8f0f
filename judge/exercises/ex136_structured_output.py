from judge.registry import Exercise

EXERCISE = Exercise(
    id=136,
    slug="structured-output",
    title="Structured output: grammar masks in the flat batch",
    difficulty="medium",
    practice_file="practice/structured_output.py",
    reference="solutions.structured_output",
    tests="judge.hidden.structured_output",
    api={"apply_grammar_bitmask": ("logits", "rows", "bitmask"),
         "update_grammar": ("grammar", "draft_token_ids", "token_ids", "finish_reason")},
    statement="practice/exercises/136-structured-output.md",
    case_timeout=30.0,
)
