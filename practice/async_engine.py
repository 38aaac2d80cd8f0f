"""Exercise 133 — the online loop.

Statement: practice/exercises/133-online-loop.md. Grade: `python practice/judge.py 133`.
`AsyncLLM(engine)` wraps an LLMEngine (yours, or the reference when the judge grades this file) so that requests
can arrive at any time and stream their tokens while others run.
"""

from __future__ import annotations

import asyncio  # noqa: F401
from collections.abc import AsyncIterator, Sequence

from framework.async_engine import StreamOutput, text_delta  # noqa: F401
from framework.engine import LLMEngineBase, StepError  # noqa: F401
from framework.sampling import SamplingParams


class RequestStream:
    """One request's outputs (what `add_request` returns; write it your own way if you prefer): an async iterator
    of StreamOutput that stops after the final one, with `request_id` and `aclose()`."""

    def __init__(self, request_id: str, llm: AsyncLLM) -> None:
        raise NotImplementedError("exercise 133: RequestStream is not implemented (practice/async_engine.py)")

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> StreamOutput:
        """The next output; StopAsyncIteration after the final one. Cancelled while waiting: abort the request."""
        raise NotImplementedError("exercise 133: RequestStream.__anext__ is not implemented (practice/async_engine.py)")

    async def aclose(self) -> None:
        """The consumer leaves early: abort the request, unless its stream already ended."""
        raise NotImplementedError("exercise 133: RequestStream.aclose is not implemented (practice/async_engine.py)")


class AsyncLLM:
    """State you can use: `self.engine` (`add_request(prompt_ids, params)` -> Request, `step()` -> list of
    RequestOutput, raising StepError(.request_ids) when a step fails, `has_unfinished_requests()`,
    `abort_requests([request], "abort")`, `requests[request_id]`)."""

    def __init__(self, engine: LLMEngineBase) -> None:
        """Keep the engine; set up what the loop needs (the streams by request id, an asyncio.Event, ...)."""
        raise NotImplementedError("exercise 133: AsyncLLM.__init__ is not implemented (practice/async_engine.py)")

    async def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None
                          ) -> AsyncIterator[StreamOutput]:
        """Add the request between two steps (`self.engine.add_request`, whose ValueError goes up to the caller),
        start the background loop if it is not running, wake it, and return the request's stream: an async
        iterator of StreamOutput with a `request_id` attribute and an `aclose()` method."""
        raise NotImplementedError("exercise 133: AsyncLLM.add_request is not implemented (practice/async_engine.py)")

    def abort(self, request_id: str) -> None:
        """Finish the request with reason "abort" and free its blocks, now or right after the running step; its
        stream ends with a final StreamOutput (finished=True, finish_reason="abort")."""
        raise NotImplementedError("exercise 133: AsyncLLM.abort is not implemented (practice/async_engine.py)")

    async def shutdown(self) -> None:
        """Stop the background loop."""
        raise NotImplementedError("exercise 133: AsyncLLM.shutdown is not implemented (practice/async_engine.py)")
