"""The model's shape, read from a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUPPORTED_ARCHITECTURES = ("Qwen3ForCausalLM",)


class CheckpointError(ValueError):
    """A checkpoint folder that mini_llm cannot load; the message says what to fix."""


@dataclass
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    architectures: list[str] = field(default_factory=lambda: ["Qwen3ForCausalLM"])

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention"
            )

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_dict(cls, raw: dict) -> "Qwen3Config":
        archs = raw.get("architectures") or [raw.get("model_type", "?")]
        if not any(a in SUPPORTED_ARCHITECTURES for a in archs):
            raise CheckpointError(
                f"unsupported architecture {archs}: mini_llm implements {list(SUPPORTED_ARCHITECTURES)} only. "
                "Point MINI_LLM_MODEL at a Qwen3 checkpoint (e.g. Qwen/Qwen3-0.6B)."
            )
        # Newer configs keep RoPE settings under `rope_parameters` (or `rope_scaling`).
        rope = raw.get("rope_parameters") or {}
        theta = raw.get("rope_theta", rope.get("rope_theta", 1_000_000.0))
        if (raw.get("rope_scaling") or {}).get("rope_type", "default") not in ("default", None) or rope.get(
            "rope_type", "default"
        ) != "default":
            raise CheckpointError("mini_llm supports plain RoPE only (rope_type 'default'), not RoPE scaling")
        required = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]
        missing = [k for k in required if k not in raw]
        if missing:
            raise CheckpointError(f"config.json lacks required fields {missing}")
        eos = raw.get("eos_token_id")
        return cls(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw.get("num_key_value_heads", raw["num_attention_heads"]),
            head_dim=raw.get("head_dim", raw["hidden_size"] // raw["num_attention_heads"]),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            max_position_embeddings=raw.get("max_position_embeddings", 40960),
            tie_word_embeddings=raw.get("tie_word_embeddings", True),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_id=eos[0] if isinstance(eos, list) else eos,
            architectures=list(archs),
        )

    @classmethod
    def from_json(cls, path: str | Path) -> "Qwen3Config":
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"no config.json at {path}: a checkpoint folder needs config.json")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path} is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    def to_hf_dict(self) -> dict:
        """The fields as a Hugging Face `config.json` for a Qwen3 model."""
        d = asdict(self)
        d.update(model_type="qwen3", hidden_act="silu", attention_bias=False, torch_dtype="bfloat16")
        return d
