"""Wrong: preempt also resets the request's generator and logprobs: a seeded request that is preempted draws
different tokens afterwards, and its logprobs no longer match its outputs. The statement leaves its other fields
as they are.

EXPECT: other fields stay as they are
PUBLIC: caught
"""

from framework.request import RequestStatus


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.generator = None  # a fresh start: the sampling's random numbers are drawn again
    request.logprobs = []
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    while not scheduler.kv.allocate_slots(request, num_new_tokens):
        victim = scheduler.running[-1]
        preempt(scheduler, victim)
        out.preempted.append(victim)
        out.scheduled = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
    return True
