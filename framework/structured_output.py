"""Structured output's plumbing: compiling a request's grammar (once per distinct one), its matcher, the batched
bitmask, and what the engine's step does differently. The learner's part, exercise 136 (the structured_output
module), is which logits rows get which mask, and advancing, finishing and rolling back each matcher.

A grammar (a JSON schema, a regex, a choice, an EBNF grammar) is compiled against the tokenizer's vocabulary by
xgrammar, vLLM's and SGLang's default backend: the compiled grammar knows, for each state, which tokens may come
next. Each constrained request gets its own matcher (a Grammar, below) when it is added. Every step, the rows of the
logits that are sampled get one row each of a bitmask `[rows, ceil(vocab / 32)]` (bit t of a row: token t is
allowed), filled by the matchers, and one call masks the forbidden tokens to -inf before sampling. After the
step each matcher accepts the tokens its request emitted. vLLM's counterpart is `StructuredOutputManager` in
vllm/v1/structured_output/__init__.py (at b31e9326a7d9): `grammar_init` compiles a request's grammar in a thread
pool, `grammar_bitmask` fills one row per sampled position.

With speculation, a matcher must also give the masks of the draft positions: row i of a drafted request is the
mask after its first i drafts, so the matcher advances through the drafts while it fills them, and after
verification rolls back the drafts that were rejected. A draft the grammar forbids could never be accepted:
drafts are cut before the forward pass at the first one the grammar refuses, so that no row is spent on it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import time
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import jsonschema
import torch
import xgrammar as xgr

from mini_llm import sync

from .request import Request
from .sampling import SamplingParams, StructuredOutputsParams
from .scheduler import ScheduledRequest, SchedulerOutput

_XGRAMMAR_PREFIX = re.compile(r"\[[\d:.]+\] \S+:\d+: ")  # "[17:15:21] /project/cpp/x.cc:5088: "


class Grammar:
    """One request's matcher: the state of its grammar after the tokens it accepted (`token_ids`)."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)
        self.token_ids: list[int] = []  # accepted and not rolled back

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar forbids it here."""
        accepted = self.matcher.accept_token(int(token_id))
        if accepted:
            self.token_ids.append(int(token_id))
        return accepted

    def rollback(self, num_tokens: int) -> None:
        """Undo the last `num_tokens` accepted tokens."""
        if not 0 <= num_tokens <= len(self.token_ids):
            raise ValueError(f"cannot roll back {num_tokens} tokens: the grammar holds {len(self.token_ids)}")
        if num_tokens:
            self.matcher.rollback(num_tokens)
            del self.token_ids[-num_tokens:]

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into row `row` of `bitmask` (int32 `[rows, ceil(vocab / 32)]`). Once the
        grammar has ended, the row is left as it is: only a draft's row can follow the end (its request stops at
        the token that ended it), as vLLM's `grammar_bitmask` skips a terminated matcher."""
        if not 0 <= row < bitmask.shape[0]:
            raise IndexError(f"row {row} is outside the bitmask's {bitmask.shape[0]} rows (one per logits row)")
        if not self.matcher.is_terminated():
            self.matcher.fill_next_token_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        """Whether the grammar has reached its end (it accepted a stop token after a complete output)."""
        return self.matcher.is_terminated()

    def valid_prefix(self, token_ids: Sequence[int]) -> list[int]:
        """The longest prefix of `token_ids` the grammar accepts from here; the state is left as it was."""
        n = 0
        while n < len(token_ids) and self.accept_token(token_ids[n]):
            n += 1
        self.rollback(n)
        return list(token_ids[:n])


def allocate_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """An int32 bitmask `[num_rows, ceil(vocab_size / 32)]` on the CPU, every token allowed (all bits set)."""
    return xgr.allocate_token_bitmask(num_rows, vocab_size)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set logits[i, t] to -inf, in place, wherever bit t of bitmask row i is 0: one call for every row
    (xgrammar's kernel on the CPU or the GPU, wherever `logits` is)."""
    xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True))


def bitmask_allowed(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The bitmask as booleans `[rows, vocab_size]` (True: allowed), for figures and checks."""
    bits = (bitmask.to(torch.int64).unsqueeze(-1) >> torch.arange(32)) & 1
    return bits.flatten(-2)[..., :vocab_size].bool()


class GrammarCompiler:
    """Compiles each distinct constraint once against one vocabulary, and keeps the result (`cache`): requests
    that share a schema share its compiled grammar, each with a matcher of its own. `compile_seconds` and
    `num_compiled` say what compiling cost."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo) -> None:
        self.tokenizer_info = tokenizer_info
        self.compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=1, cache_enabled=False)  # cached here
        self.cache: dict[tuple[str, str], xgr.CompiledGrammar] = {}
        self.compile_seconds, self.num_compiled = 0.0, 0

    @classmethod
    def from_tokenizer(cls, tokenizer, vocab_size: int, eos_token_id: int) -> "GrammarCompiler":
        """For a Hugging Face tokenizer; `vocab_size` is the width of the model's logits."""
        return cls(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[eos_token_id]))

    @classmethod
    def from_vocab(cls, tokens: Sequence[str], eos_token_id: int) -> "GrammarCompiler":
        """For a vocabulary given as the text of each token (token id = index), e.g. a toy one in a test."""
        return cls(xgr.TokenizerInfo(list(tokens), vocab_type=xgr.VocabType.RAW, stop_token_ids=[eos_token_id]))

    def grammar(self, params: StructuredOutputsParams) -> Grammar:
        """A fresh matcher of `params`'s grammar (compiled on first use)."""
        return Grammar(self.compile(params))

    def compile(self, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
        """The compiled grammar of `params`; ValueError naming the problem if it cannot be compiled."""
        key = constraint_key(params)
        if key not in self.cache:
            start = time.perf_counter()
            try:
                self.cache[key] = self._compile(*key)
            except (RuntimeError, ValueError) as error:
                reason = _XGRAMMAR_PREFIX.sub("", str(error)).strip()  # its time and C++ source line: not the user's
                raise ValueError(f"structured_outputs.{key[0]} cannot be compiled: {reason}") from None
            self.compile_seconds += time.perf_counter() - start
            self.num_compiled += 1
        return self.cache[key]

    def _compile(self, kind: str, text: str) -> xgr.CompiledGrammar:
        if kind == "json":
            return self.compiler.compile_json_schema(text, any_whitespace=False)
        if kind == "json_object":  # a JSON object, not any JSON value: vLLM compiles the same schema
            return self.compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
        if kind == "regex":
            return self.compiler.compile_regex(text)
        if kind == "choice":  # one alternative per string, each a literal of the EBNF (quoted as in JSON, but for
            # characters past U+FFFF, which JSON writes as two surrogates and the EBNF would read as two characters)
            return self.compiler.compile_grammar("root ::= " + " | ".join(json.dumps(c, ensure_ascii=False)
                                                                          for c in json.loads(text)))
        return self.compiler.compile_grammar(text)


def constraint_key(params: StructuredOutputsParams) -> tuple[str, str]:
    """(kind, text): the cache's key of a constraint, a JSON schema checked and written compactly (so that two
    spellings of one schema share an entry). ValueError naming the problem for a schema that is not one."""
    params.verify()
    kind = params.kinds()[0]
    value = getattr(params, kind)
    if kind == "json":
        schema = value
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as error:
                raise ValueError(f"structured_outputs.json is not valid JSON: {error}") from None
        if not isinstance(schema, (dict, bool)):
            raise ValueError(f"structured_outputs.json must be a JSON schema (an object), got {type(schema).__name__}")
        text = json.dumps(schema, separators=(",", ":"))  # the order of properties is kept: it is the output's
        _check_schema(text)
        return kind, text
    if kind == "choice":
        return kind, json.dumps(list(value))
    return kind, "" if kind == "json_object" else value


@functools.lru_cache(maxsize=256)
def _check_schema(text: str) -> None:
    """ValueError naming the problem if the schema (JSON text) is not valid against its metaschema; cached, as
    requests tend to repeat a few schemas and a check costs milliseconds."""
    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise ValueError(f"structured_outputs.json is not a valid JSON schema (at {where}): {error.message}") from None
    remote = next(_remote_refs(schema), None)
    if remote is not None:  # xgrammar would warn and let any value through where it stands
        raise ValueError(f"structured_outputs.json: $ref {remote!r} points outside the schema: only its own "
                         "definitions ('#/...') can be used (nothing is fetched)")


def _remote_refs(node: Any) -> Iterator[str]:
    """Every "$ref" of a schema that is not a reference within it ('#' or '#/...')."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref != "#" and not ref.startswith("#/"):
            yield ref
        for value in node.values():
            yield from _remote_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _remote_refs(value)


# -----------------------------------------------------------------------------------------------------------------
# The engine's side


class GrammarRow(NamedTuple):
    """One scheduled request as the mask sees it (exercise 136's `apply_grammar_bitmask`)."""

    grammar: Grammar | None  # None: an unconstrained request
    need_logits: bool  # whether it has logits rows this step (a chunk of a prompt that samples nothing has none)
    draft_token_ids: list[int]  # its drafts: it has 1 + len(draft_token_ids) rows


class StructuredOutputEngineMixin:
    """Put before an engine class in the bases (`class E(StructuredOutputEngineMixin, Engine)`, the engine
    speculating or not): a request whose SamplingParams has `structured_outputs` gets a matcher when it is added
    (its grammar compiled once per distinct constraint: a bad one is refused there with a ValueError), and each
    step masks the sampled rows with `apply_grammar_bitmask` and advances the matchers with `update_grammar`
    (exercise 136). A step without constrained requests is the engine's own."""

    apply_grammar_bitmask: Callable  # (logits, rows, bitmask) -> None
    update_grammar: Callable  # (grammar, draft_token_ids, token_ids, finish_reason) -> finish reason
    constrains_outputs = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.grammars: dict[str, Grammar] = {}  # request id -> its matcher, while it runs
        self._compiler: GrammarCompiler | None = None
        self.mask_seconds = 0.0  # time spent filling and applying bitmasks (benchmarks compare it with steps)

    @property
    def grammar_compiler(self) -> GrammarCompiler:
        if self._compiler is None:
            if self.tokenizer is None:
                raise ValueError("structured outputs need the engine's tokenizer, to compile grammars against its "
                                 "vocabulary: build the engine with tokenizer=...")
            self._compiler = GrammarCompiler.from_tokenizer(self.tokenizer, self.model.cfg.vocab_size,
                                                            self.eos_token_id)
        return self._compiler

    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None) -> Request:
        constraint = params.structured_outputs if isinstance(params, SamplingParams) else None
        grammar = None if constraint is None else self.grammar_compiler.grammar(constraint)
        request = super().add_request(prompt_token_ids, params)
        if grammar is not None:
            self.grammars[request.request_id] = grammar
        return request

    def abort_requests(self, requests, reason: str = "abort") -> None:
        requests = list(requests)
        super().abort_requests(requests, reason)
        for request in requests:
            self.grammars.pop(request.request_id, None)

    def step(self) -> list:
        if not self.grammars:
            return super().step()
        sched = self.scheduler.schedule()
        if not sched:
            return []
        self._cut_drafts(sched)
        rows = [GrammarRow(self.grammars.get(s.request.request_id), s.completes_prompt,
                           list(getattr(s, "draft_token_ids", []))) for s in sched.scheduled]
        scheduler, runner = self.scheduler, self.runner
        schedule, execute = scheduler.schedule, runner.execute_model

        def execute_masked(items: list) -> torch.Tensor:
            logits = execute(items)
            sync(logits.device)  # the forward pass's kernels may still run: their time is not the mask's
            start = time.perf_counter()
            with torch.inference_mode():  # the runner's logits are inference tensors: masking writes them in place
                self.apply_grammar_bitmask(logits, rows, allocate_bitmask(logits.shape[0], logits.shape[-1]))
            sync(logits.device)  # the kernel is asynchronous: its time counts only once it has run
            self.mask_seconds += time.perf_counter() - start
            return logits

        scheduler.schedule, runner.execute_model = (lambda: sched), execute_masked
        try:
            outputs = super().step()
        finally:
            scheduler.schedule, runner.execute_model = schedule, execute
        scheduled = {s.request.request_id: s for s in sched.scheduled}
        return [self._advance(scheduled.get(out.request_id), out) for out in outputs]

    def _cut_drafts(self, sched: SchedulerOutput) -> None:
        """Cut each constrained request's drafts at the first one its grammar forbids."""
        for i, s in enumerate(sched.scheduled):
            grammar, drafts = self.grammars.get(s.request.request_id), getattr(s, "draft_token_ids", None)
            if grammar is None or not drafts:
                continue
            valid = grammar.valid_prefix(drafts)
            if len(valid) < len(drafts):
                sched.scheduled[i] = dataclasses.replace(s, num_new_tokens=1 + len(valid), draft_token_ids=valid) \
                    if valid else ScheduledRequest(s.request, 1)

    def _advance(self, s: ScheduledRequest | None, out):
        """A constrained request's matcher after the step's tokens, and its output again if the grammar ended it."""
        grammar = self.grammars.get(out.request_id)
        if grammar is None or s is None:
            return out
        request = s.request
        reason = self.update_grammar(grammar, list(getattr(s, "draft_token_ids", [])), list(out.new_token_ids),
                                     request.finish_reason)
        if reason and reason != request.finish_reason:
            if request.is_finished:
                request.finish_reason = reason
            else:
                self.scheduler.finish(request, reason)
            out = self.make_output(request, list(out.new_token_ids))
        if request.is_finished:
            del self.grammars[request.request_id]
        return out


def structured_engine(engine_cls: type, apply_grammar_bitmask: Callable, update_grammar: Callable) -> type:
    """`engine_cls` (an LLMEngineBase subclass, speculating or not) with structured outputs, from exercise 136's
    two functions."""

    class Engine(StructuredOutputEngineMixin, engine_cls):
        pass

    Engine.apply_grammar_bitmask = staticmethod(apply_grammar_bitmask)
    Engine.update_grammar = staticmethod(update_grammar)
    return Engine
