"""The online loop (exercise 133): requests arrive at any time and stream their tokens while others run.

`AsyncLLM(engine)` wraps an `LLMEngine`. `await add_request(prompt_token_ids, params)` adds a request between
two steps and returns its stream, an async iterator of `StreamOutput`s; one background task steps the engine
while it has work and waits on an `asyncio.Event` when it has none; each step's outputs go to their requests'
streams; `abort(request_id)`, or a consumer that closes its stream or is cancelled, finishes the request and
frees its blocks; a failing step ends its own requests' streams with the error and the loop goes on.

vLLM's shape, much smaller: `AsyncLLM.generate`, `add_request`, `abort` and `_run_output_handler` in
vllm/v1/engine/async_llm.py (commit b31e9326a7d9394aab8c767f8ebe225c65594b60), the per-request queue
`RequestOutputCollector` in vllm/v1/engine/output_processor.py (b31e9326a7d9394aab8c767f8ebe225c65594b60) and
the engine core's loop `EngineCoreProc.run_busy_loop` in vllm/v1/engine/core.py
(b31e9326a7d9394aab8c767f8ebe225c65594b60). vLLM runs the engine core in another process; here, in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from framework.async_engine import StreamOutput, text_delta
from framework.engine import LLMEngineBase, RequestOutput, StepError
from framework.sampling import SamplingParams


class RequestStream:
    """One request's outputs, in order, ending with the final one. Closing it early (`aclose`), or cancelling
    the task waiting on it, aborts the request: nobody will read the rest."""

    def __init__(self, request_id: str, llm: AsyncLLM) -> None:
        self.request_id, self.llm = request_id, llm
        self.queue: asyncio.Queue[StreamOutput] = asyncio.Queue()
        self.num_chars_sent = 0
        self.ended = False  # the final output was taken, or the consumer left

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> StreamOutput:
        if self.ended:
            raise StopAsyncIteration
        try:
            output = await self.queue.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        self.ended = output.finished
        return output

    async def aclose(self) -> None:
        if not self.ended:
            self.ended = True
            self.llm.abort(self.request_id)


class AsyncLLM:
    def __init__(self, engine: LLMEngineBase) -> None:
        self.engine = engine
        self.streams: dict[str, RequestStream] = {}  # the unfinished requests, by request id
        self.has_work = asyncio.Event()
        self.stepping = asyncio.Lock()  # held while a step runs: the engine is touched by one thread at a time
        self.pending_aborts: set[str] = set()
        self.loop_task: asyncio.Task | None = None

    async def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None
                          ) -> RequestStream:
        """Queue a request between two steps; its stream. A request the engine refuses raises its ValueError."""
        async with self.stepping:
            request = self.engine.add_request(prompt_token_ids, params)
        stream = self.streams[request.request_id] = RequestStream(request.request_id, self)
        if self.loop_task is None or self.loop_task.done():
            self.loop_task = asyncio.get_running_loop().create_task(self.run_loop())
        self.has_work.set()
        return stream

    def abort(self, request_id: str) -> None:
        """Finish the request with reason "abort" and free its blocks: now, or right after the running step."""
        if request_id in self.streams:
            self.pending_aborts.add(request_id)
            if not self.stepping.locked():
                self.apply_aborts()

    def apply_aborts(self) -> None:
        for request_id in self.pending_aborts:
            stream = self.streams.pop(request_id, None)
            request = self.engine.requests.get(request_id)
            if request is not None:
                self.engine.abort_requests([request], "abort")
            if stream is not None:
                stream.queue.put_nowait(StreamOutput(request_id, finished=True, finish_reason="abort"))
        self.pending_aborts.clear()

    async def run_loop(self) -> None:
        """Step while there is work; sleep on `has_work` (no polling) when there is none."""
        while True:
            if not self.engine.has_unfinished_requests():
                self.has_work.clear()
                await self.has_work.wait()
                continue
            async with self.stepping:
                # step() is seconds of synchronous torch work at worst: on this thread it would freeze every other
                # coroutine (new connections, tokens being sent, disconnects noticed). In a worker thread, with
                # torch releasing the GIL in its kernels, the event loop goes on while the step runs.
                try:
                    outputs = await asyncio.to_thread(self.engine.step)
                except Exception as error:  # noqa: BLE001 - the failing requests are ended below, the loop goes on
                    outputs = []
                    self.fail(error)
                self.apply_aborts()  # before routing: an aborted request's last tokens have no reader
            for output in outputs:
                self.route(output)

    def fail(self, error: Exception) -> None:
        """End the streams of the step's requests with its error. The engine's StepError names them (and has
        already freed them); any other exception fails every unfinished request, as nobody can tell which ran."""
        if not isinstance(error, StepError):
            error = self.engine.fail_step([self.engine.requests[rid] for rid in self.streams], error)
        for request_id in error.request_ids:
            stream = self.streams.pop(request_id, None)
            if stream is not None:
                request = self.engine.requests.get(request_id)
                message = request.error if request is not None and request.error else str(error)
                stream.queue.put_nowait(StreamOutput(request_id, finished=True, finish_reason="error",
                                                     error=message))

    def route(self, output: RequestOutput) -> None:
        stream = self.streams.get(output.request_id)
        if stream is None:  # aborted
            return
        completion = output.outputs[0]
        new_text = text_delta(completion.text, stream.num_chars_sent, output.finished)
        stream.num_chars_sent += len(new_text)
        stream.queue.put_nowait(StreamOutput(output.request_id, list(output.new_token_ids), new_text,
                                             output.finished, completion.finish_reason, output.error))
        if output.finished:
            del self.streams[output.request_id]

    async def shutdown(self) -> None:
        """Stop the background loop (a step in flight finishes in its thread)."""
        if self.loop_task is not None:
            self.loop_task.cancel()
            await asyncio.gather(self.loop_task, return_exceptions=True)
