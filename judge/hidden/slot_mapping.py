"""Hidden tests of exercise 126 (compute_slot_mapping, write_kv).

Slots are checked against the definition (block `table[p // block_size]`, row `p % block_size`), written here;
write_kv against a copy of the caches in which exactly the expected rows were set, token by token. The learner's
functions run in the worker through the public driver (judge/drivers/paged_kv_cache.py), which gives write_kv one
layer of a real multi-layer cache, as the model runner does.
"""

from __future__ import annotations

from typing import Any

import torch

from framework.kv_cache_manager import blocks_needed
from judge.drivers.paged_kv_cache import write_inputs, write_text
from judge.harness import CaseFailure, Cases, check_each
from judge.hidden.end_to_end import end_to_end
from judge.remote import Driver, learner_failure
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any

CASES = Cases()


# ----------------------------------------------------------------------------------------------------------
# compute_slot_mapping

def expected_slots(table: list[int], start: int, end: int, bs: int) -> list[int] | None:
    """The slots by definition; None where the contract asks for a ValueError (table too short)."""
    if end > len(table) * bs:
        return None
    return [table[p // bs] * bs + p % bs for p in range(start, end)]


def _slot_hint(table: list[int], start: int, end: int, bs: int, got: list[int]) -> str:
    positions = list(range(start, end))
    if got == positions:
        return ("a slot is not the position: go through the block table, "
                "table[p // block_size] * block_size + p % block_size")
    if got == [table[p // bs] + p % bs for p in positions]:
        return "multiply the block id by block_size: slot = block_id * block_size + row"
    exp = expected_slots(table, start, end, bs) or []
    wrong = [p for p, g, e in zip(positions, got, exp) if g != e]
    if len(got) == len(exp) and bs > 1 and any(wrong) and all(p % bs == 0 for p in wrong):
        return "wrong only at the first row of a block: block = table[p // block_size], row = p % block_size"
    if got == [table[p // bs] * bs + p % bs for p in range(end - start)] and start:
        return "the slots are for positions start .. end-1, not 0 .. end-start-1"
    return "slot of position p = table[p // block_size] * block_size + p % block_size"


WRITE_HINT = "token i goes to block slot_mapping[i] // block_size, row slot_mapping[i] % block_size, all heads at once"


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of a public case's calls, recorded with the reference's answer (judge/edition.py)."""
    if (driver, fn) == ("paged_kv_cache", "slots") and "returned" in value:
        table, start, end, bs = args
        positions = range(start, end)
        mistakes = [list(positions), [table[p // bs] + p % bs for p in positions],
                    [table[p // bs] * bs + p % bs for p in range(end - start)]]
        return [("['returned']", wrong, _slot_hint(table, start, end, bs, wrong)) for wrong in mistakes
                if wrong != value["returned"]] + [("['returned']", None, _slot_hint(table, start, end, bs, []))]
    if (driver, fn) == ("paged_kv_cache", "write") and "key_caches" in value:
        untouched = write_inputs(args[0])  # what the caches hold when write_kv wrote into something else
        return [(f"['{name}']", untouched[name], _write_hint(args[0], {**untouched, "returned": None}))
                for name in ("key_caches", "value_caches")] + \
            [(f"['{name}']", None, WRITE_HINT) for name in ("key_caches", "value_caches")]
    return []


def slot_diff(table: list[int], start: int, end: int, bs: int, impl) -> CaseFailure | None:
    text = f"compute_slot_mapping(block_table={table}, start={start}, end={end}, block_size={bs})"
    exp = expected_slots(table, start, end, bs)
    got = Driver(impl, "paged_kv_cache").slots(table, start, end, bs)
    err = got.get("raised")
    if err == "ValueError" and exp is None:
        return None
    if err == "NotImplementedError" or err is not None and exp is not None:
        return learner_failure(got["_error"], "compute_slot_mapping", text)
    if err is not None:
        return CaseFailure(f"expected ValueError, got {err}", input=text, field="raises", expected="ValueError",
                           got=err, hint="a block table too short for position end-1 is a ValueError")
    if exp is None:
        return CaseFailure(f"end={end} is past the {len(table) * bs} slots of the table (positions up to {end - 1} "
                           f"need {blocks_needed(end, bs)} blocks, the table has {len(table)}): expected ValueError",
                           input=text, field="raises", expected="ValueError",
                           got=got.get("returned", got.get("problem")),
                           hint="check end <= len(block_table) * block_size before computing anything, even when "
                                "start == end")
    if "problem" in got:
        return CaseFailure(got["problem"], input=text, hint="return one int per position, e.g. a list")
    got = got["returned"]
    if got != exp:
        msg = "wrong slots" + (f" (expected {len(exp)} values, got {len(got)})" if len(got) != len(exp) else "")
        return CaseFailure(msg, input=text, field="slot_mapping", expected=exp, got=got,
                           hint=_slot_hint(table, start, end, bs, got))
    return None


def slot_candidates(value):
    table, start, end, bs = value
    if end > start:
        yield table, start, end - 1, bs
        yield table, start + 1, end, bs
    if start > 0:
        yield table, start - 1, end - 1, bs
    need = max(1, blocks_needed(end, bs))
    if len(table) > need:
        yield table[:need], start, end, bs
    for i, b in enumerate(table):
        if b > i:
            yield table[:i] + [i] + table[i + 1:], start, end, bs
    if bs > 1:
        yield table, start, end, bs - 1


def check_slots(impl, inputs) -> None:
    check_each(inputs, lambda v: slot_diff(*v, impl), slot_candidates)


def random_slot_inputs(seed: int, count: int, sizes: list[int], spare: bool) -> list[tuple]:
    rng = seeded(seed)
    out = []
    for _ in range(count):
        bs = rng.choice(sizes)
        end = rng.randint(1, 6 * bs)
        start = rng.randint(0, end)
        nblocks = blocks_needed(end, bs) + (rng.randint(1, 3) if spare else 0)
        out.append((rng.sample(range(64), nblocks), start, end, bs))
    return out


@CASES("slot mapping: the worked example", public=True)
def _(impl):
    check_slots(impl, [([7, 2], 2, 6, 4)])


@CASES("slot mapping: a whole prefill from position 0")
def _(impl):
    check_slots(impl, [([3, 1], 0, 7, 4), ([5], 0, 1, 16), ([9, 0, 4], 0, 12, 4)])


@CASES("slot mapping: a chunk that starts inside a block", public=True)
def _(impl):
    check_slots(impl, [([4, 8, 6], 5, 11, 4), ([2, 7, 1], 3, 4, 3), ([6, 5], 1, 2, 2)])


@CASES("slot mapping: start == end gives no slots")
def _(impl):
    # each empty range follows a non-empty one on the same table, so that returning [] always cannot pass
    check_slots(impl, [([4, 8], 1, 4, 4), ([4, 8], 3, 3, 4), ([1], 0, 2, 2), ([1], 0, 0, 2)])


@CASES("slot mapping: random block tables, block sizes 1 to 16")
def _(impl):
    check_slots(impl, random_slot_inputs(126, 60, [1, 2, 3, 4, 5, 8, 16], spare=False))


@CASES("slot mapping: block tables longer than needed")
def _(impl):
    check_slots(impl, random_slot_inputs(1260, 40, [2, 4, 16], spare=True))


@CASES("slot mapping: a table exactly full is fine, one too short is a ValueError", public=True)
def _(impl):
    check_slots(impl, [([5, 1], 0, 8, 4), ([5, 1], 6, 8, 4), ([5, 1], 6, 9, 4), ([3], 0, 3, 2), ([], 0, 1, 4),
                       ([2, 9], 8, 9, 4)])


@CASES("slot mapping: an empty range past the end of the table is a ValueError", public=True)
def _(impl):
    # after the legal empty range at the very end, so that raising for every empty range cannot pass
    check_slots(impl, [([0, 1], 2, 2, 1), ([0, 1], 3, 3, 1), ([4], 4, 4, 4), ([4], 6, 6, 4)])


# ----------------------------------------------------------------------------------------------------------
# write_kv

# A write: [seed, layers, layer, num_blocks, block_size, n_kv_heads, head_dim, slots, dtype, index dtype]; the
# driver builds caches [layers, num_blocks, block_size, n_kv_heads, head_dim] and writes into layer `layer`.


def expected_caches(spec: list) -> tuple[torch.Tensor, torch.Tensor]:
    t = write_inputs(spec)
    kc, vc, layer = t["key_caches"], t["value_caches"], spec[2]
    bs = kc.shape[2]
    for i, s in enumerate(t["slot_mapping"].tolist()):
        kc[layer, s // bs, s % bs] = t["key"][i]
        vc[layer, s // bs, s % bs] = t["value"][i]
    return kc, vc


def _write_hint(spec: list, got: dict) -> str:
    """Why the caches write_kv left (`got`) are wrong."""
    t, kc, vc, layer = write_inputs(spec), got["key_caches"], got["value_caches"], spec[2]
    if any(not torch.equal(kc[other], t["key_caches"][other]) for other in range(kc.shape[0]) if other != layer):
        return "another layer changed: the tensor you get is a view into one layer of a bigger cache; write through " \
               "it (key_cache.view(...), key_cache[b, r] = ...), never through its storage (as_strided, " \
               "untyped_storage) from offset 0"
    if torch.equal(kc[layer], t["key_caches"][layer]) and torch.equal(vc[layer], t["value_caches"][layer]):
        if got["returned"] is not None:
            return "write_kv must change key_cache and value_cache IN PLACE (e.g. key_cache[b, r] = ...); " \
                   "returning new tensors does nothing for the caller"
        return "nothing was written into the layer you were given: write through that tensor, IN PLACE (e.g. " \
               "key_cache.view(-1, heads, dim)[slots] = key). `key_cache = ...` or `key_cache.data = ...` only " \
               "rebinds the name or the tensor object, not the cache the caller holds"
    rows = lambda c: c[layer].flatten(0, 1)[t["slot_mapping"].long()]  # noqa: E731 - the rows at the given slots
    if not torch.equal(t["key"], t["value"]):
        if torch.equal(rows(vc), t["key"]):
            return "value_cache got the keys: write value into value_cache"
        if torch.equal(rows(kc), t["value"]):
            return "key_cache got the values: write key into key_cache"
    return WRITE_HINT


def write_diff(spec: list, impl) -> CaseFailure | None:
    text = write_text(spec)
    got = Driver(impl, "paged_kv_cache").write(spec)
    if "raised" in got:
        return learner_failure(got["_error"], "write_kv", text)
    exp_k, exp_v = expected_caches(spec)
    layer = spec[2]
    for name, g, exp in (("key_caches", got["key_caches"], exp_k), ("value_caches", got["value_caches"], exp_v)):
        if g.shape != exp.shape or g.dtype != exp.dtype:
            return CaseFailure(f"write_kv changed {name}'s shape or dtype", input=text, field=name,
                               expected=f"{tuple(exp.shape)} {exp.dtype}", got=f"{tuple(g.shape)} {g.dtype}")
        if not torch.equal(g, exp):
            lay, b, r = (exp != g).flatten(3).any(-1).nonzero()[0].tolist()
            slot = b * exp.shape[2] + r
            written = lay == layer and slot in spec[7]
            what = f"layer {lay}, slot {slot} (block {b}, row {r}), which " + (
                "is in slot_mapping" if written else "must not change" + (
                    "" if lay == layer else f": write_kv was given layer {layer}"))
            return CaseFailure(f"{name} is wrong at {what}", input=text, field=f"{name}[{lay}, {b}, {r}]",
                               expected=exp[lay, b, r].float().tolist(), got=g[lay, b, r].float().tolist(),
                               hint=_write_hint(spec, got))
    if got["inputs changed"]:
        return CaseFailure(f"write_kv modified its input {got['inputs changed'][0]}", input=text,
                           hint="only the caches may change")
    if got["returned"] is not None:
        return CaseFailure("write_kv returned a value; it must return None", input=text, field="return value",
                           expected=None, got=got["returned"],
                           hint="write_kv writes into the caches it is given and returns None (drop the return)")
    return None


def write_candidates(spec: list):
    seed, layers, layer, nb, bs, heads, hd, slots, dtype, idx = spec
    if len(slots) > 1:
        yield [seed, layers, layer, nb, bs, heads, hd, slots[: len(slots) // 2], dtype, idx]
        for i in range(len(slots)):
            yield [seed, layers, layer, nb, bs, heads, hd, slots[:i] + slots[i + 1:], dtype, idx]
    if hd > 2:
        yield [seed, layers, layer, nb, bs, heads, hd // 2, slots, dtype, idx]
    if heads > 1:
        yield [seed, layers, layer, nb, bs, heads // 2, hd, slots, dtype, idx]
    used = max(slots, default=0) // bs + 1
    if nb > used:
        yield [seed, layers, layer, used, bs, heads, hd, slots, dtype, idx]
    if layers > layer + 1:
        yield [seed, layer + 1, layer, nb, bs, heads, hd, slots, dtype, idx]


def check_writes(impl, specs) -> None:
    check_each(specs, lambda v: write_diff(v, impl), write_candidates, max_calls=200)


def random_writes(seed: int, count: int, sizes: list[int], heads: list[int], dtypes: list[str],
                  idx_dtypes: list[str]) -> list[list]:
    rng = seeded(seed)
    out = []
    for k in range(count):
        nb, bs = rng.randint(2, 12), rng.choice(sizes)
        n = rng.randint(1, min(20, nb * bs))
        slots = rng.sample(range(nb * bs), n)
        layers = rng.randint(1, 3)
        out.append([seed * 1000 + k, layers, rng.randrange(layers), nb, bs, rng.choice(heads), rng.choice([2, 4, 8]),
                    slots, rng.choice(dtypes), rng.choice(idx_dtypes)])
    return out


@CASES("write_kv: one token")
def _(impl):
    check_writes(impl, [[1, 1, 0, 3, 4, 1, 4, [6], "float32", "int64"]])


@CASES("write_kv: the worked example's prefill, into layer 1 of a 2-layer cache", public=True)
def _(impl):
    check_writes(impl, [[4, 2, 1, 3, 2, 1, 2, [5, 0, 1], "float32", "int64"]])


@CASES("write_kv: a prefill into a non-contiguous block table", public=True)
def _(impl):
    table, bs = [5, 1, 3], 4
    slots = [table[p // bs] * bs + p % bs for p in range(10)]
    check_writes(impl, [[2, 1, 0, 6, bs, 2, 8, slots, "float32", "int64"]])


@CASES("write_kv: random slots, several KV heads (GQA caches), one layer of 1 to 3")
def _(impl):
    check_writes(impl, random_writes(126, 30, [1, 2, 4, 16], [1, 2, 4], ["float32"], ["int64"]))


@CASES("write_kv: int32 slot_mapping, bfloat16 and float16 caches")
def _(impl):
    check_writes(impl, random_writes(127, 20, [2, 4, 8], [1, 2], ["bfloat16", "float16", "float32"],
                                     ["int32", "int64"]))


@CASES("write_kv: no tokens (empty slot_mapping) changes nothing")
def _(impl):
    # after a one-token write into the same shapes, so that a write_kv doing nothing cannot pass
    check_writes(impl, [[3, 1, 0, 4, 4, 2, 4, [9], "float32", "int64"], [3, 1, 0, 4, 4, 2, 4, [], "float32", "int64"]])


@CASES("write_kv: in place into one layer of a multi-layer cache (the others must not change)", public=True)
def _(impl):
    check_writes(impl, [[5, 3, 1, 5, 4, 2, 8, [17, 2, 3, 12, 13, 19], "float32", "int64"],
                        [6, 3, 2, 5, 4, 2, 8, [0, 1, 7], "bfloat16", "int32"]])


@CASES("end to end: the reference ModelRunner with your write_kv matches running each request alone", timeout=120)
def _(impl):
    end_to_end(impl, "write_kv")
