"""mini_llm: the Qwen3 architecture written from scratch, plus an embedded tiny checkpoint that runs offline."""

from .config import CheckpointError, Qwen3Config
from .generate import ContiguousKVCache, generate
from .loading import load_tokenizer, load_transformer
from .model import RMSNorm, Transformer, apply_rope, causal_attention, repeat_kv, rope_cos_sin
from .settings import EMBEDDED_MODEL, model_path, pick_device, sync

__all__ = [
    "CheckpointError", "ContiguousKVCache", "EMBEDDED_MODEL", "Qwen3Config", "RMSNorm", "Transformer",
    "apply_rope", "causal_attention", "generate", "load_tokenizer", "load_transformer", "model_path",
    "pick_device", "repeat_kv", "rope_cos_sin", "sync",
]
