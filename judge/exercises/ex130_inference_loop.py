"""Exercise 130 metadata (see judge/README.md)."""
from judge.registry import Exercise

EXERCISE = Exercise(
    id=130,
    slug="inference-loop",
    title="The inference loop: step and generate",
    difficulty="medium",
    practice_file="practice/engine.py",
    reference="solutions.engine",
    tests="judge.hidden.inference_loop",
    api={"LLMEngine": ("model",)},
    statement="practice/exercises/130-inference-loop.md",
    case_timeout=60.0,
    # the parts its cases run in the grader (judge/drivers/hosts.py)
    part_references=("solutions.scheduler", "solutions.kv_cache_manager", "solutions.model_runner",
                     "solutions.block_pool", "solutions.prefix_cache", "solutions.preemption", "solutions.batch",
                     "solutions.paged_attention", "solutions.paged_kv_cache"),
    public_cases=(
        "one request: step by step",
        "several requests share each forward pass",
        "max_tokens respected exactly (different per request)",
        "chunked prefill: a prompt chunk samples nothing, step returns no output for it",
        "rows of logits: the j-th row is the j-th item that needs logits",
        "continuous batching: a waiting request starts as soon as a slot frees",
        "seeded sampling uses each request's own generator",
        "stop strings (through the tokenizer)",
    ),
)
