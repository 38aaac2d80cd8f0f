"""A stall-free scheduler with a hook between it and the loop, in this course's names.

Chapter 6 asks you to find its bug: it schedules well (decodes first, then prompt chunks, within the token budget),
yet only one sequence advances per step. The loop is the course's engine (`course.use("engine")`: yours once
exercise 130 passed); this file adds only the hook, which hands the loop part of what the scheduler decided. Grade
it like a solution of exercise 130 to see the judge's diagnosis: `python practice/judge.py 130 --impl
chapters/stall_free_loop.py --unisolated` (the judge plugs in its own scheduler, KV-cache manager and model runner,
and the hook stays between them and the loop).
"""

from __future__ import annotations

import importlib.util

import course
from framework.engine import RequestOutput
from framework.scheduler import SchedulerOutput


def newest_only(out: SchedulerOutput) -> SchedulerOutput:
    """The hook: meant to pass on the scheduler's decision and log the request it admitted last."""
    return SchedulerOutput(out.scheduled[-1:], out.preempted)


def the_loop() -> type:
    """The course's engine (`course.use`: yours once exercise 130 passed). The judge's worker sees no record of
    your passes, so there the course offers a stand-in: the loop is then the reference's where this copy has it,
    else your practice/engine.py (loaded under another name: the judge loads this very file as practice.engine)."""
    loop = course.use("engine").LLMEngine
    if not course.stands_in(loop):
        return loop
    try:
        return course.reference("solutions.engine").LLMEngine
    except course.NotInThisCopy:
        pass
    spec = importlib.util.spec_from_file_location("practice.your_engine", course.ROOT / "practice" / "engine.py")
    yours = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(yours)
    except Exception:  # noqa: BLE001 - a practice/ file that does not load (a syntax error): the stand-in then says
        return loop  # which exercise the cell waits for, as every chapter does
    return yours.LLMEngine


class LLMEngine(the_loop()):
    def step(self) -> list[RequestOutput]:
        schedule = self.scheduler.schedule  # stall-free: decodes, then prompt chunks, then new requests
        self.scheduler.schedule = lambda: newest_only(schedule())
        try:
            return super().step()
        finally:
            self.scheduler.schedule = schedule
