"""Driver of exercise 128 (build_batch), run beside the learner's code.

It reads the seven fields the statement names, as the engine reads them: the values as lists of ints (block
tables as lists of lists) and whether each of input_ids, positions, slot_mapping and logits_indices is an integer
tensor, so that a NamedTuple, a dataclass or a SimpleNamespace, lists or tuples are all fine. Keys starting with
"_" are diagnostics (the raw fields, the learner's traceback), never compared.
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any

import torch

from judge.drivers import learner_error, plain_ints

TENSOR_FIELDS = ("input_ids", "positions", "slot_mapping", "logits_indices")
FIELDS = ("input_ids", "query_start_loc", "positions", "seq_lens", "slot_mapping", "logits_indices", "block_tables")


def _sendable(value: Any) -> Any:
    """`value` if it can cross to the grader as plain data (numbers, lists, tuples, tensors, arrays), else its
    description."""
    from judge import wire

    try:
        wire.encode(value)
        return value
    except (TypeError, ValueError):
        return f"{type(value).__name__} {str(value)[:200]}"


def _read(name: str, value: Any) -> Any:
    """The field's integers (block tables: a list of lists), or what it is instead, as text."""
    if name == "block_tables":
        rows = value.tolist() if hasattr(value, "tolist") and not isinstance(value, list) else value
        tables = [plain_ints(t) for t in rows] if isinstance(rows, (list, tuple)) else None
        got = tables if tables is not None and None not in tables else None
    else:
        got = plain_ints(value)
    if got is None:
        kind = f"{value.dtype} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        return f"not integers: a {kind} {str(value)[:100]}"
    return got


def build(impl: ModuleType, items: list, block_size: int) -> dict[str, Any]:
    """build_batch(items, block_size): {"batch": {field: values}, "integer tensors": [...], "inputs changed": bool}
    with the raw fields under "_raw", or {"raised": name} / {"problem": what is wrong with the result}."""
    given = [(list(t), s, list(tb), n) for t, s, tb, n in items]
    before = copy.deepcopy(given)
    try:
        out = impl.build_batch(given, block_size)
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, "_error": learner_error(exc)}
    if out is None:
        return {"problem": "build_batch returned None", "kind": "None"}
    if isinstance(out, dict):
        return {"problem": "build_batch returned a dict; it must return an object with attributes", "kind": "dict"}
    missing = [name for name in FIELDS if not hasattr(out, name)]
    if missing:
        return {"problem": f"the object build_batch returned ({type(out).__name__}) has no attribute {missing[0]!r}",
                "kind": "missing"}
    raw = {name: getattr(out, name) for name in FIELDS}
    return {"batch": {name: _read(name, v) for name, v in raw.items()},
            "integer tensors": [name for name in TENSOR_FIELDS if isinstance(raw[name], torch.Tensor)
                                and not raw[name].dtype.is_floating_point and raw[name].dtype != torch.bool],
            "inputs changed": given != before,
            "_raw": {name: _sendable(v) for name, v in raw.items()}, "_items after": given}


def describe(fn: str, items: list, block_size: int) -> str:
    """The call of this driver as Python a learner can paste."""
    return f"build_batch({[tuple(it) for it in items]!r}, block_size={block_size})"
