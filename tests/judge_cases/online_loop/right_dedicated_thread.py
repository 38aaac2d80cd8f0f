"""Correct, written differently: the engine lives in a thread of its own, which alone calls it. The event loop
sends it commands through a queue.Queue (the thread blocks on it when idle) and gets outputs back with
call_soon_threadsafe; add_request awaits the thread's answer (the stream, registered before its first output), so
a refused prompt raises at the caller."""

import asyncio
import queue
import threading
from types import SimpleNamespace

from framework.async_engine import StreamOutput, text_delta


class Stream:
    def __init__(self, request_id, llm):
        self.request_id, self.llm = request_id, llm
        self.items = asyncio.Queue()
        self.finished = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.finished:
            raise StopAsyncIteration
        try:
            item = await self.items.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        self.finished = item.finished
        return item

    async def aclose(self):
        if not self.finished:
            self.finished = True
            self.llm.abort(self.request_id)


class AsyncLLM:
    def __init__(self, engine):
        self.engine = engine
        self.commands = queue.Queue()
        self.loop = None
        self.streams = {}
        self.thread = None

    async def add_request(self, prompt_token_ids, params=None):
        if self.thread is None:
            self.loop = asyncio.get_running_loop()
            self.thread = threading.Thread(target=self.engine_thread, daemon=True)
            self.thread.start()
        answer = self.loop.create_future()  # the stream, set in this thread before any output of it arrives
        self.commands.put(("add", (list(prompt_token_ids), params), answer))
        return await answer

    def register(self, request_id, answer):
        stream = self.streams[request_id] = Stream(request_id, self)
        answer.set_result(stream)

    def abort(self, request_id):
        self.commands.put(("abort", request_id, None))

    async def shutdown(self):
        if self.thread is not None:
            self.commands.put(("stop", None, None))
            await asyncio.to_thread(self.thread.join)

    # --- in the engine thread

    def deliver(self, request_id, output):
        def put():
            stream = self.streams.get(request_id)
            if stream is not None:
                stream.items.put_nowait(output)
                if output.finished:
                    del self.streams[request_id]
        self.loop.call_soon_threadsafe(put)

    def run_command(self, kind, arg, answer):
        if kind == "add":
            try:
                request = self.engine.add_request(*arg)
            except Exception as err:  # noqa: BLE001
                self.loop.call_soon_threadsafe(answer.set_exception, err)
            else:
                self.sent[request.request_id] = 0
                self.loop.call_soon_threadsafe(self.register, request.request_id, answer)
        elif kind == "abort":
            request = self.engine.requests.get(arg)
            if request is not None and not request.is_finished:
                self.engine.abort_requests([request], "abort")
                self.deliver(arg, StreamOutput(arg, finished=True, finish_reason="abort"))
        return kind != "stop"

    def engine_thread(self):
        self.sent = {}
        running = True
        while running:
            block = not self.engine.has_unfinished_requests()
            try:
                while running:
                    running = self.run_command(*self.commands.get(block=block))
                    block = False
            except queue.Empty:
                pass
            if not running or not self.engine.has_unfinished_requests():
                continue
            try:
                outputs = self.engine.step()
            except Exception as err:  # noqa: BLE001
                for rid in getattr(err, "request_ids", []):
                    self.deliver(rid, StreamOutput(rid, finished=True, finish_reason="error", error=str(err)))
                continue
            for out in outputs:
                done = SimpleNamespace(text=out.outputs[0].text, reason=out.outputs[0].finish_reason)
                new_text = text_delta(done.text, self.sent.get(out.request_id, 0), out.finished)
                self.sent[out.request_id] = self.sent.get(out.request_id, 0) + len(new_text)
                self.deliver(out.request_id, StreamOutput(out.request_id, list(out.new_token_ids), new_text,
                                                          out.finished, done.reason, out.error))
