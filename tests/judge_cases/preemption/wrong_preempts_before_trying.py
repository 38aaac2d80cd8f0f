"""Wrong: preempts a victim before even trying to allocate.

EXPECT: preempt only when it fails
PUBLIC: caught
"""

from framework.request import RequestStatus


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    while len(scheduler.running) > 1 and scheduler.kv.num_free_blocks < 2 or not scheduler.kv.allocate_slots(request, num_new_tokens):
        victim = scheduler.running[-1]
        preempt(scheduler, victim)
        out.preempted.append(victim)
        out.scheduled = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
    return True
