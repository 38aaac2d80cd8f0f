"""Exercise 130 — the inference loop.

Statement: practice/exercises/130-inference-loop.md. Grade: `python practice/judge.py 130`.
The engine's shell, `framework.engine.LLMEngineBase`, builds the scheduler, KV-cache manager and model runner
(from practice/, so your other exercises run here too) and adds requests; you write `step` and `generate`.
"""

from __future__ import annotations

from typing import Sequence

from framework.engine import LLMBase, LLMEngineBase, RequestOutput, stop_reason  # noqa: F401
from framework.sampling import SamplingParams, sample_token  # noqa: F401

from .kv_cache_manager import KVCacheManager
from .model_runner import ModelRunner
from .scheduler import Scheduler


class LLMEngine(LLMEngineBase):
    """State you can use: `self.scheduler` (`schedule()`, `finish(request, reason)`,
    `has_unfinished_requests()`), `self.runner` (`execute_model(items)`: logits [L, vocab] for the items whose
    need_logits is true, in order), `self.eos_token_id`, `self.tokenizer`, `self.add_request(prompt_ids, params)`,
    `self.add_requests(prompts, params)`, `self.make_output(request, new_token_ids)`; helpers `sample_token`
    and `stop_reason` (imported above). Optional, not graded: `self.fail_step(requests, error)` and
    `self.abort_requests(requests, reason)`, for an engine that survives a failing step (see the statement)."""

    scheduler_cls = Scheduler
    runner_cls = ModelRunner
    kv_cache_manager_cls = KVCacheManager

    def step(self) -> list[RequestOutput]:
        """One iteration of the loop; returns one RequestOutput per request that received a token.

        1. `sched = self.scheduler.schedule()`; if nothing is scheduled, return [].
        2. One item per scheduled request, in order: (its next `num_new_tokens` token ids starting at
           `num_computed_tokens` in `request.all_token_ids`, `num_computed_tokens`, `block_table`,
           need_logits), where need_logits is true when this step computes its last pending token
           (`ScheduledRequest.completes_prompt`). ONE call to `self.runner.execute_model(items)`.
        3. Every scheduled request: `num_computed_tokens += num_new_tokens`. Each request whose item needed
           logits takes the next row of logits, samples with `sample_token(row, request.sampling_params,
           request.generator)` and appends the token to `request.output_token_ids`; a prompt chunk that is not
           the last samples nothing.
        4. If `stop_reason(request, self.eos_token_id, self.tokenizer)` returns a reason, call
           `self.scheduler.finish(request, reason)` (which frees its blocks), the finished requests in order.
        5. Return `self.make_output(request, [token])` for each request that got a token, in order.
        """
        raise NotImplementedError("exercise 130: LLMEngine.step is not implemented yet (practice/engine.py)")

    def generate(self, prompts: Sequence[list[int]], params=None) -> list[RequestOutput]:
        """Add every prompt (token ids) with `self.add_requests(prompts, params)`, step until no request is
        unfinished, and return one final output per prompt, in prompt order (`self.make_output(request, [])`)."""
        raise NotImplementedError("exercise 130: LLMEngine.generate is not implemented yet (practice/engine.py)")


class LLM(LLMBase):
    """Text in, text out, on your engine: `LLM().generate(["Once upon a time"], SamplingParams(max_tokens=40))`."""

    engine_cls = LLMEngine
