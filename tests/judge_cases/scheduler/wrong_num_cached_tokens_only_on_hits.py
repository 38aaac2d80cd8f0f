"""Wrong: num_cached_tokens is set only when the request has prefix hits, so a request readmitted with none (its
cached blocks reused while it waited after a preemption) keeps the count of its earlier admission.

EXPECT: num_cached_tokens differs
PUBLIC: caught
"""

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput


class Scheduler(SchedulerBase):
    def schedule(self):
        out = SchedulerOutput()
        order = sorted(range(len(self.running)), key=lambda i: (1 if self.running[i].is_prefilling else 0, i))
        queue = [self.running[i] for i in order]
        for i in range(len(queue)):
            r = queue[i]
            used = out.num_scheduled_tokens
            if used >= self.token_budget:
                break
            if all(r is not x for x in self.running):
                continue
            n = r.num_tokens - r.num_computed_tokens
            n = n if n < self.token_budget - used else self.token_budget - used
            ok = self.allocate_or_preempt(r, n, out)
            if ok:
                out.scheduled += [ScheduledRequest(r, n)]
        while len(self.waiting) > 0:
            left = self.token_budget - out.num_scheduled_tokens
            if left == 0 or len(self.running) >= self.max_num_seqs or len(out.preempted) > 0:
                break
            r = self.waiting[0]
            blocks = self.kv.get_computed_blocks(r)
            need = r.num_tokens - (r.num_computed_tokens + self.kv.block_size * len(blocks))
            if need > left and self.enable_chunked_prefill is False:
                break
            need = min(need, left)
            if self.kv.allocate_slots(r, need, blocks) is False:
                break
            r = self.waiting.popleft()
            if blocks:
                r.num_cached_tokens = self.kv.block_size * len(blocks)
            r.status = RequestStatus.RUNNING
            self.running.append(r)
            out.scheduled.append(ScheduledRequest(r, need))
        return out
