from judge.registry import Exercise

EXERCISE = Exercise(
    id=132,
    slug="prefix-caching",
    title="Prefix caching: chained block hashes and the hash-to-block map",
    difficulty="medium",
    practice_file="practice/prefix_cache.py",
    reference="solutions.prefix_cache",
    tests="judge.hidden.prefix_caching",
    api={"hash_block": ("parent_hash", "token_ids"), "block_hashes": ("token_ids", "block_size"),
         "PrefixCache": ()},
    statement="practice/exercises/132-prefix-caching.md",
    case_timeout=30.0,
)
