"""Wrong: step returns its outputs as a tuple, not the list of RequestOutput the statement fixes. The public cases
read "outputs: expected [...], got None" with an unrelated hint.

EXPECT: a list of RequestOutput
PUBLIC: caught
"""

from framework.engine import LLMEngineBase, stop_reason
from framework.sampling import sample_token


class LLMEngine(LLMEngineBase):
    def step(self):
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return []
        items = []
        for s in sched.scheduled:
            r = s.request
            start = r.num_computed_tokens
            items.append((r.all_token_ids[start:start + s.num_new_tokens], start, r.block_table, s.completes_prompt))
        logits = self.runner.execute_model(items)
        outputs, row = [], 0
        for s in sched.scheduled:
            r = s.request
            done = s.completes_prompt
            r.num_computed_tokens += s.num_new_tokens
            if not done:
                continue
            token = sample_token(logits[row], r.sampling_params, r.generator)
            row += 1
            r.output_token_ids.append(token)
            reason = stop_reason(r, self.eos_token_id, self.tokenizer)
            if reason:
                self.scheduler.finish(r, reason)
            outputs.append(self.make_output(r, [token]))
        return tuple(outputs)

    def generate(self, prompts, params=None):
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]
