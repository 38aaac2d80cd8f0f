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
    public_cases=(
        "the worked example",
        "a new pool: all blocks free, handed out in order 0, 1, 2, ...",
        "allocate is all or nothing (NoFreeBlocksError changes nothing)",
        "freed blocks go to the back of the queue (LRU reuse)",
        "double free is a ValueError and changes nothing",
        "ids out of range are a ValueError and change nothing",
        "shared blocks: incref adds an owner, free drops one",
        "incref of a free block takes it out of the free queue",
    ),
)
