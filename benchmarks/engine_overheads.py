"""Two costs of the engine's bookkeeping, each against the simple way, in alternating rounds in one process.

1. Output text with stop strings. The simple way decodes the whole output after every token, twice (the stop
   check and the output), O(length) per token. The engine decodes only the tail (`IncrementalDetokenizer` in
   framework/request.py). Timed alone, over the tokens of one long greedy output, and end to end in `generate`.
2. `engine.requests`. The simple way keeps every request ever added; the engine keeps at most
   `max_finished_requests` finished ones. Measured as the requests and bytes still held after many small calls,
   and their time.

    python benchmarks/engine_overheads.py                       # embedded model, CPU
    python benchmarks/engine_overheads.py --tokens 2000 --rounds 7
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mini_llm  # noqa: E402
import solutions.engine as engine_mod  # noqa: E402
from framework.engine import LLMEngineBase, stop_reason  # noqa: E402
from framework.request import Request  # noqa: E402
from framework.sampling import SamplingParams  # noqa: E402
from mini_llm.prompts import STANDARD_PROMPTS  # noqa: E402

STOPS = ["\x00never"]  # a stop string that never appears: every token pays the check


def full_decode_stop_reason(request: Request, eos_token_id: int | None, tokenizer=None) -> str | None:
    """The simple way: decode the whole output and search all of it, after every token."""
    params = request.sampling_params
    if request.output_token_ids[-1] == eos_token_id and not params.ignore_eos:
        return "stop"
    if params.stop and tokenizer is not None:
        if any(s in tokenizer.decode(request.output_token_ids) for s in params.stop):
            return "stop"
    return "length" if len(request.output_token_ids) >= params.max_tokens else None


def full_decode_make_output(self, request: Request, new_token_ids: list[int]):
    text = self.tokenizer.decode(request.output_token_ids) if self.tokenizer is not None else ""
    completion = engine_mod.CompletionOutput(list(request.output_token_ids), text, request.finish_reason)
    return engine_mod.RequestOutput(request.request_id, request.prompt_token_ids, new_token_ids, [completion],
                                   request.is_finished, request.error)


def text_path_seconds(tokens: list[int], tokenizer, incremental: bool) -> float:
    """The per-token text work of one request (stop check, then output), over all its tokens."""
    shell = SimpleNamespace(tokenizer=tokenizer)
    check, output = (stop_reason, LLMEngineBase.make_output) if incremental else (
        full_decode_stop_reason, full_decode_make_output)
    request = Request([1], SamplingParams(max_tokens=len(tokens), stop=STOPS, ignore_eos=True))
    start = time.perf_counter()
    for token in tokens:
        request.output_token_ids.append(token)
        check(request, None, tokenizer)
        text = output(shell, request, [token]).outputs[0].text
    seconds = time.perf_counter() - start
    assert text == tokenizer.decode(tokens)
    return seconds


def generate_seconds(llm, prompts: list[list[int]], max_tokens: int, incremental: bool) -> tuple[float, list]:
    """End to end: `generate` with a stop string that never matches, the simple way patched in for `before`."""
    saved = engine_mod.stop_reason, engine_mod.LLMEngine.make_output
    if not incremental:
        engine_mod.stop_reason, engine_mod.LLMEngine.make_output = full_decode_stop_reason, full_decode_make_output
    try:
        engine = engine_mod.LLMEngine(llm.model, engine_mod.EngineConfig(num_blocks=1024), llm.tokenizer)
        start = time.perf_counter()
        outs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, stop=STOPS, ignore_eos=True))
        return time.perf_counter() - start, [o.outputs[0].text for o in outs]
    finally:
        engine_mod.stop_reason, engine_mod.LLMEngine.make_output = saved


def requests_map(model, calls: int, keep: int, measure_memory: bool) -> tuple[float, int, int]:
    """`calls` generate calls of 16 one-token requests: seconds, requests held, and bytes still allocated."""
    engine = engine_mod.LLMEngine(model, engine_mod.EngineConfig(max_finished_requests=keep))
    prompts = [[(7 * i + j) % model.cfg.vocab_size for j in range(8)] for i in range(16)]
    if measure_memory:
        tracemalloc.start()
    start = time.perf_counter()
    for _ in range(calls):
        engine.generate(prompts, SamplingParams(max_tokens=1))
    seconds = time.perf_counter() - start
    held = 0
    if measure_memory:
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    return seconds, len(engine.requests), held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1000, help="output length for the text measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=8, help="requests in the end-to-end generate")
    parser.add_argument("--calls", type=int, default=400, help="generate calls of 16 requests for the map")
    args = parser.parse_args()
    torch.manual_seed(0)
    llm = engine_mod.LLM(dtype=torch.float32, device="cpu")
    prompt = llm.tokenizer.encode(STANDARD_PROMPTS[0])
    tokens = mini_llm.generate(llm.model, prompt, args.tokens)  # a real output: text with multi-byte pieces too
    prompts = [llm.tokenizer.encode(p) for p in (STANDARD_PROMPTS * args.requests)[: args.requests]]
    max_tokens = min(args.tokens, llm.model.cfg.max_position_embeddings - max(map(len, prompts)))

    text, e2e, outputs = {True: [], False: []}, {True: [], False: []}, {}
    for _ in range(args.rounds):
        for incremental in (False, True):
            text[incremental].append(text_path_seconds(tokens, llm.tokenizer, incremental))
            seconds, outputs[incremental] = generate_seconds(llm, prompts, max_tokens, incremental)
            e2e[incremental].append(seconds)
    assert outputs[True] == outputs[False], "the two ways gave different text"
    med = {k: statistics.median(v) for k, v in text.items()}
    print(f"text path, {len(tokens)} tokens, {args.rounds} rounds: full decode {med[False] * 1e3:.1f} ms "
          f"(rounds {', '.join(f'{s * 1e3:.0f}' for s in text[False])}), incremental {med[True] * 1e3:.1f} ms "
          f"(rounds {', '.join(f'{s * 1e3:.0f}' for s in text[True])}): {med[False] / med[True]:.1f}x")
    med = {k: statistics.median(v) for k, v in e2e.items()}
    print(f"generate, {len(prompts)} requests x {max_tokens} tokens, stop={STOPS!r}: full decode {med[False]:.2f} s "
          f"(rounds {', '.join(f'{s:.2f}' for s in e2e[False])}), incremental {med[True]:.2f} s "
          f"(rounds {', '.join(f'{s:.2f}' for s in e2e[True])}); identical text")

    keep_all, bounded = 10**9, engine_mod.EngineConfig().max_finished_requests
    times = {keep_all: [], bounded: []}
    for _ in range(args.rounds):
        for keep in (keep_all, bounded):
            times[keep].append(requests_map(llm.model, args.calls, keep, measure_memory=False)[0])
    for keep, name in ((keep_all, "keep every request"), (bounded, f"max_finished_requests={bounded}")):
        _, held, nbytes = requests_map(llm.model, args.calls, keep, measure_memory=True)
        print(f"engine.requests, {args.calls} calls x 16 requests, {name}: {held} requests held, "
              f"{nbytes / 2**20:.1f} MiB still allocated; median {statistics.median(times[keep]):.2f} s "
              f"(rounds {', '.join(f'{s:.2f}' for s in times[keep])})")


if __name__ == "__main__":
    main()
