"""An OpenAI-compatible server on the course's engine: `python -m course.serve`.

    python -m course.serve                       # the embedded model on 127.0.0.1:8000, the reference engine
                                                 # (in a student edition: yours, once exercises 125-133 pass)
    python -m course.serve --impl practice       # your engine and online loop (exercise 133), module by module
    python -c "from openai import OpenAI; c = OpenAI(base_url='http://127.0.0.1:8000/v1', api_key='-'); \\
        [print(x.choices[0].text, end='', flush=True) for x in c.completions.create(model='tiny-qwen3', \\
        prompt='Once upon a time', max_tokens=80, stream=True)]"

Endpoints: POST /v1/completions and /v1/chat/completions (stream true or false; Server-Sent Events ending with
`data: [DONE]`; `stream_options.include_usage`), GET /v1/models, /health and /metrics (Prometheus text). The
engine is `LLM()`'s (same model, dtype, device and EngineConfig defaults), and a request's sampling defaults are
`SamplingParams()`'s: greedy (temperature 0, where OpenAI's default is 1) and max_tokens 16 for completions (a
chat's is the rest of the context, as vLLM's), so a greedy request gets the tokens of `LLM().generate` offline.
The sampling fields follow vLLM's semantics (stop strings cut from the text, logprobs, echo, n, penalties,
min_tokens, min_p); a field the server does not implement is refused by name. docs/serving.md lists them against
vLLM's. A chat is rendered with the model's chat template when its
tokenizer has one; otherwise (the embedded model) with `SIMPLE_CHAT_TEMPLATE`: one "role: content" line per
message, then "assistant:". Bad input gets status 400 with an OpenAI-style error saying what to fix; when
`--max-pending` requests are unfinished, a new one gets 429. A client that disconnects mid-stream aborts its
request (its blocks are freed), streamed or not.

The front end never stalls the streams it serves: a body over `--max-body-bytes` (1 MiB by default) gets 413 before
it is parsed; text is encoded in a tokenizer thread (vLLM's `AsyncMicrobatchTokenizer` in
vllm/utils/async_utils.py, commit b31e9326a7d9394aab8c767f8ebe225c65594b60, also uses one thread) and decoded in the
engine's step, which runs in a worker thread. A non-streaming request races its client's disconnect, as vLLM's
`with_cancellation` (vllm/entrypoints/utils.py, b31e9326a7d9394aab8c767f8ebe225c65594b60). On SIGTERM or SIGINT the
server stops accepting connections, lets running requests finish for at most `--shutdown-timeout` seconds, then
aborts the rest: every stream still gets its final event (finish_reason "abort") and `[DONE]`.

The shape is vLLM's OpenAI server (vllm/entrypoints/openai/api_server.py, completion/serving.py,
chat_completion/serving.py): FastAPI and uvicorn over an `AsyncLLM`, with metrics named as vLLM's (vllm/v1/metrics/
loggers.py, commit b31e9326a7d9394aab8c767f8ebe225c65594b60), here under the prefix `mini_llm:`, each with a
`model_name` label.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework.engine import EngineConfig
from framework.observe import observe_schedule
from framework.request import OutputText
from framework.sampling import SamplingParams, TokenLogprobs

from course.structured_output import REQUEST_FIELDS, ConstraintError, as_request_error, constraint_from_request

SIMPLE_CHAT_TEMPLATE = "{role}: {content}\n"  # per message, then "assistant:" (models without a chat template)
PREFIX = "mini_llm:"
MAX_N = 16  # completions per request
MAX_STOP = 16  # stop strings per request (OpenAI allows 4; each one is searched for after every token)
# characters per stop string: after every token, the text held back is the longest tail that begins one, a search
# quadratic in its length (framework/request.py's OutputText) that runs on the event loop, beside every stream
MAX_STOP_CHARS = 64
SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM's
MAX_BODY_BYTES = 1 << 20  # far above a useful prompt: 32,768 token ids are about 230 KB of JSON


# ----------------------------------------------------------------------------------------------------------
# Requests: the OpenAI fields the server implements and vLLM's sampling extensions. Any other field with a value
# (logit_bias, tools, best_of, ...) is refused with a 400 naming it: nothing is silently ignored.


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's extension: usage so far in every chunk (with include_usage)


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="allow")  # kept in model_extra, refused by `refuse_unsupported`
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None  # OpenAI's end-user id: metadata only, it changes no output
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # vLLM's extensions (vllm/entrypoints/openai/completion/protocol.py)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    min_tokens: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    @field_validator("n", "stream", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "echo",
                     "logprobs", mode="before", check_fields=False)
    @classmethod
    def null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """null for a field with a default means the default, as OpenAI's API and vLLM take it."""
        return cls.model_fields[info.field_name].get_default() if value is None else value


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """OpenAI's message: a developer message is a system one (OpenAI's newer name for it); content as a string or
    text parts (joined by newlines, as vLLM does), none for an assistant's; `name` is metadata, as `user`."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None
    name: str | None = None

    def plain(self) -> dict[str, str]:
        content = self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content or [])
        if self.content is None and self.role != "assistant":
            raise BadRequest(f"a {self.role} message needs content", "messages")
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def refuse_unsupported(req: SamplingFields) -> None:
    """A 400 naming the first field this server does not implement, when it has a value."""
    for name, value in (req.model_extra or {}).items():
        if value is not None and name not in REQUEST_FIELDS:
            known = sorted({*type(req).model_fields, *REQUEST_FIELDS})
            raise BadRequest(f"{name} is not supported by this server: leave it out (the fields it implements: "
                             f"{', '.join(known)})", name)
    if req.stream_options is not None and not req.stream:  # as OpenAI and vLLM
        raise BadRequest("stream_options is only allowed with stream: true", "stream_options")
    if req.stream and isinstance(req, CompletionRequest) and req.echo:
        raise BadRequest("echo is not supported with stream=true: ask without streaming", "echo")


def sampling_params(req: SamplingFields, max_tokens: int | None, named_as: dict[str, str] | None = None,
                    **extra: Any) -> SamplingParams:
    """The request's SamplingParams; a field SamplingParams refuses is a 400 naming it, as the request names it
    (`named_as`: SamplingParams' name -> the request's, where they differ)."""
    try:  # response_format and structured_outputs (course/structured_output.py)
        extra["structured_outputs"] = constraint_from_request(req.model_extra or {})
    except ConstraintError as error:
        raise BadRequest(str(error), error.param) from error
    refuse_unsupported(req)
    if not 1 <= req.n <= MAX_N:
        raise BadRequest(f"n must be in [1, {MAX_N}] (completions per request), got {req.n}", "n")
    stops = [req.stop] if isinstance(req.stop, str) else req.stop or []
    if len(stops) > MAX_STOP:  # each is searched for at every token
        raise BadRequest(f"stop: at most {MAX_STOP} stop strings, got {len(stops)}", "stop")
    if longest := max((s for s in stops if len(s) > MAX_STOP_CHARS), key=len, default=None):
        raise BadRequest(f"stop: a stop string has at most {MAX_STOP_CHARS} characters, got one of {len(longest)} "
                         f"({longest[:20]!r}...)", "stop")
    if req.seed is not None and req.seed + req.n > 2**64:  # child i samples with seed + i
        raise BadRequest(f"seed: child i of the n = {req.n} completions samples with seed + i, which must stay below "
                         f"2**64: give a seed of at most {2**64 - req.n}", "seed")
    names = ("temperature", "top_p", "top_k", "stop", "seed", "presence_penalty", "frequency_penalty",
             "stop_token_ids", "min_tokens", "min_p", "repetition_penalty")
    given = {name: getattr(req, name) for name in names} | {"max_tokens": max_tokens} | extra
    try:
        return SamplingParams(**{k: v for k, v in given.items() if v is not None}, ignore_eos=req.ignore_eos,
                              include_stop_str_in_output=req.include_stop_str_in_output,
                              skip_special_tokens=req.skip_special_tokens)
    except ValueError as error:
        field = str(error).split()[0]
        name = (named_as or {}).get(field, field)
        raise BadRequest(name + str(error).removeprefix(field), name) from error


def child_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of the index-th of n completions: its own seed stream, seed + index, as vLLM's
    `ParentRequest._get_child_sampling_params` (vllm/v1/engine/parallel_sampling.py at b31e9326a7)."""
    return params if params.seed is None else dataclasses.replace(params, seed=params.seed + index)


# ----------------------------------------------------------------------------------------------------------
# Metrics


class Metrics:
    """vLLM's serving metrics, on a registry of this server's own (so that several servers fit in one process),
    each labelled with the served model's name. The request-phase histograms follow vLLM's definitions: queue time
    from arrival to first scheduled, prefill from then to the first token, decode from the first token to the last,
    inference from first scheduled to the last token."""

    def __init__(self, state: ServerState) -> None:
        self.registry = r = CollectorRegistry()
        engine, name = state.llm.engine, state.model_name

        def gauge(metric: str, text: str, value: Callable[[], float]) -> None:
            Gauge(PREFIX + metric, text, ["model_name"], registry=r).labels(name).set_function(value)

        def histogram(metric: str, text: str, buckets: tuple = LATENCY_BUCKETS) -> Any:
            return Histogram(PREFIX + metric, text, ["model_name"], registry=r, buckets=buckets).labels(name)

        def counter(metric: str, text: str) -> Any:
            return Counter(PREFIX + metric, text, ["model_name"], registry=r).labels(name)

        gauge("num_requests_running", "Requests in the running batch", lambda: len(engine.scheduler.running))
        gauge("num_requests_waiting", "Requests waiting to be admitted", lambda: len(engine.scheduler.waiting))
        gauge("kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1)",
              lambda: 1 - engine.kv_cache_manager.num_free_blocks / engine.config.num_blocks)
        self.ttft = histogram("time_to_first_token_seconds", "Time to first token")
        self.tpot = histogram("inter_token_latency_seconds", "Time between two output tokens")
        self.e2e = histogram("e2e_request_latency_seconds", "Request latency")
        self.queue_time = histogram("request_queue_time_seconds", "Time from arrival to first scheduled")
        self.prefill_time = histogram("request_prefill_time_seconds", "Time from first scheduled to first token")
        self.decode_time = histogram("request_decode_time_seconds", "Time from first token to last token")
        self.inference_time = histogram("request_inference_time_seconds", "Time from first scheduled to last token")
        self.iteration_tokens = histogram("iteration_tokens_total", "Tokens scheduled per engine step",
                                          ITERATION_TOKEN_BUCKETS)
        self.preemptions = counter("num_preemptions", "Preemptions")
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of requests admitted to the running batch")
        self.generation_tokens = counter("generation_tokens", "Generated tokens")
        self.prefix_cache_queries = counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache")
        self.prefix_cache_hits = counter("prefix_cache_hits", "Prompt tokens found in the prefix cache")
        success = Counter(PREFIX + "request_success", "Finished requests", ["model_name", "finished_reason"],
                          registry=r)
        self.finished = lambda reason: success.labels(name, reason)
        self.refused = counter("request_refused", "Requests refused because the server was full")


class StepObserver:
    """Each step's scheduler output, read for the metrics as vLLM's loggers read the SchedulerStats and
    IterationStats that its engine core sends with each step's outputs. It observes the engine's
    `scheduler.schedule` through the framework's hook (framework/observe.py; any scheduler: the fields read are
    framework/scheduler.py's `SchedulerOutput`), in the step's thread."""

    def __init__(self, engine: Any, metrics: Metrics) -> None:
        self.engine, self.metrics = engine, metrics
        self.first_scheduled: dict[str, float] = {}  # request id -> when it was first admitted
        self.waiting: set[int] = set()
        self.detach = observe_schedule(engine.scheduler, self)

    def before_schedule(self) -> None:
        self.waiting = {id(r) for r in self.engine.scheduler.waiting}

    def after_schedule(self, out: Any) -> None:
        now, m = time.perf_counter(), self.metrics
        if out:
            m.iteration_tokens.observe(out.num_scheduled_tokens)
        m.preemptions.inc(len(out.preempted))
        for request in (s.request for s in out.scheduled if id(s.request) in self.waiting):  # admitted now
            if request.request_id not in self.first_scheduled:
                self.first_scheduled[request.request_id] = now
                m.prompt_tokens.inc(request.num_prompt_tokens)
            if self.engine.config.enable_prefix_caching:  # as vLLM: tokens looked up, and found, per admission
                m.prefix_cache_queries.inc(request.num_tokens)
                m.prefix_cache_hits.inc(request.num_cached_tokens)


# ----------------------------------------------------------------------------------------------------------
# The server


@dataclass
class ServerState:
    llm: Any  # an LLMBase: model, tokenizer, engine
    async_llm: Any  # an AsyncLLM around llm.engine
    model_name: str
    max_pending: int
    num_pending: int = 0
    metrics: Metrics | None = field(default=None, repr=False)
    generations: set[Generation] = field(default_factory=set)  # requests being served, for the shutdown

    def abort_all(self) -> None:
        """Abort every request being served: each stream gets its final output (finish_reason "abort")."""
        for gen in list(self.generations):
            self.async_llm.abort(gen.stream.request_id)


@dataclass(eq=False)
class Generation:
    """One completion being served (one of a request's n): its stream and what the response needs."""

    request_id: str
    stream: Any
    num_prompt_tokens: int
    arrival: float
    output: OutputText  # its text as the client sees it
    request: Any = None  # the engine's Request, which holds its logprobs
    text: str = ""
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    num_tokens: int = 0
    first_token: float | None = None  # perf_counter() times of its first and latest token
    last_token: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    ended: bool = False  # its bookkeeping is done


def build_engine(impl: str, model: str | None, dtype=None, device=None, **engine_config) -> tuple[Any, Any]:
    """(LLM, AsyncLLM) of `impl`: LLM(model, dtype, device, **engine_config). "solutions": the references;
    "practice": the course's choice module by module (`course.use`: yours where its exercise passed, else the
    reference where this copy has it). Where a module is neither, SystemExit(2) after saying which exercises."""
    import course

    if impl not in course.IMPLEMENTATIONS:
        raise ValueError(f"--impl must be one of {course.IMPLEMENTATIONS}, got {impl!r}")
    if impl == "solutions" and not course.every_reference_shipped():
        _refuse("this copy of the course has no reference engine (solutions/): `python -m course.serve` serves "
                "your own engine once its exercises pass")
    if impl == "solutions":
        llm = importlib.import_module("solutions.structured_output").LLM(model, dtype=dtype, device=device,
                                                                          **engine_config)
        return llm, importlib.import_module("solutions.async_engine").AsyncLLM(llm.engine)
    course.IMPL = "practice"
    picked = course.choices()
    modules = [*course.PARTS["engine"], "async_engine"]
    missing = sorted((picked[m] for m in modules if not picked[m].yours and not picked[m].has_reference),
                     key=lambda c: c.exercise or 0)
    if missing:
        needed = course.span(sorted(picked[m].exercise for m in modules if picked[m].exercise))
        unreleased = [c.module for c in missing if not c.exercise]
        pending = ", ".join(f"{c.exercise} ({c.module})" for c in missing if c.exercise)
        _refuse(f"serving your engine needs exercises {needed}"
                + (f" and {', '.join(unreleased)}, whose exercise this copy does not release yet" if unreleased else "")
                + (f"; not passed yet: {pending}" if pending else "")
                + ". `python practice/judge.py ID` grades one, `python practice/judge.py list` shows where you are")
    llm = course.use("engine").LLM(model, dtype=dtype, device=device, **engine_config)
    return llm, course.use("async_engine").AsyncLLM(llm.engine)


def _refuse(message: str) -> None:
    print(f"python -m course.serve: {message}", file=sys.stderr)
    raise SystemExit(2)


def create_app(llm: Any, async_llm: Any, model_name: str = "tiny-qwen3", max_pending: int = 256,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    state = ServerState(llm, async_llm, model_name, max_pending)
    state.metrics = metrics = Metrics(state)
    observer = StepObserver(llm.engine, metrics)
    tokenizer_thread = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await async_llm.shutdown()
        observer.detach()
        if llm.tracer is not None:  # here, not after serve(): uvicorn re-raises SIGTERM once it has shut down
            print(f"step trace: {llm.tracer.save()}")
        tokenizer_thread.shutdown(cancel_futures=True)

    app = FastAPI(title="mini-llm-course", lifespan=lifespan)
    app.state.server = state
    app.add_middleware(BodyCheck, limit=max_body_bytes)

    async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in the tokenizer thread: a long text takes the event loop from no stream."""
        return await asyncio.get_running_loop().run_in_executor(tokenizer_thread, fn, *args)

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(error_body(str(exc), exc.kind, exc.status, exc.param), exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind, exc.status_code), exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"] if p != "body") or "the body"
            problems.append(f"{where}: {e['msg']}" + (f" (got {e['input']!r:.60})" if "input" in e and where !=
                                                       "the body" else ""))
        # the field at fault: where the first field's errors meet (each member of a union adds its type to the
        # path: prompt.str, prompt.list[int].1; errors at stop_token_ids.0 and .1 name stop_token_ids)
        paths = [[p for p in e["loc"] if p != "body"] for e in exc.errors()]
        field = os.path.commonprefix([p for p in paths if p[:1] == paths[0][:1]]) if paths else []
        return JSONResponse(error_body("invalid request: " + "; ".join(problems[:3]), "invalid_request_error",
                                       400, ".".join(map(str, field)) or None), 400)

    def check_model(name: str | None) -> None:
        if name is not None and name != state.model_name:
            raise BadRequest(f"the model {name!r} does not exist: this server serves {state.model_name!r}",
                             "model", 404, "not_found_error")

    async def start(prompt_ids: list[int], params: SamplingParams, n: int = 1,
                    prompt_param: str = "prompt") -> list[Generation]:
        """n completions of the prompt, each its own engine request, as vLLM v1 fans out a request with n > 1
        (`ParentRequest` in vllm/v1/engine/parallel_sampling.py at b31e9326a7): with prefix caching on, the
        children share the prompt's full blocks. All of them or none."""
        if n > state.max_pending:  # a 429 would have the client retry what can never be taken
            raise BadRequest(f"n ({n}) is more than this server runs at once ({state.max_pending} requests, "
                             "--max-pending): ask for fewer completions", "n")
        gens: list[Generation] = []
        try:
            for index in range(n):
                gens.append(await start_one(prompt_ids, child_params(params, index), prompt_param))
        except BaseException:
            for gen in gens:
                await end(gen)
            raise
        return gens

    async def start_one(prompt_ids: list[int], params: SamplingParams, prompt_param: str) -> Generation:
        arrival = time.perf_counter()
        if state.num_pending >= state.max_pending:
            metrics.refused.inc()
            raise BadRequest(f"the server is full ({state.num_pending} requests unfinished, at most "
                             f"{state.max_pending}): retry later", None, 429, "rate_limit_error")
        state.num_pending += 1  # before the await: a burst of requests all waiting there must count
        try:
            stream = await async_llm.add_request(prompt_ids, params)
        except BaseException as error:
            state.num_pending -= 1
            if isinstance(error, ValueError):
                first = str(error).split()[0]
                param = first if first in SAMPLING_FIELDS else prompt_param if "prompt" in str(error) else None
                raise BadRequest(str(error), param) from error
            raise
        output = OutputText(llm.tokenizer, params, llm.engine.eos_token_id)
        gen = Generation(f"{uuid.uuid4().hex[:16]}", stream, len(prompt_ids), arrival, output,
                         llm.engine.requests.get(stream.request_id))
        state.generations.add(gen)
        return gen

    async def outputs(gen: Generation) -> AsyncIterator[tuple[str, list[TokenLogprobs]]]:
        """The new text and logprobs of each output; the request's bookkeeping and metrics when it ends, however
        it ends (a client that disconnects cancels the task reading the stream, and closing the stream aborts)."""
        try:
            async for out in gen.stream:
                now = time.perf_counter()
                if out.new_token_ids:
                    if gen.last_token is None:
                        gen.first_token = now
                        metrics.ttft.observe(now - gen.arrival)
                    else:
                        metrics.tpot.observe((now - gen.last_token) / len(out.new_token_ids))
                    gen.last_token = now
                before, gen.num_tokens = gen.num_tokens, gen.num_tokens + len(out.new_token_ids)
                metrics.generation_tokens.inc(len(out.new_token_ids))
                text = gen.output.add(out.new_token_ids, out.finished, out.finish_reason)
                logprobs = gen.request.logprobs[before:gen.num_tokens] if gen.request is not None else []
                gen.text += text
                gen.logprobs += logprobs
                if out.finished:
                    gen.finish_reason, gen.error = out.finish_reason, out.error
                yield text, logprobs
        finally:
            await end(gen)

    async def merged(gens: list[Generation]) -> AsyncIterator[tuple[int, str, list[TokenLogprobs]]]:
        """(choice index, text, logprobs) from every completion's outputs, as they come."""
        if len(gens) == 1:
            async for text, logprobs in outputs(gens[0]):
                yield 0, text, logprobs
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(index: int, gen: Generation) -> None:
            try:
                async for item in outputs(gen):
                    await queue.put((index, *item))
            finally:
                await queue.put(None)

        tasks = [asyncio.ensure_future(pump(i, gen)) for i, gen in enumerate(gens)]
        try:
            running = len(tasks)
            while running:
                item = await queue.get()
                if item is None:
                    running -= 1
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()

    async def end(gen: Generation) -> None:
        """Once per request, however it ended (also for a stream whose client left before it was read)."""
        if gen.ended:
            return
        gen.ended = True
        await gen.stream.aclose()
        state.num_pending -= 1
        state.generations.discard(gen)
        metrics.finished(gen.finish_reason or "abort").inc()
        metrics.e2e.observe(time.perf_counter() - gen.arrival)
        scheduled = observer.first_scheduled.pop(gen.stream.request_id, None)
        if scheduled is not None:
            metrics.queue_time.observe(scheduled - gen.arrival)
        if scheduled is not None and gen.first_token is not None:
            metrics.prefill_time.observe(gen.first_token - scheduled)
            metrics.decode_time.observe(gen.last_token - gen.first_token)
            metrics.inference_time.observe(gen.last_token - scheduled)

    async def end_all(gens: list[Generation]) -> None:
        for gen in gens:
            await end(gen)

    def usage(gens: list[Generation], num_completion_tokens: int | None = None) -> dict:
        """The prompt counted once, as vLLM does for n > 1."""
        prompt = gens[0].num_prompt_tokens
        completion = sum(g.num_tokens for g in gens) if num_completion_tokens is None else num_completion_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def token_text(token_id: int) -> str:
        return llm.tokenizer.decode([token_id])

    def completion_logprobs(pairs: list[tuple[int, TokenLogprobs | None]], offsets: TextOffsets | None = None) -> dict:
        """OpenAI's completions format; as vLLM's, a position's top_logprobs also hold the chosen token."""
        offsets = offsets or TextOffsets(llm.tokenizer)
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for token, lp in pairs:
            out["tokens"].append(token_text(token))
            out["token_logprobs"].append(None if lp is None else lp.logprob)
            out["top_logprobs"].append(None if lp is None else
                                       {token_text(t): v for t, v in [*lp.top, (token, lp.logprob)]})
            out["text_offset"].append(offsets.take(token))
        return out

    def chat_logprobs(entries: list[TokenLogprobs]) -> dict:
        def one(token: int, logprob: float) -> dict:
            return {"token": token_text(token), "logprob": logprob, "bytes": token_bytes(llm.tokenizer, token)}

        return {"content": [one(lp.token_id, lp.logprob) | {"top_logprobs": [one(t, v) for t, v in lp.top]}
                            for lp in entries]}

    async def respond(gens: list[Generation], req: SamplingFields, chat: bool, client: Request,
                      echo: tuple | None = None) -> Response:
        """`echo`: (prompt text, prompt token ids, whether the generated tokens are dropped), for completions."""
        created, kind = int(time.time()), "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + gens[0].request_id
        params = gens[0].output.params
        want_logprobs = params.logprobs is not None or params.prompt_logprobs is not None

        def logprobs_of(entries: list[TokenLogprobs], offsets: TextOffsets | None = None) -> dict | None:
            if not want_logprobs:
                return None
            return chat_logprobs(entries) if chat else completion_logprobs([(e.token_id, e) for e in entries],
                                                                           offsets)

        def choice(index: int, text: str, reason: str | None, logprobs: dict | None = None,
                   first: bool = False) -> dict:
            if not chat:
                return {"index": index, "text": text, "finish_reason": reason, "logprobs": logprobs}
            delta = {"role": "assistant", "content": text} if first else {"content": text} if text else {}
            return {"index": index, "delta": delta, "finish_reason": reason, "logprobs": logprobs}

        def chunk(choices: list[dict], **extra: Any) -> str:
            body = {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                    "model": state.model_name, "choices": choices, **extra}
            return f"data: {json.dumps(body)}\n\n"

        if req.stream:
            async def events() -> AsyncIterator[str]:
                if chat:
                    for index in range(len(gens)):
                        yield chunk([choice(index, "", None, first=True)])
                offsets = [TextOffsets(llm.tokenizer) for _ in gens]
                options = req.stream_options
                continuous = options is not None and options.include_usage and options.continuous_usage_stats
                async for index, text, logprobs in merged(gens):
                    if text or logprobs:
                        extra = {"usage": usage(gens)} if continuous else {}
                        yield chunk([choice(index, text, None, logprobs_of(logprobs, offsets[index]))], **extra)
                error = next((g.error for g in gens if g.error is not None), None)
                if error is not None:
                    yield f"data: {json.dumps(error_body(error, 'server_error', 500))}\n\n"
                else:
                    for index, gen in enumerate(gens):
                        yield chunk([choice(index, "", gen.finish_reason)])
                    if req.stream_options is not None and req.stream_options.include_usage:
                        yield chunk([], usage=usage(gens))
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream",
                                     background=BackgroundTask(end_all, gens))

        if not await until_disconnect(client, collect(merged(gens))):
            return Response(status_code=499)  # nobody reads it (nginx's "client closed request")
        error = next((g.error for g in gens if g.error is not None), None)
        if error is not None:
            return JSONResponse(error_body(error, "server_error", 500), 500)
        choices = []
        for index, gen in enumerate(gens):
            if chat:
                choices.append({"index": index, "message": {"role": "assistant", "content": gen.text},
                                "logprobs": logprobs_of(gen.logprobs), "finish_reason": gen.finish_reason})
                continue
            text, entries = gen.text, gen.logprobs
            logprobs = logprobs_of(entries)
            if echo is not None:
                prompt_text, prompt_ids, drop_output = echo
                text, entries = (prompt_text, []) if drop_output else (prompt_text + text, entries)
                if want_logprobs:
                    prompt = list(zip(prompt_ids, gen.request.prompt_logprobs))
                    logprobs = completion_logprobs(prompt + [(e.token_id, e) for e in entries])
            choices.append(choice(index, text, gen.finish_reason, logprobs))
        dropped = echo is not None and echo[2]
        return JSONResponse({"id": rid, "object": kind, "created": created, "model": state.model_name,
                             "choices": choices, "usage": usage(gens, 0 if dropped else None)})

    def encode(prompt: str | list[int] | list[str] | list[list[int]]) -> list[int]:
        if isinstance(prompt, str):
            return encode_text(llm.tokenizer, prompt, "prompt")
        if prompt and all(isinstance(p, (str, list)) for p in prompt):
            if len(prompt) != 1:
                raise BadRequest(f"prompt: one prompt per request (got a list of {len(prompt)} prompts)", "prompt")
            return encode_text(llm.tokenizer, prompt[0], "prompt") if isinstance(prompt[0], str) else list(prompt[0])
        return list(prompt)

    def context_limit() -> tuple[int, str]:
        """The most tokens one request holds here, prompt and output: the model's positions or the whole KV cache,
        whichever is smaller, and what that limit is."""
        config = llm.engine.config
        positions, cache = llm.engine.model.cfg.max_position_embeddings, config.num_blocks * config.block_size
        if positions <= cache:
            return positions, f"the model's context (max_position_embeddings: {positions} tokens)"
        return cache, f"this server's KV cache ({cache} tokens: num_blocks x block_size)"

    def check_room(num_prompt_tokens: int, max_tokens: int, prompt_param: str, max_param: str | None) -> None:
        """A 400 naming what does not fit: the prompt itself, or `max_param` (the request's max_tokens or
        max_completion_tokens; None where the server chose it) on top of it."""
        limit, what = context_limit()
        if num_prompt_tokens >= limit:
            raise BadRequest(f"the prompt is {num_prompt_tokens} tokens, which fills {what} and leaves none to "
                             "generate: shorten it", prompt_param)
        if max_param is not None and num_prompt_tokens + max_tokens > limit:
            raise BadRequest(f"{max_param} ({max_tokens}) plus the prompt ({num_prompt_tokens} tokens) exceeds "
                             f"{what}: ask for at most {limit - num_prompt_tokens}", max_param)

    def context_left(num_prompt_tokens: int) -> int:
        """What a chat may generate by default: the rest of the context (vLLM's default for chat); at least 1, so
        that a prompt that fills it is refused by `check_room`."""
        return max(context_limit()[0] - num_prompt_tokens, 1)

    async def parsed(model: type[BaseModel], client: Request) -> Any:
        """The body as `model`, parsed and validated in the tokenizer thread: a body near the size limit (a
        third of a million token ids) takes a fraction of a second to validate, which on the event loop would be
        taken from every stream. Its errors are FastAPI's, answered by `invalid`."""
        return await off_loop(parse_body, model, await client.body())

    async def compile_grammar(params: SamplingParams, req: SamplingFields) -> None:
        """A constraint's grammar compiled in the tokenizer thread before the request reaches the engine, which
        then takes it from its cache: a compile (milliseconds, more for a large schema) never holds up the steps
        of the requests already running, as vLLM keeps compiles off the step's path (`grammar_init`)."""
        compiler = getattr(llm.engine, "grammar_compiler", None)  # absent from an engine without structured output
        if params.structured_outputs is None or compiler is None:
            return
        try:
            await off_loop(compiler.compile, params.structured_outputs)
        except ValueError as error:
            named = as_request_error(error, req.model_extra or {})
            raise BadRequest(str(named), named.param) from error

    @app.post("/v1/completions")
    async def completions(client: Request) -> Response:
        req = await parsed(CompletionRequest, client)
        check_model(req.model)
        prompt_ids = await off_loop(encode, req.prompt)
        if not prompt_ids:
            raise BadRequest("prompt is empty: give at least one token of text", "prompt")
        # echo with max_tokens=0 scores the prompt alone: one token is generated and dropped, as vLLM does.
        echo_only = req.echo and req.max_tokens == 0
        params = sampling_params(req, 1 if echo_only else req.max_tokens,
                                 logprobs=None if echo_only else req.logprobs,
                                 prompt_logprobs=req.logprobs if req.echo else None)
        check_room(len(prompt_ids), params.max_tokens, "prompt", "max_tokens")  # given, or the default 16
        await compile_grammar(params, req)
        gens = await start(prompt_ids, params, req.n)
        echo = None
        if req.echo:
            prompt_text = req.prompt if isinstance(req.prompt, str) else llm.tokenizer.decode(prompt_ids)
            echo = (prompt_text, prompt_ids, echo_only)
        return await respond(gens, req, False, client, echo=echo)

    @app.post("/v1/chat/completions")
    async def chat_completions(client: Request) -> Response:
        req = await parsed(ChatRequest, client)
        check_model(req.model)
        if not req.messages:
            raise BadRequest("messages is empty: give at least one message", "messages")
        if req.top_logprobs is not None and not req.logprobs:
            raise BadRequest("top_logprobs needs logprobs: true", "top_logprobs")
        # A tokenizer's own chat template writes its special tokens itself: encoding must not add them again.
        own_template = bool(getattr(llm.tokenizer, "chat_template", None))
        prompt_ids = await off_loop(lambda: encode_text(llm.tokenizer, render_chat(llm.tokenizer, req.messages),
                                                        "messages", add_special_tokens=not own_template))
        given = {name: v for name, v in (("max_completion_tokens", req.max_completion_tokens),
                                         ("max_tokens", req.max_tokens)) if v is not None}
        for name, value in given.items():  # both, though only the first given is used
            if value < 1:
                raise BadRequest(f"{name} must be at least 1, got {value}", name)
        used = next(iter(given), "max_tokens")
        params = sampling_params(req, given.get(used) or context_left(len(prompt_ids)),
                                 {"logprobs": "top_logprobs", "max_tokens": used},
                                 logprobs=(req.top_logprobs or 0) if req.logprobs else None)
        check_room(len(prompt_ids), params.max_tokens, "messages", used if given else None)
        await compile_grammar(params, req)
        return await respond(await start(prompt_ids, params, req.n, "messages"), req, True, client)

    @app.get("/v1/models")
    async def models() -> dict:
        limit = context_limit()[0]
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0,
                                            "owned_by": "mini-llm-course", "max_model_len": limit}]}

    @app.get("/v1/models/{model}")
    async def model_card(model: str) -> dict:
        check_model(model)
        return (await models())["data"][0]

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def parse_body(model: type[BaseModel], body: bytes) -> Any:
    """The JSON body as `model`. Python's json parser, as FastAPI's: it reads a lone surrogate ("\\ud800"), which
    `encode_text` then refuses naming the field; a malformed body is a 400 saying where."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        raise BadRequest(f"the body is not valid JSON (JSON decode error: {error.msg} at character {error.pos}): "
                         "send one JSON object") from error
    try:
        return model.model_validate(data, strict=True)  # "3" or true is not an int: OpenAI's API refuses both
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from error


def encode_text(tokenizer: Any, text: str, param: str, add_special_tokens: bool = True) -> list[int]:
    """The token ids of `text`; a lone surrogate (JSON's "\\ud800" decodes to one) is a 400 naming where it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(f"{param} is not valid Unicode: a lone surrogate (U+{ord(text[error.start]):04X}) at "
                         f"character {error.start}; send text whose surrogates come in pairs", param) from error
    return tokenizer.encode(text, add_special_tokens=add_special_tokens)


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE spells each byte as one printable character (GPT-2's table, which Qwen's vocabulary uses)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


def token_bytes(tokenizer: Any, token_id: int) -> list[int]:
    """The token's own bytes (OpenAI's `bytes`): a character split across tokens, each of which decodes alone to
    U+FFFD, is whole again when their bytes are joined. A byte-level BPE vocabulary holds them; other tokenizers,
    and added tokens (<|im_end|>), give the UTF-8 of their text."""
    from tokenizers.decoders import ByteLevel

    piece, table = tokenizer.convert_ids_to_tokens(token_id), _byte_of_char()
    byte_level = isinstance(getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None), ByteLevel)
    if byte_level and token_id not in tokenizer.added_tokens_decoder and all(c in table for c in piece):
        return [table[c] for c in piece]
    return list(tokenizer.decode([token_id]).encode("utf-8", "replace"))


class TextOffsets:
    """Completions' `text_offset`: where each token's text begins in the choice's text, counted in characters. The
    tokens that hold parts of one character begin where it does (vLLM adds each token's text decoded alone, one
    U+FFFD per part, and drifts)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.offset = tokenizer, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def take(self, token_id: int) -> int:
        """The offset of this token, the next of the text."""
        at = self.offset
        self.offset += len(self.decoder.decode(bytes(token_bytes(self.tokenizer, token_id))))
        return at


async def collect(stream: AsyncIterator[Any]) -> None:
    async for _ in stream:
        pass


async def disconnected(client: Request) -> None:
    """Return when the client has left. Safe once the body has been read: the next message is the disconnect."""
    while (await client.receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(client: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` unless the client leaves first: then cancel it (which aborts its request) and return False."""
    task, left = asyncio.ensure_future(work), asyncio.ensure_future(disconnected(client))
    try:
        await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # its exception, if it raised
    return True


class BodyCheck:
    """ASGI middleware in front of the routes: a POST body is read whole before any parsing, and refused with an
    OpenAI-style error when it is over `limit` bytes (413, as soon as its Content-Length or the bytes received say
    so) or not UTF-8 (400, naming the first bad byte). What reaches FastAPI is small and decodes."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        too_big = declared.isdigit() and int(declared) > self.limit
        body, more = bytearray(), not too_big
        while more and not too_big:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more, too_big = message.get("more_body", False), len(body) > self.limit
        if too_big:
            size = f"{int(declared):,} bytes" if declared.isdigit() else f"over {self.limit:,} bytes"
            return await refuse(scope, send, 413, f"the request body is {size}; this server takes at most "
                                                  f"{self.limit:,} bytes (--max-body-bytes)")
        body = bytes(body)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as error:
            return await refuse(scope, send, 400, f"the request body is not valid UTF-8: byte "
                                                  f"0x{body[error.start]:02x} at offset {error.start}; send JSON "
                                                  "encoded as UTF-8")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await JSONResponse(error_body(message, "invalid_request_error", status), status)(scope, nothing, send)


def serve(app: FastAPI, host: str, port: int, shutdown_timeout: float, **config: Any) -> None:
    """Run `app` with uvicorn until SIGINT or SIGTERM, then drain for at most `shutdown_timeout` seconds."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            """uvicorn's shutdown (stop accepting, wait for the connections), with the unfinished requests aborted
            once `shutdown_timeout` has passed: their responses then end, with a final event, and so do the
            connections. uvicorn's own timeout, a little later, is only the backstop."""
            timer = asyncio.get_running_loop().call_later(shutdown_timeout, app.state.server.abort_all)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    DrainingServer(uvicorn.Config(app, host=host, port=port, timeout_graceful_shutdown=shutdown_timeout + 1,
                                  **config)).run()


def render_chat(tokenizer: Any, messages: list[ChatMessage]) -> str:
    """The chat as one prompt: the tokenizer's chat template if it has one, else SIMPLE_CHAT_TEMPLATE."""
    plain = [m.plain() for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    return "".join(SIMPLE_CHAT_TEMPLATE.format(**m) for m in plain) + "assistant:"


def main(argv: list[str] | None = None) -> None:
    import torch

    defaults = EngineConfig()
    ap = argparse.ArgumentParser(prog="python -m course.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="checkpoint folder (default: LLM()'s, the embedded model or "
                                                  "$MINI_LLM_MODEL)")
    ap.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the folder's)")
    ap.add_argument("--impl", default=None, choices=("solutions", "practice"),
                    help="solutions: the reference engine; practice: your modules whose exercise passed, the "
                         "reference for the others where this copy has it (default: COURSE_IMPL, else solutions "
                         "where every reference is shipped, else practice)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: LLM()'s)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    for name in ("num_blocks", "block_size", "token_budget", "max_num_seqs"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                    help="share the KV blocks of common prompt prefixes, n > 1 completions' prompt among them "
                         "(on by default, as in vLLM v1)")
    ap.add_argument("--max-pending", type=int, default=256, help="unfinished requests before new ones get 429")
    ap.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help="larger request bodies get 413")
    ap.add_argument("--shutdown-timeout", type=float, default=10.0,
                    help="on SIGTERM or SIGINT, seconds to let running requests finish before aborting them")
    ap.add_argument("--trace", default=None, metavar="RUN.json",
                    help="record a step trace, written there when the server stops (framework/trace.py)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import course

    dtype = getattr(torch, args.dtype) if args.dtype else None
    llm, async_llm = build_engine(args.impl or course.IMPL, args.model, dtype, args.device,
                                  num_blocks=args.num_blocks, block_size=args.block_size,
                                  token_budget=args.token_budget, max_num_seqs=args.max_num_seqs,
                                  enable_prefix_caching=args.enable_prefix_caching, trace=args.trace)
    from mini_llm.loading import model_path

    name = args.served_model_name or model_path(args.model).name
    serve(create_app(llm, async_llm, name, args.max_pending, args.max_body_bytes), args.host, args.port,
          args.shutdown_timeout)


if __name__ == "__main__":
    main()
