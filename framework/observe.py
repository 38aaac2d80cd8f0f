"""Watching an engine's steps from outside it: one hook on the scheduler's `schedule`, shared by every observer.

The step is the learner's code (exercise 130), so the framework sees it where the step calls framework objects:
`scheduler.schedule()`, once per step, at the start. `observe_schedule(scheduler, observer)` calls
`observer.before_schedule()` before each call and `observer.after_schedule(out)` with its `SchedulerOutput` after
it, in the step's thread. The server's metrics (course/serve.py) and the step tracer (framework/trace.py) both
attach here. The hook is an instance attribute of that scheduler object, put there by the first observer and
removed with the last, so that a scheduler nobody observes runs its own method and pays nothing.

vLLM's engine core gets the same figures the other way round: `Scheduler.make_stats` builds the `SchedulerStats`
that travel with each step's outputs to the loggers (vllm/v1/core/sched/scheduler.py at
b31e9326a7d9394aab8c767f8ebe225c65594b60).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class ScheduleObserver(Protocol):
    def before_schedule(self) -> None: ...

    def after_schedule(self, out: Any) -> None: ...


class ObservedSchedule:
    """A scheduler's own `schedule`, with its observers called around it (in the order they attached)."""

    def __init__(self, schedule: Callable[[], Any]) -> None:
        self.schedule, self.observers = schedule, []

    def __call__(self) -> Any:
        for observer in self.observers:
            observer.before_schedule()
        out = self.schedule()
        for observer in self.observers:
            observer.after_schedule(out)
        return out


def observe_schedule(scheduler: Any, observer: ScheduleObserver) -> Callable[[], None]:
    """Attach `observer` to `scheduler.schedule`; returns the function that detaches it."""
    hook = vars(scheduler).get("schedule")
    if not isinstance(hook, ObservedSchedule):
        hook = scheduler.schedule = ObservedSchedule(scheduler.schedule)
    hook.observers.append(observer)

    def detach() -> None:
        hook.observers.remove(observer)
        if not hook.observers and vars(scheduler).get("schedule") is hook:
            del scheduler.schedule  # the class's method again

    return detach
