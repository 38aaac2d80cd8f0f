"""Structured output on the engine (framework/structured_output.py with the reference of exercise 136), on the
embedded model: every output that finishes with "stop" is JSON valid against its schema (jsonschema), one cut by
max_tokens is a prefix the grammar accepts, with speculation off and on; a grammar that allows everything leaves
greedy decoding as it was; bad constraints are refused at the door; compiling is cached; prompt chunks get no
mask."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from framework.engine import EngineConfig
from framework.sampling import SamplingParams, StructuredOutputsParams
from framework.spec_decode import SpeculativeConfig
from framework.structured_output import structured_engine
from mini_llm import load_tokenizer, load_transformer
from solutions import structured_output as so
from solutions.engine import LLMEngine
from solutions.spec_decode import SpecDecodeEngine

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PROMPTS = ["Once upon a time", "Tom has a dog named", "The sun was"]


@pytest.fixture(scope="module")
def parts():
    return load_transformer(), load_tokenizer()


def engine(parts, speculative: bool = False, **config):
    model, tokenizer = parts
    base = SpecDecodeEngine if speculative else LLMEngine
    cfg = EngineConfig(num_blocks=128, speculative=SpeculativeConfig(num_speculative_tokens=3) if speculative else None,
                       **config)
    return structured_engine(base, so.apply_grammar_bitmask, so.update_grammar)(model, cfg, tokenizer)


def generate(eng, prompts: list[str], params):
    return eng.generate([eng.tokenizer.encode(p) for p in prompts], params)


def output_text(eng, out) -> str:
    """The output's text as a client gets it: without the end-of-sequence token that ended it."""
    tokens = out.outputs[0].token_ids
    if out.outputs[0].finish_reason == "stop" and tokens and tokens[-1] == eng.eos_token_id:
        tokens = tokens[:-1]
    return eng.tokenizer.decode(tokens)


def check_meets(eng, out, constraint: StructuredOutputsParams) -> None:
    """Finished with "stop": the text parses and validates; with "length": the grammar accepts its tokens."""
    completion = out.outputs[0]
    assert completion.finish_reason in ("stop", "length"), completion
    if completion.finish_reason == "stop" and constraint.json is not None:
        jsonschema.validate(json.loads(output_text(eng, out)), constraint.json)
    grammar = eng.grammar_compiler.grammar(constraint)
    assert all(grammar.accept_token(t) for t in completion.token_ids), (completion.text, completion.token_ids)
    assert grammar.is_terminated() == (completion.finish_reason == "stop")


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
def test_constrained_outputs_meet_their_schema_in_a_mixed_batch(parts, speculative):
    """A token budget of 16: the long prompt is prefilled in chunks, which sample nothing and get no mask."""
    eng = engine(parts, speculative, token_budget=16)
    constraint = StructuredOutputsParams(json=PERSON)
    params = [SamplingParams(max_tokens=40, structured_outputs=constraint),
              SamplingParams(max_tokens=8),  # unconstrained, in the same batch
              SamplingParams(max_tokens=40, temperature=1.0, seed=3, structured_outputs=constraint),
              SamplingParams(max_tokens=6, structured_outputs=constraint)]  # cut by max_tokens: a valid prefix
    outs = generate(eng, [" ".join(PROMPTS * 4)] + PROMPTS, params)
    for out, p in zip(outs, params):
        if p.structured_outputs is not None:
            check_meets(eng, out, p.structured_outputs)
    assert [o.outputs[0].finish_reason for o in outs] == ["stop", "length", "stop", "length"]
    with pytest.raises(json.JSONDecodeError):  # the unconstrained request, free, tells a story
        json.loads(output_text(eng, outs[1]))
    assert eng.grammar_compiler.num_compiled == 1  # one schema, compiled once for three requests
    assert not eng.grammars  # every matcher dropped with its finished request


def test_a_grammar_that_allows_everything_leaves_greedy_decoding_as_it_was(parts):
    eng = engine(parts)
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    free = generate(eng, PROMPTS, params)
    anything = SamplingParams(max_tokens=16, ignore_eos=True,
                              structured_outputs=StructuredOutputsParams(regex=r"[\s\S]*"))
    allowed = generate(eng, PROMPTS, anything)
    assert [o.outputs[0].token_ids for o in allowed] == [o.outputs[0].token_ids for o in free]


SCHEMAS = st.sampled_from([
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "null"}}, "required": ["ok", "n"]},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 3},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "object", "properties": {"tag": {"type": "string", "pattern": "^[a-z]{1,4}$"}}, "required": ["tag"]},
])


@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=SCHEMAS, seed=st.integers(0, 2**16), temperature=st.sampled_from([0.0, 1.0]),
       speculative=st.booleans())
def test_small_schemas_any_seed_with_and_without_speculation(parts, schema, seed, temperature, speculative):
    eng = engine(parts, speculative)
    constraint = StructuredOutputsParams(json=schema)
    params = SamplingParams(max_tokens=12, temperature=temperature, seed=seed, structured_outputs=constraint)
    for out in generate(eng, PROMPTS[:2], params):
        check_meets(eng, out, constraint)


def test_choice_regex_and_grammar(parts):
    eng = engine(parts)
    for constraint, ok in [(StructuredOutputsParams(choice=["yes", "no"]), lambda t: t in ("yes", "no")),
                           (StructuredOutputsParams(choice=["🐱", "café 🐱 naïve"]),
                            lambda t: t in ("🐱", "café 🐱 naïve")),
                           (StructuredOutputsParams(regex=r"[0-9]{3}-[a-z]{2}"), lambda t: len(t) == 6 and t[3] == "-"),
                           (StructuredOutputsParams(grammar='root ::= "(" [a-c] [a-c]? ")"'),
                            lambda t: t.startswith("(") and t.endswith(")"))]:
        out = generate(eng, PROMPTS[:1], SamplingParams(max_tokens=12, structured_outputs=constraint))[0]
        assert out.outputs[0].finish_reason == "stop" and ok(output_text(eng, out)), out.outputs[0]


def test_json_object_is_an_object(parts):
    """`json_object` (response_format {"type": "json_object"}) means a JSON object, as in vLLM, not any JSON value."""
    eng = engine(parts)
    tokens = [eng.tokenizer.encode(text) for text in ("[1, 2]", '"text"', '{"a": [1, 2]}')]
    accepted = []
    for ids in tokens:
        grammar = eng.grammar_compiler.grammar(StructuredOutputsParams(json_object=True))
        accepted.append(all(grammar.accept_token(t) for t in [*ids, eng.eos_token_id]) and grammar.is_terminated())
    assert accepted == [False, False, True]


def test_bad_constraints_are_refused_at_the_door(parts):
    eng = engine(parts)
    prompt = eng.tokenizer.encode("Hi")
    with pytest.raises(ValueError, match="exactly one of"):
        StructuredOutputsParams(json=PERSON, regex="a+")
    with pytest.raises(ValueError, match=r"not a valid JSON schema \(at properties/age/type\)"):
        eng.add_request(prompt, SamplingParams(structured_outputs=StructuredOutputsParams(
            json={"type": "object", "properties": {"age": {"type": "integr"}}})))
    with pytest.raises(ValueError, match="regex cannot be compiled"):
        eng.add_request(prompt, SamplingParams(structured_outputs=StructuredOutputsParams(regex="(ab")))
    with pytest.raises(ValueError, match="structured_outputs is not supported by LLMEngine"):
        LLMEngine(*parts[:1], EngineConfig(num_blocks=16), parts[1]).add_request(
            prompt, SamplingParams(structured_outputs=StructuredOutputsParams(json=PERSON)))
    assert not eng.has_unfinished_requests() and not eng.grammars


def masked_with_torch(logits, rows, bitmask):
    """apply_grammar_bitmask with ordinary torch ops, in place (as the statement allows): each sampled row's
    forbidden tokens set to -inf with masked_fill_."""
    row = 0
    for r in rows:
        if not r.need_logits:
            continue
        if r.grammar is not None:
            r.grammar.fill_bitmask(bitmask, row)
            for i, draft in enumerate(r.draft_token_ids):
                r.grammar.accept_token(draft)
                r.grammar.fill_bitmask(bitmask, row + 1 + i)
        row += 1 + len(r.draft_token_ids)
    bits = (bitmask[:, :, None] >> torch.arange(32)) & 1  # bit j of word w: token 32 * w + j is allowed
    allowed = bits.reshape(bitmask.shape[0], -1)[:, :logits.shape[-1]].bool().to(logits.device)
    logits.masked_fill_(~allowed, float("-inf"))


def test_a_mask_written_with_in_place_torch_ops_runs_in_the_engine(parts):
    """The runner's logits are inference tensors: the engine calls the mask in inference mode, so an in-place torch
    op on them (masked_fill_) works there as it does on the judge's plain tensors."""
    model, tokenizer = parts
    eng = structured_engine(LLMEngine, masked_with_torch, so.update_grammar)(model, EngineConfig(num_blocks=64),
                                                                            tokenizer)
    constraint = StructuredOutputsParams(json=PERSON)
    out = generate(eng, PROMPTS[:1], SamplingParams(max_tokens=40, structured_outputs=constraint))[0]
    check_meets(eng, out, constraint)
