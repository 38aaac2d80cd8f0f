"""The inference loop (exercise 130): schedule, run the model on the mixed batch, sample, update, repeat.

`LLMEngine.step` is one iteration; `LLM.generate` is the offline entry point in the shape of vLLM's
`LLM.generate(prompts, sampling_params)` (vllm/entrypoints/llm.py; the loop is `LLMEngine.step` in
vllm/v1/engine/llm_engine.py, with `EngineCore.step` in vllm/v1/engine/core.py). The rest of the engine (adding
requests, outputs, stop conditions) is the shell in framework/engine.py.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.engine import (  # noqa: F401  (re-exported: the engine's public names)
    CompletionOutput, EngineConfig, LLMBase, LLMEngineBase, RequestOutput, StepError, stop_reason)
from framework.sampling import SamplingParams, sample_request_token
from framework.scheduler import SchedulerOutput

from .kv_cache_manager import KVCacheManager
from .model_runner import ModelRunner
from .scheduler import Scheduler


class LLMEngine(LLMEngineBase):
    """The reference engine: the reference scheduler, KV-cache manager and model runner, and the loop."""

    scheduler_cls = Scheduler
    runner_cls = ModelRunner
    kv_cache_manager_cls = KVCacheManager
    samples_with_history = True  # it samples with sample_request_token

    def step(self) -> list[RequestOutput]:
        """One iteration: schedule, one forward pass, sample, update; outputs for requests that got a token.

        If the forward pass or the sampling raises (or is interrupted), the requests of this step are finished
        with reason "error" and their blocks freed (`fail_step`), and a `StepError` naming them is raised, once:
        the engine goes on serving the others, instead of failing the same way at every later step."""
        sched = self.scheduler.schedule()
        if not sched:
            return []
        items = [(s.request.all_token_ids[s.request.num_computed_tokens:
                                          s.request.num_computed_tokens + s.num_new_tokens],
                  s.request.num_computed_tokens, s.request.block_table, s.completes_prompt) for s in sched.scheduled]
        try:
            logits = self.runner.execute_model(items)
            return self.update_from_output(sched, logits)
        except BaseException as error:
            failure = self.fail_step([s.request for s in sched.scheduled], error)
            if isinstance(error, Exception):  # an interrupt (Ctrl-C) stays itself
                raise failure from error
            raise

    def update_from_output(self, sched: SchedulerOutput, logits: torch.Tensor) -> list[RequestOutput]:
        """Advance each scheduled request; sample one token for each whose pending tokens are now all computed
        (row j of `logits` belongs to the j-th such request); retire finished ones, freeing their blocks."""
        outputs, row = [], 0
        greedy = logits.argmax(-1).tolist()  # one device-to-host copy for all greedy requests, not one each
        for s in sched.scheduled:
            request, sampled = s.request, s.completes_prompt
            request.num_computed_tokens += s.num_new_tokens
            if not sampled:  # a chunk of a prompt: no token yet
                continue
            params = request.sampling_params
            token = greedy[row] if params.temperature == 0 and not params.history_fields() \
                else sample_request_token(logits[row], request, self.eos_token_id)
            row += 1
            request.output_token_ids.append(token)
            reason = stop_reason(request, self.eos_token_id, self.tokenizer)
            if reason:
                self.scheduler.finish(request, reason)
            outputs.append(self.make_output(request, [token]))
        return outputs

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Run the prompts (token ids) to completion; one final output per prompt, in order. If a step fails
        (or the run is interrupted), the prompts' requests are aborted before the exception goes up: nobody will
        collect their outputs, and they must not hold blocks or steps of later calls."""
        requests = self.add_requests(prompts, params)
        try:
            while self.has_unfinished_requests():
                self.step()
        except BaseException:
            self.abort_requests(requests, "abort")
            raise
        return [self.make_output(r, []) for r in requests]


class LLM(LLMBase):
    engine_cls = LLMEngine

    @staticmethod
    def load_shard(*args):
        """Rank r's share of the model, for tensor_parallel_size > 1 (exercise 135)."""
        from .tensor_parallel import load_shard

        return load_shard(*args)
