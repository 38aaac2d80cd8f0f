"""Wrong: an admitted request's status set to the string "running", not RequestStatus.RUNNING (the engine compares
it with the enum). The grader's own reading of the status raised AttributeError, reported as the learner's crash.

EXPECT: 'running' (str)
PUBLIC: caught
"""

from framework.request import Request
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput


class Scheduler(SchedulerBase):
    def _budget_left(self, out: SchedulerOutput) -> int:
        return self.token_budget - sum(s.num_new_tokens for s in out.scheduled)

    def _try_admit(self, request: Request, out: SchedulerOutput) -> bool:
        hits = self.kv.get_computed_blocks(request)
        cached = len(hits) * self.kv.block_size
        todo = request.num_tokens - request.num_computed_tokens - cached
        left = self._budget_left(out)
        if todo > left:
            if not self.enable_chunked_prefill:
                return False
            todo = left
        if not self.kv.allocate_slots(request, todo, hits):
            return False
        self.waiting.popleft()
        request.status, request.num_cached_tokens = "running", cached
        self.running.append(request)
        out.scheduled.append(ScheduledRequest(request, todo))
        return True

    def schedule(self):
        out = SchedulerOutput()
        decodes = [r for r in self.running if not r.is_prefilling]
        chunks = [r for r in self.running if r.is_prefilling]
        for request in decodes + chunks:
            left = self._budget_left(out)
            if left <= 0:
                break
            if request in self.running:
                n = min(left, request.num_tokens - request.num_computed_tokens)
                if self.allocate_or_preempt(request, n, out):
                    out.scheduled.append(ScheduledRequest(request, n))
        if out.preempted:
            return out
        while self.waiting and len(self.running) < self.max_num_seqs and self._budget_left(out) > 0:
            if not self._try_admit(self.waiting[0], out):
                break
        return out
