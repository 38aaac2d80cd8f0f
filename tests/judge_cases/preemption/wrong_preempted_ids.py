"""Wrong: out.preempted holds the victims' request_ids, not the Request objects. The grader's own reading of them
raised AttributeError, reported as the learner's crash.

EXPECT: it must hold the preempted Request objects
PUBLIC: caught
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
            return True
        victim = scheduler.running.pop()
        _evict(scheduler, victim)
        out.preempted.append(victim.request_id)
        for i, s in enumerate(out.scheduled):
            if s.request is victim:
                del out.scheduled[i]
                break
        if victim is request:
            return False
