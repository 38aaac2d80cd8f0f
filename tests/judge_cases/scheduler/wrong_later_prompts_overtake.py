"""Wrong: without chunked prefill, a waiting prompt that does not fit is skipped and later ones are admitted past it
(the statement: admission stops at the first that does not fit).

EXPECT: where the reference's code calls nothing more
PUBLIC: caught
"""

from __future__ import annotations

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput

__all__ = ["ScheduledRequest", "Scheduler", "SchedulerOutput"]


def _left(req) -> int:
    return req.num_tokens - req.num_computed_tokens


class Scheduler(SchedulerBase):
    def _budget_left(self, out) -> int:
        return self.token_budget - out.num_scheduled_tokens

    def _schedule_running(self, out) -> None:
        snapshot = list(self.running)
        decodes = [r for r in snapshot if not r.is_prefilling]
        prefills = [r for r in snapshot if r.is_prefilling]
        for req in decodes + prefills:
            room = self._budget_left(out)
            if room <= 0:
                return
            if req not in self.running:  # preempted earlier in this loop
                continue
            n = min(_left(req), room)
            if self.allocate_or_preempt(req, n, out):
                out.scheduled.append(ScheduledRequest(req, n))

    def _admit_waiting(self, out) -> None:
        bs = self.kv.block_size
        for req in list(self.waiting):
            room = self._budget_left(out)
            if room <= 0 or len(self.running) >= self.max_num_seqs:
                return
            hits = self.kv.get_computed_blocks(req)
            todo = _left(req) - len(hits) * bs
            if todo > room:
                if not self.enable_chunked_prefill:
                    continue 
                todo = room
            if not self.kv.allocate_slots(req, todo, hits):
                return
            self.waiting.remove(req)
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            req.num_cached_tokens = len(hits) * bs
            out.scheduled.append(ScheduledRequest(req, todo))

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self._schedule_running(out)
        if out.preempted:
            return out
        self._admit_waiting(out)
        return out
