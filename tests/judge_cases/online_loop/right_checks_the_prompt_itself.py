"""Correct: add_request checks the prompt's tokens itself and raises its own ValueError, with its own message, before
the engine sees the prompt (the statement fixes the class, ValueError). The public cases compared the engine's message
and failed it; the hidden ones passed it."""

import asyncio

from framework.async_engine import StreamOutput, text_delta
from framework.engine import StepError


class Stream:
    def __init__(self, request_id, llm):
        self.request_id, self.llm = request_id, llm
        self.queue = asyncio.Queue()
        self.sent = 0
        self.done = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.done:
            raise StopAsyncIteration
        try:
            out = await self.queue.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        self.done = out.finished
        return out

    async def aclose(self):
        if not self.done:
            self.done = True
            self.llm.abort(self.request_id)


class AsyncLLM:
    def __init__(self, engine):
        self.engine = engine
        self.streams = {}
        self.wake = asyncio.Event()
        self.lock = asyncio.Lock()
        self.to_abort = []
        self.task = None

    async def add_request(self, prompt_token_ids, params=None):
        vocab = self.engine.model.cfg.vocab_size
        if any(not 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError("token out of the vocabulary")
        async with self.lock:
            request = self.engine.add_request(prompt_token_ids, params)
        stream = Stream(request.request_id, self)
        self.streams[request.request_id] = stream
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.loop())
        self.wake.set()
        return stream

    def abort(self, request_id):
        self.to_abort.append(request_id)
        if not self.lock.locked():
            self.flush_aborts()

    def flush_aborts(self):
        while self.to_abort:
            rid = self.to_abort.pop()
            stream = self.streams.pop(rid, None)
            if stream is None:
                continue
            self.engine.abort_requests([self.engine.requests[rid]], "abort")
            stream.queue.put_nowait(StreamOutput(rid, [], "", True, "abort"))

    def end_with_error(self, request_ids, message):
        for rid in request_ids:
            stream = self.streams.pop(rid, None)
            if stream is not None:
                stream.queue.put_nowait(StreamOutput(rid, [], "", True, "error", message))

    async def loop(self):
        while True:
            if not self.engine.has_unfinished_requests():
                self.wake.clear()
                await self.wake.wait()
                continue
            outputs = []
            async with self.lock:
                try:
                    outputs = await asyncio.to_thread(self.engine.step)  # off the event loop's thread
                except StepError as err:
                    self.end_with_error(err.request_ids, str(err))
                self.flush_aborts()
            for out in outputs:
                stream = self.streams.get(out.request_id)
                if stream is None:
                    continue
                text = text_delta(out.outputs[0].text, stream.sent, out.finished)
                stream.sent += len(text)
                stream.queue.put_nowait(StreamOutput(out.request_id, out.new_token_ids, text, out.finished,
                                                     out.outputs[0].finish_reason, out.error))
                if out.finished:
                    del self.streams[out.request_id]

    async def shutdown(self):
        if self.task is not None:
            self.task.cancel()
