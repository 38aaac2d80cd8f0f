"""Driver of the end-to-end cases of exercises 126 and 127: the chapters' model runner with the learner's write_kv
or paged_attention plugged in, run beside the learner's code on a real multi-layer paged cache. Returns the
logits of each engine step; the grader compares them with the model run on each request alone."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from judge.drivers import learner_error, load_model


def small_model(model_path: str | None = None):
    """The checkpoint given (--model), else a small random Qwen3 (GQA, seeded, the same in every process): the
    end-to-end check is about layout."""
    from mini_llm.config import Qwen3Config
    from mini_llm.model import Transformer

    if model_path:
        return load_model(model_path)
    torch.manual_seed(127)
    cfg = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return Transformer(cfg).eval()


def run_steps(impl: ModuleType, name: str, steps: list, num_blocks: int, block_size: int,
              model_path: str | None) -> dict[str, Any]:
    """`steps`: per engine step, the items of ModelRunner.execute_model (tokens, start, block table, need_logits).
    Returns {"logits": [one float tensor per step]}, or the learner's error and the engine step it happened in."""
    import course
    from solutions.batch import build_batch
    from solutions.paged_kv_cache import write_kv

    pieces = {"build_batch": build_batch, "write_kv": write_kv, "paged_attention": None, name: getattr(impl, name)}
    runner = course.runner_class(**pieces)(small_model(model_path), num_blocks=num_blocks, block_size=block_size)
    out = []
    for i, items in enumerate(steps, 1):
        try:
            logits = runner.execute_model([(list(t), s, list(tb), bool(n)) for t, s, tb, n in items])
        except Exception as exc:  # noqa: BLE001
            return {"engine step": i, "error": learner_error(exc)}
        out.append(logits.detach().float().cpu())
    return {"logits": out}
