"""Cheat: no victim policy. It looks on the KV-cache manager's attributes (and theirs) for the reference's recorded
KV-cache calls of this call and preempts the requests they free; finding none, it preempts the oldest running
request. The worker never holds a recorded call before the learner's code has made it, so the victim is wrong.

EXPECT: the victim is the most recently admitted running request
PUBLIC: caught
"""

from framework.request import RequestStatus


def recorded_victims(kv):
    """The ids the recorded calls still to make free, from the first object found holding `calls`."""
    for obj in [kv, *vars(kv).values()]:
        attrs = getattr(obj, "__dict__", {})
        calls = attrs.get("calls")
        if isinstance(calls, list):
            start = attrs.get("consumed", 0)
            return [c["args"][0] for c in calls[start:] if isinstance(c, dict) and c.get("op") == "free"]
    return []


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    victims = recorded_victims(scheduler.kv)
    while not scheduler.kv.allocate_slots(request, num_new_tokens):
        running = {r.request_id: r for r in scheduler.running}
        victim = running.get(victims.pop(0)) if victims else scheduler.running[0]
        preempt(scheduler, victim)
        out.preempted.append(victim)
        out.scheduled = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
    return True
