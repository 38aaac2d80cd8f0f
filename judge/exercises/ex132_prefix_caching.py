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
    public_cases=("hash_block: an int, deterministic, depends on the parent and on the tokens in order",
                  "block_hashes: one chained hash per full block, from NONE_HASH",
                  "PrefixCache.lookup: the longest cached prefix, stopping at the first miss",
                  "PrefixCache.insert: the first holder wins", "PrefixCache.evict: the block is forgotten both ways"),
)
