"""Driver of exercise 133 (the online loop): the learner's `AsyncLLM` around an engine that replays a script, on a
scripted arrival schedule, in one event loop.

The script is what the reference engine generates for each request (its tokens, and why it finished), recorded by
the grader and sent with the call. `ScriptedEngine` is the framework's engine shell (adding, aborting, failing a
step, outputs) with no model: fakes for its scheduler (running requests first, then waiting ones while
`max_num_seqs` and the blocks allow) and KV-cache manager, and each step gives every request it runs its next
recorded token. `run_schedule` plays the grader's events (add a request and start a consumer of its stream, which
reads all of it or some outputs and then closes it or is cancelled; wait; abort; drain; stay idle) and returns what
happened as plain data, requests named by the schedule ("a", "b", ...); judge/hidden/online_loop.py checks it, and
replays the engine's log (every add_request, abort_requests and step, in order) on its own `ScriptedEngine`: what
the engine reports must be what those calls do.
With `timeline=False` (a public case, replayed by comparing replies) the facts that say when the loop stepped,
which differ between two right loops, are diagnostics.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import selectors
import threading
import time
from types import ModuleType, SimpleNamespace
from typing import Any, Sequence

from framework.engine import EngineConfig, LLMEngineBase, RequestOutput
from framework.request import Request, RequestStatus
from framework.scheduler import SchedulerBase
from judge.crossing import learner_error
from judge.drivers import load_model
from judge.drivers.engine import BracketTokenizer, FakeRunner, ints, params_of
from judge.harness import short

READ_TIMEOUT = 3.0  # seconds a consumer waits for its stream's next output before calling it hung
TIMELINE = ("steps", "aborts", "idle", "log")  # the facts that say when the loop stepped
STEP_SECONDS = 0.02  # what a step of the scripted engine lasts, as a forward pass would: the schedule's events
# (an abort, a new request, a consumer that leaves) happen while requests decode, not after they all finished
STEP_START = 0.01  # of which before the step counts as started: what the event loop does as a step begins (the
# consumer woken by the last outputs, the abort it asks for) comes first, whatever the threads' timing
IDLE_GRACE = 0.2  # seconds after the last stream ended before an idle period starts: the step that ended it returns,
# and a loop's last check (a stepping thread's has_unfinished_requests) is made, however loaded the machine
IDLE_CPU_SHARE = 0.25  # of an idle period's wall time; a loop that sleeps on an Event uses about none
IDLE_WAKEUPS = 2  # times the event loop woke in one idle period; a loop that sleeps on an Event wakes none
FROZEN_AFTER = 5.0  # seconds a step in another thread waits for the event loop to run one callback: a loop blocked
# until the step returns (a thread joined, a blocking wait) never runs it, frozen as if it stepped itself


class CountingSelector(selectors.DefaultSelector):
    """The event loop's selector, counting the times the loop slept and woke (its selects that may block; a turn with
    callbacks ready does not sleep): a loop polling with asyncio.sleep wakes at every poll, one waiting on an Event
    only when it is set."""

    wakeups = 0

    def select(self, timeout: float | None = None) -> list:
        self.wakeups += timeout is None or timeout > 0
        return super().select(timeout)


class InjectedFailure(RuntimeError):
    """What the forward pass raises at the scheduled step (a failing step)."""


class ScriptedKVCacheManager:
    """Blocks for the scripted engine: a running request holds enough for its tokens; `free` gives them back."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size, self.prefix_cache = block_size, None
        self.block_pool = SimpleNamespace(num_blocks=num_blocks)  # what SchedulerBase.add_request reads
        self.free_ids = list(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids)

    def grow(self, request: Request) -> bool:
        """Blocks for every token of `request`; False (and none taken) when too few are free."""
        need = -(-request.num_tokens // self.block_size) - len(request.block_table)
        if need > len(self.free_ids):
            return False
        request.block_table.extend(self.free_ids.pop() for _ in range(max(need, 0)))
        return True

    def free(self, request: Request) -> None:
        self.free_ids.extend(request.block_table)
        request.block_table.clear()


class ScriptedScheduler(SchedulerBase):
    """The framework's queues, and the scripted engine's choice of the requests each step runs."""

    def run_next(self) -> list[Request]:
        """The requests of the next step: the running ones that have blocks for their tokens, then waiting ones
        in order while a slot and their blocks are free."""
        scheduled = [r for r in self.running if self.kv.grow(r)]
        while self.waiting and len(self.running) < self.max_num_seqs and self.kv.grow(self.waiting[0]):
            request = self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            scheduled.append(request)
        return scheduled


class SplitCharTokenizer(BracketTokenizer):
    """Token t decodes to "<t>", but a token with t % 4 == 1 to the first two bytes of "€", whose third byte starts
    the next token: as with a byte-level tokenizer, a text can end in half a character (U+FFFD) until the next
    token completes it, which `text_delta` holds back."""

    def decode(self, token_ids: Sequence[int]) -> str:
        data, split = bytearray(), False
        for t in map(int, token_ids):
            data += b"\xac" if split else b""
            split = t % 4 == 1
            data += b"\xe2\x82" if split else f"<{t}>".encode()
        return data.decode("utf-8", "replace")


class ScriptedEngine(LLMEngineBase):
    """The engine the learner's loop drives: each step replays the recorded tokens of the requests it runs (the
    forward pass number `fail_at` raises InjectedFailure, and the step fails as the engine's own would), and
    every call is recorded."""

    scheduler_cls, kv_cache_manager_cls, runner_cls = ScriptedScheduler, ScriptedKVCacheManager, FakeRunner

    def __init__(self, model: Any, config: EngineConfig, script: dict[str, list], fail_at: int | None,
                 paced: bool = True) -> None:
        super().__init__(model, config, SplitCharTokenizer())
        self.script, self.fail_at, self.passes = script, fail_at, 0  # name -> [tokens, finish reason]
        self.paced = paced  # steps last STEP_SECONDS (False: the grader's replay of the log)
        self.steps: list[dict] = []
        self.log: list[list] = []  # ["add", name], ["abort", [names], reason], ["step"]: what changed the engine
        self.names: dict[str, str] = {}  # engine request id -> the schedule's name
        self.next_names: list[str] = []  # the names of the requests the schedule is adding, in order
        self.in_step, self.step_thread = False, None
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop the learner's AsyncLLM runs on
        self.loop_thread: int | None = None  # the thread that runs it
        self.frozen_at: int | None = None  # the first step during which that loop ran nothing (FROZEN_AFTER)
        self.touched_in_step: list[str] = []  # engine calls made while a step ran (in another thread)
        self.calls = 0  # every engine call the loop made: step, add_request, has_unfinished_requests, ...

    def _touch(self, what: str) -> None:
        self.calls += 1
        if self.in_step and threading.get_ident() != self.step_thread:
            self.touched_in_step.append(what)

    def add_request(self, prompt_token_ids, params=None):
        self._touch("add_request")
        name = self.next_names.pop(0) if self.next_names else None  # a refused request takes its name too
        request = super().add_request(prompt_token_ids, params)
        self.names[request.request_id] = name or request.request_id
        self.log.append(["add", self.names[request.request_id]])
        return request

    def abort_requests(self, requests, reason="abort"):
        self._touch("abort_requests")
        requests = list(requests)
        self.log.append(["abort", [self.names.get(getattr(r, "request_id", None), short(r)) for r in requests],
                         short(reason)])
        return super().abort_requests(requests, reason)

    def has_unfinished_requests(self) -> bool:
        self._touch("has_unfinished_requests")
        return super().has_unfinished_requests()

    def step(self) -> list[RequestOutput]:
        self._touch("step")
        self.log.append(["step"])
        record = {"thread": threading.get_ident(), "scheduled": [], "failed": False}
        self.in_step, self.step_thread = True, threading.get_ident()
        try:
            time.sleep(STEP_START * self.paced)
            self.steps.append(record)
            scheduled = self.scheduler.run_next()
            record["scheduled"] = [self.names.get(r.request_id, "?") for r in scheduled]
            if not scheduled:
                return []
            self.passes += 1
            started = time.monotonic()
            self.probe_loop()
            time.sleep(max(0.0, STEP_SECONDS - STEP_START - (time.monotonic() - started)) * self.paced)
            if self.passes == self.fail_at:
                error = InjectedFailure(f"injected failure at forward pass {self.fail_at}")
                raise self.fail_step(scheduled, error) from error
            return [self.replay(r) for r in scheduled]
        except BaseException:
            record["failed"] = True
            raise
        finally:
            self.in_step = False

    def probe_loop(self) -> None:
        """Whether the event loop runs a callback while this step runs in another thread; the first step where it
        does not within FROZEN_AFTER seconds is kept (once: a frozen loop costs that wait once)."""
        if self.loop is None or self.frozen_at is not None or threading.get_ident() == self.loop_thread:
            return
        ran = threading.Event()
        try:
            self.loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # the loop is closed: the schedule is over
            return
        if not ran.wait(FROZEN_AFTER):
            self.frozen_at = len(self.steps) - 1

    def replay(self, request: Request) -> RequestOutput:
        """The request's next recorded token, appended; finished with the recorded reason after its last."""
        tokens, reason = self.script[self.names.get(request.request_id, "?")]
        token = tokens[len(request.output_token_ids)]
        request.num_computed_tokens = request.num_tokens
        request.output_token_ids.append(token)
        if len(request.output_token_ids) == len(tokens):
            self.scheduler.finish(request, reason)
        return self.make_output(request, [token])


def plain_stream_output(o: Any) -> dict:
    try:
        error = o.error if o.error is None or isinstance(o.error, str) else \
            {"not a string": f"{short(o.error)} ({type(o.error).__name__})"}  # a server cannot write it as JSON
        return {"request_id": str(o.request_id), "new_token_ids": ints(o.new_token_ids), "new_text": str(o.new_text),
                "finished": bool(o.finished), "finish_reason": o.finish_reason, "error": error}
    except (AttributeError, TypeError, ValueError):
        return {"bad": short(o)}


class Consumer:
    """Reads one stream: everything, or `read` outputs and then closes the stream or is cancelled."""

    def __init__(self, engine: Any, stream: Any, read: int | None, close: str | None) -> None:
        self.engine, self.stream, self.read, self.close = engine, stream, read, close
        self.outputs: list[dict] = []
        self.end: str | None = None  # "stopped" (StopAsyncIteration), "hung", "closed", "cancelled", "raised ..."
        self.closed_at_step: int | None = None  # steps started when the close (or cancel) returned
        self.progress = asyncio.Event()

    async def run(self) -> None:
        try:
            while self.read is None or len(self.outputs) < self.read:
                try:
                    output = await asyncio.wait_for(anext(self.stream), READ_TIMEOUT)
                except StopAsyncIteration:
                    self.end = "stopped"
                    return
                except TimeoutError:
                    self.end = "hung"
                    return
                self.outputs.append(plain_stream_output(output))
                self.progress.set()
            if self.close == "aclose":
                await self.stream.aclose()
                self.end = "closed"
            else:  # cancel the consumer while it waits for the next output
                while True:
                    waiting = asyncio.ensure_future(anext(self.stream))
                    await asyncio.sleep(0)
                    if not waiting.done():
                        break
                    if waiting.exception() is not None:  # StopAsyncIteration: it ended before it was cancelled
                        raise waiting.exception()
                    self.outputs.append(plain_stream_output(waiting.result()))  # it was there already
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
                self.end = "cancelled"
            self.closed_at_step = len(self.engine.steps)
        except BaseException as exc:  # noqa: BLE001 - the learner's stream raised: reported
            self.end = f"raised {type(exc).__name__}: {short(str(exc))}"
        finally:
            self.progress.set()

    def plain(self) -> dict:
        names = self.engine.names
        outputs = [{**o, "request_id": names.get(o["request_id"], o["request_id"])} if "bad" not in o else o
                   for o in self.outputs]
        return {"outputs": outputs, "end": self.end, "closed_at_step": self.closed_at_step,
                "request_id": self.engine.names.get(str(getattr(self.stream, "request_id", None)))}


async def _play(impl: ModuleType, engine: Any, events: list[dict], selector: CountingSelector) -> dict:
    engine.loop, engine.loop_thread = asyncio.get_running_loop(), threading.get_ident()
    llm = impl.AsyncLLM(engine)
    consumers: dict[str, Consumer] = {}
    tasks: list[asyncio.Task] = []
    idle: list[dict] = []
    aborts: dict[str, int] = {}
    refused: dict[str, str] = {}
    for event in events:
        op, name = event["op"], event.get("name")
        if op == "add":
            engine.next_names.append(name)
            try:
                stream = llm.add_request(event["prompt"], params_of(event.get("params")))
                if inspect.isawaitable(stream):
                    stream = await asyncio.wait_for(stream, READ_TIMEOUT)
            except TimeoutError:
                return {"hung": f"add_request of request {name} did not return within {READ_TIMEOUT:g} s"}
            except ValueError as exc:
                if name in engine.names.values():  # the engine took the request: the ValueError is the learner's
                    raise
                if name in engine.next_names:  # raised before the engine saw it
                    engine.next_names.remove(name)
                refused[name] = short(str(exc))
                continue
            consumer = consumers[name] = Consumer(engine, stream, event.get("read"), event.get("close"))
            tasks.append(asyncio.ensure_future(consumer.run()))
        elif op == "wait" and name in consumers:  # until the consumer has `outputs` outputs, or has ended
            consumer = consumers[name]
            deadline = time.monotonic() + READ_TIMEOUT
            while len(consumer.outputs) < event["outputs"] and consumer.end is None and time.monotonic() < deadline:
                consumer.progress.clear()
                try:
                    await asyncio.wait_for(consumer.progress.wait(), max(deadline - time.monotonic(), 0.01))
                except TimeoutError:
                    break
        elif op == "abort":  # a name never added is aborted as an unknown request id
            rid = getattr(consumers[name].stream, "request_id", None) if name in consumers else name
            if rid is None:
                return {"problem": f"the stream add_request returned for request {name} has no request_id",
                        "hint": "the stream has a request_id attribute, the id the engine gave the request"}
            llm.abort(rid)
            aborts[name] = len(engine.steps)
        elif op in ("drain", "idle"):
            await asyncio.gather(*tasks)
            if op == "idle":
                await asyncio.sleep(IDLE_GRACE)
                steps, calls, wakeups = len(engine.steps), engine.calls, selector.wakeups
                cpu, wall = time.process_time(), time.monotonic()
                await asyncio.sleep(event["seconds"])
                idle.append({"steps": len(engine.steps) - steps, "calls": engine.calls - calls,
                             "wakeups": selector.wakeups - wakeups - 1,  # the sleep above is one
                             "cpu": time.process_time() - cpu, "wall": time.monotonic() - wall})
    await asyncio.gather(*tasks)
    await asyncio.sleep(0.05)
    shutdown_problem = await _shut_down(llm)
    if shutdown_problem:
        return shutdown_problem
    # the requests refused first, by the class the statement fixes (the message, a learner's or the engine's, is a
    # diagnostic): a stream that is missing because its request was refused is named so
    return {"refused": {name: "ValueError" for name in refused}, "_refused": refused,
            "streams": {name: c.plain() for name, c in consumers.items()}, "idle": idle, "aborts": aborts}


async def _shut_down(llm: Any) -> dict | None:
    """The learner's `await llm.shutdown()`, if it has one: None, or what went wrong."""
    shutdown = getattr(llm, "shutdown", None)
    if shutdown is None:
        return None
    ended = shutdown()
    if not inspect.isawaitable(ended):
        return {"problem": f"shutdown() returned {short(ended)}, not an awaitable",
                "hint": "shutdown is a coroutine: async def shutdown(self), as in the starter file"}
    try:
        await asyncio.wait_for(ended, READ_TIMEOUT)
    except TimeoutError:
        return {"hung": f"shutdown() did not return within {READ_TIMEOUT:g} s",
                "hint": "cancel the background task (task.cancel()) rather than wait for a loop that never ends"}
    return None


def describe(fn: str, config: dict, events: list[dict], fail_at: int | None = None, *rest: Any) -> str | None:
    """A schedule of `run_schedule` as the learner can read it: a replayed case's input (judge/public.py), and the
    hidden cases' too."""
    if fn != "run_schedule":
        return None
    parts = []
    for e in events:
        if e["op"] == "add":
            how = "" if e["read"] is None else f", read {e['read']} output(s) then {e['close']}"
            params = f", max_tokens={e['params']['max_tokens']}" if e["params"] else ""
            params += f", stop={e['params']['stop']}" if e["params"] and e["params"]["stop"] else ""
            parts.append(f"add {e['name']} ({short(e['prompt'])}{params}{how})")
        elif e["op"] == "wait":
            parts.append(f"wait until {e['name']} has {e['outputs']} output(s)")
        elif e["op"] == "idle":
            parts.append(f"wait for every stream, then stay idle {e['seconds']} s")
        else:
            parts.append(f"{e['op']} {e.get('name', '')}".strip())
    return "; ".join(parts) + f" (EngineConfig({config}))" + (f", forward pass {fail_at} raises" if fail_at else "")


def where(path: str, fn: str, *args: Any) -> str | None:
    """A place in `run_schedule`'s answer (`steps[0].on_loop_thread`) in the learner's words."""
    if fn != "run_schedule":
        return None
    if found := re.fullmatch(r"steps\[(\d+)\]\.on_loop_thread", path):
        return f"engine step {int(found[1]) + 1} ran on the event loop's thread (step() blocks: call it in a thread)"
    if path == "steps_on_loop_thread":
        return "the engine steps run on the event loop's thread (step() blocks: await it in another thread)"
    if path == "loop_frozen_at_step":
        return "the engine step (counted from 0) during which the event loop stopped answering (None: never)"
    if found := re.fullmatch(r"idle_periods\[(\d+)\]\.(\w+)", path):
        what = {"engine_calls": "the engine calls it made (the statement: none while idle)",
                "polled": f"whether the event loop woke more than {IDLE_WAKEUPS} times (a loop that polls with "
                          "asyncio.sleep does: await an asyncio.Event that add_request sets)",
                "spun": f"whether it used more than {IDLE_CPU_SHARE:.0%} of the time in CPU (a loop that spins)"}
        return f"idle period {int(found[1]) + 1}: {what.get(found[2], found[2])}"
    if found := re.fullmatch(r"refused\.(\w+)", path):
        return f"what add_request raised for request {found[1]} (None: the engine took it)"
    if found := re.fullmatch(r"streams\.(\w+)\.(\w+)(.*)", path):
        return f"stream {found[1]}'s {found[2]}{found[3]}"
    return None


def run_schedule(impl: ModuleType, config: dict, events: list[dict], fail_at: int | None = None,
                 time_limit: float = 30.0, timeline: bool = True, script: dict[str, list] | None = None) -> dict:
    """Play `events` on the learner's AsyncLLM around a fresh engine (EngineConfig(**config), the bracket
    tokenizer) replaying `script` (request name -> [its tokens, its finish reason]); forward pass number `fail_at`
    raises. What happened, as plain data (the timeline as diagnostics unless `timeline`)."""
    if not isinstance(getattr(impl, "AsyncLLM", None), type):
        return {"problem": "AsyncLLM must be a class, as in the starter file"}
    engine = ScriptedEngine(load_model(), EngineConfig(**config), script or {}, fail_at)
    selector = CountingSelector()
    try:
        with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selector)) as runner:
            played = runner.run(asyncio.wait_for(_play(impl, engine, events, selector), time_limit))
    except TimeoutError:
        played = {"hung": f"the schedule did not end within {time_limit} s"}
    except BaseException as exc:  # noqa: BLE001
        played = {"error": learner_error(exc)}
    steps = [{"scheduled": s["scheduled"], "failed": s["failed"], "on_loop_thread": s["thread"] == engine.loop_thread}
             for s in engine.steps]
    requests = {engine.names.get(r.request_id, r.request_id): {
        "outputs": list(r.output_token_ids), "finish_reason": r.finish_reason, "finished": r.is_finished,
        "blocks": len(r.block_table), "error": r.error} for r in engine.requests.values()}
    reply = {**played, "steps": steps, "log": engine.log, "touched_in_step": engine.touched_in_step[:5],
             "loop_frozen_at_step": engine.frozen_at,
             "requests": requests, "free": engine.kv_cache_manager.num_free_blocks,
             "num_blocks": engine.config.num_blocks,
             "unfinished": bool(engine.scheduler.running or engine.scheduler.waiting)}
    if not timeline:  # what is the same for every right loop, in plain values
        reply["steps_on_loop_thread"] = sum(s["on_loop_thread"] for s in steps)
        reply["idle_periods"] = [{"engine_calls": p["calls"], "polled": p["wakeups"] > IDLE_WAKEUPS,
                                  "spun": p["cpu"] > IDLE_CPU_SHARE * p["wall"]} for p in played.get("idle", [])]
        for key in TIMELINE:
            if key in reply:
                reply[f"_{key}"] = reply.pop(key)
    return reply
