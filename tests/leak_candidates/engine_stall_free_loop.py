# EXERCISE: 130
"""Exercise 130 from chapters/stall_free_loop.py, the engine chapter 6 shows for its spot-the-bug question.

Only what the file itself defines on its `LLMEngine` is taken (its own `step` and `generate`, as they are now), on
the framework's shell: whatever engine it builds on is the learner's own (`course.use("engine")`). The glue is the
fix the chapter asks for, without editing the shipped step: it runs that step once per scheduled request, against
a scheduler that offers that request alone and a runner that records the request's item, then makes ONE forward
pass for all the items and replays the step once per request on its row of logits.
"""

import sys
from pathlib import Path

import torch

from framework.engine import LLMEngineBase
from framework.scheduler import SchedulerOutput

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "chapters"))
import stall_free_loop  # noqa: E402

SHIPPED = {name: f for name, f in vars(stall_free_loop.LLMEngine).items() if name in ("step", "generate")}


class _Recorded(Exception):
    pass


class _OneItem:
    """A runner that records the one item it is given (and stops the step there), or returns given logits."""

    def __init__(self, logits: torch.Tensor | None = None) -> None:
        self.logits, self.items = logits, []

    def execute_model(self, items):
        if self.logits is None:
            self.items += list(items)
            raise _Recorded
        return self.logits


class LLMEngine(LLMEngineBase):
    generate = SHIPPED.get("generate", LLMEngineBase.generate)

    def _shipped_step(self, s, runner):
        scheduler, real = self.scheduler, self.runner
        scheduler.schedule, self.runner = (lambda: SchedulerOutput([s])), runner
        try:
            return SHIPPED["step"](self)
        finally:
            del scheduler.schedule
            self.runner = real

    def step(self):
        sched = self.scheduler.schedule()
        recorder = _OneItem()
        for s in sched.scheduled:
            try:
                self._shipped_step(s, recorder)
            except _Recorded:
                pass
        if not recorder.items:
            return []
        logits = self.runner.execute_model(recorder.items)
        outputs, row = [], 0
        for s, item in zip(sched.scheduled, recorder.items):
            rows = logits[row: row + 1] if item[3] else logits[:0]
            row += int(item[3])
            outputs += self._shipped_step(s, _OneItem(rows))
        return outputs
