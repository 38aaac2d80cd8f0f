"""When memory runs out: preemption by recomputation (exercise 131).

Admission is optimistic: a request is admitted when its first chunk fits, not its whole future. When a running
request then needs a block and none is free, the scheduler takes blocks back from the lowest-priority running
request, the most recently admitted one: it has done the least work, and evicting it keeps first-come-first-served
order. The victim loses its KV cache and goes back to the head of the queue; readmitted, it recomputes its prompt and
the tokens it already produced as one long prefill. vLLM v1 does the same in `Scheduler.schedule`
(vllm/v1/core/sched/scheduler.py), popping the victim from the end of `self.running`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework.request import Request, RequestStatus

if TYPE_CHECKING:
    from framework.scheduler import SchedulerBase as Scheduler, SchedulerOutput


def allocate_or_preempt(scheduler: "Scheduler", request: Request, num_new_tokens: int, out: "SchedulerOutput") -> bool:
    """Find blocks for a running request's next tokens, preempting the most recently admitted running requests
    until they fit. False when the request had to preempt itself."""
    while not scheduler.kv.allocate_slots(request, num_new_tokens):
        victim = scheduler.running[-1]
        scheduler.preempt(victim)
        out.preempted.append(victim)
        out.scheduled = [s for s in out.scheduled if s.request is not victim]
        if victim is request:
            return False
    return True


def preempt(scheduler: "Scheduler", request: Request) -> None:
    """Free a running request's blocks and put it back at the head of the queue, to be recomputed."""
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)
