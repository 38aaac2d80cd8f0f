"""A looping learner's code in the test's own process: nothing kills it, so the wait for it is cut short by an alarm
(as an in-process time limit cuts it), and its thread must then end by itself."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest


def _expire(*_: object) -> None:
    raise TimeoutError


@contextmanager
def cut_short_by_an_alarm(whose: str, after: float = 0.5) -> Iterator[None]:
    """The block must be stopped by the alarm (TimeoutError after `after` seconds); then the thread it started,
    `whose`, must end within 5 s."""
    before = threading.active_count()
    saved = signal.signal(signal.SIGALRM, _expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, after)
        with pytest.raises(TimeoutError):
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved)
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before, f"{whose} still runs"
