from judge.registry import Exercise

EXERCISE = Exercise(
    id=128,
    slug="batch-layout",
    title="The batch layout of one mixed forward pass",
    difficulty="medium",
    practice_file="practice/batch.py",
    reference="solutions.batch",
    tests="judge.hidden.batch_layout",
    api={"build_batch": ("items", "block_size")},
    statement="practice/exercises/128-batch-layout.md",
)
