"""Hidden tests of exercise 127 (paged_attention).

The learner's function runs on the inputs the driver's `make_inputs` builds from a plain `Spec`; the grader builds
the same inputs here. The expected output is dense causal attention computed here, independently of solutions/:
each request's keys and values are read position by position through its block table, scores and softmax in
float64 with an explicit mask. Caches are filled with random values everywhere, so reading a wrong block or a row
past seq_len changes the result. Tolerance (float32): |got - expected| <= ATOL + RTOL * |expected|.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from judge.drivers.paged_attention import TOLERANCE, Req, Spec, make_inputs, query_start_loc, show
from judge.hidden.end_to_end import end_to_end
from judge.remote import Driver, learner_failure
from framework.kv_cache_manager import blocks_needed
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any
from judge.harness import CaseFailure, Cases, check_each

CASES = Cases()
ATOL = RTOL = TOLERANCE  # float32 against a float64 reference; contexts are at most ~400 keys
LOW_PRECISION_TOL = 2e-2  # bfloat16 inputs: compared with the float64 reference of the same rounded inputs


def dense_reference(s: Spec, inp: dict[str, Any], *, causal: bool = True, offset: bool = True, gqa: str = "interleave",
                    scale: float | None = None, whole_blocks: bool = False, sort_tables: bool = False) -> torch.Tensor:
    """float64 causal attention per request; the keyword arguments produce the common mistakes (for hints)."""
    q_all, kc, vc = inp["query"].double(), inp["key_cache"].double(), inp["value_cache"].double()
    bs, rep = s.block_size, s.n_heads // s.n_kv_heads
    scale = scale if scale is not None else (s.scale if s.scale is not None else 1 / math.sqrt(s.head_dim))
    heads = torch.arange(s.n_heads)
    kv_of_head = heads // rep if gqa == "interleave" else heads % s.n_kv_heads
    out, start = [], 0
    for r in s.reqs:
        table = torch.tensor(sorted(r.table) if sort_tables else r.table, dtype=torch.long)
        ctx = blocks_needed(r.seq_len, bs) * bs if whole_blocks else r.seq_len
        pos = torch.arange(ctx)
        k = kc[table[pos // bs], pos % bs][:, kv_of_head]  # position p: block table[p // bs], row p % bs -> [ctx, H, D]
        v = vc[table[pos // bs], pos % bs][:, kv_of_head]
        q = q_all[start: start + r.t]
        start += r.t
        if not r.t:
            continue
        scores = torch.einsum("thd,khd->htk", q, k) * scale  # [H, t, ctx]
        if causal:
            first = (ctx - r.t) if offset else 0
            allowed = pos[None, :] <= first + torch.arange(r.t)[:, None]  # query j sees keys 0 .. first + j
            scores = scores.masked_fill(~allowed, float("-inf"))
        w = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        out.append(torch.einsum("htk,khd->thd", w / w.sum(dim=-1, keepdim=True), v))
    return torch.cat(out) if out else torch.zeros(0, s.n_heads, s.head_dim, dtype=torch.float64)


def _close(got: torch.Tensor, exp: torch.Tensor, tol: float | None) -> torch.Tensor:
    """Elementwise: within tolerance."""
    if tol is None:
        return (got - exp).abs() <= ATOL + RTOL * exp.abs()
    return (got - exp).abs() <= tol * (1 + exp.abs())


MISTAKES = [  # (keyword arguments of dense_reference, hint)
    ({"causal": False}, "no causal mask: query j of a request may only see positions 0 .. seq_len - t + j"),
    ({"offset": False}, "the causal mask ignores the cached context: the t queries are the LAST t positions, so "
                        "query j sees keys 0 .. seq_len - t + j (a mask of shape [t, seq_len], diagonal seq_len - t)"),
    ({"gqa": "tile"}, "grouped-query attention: query head h reads KV head h // (n_heads // n_kv_heads) "
                      "(repeat_interleave), not h % n_kv_heads (repeat / tile)"),
    ({"whole_blocks": True}, "only the first seq_len rows of the request's blocks are its context: the last block "
                             "is usually partly filled (its other rows hold garbage)"),
    ({"sort_tables": True}, "read the blocks in block-table order: position p is in block_table[p // block_size]"),
]


DEFAULT_HINT = ("compare one request alone with dense attention: gather its keys through its block table, mask "
                "causally with the cached context in front, softmax over the keys (the last dimension)")


def mistakes(s: Spec, inp: dict[str, Any], tol: float | None) -> list[tuple[torch.Tensor, str]]:
    """The outputs of the common mistakes on this input that differ from the right one, with their hints."""
    found = list(MISTAKES)
    d = s.head_dim
    for sc, what in ((1 / d, "1/head_dim"), (1.0, "1 (no scaling)"), (math.sqrt(d), "sqrt(head_dim)")):
        found.append(({"scale": sc}, f"wrong scale: you seem to use {what}; the default is 1/sqrt(head_dim)"))
    if s.scale == 0:
        found.append(({"scale": 1 / math.sqrt(d)}, "scale=0.0 was replaced by the default: 0.0 is a scale (every "
                                                   "key weighs the same), so test `scale is None`, not "
                                                   "`scale or 1/sqrt(head_dim)`"))
    elif s.scale is not None:
        found.append(({"scale": 1 / math.sqrt(d)}, "the `scale` argument is ignored: use it when it is not None"))
    right = dense_reference(s, inp)
    outputs = [(dense_reference(s, inp, **kwargs), hint) for kwargs, hint in found]
    return [(alt, hint) for alt, hint in outputs if not bool(_close(alt, right, tol).all())]


def _diagnose(s: Spec, inp: dict[str, Any], got: torch.Tensor, tol: float | None) -> str:
    return next((hint for alt, hint in mistakes(s, inp, tol) if bool(_close(got, alt, tol).all())), DEFAULT_HINT)


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The mistakes' outputs on a public case's input, recorded with its answer (judge/edition.py)."""
    if (driver, fn) != ("paged_attention", "run"):
        return []
    s = Spec.from_plain(args[0])
    return [("['output']", alt.to(s.dtype), hint) for alt, hint in mistakes(s, make_inputs(s), None)] + \
        [("['output']", None, DEFAULT_HINT)]


def diff(s: Spec, impl, explain: bool = False) -> CaseFailure | None:
    """None if the learner's paged_attention agrees with dense attention on this input, else the failure (with a
    diagnosis if `explain`: it costs a dozen reference runs, so shrinking goes without)."""
    text = show(s)
    reply = Driver(impl, "paged_attention").run(s.plain())
    if "error" in reply:
        return learner_failure(reply["error"], "paged_attention", text)
    if reply["inputs changed"]:
        return CaseFailure(f"paged_attention modified its input {reply['inputs changed'][0]}", input=text,
                           hint="only read the inputs")
    n = sum(r.t for r in s.reqs)
    want = (n, s.n_heads, s.head_dim)
    if "output" not in reply:
        return CaseFailure(f"paged_attention returned {reply['returned']}; expected a tensor of shape {want}",
                           input=text, hint="did you forget the `return`?" if reply["returned"] == "NoneType" else None)
    out = reply["output"]
    if tuple(out.shape) != want:
        return CaseFailure("wrong output shape", input=text, field="shape", expected=want, got=tuple(out.shape),
                           hint="one output row per query row: [N, n_heads, head_dim], requests in order")
    if out.dtype != s.dtype:
        return CaseFailure("the output must have the query's dtype", input=text, field="dtype", expected=s.dtype,
                           got=out.dtype, hint="e.g. torch.empty_like(query), or .to(query.dtype) at the end")
    inp = make_inputs(s)
    exp = dense_reference(s, inp)
    tol = None if s.dtype == torch.float32 else LOW_PRECISION_TOL
    got = out.double()
    ok = _close(got, exp, tol)
    if bool(ok.all()):
        return None
    row, head = (~ok).any(-1).nonzero()[0].tolist()
    qsl = query_start_loc(s)
    i = max(k for k in range(len(s.reqs)) if qsl[k] <= row and s.reqs[k].t)
    j = row - qsl[i]
    pos = s.reqs[i].seq_len - s.reqs[i].t + j
    err = (got - exp).abs().max().item()
    tol_text = f"|got - expected| <= {ATOL:g} + {RTOL:g}*|expected|" if tol is None else f"{tol:g}*(1+|expected|)"
    return CaseFailure(f"wrong output for request {i}, query {j} (position {pos}), head {head}; largest error "
                       f"{err:.3g}, tolerance {tol_text}", input=text, field=f"out[{row}, {head}, :4]",
                       expected=[round(x, 5) for x in exp[row, head, :4].tolist()],
                       got=[round(x, 5) for x in got[row, head, :4].tolist()],
                       hint=None if not explain else _diagnose(s, inp, got, tol) if bool(got[qsl[i]: qsl[i + 1]].any())
                       else f"request {i}'s output rows are all zero: compute every request of the batch (rows "
                            "query_start_loc[i] .. query_start_loc[i+1]-1 for i = 0 .. B-1)")


def candidates(s: Spec):
    reqs = s.reqs
    if len(reqs) > 1:
        yield replace(s, reqs=reqs[: len(reqs) // 2])
        yield replace(s, reqs=reqs[len(reqs) // 2:])
        for i in range(len(reqs)):
            yield replace(s, reqs=reqs[:i] + reqs[i + 1:])
    for i, r in enumerate(reqs):
        def put(new: Req) -> Spec:
            return replace(s, reqs=reqs[:i] + (new,) + reqs[i + 1:])
        if r.t > 1:
            yield put(replace(r, t=r.t // 2))
            yield put(replace(r, t=r.t - 1))
        if r.seq_len > max(r.t, 1):
            yield put(replace(r, seq_len=max(r.t, r.seq_len // 2, 1)))
            yield put(replace(r, seq_len=r.seq_len - 1))
        need = blocks_needed(r.seq_len, s.block_size)
        if len(r.table) > need:
            yield put(replace(r, table=r.table[:need]))
    if s.head_dim > 2:
        yield replace(s, head_dim=s.head_dim // 2)


def check(impl, specs: list[Spec]) -> None:
    check_each(specs, lambda v: diff(v, impl), candidates, max_calls=120, explain=lambda v: diff(v, impl, explain=True))


# ----------------------------------------------------------------------------------------------------------
# Random batches

HEADS = [(4, 4), (4, 2), (8, 2), (4, 1), (2, 1)]


def random_specs(seed: int, count: int, kinds: list[str], sizes: list[int], n_req: tuple[int, int] = (1, 5),
                 scale: bool = False, dtype: torch.dtype = torch.float32, longest: int = 40) -> list[Spec]:
    """`count` batches of requests of `kinds`; a decode's context is at most `longest` positions, a prompt's or a
    chunk's cached context 10 fewer."""
    rng = seeded(seed)
    out = []
    for k in range(count):
        bs = rng.choice(sizes)
        heads, kv = rng.choice(HEADS)
        reqs = []
        for _ in range(rng.randint(*n_req)):
            kind = rng.choice(kinds)
            if kind == "decode":
                seq_len = rng.randint(1, longest)
                t = 1
            elif kind == "prefill":
                seq_len = t = rng.randint(1, longest - 10)
            elif kind == "chunk":  # a prefill chunk after cached tokens, often starting inside a block
                t = rng.randint(1, 16)
                seq_len = t + rng.randint(1, longest - 10)
            else:  # "empty": a request with no new tokens this step
                seq_len, t = rng.randint(1, 10), 0
            reqs.append((t, seq_len))
        need = [blocks_needed(L, bs) + rng.choice([0, 0, 1]) for _, L in reqs]
        pool = rng.sample(range(sum(need) + 6), sum(need) + 6)  # non-contiguous, unsorted block ids
        num_blocks = len(pool)
        out_reqs = []
        for (t, L), nb in zip(reqs, need):
            out_reqs.append(Req(t, L, tuple(pool.pop() for _ in range(nb)), rng.randrange(1 << 30)))
        out.append(Spec(seed * 1000 + k, bs, heads, kv, rng.choice([8, 16]), num_blocks, tuple(out_reqs),
                        scale=rng.choice([None, 0.3, 0.05]) if scale else None,
                        index_kind=rng.choice(["list", "int32", "int64"]), dtype=dtype))
    return out


# ----------------------------------------------------------------------------------------------------------
# The cases


@CASES("the statement's worked example: out.flatten() is [2.0, 2.5, 20.0]", public=True)
def _(impl):
    check(impl, [Spec(0, 2, 1, 1, 1, 4, (Req(2, 4, (3, 1), 0), Req(1, 3, (0, 2), 0)), example=True)])


@CASES("one prefill, one request", public=True)
def _(impl):
    check(impl, [Spec(1, 4, 2, 1, 8, 6, (Req(6, 6, (4, 1), 11),))])


@CASES("one decode step after cached tokens", public=True)
def _(impl):
    check(impl, [Spec(2, 4, 2, 1, 8, 6, (Req(1, 7, (3, 0), 12),))])


@CASES("a prefill, a chunk starting mid-block and a decode in one batch", public=True)
def _(impl):
    check(impl, [Spec(13, 4, 2, 1, 8, 8, (Req(5, 5, (6, 2), 21), Req(3, 9, (1, 7, 4), 22), Req(1, 6, (0, 5), 23))),
                 Spec(14, 2, 4, 2, 8, 10, (Req(1, 3, (9, 3), 24), Req(4, 4, (2, 8), 25)))])


@CASES("prefill only (several requests)")
def _(impl):
    check(impl, random_specs(1, 15, ["prefill"], [2, 4, 16]))


@CASES("decode only (several requests)")
def _(impl):
    check(impl, random_specs(2, 15, ["decode"], [1, 4, 16], n_req=(2, 6)))


@CASES("chunked prefill: chunks after cached context, starting mid-block")
def _(impl):
    check(impl, random_specs(3, 15, ["chunk"], [2, 3, 4, 16]))


@CASES("mixed prefills, chunks and decodes")
def _(impl):
    check(impl, random_specs(4, 20, ["prefill", "chunk", "decode"], [1, 2, 4, 5, 16], n_req=(2, 6)))


@CASES("grouped-query attention (n_heads a multiple of n_kv_heads)")
def _(impl):
    check(impl, [replace(s, n_heads=8, n_kv_heads=2) for s in random_specs(5, 10, ["chunk", "decode"], [4])])


@CASES("a custom softmax scale (0.0 included)", public=True)
def _(impl):
    zero = [replace(s, scale=0.0) for s in random_specs(60, 4, ["prefill", "chunk", "decode"], [2, 4])]
    check(impl, random_specs(6, 10, ["prefill", "chunk", "decode"], [2, 4], scale=True) + zero)


@CASES("block_size 1 and a block size larger than every context")
def _(impl):
    check(impl, random_specs(7, 8, ["prefill", "chunk", "decode"], [1]) +
          random_specs(8, 8, ["prefill", "chunk", "decode"], [64]))


@CASES("long contexts: hundreds of positions over more than 64 blocks")
def _(impl):
    ids = seeded(12).sample(range(520), 520)  # a decode at 300 and a chunk at 220, a block per position
    fixed = Spec(12, 1, 4, 2, 8, 520, (Req(1, 300, tuple(ids[:300]), 1), Req(8, 220, tuple(ids[300:]), 2)))
    check(impl, [fixed] + random_specs(12, 3, ["decode", "chunk"], [2, 4], n_req=(2, 3), longest=400))


@CASES("a request with no new tokens contributes no rows", public=True)
def _(impl):
    check(impl, [Spec(9, 4, 2, 2, 8, 8, (Req(2, 5, (6, 3), 1), Req(0, 3, (1,), 2), Req(1, 4, (0,), 3))),
                 Spec(10, 2, 2, 1, 8, 6, (Req(0, 2, (5,), 4), Req(3, 3, (2, 4), 5)))])


@CASES("bfloat16 inputs: output in bfloat16", timeout=30)
def _(impl):
    check(impl, random_specs(11, 5, ["prefill", "chunk", "decode"], [4], dtype=torch.bfloat16))


@CASES("end to end: the reference ModelRunner with your paged_attention matches running each request alone",
       timeout=120)
def _(impl):
    end_to_end(impl, "paged_attention")
