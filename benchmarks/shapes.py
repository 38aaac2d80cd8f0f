"""Random-initialised Qwen3 checkpoints with the shapes of real models, for measuring where arithmetic matters.

The embedded 2.75M-parameter model makes a step cost dispatch overhead, not matrix multiplies. A checkpoint with
Qwen3-0.6B's shape (28 layers, hidden 1024, 16 query and 8 KV heads of 128, vocabulary 151,936) costs what the
real model costs, without a download: the weights are drawn from a seeded generator (normal, std 0.02, the
`initializer_range` of Qwen3's config; norm weights 1), written as bf16 safetensors beside a `config.json` and
the embedded model's tokenizer files, so that mini_llm and transformers load the very same weights. Its tokens
are meaningless, but they are the same in every system, which is all a throughput comparison needs.

    python benchmarks/shapes.py qwen3-0.6b /tmp/qwen3-0.6b-random      # write one to a folder
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mini_llm import EMBEDDED_MODEL, Qwen3Config  # noqa: E402

# The fields of Qwen/Qwen3-0.6B's and Qwen/Qwen3-1.7B's config.json that set the amount of work.
SHAPES: dict[str, dict] = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
}
QWEN3_COMMON = dict(vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1_000_000.0, max_position_embeddings=40960,
                    tie_word_embeddings=True)
INIT_STD = 0.02
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def shape_config(name: str, **overrides) -> Qwen3Config:
    """The config of shape `name`; `overrides` (e.g. `num_hidden_layers=1`) make a cheaper model for tests."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}: choose one of {', '.join(SHAPES)}")
    sizes = {"vocab_size", *SHAPES[name]}  # what an override may change: sizes only
    unknown = set(overrides) - sizes
    if unknown:
        raise ValueError(f"cannot override {sorted(unknown)}: choose among {sorted(sizes)}")
    if any(type(v) is not int or v < 1 for v in overrides.values()):
        raise ValueError(f"overrides must be positive integers, got {overrides}")
    fields = QWEN3_COMMON | SHAPES[name] | overrides
    # The embedded tokenizer's end-of-sequence id, so that EOS means the same to every loader.
    eos = json.loads((EMBEDDED_MODEL / "config.json").read_text())["eos_token_id"]
    return Qwen3Config(**fields, bos_token_id=eos, eos_token_id=eos)


def weight_shapes(cfg: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """The tensors of a Hugging Face Qwen3 checkpoint (tied head left out); mini_llm's loader checks every name and
    shape against its own modules."""
    h, hd, q, kv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    layer = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
             "self_attn.q_proj.weight": (q * hd, h), "self_attn.k_proj.weight": (kv * hd, h),
             "self_attn.v_proj.weight": (kv * hd, h), "self_attn.o_proj.weight": (h, q * hd),
             "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
             "mlp.gate_proj.weight": (cfg.intermediate_size, h), "mlp.up_proj.weight": (cfg.intermediate_size, h),
             "mlp.down_proj.weight": (h, cfg.intermediate_size)}
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,)}
    shapes |= {f"model.layers.{i}.{name}": shape for i in range(cfg.num_hidden_layers) for name, shape in layer.items()}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    return shapes


def random_state_dict(cfg: Qwen3Config, seed: int, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Every weight of a Qwen3 checkpoint of `cfg`, drawn from a seeded generator; norm weights 1."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.ones(shape, dtype=dtype) if name.endswith("norm.weight")
            else torch.empty(shape, dtype=dtype).normal_(0.0, INIT_STD, generator=generator)
            for name, shape in weight_shapes(cfg).items()}


def write_shape_checkpoint(name: str, folder: str | Path, seed: int = 0, **overrides) -> Path:
    """Write a random-initialised checkpoint of shape `name` (with `overrides`, as `shape_config`) into `folder`
    (created; must be empty or absent)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty: give a new or empty folder for the checkpoint")
    folder.mkdir(parents=True, exist_ok=True)
    cfg = shape_config(name, **overrides)
    save_file(random_state_dict(cfg, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    hf = cfg.to_hf_dict()
    hf.update(rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, use_cache=True,
              initializer_range=INIT_STD, attention_dropout=0.0, use_sliding_window=False, sliding_window=None,
              max_window_layers=cfg.num_hidden_layers)
    (folder / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "do_sample": False}, indent=2) + "\n")
    for f in TOKENIZER_FILES:
        shutil.copy(EMBEDDED_MODEL / f, folder / f)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-layers", type=int, default=None, help="override the depth (default: the model's)")
    args = ap.parse_args(argv)
    layers = {} if args.num_layers is None else {"num_hidden_layers": args.num_layers}
    write_shape_checkpoint(args.shape, args.folder, args.seed, **layers)
    print(f"wrote {args.shape} (random weights, seed {args.seed}) to {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
