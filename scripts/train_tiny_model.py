"""Train the embedded tiny Qwen3 checkpoint (mini_llm/models/tiny-qwen3) from scratch on CPU.

Everything is seeded and the step count is fixed, so rerunning this script on CPU rebuilds the same
weights, the same held-out loss and the same sample outputs as the model card (README.md) reports:

    python scripts/train_tiny_model.py

The training text comes from scripts/story_generator.py (stories written by a seeded program in this
repository), so nothing is downloaded. Steps:

1. generate the training and held-out stories, joined by `<|endoftext|>`;
2. train a byte-level BPE tokenizer on the training stories with the `tokenizers` library;
3. train `mini_llm.Transformer` (fp32, AdamW, fixed steps, 2 threads) on random 256-token windows;
4. write config.json, model.safetensors (bf16, tied embeddings), the tokenizer files, generation_config.json
   and the model card README.md with the measured numbers and greedy samples.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the tokenizer trainer: one thread, one order of merges
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle threads sleep: same numbers, faster on a busy CPU

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import story_generator  # noqa: E402
from mini_llm import Qwen3Config, Transformer, generate, load_tokenizer, load_transformer  # noqa: E402
from mini_llm.prompts import STANDARD_PROMPTS  # noqa: E402
from mini_llm.settings import EMBEDDED_MODEL  # noqa: E402

EOS = story_generator.EOS
RETRAIN_COMMAND = "python scripts/train_tiny_model.py"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=EMBEDDED_MODEL, help="checkpoint folder to (over)write")
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--train-stories", type=int, default=15000)
    ap.add_argument("--heldout-stories", type=int, default=600)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=25)
    return ap.parse_args()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)


def train_tokenizer(stories: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stories, trainer=trainer)
    return tok


def encode_stream(tok, stories: list[str], eos_id: int) -> torch.Tensor:
    ids: list[int] = []
    for enc in tok.encode_batch(stories, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def init_weights(model: Transformer, gen: torch.Generator, n_layers: int) -> None:
    """GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers), norms at 1."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            torch.nn.init.ones_(p)
        else:
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def windows(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Non-overlapping `[n, seq_len + 1]` windows covering the stream (for the held-out loss)."""
    n = (len(stream) - 1) // seq_len
    return torch.stack([stream[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)])


@torch.no_grad()
def mean_loss(model: Transformer, wins: torch.Tensor, batch: int = 16) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(wins), batch):
        w = wins[i : i + batch]
        logits = model(w[:, :-1]).float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def main() -> None:
    args = parse_args()
    seed_everything(args.seed)
    t_start = time.perf_counter()

    # 1. text
    train_stories = story_generator.generate_stories(args.train_stories, seed=args.seed)
    heldout_stories = story_generator.generate_stories(args.heldout_stories, seed=args.seed + 1_000_003)

    # 2. tokenizer
    tok = train_tokenizer(train_stories, args.vocab_size)
    eos_id = tok.token_to_id(EOS)
    train_ids = encode_stream(tok, train_stories, eos_id)
    heldout_wins = windows(encode_stream(tok, heldout_stories, eos_id), args.seq_len)
    print(f"train tokens {len(train_ids):,}  held-out windows {len(heldout_wins)} x {args.seq_len}  "
          f"vocab {tok.get_vocab_size()}", flush=True)

    # 3. model
    cfg = Qwen3Config(
        vocab_size=tok.get_vocab_size(), hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-6, rope_theta=10_000.0, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=eos_id, eos_token_id=eos_id,
    )
    gen = torch.Generator().manual_seed(args.seed)
    model = Transformer(cfg)
    init_weights(model, gen, cfg.num_hidden_layers)
    n_params = sum(p.numel() for p in model.parameters())  # tied: the head is counted once
    print(f"parameters {n_params:,}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    data_gen = torch.Generator().manual_seed(args.seed + 1)
    model.train()
    t_train = time.perf_counter()
    loss_log: list[tuple[int, float]] = []
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - args.seq_len - 1, (args.batch_size,), generator=data_gen)
        batch = torch.stack([train_ids[s : s + args.seq_len + 1] for s in starts.tolist()])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        opt.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            loss_log.append((step, loss.item()))
            el = time.perf_counter() - t_train
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step, args):.2e}  {el:6.0f}s", flush=True)
    train_seconds = time.perf_counter() - t_train
    heldout_fp32 = mean_loss(model, heldout_wins)
    print(f"training {train_seconds:.0f}s  held-out loss (fp32 weights) {heldout_fp32:.4f}", flush=True)

    # 4. write the checkpoint
    from safetensors.torch import save_file

    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf = cfg.to_hf_dict()
    hf.update(rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta}, use_cache=True,
              initializer_range=0.02, attention_dropout=0.0, use_sliding_window=False, sliding_window=None,
              max_window_layers=cfg.num_hidden_layers)
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": eos_id, "eos_token_id": eos_id, "do_sample": False}, indent=2) + "\n")
    tok.save(str(out / "tokenizer.json"))
    # Written by hand (not save_pretrained) so that transformers 4.x and 5.x both read it the same way.
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS, "pad_token": EOS,
        "unk_token": None, "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.max_position_embeddings}, indent=2) + "\n")
    for f in out.iterdir():
        f.chmod(0o644)

    # 5. measure the shipped (bf16) files, as the course loads them
    shipped = load_transformer(out, dtype=torch.float32, device="cpu")
    heldout_shipped = mean_loss(shipped, heldout_wins)
    tokenizer = load_tokenizer(out)
    samples = []
    for prompt in STANDARD_PROMPTS:
        ids = tokenizer.encode(prompt)
        new = generate(shipped, ids, 60, temperature=0.0, eos_token_id=eos_id)
        samples.append((prompt, tokenizer.decode(new)))
        print(f"\n>>> {prompt!r}\n{tokenizer.decode(new)!r}", flush=True)
    total_seconds = time.perf_counter() - t_start
    write_card(out, args, cfg, n_params, train_seconds, total_seconds, heldout_fp32, heldout_shipped,
               len(train_ids), len(heldout_wins), samples, loss_log)
    print(f"\nwrote {out}  ({folder_size(out) / 1e6:.2f} MB)  total {total_seconds:.0f}s", flush=True)


def write_card(out, args, cfg, n_params, train_s, total_s, loss_fp32, loss_bf16, n_train_tokens, n_heldout, samples,
               loss_log) -> None:
    sizes = {f.name: f.stat().st_size for f in sorted(out.iterdir()) if f.is_file()}
    weights_mb = sizes["model.safetensors"] / 1e6
    points = loss_log[:: max(1, len(loss_log) // 8)]
    points += [] if points[-1] == loss_log[-1] else loss_log[-1:]
    curve = ", ".join(f"{s}: {loss:.3f}" for s, loss in points)
    sample_md = "\n".join(f"- **{p}** → {c.replace(EOS, ' `<|endoftext|>`')}" for p, c in samples)
    heads = (f"{cfg.num_attention_heads} / {cfg.num_key_value_heads} (grouped-query attention, "
             f"{cfg.num_queries_per_kv} queries per KV head)")
    card = f"""# tiny-qwen3: the course's embedded model

A {n_params / 1e6:.2f}M-parameter Qwen3 model trained from scratch on CPU so that every chapter runs offline,
on any laptop, with a real trained checkpoint. It writes short, simple children's stories. It is far too
small to know anything about the world: it exists to exercise the inference engine, not to be useful.

## Provenance and licence

- **Training text:** short stories produced by `scripts/story_generator.py`, a seeded program written for
  this course (word lists and story templates only; no third-party text). Training split: seed {args.seed},
  {args.train_stories:,} stories, {n_train_tokens:,} tokens; held-out split: a different seed,
  {args.heldout_stories:,} stories ({n_heldout} windows of {args.seq_len} tokens). Each story ends with `<|endoftext|>`,
  so the model learns to end a story with its end-of-sequence token.
- **Tokenizer:** byte-level BPE with {cfg.vocab_size:,} tokens, trained by the `tokenizers` library on the
  training split; `<|endoftext|>` (id {cfg.eos_token_id}) is both BOS and EOS. Any text round-trips (byte level).
- **Licence:** MIT, like the rest of the course (the text, the tokenizer and the weights).

## Architecture (Qwen3, Hugging Face format)

| field | value |
|---|---|
| parameters | {n_params:,} (embeddings tied to the LM head, counted once) |
| hidden size | {cfg.hidden_size} |
| layers | {cfg.num_hidden_layers} |
| attention heads (query / key-value) | {heads} |
| head dim | {cfg.head_dim} |
| MLP intermediate size | {cfg.intermediate_size} (SwiGLU) |
| vocabulary | {cfg.vocab_size} |
| normalisation | RMSNorm, eps {cfg.rms_norm_eps}, plus QK-norm on queries and keys |
| RoPE theta | {cfg.rope_theta:g} |
| max position embeddings | {cfg.max_position_embeddings} (trained on {args.seq_len}-token windows) |
| weights dtype | bfloat16 |

It loads with `mini_llm.load_transformer(path)` and with `transformers.Qwen3ForCausalLM.from_pretrained(path)`.

## Files and size on disk

{chr(10).join(f"- `{name}`: {size:,} bytes" for name, size in sizes.items())}

Total (before this card): {sum(sizes.values()):,} bytes ({sum(sizes.values()) / 1e6:.2f} MB); the weights take
{weights_mb:.2f} MB.

## Training

fp32 on CPU with `torch.set_num_threads(2)`, deterministic algorithms, every generator seeded ({args.seed}).
{args.steps} AdamW steps (betas 0.9/0.95, weight decay 0.1, gradient clipping 1.0), batch {args.batch_size} x
{args.seq_len} tokens, learning rate {args.lr:g} with {args.warmup} warm-up steps and cosine decay to 10 %.
Training loss by step: {curve}.

- **Training time (measured):** {train_s / 60:.1f} minutes of training ({total_s / 60:.1f} minutes for the
  whole script) on a 2-core CPU.
- **Held-out loss:** {loss_fp32:.4f} nats/token with the fp32 weights at the end of training; {loss_bf16:.4f}
  with the shipped bf16 weights run in fp32 (perplexity {math.exp(loss_bf16):.2f}).

## Sample greedy outputs

Standard prompts from `mini_llm/prompts.py`, 60 new tokens, temperature 0, shipped weights loaded in fp32 by
`mini_llm.load_transformer(dtype=torch.float32)`, generated by `mini_llm.generate` (stops at `<|endoftext|>`):

{sample_md}

## Retraining

From the repository root, with the course environment active:

```
{RETRAIN_COMMAND}
```

It regenerates the text, the tokenizer and the weights and rewrites this folder, this card included.
Training is deterministic on CPU with 2 threads: the held-out loss and the samples above come out the same
(the measured times vary with the machine).
"""
    (out / "README.md").write_text(card)


if __name__ == "__main__":
    main()
