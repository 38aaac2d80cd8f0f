# VIOLATES: If `stop_reason(...)` gives a reason, `self.scheduler.finish(request, reason)`, the finished requests in scheduled order
"""Finishes a request when stop_reason gives a reason, but always with the reason 'length'."""
from framework.engine import LLMEngineBase, stop_reason
from framework.sampling import sample_token


class LLMEngine(LLMEngineBase):
    def _items(self, work):
        items = []
        for s in work:
            req = s.request
            start = req.num_computed_tokens
            tokens = req.all_token_ids[start:start + s.num_new_tokens]
            items.append((tokens, start, req.block_table, s.completes_prompt))
        return items

    def step(self):
        work = list(self.scheduler.schedule().scheduled)
        if not work:
            return []
        items = self._items(work)
        logits = self.runner.execute_model(items)
        for s in work:
            s.request.num_computed_tokens += s.num_new_tokens
        rows = iter(logits)
        outputs = []
        for s, item in zip(work, items):
            if not item[3]:
                continue
            req = s.request
            token = sample_token(next(rows), req.sampling_params, req.generator)
            req.output_token_ids.append(token)
            why = stop_reason(req, self.eos_token_id, self.tokenizer)
            if why:
                self.scheduler.finish(req, "length")
            outputs.append(self.make_output(req, [token]))
        return outputs

    def generate(self, prompts, params=None):
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(req, []) for req in requests]
