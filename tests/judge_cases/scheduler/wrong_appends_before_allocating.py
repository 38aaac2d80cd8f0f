"""Wrong: the request is appended to out.scheduled before allocate_or_preempt is asked for its blocks (and removed
when it returns False): the reference's preemption then sees the request among the scheduled ones.

EXPECT: before appending the request to out.scheduled
PUBLIC: caught
"""

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput


class Scheduler(SchedulerBase):
    def schedule(self):
        out = SchedulerOutput()
        for request in sorted(self.running, key=lambda r: r.is_prefilling):
            budget = self.token_budget - out.num_scheduled_tokens
            if budget == 0:
                break
            if request not in self.running:
                continue
            n = min(request.num_tokens - request.num_computed_tokens, budget)
            entry = ScheduledRequest(request, n)
            out.scheduled.append(entry)
            if not self.allocate_or_preempt(request, n, out):
                out.scheduled.remove(entry)
        budget = self.token_budget - out.num_scheduled_tokens
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
            request.num_cached_tokens = len(computed) * self.kv.block_size
            self.running.append(request)
            out.scheduled.append(ScheduledRequest(request, n))
            budget -= n
        return out
