"""Hidden tests of exercise 136 (structured output). The learner's functions run in the worker through the public
driver judge/drivers/structured_output.py; the reference's run here through the same driver, and their plain
answers are compared: the tokens each logits row masks, the tokens each grammar holds, the finish reason, and
the outputs of short decode loops (whose finished JSON must also validate against its schema)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from judge.drivers import structured_output as drv
from judge.harness import CaseFailure, Cases, check_each, whole
from judge.remote import Driver, learner_failure
from judge.secret import rng as seeded
from solutions import structured_output as ref

CASES = Cases()

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
FLAG = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}, "required": ["a", "b"]}
LIST = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
YES_NO = {"choice": ["yes", "no", "maybe"]}
ABCD = {"regex": "(ab|cd)+"}
EBNF = {"grammar": 'root ::= "[" num ("," num)* "]"\nnum ::= [0-5]+'}
GRAMMARS = [{"json": OBJ}, {"json": FLAG}, {"json": LIST}, YES_NO, ABCD, EBNF, {"json_object": True}]
# A valid output of each grammar above, as tokens of the driver's VOCAB (for drafts and prefixes)
SCRIPTS = [[25, 9, 26, 15, 16, 2, 0], [25, 9, 26, 22, 27, 3, 10, 26, 24, 2, 0], [7, 15, 27, 16, 8, 0], [34, 0],
           [29, 30, 29, 0], [7, 15, 16, 5, 14, 8, 0], [25, 9, 26, 15, 2, 0]]


def swapped(tokens: list[int]) -> list[int]:
    """Tokens of the driver's VOCAB as tokens of vocab(OTHER_EOS), where <eos> and "a" have each other's id."""
    swap = {drv.EOS: drv.OTHER_EOS, drv.OTHER_EOS: drv.EOS}
    return [swap.get(t, t) for t in tokens]


def row(grammar: int | None, accepted: int = 0, need_logits: bool = True, drafts: int = 0) -> dict:
    """A request of a mask case: grammar number `grammar` (None: unconstrained) having accepted the first
    `accepted` tokens of its script, with the next `drafts` script tokens as drafts."""
    if grammar is None:
        return {"grammar": None, "accepted": [], "need_logits": need_logits, "drafts": [17, 3, 9][:drafts]}
    script = SCRIPTS[grammar]
    return {"grammar": GRAMMARS[grammar], "accepted": script[:accepted], "need_logits": need_logits,
            "drafts": script[accepted: accepted + drafts] if need_logits else []}


# ---------------------------------------------------------------------------------------------------------------
# The mask


def _logits(rows: list[dict], seed: int) -> list[list[float]]:
    r = seeded(seed)
    num = sum(1 + len(x["drafts"]) for x in rows if x["need_logits"])
    return [[round(r.uniform(-4, 4), 3) for _ in drv.VOCAB] for _ in range(num)]


def _row_owners(rows: list[dict]) -> list[tuple[int, int]]:
    """(request, draft position) of each logits row."""
    return [(i, k) for i, x in enumerate(rows) if x["need_logits"] for k in range(1 + len(x["drafts"]))]


def mask_diff(value: tuple[list[dict], int], impl) -> CaseFailure | None:
    rows, seed = value
    logits = _logits(rows, seed)
    where = drv.describe("mask", rows, logits)
    got = Driver(impl, "structured_output").mask(rows, logits)
    if "raised" in got:
        return learner_failure(got["_error"], "apply_grammar_bitmask", where)
    exp = drv.mask(ref, rows, logits)
    for key, what in (("masked", "logits rows"), ("changed", "logits rows"), ("states", "grammars")):
        whole(got[key], len(exp[key]), what)
    owners = _row_owners(rows)
    for j, (g, e) in enumerate(zip(got["masked"], exp["masked"])):
        if g != e:
            i, k = owners[j]
            which = f"logits row {j} (request {i}" + (f", after its draft {k - 1})" if k else ")")
            return CaseFailure(f"wrong mask on {which}", input=where, field=f"tokens at -inf in row {j}",
                               expected=e, got=g, hint=_mask_hint(rows, got, exp, j))
    changed = next((j for j, c in enumerate(got["changed"]) if c), None)
    if changed is not None:
        return CaseFailure(f"logits row {changed} was changed other than by setting tokens to -inf", input=where,
                           field=f"changed tokens of row {changed}", expected=[], got=got["changed"][changed],
                           hint="apply the bitmask to the logits as they are (apply_token_bitmask): no scaling")
    for i, (g, e) in enumerate(zip(got["states"], exp["states"])):
        if g != e:
            return CaseFailure(f"request {i}'s grammar is not where it should be after the mask", input=where,
                               field=f"tokens grammar {i} has accepted", expected=e, got=g,
                               hint="go through the drafts with accept_token while filling their rows, and leave "
                                    "the grammar there (update_grammar rolls back what was rejected)"
                               if rows[i]["drafts"] else "filling a mask does not advance the grammar")
    if got.get("_returned") is not None and not any(got["masked"]) and any(exp["masked"]):
        return CaseFailure("the logits are unchanged", input=where, hint="mask `logits` in place")
    return None


def _mask_hint(rows: list[dict], got: dict, exp: dict, j: int) -> str:
    if not any(got["masked"]):
        return ("no logits row was masked: mask the logits tensor you were given, in place (a masked copy, or a "
                "temperature-scaled one, is not what the sampler reads)")
    if sorted(map(tuple, got["masked"])) == sorted(map(tuple, exp["masked"])) or any(
            not x["need_logits"] for x in rows) or any(x["drafts"] for x in rows):
        return ("a request that needs no logits (a prompt chunk) has no row; one with d drafts has 1 + d rows, in "
                "the order of `rows`")
    return "each row gets the tokens its own request's grammar allows next; an unconstrained request's row, all"


def mask_candidates(value):
    rows, seed = value
    for i in range(len(rows)) if len(rows) > 1 else ():
        yield rows[:i] + rows[i + 1:], seed
    for i, x in enumerate(rows):
        if x["drafts"]:
            yield rows[:i] + [dict(x, drafts=x["drafts"][:-1])] + rows[i + 1:], seed


def check_masks(impl, batches: list[list[dict]], seed: int) -> None:
    check_each([(rows, seed + k) for k, rows in enumerate(batches)], lambda v: mask_diff(v, impl), mask_candidates)


def random_rows(seed: int, count: int, grammar_share: float, chunks: float, drafts: int) -> list[list[dict]]:
    r = seeded(seed)
    batches = []
    for _ in range(count):
        rows = []
        for _ in range(r.randint(1, 6)):
            g = r.randrange(len(GRAMMARS)) if r.random() < grammar_share else None
            accepted = r.randint(0, min(2, len(SCRIPTS[g]) - 2)) if g is not None else 0
            need = r.random() >= chunks
            room = len(SCRIPTS[g]) - accepted - 1 if g is not None else 3
            rows.append(row(g, accepted, need, r.randint(0, max(0, min(drafts, room))) if need else 0))
        batches.append(rows)
    return batches


# ---------------------------------------------------------------------------------------------------------------
# The update


def update_diff(value: tuple, impl) -> CaseFailure | None:
    spec, accepted, drafts, tokens, reason, *_ = value
    where = drv.describe("update", *value)
    got = Driver(impl, "structured_output").update(*value)
    if "raised" in got:
        return learner_failure(got["_error"], "update_grammar", where)
    exp = drv.update(ref, *value)
    if got["state"] != exp["state"]:
        gs, es = got["state"]["token_ids"], exp["state"]["token_ids"]
        if gs == list(accepted) + list(drafts) and tokens and es != gs:
            hint = ("roll the grammar back by the drafts that were rejected (grammar.rollback), then accept the "
                    "emitted tokens after the accepted drafts")
        elif len(gs) > len(es):
            hint = ("the grammar already holds the drafts: accept only the emitted tokens after the accepted ones, "
                    "after rolling back the rejected drafts")
        else:
            hint = "after the roll-back, the grammar holds exactly the request's output tokens"
        return CaseFailure("the grammar is not where it should be after update_grammar", input=where,
                           field="tokens the grammar has accepted", expected=es, got=gs, hint=hint)
    if got["reason"] != exp["reason"]:
        hint = ("the request finishes with 'stop' once its grammar has ended (grammar.is_terminated())"
                if exp["reason"] == "stop" != reason else "while the grammar goes on, the engine's finish_reason "
                "stands, 'stop' and 'length' alike")
        return CaseFailure("wrong finish reason", input=where, field="returned", expected=exp["reason"],
                           got=got["reason"], hint=hint)
    return None


def check_updates(impl, values: list[tuple]) -> None:
    check_each(values, lambda v: update_diff(v, impl), lambda v: iter(()))


def after_drafts(grammar: int, accepted: int, num_drafts: int, num_right: int, reason=None) -> tuple:
    """An update after `num_drafts` script drafts of which the first `num_right` were accepted (then one more
    token: the next script token if all were right, else a token that differs from the rejected draft but that
    the grammar allows)."""
    script = SCRIPTS[grammar]
    drafts = script[accepted: accepted + num_drafts]
    base = script[: accepted + num_right]
    if num_right == len(drafts):
        extra = script[accepted + num_right: accepted + num_right + 1]
    else:
        extra = _other_allowed(grammar, base, drafts[num_right])
    return GRAMMARS[grammar], script[:accepted], drafts, drafts[:num_right] + extra, reason


def _other_allowed(grammar: int, base: list[int], rejected: int) -> list[int]:
    """One token the grammar allows after `base` other than `rejected` ([] if there is none)."""
    for t in range(1, len(drv.VOCAB)):
        g = drv.grammar(GRAMMARS[grammar], base)
        if t != rejected and g.accept_token(t):
            return [t]
    return []


# ---------------------------------------------------------------------------------------------------------------
# Decode loops


def decode_diff(value: tuple, impl) -> CaseFailure | None:
    """value: (requests, seed), or (requests, seed, eos) on the vocabulary whose end of sequence is `eos`."""
    requests, seed, *eos = value
    where = (f"a decode loop (judge/drivers/structured_output.py, decode) with requests {requests}, seed {seed}" +
             (f", in the vocabulary whose <eos> is token {eos[0]}" if eos else ""))
    got = Driver(impl, "structured_output").decode(*value)
    if "raised" in got:
        return learner_failure(got["_error"], got.get("fn", "your code"), where)
    if "problem" in got:
        return CaseFailure(got["problem"], input=where, hint="a row masks only what its own grammar forbids")
    exp = drv.decode(ref, *value)
    for i, (g, e) in enumerate(zip(whole(got["outputs"], len(exp["outputs"]), "requests"), exp["outputs"])):
        if g != e:
            name = next(k for k in e if g.get(k) != e[k])
            return CaseFailure(f"request {i} of the loop: wrong {name}", input=where, field=name, expected=e[name],
                               got=g[name], hint=_decode_hint(requests[i], g, e))
    for i, (r, out) in enumerate(zip(requests, exp["outputs"])):  # the reference's outputs meet their schemas
        if out["finish_reason"] == "stop" and r["grammar"] and "json" in r["grammar"]:
            jsonschema.validate(json.loads(out["text"].removesuffix("<eos>")), r["grammar"]["json"])
    return None


def _decode_hint(request: dict, got: dict, exp: dict) -> str:
    if got["grammar"] and got["grammar"]["token_ids"] != got["token_ids"]:
        return ("the grammar refused a token the request emitted: its row was not masked with its own grammar, or "
                "the grammar was not brought up to date after a step")
    if got["finish_reason"] != exp["finish_reason"]:
        return ("a request whose grammar has ended finishes with 'stop'" if exp["finish_reason"] == "stop" else
                "a request stops when its grammar has ended (grammar.is_terminated()), not on a token id")
    return "compare your masks and updates with the statement's worked example"


def random_requests(seed: int, count: int, drafts: bool, sampled: bool, eos: int = drv.EOS) -> list[tuple]:
    r = seeded(seed)
    out = []
    for k in range(count):
        reqs = []
        for _ in range(r.randint(1, 4)):
            g = r.randrange(len(GRAMMARS)) if r.random() < 0.75 else None
            req: dict[str, Any] = {"grammar": None if g is None else GRAMMARS[g], "max_tokens": r.randint(3, 14),
                                   "chunks": r.choice([0, 0, 1, 2])}
            if sampled and r.random() < 0.6:
                req["temperature"] = r.choice([0.7, 1.0, 1.5])
            if drafts and g is not None:
                req["script"] = SCRIPTS[g] if eos == drv.EOS else swapped(SCRIPTS[g])
                req["num_drafts"] = r.randint(1, 4)
            reqs.append(req)
        out.append((reqs, r.randrange(10_000)) + ((eos,) if eos != drv.EOS else ()))
    return out


def check_decodes(impl, values: list[tuple]) -> None:
    def smaller(value):
        reqs, *rest = value
        for i in range(len(reqs)) if len(reqs) > 1 else ():
            yield reqs[:i] + reqs[i + 1:], *rest

    check_each(values, lambda v: decode_diff(v, impl), smaller, max_calls=40)


# ---------------------------------------------------------------------------------------------------------------
# The cases


@CASES("the worked example", public=True)
def _(impl):
    check_masks(impl, [[row(0, 1, drafts=3)], [row(0, 2), row(None), row(3, need_logits=False), row(4, 1)]], 1)
    check_updates(impl, [(GRAMMARS[0], [25], [9, 26, 15], [9, 26, 16], None), after_drafts(0, 1, 3, 1)])


@CASES("one constrained request, no drafts", public=True)
def _(impl):
    check_masks(impl, [[row(0)], [row(3)], [row(4, 2)]], 2)
    check_updates(impl, [(GRAMMARS[0], SCRIPTS[0][:2], [], [SCRIPTS[0][2]], None)])


@CASES("mixed batches where only some requests have grammars")
def _(impl):
    check_masks(impl, random_rows(3, 25, 0.5, 0.0, 0), 30)


@CASES("chunked prefill: no row, and no mask, for a chunk that samples nothing")
def _(impl):
    check_masks(impl, [[row(None, need_logits=False), row(1, 3)], [row(2, need_logits=False), row(None), row(5, 2)]]
                + random_rows(4, 20, 0.7, 0.4, 0), 40)


@CASES("drafted rows: row i after the request's first i drafts", public=True)
def _(impl):
    check_masks(impl, [[row(0, 1, drafts=3)], [row(None, drafts=2), row(5, 1, drafts=3), row(4, drafts=2)]]
                + random_rows(5, 25, 0.7, 0.2, 4), 50)


@CASES("the update: no drafts, the grammar goes on or ends")
def _(impl):
    check_updates(impl, [(GRAMMARS[g], SCRIPTS[g][:k], [], [SCRIPTS[g][k]], None)
                         for g in range(len(GRAMMARS)) for k in (0, len(SCRIPTS[g]) - 2, len(SCRIPTS[g]) - 1)])


@CASES("the update: a draft run rejected mid-way rolls back", public=True)
def _(impl):
    check_updates(impl, [after_drafts(0, 0, 4, 2), after_drafts(1, 1, 4, 0), after_drafts(5, 1, 4, 1),
                         after_drafts(2, 0, 3, 2), after_drafts(6, 2, 3, 1)])


@CASES("the update: every draft accepted, then the bonus token")
def _(impl):
    check_updates(impl, [after_drafts(0, 0, 3, 3), after_drafts(4, 0, 3, 3), after_drafts(3, 0, 1, 1),
                         after_drafts(5, 2, 4, 4)])


@CASES("the finish rule: 'stop' when the grammar ends, else the engine's reason", public=True)
def _(impl):
    check_updates(impl, [(GRAMMARS[3], [], [], [34], "length"), (GRAMMARS[3], [34], [], [0], "stop"),
                         (GRAMMARS[4], [29], [], [30], None), (GRAMMARS[4], [29], [], [30], "stop"),
                         (GRAMMARS[4], [29], [30], [30, 0], None),
                         (GRAMMARS[0], SCRIPTS[0][:5], [2], [2, 0], "length"),
                         (GRAMMARS[2], [7], [15], [15], "length")])
    other = drv.OTHER_EOS  # the grammar's end, not token 0, ends a request
    check_updates(impl, [(GRAMMARS[0], swapped([25]), [], swapped([9]), None, other),
                         (GRAMMARS[3], swapped([34]), [], [other], "length", other),
                         (GRAMMARS[0], swapped(SCRIPTS[0][:5]), [2], [2, other], None, other)])


@CASES("decode loops: greedy rows")
def _(impl):
    check_decodes(impl, random_requests(6, 8, drafts=False, sampled=False))


@CASES("decode loops: greedy and sampled rows in one batch")
def _(impl):
    check_decodes(impl, random_requests(7, 8, drafts=False, sampled=True))


@CASES("decode loops with drafts, some rejected mid-way")
def _(impl):
    check_decodes(impl, random_requests(8, 10, drafts=True, sampled=True))


@CASES("decode loops in a vocabulary whose end of sequence is not token 0")
def _(impl):
    check_decodes(impl, random_requests(9, 8, drafts=True, sampled=True, eos=drv.OTHER_EOS))
