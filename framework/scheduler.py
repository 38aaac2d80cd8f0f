"""The scheduler's shell: its queues, admission checks and bookkeeping, without `schedule` (exercise 129).

`ScheduledRequest` and `SchedulerOutput` are what a schedule returns. `SchedulerBase` holds the waiting queue and
the running list and retires finished requests; a subclass writes `schedule` and names the module whose
`allocate_or_preempt` and `preempt` it uses (`preemption`, exercise 131).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import ModuleType

from .kv_cache_manager import KVCacheManagerBase
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


class SchedulerBase:
    preemption: ModuleType  # a module with allocate_or_preempt(scheduler, request, n, out) and preempt(scheduler, r)

    def __init__(self, kv_cache_manager: KVCacheManagerBase, token_budget: int = 256, max_num_seqs: int = 16,
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
        needed = request.num_prompt_tokens + request.sampling_params.max_tokens
        if needed > max_tokens:
            raise ValueError(f"request {request.request_id} needs up to {needed} tokens of KV cache "
                             f"but the whole cache holds {max_tokens}: raise num_blocks or lower max_tokens")
        if not self.enable_chunked_prefill and needed > self.token_budget:
            raise ValueError(f"without chunked prefill a request must fit in one step's token_budget "
                             f"({self.token_budget}); request {request.request_id} may need {needed}")
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        raise NotImplementedError("a scheduler writes schedule() (exercise 129)")

    def allocate_or_preempt(self, request: Request, num_new_tokens: int, out: SchedulerOutput) -> bool:
        return self.preemption.allocate_or_preempt(self, request, num_new_tokens, out)

    def preempt(self, request: Request) -> None:
        self.preemption.preempt(self, request)

    def finish(self, request: Request, reason: str) -> None:
        """Retire a finished request and return its blocks to the pool."""
        self.running.remove(request)
        self.kv.free(request)
        request.status, request.finish_reason = RequestStatus.FINISHED, reason
