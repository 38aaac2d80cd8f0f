# EXERCISE: 130
"""Exercise 130 from framework/spec_decode.py: its speculating engine's `step`, as it is now, on the framework's
shell, with no drafts. The glue: a `verify_and_update` for a request without drafts (sample one token, append it,
check the stop conditions), items cut to the four fields `execute_model` takes, and `generate`.
"""

from framework.engine import LLMEngineBase, stop_reason
from framework.sampling import sample_token
from framework.spec_decode import SpecDecodeEngineMixin


def one_token(request, draft_token_ids, logits, eos_token_id, tokenizer=None):
    token = sample_token(logits[0], request.sampling_params, request.generator)
    request.output_token_ids.append(token)
    request.num_computed_tokens += 1
    return [token], stop_reason(request, eos_token_id, tokenizer)


class LLMEngine(SpecDecodeEngineMixin, LLMEngineBase):
    verify_and_update = staticmethod(one_token)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        execute = self.runner.execute_model
        self.runner.execute_model = lambda items: execute([item[:4] for item in items])

    def generate(self, prompts, params=None):
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]
