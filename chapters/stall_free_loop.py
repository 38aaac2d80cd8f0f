"""An engine loop written around a stall-free scheduler, in this course's names.

Chapter 6 asks you to find its bug: it schedules well (decodes first, then prompt chunks, within the token
budget), yet only one sequence advances per step. Grade it like a solution of exercise 130 to see the judge's
diagnosis: `python practice/judge.py 130 --impl chapters/stall_free_loop.py --unisolated`. Its scheduler, KV-cache
manager and model runner are the course's (`course.use`: yours where your exercises passed); the judge plugs in
its own.
"""

from __future__ import annotations

import course
from framework.engine import LLMEngineBase, RequestOutput, stop_reason
from framework.sampling import sample_token


class LLMEngine(LLMEngineBase):
    scheduler_cls = course.use("scheduler").Scheduler
    runner_cls = course.use("model_runner").ModelRunner
    kv_cache_manager_cls = course.use("kv_cache_manager").KVCacheManager

    def step(self) -> list[RequestOutput]:
        sched = self.scheduler.schedule()  # stall-free: decodes, then prompt chunks, then new requests
        if not sched.scheduled:
            return []
        s = sched.scheduled[-1]
        request, completes = s.request, s.completes_prompt
        start = request.num_computed_tokens
        tokens = request.all_token_ids[start:start + s.num_new_tokens]
        logits = self.runner.execute_model([(tokens, start, request.block_table, completes)])
        request.num_computed_tokens += s.num_new_tokens
        if not completes:
            return []
        token = sample_token(logits[0], request.sampling_params, request.generator)
        request.output_token_ids.append(token)
        reason = stop_reason(request, self.eos_token_id, self.tokenizer)
        if reason:
            self.scheduler.finish(request, reason)
        return [self.make_output(request, [token])]

    def generate(self, prompts, params=None) -> list[RequestOutput]:
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]
