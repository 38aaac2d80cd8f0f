"""The server of `python -m course.serve`, live on 127.0.0.1 (uvicorn in a thread of this process, so that the
tests can see its engine), through the real `openai` client: many concurrent streams with the offline engine's
text, disconnects that free every block, a burst past the queue bound, every kind of bad request with its 400,
a failing step after which it still serves, and a soak with bounded memory; then vLLM's sampling semantics on
an fp32 engine (stop strings, logprobs, echo, n, penalties, refusals) against mini_llm's own logits, and lm-eval's
local-completions model pointed at the server. Bounded in count and time (about a minute in all on 2 cores)."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch

import live_server
from framework.sampling import SamplingParams
from solutions.engine import LLM

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"num_blocks": 100, "block_size": 16}  # 1600 tokens of cache: less than the model's 2048 positions
WORDS = ["once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named", "lucy", "who", "lived", "in",
         "quiet", "forest", "with", "her", "dog"]


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))).capitalize() for _ in range(n)]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def serve(**engine_config):
    """(state, base URL) of a server on the reference engine, live until the generator is closed."""
    for state, port in live_server.serve(**engine_config):
        yield state, f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def server():
    yield from serve(**CONFIG)


@pytest.fixture(scope="module")
def offline():
    """The text of each prompt generated offline by LLM() (greedy), in one batch per call, cached."""
    llm, cache = LLM(**CONFIG), {}

    def texts(prompts: list[str], max_tokens: int, ignore_eos: bool = False) -> list[str]:
        todo = sorted({p for p in prompts if (p, max_tokens, ignore_eos) not in cache})
        outs = llm.generate(todo, SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)) if todo else []
        decode = llm.tokenizer.decode
        cache.update({(p, max_tokens, ignore_eos): decode(o.outputs[0].token_ids, skip_special_tokens=True)
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
                 "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket", "num_preemptions"):
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
        # n past the bound can never be taken: a 400, not a 429 that a client would retry for ever
        too_many = httpx.post(f"{base}/completions", json={"model": "tiny-qwen3", "prompt": "Hi", "n": 5}, timeout=30)
    finally:
        state.max_pending = saved
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "n", too_many.text
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
    ("completions", {"prompt": "Hi", "stop_token_ids": [5000], "min_tokens": 1}, "stop_token_ids holds 5000, not a"),
    ("completions", {"prompt": "Hi", "stop_token_ids": [1, 10**30]}, "stop_token_ids holds 10000000000000000000000"),
    ("completions", {"prompt": ["a", "b"]}, "one prompt per request"),
    ("completions", {"prompt": "Hi", "max_tokens": 4000}, "ask for at most 1599"),
    ("completions", {"prompt": "Hi", "max_tokens": 1700}, "exceeds this server's KV cache (1600 tokens"),
    ("chat/completions", {"messages": []}, "messages is empty"),
    ("chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
    ("chat/completions", {"messages": "hi"}, "messages: Input should be a valid list"),
    ("chat/completions", {"messages": [{"role": "user", "content": None}]}, "a user message needs content"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages.0.content"),
    ("completions", {"prompt": "Hi", "stop": [f"s{i}" for i in range(17)]}, "at most 16 stop strings, got 17"),
    ("completions", {"prompt": "Hi", "stop": ["\n", "ab" * 33]}, "at most 64 characters, got one of 66"),
    ("completions", {"prompt": "Hi", "n": 2, "seed": 2**64 - 1}, "give a seed of at most 18446744073709551614"),
    ("completions", {"prompt": "Hi", "max_tokens": True}, "max_tokens: Input should be a valid integer"),
    ("completions", {"prompt": "Hi", "max_tokens": "3"}, "max_tokens: Input should be a valid integer"),
    ("completions", {"prompt": "Hi", "stream": "yes"}, "stream: Input should be a valid boolean"),
    ("completions", {"prompt": "Hi", "temperature": "0.5"}, "temperature: Input should be a valid number"),
    ("completions", {"prompt": [10] * 1590}, "max_tokens (16) plus the prompt (1590 tokens) exceeds this server's "
                                             "KV cache (1600 tokens: num_blocks x block_size): ask for at most 10"),
    ("completions", {"prompt": "Hi", "response_format": "json"}, "response_format must be an object"),
    ("completions", {"prompt": "Hi", "stream_options": {"include_usage": True}},
     "stream_options is only allowed with stream: true"),
]
CHAT = [{"role": "user", "content": "Hi"}]
PARAMS = [  # (chat body, the param the 400 names, words of its message): as the request names the field
    ({"messages": CHAT, "max_tokens": 0}, "max_tokens", "max_tokens must be at least 1, got 0"),
    ({"messages": CHAT, "max_completion_tokens": 0}, "max_completion_tokens", "at least 1, got 0"),
    ({"messages": CHAT, "max_completion_tokens": 3, "max_tokens": -1}, "max_tokens", "at least 1, got -1"),
    ({"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "top_logprobs must be"),
    ({"messages": [{"role": "user", "content": "Hi " * 3000}]}, "messages", "which fills this server's KV cache"),
    ({"messages": CHAT, "stop_token_ids": [-1], "min_tokens": 2}, "stop_token_ids", "holds -1, not a token id"),
    ({"messages": CHAT, "stop": [1]}, "stop", "stop.list[str].0: Input should be a valid string"),  # a union's
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages.0.content",
     "messages.0.content.str"),  # errors name each member; the param names the field
    ({"messages": CHAT, "max_completion_tokens": 5000}, "max_completion_tokens",
     "max_completion_tokens (5000) plus the prompt"),
]


@pytest.mark.parametrize("endpoint, body, words", BAD, ids=[w for _, _, w in BAD])
def test_bad_requests_get_400_saying_what_to_fix(server, endpoint, body, words):
    _, base = server
    r = httpx.post(f"{base}/{endpoint}", json={"model": "tiny-qwen3", **body}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error", error


@pytest.mark.parametrize("body, param, words", PARAMS, ids=[p for _, p, _ in PARAMS])
def test_a_chat_400_names_the_field_as_the_request_does(server, body, param, words):
    _, base = server
    r = httpx.post(f"{base}/chat/completions", json={"model": "tiny-qwen3", **body}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert words in r.json()["error"]["message"], r.text


def test_null_is_the_default_and_a_completion_too_long_names_max_tokens(server):
    """null for n, stream, echo, logprobs and the vLLM flags means their default, as OpenAI and vLLM read it; a
    max_tokens that overflows the context is named as the field at fault, not the prompt."""
    _, base = server
    nulls = {"n": None, "stream": None, "ignore_eos": None, "skip_special_tokens": None,
             "include_stop_str_in_output": None}
    r = httpx.post(f"{base}/completions", json={"model": "tiny-qwen3", "prompt": "Hi", "max_tokens": 2, "echo": None,
                                               **nulls}, timeout=30)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1, r.text
    r = httpx.post(f"{base}/chat/completions", json={"model": "tiny-qwen3", "messages": CHAT, "max_tokens": 2,
                                                    "logprobs": None, **nulls}, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None, r.text
    for max_tokens in (1700, 4000):  # past the KV cache, past the model's positions
        r = httpx.post(f"{base}/completions", json={"model": "tiny-qwen3", "prompt": "Hi", "max_tokens": max_tokens},
                       timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text


def test_the_openai_clients_message_shapes_and_the_model_card(server):
    """Text parts, a developer message (a system one), a name and an assistant message without content read as
    the plain messages they stand for; models.retrieve gives the model's card."""
    _, base = server
    shaped = [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
              {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Tell me"},
                                                          {"type": "text", "text": "a story"}]},
              {"role": "assistant", "content": None}, {"role": "user", "content": "Go on"}]
    plain = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me\na story"},
             {"role": "assistant", "content": ""}, {"role": "user", "content": "Go on"}]

    async def run():
        async with client(base) as c:
            texts = [(await c.chat.completions.create(model="tiny-qwen3", max_tokens=8, messages=m)).choices[0]
                     .message.content for m in (shaped, plain)]
            return texts, await c.models.retrieve("tiny-qwen3")

    (mine, theirs), card = asyncio.run(run())
    assert mine == theirs and card.id == "tiny-qwen3"
    assert card.max_model_len == 1600  # the KV cache (100 blocks of 16), smaller than the model's 2048 positions
    r = httpx.get(f"{base}/models/gpt-4")
    assert r.status_code == 404 and r.json()["error"]["param"] == "model", r.text


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


# ----------------------------------------------------------------------------------------------------------
# vLLM's sampling semantics over the API, on an fp32 engine with prefix caching, checked against mini_llm's own
# logits computed directly (a whole-sequence forward pass, no paged cache).

STORY = "Once upon a time"


@pytest.fixture(scope="module")
def server32():
    yield from serve(**CONFIG, dtype=torch.float32, enable_prefix_caching=True)


def sync_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="-", max_retries=0, timeout=60)


def direct_logprobs(state, token_ids: list[int]) -> torch.Tensor:
    """log_softmax of mini_llm's fp32 logits at every position of `token_ids`."""
    model = state.llm.engine.model
    with torch.inference_mode():
        return model(torch.tensor([token_ids]))[0].float().log_softmax(-1)


def test_a_stop_string_cuts_the_text_before_it_streamed_and_not(server32):
    state, base = server32
    c = sync_client(base)
    whole = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=40, stop="irl")
    streamed = [x.choices[0] for x in c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=40,
                                                           stop="irl", stream=True)]
    assert whole.choices[0].text == ", there was a little g" and whole.choices[0].finish_reason == "stop"
    assert "".join(x.text for x in streamed) == whole.choices[0].text and streamed[-1].finish_reason == "stop"
    kept = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=40, stop=["irl"],
                                extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == ", there was a little girl"
    # A stop token ends the request and is left out of the text; the text before it is the offline text.
    ids = state.llm.tokenizer.encode(", there was a little girl")
    by_token = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=40,
                                    extra_body={"stop_token_ids": [ids[-1]]})
    assert by_token.choices[0].text == ", there was a little" and by_token.usage.completion_tokens == len(ids)


def test_streamed_text_is_held_back_only_while_it_may_begin_a_stop_string(server32):
    _, base = server32
    c = sync_client(base)
    pieces = [x.choices[0].text for x in c.completions.create(
        model="tiny-qwen3", prompt=STORY, max_tokens=40, stop=["little boy"], stream=True) if x.choices[0].text]
    whole = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=40).choices[0].text
    assert "".join(pieces) == whole  # "little boy" never comes: everything is released
    # " little" may begin "little boy": only " " is sent; after " girl", only its "l" may begin it.
    assert pieces[3:7] == [" a", " ", "little gir", "l named"], pieces


def test_logprobs_are_those_of_mini_llm_streamed_and_not(server32):
    state, base = server32
    c = sync_client(base)
    prompt = state.llm.tokenizer.encode(STORY)
    whole = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=8, logprobs=3)
    lp = whole.choices[0].logprobs
    streamed = [x.choices[0].logprobs for x in c.completions.create(
        model="tiny-qwen3", prompt=STORY, max_tokens=8, logprobs=3, stream=True) if x.choices[0].logprobs]
    assert sum((x.token_logprobs for x in streamed), []) == lp.token_logprobs
    out = state.llm.tokenizer.encode(whole.choices[0].text)
    ref = direct_logprobs(state, prompt + out)
    assert len(lp.token_logprobs) == len(out) == 8
    for j, token in enumerate(out):
        row = ref[len(prompt) - 1 + j]
        assert abs(lp.token_logprobs[j] - float(row[token])) < 1e-4
        values, top_ids = row.topk(3)
        for t, v in zip(top_ids.tolist(), values.tolist()):
            assert abs(lp.top_logprobs[j][state.llm.tokenizer.decode([t])] - v) < 1e-4
    chat = c.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                     logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 4 and all(len(x.top_logprobs) == 2 for x in content)
    assert all(x.logprob == x.top_logprobs[0].logprob for x in content)  # greedy: the most likely token


def test_echo_with_max_tokens_0_gives_the_prompts_logprobs(server32):
    """With the real openai client; the prompt's logprobs are computed in the engine's step thread, never on the
    server's event loop (the thread uvicorn runs in)."""
    state, base = server32
    engine = state.llm.engine
    prompt = state.llm.tokenizer.encode("Once upon a time, there was a little girl")
    threads, real = [], engine._prompt_logprobs

    def recorded(request):
        threads.append(threading.current_thread())
        return real(request)

    engine._prompt_logprobs = recorded
    try:
        r = sync_client(base).completions.create(model="tiny-qwen3", prompt=prompt, max_tokens=0, echo=True,
                                                 logprobs=1)
    finally:
        del engine._prompt_logprobs
    loop_thread = next(t for t in threading.enumerate() if t.name == "course-serve")
    assert len(threads) == 1 and threads[0] is not loop_thread and threads[0] is not threading.main_thread()
    lp = r.choices[0].logprobs
    assert r.choices[0].text == state.llm.tokenizer.decode(prompt) and r.usage.completion_tokens == 0
    ref = direct_logprobs(state, prompt)
    assert lp.token_logprobs[0] is None and len(lp.token_logprobs) == len(prompt)
    want = [float(ref[i, t]) for i, t in enumerate(prompt[1:])]
    assert max(abs(a - b) for a, b in zip(lp.token_logprobs[1:], want)) < 1e-4


def test_tokens_that_split_a_character_give_its_bytes_and_its_offset(server32):
    """A character split across tokens (each decodes alone to U+FFFD): chat's `bytes` are each token's own, which
    join into the character's UTF-8, and completions' `text_offset` points every part at the character."""
    from course.serve import token_bytes

    state, base = server32
    tokenizer, text = state.llm.tokenizer, "Tom said: héllo 你好 😀, then left."
    prompt = tokenizer.encode(text)
    assert any(tokenizer.decode([t]) == "\ufffd" for t in prompt)  # the tiny vocabulary splits these characters
    assert b"".join(bytes(token_bytes(tokenizer, t)) for t in prompt).decode() == text
    r = sync_client(base).completions.create(model="tiny-qwen3", prompt=text, max_tokens=0, echo=True, logprobs=1)
    sizes = [len(token_bytes(tokenizer, t)) for t in prompt]
    starts = itertools.accumulate(sizes[:-1], initial=0)  # where each token's first byte is in the text's UTF-8
    # the characters wholly before it: those of the bytes before it, less a character it completes
    assert r.choices[0].logprobs.text_offset == [len(text.encode()[:s].decode("utf-8", "ignore")) for s in starts]
    assert r.choices[0].text == text
    chat = sync_client(base).chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=6, logprobs=True)
    content = chat.choices[0].logprobs.content
    assert b"".join(bytes(x.bytes) for x in content).decode() == chat.choices[0].message.content


def test_n_3_with_a_seed_equals_three_single_requests_sharing_the_prompts_blocks(server32):
    state, base = server32
    engine = state.llm.engine
    prompt = (state.llm.tokenizer.encode(" ".join(WORDS) * 4))[:65]  # 4 full blocks of 16 and one token
    c = sync_client(base)
    ask = dict(model="tiny-qwen3", prompt=prompt, max_tokens=15, temperature=1.0, extra_body={"ignore_eos": True})
    singles = [c.completions.create(**ask, seed=7 + i).choices[0].text for i in range(3)]
    runner, real = engine.runner, engine.runner.execute_model

    def slow(items):  # slow steps, so that the metric is read while the three run
        time.sleep(0.05)
        return real(items)

    runner.execute_model = slow
    try:
        stream = c.completions.create(**ask, seed=7, n=3, stream=True)
        chunks = [next(stream)]
        usage = float(next(line.split()[1] for line in httpx.get(base.removesuffix("/v1") + "/metrics").text
                           .splitlines() if line.startswith("mini_llm:kv_cache_usage_perc")))
        chunks += list(stream)
    finally:
        runner.execute_model = real
    texts = ["".join(x.choices[0].text for x in chunks if x.choices[0].index == i) for i in range(3)]
    assert texts == singles
    # 80 tokens = 5 blocks each: the 4 full prompt blocks once, and one block of its own per completion.
    assert usage * engine.config.num_blocks == pytest.approx(4 + 3), usage
    whole = c.completions.create(**ask, seed=7, n=3)
    assert [x.text for x in whole.choices] == singles and whole.usage.prompt_tokens == 65
    wait_idle(state)


@pytest.mark.parametrize("field, value", [("logit_bias", {"50": 10}), ("tools", [{"type": "function"}]),
                                          ("best_of", 2), ("tool_choice", "auto"),
                                          ("suffix", "end")])
def test_what_the_server_does_not_implement_gets_a_400_naming_the_field(server32, field, value):
    _, base = server32
    endpoint = "chat/completions" if field in ("tools", "tool_choice") else "completions"
    body = {"messages": [{"role": "user", "content": "Hi"}]} if endpoint != "completions" else {"prompt": "Hi"}
    r = httpx.post(f"{base}/{endpoint}", json={"model": "tiny-qwen3", **body, field: value}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert f"{field} is not supported" in r.json()["error"]["message"]
    assert ("temperature, top_k, top_logprobs, top_p" if "chat" in endpoint else "stop_token_ids, stream, ") in \
        r.json()["error"]["message"]  # what it implements

def test_logit_bias_and_tools_get_a_400_naming_the_field_through_the_openai_client(server32):
    _, base = server32
    c = sync_client(base)
    with pytest.raises(openai.BadRequestError, match="logit_bias is not supported") as refused:
        c.completions.create(model="tiny-qwen3", prompt="Hi", logit_bias={"50": 10})
    assert refused.value.param == "logit_bias"
    tool = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError, match="tools is not supported") as refused:
        c.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Hi"}], tools=[tool])
    assert refused.value.param == "tools"


def test_an_engine_that_samples_with_sample_token_refuses_logprobs_and_penalties(server32):
    state, base = server32
    engine = state.llm.engine
    engine.samples_with_history = False  # as the learner's engine of exercise 130
    try:
        for field, value in (("logprobs", 2), ("presence_penalty", 0.5), ("min_tokens", 3)):
            r = httpx.post(f"{base}/completions", json={"model": "tiny-qwen3", "prompt": "Hi", field: value})
            assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
            assert "sample_request_token" in r.json()["error"]["message"]
    finally:
        del engine.samples_with_history


def test_chat_uses_the_rest_of_the_context_and_ignore_eos_text_has_no_special_token(server32):
    state, base = server32
    c = sync_client(base)
    chat = c.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Tell me a story"}])
    assert chat.choices[0].finish_reason == "stop" and chat.usage.completion_tokens > 16
    long = c.completions.create(model="tiny-qwen3", prompt=STORY, max_tokens=300, extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 300 and "<|endoftext|>" not in long.choices[0].text
    ids = state.llm.generate([STORY], SamplingParams(max_tokens=300, ignore_eos=True))[0].outputs[0].token_ids
    assert state.llm.engine.eos_token_id in ids  # the model did emit end-of-sequence tokens


def penalised_greedy(state, prompt: list[int], params: SamplingParams) -> list[int]:
    """Greedy decoding written out from the definitions, with mini_llm's whole-sequence logits: repetition
    penalty on prompt and output tokens, frequency and presence penalties on output tokens, end-of-sequence
    forbidden before min_tokens."""
    eos, out = state.llm.engine.eos_token_id, []
    while len(out) < params.max_tokens:
        with torch.no_grad():
            row = state.llm.engine.model(torch.tensor([prompt + out]))[0, -1].float()
        for v in set(prompt + out):
            r = params.repetition_penalty
            row[v] = row[v] / r if row[v] > 0 else row[v] * r
        for v in set(out):
            row[v] -= params.frequency_penalty * out.count(v) + params.presence_penalty
        if len(out) < params.min_tokens:
            row[eos] = float("-inf")
        out.append(int(row.argmax()))
        if out[-1] == eos and len(out) > params.min_tokens:
            break
    return out


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=24, repetition_penalty=1.5),
    SamplingParams(max_tokens=24, presence_penalty=1.5, frequency_penalty=0.7),
    "min_tokens"], ids=["repetition", "presence+frequency", "min_tokens"])
def test_penalties_and_min_tokens_equal_a_direct_computation(server32, params):
    state, _ = server32
    prompt = state.llm.tokenizer.encode("Tom had a red ball." if params == "min_tokens" else STORY)
    plain = state.llm.engine.generate([prompt], SamplingParams(max_tokens=400))[0].outputs[0].token_ids
    if params == "min_tokens":  # past the story's own end-of-sequence
        assert plain[-1] == state.llm.engine.eos_token_id
        params = SamplingParams(max_tokens=len(plain) + 8, min_tokens=len(plain) + 4)
    got = state.llm.engine.generate([prompt], params)[0].outputs[0].token_ids
    assert got == penalised_greedy(state, prompt, params)
    assert got != plain[:len(got)]  # the penalty changed something


def test_min_p_keeps_the_tokens_vllm_keeps():
    from framework.sampling import sampling_probs

    logits = torch.randn(500, generator=torch.Generator().manual_seed(0)) * 3
    params = SamplingParams(temperature=0.7, min_p=0.05)
    probs = (logits / 0.7).softmax(-1)
    kept = probs >= 0.05 * probs.max()
    want = torch.where(kept, probs, 0) / probs[kept].sum()
    assert torch.allclose(sampling_probs(logits, params), want, atol=1e-6) and 1 < int(kept.sum()) < 500


def test_lm_eval_local_completions_scores_the_log_likelihoods_of_mini_llm(server32, monkeypatch):
    """lm-eval's `local-completions` model against the server, offline, on the course's task files: its
    log-likelihoods (echo + logprobs) equal mini_llm's own, and its generations are the server's greedy text."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from mini_llm.loading import model_path

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.chdir(ROOT)
    state, base = server32
    result = lm_eval.simple_evaluate(
        model="local-completions", tasks=["tiny_stories_loglikelihood", "tiny_stories_generate"],
        model_args={"base_url": f"{base}/completions", "model": "tiny-qwen3", "tokenizer": str(model_path(None)),
                    "tokenizer_backend": "huggingface", "num_concurrent": 1, "max_retries": 1},
        task_manager=TaskManager(include_path=str(ROOT / "benchmarks" / "lm_eval_tasks")), log_samples=True)
    tok = state.llm.tokenizer
    scored = result["samples"]["tiny_stories_loglikelihood"]
    assert len(scored) == 4
    for sample in scored:
        context, continuation = sample["arguments"][0] if "arguments" in sample else sample["args"]
        ids, n = tok.encode(context + continuation), len(tok.encode(context))
        ref = direct_logprobs(state, ids)
        want = sum(float(ref[i - 1, ids[i]]) for i in range(n, len(ids)))
        assert abs(sample["resps"][0][0][0] - want) < 1e-3, (context, sample["resps"], want)
    for sample in result["samples"]["tiny_stories_generate"]:
        context = sample["doc"]["context"]
        text = sync_client(base).completions.create(model="tiny-qwen3", prompt=context, max_tokens=24,
                                                    stop=["."]).choices[0].text
        assert sample["resps"][0][0] == text
