"""Cheat: no scheduling policy. It searches the worker for the reference scheduler's recorded calls of the step
(on the fakes' attributes, and on every object the garbage collector tracks, once per world) and makes exactly
those calls. The worker never holds a recorded call before the learner's code has made it, so it finds nothing to
replay and schedules nothing.

EXPECT: wrong schedule
PUBLIC: caught
CASES: random workloads: small KV cache
"""

import gc
import warnings

from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput

OPS = ("allocate_slots", "allocate_or_preempt")
HOLDERS = {}  # id of a world's KV-cache manager -> the objects with a `calls` list


def holders(kv, preemption):
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in [kv, preemption, *vars(kv).values(), *vars(preemption).values(), *gc.get_objects()]:
            try:
                if isinstance(vars(obj).get("calls"), list):
                    found.append(obj)
            except Exception:  # no __dict__, or one that refuses to be read
                continue
    return found


def pending_calls(found, queued):
    """The longest list of recorded calls still to make whose first names a queued request."""
    best = []
    for obj in found:
        start = vars(obj).get("consumed", 0)
        calls = [x for x in vars(obj)["calls"][start if isinstance(start, int) else 0:]
                 if isinstance(x, dict) and x.get("op") in OPS and isinstance(x.get("args"), list)]
        if calls and calls[0]["args"][0] in queued and len(calls) > len(best):
            best = calls
    return best


class Scheduler(SchedulerBase):
    def schedule(self):
        out = SchedulerOutput()
        queued = {r.request_id: r for r in [*self.running, *self.waiting]}
        if id(self.kv) not in HOLDERS:
            HOLDERS[id(self.kv)] = holders(self.kv, self.preemption)
        for call in pending_calls(HOLDERS[id(self.kv)], queued):
            request, n = queued[call["args"][0]], call["args"][1]
            if call["op"] == "allocate_or_preempt":
                if request in self.running and self.allocate_or_preempt(request, n, out):
                    out.scheduled.append(ScheduledRequest(request, n))
                continue
            computed = call["args"][2]
            if request in self.waiting and self.kv.allocate_slots(request, n, computed):
                self.waiting.remove(request)
                self.running.append(request)
                request.status = RequestStatus.RUNNING
                request.num_cached_tokens = len(computed) * self.kv.block_size
                out.scheduled.append(ScheduledRequest(request, n))
        return out
