# VIOLATES: A victim already scheduled in this step leaves `out.scheduled`
"""Leaves a victim scheduled earlier in this step in out.scheduled."""
from framework.request import RequestStatus


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    while True:
        if scheduler.kv.allocate_slots(request, num_new_tokens):
            return True
        victim = scheduler.running[-1]
        preempt(scheduler, victim)
        out.preempted.append(victim)
        if victim is request:
            return False
