# VIOLATES: No admission in a step that preempted
"""Admits waiting requests in a step that preempted."""
from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput


class Scheduler(SchedulerBase):
    def _left(self, out):
        return self.token_budget - out.num_scheduled_tokens

    def schedule(self):
        out = SchedulerOutput()
        decodes = [r for r in self.running if not r.is_prefilling]
        chunks = [r for r in self.running if r.is_prefilling]
        order = decodes + chunks
        for k in range(len(order)):
            req = order[k]
            if self._left(out) <= 0:
                break
            if req not in self.running:
                continue
            n = min(req.num_tokens - req.num_computed_tokens, self._left(out))
            if self.allocate_or_preempt(req, n, out):
                out.scheduled.append(ScheduledRequest(req, n))
        while self.waiting:
            if self._left(out) <= 0 or len(self.running) >= self.max_num_seqs:
                break
            req = self.waiting[0]
            hits = self.kv.get_computed_blocks(req)
            cached = len(hits) * self.kv.block_size
            n = req.num_tokens - req.num_computed_tokens - cached
            if n > self._left(out):
                if not self.enable_chunked_prefill:
                    break
                n = self._left(out)
            if not self.kv.allocate_slots(req, n, hits):
                break
            self.waiting.popleft()
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            req.num_cached_tokens = cached
            out.scheduled.append(ScheduledRequest(req, n))
        return out
