"""Attack (memory): its replies carry 6 MB of empty JSON objects each (the grader parses them into millions of
objects), and every call allocates until the worker's memory limit stops it. Honest part: 0. The honest
submission graded after it must get full marks.
"""

import judge.worker_main as _worker

_handle = _worker.Worker.handle


def _padded(self, req):
    out = _handle(self, req)
    out["pad"] = [{}] * 2_000_000
    return out


_worker.Worker.handle = _padded


def build_batch(items, block_size):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 26))
