from judge.registry import Exercise

EXERCISE = Exercise(
    id=135,
    slug="tensor-parallel",
    title="Shard the layer: tensor parallelism's weight slices and all-reduce points",
    difficulty="medium",
    practice_file="practice/tensor_parallel.py",
    reference="solutions.tensor_parallel",
    tests="judge.hidden.tensor_parallel",
    api={"shard_layer": ("weights", "rank", "world_size", "num_heads", "num_kv_heads"),
         "layer_forward": ("shard", "x", "positions", "cfg", "world_size", "all_reduce")},
    statement="practice/exercises/135-tensor-parallel.md",
    case_timeout=30.0,
)
