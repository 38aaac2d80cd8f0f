"""The two settings every chapter shares: which device runs the model and which checkpoint it loads; and `sync`,
which every timing on that device needs."""

from __future__ import annotations

import os
from pathlib import Path

import torch

EMBEDDED_MODEL = Path(__file__).parent / "models" / "tiny-qwen3"


def pick_device(name: str | None = None) -> torch.device:
    """`name`, else `$MINI_LLM_DEVICE`, else CUDA when available, else CPU."""
    name = name or os.environ.get("MINI_LLM_DEVICE")
    if name:
        device = torch.device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} was asked for (MINI_LLM_DEVICE) but CUDA is not available here")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU): a timestamp taken after it means the work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_path(path: str | os.PathLike | None = None) -> Path:
    """`path`, else `$MINI_LLM_MODEL` (a local checkpoint folder), else the embedded tiny model."""
    return Path(path or os.environ.get("MINI_LLM_MODEL") or EMBEDDED_MODEL).expanduser()
