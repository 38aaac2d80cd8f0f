"""mini_llm and the course's engine against transformers' Qwen3ForCausalLM on the same weights, in each dtype: the
largest logit difference, measured, on a random checkpoint of a real model's shape (default: Qwen3-0.6B's, see
benchmarks/shapes.py) or on any checkpoint folder.

Two paths of the course are compared with transformers' forward pass:
  * forward  `mini_llm.Transformer` on whole prompts (plain causal attention);
  * engine   the reference `ModelRunner` on a mixed batch: step 1 prefills prompt A and a first chunk of prompt B,
             step 2 decodes A's next token beside B's second chunk, through the paged KV cache.
In fp32 the largest difference must stay within `--fp32-tol`; in bf16 it is reported (two implementations round
differently), with how often the argmax agrees.

    python benchmarks/against_transformers.py                                # 0.6B shape, fp32 and bf16
    python benchmarks/against_transformers.py --device cuda
    python benchmarks/against_transformers.py --model ~/models/Qwen3-0.6B --dtypes bfloat16
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import DTYPES, checkpoint_folder, load_hf_model  # noqa: E402
from benchmarks.shapes import SHAPES  # noqa: E402
from mini_llm import load_transformer, pick_device  # noqa: E402
from solutions.model_runner import ModelRunner  # noqa: E402

FP32_TOL = 1e-3  # absolute, on logits of magnitude ~3: the same sums in another order, over every layer


def prompts_for(vocab_size: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Prompt A (40 tokens) and prompt B (70 tokens), from a seeded generator, below the tokenizer's range."""
    g = torch.Generator().manual_seed(seed)
    high = min(vocab_size, 1500)
    return (torch.randint(1, high, (40,), generator=g).tolist(), torch.randint(1, high, (70,), generator=g).tolist())


def compare(folder: Path, dtype: torch.dtype, device: torch.device) -> dict:
    ours = load_transformer(folder, dtype=dtype, device=device)
    hf = load_hf_model(folder, dtype, device)
    a, b = prompts_for(ours.cfg.vocab_size)
    with torch.inference_mode():
        ref = {name: hf(torch.tensor([p], device=device)).logits[0].float() for name, p in (("a", a), ("b", b))}
        forward = {name: ours(torch.tensor([p], device=device))[0].float() for name, p in (("a", a), ("b", b))}
        # The engine: A whole and B's first 30 tokens, then A's next token (greedy, from step 1) and B's rest.
        runner = ModelRunner(ours, num_blocks=16, block_size=16)
        step1 = runner.execute_model([(a, 0, [0, 1, 2], True), (b[:30], 0, [3, 4, 5, 6, 7], False)])
        a_next = int(step1[0].argmax())
        step2 = runner.execute_model([([a_next], len(a), [0, 1, 2], True), (b[30:], 30, [3, 4, 5, 6, 7], True)])
        ref_a_next = hf(torch.tensor([a + [a_next]], device=device)).logits[0, -1].float()
    engine = torch.stack([step1[0], step2[0], step2[1]])
    engine_ref = torch.stack([ref["a"][-1], ref_a_next, ref["b"][-1]])
    forward_all, ref_all = torch.cat([forward["a"], forward["b"]]), torch.cat([ref["a"], ref["b"]])
    result = {
        "dtype": str(dtype).removeprefix("torch."), "positions": forward_all.shape[0],
        "max_abs_logit": ref_all.abs().max().item(),
        "forward_max_diff": (forward_all - ref_all).abs().max().item(),
        "forward_argmax_agree": (forward_all.argmax(-1) == ref_all.argmax(-1)).float().mean().item(),
        "engine_max_diff": (engine - engine_ref).abs().max().item(),
        "engine_rows": engine.shape[0],
        "engine_argmax_agree": int((engine.argmax(-1) == engine_ref.argmax(-1)).sum()),
        "finite": bool(torch.isfinite(forward_all).all() and torch.isfinite(engine).all()),
    }
    del ours, hf, runner
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES), help="random weights of this shape")
    ap.add_argument("--shape-layers", type=int, default=None, help="with --shape: this many layers (default all)")
    ap.add_argument("--model", default=None, help="a checkpoint folder instead of --shape")
    ap.add_argument("--device", default=None, help="default: $MINI_LLM_DEVICE, else CUDA if available, else CPU")
    ap.add_argument("--dtypes", default="float32,bfloat16", help=f"comma-separated, from {', '.join(DTYPES)}")
    ap.add_argument("--fp32-tol", type=float, default=FP32_TOL)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    dtypes = args.dtypes.split(",")
    if not set(dtypes) <= set(DTYPES):
        ap.error(f"--dtypes {args.dtypes}: choose from {', '.join(DTYPES)}")
    device = pick_device(args.device)
    overrides = {} if args.shape_layers is None else {"num_hidden_layers": args.shape_layers}
    shape = None if args.model else args.shape
    with checkpoint_folder(args.model, shape, overrides) as folder:
        results = [compare(folder, DTYPES[d], device) for d in dtypes]
    what = args.model or f"random {args.shape}" + (f", {args.shape_layers} layers" if args.shape_layers else "")
    print(f"{what}, {device}; logits of transformers' Qwen3ForCausalLM against:")
    ok = True
    for r in results:
        print(f"  {r['dtype']:9s} mini_llm forward: max |diff| {r['forward_max_diff']:.3e}, argmax agrees at "
              f"{r['forward_argmax_agree']:.0%} of {r['positions']} positions; engine (paged, mixed batch): max |diff| "
              f"{r['engine_max_diff']:.3e}, argmax agrees at {r['engine_argmax_agree']} of "
              f"{r['engine_rows']} rows (largest |logit| "
              f"{r['max_abs_logit']:.2f})")
        ok &= r["finite"]
        if r["dtype"] == "float32":
            ok &= max(r["forward_max_diff"], r["engine_max_diff"]) <= args.fp32_tol
    print(f"fp32 tolerance {args.fp32_tol:g}: " + ("within" if ok else "EXCEEDED (or a non-finite logit)"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
