"""Attack on 130's callbacks: an engine whose step asks the grader's parts for what the stand-ins never ask (a
host that does not exist, an operation it does not have, arguments of the wrong kinds), or for a part that is its
own answer (a host stepping the reference engine, 130's answer: an oracle, which no host offers). Each is the protocol verdict that
ends the submission, and the grader goes on (the next submission is graded as usual)."""

import os

from framework.engine import LLMEngineBase
from judge import drivers

FORGED = {  # which forgery this copy sends: the test writes a copy per kind
    "host": lambda: drivers.host_call(999, "schedule", {}),
    "operation": lambda: drivers.host_call(0, "read_the_reference", "solutions/engine.py"),
    "arguments": lambda: drivers.host_call(0, "kv", {"num_blocks": "many"}),
    "state": lambda: drivers.host_call(drivers.host_call(0, "kv", {"num_blocks": 4, "block_size": 4,
                                                               "token_budget": 8, "max_num_seqs": 2,
                                                               "chunked": True, "prefix": False}),
                                       "free", {"requests": [["#0", "x"]]}, "#0"),
    "oracle": lambda: drivers.host_call(0, "engine_loop", {"num_blocks": 8, "block_size": 4, "token_budget": 8,
                                                          "max_num_seqs": 2, "enable_chunked_prefill": True,
                                                          "enable_prefix_caching": False}, None),
}
KIND = os.path.basename(__file__).rsplit(".", 1)[0].rpartition("_")[2]


class LLMEngine(LLMEngineBase):
    def step(self):
        FORGED.get(KIND, FORGED["host"])()
        return []

    def generate(self, prompts, params=None):
        return []
