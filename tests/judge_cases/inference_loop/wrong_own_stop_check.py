"""Wrong: its own stop check (end-of-sequence, stop strings through the tokenizer, max_tokens) instead of stop_reason:
it never stops at a token of stop_token_ids.

EXPECT: is one of stop_token_ids
PUBLIC: caught
"""

from framework.engine import LLMEngineBase, RequestOutput, stop_reason
from framework.sampling import SamplingParams, sample_token


class LLMEngine(LLMEngineBase):
    def step(self):
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return []
        items = [(s.request.all_token_ids[s.request.num_computed_tokens:
                                          s.request.num_computed_tokens + s.num_new_tokens],
                  s.request.num_computed_tokens, s.request.block_table, s.completes_prompt) for s in sched.scheduled]
        logits = self.runner.execute_model(items)
        outputs, row = [], 0
        for s in sched.scheduled:
            request, sampled = s.request, s.completes_prompt
            request.num_computed_tokens += s.num_new_tokens
            if not sampled:
                continue
            token = sample_token(logits[row], request.sampling_params, request.generator)
            row += 1
            request.output_token_ids.append(token)
            reason = self._why(request, token)
            if reason:
                self.scheduler.finish(request, reason)
            outputs.append(self.make_output(request, [token]))
        return outputs

    def _why(self, request, token):
        p = request.sampling_params
        if token == self.eos_token_id and not p.ignore_eos:
            return 'stop'
        if p.stop and self.tokenizer is not None:
            text = self.tokenizer.decode(request.output_token_ids)
            if any(s in text for s in p.stop):
                return 'stop'
        if len(request.output_token_ids) >= p.max_tokens:
            return 'length'
        return None

    def generate(self, prompts, params=None):
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]
