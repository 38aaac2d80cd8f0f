# VIOLATES: Its other fields (`num_cached_tokens` among them) are left as they are
"""Resets num_cached_tokens on preemption, as if the prefix hits of its admission were lost with its blocks."""
from framework.request import RequestStatus


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    request.num_cached_tokens = 0
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    while True:
        if scheduler.kv.allocate_slots(request, num_new_tokens):
            return True
        victim = scheduler.running[-1]
        preempt(scheduler, victim)
        out.preempted.append(victim)
        out.scheduled[:] = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
