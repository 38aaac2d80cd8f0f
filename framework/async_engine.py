"""What the online loop (exercise 133) streams: one `StreamOutput` per step that gave a request tokens, then a
final one. The loop itself is the exercise (practice/async_engine.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StreamOutput:
    request_id: str
    new_token_ids: list[int] = field(default_factory=list)  # produced since the previous output of this stream
    new_text: str = ""  # the text those tokens added (see `text_delta`)
    finished: bool = False  # the last output of the stream: nothing comes after it
    finish_reason: str | None = None  # "stop", "length", "abort" or "error", on the final output
    error: str | None = None  # why the request's step failed, when finish_reason is "error"


def text_delta(text: str, num_sent: int, finished: bool) -> str:
    """The part of `text` after the first `num_sent` characters that can be sent now. Until the request
    finishes, a trailing U+FFFD is held back: the next token may complete that multi-byte character, and text
    sent cannot be taken back. So the concatenated deltas of a stream are exactly its final text."""
    end = len(text) if finished else len(text.rstrip("\ufffd"))
    return text[num_sent:end] if end > num_sent else ""
