"""The scheduler: each step, which requests run and how many of their tokens (exercises 129 and 131).

Iteration-level scheduling (Orca) with a token budget per step and chunked prefill (Sarathi-Serve): running
decodes go first, since each costs one token and stalls a user if skipped; then the unfinished chunk of a prompt
already running; then new requests, while budget, sequence slots and blocks last. A prompt longer than what is
left of the budget is cut into chunks over several steps. When blocks run out, the most recently admitted
running request is preempted: its blocks are freed and it is recomputed later (vLLM v1's recompute policy,
`Scheduler.schedule` in vllm/v1/core/sched/scheduler.py).
"""

from __future__ import annotations

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput  # noqa: F401

from . import preemption


class Scheduler(SchedulerBase):
    preemption = preemption

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
