"""Attack on 130: no engine at all. The public driver is replaced at import: generate answers with each prompt
generated alone (right tokens, no steps), and the final state says everything finished and every block is free."""

import judge.drivers.engine as drv
import mini_llm
from framework.engine import LLMEngineBase


def fake_generate(impl, run, prompts, params):
    model = drv.load_model()
    plist = params if isinstance(params, list) else [params] * len(prompts)
    outs = []
    for i, (prompt, p) in enumerate(zip(prompts, plist)):
        sp = drv.params_of(p)
        eos = None if sp.ignore_eos else run.engine.eos_token_id
        tokens = mini_llm.generate(model, prompt, sp.max_tokens, eos_token_id=eos)
        outs.append({"request_id": f"#{i}", "prompt_token_ids": list(prompt), "new_token_ids": [], "finished": True,
                     "token_ids": list(tokens), "finish_reason": "length"})
    return {"outputs": outs, "steps": []}


def fake_final(impl, run):
    return {"unfinished": False, "free": run.engine.config.num_blocks, "requests": []}


drv.generate, drv.final = fake_generate, fake_final


class LLMEngine(LLMEngineBase):
    def step(self):
        return []
