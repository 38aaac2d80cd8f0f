"""Wrong: schedules by the rules, but sets num_cached_tokens to a float (8.0, not 8).

EXPECT: (float)
PUBLIC: caught
"""

from __future__ import annotations

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput

__all__ = ["ScheduledRequest", "Scheduler", "SchedulerOutput"]


class Scheduler(SchedulerBase):
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        for request in sorted(self.running, key=lambda r: r.is_prefilling):
            budget = self.token_budget - int(out.num_scheduled_tokens)
            if budget == 0:
                break
            if request not in self.running:
                continue
            n = min(request.num_tokens - request.num_computed_tokens, budget)
            if self.allocate_or_preempt(request, n, out):
                out.scheduled.append(ScheduledRequest(request, n))
        budget = self.token_budget - int(out.num_scheduled_tokens)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted:
            request = self.waiting[0]
            computed = self.kv.get_computed_blocks(request)
            n = request.num_tokens - request.num_computed_tokens - len(computed) * self.kv.block_size
            if n > budget and not self.enable_chunked_prefill:
                break
            n = min(n, budget)
            if not self.kv.allocate_slots(request, n, computed):
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            request.num_cached_tokens = float(len(computed) * self.kv.block_size)
            self.running.append(request)
            out.scheduled.append(ScheduledRequest(request, n))
            budget -= n
        return out
