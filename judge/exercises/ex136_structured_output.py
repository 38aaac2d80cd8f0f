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
    public_cases=("the worked example", "one constrained request, no drafts",
                  "drafted rows: row i after the request's first i drafts",
                  "the update: a draft run rejected mid-way rolls back",
                  "the finish rule: 'stop' when the grammar ends, else the engine's reason"),
)
