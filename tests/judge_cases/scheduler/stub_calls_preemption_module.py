"""A 129 Scheduler that is right except that it calls the module it imports, `preemption.allocate_or_preempt(self,
...)`, instead of `self.allocate_or_preempt(...)`: while 131 is not written that is the untouched stub. The judge
must blame the stub (exercise 131) and say what to call instead, not "Scheduler.schedule is not implemented".

EXPECT: exercise 131's stub
"""

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from practice import preemption


class Scheduler(SchedulerBase):
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
            if preemption.allocate_or_preempt(self, request, num_new, out):  # the module, not self
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
