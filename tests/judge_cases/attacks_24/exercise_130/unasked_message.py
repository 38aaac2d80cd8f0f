"""Attack on 130's pipes: an engine whose step writes on the worker's reply pipe a message the grader never asked
for (a call of the grader's parts, as the judge's call-backs once were, and a reply to a request never sent). Each is
the protocol verdict that ends the submission, and the grader goes on (the next submission is graded as usual)."""

import json
import os
import sys

from framework.engine import LLMEngineBase

FORGED = {  # which message this copy sends: the test writes a copy per kind
    "callback": {"t": "callback", "id": 1, "host": 0, "name": "engine", "args": []},
    "reply": {"t": "reply", "id": 10 ** 6, "ok": True, "value": None},
}
KIND = os.path.basename(__file__).rsplit(".", 1)[0].rpartition("_")[2]


class LLMEngine(LLMEngineBase):
    def step(self):
        os.write(int(sys.argv[-1]), (json.dumps(FORGED[KIND]) + "\n").encode())
        return []

    def generate(self, prompts, params=None):
        return []
