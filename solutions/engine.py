"""The inference loop (exercise 130): schedule, run the model on the mixed batch, sample, update, repeat.

`LLMEngine.step` is one iteration; `LLM.generate` is the offline entry point in the shape of vLLM's
`LLM.generate(prompts, sampling_params)` (vllm/entrypoints/llm.py; the loop is `LLMEngine.step` in
vllm/v1/engine/llm_engine.py, with `EngineCore.step` in vllm/v1/engine/core.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from mini_llm import Transformer, load_tokenizer, load_transformer

from .kv_cache_manager import KVCacheManager
from .model_runner import ModelRunner
from .request import Request
from .sampling import SamplingParams, make_generator, sample_token
from .scheduler import Scheduler, SchedulerOutput


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str | None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]  # produced in this step (streaming)
    outputs: list[CompletionOutput]  # everything produced so far, as in vLLM
    finished: bool


@dataclass
class EngineConfig:
    num_blocks: int = 512
    block_size: int = 16
    token_budget: int = 256  # vLLM: max_num_batched_tokens
    max_num_seqs: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False


def stop_reason(request: Request, eos_token_id: int | None, tokenizer=None) -> str | None:
    """Why the request is done after its latest token, or None to keep going."""
    params, last = request.sampling_params, request.output_token_ids[-1]
    if last == eos_token_id and not params.ignore_eos:
        return "stop"
    if params.stop and tokenizer is not None:
        text = tokenizer.decode(request.output_token_ids)
        if any(s in text for s in params.stop):
            return "stop"
    if len(request.output_token_ids) >= params.max_tokens:
        return "length"
    return None


class LLMEngine:
    """Owns the scheduler, the KV-cache manager and the model runner; `step()` advances every request once."""

    scheduler_cls = Scheduler
    runner_cls = ModelRunner
    kv_cache_manager_cls = KVCacheManager

    def __init__(self, model: Transformer, config: EngineConfig | None = None, tokenizer=None,
                 eos_token_id: int | None = None) -> None:
        self.model, self.config, self.tokenizer = model, config or EngineConfig(), tokenizer
        c = self.config
        self.eos_token_id = eos_token_id if eos_token_id is not None else model.cfg.eos_token_id
        self.kv_cache_manager = self.kv_cache_manager_cls(c.num_blocks, c.block_size, c.enable_prefix_caching)
        self.scheduler = self.scheduler_cls(self.kv_cache_manager, c.token_budget, c.max_num_seqs,
                                            c.enable_chunked_prefill)
        self.runner = self.runner_cls(model, c.num_blocks, c.block_size)
        self.requests: dict[str, Request] = {}

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams | None = None) -> Request:
        params = params or SamplingParams()
        limit = self.model.cfg.max_position_embeddings
        if len(prompt_token_ids) + params.max_tokens > limit:
            raise ValueError(f"prompt ({len(prompt_token_ids)} tokens) plus max_tokens ({params.max_tokens}) exceeds "
                             f"the model's max_position_embeddings ({limit}): shorten the prompt or lower max_tokens")
        request = Request(list(prompt_token_ids), params, generator=make_generator(params, self.model.device))
        self.scheduler.add_request(request)
        self.requests[request.request_id] = request
        return request

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def step(self) -> list[RequestOutput]:
        """One iteration: schedule, one forward pass, sample, update; outputs for requests that got a token."""
        sched = self.scheduler.schedule()
        if not sched:
            return []
        items = [(s.request.all_token_ids[s.request.num_computed_tokens: s.request.num_computed_tokens + s.num_new_tokens],
                  s.request.num_computed_tokens, s.request.block_table, s.completes_prompt) for s in sched.scheduled]
        logits = self.runner.execute_model(items)
        return self.update_from_output(sched, logits)

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
            token = greedy[row] if params.temperature == 0 else sample_token(logits[row], params, request.generator)
            row += 1
            request.output_token_ids.append(token)
            reason = stop_reason(request, self.eos_token_id, self.tokenizer)
            if reason:
                self.scheduler.finish(request, reason)
            outputs.append(self.make_output(request, [token]))
        return outputs

    def make_output(self, request: Request, new_token_ids: list[int]) -> RequestOutput:
        text = self.tokenizer.decode(request.output_token_ids) if self.tokenizer is not None else ""
        completion = CompletionOutput(list(request.output_token_ids), text, request.finish_reason)
        return RequestOutput(request.request_id, request.prompt_token_ids, new_token_ids, [completion],
                             request.is_finished)

    def add_requests(self, prompts: Sequence[list[int]],
                     params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[Request]:
        params_list = params if isinstance(params, Sequence) else [params] * len(prompts)
        return [self.add_request(prompt, p) for prompt, p in zip(prompts, params_list, strict=True)]

    def stream(self, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
               ) -> Iterator[RequestOutput]:
        """Add the prompts, then yield each new token's output as soon as it is produced."""
        self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            yield from self.step()

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Run the prompts (token ids) to completion; one final output per prompt, in order."""
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]


class LLM:
    """Text in, text out, like `vllm.LLM`: `LLM().generate(["Once upon a time"], SamplingParams(max_tokens=40))`."""

    def __init__(self, model_path: str | None = None, dtype: torch.dtype | None = None, device=None,
                 **engine_config) -> None:
        self.model = load_transformer(model_path, dtype=dtype, device=device)
        self.tokenizer = load_tokenizer(model_path)
        eos = self.model.cfg.eos_token_id if self.model.cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.engine = LLMEngine(self.model, EngineConfig(**engine_config), self.tokenizer, eos)

    def generate(self, prompts: str | Sequence[str], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        ids = [self.tokenizer.encode(p) for p in prompts]
        return self.engine.generate(ids, params)
