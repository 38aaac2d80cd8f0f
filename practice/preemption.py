"""Exercise 131 — when memory runs out: preemption by recomputation.

Statement: practice/exercises/131-preemption.md. Grade: `python practice/judge.py 131`.
These two functions are the scheduler's `allocate_or_preempt` and `preempt` (practice/scheduler.py calls them).
"""

from __future__ import annotations


def preempt(scheduler, request) -> None:
    """Evict a running request so that others can go on; it will be recomputed from scratch later.

    Afterwards: the request is no longer in `scheduler.running`; its blocks are back in the pool
    (`scheduler.kv.free(request)`); its `num_computed_tokens` is 0; its status is `RequestStatus.WAITING`;
    its `num_preemptions` is one higher; and it is at the HEAD of `scheduler.waiting` (a deque), so it is the
    first to be readmitted. Its `output_token_ids` are kept: recomputation replays prompt + outputs. Its other
    fields (`num_cached_tokens` among them) are left as they are.
    """
    raise NotImplementedError("exercise 131: preempt is not implemented yet (practice/preemption.py)")


def allocate_or_preempt(scheduler, request, num_new_tokens: int, out) -> bool:
    """Find KV-cache blocks for `num_new_tokens` more tokens of a running `request`, preempting if needed.

    Try `scheduler.kv.allocate_slots(request, num_new_tokens)` (True on success; all or nothing). While it
    fails, preempt the lowest-priority running request, the most recently admitted one
    (`scheduler.running[-1]`), record it in `out.preempted`, and remove it from `out.scheduled` if it was
    already scheduled in this step; then try again. If the victim is `request` itself, return False.
    Return True once the allocation succeeds.
    """
    raise NotImplementedError("exercise 131: allocate_or_preempt is not implemented yet (practice/preemption.py)")
