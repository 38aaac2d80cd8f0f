"""Hidden tests of exercise 128 (build_batch). Values are compared, not classes or containers."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any, Callable

from framework.kv_cache_manager import blocks_needed
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any
from judge.harness import CaseFailure, Cases, check_each, short, shrink
from judge.hidden.end_to_end import alone_logits, engine_steps, load_model
from judge.drivers.batch import FIELDS, describe as build_text
from judge.remote import Driver, learner_failure
from solutions import batch as ref

CASES = Cases()

Item = tuple[list[int], int, list[int], bool]


def expected_values(items: list[Item], block_size: int) -> dict[str, Any]:
    b = ref.build_batch(items, block_size)
    return {name: (b.block_tables if name == "block_tables" else getattr(b, name).tolist()) for name in FIELDS}


# ----------------------------------------------------------------------------------------------------------
# Diagnosis: a hint for the commonest mistakes


def _hints(name: str, items: list[Item], block_size: int, exp: dict[str, Any]) -> list[tuple[Any, str]]:
    """The hints for a wrong field, as (a wrong value of it, its hint), the last for any other value (None)."""
    new = [len(it[0]) for it in items]
    qsl, positions = exp["query_start_loc"], exp["positions"]
    if name == "input_ids":
        return [(None, "input_ids is every request's token_ids, concatenated in request order")]
    if name == "query_start_loc":
        return [(qsl[1:], "query_start_loc has B+1 entries and starts with 0: [0, n0, n0+n1, ...]"),
                (None, "query_start_loc[i+1] - query_start_loc[i] is the number of NEW tokens of request i (a "
                       "cumulative sum)")]
    if name == "positions":
        return [([p - it[1] for it in items for p in range(it[1], it[1] + len(it[0]))],
                 "positions start at num_computed, not at 0: the cached tokens come first"),
                (None, "request i's new tokens sit at positions num_computed, num_computed+1, ...")]
    if name == "seq_lens":
        return [(new, "seq_lens counts the cached tokens too: num_computed + len(token_ids)"),
                (None, "seq_lens[i] = num_computed + len(token_ids) of request i")]
    if name == "slot_mapping":
        return [(positions, "the slot must go through the block table: block_table[p // block_size] * block_size + "
                            "p % block_size"),
                (None, "slot of position p = block_table[p // block_size] * block_size + p % block_size (p is the "
                       "absolute position)")]
    if name == "logits_indices":
        return [([len(it[0]) - 1 for it in items if it[3]],
                 "logits_indices are FLAT indices into the N tokens: query_start_loc[i+1] - 1, not len - 1"),
                ([qsl[i] for i, it in enumerate(items) if it[3]],
                 "the logits come from the LAST new token of a request: query_start_loc[i+1] - 1"),
                ([qsl[i + 1] - 1 for i in range(len(items))],
                 "only requests whose need_logits is true get a logits index"),
                (None, "one index per request with need_logits, in request order: query_start_loc[i+1] - 1")]
    if name == "block_tables":
        return [(None, "block_tables[i] is request i's own block table, unpadded")]
    return []


def _hint(name: str, items: list[Item], block_size: int, exp: dict[str, Any], got: list) -> str:
    """The hint for a wrong field: `got` differs from exp[name]."""
    if name == "slot_mapping" and got != exp["positions"]:
        idx = [i for i, (g, e) in enumerate(zip(got, exp["slot_mapping"])) if g != e]
        if idx and all(exp["positions"][i] % block_size == 0 for i in idx):
            return ("wrong only at block boundaries: the block is block_table[p // block_size], the offset "
                    "p % block_size")
    return next((hint for value, hint in _hints(name, items, block_size, exp) if value in (None, got)), "")


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of the fields of a public case's `build`, recorded with its answer (judge/edition.py)."""
    if (driver, fn) != ("batch", "build"):
        return []
    items, block_size, exp = [tuple(it) for it in args[0]], args[1], value["batch"]  # the reference's answer
    return [(f"['batch']['{name}']", wrong, hint) for name in FIELDS
            for wrong, hint in _hints(name, items, block_size, exp)]


def diff(items: list[Item], block_size: int, impl) -> CaseFailure | None:
    """None if the learner's build_batch agrees with the reference on this input, else the failure (with the input
    attached). It runs in the worker, through the public driver judge/drivers/batch.py."""
    text = build_text("build", items, block_size)
    out = Driver(impl, "batch").build([list(it) for it in items], block_size)
    if "raised" in out:
        return learner_failure(out["_error"], "build_batch", text)
    if "problem" in out:
        return CaseFailure(out["problem"], input=text, hint=out["hint"])
    got, exp = out["batch"], expected_values(items, block_size)
    for name in FIELDS:
        if got[name] != exp[name]:
            n = sum(len(it[0]) for it in items)
            msg = f"wrong {name}"
            if len(got[name]) != len(exp[name]):
                msg += (f" (expected {len(exp[name])} values, got {len(got[name])}; N={n} tokens, B={len(items)} "
                        "requests)")
            return CaseFailure(msg, input=text, field=name, expected=exp[name], got=got[name],
                               hint=_hint(name, items, block_size, exp, got[name]))
    if out["inputs changed"]:
        return CaseFailure("build_batch modified its input items", input=text, field="items",
                           expected=[list(it) for it in items], got=out["_items after"],
                           hint="read the items; never change them")
    return None


# ----------------------------------------------------------------------------------------------------------
# Random batches and shrinking


def make_items(rng: random.Random, kinds: list[str], block_size: int, spare: bool = True) -> list[Item]:
    pool = list(range(1, 4 * len(kinds) * (64 // block_size + 8) + 16))
    rng.shuffle(pool)  # non-contiguous, unsorted block ids
    items = []
    for kind in kinds:
        if kind == "decode":
            nc, n, logits = rng.randint(1, 40), 1, True
        elif kind == "prefill":
            nc, n, logits = 0, rng.randint(1, 30), True
        elif kind == "chunk":  # a chunk of a prefill that starts after cached tokens; last chunk or not
            nc, n, logits = rng.randint(1, 40), rng.randint(2, 20), rng.random() < 0.5
        elif kind == "aligned":  # starts and/or ends exactly on a block boundary
            nc = block_size * rng.randint(0, 4)
            n = block_size * rng.randint(1, 3) if rng.random() < 0.5 else rng.randint(1, 2 * block_size)
            if rng.random() < 0.5 and nc:
                nc -= rng.randint(1, block_size)  # starts inside a block
            logits = rng.random() < 0.7
        else:
            raise ValueError(kind)
        nblocks = max(1, blocks_needed(nc + n, block_size)) + (rng.randint(0, 2) if spare and rng.random() < 0.3 else 0)
        table = [pool.pop() for _ in range(nblocks)]
        items.append(([rng.randrange(1, 5000) for _ in range(n)], nc, table, logits))
    return items


def candidates(value):
    """Smaller variants of (items, block_size): fewer requests, fewer tokens, less context, shorter tables."""
    items, bs = value
    if len(items) > 1:
        half = len(items) // 2
        yield items[:half], bs
        yield items[half:], bs
        for i in range(len(items)):
            yield items[:i] + items[i + 1:], bs
    for i, (toks, nc, table, logits) in enumerate(items):
        def put(it):
            return items[:i] + [it] + items[i + 1:], bs
        need = max(1, blocks_needed(nc + len(toks), bs))
        if len(table) > need:
            yield put((toks, nc, table[:need], logits))
        if len(toks) > 1:
            yield put((toks[: len(toks) // 2], nc, table, logits))
            yield put((toks[:-1], nc, table, logits))
        if nc > 0:
            yield put((toks, nc // 2, table, logits))
            yield put((toks, nc - 1, table, logits))
        if any(t > 9 for t in toks):
            yield put(([min(t, 10 + k) for k, t in enumerate(toks)], nc, table, logits))


def check_batches(impl, batches: list[tuple[list[Item], int]]) -> None:
    check_each(batches, lambda v: diff(*v, impl), candidates)


def random_batches(seed: int, count: int, kinds: list[str], sizes: list[int], n_req=(1, 6), spare: bool = True,
                   then: Callable[[random.Random, list[Item]], list[Item]] | None = None,
                   ) -> list[tuple[list[Item], int]]:
    """`count` random batches; `then(rng, items)` changes each batch's items after they are drawn."""
    rng = seeded(seed)
    out = []
    for _ in range(count):
        bs = rng.choice(sizes)
        k = rng.randint(*n_req)
        items = make_items(rng, [rng.choice(kinds) for _ in range(k)], bs, spare)
        out.append((then(rng, items) if then else items, bs))
    return out


# ----------------------------------------------------------------------------------------------------------
# The cases


@CASES("the worked example", public=True)
def _(impl):
    check_batches(impl, [([([11, 12, 13, 14, 15], 0, [7, 2], True), ([21], 6, [3, 9], True),
                           ([31, 32, 33], 2, [5, 8], False)], 4)])


@CASES("a prefill, a decode and a chunk in one batch, all needing logits", public=True)
def _(impl):
    check_batches(impl, [([([1, 2, 3], 0, [4], True), ([9], 5, [2, 6], True), ([7, 8], 3, [1, 0], True)], 4),
                         ([([5], 3, [8], True), ([6, 7, 8, 9, 10], 1, [3, 1], True), ([4], 9, [0, 2, 7], True)], 4)])


@CASES("need_logits=False in the middle of a batch", public=True)
def _(impl):
    check_batches(impl, [([([5, 6], 0, [3], True), ([7, 8, 9], 2, [1, 2], False), ([4], 7, [0, 5], True)], 4),
                         ([([1, 2, 3, 4, 5], 0, [6, 2], False), ([8], 4, [1, 3], True)], 4)])


@CASES("single prefill", public=True)
def _(impl):
    check_batches(impl, [([([11, 12, 13, 14, 15, 16, 17], 0, [3, 1], True)], 4)])


@CASES("single decode", public=True)
def _(impl):
    check_batches(impl, [([([42], 9, [5, 2, 7], True)], 4)])


@CASES("prefill only")
def _(impl):
    check_batches(impl, random_batches(1, 25, ["prefill"], [2, 4, 8, 16]))


@CASES("decode only")
def _(impl):
    check_batches(impl, random_batches(2, 25, ["decode"], [2, 4, 8, 16], n_req=(2, 8)))


@CASES("chunked prefill (context already cached)")
def _(impl):
    check_batches(impl, random_batches(3, 25, ["chunk"], [2, 4, 8, 16]))


@CASES("mixed prefills, chunks and decodes")
def _(impl):
    check_batches(impl, random_batches(4, 40, ["prefill", "chunk", "decode"], [2, 4, 8, 16], n_req=(2, 7)))


@CASES("chunks starting and ending on and across block boundaries")
def _(impl):
    check_batches(impl, random_batches(5, 40, ["aligned"], [2, 4, 16], n_req=(1, 4)))


@CASES("block_size 1")
def _(impl):
    check_batches(impl, random_batches(6, 20, ["prefill", "chunk", "decode"], [1], n_req=(1, 5)))


@CASES("large block_size (everything in one block)")
def _(impl):
    check_batches(impl, random_batches(7, 15, ["prefill", "chunk", "decode"], [64, 256], n_req=(1, 5)))


@CASES("requests that need no logits")
def _(impl):
    def half_need_logits(rng, items):
        return [(t, nc, tb, rng.random() < 0.5) for t, nc, tb, _ in items]

    check_batches(impl, random_batches(8, 25, ["prefill", "chunk", "decode"], [2, 4, 8], n_req=(2, 6),
                                       then=half_need_logits))


@CASES("no request needs logits (empty logits_indices)", public=True)
def _(impl):
    check_batches(impl, [([([5, 6, 7], 0, [2], False)], 4),
                         ([([5, 6, 7], 4, [9, 3], False), ([8, 9], 0, [1], False)], 4)])


@CASES("block tables longer than needed")
def _(impl):
    def spare_blocks(rng, items):
        return [(t, nc, tb + [900 + 7 * k for k in range(rng.randint(1, 3))], lg) for k, (t, nc, tb, lg)
                in enumerate(items)]

    check_batches(impl, random_batches(9, 15, ["prefill", "chunk", "decode"], [2, 4], n_req=(1, 4), spare=False,
                                       then=spare_blocks))


@CASES("many requests")
def _(impl):
    check_batches(impl, random_batches(10, 3, ["prefill", "chunk", "decode"], [4, 16], n_req=(40, 64)))


@CASES("inputs are not modified")
def _(impl):
    check_batches(impl, [([([3, 4, 5], 2, [7, 1], True), ([6], 8, [2, 5, 4], True)], 4)])


# ----------------------------------------------------------------------------------------------------------
# End to end: the learner's build_batch drives the model runner on the embedded model, on the chapters' code
# path (framework.model_runner reads the batch; the reference write_kv and attention do the rest)


def describe(item: Item) -> str:
    tokens, nc, _, need = item
    if not need:
        return "a prompt chunk that needs no logits"
    if nc == 0:
        return "a prefill of a whole prompt"
    return "a decode" if len(tokens) == 1 else "the last chunk of a prompt"


def show_labelled(labelled: list[tuple[str, Item]], block_size: int) -> str:
    lines = [f"    {tuple(it)!r},  # request {label}: {describe(it)}" for label, it in labelled]
    return "build_batch([\n" + "\n".join(lines) + f"\n], block_size={block_size})"


def labelled_candidates(value):
    """Smaller labelled inputs: drop a request, or shrink one request's item as `candidates` does."""
    labelled, bs = value
    for i in range(len(labelled)) if len(labelled) > 1 else ():
        yield labelled[:i] + labelled[i + 1:], bs
    for i, (label, item) in enumerate(labelled):
        for (smaller,), _ in (c for c in candidates(([item], bs)) if len(c[0]) == 1):
            yield labelled[:i] + [(label, smaller)] + labelled[i + 1:], bs


def diagnose(fn, labelled: list[tuple[str, Item]], bs: int) -> CaseFailure | None:
    """The smallest labelled sub-batch on which fn's batch differs from the reference, as a failure."""
    def failure(value):
        return diff([it for _, it in value[0]], value[1], fn)

    if failure((labelled, bs)) is None:
        return None
    smallest = shrink((labelled, bs), lambda v: failure(v) is not None, labelled_candidates)
    f = failure(smallest)
    f.input = show_labelled(*smallest)
    return f


def learner_batch(impl, items: list, block_size: int) -> SimpleNamespace:
    """The batch the learner's build_batch made in the worker, its fields as they made them (tensors, lists)."""
    out = Driver(impl, "batch").build([list(it) for it in items], block_size)
    if "_raw" not in out:  # diagnosed with `diff` by the step that asked
        raise CaseFailure(out.get("problem") or f"build_batch raised {out.get('raised')}")
    return SimpleNamespace(**out["_raw"])


@CASES("end to end: ModelRunner logits equal each request run alone", timeout=120)
def _(impl):
    from framework.model_runner import runner_class
    from solutions.model_runner import ModelRunner

    model = load_model()
    # The reference runner, its batch the one your build_batch made (read in the worker by the public driver)
    Runner = runner_class(ModelRunner, build_batch=lambda items, block_size: learner_batch(impl, items, block_size))

    bs = 4
    runner = Runner(model, num_blocks=64, block_size=bs)
    vocab = model.cfg.vocab_size
    plans = [[("A", 13, True), ("B", 12, False), ("C", 6, True)],
             [("D", 9, True), ("A", 1, True), ("B", 10, False), ("C", 1, True)],
             [("C", 1, True), ("B", 8, True), ("A", 1, True), ("D", 1, True)]]
    steps, seqs = engine_steps(128, vocab, {"A": 13, "B": 30, "C": 6, "D": 9}, plans, bs, 64, spare=4)

    def check_step(label: str, labelled: list[tuple[str, Item]]) -> None:
        def blame(bad: str, otherwise: str) -> CaseFailure:
            """The cause of `bad`, on the smallest part of this step's batch that has it, else `otherwise`."""
            failure = diagnose(impl, labelled, bs)
            if failure is None:
                return CaseFailure(f"{label}: {otherwise}", input=show_labelled(labelled, bs),
                                   hint="check the types: integer tensors (torch.long or torch.int32) or lists")
            failure.message = (f"{label}: {bad}. The cause, shown on the smallest part of this step's batch that "
                               f"still has it: {failure.message}")
            return failure

        try:
            logits = runner.execute_model([it for _, it in labelled])
        except Exception as exc:  # noqa: BLE001 - the reference runner, on the batch your code made
            raise blame("the runner failed on your batch", "ModelRunner.execute_model failed on your batch: "
                        f"{type(exc).__name__}: {short(str(exc))}") from None
        wanted = [(r, it[1] + len(it[0]), describe(it)) for r, it in labelled if it[3]]
        bad = None
        if tuple(logits.shape) != (len(wanted), vocab):
            bad = (f"the runner returned logits of shape {tuple(logits.shape)}, expected {(len(wanted), vocab)} "
                   "(one row per request that needs logits)")
        else:
            for row, (r, upto, what) in zip(logits, wanted):
                err = (row - alone_logits(model, seqs[r][:upto])).abs().max().item()
                if not err <= 1e-4:
                    bad = (f"the logits of request {r} ({what}) differ from running it alone by {err:.3g} "
                           "(tolerance 1e-4)")
                    break
        if bad is not None:
            raise blame(bad, f"{bad}, though every attribute of your batch has the expected values")

    for label, labelled in zip(("engine step 1", "engine step 2 (mixed)", "engine step 3"), steps):
        check_step(label, labelled)
