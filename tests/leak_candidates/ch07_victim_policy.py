# EXERCISE: 131
"""Chapter 07's allocate_or_preempt (its victim-policy experiment), with the reference's victim, the newest; and
preempt written from the statement."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

from framework.request import RequestStatus  # noqa: E402

_method = _shipped.define(_shipped.find("07_preemption", name="allocate_or_preempt"),
                          pick=lambda running: running[-1], last=lambda running: running)


def allocate_or_preempt(scheduler, request, num_new_tokens, out):
    return _method(scheduler, request, num_new_tokens, out)


def preempt(scheduler, request):
    scheduler.running.remove(request)
    scheduler.kv.free(request)
    request.num_computed_tokens = 0
    request.status = RequestStatus.WAITING
    request.num_preemptions += 1
    scheduler.waiting.appendleft(request)
