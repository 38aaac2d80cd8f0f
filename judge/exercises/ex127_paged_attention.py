from judge.registry import Exercise

EXERCISE = Exercise(
    id=127,
    slug="paged-attention",
    title="Paged attention over a flat batch of prefills, chunks and decodes",
    difficulty="hard",
    practice_file="practice/paged_attention.py",
    reference="solutions.paged_attention",
    tests="judge.hidden.paged_attention",
    api={"paged_attention": ("query", "key_cache", "value_cache", "query_start_loc", "seq_lens", "block_tables")},
    statement="practice/exercises/127-paged-attention.md",
    # the pieces of its end-to-end case the grader runs around the learner's kernel (judge/hidden/end_to_end.py)
    part_references=("solutions.batch", "solutions.paged_kv_cache"),
    parts_run_by="its end-to-end case",
)
