"""Driver of exercise 126 (compute_slot_mapping, write_kv), run beside the learner's code. `write` gives `write_kv`
one layer (`key_caches[layer]`, a view) of a real multi-layer cache, as the model runner does, and returns the whole
cache: a write that rebinds (`key_cache.data = ...`) or goes through a flat view of the wrong storage offset shows as
a layer left unchanged or another layer changed."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from judge.crossing import learner_error
from judge.harness import holds_tensor, int_values


def raised(exc: BaseException) -> dict[str, Any]:
    return {"raised": "ValueError" if isinstance(exc, ValueError) else type(exc).__name__, "_error": learner_error(exc)}


def slots(impl: ModuleType, table: list[int], start: int, end: int, block_size: int) -> dict[str, Any]:
    """compute_slot_mapping(table, start, end, block_size): {"returned": ints}, {"raised": name} or {"problem": what
    it returned instead of integers}."""
    try:
        out = impl.compute_slot_mapping(list(table), start, end, block_size)
    except Exception as exc:  # noqa: BLE001
        return raised(exc)
    # a list of 0-dim tensors is no list of ints: indexing a tensor with it fails (chapter 3 does)
    got = None if isinstance(out, (list, tuple)) and holds_tensor(out) else int_values(out)
    if got is None:
        return {"problem": f"compute_slot_mapping returned {str(out)[:200]} ({type(out).__name__}); expected a list "
                           "of integers"}
    return {"returned": got}


def write_inputs(spec: list) -> dict[str, Any]:
    """The tensors of one write, from spec = [seed, layers, layer, num_blocks, block_size, n_kv_heads, head_dim,
    slots, dtype, index dtype] (dtypes by name, e.g. "float32", "int64"): the same in the grader and here."""
    seed, layers, _, nb, bs, heads, hd, slot_list, dtype, idx_dtype = spec
    g = torch.Generator().manual_seed(seed)
    dt, it = getattr(torch, dtype), getattr(torch, idx_dtype)
    shape = (layers, nb, bs, heads, hd)
    return {"key_caches": torch.randn(shape, generator=g).to(dt),
            "value_caches": torch.randn(shape, generator=g).to(dt),
            "key": torch.randn(len(slot_list), heads, hd, generator=g).to(dt),
            "value": torch.randn(len(slot_list), heads, hd, generator=g).to(dt),
            "slot_mapping": torch.tensor(slot_list, dtype=it)}


def write(impl: ModuleType, spec: list) -> dict[str, Any]:
    """write_kv(key_caches[layer], value_caches[layer], key, value, slot_mapping) on the inputs of `spec`; returns
    both whole caches after the call, what it returned, and which inputs it changed."""
    t = write_inputs(spec)
    layer = spec[2]
    inputs = {k: t[k].clone() for k in ("key", "value", "slot_mapping")}
    try:
        ret = impl.write_kv(t["key_caches"][layer], t["value_caches"][layer], t["key"], t["value"], t["slot_mapping"])
    except Exception as exc:  # noqa: BLE001
        return raised(exc)
    return {"key_caches": t["key_caches"], "value_caches": t["value_caches"],
            "returned": None if ret is None else f"{type(ret).__name__} {str(ret)[:100]}",
            "inputs changed": [k for k, v in inputs.items() if not torch.equal(t[k], v)]}


def write_layer(impl: ModuleType, key_caches: torch.Tensor, value_caches: torch.Tensor, layer: int, key: torch.Tensor,
                value: torch.Tensor, slot_mapping: torch.Tensor) -> dict[str, Any]:
    """write_kv as the model runner calls it in an engine step (the grader runs the runner: 126's end-to-end case),
    into layer `layer` of whole multi-layer caches: both caches after the call, or {"error": ...}."""
    try:
        impl.write_kv(key_caches[layer], value_caches[layer], key, value, slot_mapping)
    except Exception as exc:  # noqa: BLE001
        return {"error": learner_error(exc)}
    return {"key_caches": key_caches, "value_caches": value_caches}


def write_text(spec: list) -> str:
    _, layers, layer, nb, bs, heads, hd, slot_list, dtype, idx_dtype = spec
    return (f"key_caches, value_caches = random {dtype} [layers={layers}, num_blocks={nb}, block_size={bs}, "
            f"n_kv_heads={heads}, head_dim={hd}]; key, value = random [N={len(slot_list)}, {heads}, {hd}]; "
            f"write_kv(key_caches[{layer}], value_caches[{layer}], key, value, "
            f"slot_mapping=torch.tensor({slot_list}, dtype=torch.{idx_dtype}))")


def describe(fn: str, *args: Any) -> str:
    """The call `fn(*args)` of this driver as Python a learner can paste."""
    if fn == "slots":
        table, start, end, bs = args
        return f"compute_slot_mapping(block_table={table}, start={start}, end={end}, block_size={bs})"
    return write_text(args[0])
