"""The worker's request handler on a module loaded in the test's own process: what a grading worker answers, every
reply through the wire's encoding, without starting a process (tests/test_judge_messages.py and
tests/test_public_verdicts.py replay hundreds of calls)."""

from __future__ import annotations

import json

from judge import wire
from judge.worker_main import Worker
from judge.remote import Session


class InProcess(Session):
    """`target`: {"impl": a file} or {"impl_module": a dotted name}, loaded as the worker loads it (its API
    checked: `fatal` holds why it did not load)."""

    def __init__(self, ex, target: dict) -> None:
        sent: list[dict] = []
        self.worker = Worker({"exercise": ex.id, **target}, sent.append, lambda: b"")
        self.worker.load()
        self.fatal = next((str(m.get("message")) for m in sent if m.get("t") == "fatal"), None)

    def request(self, msg: dict) -> dict:
        return json.loads(wire.dumps(self.worker.handle(msg)))


class Recording(InProcess):
    """The reference's answers to a case's calls (`log`: [request, reply] pairs), as a student edition records
    them."""

    def __init__(self, ex, target: dict) -> None:
        super().__init__(ex, target)
        self.log: list = []

    def request(self, msg: dict) -> dict:
        reply = super().request(msg)
        self.log.append([msg, reply])
        return reply
