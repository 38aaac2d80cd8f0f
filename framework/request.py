"""A request's state as it moves through the engine."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .sampling import SamplingParams, TokenLogprobs

_ids = itertools.count()


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # not yet admitted, or preempted and waiting to be recomputed
    RUNNING = "running"
    FINISHED = "finished"


class IncrementalDetokenizer:
    """The text of a growing list of output tokens, decoding only its tail when tokens are added.

    `tokenizer.decode(all tokens)` after every token costs O(length) per token. As vLLM's incremental
    detokenizer (`SlowIncrementalDetokenizer.decode_next` in vllm/v1/engine/detokenizer.py, which calls
    `detokenize_incrementally` in vllm/tokenizers/detokenizer_utils.py), keep the text of the tokens before
    `read_offset`, which later tokens cannot change, and decode from `prefix_offset` on: the tokens between the
    two offsets are decoded again as context, so that a decoder that treats the first token of a decode specially
    (dropping its leading space) sees the same neighbours as in a full decode. While the new text ends in U+FFFD,
    the next token may complete a multi-byte character, so nothing is committed. The text returned is always
    exactly `tokenizer.decode(token_ids)` (tests/test_engine.py checks it on random token sequences).
    """

    def __init__(self) -> None:
        self.prefix_offset = self.read_offset = self.num_tokens = 0
        self.stable_text = ""  # the text of token_ids[:read_offset]
        self.text = ""  # the text of token_ids[:num_tokens]
        self.changed_from = 0  # the last call with new tokens left the text before this position as it was

    def decode(self, tokenizer, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, which must extend the tokens of the previous call."""
        if len(token_ids) < self.num_tokens:  # not an extension: start again
            self.__init__()
        if len(token_ids) > self.num_tokens:
            self.changed_from = len(self.stable_text)
            window = tokenizer.decode(token_ids[self.prefix_offset:])
            context = tokenizer.decode(token_ids[self.prefix_offset:self.read_offset])
            self.text = self.stable_text + window[len(context):]
            if len(window) > len(context) and not window.endswith("\ufffd"):
                self.stable_text = self.text
                self.prefix_offset, self.read_offset = self.read_offset, len(token_ids)
            self.num_tokens = len(token_ids)
        return self.text

    def found(self, strings: Sequence[str]) -> bool:
        """Whether one of `strings` appeared in the text with the latest tokens. As vLLM's `check_stop_strings`,
        it searches only from len(string) - 1 characters before the text that changed: the text before was
        searched when it was new."""
        return any(self.text.find(s, max(self.changed_from - len(s) + 1, 0)) >= 0 for s in strings)


class OutputText:
    """What a client is sent of one request's output, as vLLM's front end makes it (`IncrementalDetokenizer.update`
    and `get_next_output_text` in vllm/v1/engine/detokenizer.py at b31e9326a7, stop strings as
    `check_stop_strings` there): the text of the output tokens, without special tokens such as <|endoftext|> unless
    `skip_special_tokens` is False; without the token that ended the request (end-of-sequence or one of
    `stop_token_ids`) and cut before the first stop string, unless `include_stop_str_in_output`, which keeps
    both; no stop before `min_tokens` tokens. While the request runs, the text is held back where it may be the
    start of a stop string, and released as soon as it cannot be. vLLM holds back a fixed max(len(stop)) - 1
    characters; here only the longest tail of the text that begins a stop string. A trailing U+FFFD (a character
    whose bytes are not all there yet) is held back too. The deltas `add` returns, joined, are the final text."""

    def __init__(self, tokenizer, params: SamplingParams, eos_token_id: int | None) -> None:
        self.tokenizer, self.params, self.eos_token_id = tokenizer, params, eos_token_id
        self.token_ids: list[int] = []
        self.detokenizer = IncrementalDetokenizer()
        self.searched = 0  # stop strings were searched for in the text before this position
        self.end: int | None = None  # where the text ends, once a stop string was found
        self.num_sent = 0

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=self.params.skip_special_tokens)

    def add(self, new_token_ids: Sequence[int], finished: bool = False, finish_reason: str | None = None) -> str:
        """The text to send now, after the request's `new_token_ids` (and, on its last output, how it ended)."""
        params = self.params
        self.token_ids += new_token_ids
        ids = self.token_ids
        if finished and finish_reason == "stop" and ids and not params.include_stop_str_in_output \
                and self._ended_by_token(ids[-1]):
            ids = ids[:-1]
        text = self.detokenizer.decode(self, ids)
        if len(self.token_ids) <= params.min_tokens:
            self.searched = len(text)
        elif self.end is None and params.stop:
            start = min(self.searched, self.detokenizer.changed_from)
            hits = [(i, s) for s in params.stop if (i := text.find(s, max(start - len(s) + 1, 0))) >= 0]
            self.searched = len(text)
            if hits:
                at, stop = min(hits)
                self.end = at + len(stop) if params.include_stop_str_in_output else at
        end = len(text) if self.end is None else self.end
        if not finished:
            end = min(end, len(text.rstrip("\ufffd")))
            if self.end is None and not params.include_stop_str_in_output:
                end -= max((k for s in params.stop for k in range(1, len(s)) if text.endswith(s[:k], 0, end)),
                           default=0)
        delta = text[self.num_sent:end] if end > self.num_sent else ""
        self.num_sent += len(delta)
        return delta

    def _ended_by_token(self, token: int) -> bool:
        params = self.params
        return len(self.token_ids) > params.min_tokens and (
            token in params.stop_token_ids or (token == self.eos_token_id and not params.ignore_eos))


@dataclass(eq=False)
class Request:
    prompt_token_ids: list[int]
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose K and V are in the cache
    block_table: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None  # "stop" (end-of-sequence or a stop string), "length", "error" or "abort"
    error: str | None = None  # why its step failed, when finish_reason is "error"
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache when admitted
    num_draft_tokens: int = 0  # speculative decoding (framework/spec_decode.py): drafts proposed for it
    num_accepted_tokens: int = 0  # and those of them accepted
    generator: torch.Generator | None = None
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # one per output token, with params.logprobs set
    prompt_logprobs: list[TokenLogprobs | None] | None = None  # one per prompt token, with params.prompt_logprobs
    detokenizer: IncrementalDetokenizer = field(default_factory=IncrementalDetokenizer, repr=False)

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError("a request needs at least one prompt token")

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_prefilling(self) -> bool:
        """More than one token left to compute: a prompt (or a preempted request's recompute) in progress."""
        return self.num_tokens - self.num_computed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status == RequestStatus.FINISHED

