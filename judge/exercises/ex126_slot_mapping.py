from judge.registry import Exercise

EXERCISE = Exercise(
    id=126,
    slug="slot-mapping",
    title="Slot mapping: where each token's K and V live in the paged cache",
    difficulty="easy",
    practice_file="practice/paged_kv_cache.py",
    reference="solutions.paged_kv_cache",
    tests="judge.hidden.slot_mapping",
    api={"compute_slot_mapping": ("block_table", "start", "end", "block_size"),
         "write_kv": ("key_cache", "value_cache", "key", "value", "slot_mapping")},
    statement="practice/exercises/126-slot-mapping.md",
    # the pieces of its end-to-end case the grader runs around the learner's kernel (judge/hidden/end_to_end.py)
    part_references=("solutions.batch", "solutions.paged_attention"),
    parts_run_by="its end-to-end case",
)
