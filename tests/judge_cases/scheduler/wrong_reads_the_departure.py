"""Cheat: no scheduling policy. It makes a bogus call of a part to learn, from the departure the grader answers
with, the reference's next call, then clears the fake's flag and makes that call. A departure carries no call (the
grader keeps the call expected to itself) and is final.

EXPECT: your code called kv.probe
PUBLIC: caught
"""
from framework.request import RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge.drivers.rounds import Departure

__all__ = ["ScheduledRequest", "Scheduler", "SchedulerOutput"]

PROBE = {"op": "probe", "args": ["?"], "reads": {}}


def next_expected(rp):
    try:
        rp.post(dict(PROBE))
    except Departure:
        exp = rp.departure["expected"]
        rp.departure = None
        return exp
    raise RuntimeError("probe was accepted?")


class Scheduler(SchedulerBase):
    def schedule(self):
        out = SchedulerOutput()
        rp = self.kv.replay
        while True:
            exp = next_expected(rp)
            if exp is None:
                return out
            entry = rp.post(exp)
            rp.consumed += 1
            rp.apply(entry["effect"], out)
            rid, n = exp["args"][0], exp["args"][1]
            r = rp.requests[rid]
            if exp["op"] == "allocate_or_preempt":
                if entry["value"]:
                    out.scheduled.append(ScheduledRequest(r, n))
            elif exp["op"] == "allocate_slots" and entry["value"]:
                if r in self.waiting:
                    self.waiting.remove(r)
                r.status = RequestStatus.RUNNING
                r.num_cached_tokens = len(exp["args"][2]) * self.kv.block_size
                self.running.append(r)
                out.scheduled.append(ScheduledRequest(r, n))
