"""The server of `python -m course.serve`, live on 127.0.0.1 (uvicorn in a thread of this process, so that the
tests can see its engine), through the real `openai` client: many concurrent streams with the offline engine's
text, disconnects that free every block, a burst past the queue bound, every kind of bad request with its 400,
a failing step after which it still serves, and a soak with bounded memory. Bounded in count and time (about a
minute in all on 2 cores)."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

import httpx
import openai
import pytest
import torch

from course.serve import build_engine, create_app
from framework.sampling import SamplingParams
from solutions.engine import LLM

CONFIG = {"num_blocks": 100, "block_size": 16}  # 1600 tokens of cache: less than the model's 2048 positions
WORDS = ["once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named", "lucy", "who", "lived", "in",
         "quiet", "forest", "with", "her", "dog"]


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))).capitalize() for _ in range(n)]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.fixture(scope="module")
def server():
    import uvicorn

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    llm, async_llm = build_engine("solutions", None, **CONFIG)
    app = create_app(llm, async_llm, "tiny-qwen3", max_pending=256)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield app.state.server, f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    thread.join(10)
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def offline():
    """The text of each prompt generated offline by LLM() (greedy), in one batch per call, cached."""
    llm, cache = LLM(**CONFIG), {}

    def texts(prompts: list[str], max_tokens: int, ignore_eos: bool = False) -> list[str]:
        todo = sorted({p for p in prompts if (p, max_tokens, ignore_eos) not in cache})
        outs = llm.generate(todo, SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)) if todo else []
        cache.update({(p, max_tokens, ignore_eos): llm.tokenizer.decode(o.outputs[0].token_ids, skip_special_tokens=True)
                      for p, o in zip(todo, outs)})
        return [cache[p, max_tokens, ignore_eos] for p in prompts]

    return texts


def client(base: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base, api_key="-", max_retries=0, timeout=60, **kw)


def wait_idle(state, timeout: float = 10) -> None:
    """Until the engine has no unfinished request and every block is free (or the timeout)."""
    engine, deadline = state.llm.engine, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not engine.has_unfinished_requests() and engine.kv_cache_manager.num_free_blocks == engine.config.num_blocks:
            return
        time.sleep(0.02)
    raise AssertionError(f"{engine.kv_cache_manager.num_free_blocks} of {engine.config.num_blocks} blocks free, "
                         f"{len(engine.scheduler.running)} running, {len(engine.scheduler.waiting)} waiting")


async def stream_text(c: openai.AsyncOpenAI, prompt: str, max_tokens: int) -> str:
    stream = await c.completions.create(model="tiny-qwen3", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                        stream=True)
    return "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])


def test_64_concurrent_streams_get_the_offline_text(server, offline):
    state, base = server
    texts = prompts(64, seed=1)

    async def run() -> list[str]:
        async with client(base) as c:
            return await asyncio.gather(*(stream_text(c, p, 24) for p in texts))

    assert asyncio.run(run()) == offline(texts, 24)
    wait_idle(state)


def test_chat_and_usage_and_models(server, offline):
    _, base = server

    async def run():
        async with client(base) as c:
            models = await c.models.list()
            whole = await c.chat.completions.create(model="tiny-qwen3", max_tokens=12,
                                                    messages=[{"role": "user", "content": "Tell me a story"}])
            chunks = [x async for x in await c.chat.completions.create(
                model="tiny-qwen3", max_tokens=12, messages=[{"role": "user", "content": "Tell me a story"}],
                stream=True, stream_options={"include_usage": True})]
            return models, whole, chunks

    models, whole, chunks = asyncio.run(run())
    assert [m.id for m in models.data] == ["tiny-qwen3"]
    assert whole.choices[0].message.content == offline(["user: Tell me a story\nassistant:"], 12)[0]
    assert "".join(x.choices[0].delta.content or "" for x in chunks if x.choices) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 12 and whole.usage.completion_tokens == 12
    metrics = httpx.get(base.removesuffix("/v1") + "/metrics").text
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                 "time_to_first_token_seconds_bucket", "time_per_output_token_seconds_bucket", "num_preemptions"):
        assert "mini_llm:" + name in metrics, name
    assert httpx.get(base.removesuffix("/v1") + "/health").status_code == 200


def test_20_clients_disconnecting_mid_stream_free_every_block(server):
    state, base = server

    async def leave_early(c: openai.AsyncOpenAI, prompt: str) -> int:
        stream = await c.completions.create(model="tiny-qwen3", prompt=prompt, max_tokens=400, stream=True,
                                            extra_body={"ignore_eos": True})
        n = 0
        async for _ in stream:
            n += 1
            if n == 3:
                break
        await stream.close()
        return n

    async def run() -> list[int]:
        async with client(base) as c:
            return await asyncio.gather(*(leave_early(c, p) for p in prompts(20, seed=2)))

    assert asyncio.run(run()) == [3] * 20
    wait_idle(state)  # 400 tokens each would take far longer than this: they were aborted


def test_a_burst_past_the_queue_bound_gets_429_and_loses_no_accepted_request(server, offline):
    state, base = server
    texts, saved = prompts(40, seed=3), state.max_pending
    state.max_pending = 4

    async def one(c, p):
        try:
            r = await c.completions.create(model="tiny-qwen3", prompt=p, max_tokens=64,
                                           extra_body={"ignore_eos": True})
        except openai.RateLimitError as e:
            assert "server is full" in e.message
            return None
        return r.choices[0].text

    async def run():
        async with client(base) as c:
            return await asyncio.gather(*(one(c, p) for p in texts))

    try:
        got = asyncio.run(run())
    finally:
        state.max_pending = saved
    accepted = [(p, g) for p, g in zip(texts, got) if g is not None]
    assert 4 <= len(accepted) < len(texts), len(accepted)
    assert [g for _, g in accepted] == offline([p for p, _ in accepted], 64, ignore_eos=True)
    assert httpx.get(base.removesuffix("/v1") + "/metrics").text.count("request_refused_total 0.0") == 0
    wait_idle(state)


BAD = [  # (endpoint, body, words of the 400 message)
    ("completions", {"prompt": "Hi", "max_tokens": "many"}, "max_tokens: Input should be a valid integer"),
    ("completions", {"prompt": "Hi", "max_tokens": 0}, "max_tokens must be at least 1"),
    ("completions", {"prompt": "Hi", "temperature": -1}, "temperature must be >= 0"),
    ("completions", {"prompt": "Hi", "top_p": 1.5}, "top_p must be in (0, 1]"),
    ("completions", {"prompt": "Hi", "top_k": -3}, "top_k must be 0 or -1"),
    ("completions", {"prompt": "Hi", "stop": [""]}, "stop must be a non-empty string"),
    ("completions", {"prompt": "Hi", "seed": -1}, "seed must be None"),
    ("completions", {"prompt": "Hi", "n": 0}, "n must be in [1, 16]"),
    ("completions", {"max_tokens": 5}, "prompt: Field required"),
    ("completions", {"prompt": ""}, "prompt is empty"),
    ("completions", {"prompt": [1, 10**9]}, "not a token id"),
    ("completions", {"prompt": ["a", "b"]}, "one prompt per request"),
    ("completions", {"prompt": "Hi", "max_tokens": 4000}, "max_position_embeddings"),
    ("completions", {"prompt": "Hi", "max_tokens": 1700}, "tokens of KV cache but the whole cache holds 1600"),
    ("chat/completions", {"messages": []}, "messages is empty"),
    ("chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
    ("chat/completions", {"messages": "hi"}, "messages: Input should be a valid list"),
]


@pytest.mark.parametrize("endpoint, body, words", BAD, ids=[w for _, _, w in BAD])
def test_bad_requests_get_400_saying_what_to_fix(server, endpoint, body, words):
    _, base = server
    r = httpx.post(f"{base}/{endpoint}", json={"model": "tiny-qwen3", **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error", error


def test_bad_json_wrong_model_and_the_openai_client(server):
    _, base = server
    r = httpx.post(f"{base}/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON decode error" in r.json()["error"]["message"], r.text
    r = httpx.post(f"{base}/completions", json={"model": "gpt-4", "prompt": "Hi"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"], r.text

    async def run():
        async with client(base) as c:
            await c.completions.create(model="tiny-qwen3", prompt="Hi", temperature=-1)

    with pytest.raises(openai.BadRequestError, match="temperature must be >= 0"):
        asyncio.run(run())


def test_a_failing_step_ends_its_stream_with_the_error_and_the_server_serves_on(server, offline):
    state, base = server
    runner = state.llm.engine.runner
    real = runner.execute_model

    def fail_once(items):
        runner.execute_model = real
        raise RuntimeError("injected failure")

    async def run():
        async with client(base) as c:
            runner.execute_model = fail_once
            with pytest.raises(openai.APIError, match="injected failure"):
                await stream_text(c, "Once upon a time", 20)
            return await stream_text(c, "Once upon a time", 20)

    try:
        assert asyncio.run(run()) == offline(["Once upon a time"], 20)[0]
    finally:
        runner.execute_model = real
    wait_idle(state)


def test_a_soak_at_a_moderate_rate_keeps_memory_bounded(server, offline):
    """30 s of Poisson arrivals at 4 requests/s, streamed; the RSS before and after is printed (pytest -s)."""
    state, base = server
    rng, texts = random.Random(4), prompts(16, seed=4)

    want = dict(zip(texts, offline(texts, 32)))

    async def run() -> list[bool]:
        async with client(base) as c:
            async def one(p: str) -> bool:
                return await stream_text(c, p, 32) == want[p]

            tasks, end = [], time.monotonic() + 30
            while time.monotonic() < end:
                tasks.append(asyncio.ensure_future(one(rng.choice(texts))))
                await asyncio.sleep(rng.expovariate(4.0))
            return await asyncio.gather(*tasks)

    before = rss_mb()
    results = asyncio.run(run())
    after = rss_mb()
    print(f"\nsoak: {len(results)} requests in 30 s, RSS {before:.0f} MB before, {after:.0f} MB after")
    assert all(results) and len(results) > 60
    assert after - before < 100, (before, after)
    wait_idle(state)
