# EXERCISE: 129
"""Chapter 09's prefill-first scheduler (a class with schedule), on the framework's scheduler base."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

from framework import request, scheduler  # noqa: E402

_base = SimpleNamespace(Scheduler=scheduler.SchedulerBase, SchedulerOutput=scheduler.SchedulerOutput,
                        ScheduledRequest=scheduler.ScheduledRequest)
Scheduler = _shipped.define(_shipped.find("09_performance", methods=("schedule",)), scheduler_mod=_base,
                            course=SimpleNamespace(use=lambda name: request))
