"""Driver of exercise 132 (hash_block, block_hashes, PrefixCache), run beside the learner's code. Any deterministic
hash is right, so it reports which calls gave equal hashes, whether each is an int, and whether block_hashes agrees
with the learner's own hash_block chained; hash values leave it only for the hidden cases to compare among
themselves or hand back to the learner's own cache (`hashes`, and the diagnostics of `hash_calls`)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from judge.crossing import learner_error
from judge.harness import holds_tensor, int_values

CHAINED = "each hash is hash_block(the hash before it, its block)"


def _failed(exc: BaseException, name: str, index: int) -> dict[str, Any]:
    return {"raised": type(exc).__name__, "in": name, "call": index, "_error": learner_error(exc)}


def hash_calls(impl: ModuleType, calls: list) -> dict[str, Any]:
    """Call hash_block(parent, tokens) for each [parent, tokens]; a parent ["call", j] is the hash call j gave.
    Returns {"same_as": [the first call whose hash equals this one's], "_values": the hashes} or the first problem."""
    values: list[Any] = []
    for i, (parent, tokens) in enumerate(calls):
        p = values[parent[1]] if isinstance(parent, list) else parent
        try:
            h = impl.hash_block(p, list(tokens))
        except Exception as exc:  # noqa: BLE001
            return _failed(exc, "hash_block", i)
        if not isinstance(h, int) or isinstance(h, bool):
            return {"not an int": f"{type(h).__name__} ({str(h)[:100]})", "call": i}
        values.append(h)
    return {"same_as": [values.index(v) for v in values], "_values": [repr(v) for v in values]}


def hashes(impl: ModuleType, tokens: list[int], block_size: int) -> dict[str, Any]:
    """block_hashes(tokens, block_size): {"hashes": [...]} (ints) or the problem."""
    try:
        got = impl.block_hashes(list(tokens), block_size)
    except Exception as exc:  # noqa: BLE001
        return _failed(exc, "block_hashes", 0)
    if not isinstance(got, (list, tuple)) or any(not isinstance(h, int) or isinstance(h, bool) for h in got):
        return {"not a list": f"{type(got).__name__} ({str(got)[:100]})"}
    return {"hashes": [int(h) for h in got]}


def chain(impl: ModuleType, tokens: list[int], block_size: int, none_hash: int) -> dict[str, Any]:
    """block_hashes(tokens, block_size) against hash_block chained from `none_hash` over the full blocks: how many
    hashes it returned and, for each, whether it is the chain's."""
    got = hashes(impl, tokens, block_size)
    if "hashes" not in got:
        return got
    want, parent = [], none_hash
    try:
        for i in range(len(tokens) // block_size):
            parent = impl.hash_block(parent, list(tokens[i * block_size: (i + 1) * block_size]))
            want.append(parent)
    except Exception as exc:  # noqa: BLE001
        return _failed(exc, "hash_block", 0)
    return {"count": len(got["hashes"]), CHAINED: [g == w for g, w in zip(got["hashes"], want)]}


def cache_ops(impl: ModuleType, ops: list) -> dict[str, Any]:
    """c = PrefixCache(), then each op ["insert", h, b] / ["evict", b] / ["lookup", hashes]: the lookups' block ids."""
    try:
        cache = impl.PrefixCache()
    except Exception as exc:  # noqa: BLE001
        return _failed(exc, "PrefixCache", -1)
    lookups: list[list[int]] = []
    for i, op in enumerate(ops):
        try:
            got = getattr(cache, op[0])(*op[1:])
        except Exception as exc:  # noqa: BLE001
            return {**_failed(exc, f"PrefixCache.{op[0]}", i), "lookups": lookups}
        if op[0] == "lookup":
            ids = None if holds_tensor(got) else int_values(got)
            if ids is None:
                return {"not a list of block ids": f"{str(got)[:200]}", "call": i, "lookups": lookups}
            lookups.append(ids)
    return {"lookups": lookups}


def describe(fn: str, *args: Any) -> str:
    """The call `fn(*args)` of this driver as Python a learner can paste."""
    if fn == "hash_calls":
        parent = lambda p: f"h{p[1]}" if isinstance(p, list) else repr(p)  # noqa: E731
        return "; ".join(f"h{i} = hash_block({parent(p)}, {list(t)})" for i, (p, t) in enumerate(args[0]))
    if fn == "hashes":
        return f"block_hashes({list(args[0])}, {args[1]})"
    if fn == "chain":
        tokens, bs, none_hash = args
        return f"block_hashes({list(tokens)}, {bs}), against hash_block chained from {none_hash} over its full blocks"
    return "; ".join(["c = PrefixCache()"] + [f"c.{op[0]}({', '.join(map(repr, op[1:]))})" for op in args[0]])
