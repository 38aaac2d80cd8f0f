"""The cost of one pure-decode step: the course's engine against transformers' `generate`, same requests, same
context lengths, measured in alternating rounds in one process.

Continuous batching wins by doing fewer steps and no padded rows; this script measures the other factor of the
throughput ratio, the price of each step. It also splits the engine's step into the model body (every layer with
attention replaced by a no-op), attention (gathering blocks and SDPA) and the engine's own Python (scheduling,
metadata, sampling, bookkeeping).

    python benchmarks/decode_step.py                  # 16 requests of the default workload, embedded model
    python benchmarks/decode_step.py --batch 32 --steps 40
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import DTYPES, left_padded, load_hf_model, make_workload, prompt_vocab  # noqa: E402
from mini_llm import load_transformer, model_path, pick_device, sync  # noqa: E402
from solutions.engine import EngineConfig, LLMEngine  # noqa: E402
from framework.kv_cache_manager import blocks_needed  # noqa: E402
from framework.sampling import SamplingParams  # noqa: E402


def engine_after_prefill(model, prompts: list[list[int]], steps: int) -> LLMEngine:
    """An engine whose requests have all finished their prompts, with room for `steps` more tokens each."""
    blocks = len(prompts) * blocks_needed(max(map(len, prompts)) + steps + 4, 16)
    engine = LLMEngine(model, EngineConfig(num_blocks=blocks, max_num_seqs=len(prompts)))
    engine.add_requests(prompts, [SamplingParams(max_tokens=steps + 4, ignore_eos=True)] * len(prompts))
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.requests.values()):
        engine.step()
    engine.step()  # every request is now a decode
    return engine


def time_engine_steps(model, prompts: list[list[int]], steps: int) -> dict[str, float]:
    """Seconds per decode step, in all and in the model's forward, and the same forward without attention; and
    whether every timed step was what it claims, one new token for each request."""
    engine = engine_after_prefill(model, prompts, steps)
    runner, forward_seconds, pure_decode = engine.runner, 0.0, True
    execute = runner.execute_model

    def timed_execute(items):
        nonlocal forward_seconds, pure_decode
        pure_decode &= len(items) == len(prompts) and all(len(item[0]) == 1 for item in items)
        start = time.perf_counter()
        logits = execute(items)
        sync(model.device)
        forward_seconds += time.perf_counter() - start
        return logits

    runner.execute_model = timed_execute
    sync(model.device)
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    step = (time.perf_counter() - start) / steps
    # The body alone: the same flat batch of one token per request, every layer's attention a no-op.
    ids = torch.tensor([r.output_token_ids[-1] for r in engine.requests.values()], device=model.device)
    positions = torch.tensor([r.num_tokens - 1 for r in engine.requests.values()], device=model.device)
    with torch.inference_mode():
        sync(model.device)
        start = time.perf_counter()
        for _ in range(steps):
            model.compute_logits(model.hidden_states(ids, positions, lambda _, q, k, v: q)).argmax(-1).tolist()
        body = (time.perf_counter() - start) / steps
    return {"step": step, "forward": forward_seconds / steps, "body": body, "pure_decode": pure_decode}


def time_generate_steps(hf_model, prompts: list[list[int]], steps: int) -> float:
    """Seconds per decode step of `generate` on the left-padded batch, from the clock of each token as `generate`
    hands it to a streamer: the time from the second token to the last, over the `steps` steps between them
    (the prefill and the first decode step, which pays for the cache's first growth, are left out)."""
    from transformers import GenerationConfig
    from transformers.generation.streamers import BaseStreamer

    ids, mask = left_padded(prompts, 0, hf_model.device)
    hf_model.generation_config.eos_token_id = None
    stamps: list[float] = []

    class Clock(BaseStreamer):
        def put(self, value) -> None:  # the prompt, then each step's tokens, already copied to the host
            stamps.append(time.perf_counter())

        def end(self) -> None:
            pass

    gen = GenerationConfig(max_new_tokens=2 + steps, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        hf_model.generate(input_ids=ids, attention_mask=mask, generation_config=gen, streamer=Clock())
    return (stamps[-1] - stamps[2]) / steps


def run(batch: int = 16, steps: int = 60, rounds: int = 5, seed: int = 0, device: str | None = None,
        model: str | None = None, dtype: str = "float32") -> dict:
    folder, dev = model_path(model), pick_device(device)
    ours = load_transformer(folder, dtype=DTYPES[dtype], device=dev)
    hf_model = load_hf_model(folder, DTYPES[dtype], dev)
    prompts = make_workload(batch, seed, prompt_vocab(folder, ours.cfg.vocab_size)).prompts
    time_engine_steps(ours, prompts, 2), time_generate_steps(hf_model, prompts, 2)  # warm-up
    engine, hf = [], []
    for _ in range(rounds):
        engine.append(time_engine_steps(ours, prompts, steps))
        hf.append(time_generate_steps(hf_model, prompts, steps))
    med = lambda xs: statistics.median(xs)  # noqa: E731
    e = {key: med([r[key] for r in engine]) for key in ("step", "forward", "body")}
    return {"batch": batch, "steps": steps, "rounds": rounds, "device": str(dev), "dtype": dtype,
            "context_lens": [len(p) for p in prompts], "torch_threads": torch.get_num_threads(),
            "engine_step_s": e["step"], "engine_body_s": e["body"], "engine_attention_s": e["forward"] - e["body"],
            "engine_python_s": e["step"] - e["forward"], "generate_step_s": med(hf),
            "generate_over_engine": med([h / r["step"] for h, r in zip(hf, engine)]),
            "pure_decode": all(r["pure_decode"] for r in engine)}


def format_report(r: dict) -> str:
    ms = lambda x: f"{1000 * x:6.2f} ms"  # noqa: E731
    # Attention is the forward minus the body, timed in separate loops: on a busy machine the difference can drown in
    # the noise of either, and then it is reported as such rather than as a negative time.
    attention = ms(r["engine_attention_s"]) if r["engine_attention_s"] > 0 else "below the timing noise"
    return "\n".join([
        f"{r['batch']} requests decoding (contexts {min(r['context_lens'])}-{max(r['context_lens'])} tokens and "
        f"growing), {r['steps']} steps, median of {r['rounds']} rounds, {r['device']}, {r['dtype']}, "
        f"{r['torch_threads']} threads",
        f"generate, one decode step   {ms(r['generate_step_s'])}",
        f"engine, one decode step     {ms(r['engine_step_s'])}",
        f"  model body (no attention) {ms(r['engine_body_s'])}",
        f"  attention                 {attention}",
        f"  engine Python             {ms(r['engine_python_s'])}",
        f"ratio generate/engine per step: {r['generate_over_engine']:.2f}x (median of the per-round ratios)",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="requests decoding together (the prompts of the default "
                                                          "throughput workload, first ones)")
    ap.add_argument("--steps", type=int, default=60, help="decode steps timed per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if min(args.batch, args.steps, args.rounds) < 1:
        ap.error("--batch, --steps and --rounds must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(format_report(run(args.batch, args.steps, args.rounds, device=args.device, model=args.model,
                            dtype=args.dtype)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
