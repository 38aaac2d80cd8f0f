"""Structured output on the default workload: one request in four constrained by a JSON schema.

The workload of benchmarks/throughput.py (seeded prompt and output lengths, end-of-sequence ignored) runs on the
reference engine with structured outputs (solutions/structured_output.py), with speculation off and on. Every
finished constrained output is checked: one that stopped must parse and validate against the schema
(jsonschema), one cut by max_tokens must be a prefix the grammar accepts. In the same run it reports the time of
the mask (filling the bitmask and applying it: `mask_seconds`) against the time of the steps, and the same workload
without constraints, side by side; and what compiling the schema cost, once and from the cache.

    python benchmarks/structured_output.py                       # 64 requests, embedded model, CPU, fp32
    python benchmarks/structured_output.py --num-requests 16 --threads 1

With llguidance installed, it also compares it with xgrammar on the same schema: compile time and the time to fill
one token's mask, in this process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.measure import make_workload, prompt_vocab  # noqa: E402
from framework.engine import EngineConfig  # noqa: E402
from framework.sampling import SamplingParams, StructuredOutputsParams  # noqa: E402
from framework.spec_decode import SpeculativeConfig  # noqa: E402
from framework.structured_output import GrammarCompiler, structured_engine  # noqa: E402
from mini_llm import load_tokenizer, load_transformer, pick_device, sync  # noqa: E402
from mini_llm.settings import model_path  # noqa: E402
from solutions import structured_output as so  # noqa: E402
from solutions.engine import LLMEngine  # noqa: E402
from solutions.spec_decode import SpecDecodeEngine  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "pets": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                    "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": False}


def run(model, tokenizer, workload, speculative: bool, constrained_every: int | None) -> dict:
    """One pass of the workload; step and mask times, and the constrained outputs with how they ended."""
    base = SpecDecodeEngine if speculative else LLMEngine
    engine = structured_engine(base, so.apply_grammar_bitmask, so.update_grammar)(
        model, EngineConfig(num_blocks=2048, max_num_seqs=16, token_budget=256,
                            speculative=SpeculativeConfig() if speculative else None), tokenizer)
    constraint = StructuredOutputsParams(json=SCHEMA)
    params = [SamplingParams(max_tokens=n, ignore_eos=True,
                             structured_outputs=constraint if constrained_every and i % constrained_every == 0
                             else None) for i, n in enumerate(workload.output_lens)]
    requests = engine.add_requests(workload.prompts, params)
    step_seconds, steps = 0.0, 0
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        engine.step()
        sync(model.device)
        step_seconds += time.perf_counter() - start
        steps += 1
    constrained = [r for r, p in zip(requests, params) if p.structured_outputs is not None]
    return {"steps": steps, "step_seconds": step_seconds, "mask_seconds": engine.mask_seconds,
            "tokens": sum(len(r.output_token_ids) for r in requests),
            "checked": check(engine, constrained, constraint) if constrained else None}


def check(engine, requests, constraint) -> dict:
    """How the constrained requests ended; AssertionError if one's output does not meet the schema."""
    ended = {"stop": 0, "length": 0}
    for r in requests:
        ended[r.finish_reason] += 1
        tokens = r.output_token_ids
        grammar = engine.grammar_compiler.grammar(constraint)
        assert all(grammar.accept_token(t) for t in tokens), f"{r.request_id}: the grammar refuses its output"
        if r.finish_reason == "stop":
            text = engine.tokenizer.decode(tokens[:-1] if tokens[-1] == engine.eos_token_id else tokens)
            jsonschema.validate(json.loads(text), SCHEMA)
    return ended


def compile_costs(tokenizer, vocab_size: int, eos: int) -> dict:
    """Seconds to compile the schema, then to get it again from the cache."""
    compiler = GrammarCompiler.from_tokenizer(tokenizer, vocab_size, eos)
    constraint = StructuredOutputsParams(json=SCHEMA)
    start = time.perf_counter()
    compiler.compile(constraint)
    first = time.perf_counter() - start
    start = time.perf_counter()
    compiler.compile(constraint)
    return {"compile_ms": first * 1e3, "cached_ms": (time.perf_counter() - start) * 1e3}


def backends(tokenizer, vocab_size: int, eos: int) -> dict | None:
    """xgrammar against llguidance on SCHEMA, if llguidance is installed: compile time, and the time to fill one
    token's mask along a valid output."""
    try:
        import llguidance
        import llguidance.hf
        import llguidance.torch
    except ImportError:
        return None
    import xgrammar as xgr

    ids = tokenizer.encode(json.dumps({"name": "Lily", "age": 7, "pets": ["cat", "dog"]}))
    out = {}
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[eos])
    start = time.perf_counter()
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        json.dumps(SCHEMA), any_whitespace=False))
    out["xgrammar"] = {"compile_ms": (time.perf_counter() - start) * 1e3}
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    start = time.perf_counter()
    for t in ids:
        matcher.fill_next_token_bitmask(bitmask, 0)
        matcher.accept_token(t)
    out["xgrammar"]["mask_us_per_token"] = (time.perf_counter() - start) / len(ids) * 1e6
    lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos)
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_json_schema(
        SCHEMA, defaults={"whitespace_flexible": False}))
    out["llguidance"] = {"compile_ms": (time.perf_counter() - start) * 1e3}
    bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)
    start = time.perf_counter()
    for t in ids:
        llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)
        matcher.consume_token(t)
    out["llguidance"]["mask_us_per_token"] = (time.perf_counter() - start) / len(ids) * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_transformer(dtype=torch.float32, device=pick_device(args.device))
    tokenizer = load_tokenizer()
    workload = make_workload(args.num_requests, args.seed, prompt_vocab(model_path(), model.cfg.vocab_size))
    report = {"num_requests": args.num_requests, "constrained": (args.num_requests + 3) // 4,
              "compile": compile_costs(tokenizer, model.cfg.vocab_size, model.cfg.eos_token_id),
              "backends": backends(tokenizer, model.cfg.vocab_size, model.cfg.eos_token_id)}
    for speculative in (False, True):
        name = "speculation on" if speculative else "speculation off"
        free, constrained = (run(model, tokenizer, workload, speculative, every) for every in (None, 4))
        report[name] = {"unconstrained": free, "constrained": constrained}
        c = constrained
        print(f"{name}: {c['steps']} steps, {c['step_seconds']:.2f} s of steps; mask {c['mask_seconds']:.3f} s = "
              f"{100 * c['mask_seconds'] / c['step_seconds']:.1f}% of the steps' time; constrained outputs "
              f"{c['checked']} all valid; the same workload unconstrained: {free['step_seconds']:.2f} s "
              f"({c['step_seconds'] / free['step_seconds']:.2f}x)")
    print(f"compiling the schema: {report['compile']['compile_ms']:.2f} ms, from the cache "
          f"{report['compile']['cached_ms']:.3f} ms")
    for backend, figures in (report["backends"] or {}).items():
        print(f"{backend}: compile {figures['compile_ms']:.2f} ms, mask {figures['mask_us_per_token']:.1f} us/token")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
