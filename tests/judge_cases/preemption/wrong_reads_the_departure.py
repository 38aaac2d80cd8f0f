"""Cheat: allocate_or_preempt chooses no victim itself. It makes a bogus call of a part to learn, from the departure
the grader answers with, the reference's next call (which request it frees), then clears the fake's flag and
makes that call; preempt is written in full. A departure carries no call and is final.

EXPECT: your code called kv.probe
PUBLIC: caught
"""
from framework.request import RequestStatus
from judge.drivers.rounds import Departure


def peek(rp):
    try:
        rp.post({"op": "probe", "args": ["?"], "reads": {}})
    except Departure:
        exp = rp.departure["expected"]
        rp.departure = None
        return exp
    raise RuntimeError("probe accepted")


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    rp = scheduler.kv.replay
    while True:
        exp = peek(rp)
        if exp is None or exp["op"] == "allocate_slots":
            # the reference's next call is the allocation (or nothing: it succeeded / it was refused read-only)
            if scheduler.kv.allocate_slots(request, num_new_tokens):
                return True
            if exp is not None:
                continue
        if exp is None:
            return request not in out.preempted
        victim = rp.requests[exp["args"][0]]            # the reference frees this one next: it is the victim
        preempt(scheduler, victim)
        out.preempted.append(victim)
        out.scheduled = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
