"""The end-to-end references: the model of the end-to-end cases (the embedded checkpoint in fp32, or --model),
each request's greedy continuation generated alone, random prompts from the secret seed, the engine steps of
126-128's end-to-end cases, 126/127's check of the learner's write_kv or paged_attention inside the framework's
model runner. Grader side only.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import mini_llm
import torch
from framework.engine import stop_reason
from framework.kv_cache_manager import blocks_needed
from framework.request import Request
from judge.drivers import load_model as load_checkpoint
from judge.harness import CaseFailure, option, rng as seeded
from judge.remote import Driver, learner_failure
from framework.sampling import SamplingParams


def load_model():
    """The model of the end-to-end cases: the checkpoint given with --model, else the embedded one (fp32, CPU)."""
    path = option("model")
    try:
        return load_checkpoint(path)
    except Exception as exc:  # noqa: BLE001 - a course setup problem, not the learner's
        raise CaseFailure(f"could not load the model at {path or 'the embedded checkpoint'} (a course setup "
                          f"problem, not your code): {exc}", kind="error") from None


@functools.lru_cache(maxsize=256)
def _alone(model, prompt: tuple[int, ...], max_tokens: int, eos: int | None) -> tuple[int, ...]:
    return tuple(mini_llm.generate(model, list(prompt), max_tokens, eos_token_id=eos))


def alone(model, prompt: Sequence[int], params: SamplingParams, eos: int | None, tokenizer: Any = None) -> list[int]:
    """The greedy continuation of `prompt` generated alone, stopping as the engine must (`expected_reason`; a stop
    string only when there is a tokenizer to see it)."""
    tokens = list(_alone(model, tuple(prompt), params.max_tokens, None if params.ignore_eos else eos))
    end = next((n for n in range(1, len(tokens)) if expected_reason(tokens[:n], params, None, tokenizer)), len(tokens))
    return tokens[:end]


def expected_reason(tokens: list[int], params: SamplingParams, eos: int | None, tokenizer: Any = None) -> str | None:
    """Why a request whose output tokens are `tokens` is done, or None: framework.engine.stop_reason's answer, the
    rule the statements tell the engine to call after each token."""
    return stop_reason(Request([0], params, output_token_ids=list(tokens)), eos, tokenizer)


def random_prompts(model, seed: int, lengths: Sequence[int]) -> list[list[int]]:
    rng = seeded(seed)
    return [[rng.randrange(model.cfg.vocab_size) for _ in range(n)] for n in lengths]


# ----------------------------------------------------------------------------------------------------------
# End to end for 126 and 127: the learner's write_kv or paged_attention inside the reference ModelRunner


def engine_steps(seed: int, vocab: int, prompts: dict[str, int], plans: list[list[tuple[str, int, bool]]],
                 block_size: int, num_blocks: int, spare: int) -> tuple[list[list[tuple[str, tuple]]], dict]:
    """The items of each engine step of `plans` (per step: request, new tokens, need_logits), labelled by request,
    and each request's tokens: random prompts of the given lengths in shuffled blocks with room for `spare` more
    tokens; a request that has computed all its tokens decodes one more in the next step."""
    rng = seeded(seed)
    pool = list(range(num_blocks))
    rng.shuffle(pool)
    seqs = {r: [rng.randrange(vocab) for _ in range(n)] for r, n in prompts.items()}
    tables = {r: [pool.pop() for _ in range(blocks_needed(len(s) + spare, block_size))] for r, s in seqs.items()}
    done = dict.fromkeys(seqs, 0)  # tokens of each request already in the cache
    steps = []
    for step, plan in enumerate(plans, 1):
        steps.append([(r, (seqs[r][done[r]: done[r] + n], done[r], tables[r], need)) for r, n, need in plan])
        for r, n, _ in plan:
            done[r] += n
        for r in seqs:
            if step < len(plans) and done[r] == len(seqs[r]):
                seqs[r].append(rng.randrange(vocab))
    return steps, seqs


def alone_logits(model, tokens: list[int]) -> torch.Tensor:
    """The logits of the last of `tokens`, the model run on them alone."""
    with torch.inference_mode():
        return model(torch.tensor([tokens]))[0, -1].float()


def small_model(model_path: str | None = None):
    """The checkpoint given (--model), else a small random Qwen3 (GQA, seeded): the end-to-end check is about
    layout."""
    from mini_llm.config import Qwen3Config
    from mini_llm.model import Transformer

    if model_path:
        return load_model()
    torch.manual_seed(127)
    cfg = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return Transformer(cfg).eval()


class _KernelRaised(Exception):
    """The learner's kernel raised (or returned what cannot be used) inside the grader's model runner."""

    def __init__(self, error: dict) -> None:
        super().__init__(str(error.get("message")))
        self.error = error


def _learner_kernels(impl, runner: Any) -> dict[str, Any]:
    """write_kv and paged_attention as the grader's model runner calls them, each an ordinary driver call of the
    learner's code in the worker on one layer of the runner's whole multi-layer cache (so that a write through the
    wrong view shows), the caches copied back after a write."""
    def layer_of(cache: torch.Tensor) -> int:
        whole = runner.kv_cache.key_caches
        return next(i for i in range(len(whole)) if whole[i].data_ptr() == cache.data_ptr())

    def write_kv(key_cache, value_cache, key, value, slot_mapping) -> None:
        cache = runner.kv_cache
        got = Driver(impl, "paged_kv_cache").write_layer(cache.key_caches.cpu(), cache.value_caches.cpu(),
                                                         layer_of(key_cache), key.cpu(), value.cpu(),
                                                         slot_mapping.cpu())
        if "error" in got:
            raise _KernelRaised(got["error"])
        cache.key_caches.copy_(got["key_caches"])
        cache.value_caches.copy_(got["value_caches"])

    def paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables):
        cache = runner.kv_cache
        got = Driver(impl, "paged_attention").attend_layer(
            query.cpu(), cache.key_caches.cpu(), cache.value_caches.cpu(), layer_of(key_cache),
            query_start_loc.cpu(), seq_lens.cpu(), [list(t) for t in block_tables])
        if "error" in got:
            raise _KernelRaised(got["error"])
        return got["output"].to(query.device)

    return {"write_kv": write_kv, "paged_attention": paged_attention}


def end_to_end(impl, name: str) -> None:
    """Three engine steps (prefills, a chunked prefill, decodes) through the framework's model runner, run here on
    the references, with the learner's `name` (write_kv or paged_attention) called in the worker for every layer
    (judge/drivers/paged_kv_cache.py, paged_attention.py); each request's last logits must equal running the model
    on it alone."""
    from framework.model_runner import ModelRunnerBase, runner_class
    from solutions.batch import build_batch
    from solutions.paged_attention import paged_attention
    from solutions.paged_kv_cache import write_kv

    bs, num_blocks = 4, 40
    model = small_model(option("model"))
    plans = [[("A", 11, True), ("B", 9, False)], [("B", 13, True), ("C", 5, True), ("A", 1, True)],
             [("C", 1, True), ("A", 1, True), ("B", 1, True)]]
    steps, seqs = engine_steps(126, model.cfg.vocab_size, {"A": 11, "B": 22, "C": 5}, plans, bs, num_blocks, spare=3)
    texts = [f"engine step {i} of {len(plans)}, block_size {bs}: " + ", ".join(
        f"request {r}: {len(tokens)} new tokens after {nc} cached" for r, (tokens, nc, _, _) in step)
        for i, step in enumerate(steps, 1)]
    pieces = {"build_batch": build_batch, "write_kv": write_kv, "paged_attention": paged_attention}
    runner = runner_class(ModelRunnerBase, **pieces)(model, num_blocks=num_blocks, block_size=bs)
    setattr(runner, name, _learner_kernels(impl, runner)[name])
    for step, text in zip(steps, texts):
        try:
            logits = runner.execute_model([it for _, it in step])
        except _KernelRaised as exc:
            raise learner_failure(exc.error, name, text) from None
        for row, (r, (tokens, nc, _, _)) in zip(logits, [(r, it) for r, it in step if it[3]]):
            err = (row - alone_logits(model, seqs[r][: nc + len(tokens)])).abs().max().item()
            if not err <= 1e-4:
                raise CaseFailure(f"the model's logits for request {r} differ from running it alone by {err:.3g} "
                                  "(tolerance 1e-4)", input=text,
                                  hint=f"your {name} passes the cases above? then check what differs in the engine: "
                                       "several layers, requests of different lengths, non-contiguous views")
