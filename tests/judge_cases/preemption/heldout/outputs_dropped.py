# VIOLATES: Its `output_token_ids` are kept
"""Drops the request's output tokens."""
from framework.request import RequestStatus


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    del request.output_token_ids[:]
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
        out.scheduled[:] = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
