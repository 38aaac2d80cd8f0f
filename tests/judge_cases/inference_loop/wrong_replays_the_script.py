"""Cheat: no engine loop. It searches the worker (every object the garbage collector tracks) for the reference
engine's recorded calls of its parts, then makes them: the forward pass is sent the recorded items, the requests
the recording finishes are finished with its reasons, and generate steps while recorded calls are left. The worker
never holds a recorded call before the learner's code has made it, so it finds nothing to replay and never runs the
model.

EXPECT: step ran the model 0 times
PUBLIC: caught
"""

import gc
import warnings
from collections import deque

from framework.engine import LLMEngineBase
from framework.sampling import sample_token

NO_CALLS: deque = deque()


def recorded(engine):
    """The recorded calls still to make by the parts of `engine` (those whose holder holds its scheduler), and its
    requests by name; the holder is searched for once."""
    holder = engine.__dict__.get("_holder") or holder_of(engine)
    if holder is None:
        return NO_CALLS, {}
    engine._holder = holder
    return holder["script"].entries, holder["requests"]


def holder_of(engine):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                found = vars(obj)
            except Exception:  # no __dict__, or one that refuses to be read
                continue
            script = found.get("script")
            if found.get("scheduler") is engine.scheduler and isinstance(getattr(script, "entries", None), deque):
                return found
    return None


class LLMEngine(LLMEngineBase):
    def step(self):
        calls, requests = recorded(self)
        sched = self.scheduler.schedule()
        if not calls or calls[0]["call"][0] != "execute_model":
            return []
        items = calls[0]["call"][1]
        logits = self.runner.execute_model(items)
        got, row = [], 0
        for s, item in zip(sched.scheduled, items):
            s.request.num_computed_tokens += s.num_new_tokens
            if item[3]:  # the recorded item needs logits: its request samples this step
                s.request.output_token_ids.append(sample_token(logits[row], s.request.sampling_params,
                                                               s.request.generator))
                got.append(s.request)
                row += 1
        while calls and calls[0]["call"][0] == "finish":
            _, name, reason = calls[0]["call"]
            self.scheduler.finish(requests[name], reason)
        return [self.make_output(r, [r.output_token_ids[-1]]) for r in got]

    def generate(self, prompts, params=None):
        added = self.add_requests(prompts, params)
        while recorded(self)[0]:
            self.step()
        return [self.make_output(r, []) for r in added]
