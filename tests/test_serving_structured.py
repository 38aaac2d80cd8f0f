"""Structured output through `python -m course.serve` with the real `openai` client: `response_format`
(json_schema, json_object) on both endpoints, streamed and not, and vLLM's `structured_outputs` field; the JSON
that comes back validates against its schema (jsonschema); a schema that is not one, or a malformed
`response_format`, gets a 400 in OpenAI's format naming the problem."""

from __future__ import annotations

import json
import threading

import jsonschema
import openai
import pytest

import live_server

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}


@pytest.fixture(scope="module")
def server():
    yield from live_server.serve(num_blocks=100, block_size=16)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server[1]}/v1", api_key="-", max_retries=0, timeout=60)


def test_chat_and_completions_return_schema_valid_json(client):
    chat = client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Who is Tom?"}],
                                          max_tokens=40, response_format=PERSON_FORMAT)
    assert chat.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(chat.choices[0].message.content), PERSON)
    done = client.completions.create(model="tiny-qwen3", prompt="Once upon a time", max_tokens=40,
                                     extra_body={"response_format": PERSON_FORMAT})
    assert done.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(done.choices[0].text), PERSON)


def test_streamed_outputs_join_into_valid_json(client):
    stream = client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=40, response_format=PERSON_FORMAT, stream=True)
    chunks = [c for c in stream if c.choices]
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in chunks)), PERSON)
    stream = client.completions.create(model="tiny-qwen3", prompt="The dog", max_tokens=60, stream=True,
                                       extra_body={"response_format": {"type": "json_object"}})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks)
    if chunks[-1].choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: the start of a JSON object
        assert text.lstrip().startswith("{"), text


def test_vllm_structured_outputs_field(client):
    out = client.completions.create(model="tiny-qwen3", prompt="Is the sky blue?", max_tokens=8,
                                    extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert out.choices[0].text in ("yes", "no") and out.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("response_format, problem", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}},
     "not a valid JSON schema (at type)"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "the schema under 'schema'"),
    ({"type": "yaml"}, "response_format.type must be"),
    # a remote $ref: xgrammar would let any value through there (nothing is fetched)
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://example.com/s.json"}}},
     "response_format: $ref 'http://example.com/s.json' points outside the schema"),
    # xgrammar's own refusal, named as the request gave it, without its C++ source line
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "minItems": 5,
                                                                      "maxItems": 2}}},
     "response_format cannot be compiled: minItems is greater than maxItems"),
])
def test_a_bad_response_format_is_a_400_naming_the_problem(client, response_format, problem):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=8, response_format=response_format)
    error = caught.value.body
    assert problem in error["message"] and error["param"] == "response_format", error
    assert ".cc:" not in error["message"] and "structured_outputs" not in error["message"], error


def test_a_new_schema_is_compiled_in_the_tokenizer_thread_not_between_steps(server, client, monkeypatch):
    """The server compiles a constraint before the request reaches the engine, off the event loop; the engine's
    add_request, which runs between two steps, then finds it in the cache."""
    compiler, threads = server[0].llm.engine.grammar_compiler, []
    real = compiler.compile

    def compile(params):
        threads.append((threading.current_thread().name, tuple(compiler.cache)))
        return real(params)

    monkeypatch.setattr(compiler, "compile", compile)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    out = client.completions.create(model="tiny-qwen3", prompt="Is it?", max_tokens=20, extra_body={
        "response_format": {"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}}})
    assert out.choices[0].finish_reason == "stop", out
    jsonschema.validate(json.loads(out.choices[0].text), schema)
    first_thread, cached_before = threads[0]
    assert first_thread.startswith("tokenizer"), threads
    assert len(compiler.cache) == len(cached_before) + 1  # compiled there once; the engine took it from the cache
