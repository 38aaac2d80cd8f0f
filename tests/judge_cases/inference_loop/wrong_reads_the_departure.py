"""Cheat: no engine loop of its own. It learns the forward pass's items and the finish reasons from the departures
the grader answers bogus calls with, then makes those calls. A departure carries no call (the grader keeps the
call expected to itself) and is final.

EXPECT: your engine called self.scheduler.probe()
PUBLIC: caught
"""
from framework.engine import LLMBase, LLMEngineBase, RequestOutput, stop_reason  # noqa: F401
from framework.sampling import SamplingParams, sample_token  # noqa: F401
from judge.drivers.rounds import Departure

from practice.kv_cache_manager import KVCacheManager  # noqa: F401
from practice.model_runner import ModelRunner  # noqa: F401
from practice.scheduler import Scheduler  # noqa: F401


def peek(parts):
    try:
        parts.post({"op": "probe", "args": [], "reads": {}})
    except Departure:
        exp = parts.departure["expected"]
        parts.departure = None
        return exp
    raise RuntimeError("probe accepted")


class LLMEngine(LLMEngineBase):
    scheduler_cls = Scheduler
    runner_cls = ModelRunner
    kv_cache_manager_cls = KVCacheManager

    def step(self):
        parts = self._judge_run.parts
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return []
        exp = peek(parts)
        items = [tuple(it) for it in exp["args"][0]]          # the reference engine's items, verbatim
        logits = self.runner.execute_model(items)
        outs, row = [], 0
        for s, it in zip(sched.scheduled, items):
            r = s.request
            r.num_computed_tokens += s.num_new_tokens
            if not it[3]:
                continue
            p = r.sampling_params
            tok = int(logits[row].argmax()) if p.temperature == 0 else sample_token(logits[row], p, r.generator)
            row += 1
            r.output_token_ids.append(tok)
            nxt = peek(parts)                                 # does the reference finish it now, and why?
            if nxt and nxt["op"] == "finish" and nxt["args"][0] == parts.name_of(r):
                self.scheduler.finish(r, nxt["args"][1])
            outs.append(self.make_output(r, [tok]))
        return outs

    def generate(self, prompts, params=None):
        reqs = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in reqs]


class LLM(LLMBase):
    engine_cls = LLMEngine
