"""Sampling parameters and turning a row of logits into the next token."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field

import torch

MIN_TEMPERATURE = 1e-2  # smaller positive temperatures are raised to it, as vLLM does (_MAX_TEMP in sampling_params.py)


@dataclass
class SamplingParams:
    """As in vLLM's `SamplingParams`: temperature 0 is greedy; `seed` makes a random request reproducible.

    Checked when made and again when a request is added (`verify`), so that a bad value is refused at the door
    with a message saying what is allowed, instead of failing inside a step. The rules follow vLLM's
    `SamplingParams._verify_args` (vllm/sampling_params.py): finite temperature >= 0, top_p in (0, 1], top_k 0 or
    -1 for no cut, else at least 1, no empty stop string.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0  # 0 or -1: no top-k cut
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)  # a stop string in the output text ends the request
    ignore_eos: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        self.verify()

    def verify(self) -> None:
        """Raise ValueError naming the first field whose value cannot be used."""
        self.max_tokens = _integer("max_tokens", self.max_tokens)
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        self.temperature = _finite("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if 0 < self.temperature < MIN_TEMPERATURE:  # fp32 logits / 1e-40 overflow to inf, and softmax gives nan
            warnings.warn(f"temperature {self.temperature} is below {MIN_TEMPERATURE}, where the scaled logits can "
                          f"overflow; using {MIN_TEMPERATURE}")
            self.temperature = MIN_TEMPERATURE
        self.top_k = _integer("top_k", self.top_k)
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 or -1 (no top-k cut) or at least 1, got {self.top_k}")
        self.top_p = _finite("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 keeps every token), got {self.top_p}")
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a non-empty string or a list of non-empty strings, got {self.stop!r}")
        self.stop = list(self.stop)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if self.seed is not None:
            self.seed = _integer("seed", self.seed)
            if not 0 <= self.seed < 2**64:
                raise ValueError(f"seed must be None (a fresh random seed) or an int in [0, 2**64), got {self.seed}")


def _integer(name: str, value) -> int:
    """`value` as an int; a bool, a float or a string is refused rather than silently converted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return float(value)


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> int:
    """One token id from one row of logits `[vocab]`."""
    if params.temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(sampling_probs(logits, params), 1, generator=generator))


def sampling_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a random request samples from, for one row of logits `[vocab]`: temperature, then the
    top-k and top-p cuts."""
    logits = logits.float() / params.temperature
    if params.top_k > 0:
        kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = logits.sort(descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already reach top_p.
        drop = probs.cumsum(-1) - probs >= params.top_p
        logits = logits.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits.softmax(-1)


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A per-request random generator, so a seeded request samples the same tokens whatever it is batched with."""
    if params.temperature == 0:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator
