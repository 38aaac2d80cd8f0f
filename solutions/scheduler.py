"""The scheduler: each step, which requests run and how many of their tokens (exercises 129 and 131).

Iteration-level scheduling (Orca) with a token budget per step and chunked prefill (Sarathi-Serve): running
decodes go first, since each costs one token and stalls a user if skipped; then the unfinished chunk of a prompt
already running; then new requests, while budget, sequence slots and blocks last. A prompt longer than what is
left of the budget is cut into chunks over several steps. When blocks run out, the most recently admitted
running request is preempted: its blocks are freed and it is recomputed later (vLLM v1's recompute policy,
`Scheduler.schedule` in vllm/v1/core/sched/scheduler.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from . import preemption
from .kv_cache_manager import KVCacheManager
from .request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int  # tokens computed for it in this step: 1 for a decode, a chunk size for a prefill

    @property
    def completes_prompt(self) -> bool:
        """Whether this step computes the request's last pending token, so its logits give a new token."""
        return self.request.num_computed_tokens + self.num_new_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    def __bool__(self) -> bool:
        return bool(self.scheduled)


class Scheduler:
    def __init__(self, kv_cache_manager: KVCacheManager, token_budget: int = 256, max_num_seqs: int = 16,
                 enable_chunked_prefill: bool = True) -> None:
        if token_budget < 1 or max_num_seqs < 1:
            raise ValueError("token_budget and max_num_seqs must be positive")
        self.kv = kv_cache_manager
        self.token_budget, self.max_num_seqs = token_budget, max_num_seqs
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the last is the first to be preempted

    def add_request(self, request: Request) -> None:
        max_tokens = self.kv.block_pool.num_blocks * self.kv.block_size
        if request.num_prompt_tokens + request.sampling_params.max_tokens > max_tokens:
            raise ValueError(f"request {request.request_id} needs up to "
                             f"{request.num_prompt_tokens + request.sampling_params.max_tokens} tokens of KV cache "
                             f"but the whole cache holds {max_tokens}: raise num_blocks or lower max_tokens")
        if not self.enable_chunked_prefill and request.num_prompt_tokens + request.sampling_params.max_tokens > self.token_budget:
            raise ValueError(f"without chunked prefill a request must fit in one step's token_budget "
                             f"({self.token_budget}); request {request.request_id} may need "
                             f"{request.num_prompt_tokens + request.sampling_params.max_tokens}")
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        # 1. Running requests: decodes first, then prompts still being prefilled in chunks.
        for request in sorted(self.running, key=lambda r: r.is_prefilling):
            budget = self.token_budget - out.num_scheduled_tokens  # a preempted victim gives its tokens back
            if budget == 0:
                break
            if request not in self.running:  # preempted earlier in this loop
                continue
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if self.allocate_or_preempt(request, num_new, out):
                out.scheduled.append(ScheduledRequest(request, num_new))
        budget = self.token_budget - out.num_scheduled_tokens
        # 2. Waiting requests, first come first served, unless something was preempted this step.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted:
            request = self.waiting[0]
            computed = self.kv.get_computed_blocks(request)
            num_new = request.num_tokens - request.num_computed_tokens - len(computed) * self.kv.block_size
            if num_new > budget and not self.enable_chunked_prefill:
                break
            num_new = min(num_new, budget)
            if not self.kv.allocate_slots(request, num_new, computed):
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            request.num_cached_tokens = len(computed) * self.kv.block_size
            self.running.append(request)
            out.scheduled.append(ScheduledRequest(request, num_new))
            budget -= num_new
        return out

    def allocate_or_preempt(self, request: Request, num_new_tokens: int, out: SchedulerOutput) -> bool:
        return preemption.allocate_or_preempt(self, request, num_new_tokens, out)

    def preempt(self, request: Request) -> None:
        preemption.preempt(self, request)

    def finish(self, request: Request, reason: str) -> None:
        """Retire a finished request and return its blocks to the pool."""
        self.running.remove(request)
        self.kv.free(request)
        request.status, request.finish_reason = RequestStatus.FINISHED, reason
