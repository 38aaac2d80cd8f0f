"""Sampling parameters and turning a row of logits into the next token."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field

import torch

MAX_LOGPROBS = 20  # as OpenAI's top_logprobs
MIN_TEMPERATURE = 1e-2  # smaller positive temperatures are raised to it, as vLLM does (_MAX_TEMP in sampling_params.py)


@dataclass
class StructuredOutputsParams:
    """The constraint an output must meet, as vLLM's `StructuredOutputsParams` (vllm/sampling_params.py at
    b31e9326a7d9), with five of its exclusive fields (not `structural_tag`, nor its options such as
    `disable_any_whitespace`): exactly one of a JSON schema (`json`, a dict or its text), a regular expression, a
    choice among strings, an EBNF grammar (`grammar`, GBNF as xgrammar reads it) or any JSON object (`json_object`).
    framework/structured_output.py compiles it and holds each request's matcher."""

    json: dict | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None

    def __post_init__(self) -> None:
        self.verify()

    def verify(self) -> None:
        """Raise ValueError unless exactly one constraint is set, with a value of its type."""
        kinds = self.kinds()
        if len(kinds) != 1:
            raise ValueError(f"structured_outputs needs exactly one of json, regex, choice, grammar, json_object; "
                             f"got {', '.join(kinds) or 'none'}")
        kind, value = kinds[0], getattr(self, kinds[0])
        wanted = {"json": (dict, str), "regex": str, "grammar": str, "choice": (list, tuple), "json_object": bool}
        if not isinstance(value, wanted[kind]) or (kind == "json_object" and not value):
            raise ValueError(f"structured_outputs.{kind} has the wrong type: {type(value).__name__} {value!r:.60}")
        if kind == "choice" and (not value or not all(isinstance(c, str) for c in value)):
            raise ValueError(f"structured_outputs.choice must be a non-empty list of strings, got {value!r:.60}")

    def kinds(self) -> list[str]:
        return [name for name in ("json", "regex", "choice", "grammar", "json_object")
                if getattr(self, name) is not None]


@dataclass
class SamplingParams:
    """As in vLLM's `SamplingParams`: temperature 0 is greedy; `seed` makes a random request reproducible.

    Checked when made and again when a request is added (`verify`), so that a bad value is refused at the door
    with a message saying what is allowed, instead of failing inside a step. The rules follow vLLM's
    `SamplingParams._verify_args` (vllm/sampling_params.py): finite temperature >= 0, top_p in (0, 1], top_k 0 or
    -1 for no cut, else at least 1, no empty stop string, min_p in [0, 1], presence and frequency penalties in
    [-2, 2], repetition_penalty > 0, 0 <= min_tokens <= max_tokens.

    The fields of `HISTORY_FIELDS` need the request's tokens or record per-token results, so `sample_token` (a row
    and the params) cannot apply them: an engine applies them by sampling with `sample_request_token`, and
    says so with `LLMEngineBase.samples_with_history` (framework/engine.py refuses them otherwise).
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0  # 0 or -1: no top-k cut
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)  # a stop string in the output text ends the request
    ignore_eos: bool = False
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)  # one of these tokens ends the request ("stop")
    include_stop_str_in_output: bool = False  # the client's text keeps the stop string (course/serve.py)
    skip_special_tokens: bool = True  # the client's text leaves out special tokens such as <|endoftext|>
    min_p: float = 0.0  # drop tokens less likely than min_p times the most likely one (0: off)
    presence_penalty: float = 0.0  # subtracted from the logit of every token already in the output
    frequency_penalty: float = 0.0  # subtracted once per occurrence in the output
    repetition_penalty: float = 1.0  # logits of prompt and output tokens: divided by it when > 0, else times it
    min_tokens: int = 0  # no end-of-sequence, stop token or stop string before this many output tokens
    logprobs: int | None = None  # the sampled token's logprob and the top `logprobs` of each step (raw logits)
    prompt_logprobs: int | None = None  # the same for every prompt token (the first has none)
    # the grammar the output must follow (framework/structured_output.py), vLLM's field of the same name
    structured_outputs: StructuredOutputsParams | None = None

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
        self._verify_extensions()

    def _verify_extensions(self) -> None:
        """The fields beyond greedy / temperature / top-k / top-p, with vLLM's bounds."""
        if not isinstance(self.stop_token_ids, (list, tuple)):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        self.stop_token_ids = [_integer("stop_token_ids", t) for t in self.stop_token_ids]
        for name in ("include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        self.min_p = _finite("min_p", self.min_p)
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 keeps every token), got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            setattr(self, name, _finite(name, getattr(self, name)))
            if not -2 <= getattr(self, name) <= 2:
                raise ValueError(f"{name} must be in [-2, 2] (0 is off), got {getattr(self, name)}")
        self.repetition_penalty = _finite("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}")
        self.min_tokens = _integer("min_tokens", self.min_tokens)
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                setattr(self, name, _integer(name, getattr(self, name)))
                if not 0 <= getattr(self, name) <= MAX_LOGPROBS:
                    raise ValueError(f"{name} must be None or an int in [0, {MAX_LOGPROBS}] (how many of the most "
                                     f"likely tokens to return), got {getattr(self, name)}")
        if self.structured_outputs is not None:
            if not isinstance(self.structured_outputs, StructuredOutputsParams):
                raise ValueError("structured_outputs must be None or a StructuredOutputsParams, got "
                                 f"{type(self.structured_outputs).__name__}")
            self.structured_outputs.verify()

    def history_fields(self) -> list[str]:
        """The fields set here that only `sample_request_token` applies (see the class's docstring)."""
        return [name for name, off in HISTORY_FIELDS.items() if getattr(self, name) != off]


HISTORY_FIELDS = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "min_tokens": 0,
                  "logprobs": None}  # each with its value that means "off"


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
    """The distribution a random request samples from, for one row of logits `[vocab]`: temperature, min_p, then
    the top-k and top-p cuts (the order of vLLM's `Sampler.sample`, vllm/v1/sample/sampler.py at b31e9326a7;
    min_p as its `MinPLogitsProcessor`, vllm/v1/sample/logits_processor/builtin.py at b31e9326a7)."""
    logits = logits.float() / params.temperature
    if params.min_p > 0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < params.min_p * probs.max(), float("-inf"))
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
    """A per-request random generator, so a seeded request samples the same tokens whatever it is batched with. It
    lives on the logits' device: a CUDA generator draws another stream than a CPU one, so a seed reproduces its
    tokens on the same kind of device only (as in vLLM)."""
    if params.temperature == 0:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


@dataclass
class TokenLogprobs:
    """One position's logprobs: the chosen token's (sampled, or the prompt's next token) and the top ones, most
    likely first, as vLLM's `Sampler.gather_logprobs`."""

    token_id: int
    logprob: float
    rank: int  # 1 + how many tokens are more likely
    top: list[tuple[int, float]]  # (token id, logprob)


def token_logprobs(logprobs: torch.Tensor, token_ids: list[int], k: int) -> list[TokenLogprobs]:
    """From rows of log-probabilities `[R, vocab]`, row r's chosen token `token_ids[r]`: read back from the device
    in one go (a read per value would wait for the device each time)."""
    ids = torch.tensor(token_ids, dtype=torch.long, device=logprobs.device)[:, None]
    chosen = logprobs.gather(-1, ids)
    values, top = torch.topk(logprobs, k, dim=-1)
    rows = zip(token_ids, chosen[:, 0].tolist(), (1 + (logprobs > chosen).sum(-1)).tolist(), top.tolist(),
               values.tolist())
    return [TokenLogprobs(t, c, rank, list(zip(i, v))) for t, c, rank, i, v in rows]


def apply_history(logits: torch.Tensor, params: SamplingParams, prompt_token_ids: list[int],
                  output_token_ids: list[int], stop_ids: list[int]) -> torch.Tensor:
    """One row of logits with min_tokens and the penalties applied, in the order of vLLM's
    `Sampler.apply_logits_processors` (vllm/v1/sample/sampler.py at b31e9326a7): min_tokens masks `stop_ids`
    (end-of-sequence and stop tokens) to -inf while the output is shorter (its `MinTokensLogitsProcessor`); then
    `apply_penalties` (vllm/model_executor/layers/utils.py at b31e9326a7): the repetition penalty on every token
    of the prompt or the output (divide a positive logit, multiply a negative one), then the frequency penalty
    times each token's count in the output, then the presence penalty once per token present in the output."""
    logits, device = logits.float().clone(), logits.device
    if len(output_token_ids) < params.min_tokens and stop_ids:
        logits[torch.tensor(stop_ids, device=device)] = float("-inf")
    outputs = torch.tensor(output_token_ids, dtype=torch.long, device=device)  # counted where the logits are
    counts = torch.zeros_like(logits).index_add_(0, outputs, torch.ones_like(outputs, dtype=logits.dtype))
    if params.repetition_penalty != 1:
        seen = counts > 0
        seen[torch.tensor(prompt_token_ids, dtype=torch.long, device=device)] = True
        penalised = torch.where(logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty)
        logits = torch.where(seen, penalised, logits)
    return logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0)


def sample_request_token(logits: torch.Tensor, request, eos_token_id: int | None) -> int:
    """`sample_token` for one request with everything of its SamplingParams: min_tokens and the penalties on its
    tokens (`apply_history`), then the sampler; with `logprobs` set, the sampled token's logprob and the top ones
    are appended to `request.logprobs`. As vLLM's default (`logprobs_mode="raw_logprobs"` in `Sampler.forward`),
    they are the log_softmax of the model's logits row, before penalties and temperature."""
    params = request.sampling_params
    stop_ids = params.stop_token_ids + ([eos_token_id] if eos_token_id is not None and not params.ignore_eos else [])
    shaped = [name for name in params.history_fields() if name != "logprobs"]
    processed = apply_history(logits, params, request.prompt_token_ids, request.output_token_ids, stop_ids) \
        if shaped else logits
    token = sample_token(processed, params, request.generator)
    if params.logprobs is not None:
        request.logprobs += token_logprobs(logits.float().log_softmax(-1)[None], [token], params.logprobs)
    return token


def prompt_logprobs(logits: torch.Tensor, prompt_token_ids: list[int], k: int) -> list[TokenLogprobs | None]:
    """Each prompt token's logprobs from the logits `[T, vocab]` of the prompt's T positions (position i predicts
    token i + 1); the first token has none, as in vLLM's `prompt_logprobs`."""
    return [None] + token_logprobs(logits[:len(prompt_token_ids) - 1].float().log_softmax(-1), prompt_token_ids[1:], k)
