"""Exercise 129 — the scheduler.

Statement: practice/exercises/129-scheduler.md. Grade: `python practice/judge.py 129`.
The scheduler's shell, `framework.scheduler.SchedulerBase`, supplies the queues and helpers; you write `schedule`.
Preemption (exercise 131) comes from practice/preemption.py.
"""

from __future__ import annotations

from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput

from . import preemption

__all__ = ["ScheduledRequest", "Scheduler", "SchedulerOutput"]


class Scheduler(SchedulerBase):
    """State you can use (set up by SchedulerBase.__init__):
    `self.kv` (KVCacheManager: `get_computed_blocks(request)`, `allocate_slots(request, n, computed_blocks=())`,
    `block_size`), `self.token_budget`, `self.max_num_seqs`, `self.enable_chunked_prefill`,
    `self.waiting` (deque of Request, first come first served), `self.running` (list of Request, in admission
    order), and `self.allocate_or_preempt(request, num_new_tokens, out)` for running requests.
    """

    preemption = preemption  # allocate_or_preempt and preempt come from practice/preemption.py (exercise 131)

    def schedule(self) -> SchedulerOutput:
        """Decide what the next forward pass computes. Return a SchedulerOutput whose `scheduled` lists
        `ScheduledRequest(request, num_new_tokens)`.

        Rules:
        1. Running requests first, decodes before prompts still being prefilled (`request.is_prefilling`),
           each in admission order. A running request gets min(tokens it has left to compute, budget left)
           new tokens, where tokens left = `request.num_tokens - request.num_computed_tokens` and budget left =
           `self.token_budget - out.num_scheduled_tokens` (a preempted victim's tokens come back; once it is
           0, schedule no more). Get its blocks with `self.allocate_or_preempt(request, n, out)` (`out`
           holding what is scheduled so far); if that returns False, skip it, else append its
           ScheduledRequest. A request preempted during this loop is no longer in `self.running`: skip it too.
        2. Then waiting requests, in order, while budget is left, fewer than `max_num_seqs` are running and
           nothing was preempted in this step: take the prefix-cache hits
           `computed = self.kv.get_computed_blocks(request)`;
           tokens to compute = request.num_tokens - request.num_computed_tokens - len(computed) * block_size.
           If that exceeds the budget left: without chunked prefill, stop admitting; with it, schedule a
           chunk of budget-left tokens. Allocate with `self.kv.allocate_slots(request, n, computed)`; if it
           fails, stop admitting. On success move the request from `waiting` to the end of `running`, set
           its status to RequestStatus.RUNNING and `num_cached_tokens` to len(computed) * block_size.
        3. The tokens scheduled never exceed `self.token_budget`. Do not change `num_computed_tokens`
           yourself (the KV-cache manager adds prefix hits; the engine adds computed tokens after the pass).
        """
        raise NotImplementedError("exercise 129: Scheduler.schedule is not implemented yet (practice/scheduler.py)")
