"""Driver of exercise 128 (build_batch), run beside the learner's code. It reads the seven fields the statement names
as the engine reads them (1-D integer tensors; query_start_loc and seq_lens as integers in a list or a tensor; block
tables as lists of lists), so a NamedTuple, a dataclass or a SimpleNamespace are all fine; a field that cannot be
read so is a "problem", said as the learner reads it."""

from __future__ import annotations

import copy
from array import array
from collections import deque
from types import ModuleType
from typing import Any

import numpy as np
import torch

from judge import wire
from judge.crossing import learner_error
from judge.harness import int_values, short, unchanged

TENSOR_FIELDS = ("input_ids", "positions", "slot_mapping", "logits_indices")
FIELDS = ("input_ids", "query_start_loc", "positions", "seq_lens", "slot_mapping", "logits_indices", "block_tables")


class Unreadable(Exception):
    """A field that is not the integers the statement asks for: what is wrong, and how to fix it."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.hint = problem, hint


def _lists(value: Any) -> Any:
    """`value` with every array.array in it, at any depth, a list: what the model runner reads of it
    (framework.model_runner, _as_long)."""
    if isinstance(value, array):
        return list(value)
    if not isinstance(value, (list, tuple)):
        return value
    items = [_lists(v) for v in value]
    return items if isinstance(value, list) else tuple(items)


def _sendable(value: Any) -> Any:
    """`value` if it can cross to the grader as plain data (numbers, lists, tensors, arrays), else its description."""
    value = _lists(value)
    try:
        wire.encode(value)
        return value
    except (TypeError, ValueError):
        return f"{type(value).__name__} {str(value)[:200]}"


def read_ints(value: Any, name: str, tensor_only: bool = False) -> list[int]:
    """The values of a 1-D integer tensor (or, unless tensor_only, a list / tuple / array of integers); Unreadable
    for anything else."""
    values = int_values(value)
    if values is not None and isinstance(value, torch.Tensor) and value.dtype not in (torch.long, torch.int32):
        raise Unreadable(f"{name} is a {value.dtype} tensor; it must be torch.long or torch.int32",
                         "a narrower integer overflows on real token ids, positions and slots: use dtype=torch.long")
    if values is not None and (not tensor_only or isinstance(value, torch.Tensor)):
        return values
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise Unreadable(f"{name} is a {value.dtype} tensor; it must hold integers (torch.long or torch.int32)",
                             "token ids, positions, slots and indices are integers: use dtype=torch.long")
        raise Unreadable(f"{name} has shape {tuple(value.shape)}; it must be 1-D",
                         "flatten it: one value per token (or per request)")
    if tensor_only:
        extra = " (torch.from_numpy(a) converts a numpy array)" if isinstance(value, np.ndarray) else ""
        raise Unreadable(f"{name} is a {type(value).__name__}; it must be a 1-D integer torch tensor{extra}",
                         f"e.g. torch.tensor(values, dtype=torch.long){extra}")
    if isinstance(value, np.ndarray):
        raise Unreadable(f"{name} is a numpy array of shape {value.shape} and dtype {value.dtype}; it must be 1-D "
                         "integers")
    if isinstance(value, (list, tuple, deque)):
        bad = next(x for x in value if int_values([x]) is None)
        raise Unreadable(f"{name} holds {type(bad).__name__} values ({short(bad)}); it must hold integers")
    raise Unreadable(f"{name} is {short(value)} ({type(value).__name__}); it must be a list or 1-D tensor of integers")


def read_tables(value: Any) -> list[list[int]]:
    """block_tables as B lists of block ids (a 2-D tensor or array is read row by row); Unreadable if it is not."""
    if isinstance(value, torch.Tensor) and value.dim() != 2:
        raise Unreadable(f"block_tables is a tensor of shape {tuple(value.shape)}; it must be B lists")
    if isinstance(value, (torch.Tensor, np.ndarray)):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise Unreadable(f"block_tables is a {type(value).__name__}; it must be a list of B lists of block ids")
    return [read_ints(t, f"block_tables[{i}]") for i, t in enumerate(value)]


def _unusable(out: Any) -> dict[str, str] | None:
    """What makes the returned object unusable as a batch, with a hint; None if it has the seven fields."""
    if out is None:
        return {"problem": "build_batch returned None", "hint": "did you forget the `return` statement?"}
    if isinstance(out, dict):
        return {"problem": "build_batch returned a dict; it must return an object with attributes",
                "hint": "e.g. return types.SimpleNamespace(**fields), or a dataclass"}
    missing = [name for name in FIELDS if not hasattr(out, name)]
    if missing:
        return {"problem": f"the object build_batch returned ({type(out).__name__}) has no attribute {missing[0]!r}",
                "hint": "it needs input_ids, positions, slot_mapping, query_start_loc, seq_lens, block_tables and "
                        "logits_indices"}
    return None


def build(impl: ModuleType, items: list, block_size: int) -> dict[str, Any]:
    """build_batch(items, block_size): {"batch": {field: values}, "inputs changed": bool}, or {"raised": name} /
    {"problem": what is wrong with the result, "hint": ...}; the raw fields under "_raw" when there are any."""
    given = [(list(t), s, list(tb), n) for t, s, tb, n in items]
    before = copy.deepcopy(given)
    try:
        out = impl.build_batch(given, block_size)
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "_error": learner_error(exc)}
    unusable = _unusable(out)
    if unusable:
        return unusable
    raw = {name: getattr(out, name) for name in FIELDS}
    diagnostics = {"_raw": {name: _sendable(v) for name, v in raw.items()}, "_items after": _sendable(given)}
    try:
        batch = {name: read_tables(v) if name == "block_tables" else read_ints(v, name, name in TENSOR_FIELDS)
                 for name, v in raw.items()}
    except Unreadable as exc:
        return {"problem": exc.problem, "hint": exc.hint, **diagnostics}
    return {"batch": batch, "inputs changed": not unchanged(given, before), **diagnostics}


def describe(fn: str, items: list, block_size: int) -> str:
    """The call of this driver as Python a learner can paste."""
    return f"build_batch({[tuple(it) for it in items]!r}, block_size={block_size})"
