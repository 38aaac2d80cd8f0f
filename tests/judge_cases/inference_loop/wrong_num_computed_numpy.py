"""Wrong: num_computed_tokens advanced by a numpy int (the right value, but a step trace or a server cannot write it as
JSON).
EXPECT: after the step: an int
PUBLIC: caught
"""

import numpy as np

from framework.engine import LLMEngineBase, stop_reason
from framework.sampling import sample_token


class LLMEngine(LLMEngineBase):
    def _items(self, scheduled):
        out = []
        for s in scheduled:
            r, n = s.request, s.num_new_tokens
            tokens = r.all_token_ids[r.num_computed_tokens:][:n]
            out.append((tokens, r.num_computed_tokens, list(r.block_table), s.completes_prompt))
        return out

    def step(self):
        scheduled = self.scheduler.schedule().scheduled
        if len(scheduled) == 0:
            return []
        items = self._items(scheduled)
        logits = self.runner.execute_model(items)
        sampling = [i for i, item in enumerate(items) if item[3]]
        greedy = logits.argmax(dim=-1).tolist()
        for s in scheduled:
            s.request.num_computed_tokens += np.int64(s.num_new_tokens)
        outputs = []
        for row, i in enumerate(sampling):
            r = scheduled[i].request
            p = r.sampling_params
            token = greedy[row] if p.temperature == 0 else sample_token(logits[row], p, r.generator)
            r.output_token_ids.append(token)
            why = stop_reason(r, self.eos_token_id, self.tokenizer)
            if why is not None:
                self.scheduler.finish(r, why)
            outputs.append(self.make_output(r, [token]))
        return outputs

    def generate(self, prompts, params=None):
        ids = [r.request_id for r in self.add_requests(prompts, params)]
        final = {}
        while self.has_unfinished_requests():
            for out in self.step():
                if out.finished:
                    final[out.request_id] = self.make_output(self.requests[out.request_id], [])
        return [final[i] for i in ids]
