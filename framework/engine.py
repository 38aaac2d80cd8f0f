"""The engine's shell: configs, outputs, stop conditions, adding requests (checked at the door) and aborting them,
and the text-in text-out `LLMBase`.

The loop itself, `step` and `generate`, is exercise 130 (practice/engine.py). The shapes follow vLLM's offline
API: `LLM.generate(prompts, sampling_params)` (vllm/entrypoints/llm.py) returning `RequestOutput`s.
"""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch

from mini_llm import Qwen3Config, Transformer, load_tokenizer, load_transformer
from mini_llm import model_path as checkpoint_folder

from .request import Request, RequestStatus
from .sampling import SamplingParams, TokenLogprobs, make_generator, prompt_logprobs
from .spec_decode import SpeculativeConfig
from .trace import StepTracer


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str | None
    logprobs: list[TokenLogprobs] | None = None  # one per token, when SamplingParams.logprobs is set


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    new_token_ids: list[int]  # produced in this step (streaming)
    outputs: list[CompletionOutput]  # everything produced so far, as in vLLM
    finished: bool
    error: str | None = None  # why the request failed, when its finish_reason is "error"
    prompt_logprobs: list[TokenLogprobs | None] | None = None  # when SamplingParams.prompt_logprobs is set


@dataclass
class EngineConfig:
    num_blocks: int = 512
    block_size: int = 16
    token_budget: int = 256  # vLLM: max_num_batched_tokens
    max_num_seqs: int = 16
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    max_finished_requests: int = 1024  # finished requests kept in LLMEngineBase.requests; older ones are dropped
    speculative: SpeculativeConfig | None = None  # n-gram drafts (the spec_decode module, exercise 134); None: off

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "token_budget", "max_num_seqs", "max_finished_requests"):
            value, least = getattr(self, name), 0 if name == "max_finished_requests" else 1
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"EngineConfig.{name} must be an int >= {least}, got {value!r}")


class StepError(RuntimeError):
    """A step failed. The requests it was running (`request_ids`) are finished with reason "error" and their
    blocks freed; the other requests are untouched and the engine goes on. The original exception is the cause."""

    def __init__(self, message: str, request_ids: list[str]) -> None:
        super().__init__(message)
        self.request_ids = request_ids


def stop_reason(request: Request, eos_token_id: int | None, tokenizer=None) -> str | None:
    """Why the request is done after its latest token, or None to keep going. "stop": end-of-sequence (unless
    ignore_eos) or a token of `stop_token_ids` (as vLLM's `check_stop`, vllm/v1/core/sched/utils.py at
    b31e9326a7), or a stop string; none of them before `min_tokens` output tokens (vLLM's sampler masks
    end-of-sequence and stop tokens until then, and its detokenizer checks stop strings only after them, as
    here). "length": max_tokens."""
    params, last, num_output = request.sampling_params, request.output_token_ids[-1], len(request.output_token_ids)
    if num_output > params.min_tokens:
        if (last == eos_token_id and not params.ignore_eos) or last in params.stop_token_ids:
            return "stop"
        if params.stop and tokenizer is not None:
            request.detokenizer.decode(tokenizer, request.output_token_ids)  # only the new tail is decoded
            if request.detokenizer.found(params.stop):
                return "stop"
    if num_output >= params.max_tokens:
        return "length"
    return None


class LLMEngineBase:
    """Owns the scheduler, the KV-cache manager and the model runner, built from the classes below; a subclass
    writes `step()` (one iteration: every scheduled request advances once) and `generate()` (exercise 130)."""

    scheduler_cls: type  # Scheduler(kv_cache_manager, token_budget, max_num_seqs, enable_chunked_prefill)
    runner_cls: type  # ModelRunner(model, num_blocks, block_size)
    kv_cache_manager_cls: type  # KVCacheManager(num_blocks, block_size, enable_prefix_caching)
    # Whether step() samples with `sample_request_token` (framework/sampling.py), which applies penalties and
    # min_tokens and records logprobs. An engine that samples with `sample_token` alone cannot, so add_request
    # refuses those fields rather than ignore them.
    samples_with_history: bool = False
    # Whether the engine masks logits with each request's grammar (framework/structured_output.py); add_request
    # refuses SamplingParams.structured_outputs otherwise, rather than ignore it.
    constrains_outputs: bool = False

    def __init__(self, model: Transformer, config: EngineConfig | None = None, tokenizer=None,
                 eos_token_id: int | None = None, runner=None) -> None:
        self.model, self.config, self.tokenizer = model, config or EngineConfig(), tokenizer
        c = self.config
        if c.speculative is not None and not hasattr(self, "verify_and_update"):
            raise ValueError(f"{type(self).__name__} does not speculate: with EngineConfig.speculative set, use the "
                             "speculating engine (or LLM) of the spec_decode module, exercise 134")
        self.eos_token_id = eos_token_id if eos_token_id is not None else model.cfg.eos_token_id
        self.kv_cache_manager = self.kv_cache_manager_cls(c.num_blocks, c.block_size, c.enable_prefix_caching)
        self.scheduler = self.scheduler_cls(self.kv_cache_manager, c.token_budget, c.max_num_seqs,
                                            c.enable_chunked_prefill)
        # `runner`: one built elsewhere, e.g. tensor parallelism's executor (framework/executor.py)
        self.runner = runner if runner is not None else self.runner_cls(model, c.num_blocks, c.block_size)
        self.model_is_whole = runner is None  # with tensor parallelism, self.model is rank 0's shard
        self.requests: dict[str, Request] = {}

    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None) -> Request:
        """Queue one prompt (token ids). Everything is checked here, so that a request the engine cannot serve is
        refused with a ValueError before the scheduler sees it, instead of failing inside a step."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams (or, for several prompts, a list of them), "
                             f"got {type(params).__name__}")
        params.verify()  # again: its fields may have been changed since it was made
        limit = self.model.cfg.max_position_embeddings
        # The length before each token: a prompt far too long (a server's third of a million ids) is refused at
        # once, not after a Python pass over it on the caller's thread.
        if isinstance(prompt_token_ids, Sequence) and not isinstance(prompt_token_ids, (str, bytes)) \
                and len(prompt_token_ids) + params.max_tokens > limit:
            raise ValueError(f"prompt ({len(prompt_token_ids)} tokens) plus max_tokens ({params.max_tokens}) exceeds "
                             f"the model's max_position_embeddings ({limit}): shorten the prompt or lower max_tokens")
        prompt = self._checked_prompt(prompt_token_ids)
        vocab_size = self.model.cfg.vocab_size
        if outside := [t for t in params.stop_token_ids if not 0 <= t < vocab_size]:  # they index the logits row
            raise ValueError(f"stop_token_ids holds {outside[0]}, not a token id: ids are ints in [0, {vocab_size}), "
                             "the model's vocabulary")
        self._check_history_fields(params)
        if params.prompt_logprobs is not None and not self.model_is_whole:
            raise ValueError("prompt_logprobs is not supported with tensor parallelism: the engine holds one shard")
        if params.structured_outputs is not None and not self.constrains_outputs:
            raise ValueError(f"structured_outputs is not supported by {type(self).__name__}: use an engine with "
                             "structured outputs (the structured_output module, exercise 136)")
        request = Request(prompt, params, generator=make_generator(params, self.model.device))
        self._forget_finished()
        self.scheduler.add_request(request)
        self.requests[request.request_id] = request
        return request

    def _check_history_fields(self, params: SamplingParams) -> None:
        fields = params.history_fields()
        if fields and not self.samples_with_history:
            raise ValueError(f"{fields[0]} is not supported by {type(self).__name__}: its step samples with "
                             "sample_token, which sees one row of logits and not the request's tokens; "
                             f"{', '.join(fields)} need an engine that samples with sample_request_token "
                             "(the reference engine without speculation)")

    def _prompt_logprobs(self, request: Request) -> list[TokenLogprobs | None]:
        """The prompt's logprobs, from one forward pass of the model over the prompt. It runs in the step, at the
        request's first output (`make_output`), so in the engine's thread and never in a caller's: a server's
        event loop, which adds requests, is not held up by it. vLLM computes them in the step too, from the
        prefill's own hidden states, at no extra pass (`GPUModelRunner.sample_tokens` -> `_bookkeeping_sync` ->
        `_get_prompt_logprobs_dict`, vllm/v1/worker/gpu_model_runner.py at
        b31e9326a7d9394aab8c767f8ebe225c65594b60); here the runner returns the logits of the last position only, so
        they cost one more pass over the prompt."""
        prompt = request.prompt_token_ids
        with torch.inference_mode():
            logits = self.model(torch.tensor([prompt], device=self.model.device))[0]
        return prompt_logprobs(logits, prompt, request.sampling_params.prompt_logprobs)

    def _checked_prompt(self, prompt_token_ids: Sequence[int]) -> list[int]:
        """The prompt as a list of ints, each a token id of the model's vocabulary."""
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise ValueError(f"a prompt must be a list of token ids (ints), got {type(prompt_token_ids).__name__} "
                             f"{prompt_token_ids!r:.60}: encode text with the tokenizer (LLM.generate takes text), "
                             "and pass a tensor or an array as .tolist()")
        vocab_size = self.model.cfg.vocab_size
        for i, token in enumerate(prompt_token_ids):
            if isinstance(token, bool) or not isinstance(token, numbers.Integral) or not 0 <= token < vocab_size:
                raise ValueError(f"prompt token {i} is {token!r}, not a token id: ids are ints in [0, {vocab_size}), "
                                 f"the model's vocabulary; encode text with the model's own tokenizer")
        return [int(token) for token in prompt_token_ids]

    def _forget_finished(self) -> None:
        """Drop the oldest finished requests beyond `max_finished_requests` from `self.requests`, so that a
        long-lived engine does not keep every request it ever served. Unfinished requests are never dropped."""
        num_unfinished = len(self.scheduler.waiting) + len(self.scheduler.running)
        excess = len(self.requests) - num_unfinished - self.config.max_finished_requests
        if excess > 0:
            finished = (rid for rid, r in self.requests.items() if r.is_finished)
            for rid in list(itertools.islice(finished, excess)):
                del self.requests[rid]

    def add_requests(self, prompts: Sequence[Sequence[int]],
                     params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[Request]:
        """Queue every prompt, or none: if one is refused, those added before it are taken back."""
        if isinstance(params, Sequence) and len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams: pass one SamplingParams "
                             "for all of them, or one per prompt")
        params_list = params if isinstance(params, Sequence) else [params] * len(prompts)
        added: list[Request] = []
        for i, (prompt, p) in enumerate(zip(prompts, params_list)):
            try:
                added.append(self.add_request(prompt, p))
            except ValueError as error:
                self.abort_requests(added, "abort")
                for r in added:
                    del self.requests[r.request_id]
                raise ValueError(f"prompt {i} of {len(prompts)} refused, so none was added: {error}") from error
        return added

    def abort_requests(self, requests: Iterable[Request], reason: str = "abort") -> None:
        """Finish the unfinished ones among `requests` with `reason`, waiting or running, and free their blocks.
        Blocks that only they hold also leave the prefix cache: after a failed step, the K and V of those blocks
        may never have been written, and a later request must not find them."""
        sched, kv = self.scheduler, self.kv_cache_manager
        for request in requests:
            if request.is_finished:
                continue
            if request in sched.running:
                sched.running.remove(request)
            elif request in sched.waiting:
                sched.waiting.remove(request)
            if kv.prefix_cache is not None:
                for block in request.block_table:
                    if kv.block_pool.ref_cnt[block] == 1:
                        kv.prefix_cache.evict(block)
            kv.free(request)
            request.status, request.finish_reason = RequestStatus.FINISHED, reason

    def fail_step(self, requests: Sequence[Request], error: BaseException) -> StepError:
        """After a step raised `error` while running `requests`: finish every unfinished one with reason "error",
        the error in its output, free its blocks, and return the exception for the step to raise (once, chained:
        `raise self.fail_step(requests, error) from error`). The engine then serves the other requests."""
        message = f"{type(error).__name__}: {error}"
        # named too: one that an inner step (the engine's own, inside speculation's) failed already with this error
        failed = [r for r in requests if not r.is_finished or r.error == message]
        for request in failed:
            request.error = message
        self.abort_requests(failed, "error")
        ids = [r.request_id for r in failed]
        return StepError(f"a step failed with {message}. Its requests {ids} are finished with reason 'error' "
                         "and their blocks freed; other requests are unaffected", ids)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def make_output(self, request: Request, new_token_ids: list[int]) -> RequestOutput:
        if request.sampling_params.prompt_logprobs is not None and request.prompt_logprobs is None:
            request.prompt_logprobs = self._prompt_logprobs(request)
        text = "" if self.tokenizer is None else request.detokenizer.decode(self.tokenizer, request.output_token_ids)
        logprobs = list(request.logprobs) if request.sampling_params.logprobs is not None else None
        completion = CompletionOutput(list(request.output_token_ids), text, request.finish_reason, logprobs)
        return RequestOutput(request.request_id, request.prompt_token_ids, new_token_ids, [completion],
                             request.is_finished, request.error, request.prompt_logprobs)

    def stream(self, prompts: Sequence[Sequence[int]],
               params: SamplingParams | Sequence[SamplingParams] | None = None) -> Iterator[RequestOutput]:
        """Add the prompts, then yield each new token's output as soon as it is produced. If the stream stops
        early (a failed step, or the consumer leaves the loop), its requests are aborted: nobody will read them."""
        requests = self.add_requests(prompts, params)
        try:
            while self.has_unfinished_requests():
                yield from self.step()
        except BaseException:
            self.abort_requests(requests, "abort")
            raise

    def step(self) -> list[RequestOutput]:
        raise NotImplementedError("an engine writes step() (exercise 130)")

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        raise NotImplementedError("an engine writes generate() (exercise 130)")


class LLMBase:
    """Text in, text out, like `vllm.LLM`: `LLM().generate(["Once upon a time"], SamplingParams(max_tokens=40))`.
    A subclass names its engine class in `engine_cls`. `tensor_parallel_size=N` shards the model over N processes
    (framework/executor.py) with the subclass's `load_shard` (the tensor_parallel module, exercise 135).
    `trace="run.json"` records a step trace (framework/trace.py), written after each `generate` and at `shutdown`."""

    engine_cls: type  # an LLMEngineBase subclass
    load_shard: Callable | None = None  # load_shard(path, rank, world_size, all_reduce, gather, dtype, device)

    def __init__(self, model_path: str | None = None, dtype: torch.dtype | None = None, device=None,
                 tensor_parallel_size: int = 1, trace: str | None = None, **engine_config) -> None:
        config, runner = EngineConfig(**engine_config), None
        if tensor_parallel_size == 1:
            self.model = load_transformer(model_path, dtype=dtype, device=device)
        else:
            self.model, runner = self._start_tensor_parallel(model_path, dtype, device, tensor_parallel_size, config)
        self.tokenizer = load_tokenizer(model_path)
        eos = self.model.cfg.eos_token_id if self.model.cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.engine = self.engine_cls(self.model, config, self.tokenizer, eos, runner=runner)
        # the whole model's shape (under tensor parallelism self.model is rank 0's shard), for the trace's FLOPs
        self.model_config = Qwen3Config.from_json(checkpoint_folder(model_path) / "config.json")
        self.tracer = None if trace is None else StepTracer(self.engine, trace, self.model_config)

    def _start_tensor_parallel(self, model_path, dtype, device, tensor_parallel_size: int, config: EngineConfig):
        from .executor import start_tensor_parallel

        if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) \
                or tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be an int >= 1, got {tensor_parallel_size!r}")
        if self.load_shard is None:
            raise ValueError(f"{type(self).__name__} has no load_shard: tensor parallelism needs the sharding of "
                             "exercise 135 (solutions.engine.LLM has it)")
        return start_tensor_parallel(type(self).load_shard, self.engine_cls.runner_cls, model_path, dtype, device,
                                     tensor_parallel_size, config.num_blocks, config.block_size)

    def shutdown(self) -> None:
        """Stop the tensor-parallel workers, if any (they also stop when this object is garbage-collected)."""
        if self.tracer is not None:
            self.tracer.save()
        if hasattr(self.engine.runner, "shutdown"):
            self.engine.runner.shutdown()

    def generate(self, prompts: str | Sequence[str], params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        ids = [self.tokenizer.encode(p) for p in prompts]
        try:
            return self.engine.generate(ids, params)
        finally:
            if self.tracer is not None:
                self.tracer.save()
