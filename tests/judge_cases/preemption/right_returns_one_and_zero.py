"""Correct: the victim popped off the running list, the scheduled entry found by index; allocate_or_preempt returns
1 and 0 (equal to True and False, which is what the scheduler tests).
"""

from framework.request import RequestStatus


def _evict(scheduler, request):
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.num_preemptions += 1
    request.status = RequestStatus.WAITING
    scheduler.waiting.appendleft(request)


def preempt(scheduler, request):
    scheduler.running.remove(request)
    _evict(scheduler, request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    while True:
        if scheduler.kv.allocate_slots(request, num_new_tokens):
            return 1
        victim = scheduler.running.pop()
        _evict(scheduler, victim)
        out.preempted.append(victim)
        for i, s in enumerate(out.scheduled):
            if s.request is victim:
                del out.scheduled[i]
                break
        if victim is request:
            return 0
