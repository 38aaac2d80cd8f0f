from judge.registry import ENGINE_PARTS, Exercise

EXERCISE = Exercise(
    id=134,
    slug="spec-decode",
    title="Speculative decoding: verifying drafts and rolling back",
    difficulty="medium",
    practice_file="practice/spec_decode.py",
    reference="solutions.spec_decode",
    tests="judge.hidden.spec_decode",
    api={"verify_and_update": ("request", "draft_token_ids", "logits", "eos_token_id", "tokenizer")},
    statement="practice/exercises/134-spec-decode.md",
    case_timeout=30.0,
    # the end-to-end case runs the reference engine in the grader, calling the learner's verify_and_update
    part_references=ENGINE_PARTS,
    parts_run_by="its end-to-end case",
)
