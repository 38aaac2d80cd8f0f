"""Wrong: a waiting request's tokens to compute count its prompt only: a preempted request's output tokens are
forgotten when it is admitted again.

EXPECT: num_tokens counts its output tokens too
PUBLIC: caught
"""

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput


class Scheduler(SchedulerBase):
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        for request in sorted(self.running, key=lambda r: r.is_prefilling):
            budget = self.token_budget - out.num_scheduled_tokens
            if budget == 0:
                break
            if request not in self.running:
                continue
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if self.allocate_or_preempt(request, num_new, out):
                out.scheduled.append(ScheduledRequest(request, num_new))
        budget = self.token_budget - out.num_scheduled_tokens
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted:
            request = self.waiting[0]
            computed = self.kv.get_computed_blocks(request)
            num_new = request.num_prompt_tokens - request.num_computed_tokens - len(computed) * self.kv.block_size
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
