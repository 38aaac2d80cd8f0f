"""Driver of exercise 136 (structured output), run beside the learner's code: it calls the learner's functions as
the engine does and returns what they did as plain data. The framework compiles the grammars
(framework/structured_output.py) against a toy vocabulary (`VOCAB`: token id = index, 0 the end of sequence), so
that a case's masks and outputs are short enough to read. Some cases use it with its end of sequence and "a"
swapped (`vocab(OTHER_EOS)`): what ends a request is the grammar's end, not token 0.
"""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import Any

import torch

from framework.structured_output import Grammar, GrammarCompiler, GrammarRow, allocate_bitmask
from framework.sampling import StructuredOutputsParams
from judge.crossing import learner_error

EOS = 0
OTHER_EOS = 9
VOCAB = ["<eos>", "{", "}", '"', ":", ",", " ", "[", "]", "a", "b", "c", "d", "e", "0", "1", "2", "3", "4", "5",
         "-", ".", "true", "false", "null", '{"', '": ', ", ", '"a', "ab", "cd", "12", "yes", "no", "maybe", "x",
         "y", "\n"]
VOCAB += [c for c in map(chr, range(32, 127)) if c not in VOCAB]  # every character: no prefix is a dead end


def vocab(eos: int = EOS) -> list[str]:
    """VOCAB with its end of sequence at id `eos` (swapped with the token there)."""
    tokens = list(VOCAB)
    tokens[EOS], tokens[eos] = tokens[eos], tokens[EOS]
    return tokens


@functools.lru_cache(maxsize=2)
def compiler(eos: int = EOS) -> GrammarCompiler:
    return GrammarCompiler.from_vocab(["" if i == eos else t for i, t in enumerate(vocab(eos))], eos)


def grammar(spec: dict, token_ids: list[int], eos: int = EOS) -> Grammar:
    """A matcher of `spec` (StructuredOutputsParams' fields), on the vocabulary whose end is `eos`, that has
    accepted `token_ids`."""
    g = compiler(eos).grammar(StructuredOutputsParams(**spec))
    for token in token_ids:
        if not g.accept_token(token):
            raise ValueError(f"course bug: the grammar {spec} refuses token {token} after {g.token_ids}")
    return g


def state(g: Grammar | None) -> dict | None:
    return None if g is None else {"token_ids": list(g.token_ids), "terminated": g.is_terminated()}


def text(token_ids: list[int], eos: int = EOS) -> str:
    tokens = vocab(eos)
    return "".join(tokens[t] for t in token_ids)


def mask(impl: ModuleType, rows: list[dict], logits: list[list[float]]) -> dict[str, Any]:
    """apply_grammar_bitmask(logits, rows, bitmask) on fresh grammars (each row: {"grammar": spec or None,
    "accepted": tokens its grammar holds, "need_logits", "drafts"}): {"masked": per logits row, the token ids set to
    -inf, "changed": per row, the ids changed to anything else, "states": each row's grammar after, and as a diagnostic
    "_returned": the type of what it returned, if not None (the statement grades the logits it leaves)}, or
    {"raised": ...}."""
    objects = [GrammarRow(None if r["grammar"] is None else grammar(r["grammar"], r["accepted"]),
                          bool(r["need_logits"]), list(r["drafts"])) for r in rows]
    before = torch.tensor(logits, dtype=torch.float32).reshape(len(logits), len(VOCAB))
    given = before.clone()
    try:
        returned = impl.apply_grammar_bitmask(given, objects, allocate_bitmask(len(logits), len(VOCAB)))
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "_error": learner_error(exc)}
    neg = given == float("-inf")
    other = (given != before) & ~neg
    return {"masked": [torch.nonzero(r).flatten().tolist() for r in neg],
            "changed": [torch.nonzero(r).flatten().tolist() for r in other],
            "states": [state(r.grammar) for r in objects],
            "_returned": None if returned is None else type(returned).__name__}


def where(path: str, fn: str, *args: Any) -> str | None:
    """A place in `mask`'s answer (`masked[1]`) in the learner's words: `the tokens set to -inf in logits row 1`."""
    found = re.fullmatch(r"(masked|changed)\[(\d+)\]", path)
    if fn != "mask" or found is None:
        return None
    return f"the tokens {'set to -inf' if found[1] == 'masked' else 'changed otherwise'} in logits row {found[2]}"


def update(impl: ModuleType, spec: dict, accepted: list[int], drafts: list[int], token_ids: list[int],
           finish_reason: str | None, eos: int = EOS) -> dict[str, Any]:
    """update_grammar on a grammar that holds `accepted` and then went through `drafts` (as the mask left it):
    {"reason": what it returned, "state": the grammar after}, or {"raised": ...}."""
    g = grammar(spec, list(accepted) + list(drafts), eos)
    try:
        reason = impl.update_grammar(g, list(drafts), list(token_ids), finish_reason)
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "_error": learner_error(exc)}
    return {"reason": reason if reason is None or isinstance(reason, str) else repr(reason)[:60], "state": state(g)}


def decode(impl: ModuleType, requests: list[dict], seed: int, eos: int = EOS, max_steps: int = 40) -> dict[str, Any]:
    """A small engine loop with the learner's two functions: each step schedules every unfinished request, which
    first spends `chunks` steps on prompt chunks (no logits), then samples (greedy at temperature 0, else with its
    own seeded generator). With `script`, a request whose output follows it drafts its next `num_drafts` tokens, cut
    where its grammar forbids them, a random number of them made likely; a draft is accepted while the row's token
    equals it. The engine finishes on `eos` ("stop") or at `max_tokens` ("length"). Returns {"outputs": [{"token_ids",
    "finish_reason", "text", "grammar": its state}]}, or {"raised": ..., "fn": ...} / {"problem": ...}."""
    gen = torch.Generator().manual_seed(seed)
    reqs = [dict(r, out=[], reason=None, step=0, g=None if r["grammar"] is None else grammar(r["grammar"], [], eos),
                 gen=torch.Generator().manual_seed(seed + 1 + i)) for i, r in enumerate(requests)]
    for step in range(max_steps):
        live = [r for r in reqs if r["reason"] is None]
        if not live:
            break
        # each row's drafts, kept here: the engine builds the rows from its own lists (the learner's code may empty
        # a row's), and verifies and updates the grammar with those
        plan = [(r, r["step"] >= r.get("chunks", 0), _drafts(r) if r["step"] >= r.get("chunks", 0) else [])
                for r in live]
        num = sum(1 + len(drafts) for _, need, drafts in plan if need)
        logits = torch.randn(num, len(VOCAB), generator=gen)
        at = 0
        for _, need, drafts in plan:
            if need:
                for i, d in enumerate(drafts[: int(torch.randint(0, 5, (), generator=gen))]):
                    logits[at + i, d] += 8.0
                at += 1 + len(drafts)
        try:
            impl.apply_grammar_bitmask(logits, [GrammarRow(r["g"], need, list(drafts)) for r, need, drafts in plan],
                                       allocate_bitmask(num, len(VOCAB)))
        except Exception as exc:  # noqa: BLE001
            return {"raised": type(exc).__name__, "_error": learner_error(exc), "fn": "apply_grammar_bitmask"}
        at = 0
        for r, need, drafts in plan:
            r["step"] += 1
            if not need:
                continue
            n = 1 + len(drafts)
            if not bool(torch.isfinite(logits[at: at + n]).any(-1).all()):
                return {"problem": f"step {step + 1}: a logits row of request {reqs.index(r)} has every token masked"}
            emitted = _verify(r, drafts, logits[at: at + n], eos)
            at += n
            reason = r["engine_reason"]
            if r["g"] is not None:
                try:
                    reason = impl.update_grammar(r["g"], list(drafts), list(emitted), reason)
                except Exception as exc:  # noqa: BLE001
                    return {"raised": type(exc).__name__, "_error": learner_error(exc), "fn": "update_grammar"}
            r["reason"] = reason if reason is None or isinstance(reason, str) else repr(reason)[:60]
    return {"outputs": [{"token_ids": r["out"], "finish_reason": r["reason"], "text": text(r["out"], eos),
                         "grammar": state(r["g"])} for r in reqs]}


def _drafts(r: dict) -> list[int]:
    """The request's next script tokens, while its output follows its script, cut where its grammar refuses."""
    script, out = r.get("script") or [], r["out"]
    if script[: len(out)] != out:
        return []
    drafts = script[len(out): len(out) + r.get("num_drafts", 3)][: r["max_tokens"] - len(out) - 1]
    return drafts if r["g"] is None else r["g"].valid_prefix(drafts)


def _verify(r: dict, drafts: list[int], rows: torch.Tensor, eos: int) -> list[int]:
    """The tokens the request emits from its rows, up to the engine's first stop (set as r["engine_reason"])."""
    emitted = []
    for i, row in enumerate(rows):
        if r.get("temperature", 0) == 0:
            token = int(row.argmax())
        else:
            token = int(torch.multinomial((row / r["temperature"]).softmax(-1), 1, generator=r["gen"]))
        emitted.append(token)
        r["out"].append(token)
        r["engine_reason"] = "stop" if token == eos else "length" if len(r["out"]) >= r["max_tokens"] else None
        if r["engine_reason"] or i == len(drafts) or token != drafts[i]:
            break
    return emitted


def describe(fn: str, *args: Any) -> str:
    """The call of this driver as Python a learner can read."""
    if fn == "mask":
        rows, logits = args
        lines = [f"    GrammarRow({_grammar_text(r)}, need_logits={r['need_logits']}, draft_token_ids={r['drafts']}),"
                 for r in rows]
        return (f"apply_grammar_bitmask(logits [{len(logits)} x {len(VOCAB)}], rows=[\n" + "\n".join(lines) +
                "\n], bitmask)")
    if fn == "update":
        spec, accepted, drafts, token_ids, reason, *eos = args
        g = _grammar_text({"grammar": spec, "accepted": list(accepted) + list(drafts)}, *eos)
        call = f"update_grammar({g}, draft_token_ids={drafts}, token_ids={token_ids}, finish_reason={reason!r})"
        return call + (f", in the vocabulary whose <eos> is token {eos[0]}" if eos else "")
    return f"{fn}{args!r}"


def _grammar_text(r: dict, eos: int = EOS) -> str:
    if r["grammar"] is None:
        return "None"
    (kind, value), = r["grammar"].items()
    return f"<grammar {kind}={value!r} having accepted {r['accepted']} = {text(r['accepted'], eos)!r}>"
