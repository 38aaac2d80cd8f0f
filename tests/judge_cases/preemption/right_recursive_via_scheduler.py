"""Correct: recursion instead of a loop, the victim preempted through scheduler.preempt, the queue and lists
edited in place.
"""

from framework.request import RequestStatus


def preempt(scheduler, request):
    del scheduler.running[scheduler.running.index(request)]
    scheduler.kv.free(request)
    request.status, request.num_computed_tokens = RequestStatus.WAITING, 0
    request.num_preemptions = request.num_preemptions + 1
    scheduler.waiting.insert(0, request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    if scheduler.kv.allocate_slots(request, num_new_tokens):
        return True
    victim = scheduler.running[len(scheduler.running) - 1]
    scheduler.preempt(victim)
    out.preempted += [victim]
    out.scheduled[:] = [s for s in out.scheduled if s.request is not victim]
    return False if victim is request else allocate_or_preempt(scheduler, request, num_new_tokens, out)
