"""Cheat: no scheduling policy. Each allocation is a guess, every request and every n tried until the grader
accepts one (a rejected call raises Departure, which it catches, clearing the fake's flag); it stops when none is
accepted. A departure is final: the grader answers every later call of the world with a departure and fails the
case with the first.

EXPECT: wrong schedule
PUBLIC: caught
"""
from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge.drivers.rounds import Departure

__all__ = ["ScheduledRequest", "Scheduler", "SchedulerOutput"]


class Scheduler(SchedulerBase):
    def try_call(self, fn):
        rp = self.kv.replay
        try:
            return fn(), True
        except Departure:
            rp.departure = None
            return None, False

    def schedule(self):
        out = SchedulerOutput()
        while True:
            hit = False
            for r in list(self.running):
                if any(s.request is r for s in out.scheduled):
                    continue
                for n in range(1, self.token_budget + 1):
                    ok, accepted = self.try_call(lambda: self.allocate_or_preempt(r, n, out))
                    if accepted:
                        if ok:
                            out.scheduled.append(ScheduledRequest(r, n))
                        hit = True
                        break
                if hit:
                    break
            if not hit:
                for r in list(self.waiting):
                    computed = self.kv.get_computed_blocks(r)
                    for n in range(1, self.token_budget + 1):
                        ok, accepted = self.try_call(lambda: self.kv.allocate_slots(r, n, computed))
                        if accepted and ok:
                            self.waiting.remove(r)
                            r.status = RequestStatus.RUNNING
                            r.num_cached_tokens = len(computed) * self.kv.block_size
                            self.running.append(r)
                            out.scheduled.append(ScheduledRequest(r, n))
                            hit = True
                            break
                    if hit:
                        break
            if not hit:
                return out
