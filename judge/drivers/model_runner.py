"""Driver of the end-to-end cases of exercises 126 and 127: the framework's model runner with the learner's
write_kv or paged_attention plugged in, run beside the learner's code on a real multi-layer paged cache, the other
pieces of the step run by the grader. Returns the logits of each engine step."""

from __future__ import annotations

from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from judge import wire
from judge.drivers import OPENER, host_call, learner_error, load_model


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
    Returns {"logits": [one float tensor per step]}, or the learner's error and the engine step it happened in.
    The pieces the learner does not write here (the batch layout, and write_kv or paged_attention) run in the
    grader (judge/drivers/hosts.py, KernelHost); the cache and its layer views are the worker's own."""
    from framework.model_runner import ModelRunnerBase

    host = host_call(OPENER, "kernels")
    pieces = {"build_batch": partial(_build_batch, host), "write_kv": partial(_write_kv, host),
              "paged_attention": partial(_paged_attention, host), name: getattr(impl, name)}
    runner_cls = type("ModelRunner", (ModelRunnerBase,), {k: staticmethod(f) for k, f in pieces.items()})
    runner = runner_cls(small_model(model_path), num_blocks=num_blocks, block_size=block_size)
    out = []
    for i, items in enumerate(steps, 1):
        try:
            logits = runner.execute_model([(list(t), s, list(tb), bool(n)) for t, s, tb, n in items])
        except Exception as exc:  # noqa: BLE001
            return {"engine step": i, "error": learner_error(exc)}
        out.append(logits.detach().float().cpu())
    return {"logits": out}


def _build_batch(host: int, items: list, block_size: int) -> SimpleNamespace:
    plain = [[list(t), int(s), list(tb), bool(n)] for t, s, tb, n in items]
    fields = host_call(host, "build_batch", plain, block_size)
    return SimpleNamespace(**{k: wire.decode(v) for k, v in fields.items()})


def _write_kv(host: int, key_cache, value_cache, key, value, slot_mapping) -> None:
    kc, vc = host_call(host, "write_kv", *(wire.encode(t) for t in (key_cache, value_cache, key, value, slot_mapping)))
    key_cache.copy_(wire.decode(kc))  # into the worker's own layer views, in place
    value_cache.copy_(wire.decode(vc))


def _paged_attention(host: int, query, key_cache, value_cache, query_start_loc, seq_lens, block_tables):
    tensors = [wire.encode(torch.as_tensor(t)) for t in (query, key_cache, value_cache, query_start_loc, seq_lens)]
    return wire.decode(host_call(host, "paged_attention", *tensors, [list(t) for t in block_tables]))
