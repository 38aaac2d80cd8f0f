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
`SamplingParams()`'s: greedy (temperature 0, where OpenAI's default is 1) and max_tokens 16, so a greedy request
gets the same text as `LLM().generate` offline. A chat is rendered with the model's chat template when its
tokenizer has one; otherwise (the embedded model) with `SIMPLE_CHAT_TEMPLATE`: one "role: content" line per
message, then "assistant:". Bad input gets status 400 with an OpenAI-style error saying what to fix; when
`--max-pending` requests are unfinished, a new one gets 429. A client that disconnects mid-stream aborts its
request (its blocks are freed).

The shape is vLLM's OpenAI server (vllm/entrypoints/openai/api_server.py, serving_completion.py,
serving_chat.py): FastAPI and uvicorn over an `AsyncLLM`, with metrics named as vLLM's (vllm/v1/metrics/
loggers.py), here under the prefix `mini_llm:`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict
from starlette.background import BackgroundTask

from framework.engine import EngineConfig
from framework.sampling import SamplingParams

SIMPLE_CHAT_TEMPLATE = "{role}: {content}\n"  # per message, then "assistant:" (models without a chat template)
PREFIX = "mini_llm:"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0)


# ----------------------------------------------------------------------------------------------------------
# Requests (the OpenAI fields the server reads; others are ignored, as OpenAI-compatible servers do)


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")
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
    ignore_eos: bool = False  # vLLM's extension


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str]


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def sampling_params(req: SamplingFields, max_tokens: int | None) -> SamplingParams:
    """The request's SamplingParams; a field SamplingParams refuses is a 400 naming it."""
    if req.n != 1:
        raise BadRequest(f"n must be 1 (one completion per request), got {req.n}", "n")
    given = {"max_tokens": max_tokens, "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k,
             "stop": req.stop, "seed": req.seed}
    try:
        return SamplingParams(**{k: v for k, v in given.items() if v is not None}, ignore_eos=req.ignore_eos)
    except ValueError as error:
        raise BadRequest(str(error), str(error).split()[0]) from error


# ----------------------------------------------------------------------------------------------------------
# Metrics


class Metrics:
    """vLLM's serving metrics, on a registry of this server's own (so that several servers fit in one process)."""

    def __init__(self, state: ServerState) -> None:
        self.registry = r = CollectorRegistry()
        engine = state.llm.engine
        Gauge(PREFIX + "num_requests_running", "Requests in the running batch", registry=r).set_function(
            lambda: len(engine.scheduler.running))
        Gauge(PREFIX + "num_requests_waiting", "Requests waiting to be admitted", registry=r).set_function(
            lambda: len(engine.scheduler.waiting))
        Gauge(PREFIX + "kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1)", registry=r
              ).set_function(lambda: 1 - engine.kv_cache_manager.num_free_blocks / engine.config.num_blocks)
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token", registry=r,
                              buckets=LATENCY_BUCKETS)
        self.tpot = Histogram(PREFIX + "time_per_output_token_seconds", "Time between two output tokens",
                              registry=r, buckets=LATENCY_BUCKETS)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "Request latency", registry=r,
                             buckets=LATENCY_BUCKETS)
        self.preemptions = Counter(PREFIX + "num_preemptions", "Preemptions of finished requests", registry=r)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Generated tokens", registry=r)
        self.finished = Counter(PREFIX + "request_success", "Finished requests", ["finished_reason"], registry=r)
        self.refused = Counter(PREFIX + "request_refused", "Requests refused because the server was full",
                               registry=r)


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


@dataclass
class Generation:
    """One request being served: its stream and what the response needs."""

    request_id: str
    stream: Any
    num_prompt_tokens: int
    arrival: float
    text: str = ""
    num_tokens: int = 0
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
        llm = importlib.import_module("solutions.engine").LLM(model, dtype=dtype, device=device, **engine_config)
        return llm, importlib.import_module("solutions.async_engine").AsyncLLM(llm.engine)
    course.IMPL = "practice"
    picked = course.choices()
    modules = [*course.PARTS["engine"], "async_engine"]
    missing = sorted((picked[m] for m in modules if not picked[m].yours and not picked[m].has_reference),
                     key=lambda c: c.exercise or 0)
    if missing:
        needed = sorted(picked[m].exercise for m in modules if picked[m].exercise)
        _refuse(f"serving your engine needs exercises {course.span(needed)}; not passed yet: "
                + ", ".join(f"{c.exercise} ({c.module})" if c.exercise else f"{c.module} (not released to you)"
                            for c in missing)
                + ". `python practice/judge.py ID` grades one, `python practice/judge.py list` shows where you are")
    llm = course.use("engine").LLM(model, dtype=dtype, device=device, **engine_config)
    return llm, course.use("async_engine").AsyncLLM(llm.engine)


def _refuse(message: str) -> None:
    print(f"python -m course.serve: {message}", file=sys.stderr)
    raise SystemExit(2)


def create_app(llm: Any, async_llm: Any, model_name: str = "tiny-qwen3", max_pending: int = 256) -> FastAPI:
    state = ServerState(llm, async_llm, model_name, max_pending)
    state.metrics = metrics = Metrics(state)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await async_llm.shutdown()

    app = FastAPI(title="mini-llm-course", lifespan=lifespan)
    app.state.server = state

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(error_body(str(exc), exc.kind, exc.status, exc.param), exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"] if p != "body") or "the body"
            problems.append(f"{where}: {e['msg']}" + (f" (got {e['input']!r:.60})" if "input" in e and where !=
                                                       "the body" else ""))
        first = exc.errors()[0]["loc"] if exc.errors() else ()
        return JSONResponse(error_body("invalid request: " + "; ".join(problems[:3]), "invalid_request_error",
                                       400, ".".join(str(p) for p in first if p != "body") or None), 400)

    def check_model(name: str | None) -> None:
        if name is not None and name != state.model_name:
            raise BadRequest(f"the model {name!r} does not exist: this server serves {state.model_name!r}",
                             "model", 404, "not_found_error")

    async def start(prompt_ids: list[int], params: SamplingParams) -> Generation:
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
                raise BadRequest(str(error), "prompt" if "prompt" in str(error) else None) from error
            raise
        return Generation(f"{uuid.uuid4().hex[:16]}", stream, len(prompt_ids), time.perf_counter())

    async def outputs(gen: Generation) -> AsyncIterator[str]:
        """The new text of each output; the request's bookkeeping and metrics when it ends, however it ends
        (a client that disconnects cancels the task reading the stream, and closing the stream aborts)."""
        last = None
        try:
            async for out in gen.stream:
                now = time.perf_counter()
                if out.new_token_ids:
                    if last is None:
                        metrics.ttft.observe(now - gen.arrival)
                    else:
                        metrics.tpot.observe((now - last) / len(out.new_token_ids))
                    last = now
                gen.num_tokens += len(out.new_token_ids)
                text = visible(out.new_text, llm.tokenizer) if out.finished else out.new_text
                gen.text += text
                if out.finished:
                    gen.finish_reason, gen.error = out.finish_reason, out.error
                yield text
        finally:
            await end(gen)

    async def end(gen: Generation) -> None:
        """Once per request, however it ended (also for a stream whose client left before it was read)."""
        if gen.ended:
            return
        gen.ended = True
        await gen.stream.aclose()
        state.num_pending -= 1
        request = llm.engine.requests.get(gen.stream.request_id)
        if request is not None:
            metrics.preemptions.inc(request.num_preemptions)
        metrics.prompt_tokens.inc(gen.num_prompt_tokens)
        metrics.generation_tokens.inc(gen.num_tokens)
        metrics.finished.labels(gen.finish_reason or "abort").inc()
        metrics.e2e.observe(time.perf_counter() - gen.arrival)

    def usage(gen: Generation) -> dict:
        return {"prompt_tokens": gen.num_prompt_tokens, "completion_tokens": gen.num_tokens,
                "total_tokens": gen.num_prompt_tokens + gen.num_tokens}

    async def respond(gen: Generation, req: SamplingFields, chat: bool) -> Response:
        created, kind = int(time.time()), "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + gen.request_id

        def choice(text: str, reason: str | None, first: bool = False) -> dict:
            if not chat:
                return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
            delta = {"role": "assistant", "content": text} if first else {"content": text} if text else {}
            return {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}

        def chunk(choices: list[dict], **extra: Any) -> str:
            body = {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                    "model": state.model_name, "choices": choices, **extra}
            return f"data: {json.dumps(body)}\n\n"

        if req.stream:
            async def events() -> AsyncIterator[str]:
                if chat:
                    yield chunk([choice("", None, first=True)])
                async for text in outputs(gen):
                    if text:
                        yield chunk([choice(text, None)])
                if gen.error is not None:
                    yield f"data: {json.dumps(error_body(gen.error, 'server_error', 500))}\n\n"
                else:
                    yield chunk([choice("", gen.finish_reason)])
                    if req.stream_options is not None and req.stream_options.include_usage:
                        yield chunk([], usage=usage(gen))
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream", background=BackgroundTask(end, gen))

        async for _ in outputs(gen):
            pass
        if gen.error is not None:
            return JSONResponse(error_body(gen.error, "server_error", 500), 500)
        message = {"message": {"role": "assistant", "content": gen.text}} if chat else {"text": gen.text,
                                                                                        "logprobs": None}
        return JSONResponse({"id": rid, "object": kind, "created": created, "model": state.model_name,
                             "choices": [{"index": 0, **message, "finish_reason": gen.finish_reason}],
                             "usage": usage(gen)})

    def encode(prompt: str | list[int] | list[str]) -> list[int]:
        if isinstance(prompt, str):
            return llm.tokenizer.encode(prompt)
        if prompt and all(isinstance(p, str) for p in prompt):
            if len(prompt) != 1:
                raise BadRequest(f"prompt: one prompt per request (got a list of {len(prompt)} strings)", "prompt")
            return llm.tokenizer.encode(prompt[0])
        return list(prompt)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> Response:
        check_model(req.model)
        prompt_ids = encode(req.prompt)
        if not prompt_ids:
            raise BadRequest("prompt is empty: give at least one token of text", "prompt")
        gen = await start(prompt_ids, sampling_params(req, req.max_tokens))
        return await respond(gen, req, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest) -> Response:
        check_model(req.model)
        if not req.messages:
            raise BadRequest("messages is empty: give at least one message", "messages")
        prompt_ids = llm.tokenizer.encode(render_chat(llm.tokenizer, req.messages))
        gen = await start(prompt_ids, sampling_params(req, req.max_completion_tokens or req.max_tokens))
        return await respond(gen, req, chat=True)

    @app.get("/v1/models")
    async def models() -> dict:
        limit = llm.engine.model.cfg.max_position_embeddings
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0,
                                            "owned_by": "mini-llm-course", "max_model_len": limit}]}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def visible(final_text: str, tokenizer: Any) -> str:
    """The last piece of a request's text as a client sees it: without the end-of-sequence token's text, as
    vLLM's detokenizer skips special tokens (the engine's own text keeps it, as `LLM.generate` returns it)."""
    eos = getattr(tokenizer, "eos_token", None)
    return final_text.removesuffix(eos) if eos else final_text


def render_chat(tokenizer: Any, messages: list[ChatMessage]) -> str:
    """The chat as one prompt: the tokenizer's chat template if it has one, else SIMPLE_CHAT_TEMPLATE."""
    plain = [{"role": m.role, "content": m.content} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    return "".join(SIMPLE_CHAT_TEMPLATE.format(**m) for m in plain) + "assistant:"


def main(argv: list[str] | None = None) -> None:
    import torch
    import uvicorn

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
    ap.add_argument("--enable-prefix-caching", action="store_true")
    ap.add_argument("--max-pending", type=int, default=256, help="unfinished requests before new ones get 429")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import course

    dtype = getattr(torch, args.dtype) if args.dtype else None
    llm, async_llm = build_engine(args.impl or course.IMPL, args.model, dtype, args.device,
                                  num_blocks=args.num_blocks, block_size=args.block_size,
                                  token_budget=args.token_budget, max_num_seqs=args.max_num_seqs,
                                  enable_prefix_caching=args.enable_prefix_caching)
    from mini_llm.loading import model_path

    name = args.served_model_name or model_path(args.model).name
    uvicorn.run(create_app(llm, async_llm, name, args.max_pending), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
