"""Attack on 130's sandbox: a right engine that, at import, looks everywhere the worker can for the references of
the other exercises (the scheduler, KV-cache manager, block pool, prefix cache, preemption, model runner, batch,
paged attention, paged KV cache), and at its first step raises everything it found, with the text of what it
could read, into its report. Isolated, it must find nothing (and pass); unisolated (self-study, the checkout on
sys.path) it finds them, which shows the search works."""

import gc
import importlib.util
import os
import sys
import time

from framework.engine import LLMEngineBase, stop_reason
from framework.sampling import sample_token

FOUND = []


def _text_of(path):
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines() if len(ln.strip()) > 25]
    except OSError:
        return "unreadable"
    return " | ".join(lines[:40])


def _search():
    spec = importlib.util.find_spec("solutions")
    if spec is not None:
        FOUND.append(f"importable: solutions at {spec.origin or list(spec.submodule_search_locations or [])}")
    for name, mod in list(sys.modules.items()):
        if name.startswith("solutions") or "/solutions/" in str(getattr(mod, "__file__", "")):
            FOUND.append(f"module {name}: {_text_of(getattr(mod, '__file__', '') or '')}")
    for obj in gc.get_objects():
        try:
            code = getattr(obj, "__code__", None)
            where = getattr(code, "co_filename", "") if code is not None else ""
            module = str(getattr(obj, "__module__", ""))
        except Exception:  # noqa: BLE001 - objects whose attributes raise (lazy modules)
            continue
        if "/solutions/" in where or module.startswith("solutions"):
            FOUND.append(f"object {getattr(obj, '__qualname__', type(obj).__name__)} from {where}")
    if FOUND:  # enough to carry out already
        return
    deadline = time.monotonic() + 20
    for dirpath, dirnames, filenames in os.walk("/"):
        if time.monotonic() > deadline or len(FOUND) > 40:
            FOUND.append("walk cut short")
            break
        if dirpath.startswith(("/proc", "/sys", "/dev")) or dirpath.count(os.sep) > 10:
            dirnames[:] = []
            continue
        parts = dirpath.split(os.sep)
        if "solutions" in parts or ("judge" in parts and "hidden" in parts):
            for name in filenames:
                if name.endswith(".py"):
                    FOUND.append(f"file {os.path.join(dirpath, name)}: {_text_of(os.path.join(dirpath, name))}")


_search()


class LLMEngine(LLMEngineBase):
    def step(self):
        if FOUND:
            raise RuntimeError("FOUND " + " ;; ".join(FOUND))
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return []
        items = [(s.request.all_token_ids[s.request.num_computed_tokens:s.request.num_computed_tokens + s.num_new_tokens],
                  s.request.num_computed_tokens, s.request.block_table, s.completes_prompt) for s in sched.scheduled]
        logits = self.runner.execute_model(items)
        outputs, row = [], 0
        for s in sched.scheduled:
            r, done = s.request, s.completes_prompt
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
        return outputs

    def generate(self, prompts, params=None):
        requests = self.add_requests(prompts, params)
        while self.has_unfinished_requests():
            self.step()
        return [self.make_output(r, []) for r in requests]
