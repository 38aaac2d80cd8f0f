"""Loading a Hugging Face Qwen3 checkpoint folder (config.json + *.safetensors) into `Transformer`."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import load_file

from .config import CheckpointError, Qwen3Config
from .model import Transformer
from .settings import model_path, pick_device


def _checkpoint_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint folder {folder} does not exist: give a folder holding config.json and model.safetensors "
            "(MINI_LLM_MODEL, --model), or none for the embedded model"
        )
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors file in {folder}: download the weights into this folder")
    return files


def load_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for f in _checkpoint_files(folder):
        state.update(load_file(str(f)))
    return state


def load_transformer(
    path: str | os.PathLike | None = None, dtype: torch.dtype | None = None, device=None
) -> Transformer:
    """Build a `Transformer` from a checkpoint folder (default: the embedded model) on `device`.

    `dtype` defaults to the checkpoint's own (bf16 for Qwen3); pass torch.float32 for exact comparisons.
    """
    folder = model_path(path)
    files = _checkpoint_files(folder)
    cfg = Qwen3Config.from_json(folder / "config.json")
    state = load_state_dict(folder)
    dtype = dtype or next(iter(state.values())).dtype
    device = pick_device(str(device) if device is not None else None)
    # Built for real on the device, in `dtype` (built in fp32 and cast, it would hold twice the bf16 weights for a
    # moment), and overwritten below. (On the meta device, the parameters' random init is dispatched through torch's
    # compiler stack, whose first import costs seconds.) The default dtype is the process's, not the thread's, while
    # it is set (as with vLLM's set_default_torch_dtype): load in one thread at a time.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Transformer(cfg)
    finally:
        torch.set_default_dtype(previous)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: the head is the embedding matrix
    expected = {k: v for k, v in model.state_dict().items() if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{[f.name for f in files]} do not match config.json: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, p in expected.items():
        if tuple(state[name].shape) != tuple(p.shape):
            raise CheckpointError(
                f"weight {name} has shape {tuple(state[name].shape)} but config.json implies {tuple(p.shape)}"
            )
    model.load_state_dict(state, strict=False)  # copied into the parameters: cast to their dtype and device
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def load_tokenizer(path: str | os.PathLike | None = None):
    """The checkpoint's tokenizer, read offline from the same folder with transformers' AutoTokenizer."""
    from transformers import AutoTokenizer

    folder = model_path(path)
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise CheckpointError(f"no tokenizer.json in {folder}: the tokenizer files belong beside the weights")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
