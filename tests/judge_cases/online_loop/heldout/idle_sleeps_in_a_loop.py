# VIOLATES: While idle the loop waits on an `asyncio.Event`: no engine call at all, not even `has_unfinished_requests`, at most 25 % of a CPU and no polling; `add_request` wakes it
"""While idle, sleeps 10 ms in a loop, checking its own streams (no engine call), instead of waiting on the event."""
import asyncio
import contextlib

from framework.async_engine import StreamOutput, text_delta
from framework.engine import StepError


class Stream:
    def __init__(self, request_id, owner):
        self.request_id = self.rid = request_id
        self.owner = owner
        self.queue = asyncio.Queue()
        self.ended = False  # its final output is queued
        self.done = False  # its final output was taken, or the consumer left
        self.chars = 0

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.done:
            raise StopAsyncIteration
        try:
            out = await self.queue.get()
        except asyncio.CancelledError:
            self.owner.abort(self.rid)
            raise
        if out.finished:
            self.done = True
        return out

    async def aclose(self):
        if not self.ended:
            self.owner.abort(self.rid)
        self.done = True


class AsyncLLM:
    def __init__(self, engine):
        self.engine = engine
        self.streams = {}
        self.aborts = []
        self.stepping = False
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task = None

    async def add_request(self, prompt_token_ids, params=None):
        async with self.lock:
            request = self.engine.add_request(prompt_token_ids, params)
        stream = Stream(request.request_id, self)
        self.streams[request.request_id] = stream
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._loop())
        self.wake.set()
        return stream

    def abort(self, request_id):
        stream = self.streams.get(request_id)
        if stream is None or stream.ended:
            return
        if self.stepping:
            self.aborts.append(request_id)
        else:
            self._abort_now(request_id)

    def _abort_now(self, request_id):
        stream = self.streams.get(request_id)
        if stream is None or stream.ended:
            return
        request = self.engine.requests.get(request_id)
        if request is not None and not request.is_finished:
            self.engine.abort_requests([request], "abort")
        self._end(stream, "abort")

    def _end(self, stream, reason, error=None):
        stream.ended = True
        stream.queue.put_nowait(StreamOutput(stream.rid, [], "", True, reason, error))
        del self.streams[stream.rid]

    def _deliver(self, out):
        stream = self.streams.get(out.request_id)
        if stream is None or stream.ended:
            return
        done = out.outputs[0]
        delta = text_delta(done.text, stream.chars, out.finished)
        stream.chars += len(delta)
        reason = done.finish_reason if out.finished else None
        stream.queue.put_nowait(StreamOutput(out.request_id, list(out.new_token_ids), delta, out.finished, reason,
                                             out.error))
        if out.finished:
            stream.ended = True
            del self.streams[out.request_id]

    async def _loop(self):
        while True:
            if not self.streams:
                await asyncio.sleep(0.01)
                continue
            failure = None
            async with self.lock:
                self.stepping = True
                try:
                    outputs = await asyncio.to_thread(self.engine.step)
                except StepError as err:
                    outputs, failure = [], err
                finally:
                    self.stepping = False
            for out in outputs:
                self._deliver(out)
            if failure is not None:
                for rid in failure.request_ids:
                    stream = self.streams.get(rid)
                    if stream is not None:
                        request = self.engine.requests.get(rid)
                        why = request.error if request is not None and request.error else str(failure)
                        self._end(stream, "error", why)
            pending, self.aborts = self.aborts, []
            for rid in pending:
                self._abort_now(rid)
            await asyncio.sleep(0)

    async def shutdown(self):
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self.task, 3)
