"""Hidden tests of exercise 126 (compute_slot_mapping, write_kv).

Slots are checked against the definition (block `table[p // block_size]`, row `p % block_size`), written here;
write_kv against a copy of the caches in which exactly the expected rows were set, token by token.
"""

from __future__ import annotations

from typing import Any

import torch

from judge.hidden.support import end_to_end, int_values
from framework.kv_cache_manager import blocks_needed
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any
from judge.harness import CaseFailure, Cases, LearnerRaised, call, call_live, raised_failure, shrink, short

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
        return "a slot is not the position: go through the block table, table[p // block_size] * block_size + p % block_size"
    if got == [table[p // bs] + p % bs for p in positions]:
        return "multiply the block id by block_size: slot = block_id * block_size + row"
    exp = expected_slots(table, start, end, bs) or []
    wrong = [p for p, g, e in zip(positions, got, exp) if g != e]
    if len(got) == len(exp) and bs > 1 and any(wrong) and all(p % bs == 0 for p in wrong):
        return "wrong only at the first row of a block: block = table[p // block_size], row = p % block_size"
    if got == [table[p // bs] * bs + p % bs for p in range(end - start)] and start:
        return "the slots are for positions start .. end-1, not 0 .. end-start-1"
    return "slot of position p = table[p // block_size] * block_size + p % block_size"


def slot_diff(table: list[int], start: int, end: int, bs: int, fn) -> CaseFailure | None:
    text = f"compute_slot_mapping(block_table={table}, start={start}, end={end}, block_size={bs})"
    exp = expected_slots(table, start, end, bs)
    try:
        out = call(fn, table, start, end, bs)
    except LearnerRaised as err:
        if exp is None and isinstance(err.exc, ValueError):
            return None
        if exp is None and not isinstance(err.exc, NotImplementedError):
            return CaseFailure(f"expected ValueError, got {type(err.exc).__name__}: {short(str(err.exc))}",
                               input=text, hint="a block table too short for position end-1 is a ValueError")
        return raised_failure(err, "compute_slot_mapping", input=text)
    if exp is None:
        return CaseFailure(f"positions up to {end - 1} need {blocks_needed(end, bs)} blocks but the table has {len(table)}: "
                           "expected ValueError", input=text, field="raises", expected="ValueError", got=short(out),
                           hint="check len(block_table) * block_size >= end before computing anything")
    got = int_values(out)
    if got is None:
        return CaseFailure(f"compute_slot_mapping returned {short(out)} ({type(out).__name__}); expected a list of "
                           "integers", input=text, hint="return one int per position, e.g. a list")
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
    fn = impl.compute_slot_mapping
    for value in inputs:
        failure = slot_diff(*value, fn)
        if failure is None:
            continue
        if failure.kind == "not implemented":
            raise failure
        smallest = shrink(value, lambda v: slot_diff(*v, fn) is not None, slot_candidates)
        raise slot_diff(*smallest, fn) or failure


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


@CASES("slot mapping: the worked example")
def _(impl):
    check_slots(impl, [([7, 2], 2, 6, 4)])


@CASES("slot mapping: a whole prefill from position 0")
def _(impl):
    check_slots(impl, [([3, 1], 0, 7, 4), ([5], 0, 1, 16), ([9, 0, 4], 0, 12, 4)])


@CASES("slot mapping: a chunk that starts inside a block")
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


@CASES("slot mapping: a table exactly full is fine, one too short is a ValueError")
def _(impl):
    check_slots(impl, [([5, 1], 0, 8, 4), ([5, 1], 6, 8, 4), ([5, 1], 6, 9, 4), ([3], 0, 3, 2), ([], 0, 1, 4),
                       ([2, 9], 8, 9, 4)])


# ----------------------------------------------------------------------------------------------------------
# write_kv

def make_write(spec: tuple) -> dict[str, Any]:
    """Deterministic tensors for spec = (seed, num_blocks, block_size, n_kv_heads, head_dim, slots, dtype, idx)."""
    seed, nb, bs, heads, hd, slots, dtype, idx_dtype = spec
    g = torch.Generator().manual_seed(seed)
    shape = (nb, bs, heads, hd)
    return {"key_cache": torch.randn(shape, generator=g).to(dtype), "value_cache": torch.randn(shape, generator=g).to(dtype),
            "key": torch.randn(len(slots), heads, hd, generator=g).to(dtype),
            "value": torch.randn(len(slots), heads, hd, generator=g).to(dtype),
            "slot_mapping": torch.tensor(slots, dtype=idx_dtype)}


def write_text(spec: tuple) -> str:
    seed, nb, bs, heads, hd, slots, dtype, idx_dtype = spec
    return (f"key_cache, value_cache: random {str(dtype).replace('torch.', '')} [num_blocks={nb}, block_size={bs}, "
            f"n_kv_heads={heads}, head_dim={hd}]; key, value: random [N={len(slots)}, {heads}, {hd}]; "
            f"slot_mapping=torch.tensor({slots}, dtype={idx_dtype})")


def expected_caches(t: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    kc, vc = t["key_cache"].clone(), t["value_cache"].clone()
    bs = kc.shape[1]
    for i, s in enumerate(t["slot_mapping"].tolist()):
        kc[s // bs, s % bs] = t["key"][i]
        vc[s // bs, s % bs] = t["value"][i]
    return kc, vc


def _first_wrong_row(exp: torch.Tensor, got: torch.Tensor) -> tuple[int, int]:
    bad = (exp != got).flatten(2).any(-1).nonzero()
    return int(bad[0, 0]), int(bad[0, 1])


def _write_hint(t: dict[str, Any], kc: torch.Tensor, vc: torch.Tensor, before: tuple, ret: Any) -> str:
    if torch.equal(kc, before[0]) and torch.equal(vc, before[1]):
        if ret is not None:
            return "write_kv must change key_cache and value_cache IN PLACE (e.g. key_cache[b, r] = ...); returning " \
                   "new tensors does nothing for the caller"
        return "nothing was written: assign into the given tensors (key_cache.view(-1, heads, dim)[slots] = key " \
               "writes in place; key_cache = ... only rebinds a local name)"
    rows = lambda c: c.flatten(0, 1)[t["slot_mapping"].long()]  # noqa: E731 - the rows at the given slots
    if not torch.equal(t["key"], t["value"]):
        if torch.equal(rows(vc), t["key"]):
            return "value_cache got the keys: write value into value_cache"
        if torch.equal(rows(kc), t["value"]):
            return "key_cache got the values: write key into key_cache"
    return "token i goes to block slot_mapping[i] // block_size, row slot_mapping[i] % block_size, all heads at once"


def write_diff(spec: tuple, fn) -> CaseFailure | None:
    text = write_text(spec)
    t = make_write(spec)
    before = (t["key_cache"].clone(), t["value_cache"].clone())
    k_in, v_in, s_in = t["key"].clone(), t["value"].clone(), t["slot_mapping"].clone()
    try:
        ret = call_live(fn, t["key_cache"], t["value_cache"], t["key"], t["value"], t["slot_mapping"])
    except LearnerRaised as err:
        return raised_failure(err, "write_kv", input=text)
    exp_k, exp_v = expected_caches({**t, "key_cache": before[0], "value_cache": before[1]})
    for name, got, exp in (("key_cache", t["key_cache"], exp_k), ("value_cache", t["value_cache"], exp_v)):
        if got.shape != exp.shape or got.dtype != exp.dtype:
            return CaseFailure(f"write_kv changed {name}'s shape or dtype", input=text, field=name,
                               expected=f"{tuple(exp.shape)} {exp.dtype}", got=f"{tuple(got.shape)} {got.dtype}")
        if not torch.equal(got, exp):
            b, r = _first_wrong_row(exp, got)
            slot = b * exp.shape[1] + r
            written = slot in t["slot_mapping"].tolist()
            what = f"slot {slot} (block {b}, row {r}), which " + ("is in slot_mapping" if written else
                                                                 "is not in slot_mapping and must not change")
            return CaseFailure(f"{name} is wrong at {what}", input=text, field=f"{name}[{b}, {r}]",
                               expected=exp[b, r].float().tolist(), got=got[b, r].float().tolist(),
                               hint=_write_hint(t, t["key_cache"], t["value_cache"], before, ret))
    for name, now, was in (("key", t["key"], k_in), ("value", t["value"], v_in), ("slot_mapping", t["slot_mapping"], s_in)):
        if not torch.equal(now, was):
            return CaseFailure(f"write_kv modified its input {name}", input=text, hint="only the caches may change")
    return None


def write_candidates(spec: tuple):
    seed, nb, bs, heads, hd, slots, dtype, idx = spec
    if len(slots) > 1:
        yield seed, nb, bs, heads, hd, slots[: len(slots) // 2], dtype, idx
        for i in range(len(slots)):
            yield seed, nb, bs, heads, hd, slots[:i] + slots[i + 1:], dtype, idx
    if hd > 2:
        yield seed, nb, bs, heads, hd // 2, slots, dtype, idx
    if heads > 1:
        yield seed, nb, bs, heads // 2, hd, slots, dtype, idx
    used = max(slots, default=0) // bs + 1
    if nb > used:
        yield seed, used, bs, heads, hd, slots, dtype, idx


def check_writes(impl, specs) -> None:
    fn = impl.write_kv
    for spec in specs:
        failure = write_diff(spec, fn)
        if failure is None:
            continue
        if failure.kind == "not implemented":
            raise failure
        smallest = shrink(spec, lambda v: write_diff(v, fn) is not None, write_candidates, max_calls=200)
        raise write_diff(smallest, fn) or failure


def random_writes(seed: int, count: int, sizes: list[int], heads: list[int], dtypes: list[torch.dtype],
                  idx_dtypes: list[torch.dtype]) -> list[tuple]:
    rng = seeded(seed)
    out = []
    for k in range(count):
        nb, bs = rng.randint(2, 12), rng.choice(sizes)
        n = rng.randint(1, min(20, nb * bs))
        slots = rng.sample(range(nb * bs), n)
        out.append((seed * 1000 + k, nb, bs, rng.choice(heads), rng.choice([2, 4, 8]), slots, rng.choice(dtypes),
                    rng.choice(idx_dtypes)))
    return out


@CASES("write_kv: one token")
def _(impl):
    check_writes(impl, [(1, 3, 4, 1, 4, [6], torch.float32, torch.long)])


@CASES("write_kv: a prefill into a non-contiguous block table")
def _(impl):
    table, bs = [5, 1, 3], 4
    slots = [table[p // bs] * bs + p % bs for p in range(10)]
    check_writes(impl, [(2, 6, bs, 2, 8, slots, torch.float32, torch.long)])


@CASES("write_kv: random slots, several KV heads (GQA caches)")
def _(impl):
    check_writes(impl, random_writes(126, 30, [1, 2, 4, 16], [1, 2, 4], [torch.float32], [torch.long]))


@CASES("write_kv: int32 slot_mapping, bfloat16 and float16 caches")
def _(impl):
    check_writes(impl, random_writes(127, 20, [2, 4, 8], [1, 2], [torch.bfloat16, torch.float16, torch.float32],
                                     [torch.int32, torch.long]))


@CASES("write_kv: no tokens (empty slot_mapping) changes nothing")
def _(impl):
    # after a one-token write into the same shapes, so that a write_kv doing nothing cannot pass
    check_writes(impl, [(3, 4, 4, 2, 4, [9], torch.float32, torch.long), (3, 4, 4, 2, 4, [], torch.float32, torch.long)])


@CASES("write_kv: in place into one layer of a multi-layer cache")
def _(impl):
    g = torch.Generator().manual_seed(5)
    layers, nb, bs, heads, hd, n = 3, 5, 4, 2, 8, 6
    big_k, big_v = torch.randn(layers, nb, bs, heads, hd, generator=g), torch.randn(layers, nb, bs, heads, hd, generator=g)
    key, value = torch.randn(n, heads, hd, generator=g), torch.randn(n, heads, hd, generator=g)
    slots = torch.tensor([17, 2, 3, 12, 13, 19])
    exp_k, exp_v = big_k.clone(), big_v.clone()
    for i, s in enumerate(slots.tolist()):
        exp_k[1, s // bs, s % bs], exp_v[1, s // bs, s % bs] = key[i], value[i]
    text = (f"caches [layers={layers}, num_blocks={nb}, block_size={bs}, n_kv_heads={heads}, head_dim={hd}]; "
            f"write_kv(key_caches[1], value_caches[1], key, value, slot_mapping=torch.tensor({slots.tolist()}))")
    try:
        call_live(impl.write_kv, big_k[1], big_v[1], key, value, slots)
    except LearnerRaised as err:
        raise raised_failure(err, "write_kv", input=text) from None
    for name, got, exp in (("key_caches", big_k, exp_k), ("value_caches", big_v, exp_v)):
        if not torch.equal(got, exp):
            layer, b, r = (got != exp).flatten(3).any(-1).nonzero()[0].tolist()
            raise CaseFailure(f"{name}[{layer}] is wrong at block {b}, row {r}", input=text,
                              field=f"{name}[{layer}, {b}, {r}]", expected=exp[layer, b, r].tolist(),
                              got=got[layer, b, r].tolist(),
                              hint="write through the tensor you are given (a view of layer 1): no copies, no "
                                   ".contiguous() on the cache; other layers must not change")


@CASES("end to end: the reference ModelRunner with your write_kv matches running each request alone", timeout=120)
def _(impl):
    end_to_end(impl, "write_kv")
