"""Hidden tests of exercise 133 (the online loop, AsyncLLM).

The learner's AsyncLLM runs in the worker around an engine replaying what the reference engine generates for each
request (judge/drivers/async_engine.py; recorded here, `Schedule.script`), on a scripted arrival schedule:
requests added while others decode, aborts, consumers that close their stream or are cancelled, a failing forward
pass, idle periods; the checks of what happened are here. The tokens' independent reference is
`mini_llm.generate` on each request alone (as in exercise 130); a stream's text is the bracket tokenizer's decode
of its tokens.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from framework.engine import EngineConfig, StepError
from framework.sampling import SamplingParams
from judge.drivers.async_engine import (FROZEN_AFTER, IDLE_CPU_SHARE, IDLE_WAKEUPS, TIMELINE, ScriptedEngine,
                                       SplitCharTokenizer, describe)
from judge.drivers.engine import plain_params
from judge.harness import CaseFailure, Cases, short
from judge.hidden.end_to_end import alone, load_model, random_prompts
from judge.remote import Driver, learner_failure
from solutions import engine as ref

CASES = Cases()
CONFIG = {"num_blocks": 64, "block_size": 4, "token_budget": 32, "max_num_seqs": 4}
TOKENIZER = SplitCharTokenizer()  # the scripted engine's: its texts can end in half a character
# The statement's sentences the cases below check (practice/exercises/133-online-loop.md, "The contract")
IDLE_RULE = ('the statement: "While idle (every stream has ended and nothing is queued), the loop makes no engine '
             'call at all: no step, no add_request, not even has_unfinished_requests"')
IDLE_CPU_RULE = 'the statement: "CPU time above 25 % of the period\'s wall time" fails the case'
IDLE_WAKE_RULE = ('the statement: "waking the event loop more than twice in a period (a loop that polls with '
                  'asyncio.sleep every 0.1 s does)" fails the case')
ABORT_IN_STEP_RULE = ('the statement: "An abort during a step: the request is in no step that starts after abort() '
                      'returned"')
SHUTDOWN_RULE = 'the statement: "shutdown() returns within 3 s"'
THREAD_HINT = "run the step in a worker thread: outputs = await asyncio.to_thread(self.engine.step)"
FROZEN_HINT = ("await the step (outputs = await asyncio.to_thread(self.engine.step)); do not join a thread, take a "
               "threading.Lock or wait in any other blocking way on the loop's thread")
TEXT_HINT = "new_text = text_delta(output.outputs[0].text, characters sent so far, output.finished)"
IDLE_HINTS = {  # by the fact of an idle period that is wrong (the driver's names)
    "engine_calls": f"when the engine has no unfinished request, wait on an asyncio.Event that add_request sets: no "
                    f"step, no polling ({IDLE_RULE})",
    "spun": f"await an asyncio.Event instead of looping with asyncio.sleep(0) ({IDLE_CPU_RULE})",
    "polled": f"await an asyncio.Event that add_request sets instead of sleeping in a loop ({IDLE_WAKE_RULE})"}


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hidden cases' hints for what a public case's answer compares (judge/edition.py): each output's new_text,
    the steps on the loop's thread, a frozen loop, the idle periods."""
    if (driver, fn) != ("async_engine", "run_schedule") or not isinstance(value, dict):
        return []
    texts = [(f"['streams'][{name!r}]['outputs'][{i}]['new_text']", None, TEXT_HINT)
             for name, stream in value.get("streams", {}).items() for i in range(len(stream.get("outputs", [])))]
    threads = [(f"['steps'][{i}]['on_loop_thread']", None, THREAD_HINT) for i in range(len(value.get("steps", [])))]
    idle = [(f"['idle_periods'][{i}][{fact!r}]", None, hint) for i in range(len(value.get("idle_periods", [])))
            for fact, hint in IDLE_HINTS.items()]
    return texts + threads + idle + [("['steps_on_loop_thread']", None, THREAD_HINT),
                                     ("['loop_frozen_at_step']", None, FROZEN_HINT)]


class Schedule:
    """A schedule of events for the driver, with each request's prompt and params."""

    def __init__(self, seed: int, timeline: bool = True, **config: Any) -> None:
        """`timeline=False`: a schedule whose reply, but for when the loop stepped, is the same for every right
        loop, so that a public case can replay it (judge/drivers/async_engine.py, run_schedule)."""
        self.model = load_model()
        self.seed, self.config, self.events, self.requests = seed, {**CONFIG, **config}, [], {}
        self.timeline = timeline

    def add(self, name: str, length: int, max_tokens: int, read: int | None = None, close: str | None = None,
            ignore_eos: bool = True, prompt: list[int] | None = None, stop: list[str] | None = None) -> None:
        prompt = prompt or random_prompts(self.model, self.seed * 100 + len(self.requests), [length])[0]
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos, stop=stop or [])
        self.requests[name] = (prompt, params)
        self.events.append({"op": "add", "name": name, "prompt": prompt, "params": plain_params(params),
                            "read": read, "close": close})

    def wait(self, name: str, outputs: int) -> None:
        self.events.append({"op": "wait", "name": name, "outputs": outputs})

    def abort(self, name: str) -> None:
        self.events.append({"op": "abort", "name": name})

    def drain(self) -> None:
        self.events.append({"op": "drain"})

    def idle(self, seconds: float) -> None:
        self.events.append({"op": "idle", "seconds": seconds})

    def script(self) -> dict[str, list]:
        """What the reference engine generates for each request of the schedule, all added at once: [its tokens,
        its finish reason] by name, the script the engine around the learner's loop replays."""
        engine = ref.LLMEngine(self.model, EngineConfig(**self.config), TOKENIZER)
        added = {name: engine.add_request(prompt, params) for name, (prompt, params) in self.requests.items()}
        while engine.has_unfinished_requests():
            engine.step()
        return {name: [list(r.output_token_ids), r.finish_reason] for name, r in added.items()}

    def run(self, impl, fail_at: int | None = None) -> Run:
        script = self.script()
        reply = Driver(impl, "async_engine").run_schedule(self.config, self.events, fail_at, timeline=self.timeline,
                                                          script=script)
        return Run(self, reply, fail_at, script)


class Run:
    """What the driver reported, and the checks every case makes."""

    def __init__(self, schedule: Schedule, reply: dict, fail_at: int | None, script: dict[str, list]) -> None:
        self.schedule, self.reply, self.fail_at, self.script = schedule, reply, fail_at, script
        self.input = describe("run_schedule", schedule.config, schedule.events, fail_at)
        if "problem" in reply:
            raise CaseFailure(reply["problem"], input=self.input,
                              hint=reply.get("hint") or "keep `class AsyncLLM:` with the methods of the starter file")
        if "error" in reply:  # a MemoryError stays one (raised_failure), for the "memory" verdict
            raise learner_failure(reply["error"], "AsyncLLM", self.input)
        if "hung" in reply:
            raise CaseFailure(reply["hung"], input=self.input,
                              hint=reply.get("hint") or "add_request returns as soon as the request is queued; the "
                              f"background task steps the engine while it has unfinished requests; {SHUTDOWN_RULE}")
        timeline = [reply.get(key, reply.get(f"_{key}")) for key in TIMELINE]  # a replayable reply: diagnostics
        self.streams, (self.steps, self.aborts, self.idle, self.log) = reply["streams"], timeline

    def failed_requests(self) -> set[str]:
        return {name for s in self.steps if s["failed"] for name in s["scheduled"]}

    def first_step(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.steps) if name in s["scheduled"]), None)

    def last_step(self, name: str) -> int | None:
        found = [i for i, s in enumerate(self.steps) if name in s["scheduled"]]
        return found[-1] if found else None

    def check(self, aborted: dict[str, str] | None = None) -> None:
        """Every check that holds for any schedule; `aborted`: request -> how ("abort", "aclose", "cancel")."""
        aborted = aborted or {}
        self.check_threads()
        failed = self.failed_requests()
        for name, (prompt, params) in self.schedule.requests.items():
            if name in self.reply["refused"]:
                raise CaseFailure(f"add_request refused request {name}: ValueError: {self.reply['_refused'][name]}",
                                  input=self.input)
            failed_first = name in failed and (name not in aborted or self.failed_before_abort(name))
            expect = "error" if failed_first else "abort" if name in aborted else "complete"
            self.check_stream(name, prompt, params, expect, aborted.get(name))
        if self.reply["unfinished"] or self.reply["free"] != self.reply["num_blocks"]:
            left = [n for n, r in self.reply["requests"].items() if not r["finished"]]
            raise CaseFailure(f"after every stream ended, {self.reply['free']} of {self.reply['num_blocks']} blocks "
                              f"are free and the engine still has unfinished requests {left}", input=self.input,
                              hint="an aborted request is finished in the engine: "
                                   "self.engine.abort_requests([request], 'abort') frees its blocks")
        self.check_log()

    def failed_before_abort(self, name: str) -> bool:
        """Whether a step that failed ran `name` before its abort reached the engine (the worker's log of engine
        calls, which check_log replays): aborting a finished request does nothing, so it ends with 'error'."""
        steps = iter(self.steps)
        for op, *args in self.log:
            if op == "abort" and name in args[0]:
                return False
            if op not in ("add", "abort") and (step := next(steps, None)) and step["failed"] \
                    and name in step["scheduled"]:
                return True
        return False

    def check_idle(self) -> None:
        """In every idle period of the schedule: no engine call, little CPU, no polling."""
        for period in self.idle:
            if period["steps"] or period["calls"]:
                raise CaseFailure(f"with no request to serve, the loop called the engine {period['calls']} times "
                                  f"({period['steps']} steps) in {period['wall']:.2f} s", input=self.input,
                                  hint=IDLE_HINTS["engine_calls"])
            if period["cpu"] > IDLE_CPU_SHARE * period["wall"]:
                raise CaseFailure(f"with no request to serve, the process used {period['cpu']:.2f} s of CPU in "
                                  f"{period['wall']:.2f} s: the loop spins", input=self.input,
                                  hint=IDLE_HINTS["spun"])
            if period["wakeups"] > IDLE_WAKEUPS:
                raise CaseFailure(f"with no request to serve, the event loop woke {period['wakeups']} times in "
                                  f"{period['wall']:.2f} s: the loop polls", input=self.input,
                                  hint=IDLE_HINTS["polled"])

    def check_log(self) -> None:
        """What the worker reported of its engine (its steps, its requests, its free blocks, each stream's tokens
        among its request's) is what the engine's logged calls do, replayed here on an engine of the grader's."""
        try:
            engine, added = self.replay_log()
            same = [s["scheduled"] for s in engine.steps] == [s["scheduled"] for s in self.steps] and \
                engine.kv_cache_manager.num_free_blocks == self.reply["free"] and \
                all(self.reported_as(name, r) for name, r in added.items())
        except (KeyError, TypeError, ValueError, IndexError):  # a malformed log
            same = False
        if not same:
            raise CaseFailure("what the engine reported (its steps, its requests' tokens, its free blocks, the "
                              "tokens the streams received) is not what its calls did: add_request, abort_requests "
                              "and step, replayed in their order", input=self.input,
                              hint="change the engine only through add_request, abort_requests and step")

    def replay_log(self) -> tuple[ScriptedEngine, dict]:
        """A fresh engine of the grader's after the calls of the worker's log, and the requests added to it."""
        engine = ScriptedEngine(self.schedule.model, EngineConfig(**self.schedule.config), self.script, self.fail_at,
                                paced=False)
        added = {}
        for op, *args in self.log:
            if op == "add":
                engine.next_names.append(args[0])
                added[args[0]] = engine.add_request(*self.schedule.requests[args[0]])
            elif op == "abort":
                engine.abort_requests([added[name] for name in args[0] if name in added], args[1])
            else:
                with suppress(StepError):
                    engine.step()
        return engine, added

    def reported_as(self, name: str, request: Any) -> bool:
        """Whether the worker reported `request` (replayed) as it is, and its stream's tokens among its own."""
        reported = self.reply["requests"][name]
        tokens = [t for o in self.streams[name]["outputs"] for t in o["new_token_ids"]]
        return reported["outputs"] == request.output_token_ids and \
            reported["finish_reason"] == request.finish_reason and tokens == request.output_token_ids[:len(tokens)]

    def check_threads(self) -> None:
        if any(s["on_loop_thread"] for s in self.steps):
            raise CaseFailure("engine.step() ran on the event loop's thread: while it runs no other coroutine can "
                              "(new requests, streams, disconnects wait)", input=self.input,
                              hint=THREAD_HINT)
        frozen = self.reply.get("loop_frozen_at_step")
        if frozen is not None:
            raise CaseFailure(f"while engine.step() ran in another thread (step {frozen + 1}), the event loop did not "
                              f"run the judge's callback within {FROZEN_AFTER:g} s (the judge's step waits for it): "
                              "the loop waited for the step, which freezes every coroutine as if it stepped itself",
                              input=self.input,
                              hint=FROZEN_HINT)
        touched = self.reply["touched_in_step"]
        if touched:
            raise CaseFailure(f"the engine was called ({', '.join(touched)}) while a step was running in another "
                              "thread: the scheduler's queues can change under the step", input=self.input,
                              hint="touch the engine only between steps: add requests and apply aborts when no step "
                                   "runs (an asyncio.Lock held around the step, or queues the loop drains between "
                                   "steps)")

    def check_stream(self, name: str, prompt: list[int], params: SamplingParams, expect: str, how: str | None
                     ) -> None:
        stream = self.streams[name]
        outputs = stream["outputs"]
        where = f"the stream of request {name}"
        for o in outputs:
            if "bad" in o:
                raise CaseFailure(f"{where} yielded {o['bad']}; each item must be a StreamOutput", input=self.input,
                                  hint="yield framework.async_engine.StreamOutput(request_id, new_token_ids, "
                                       "new_text, finished, finish_reason, error)")
        if stream["request_id"] != name:
            raise CaseFailure(f"{where}: its request_id does not name the engine's request", input=self.input,
                              hint="stream.request_id is the request_id of the Request that engine.add_request "
                                   "returned")
        wrong = [o["request_id"] for o in outputs if o["request_id"] != name]
        if wrong:
            raise CaseFailure(f"{where} received outputs of request(s) {sorted(set(wrong))}", input=self.input,
                              hint="route each RequestOutput by its request_id to that request's stream")
        tokens = [t for o in outputs for t in o["new_token_ids"]]
        want = alone(self.schedule.model, prompt, params, self.schedule.model.cfg.eos_token_id, TOKENIZER)
        left_early = how in ("aclose", "cancel")
        if left_early and stream["end"] not in ("closed", "cancelled"):
            raise CaseFailure(f"the consumer of request {name} could not leave early: {stream['end']}",
                              input=self.input)
        if not left_early and stream["end"] != "stopped":
            ended = "the consumer waited in vain for the next output" if stream["end"] == "hung" else stream["end"]
            last = "its final output" if outputs and outputs[-1]["finished"] else "any final output"
            raise CaseFailure(f"{where} never ended ({ended}) after {last}", input=self.input,
                              hint="every stream ends exactly once: one output with finished=True, then "
                                   "StopAsyncIteration; after an abort or a failed step too")
        finals = [i for i, o in enumerate(outputs) if o["finished"]]
        if not left_early and finals != [len(outputs) - 1]:
            raise CaseFailure(f"{where}: outputs {finals} say finished=True; exactly one must, the last",
                              input=self.input, field="finished", expected=[len(outputs) - 1], got=finals)
        if expect == "complete" and tokens != want:
            raise CaseFailure(f"{where}: its tokens differ from generating the prompt alone (the offline engine's "
                              "tokens)", input=self.input, field="new_token_ids, all outputs", expected=want,
                              got=tokens, hint=self.tokens_hint(outputs, tokens, want))
        if expect != "complete" and tokens != want[:len(tokens)]:
            raise CaseFailure(f"{where}: its tokens are not a prefix of the prompt's tokens generated alone",
                              input=self.input, expected=want, got=tokens)
        if left_early:
            self.check_freed(name, stream["closed_at_step"], "await stream.aclose()" if how == "aclose"
                             else "cancelling the task waiting on the stream")
            return
        final = outputs[-1]
        ended_by_eos = not params.ignore_eos and want[-1] == self.schedule.model.cfg.eos_token_id
        stopped = ended_by_eos or any(stop in TOKENIZER.decode(want) for stop in params.stop)
        reason = {"abort": "abort", "error": "error"}.get(expect, "stop" if stopped else "length")
        if final["finish_reason"] != reason:
            raise CaseFailure(f"{where} ended with finish_reason {final['finish_reason']!r}, expected {reason!r}",
                              input=self.input, field="finish_reason", expected=reason, got=final["finish_reason"],
                              hint={"abort": "an aborted request's stream ends with finish_reason 'abort'",
                                    "error": "a failed step's requests end with finish_reason 'error' and the "
                                             "error (the StepError names them)"}.get(expect))
        if isinstance(final["error"], dict):
            raise CaseFailure(f"{where}: its final output's error is {final['error']['not a string']}, not a string",
                              input=self.input, hint="error=str(the StepError), or the Request's .error: a server "
                                                     "writes the stream as JSON")
        if expect == "error" and "injected failure" not in str(final["error"]):
            raise CaseFailure(f"{where}: its final output's error is {final['error']!r}; it must say why the step "
                              "failed", input=self.input, hint="the Request's .error, or str() of the StepError")
        text, full = "".join(o["new_text"] for o in outputs), TOKENIZER.decode(tokens)
        # a stream that an abort or a failed step ended may drop a half character it held back (it never completes)
        if text != full and not (expect in ("abort", "error") and text == full.rstrip("\ufffd")):
            raise CaseFailure(f"{where}: the new_text of its outputs, joined, is not the text of its tokens",
                              input=self.input, expected=full, got=short(text),
                              hint=TEXT_HINT)
        if expect == "abort":
            self.check_freed(name, self.aborts[name], "abort(request_id)")

    @staticmethod
    def tokens_hint(outputs: list[dict], tokens: list[int], want: list[int]) -> str:
        """The mistake the stream's outputs show: ended by an error, cut short, tokens sent twice or elsewhere."""
        final = outputs[-1] if outputs else {}
        if final.get("finish_reason") in ("error", "abort"):
            return (f"the stream ended with finish_reason {final['finish_reason']!r} (error {final.get('error')!r}) "
                    "although its request ran to the end: end a stream with 'error' only for the requests a "
                    "StepError names, and with 'abort' only when it is aborted")
        if tokens == want[:len(tokens)]:
            return (f"the stream stopped after {len(tokens)} of {len(want)} tokens: route every step's outputs, "
                    "up to the one with finished=True")
        if len(tokens) > len(want):
            return "more tokens than the request made: each step's new_token_ids go to its stream once, not again"
        return "each step's new_token_ids go to their own request's stream (route by request_id), once"

    def check_freed(self, name: str, at_step: int, what: str) -> None:
        state = self.reply["requests"][name]
        if state["finish_reason"] != "abort" or state["blocks"]:
            now = f"finished with reason {state['finish_reason']!r}" if state["finished"] else "unfinished"
            raise CaseFailure(f"after {what}, request {name} is {now} in the engine and holds {state['blocks']} "
                              "blocks; it must be finished with reason 'abort' "
                              "and its blocks freed", input=self.input,
                              hint="self.engine.abort_requests([request], 'abort') finishes it and frees its blocks "
                                   "(between steps); a stream that is closed or whose consumer is cancelled aborts "
                                   "its request")
        last = self.last_step(name)
        if last is not None and last > at_step:  # the step running when it returned may still have it
            raise CaseFailure(f"request {name} was still scheduled at engine step {last + 1}, after {what} returned "
                              f"at engine step {at_step}", input=self.input,
                              hint=f"apply an abort right after the running step ({ABORT_IN_STEP_RULE})")


# Public: the schedules whose replies are the same for every right loop (in the others, what a request got before an
# abort, a close or a failing step depends on when the loop stepped).
@CASES("one request streams the offline engine's tokens", timeout=30, public=True)
def _(impl):
    s = Schedule(1)
    s.add("a", 7, 9, ignore_eos=False)
    s.drain()
    s.run(impl).check()


@CASES("a stop string and max_tokens end their streams: finish_reason 'stop' and 'length'", timeout=30, public=True)
def _(impl):
    s = Schedule(11, timeline=False)
    prompt = random_prompts(s.model, 1100, [6])[0]
    fourth = alone(s.model, prompt, SamplingParams(max_tokens=4, ignore_eos=True), None)[-1]
    s.add("a", 6, 12, prompt=prompt, stop=[f"<{fourth}>"])  # stops at its 4th token, or where it came before
    s.add("b", 5, 3)
    s.drain()
    s.run(impl).check()


@CASES("aborting a finished request does nothing; the idle loop wakes for the next request", timeout=30, public=True)
def _(impl):
    s = Schedule(13, timeline=False)
    s.add("a", 5, 4)
    s.drain()
    s.abort("a")
    s.abort("never-added")
    s.idle(0.3)
    s.add("b", 6, 5)
    s.drain()
    run = s.run(impl)
    run.check_idle()
    run.check()
    if run.reply["requests"]["a"]["finish_reason"] != "length":
        raise CaseFailure(f"aborting request a after it had finished made its finish_reason "
                          f"{run.reply['requests']['a']['finish_reason']!r}; it finished with 'length'",
                          input=run.input, hint="abort() of a finished or unknown request does nothing")


@CASES("a request arriving while another decodes is admitted at once", timeout=30)
def _(impl):
    s = Schedule(2)
    s.add("a", 6, 16)
    s.wait("a", 3)
    s.add("b", 9, 6)
    s.wait("b", 2)
    s.add("c", 4, 5)
    s.drain()
    run = s.run(impl)
    run.check()
    first_b, last_a = run.first_step("b"), run.last_step("a")
    if first_b is None or last_a is None or first_b > last_a:
        raise CaseFailure(f"request b, added while a was decoding, first ran at engine step "
                          f"{first_b and first_b + 1} but a ran until engine step {last_a and last_a + 1}: the loop "
                          "took no new request while one ran",
                          input=run.input, hint="add_request must not wait for the running requests to finish: "
                                                "the engine admits new requests between any two steps")


@CASES("many streams at once: each gets its own tokens", timeout=30, public=True)
def _(impl):
    s = Schedule(3, timeline=False, max_num_seqs=3, token_budget=16)
    for i, (n, m) in enumerate([(5, 7), (12, 3), (3, 9), (8, 5), (6, 6), (10, 4)]):
        s.add("abcdef"[i], n, m)
    s.drain()
    s.run(impl).check()


@CASES("abort(request_id) ends the stream and frees the blocks", timeout=30)
def _(impl):
    s = Schedule(4)
    s.add("a", 8, 40)
    s.add("b", 5, 12)
    s.wait("a", 3)
    s.abort("a")
    s.drain()
    s.add("c", 6, 4)  # after the abort, the loop still serves
    s.drain()
    s.run(impl).check(aborted={"a": "abort"})


@CASES("a consumer that closes its stream early aborts its request", timeout=30)
def _(impl):
    s = Schedule(5)
    s.add("a", 7, 40, read=3, close="aclose")
    s.add("b", 6, 10)
    s.drain()
    s.run(impl).check(aborted={"a": "aclose"})


@CASES("a cancelled consumer aborts its request", timeout=30)
def _(impl):
    s = Schedule(6)
    s.add("a", 7, 40, read=2, close="cancel")
    s.add("b", 6, 10)
    s.drain()
    s.run(impl).check(aborted={"a": "cancel"})


@CASES("a failing step ends only its own requests' streams, and the loop goes on", timeout=30)
def _(impl):
    s = Schedule(7, max_num_seqs=2)
    s.add("a", 6, 10)
    s.add("b", 5, 10)
    s.add("c", 7, 6)  # waits for a free slot: not in the failing step
    s.drain()
    s.add("d", 4, 5)
    s.drain()
    run = s.run(impl, fail_at=3)
    failed = run.failed_requests()
    if not failed:
        raise CaseFailure("no step failed: the schedule was meant to fail forward pass 3 (a course bug)",
                          kind="error")
    run.check()


@CASES("idle: the loop sleeps without stepping or polling, and wakes for the next request", timeout=30)
def _(impl):
    s = Schedule(8)
    s.add("a", 5, 6)
    s.idle(0.4)
    s.add("b", 6, 5)
    s.idle(0.3)
    run = s.run(impl)
    run.check_idle()
    run.check()


@CASES("a refused request raises at add_request; the loop serves on", timeout=30, public=True)
def _(impl):
    s = Schedule(9)
    vocab = s.model.cfg.vocab_size
    s.events.append({"op": "add", "name": "bad", "prompt": [1, vocab + 5], "params": None, "read": None,
                     "close": None})
    s.add("a", 6, 5)
    s.drain()
    run = s.run(impl)
    if "bad" not in run.reply["refused"]:
        raise CaseFailure(f"add_request accepted the prompt [1, {vocab + 5}] (a token outside the vocabulary)",
                          input=run.input, hint="call self.engine.add_request, which checks the prompt and raises "
                                                "ValueError, and let the error go up to the caller")
    run.check()


@CASES("a long schedule: arrivals, aborts, closes and a failing step", timeout=45)
def _(impl):
    s = Schedule(10, max_num_seqs=3, token_budget=12, num_blocks=40)
    s.add("a", 9, 20)
    s.add("b", 14, 40)
    s.wait("a", 2)
    s.add("c", 5, 30, read=4, close="aclose")
    s.add("d", 3, 12)
    s.wait("d", 2)
    s.abort("b")
    s.add("e", 11, 7)
    s.drain()
    s.add("f", 6, 6)
    s.add("g", 4, 6)
    s.drain()
    run = s.run(impl, fail_at=14)
    run.check(aborted={"b": "abort", "c": "aclose"})
