from judge.registry import Exercise

EXERCISE = Exercise(
    id=125,
    slug="block-pool",
    title="The block pool: allocate, share and free KV-cache blocks",
    difficulty="easy",
    practice_file="practice/block_pool.py",
    reference="solutions.block_pool",
    tests="judge.hidden.block_pool",
    api={"BlockPool": ("num_blocks",)},
    statement="practice/exercises/125-block-pool.md",
)
