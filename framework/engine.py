"""The engine's shell: configs, outputs, stop conditions, adding requests, and the text-in text-out `LLMBase`.

The loop itself, `step` and `generate`, is exercise 130 (solutions/engine.py). The shapes follow vLLM's offline
API: `LLM.generate(prompts, sampling_params)` (vllm/entrypoints/llm.py) returning `RequestOutput`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from mini_llm import Transformer, load_tokenizer, load_transformer

from .request import Request
from .sampling import SamplingParams, make_generator


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


class LLMEngineBase:
    """Owns the scheduler, the KV-cache manager and the model runner, built from the classes below; a subclass
    writes `step()` (one iteration: every scheduled request advances once) and `generate()` (exercise 130)."""

    scheduler_cls: type  # Scheduler(kv_cache_manager, token_budget, max_num_seqs, enable_chunked_prefill)
    runner_cls: type  # ModelRunner(model, num_blocks, block_size)
    kv_cache_manager_cls: type  # KVCacheManager(num_blocks, block_size, enable_prefix_caching)

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

    def step(self) -> list[RequestOutput]:
        raise NotImplementedError("an engine writes step() (exercise 130)")

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        raise NotImplementedError("an engine writes generate() (exercise 130)")


class LLMBase:
    """Text in, text out, like `vllm.LLM`: `LLM().generate(["Once upon a time"], SamplingParams(max_tokens=40))`.
    A subclass names its engine class in `engine_cls`."""

    engine_cls: type  # an LLMEngineBase subclass

    def __init__(self, model_path: str | None = None, dtype: torch.dtype | None = None, device=None,
                 **engine_config) -> None:
        self.model = load_transformer(model_path, dtype=dtype, device=device)
        self.tokenizer = load_tokenizer(model_path)
        eos = self.model.cfg.eos_token_id if self.model.cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.engine = self.engine_cls(self.model, EngineConfig(**engine_config), self.tokenizer, eos)

    def generate(self, prompts: str | Sequence[str], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        ids = [self.tokenizer.encode(p) for p in prompts]
        return self.engine.generate(ids, params)
