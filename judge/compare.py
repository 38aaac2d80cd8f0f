"""The one comparer of the judge: a learner's trace against the reference's, as the statements allow (judge/README.md):
containers of the same numbers are equal, a scalar of numpy or torch is its number, a bool equals only a bool,
integers must be equal, floats within tol + tol * |want| (NaN equals NaN; tol is TOL unless the statement gives
another, as a driver's TOLERANCE), and diagnostics are never compared."""

from __future__ import annotations

import array
import math
from collections import deque
from typing import Any

TOL = 1e-4


def diagnostic(key: Any) -> bool:
    """Whether a key of a driver's trace is a diagnostic (one leading "_"; "__" marks wire types)."""
    return isinstance(key, str) and key.startswith("_") and not key.startswith("__")


def plain(value: Any) -> Any:
    """`value` as the engine reads it: sequences and arrays as lists, scalars as Python numbers."""
    if type(value).__module__.split(".")[0] in ("torch", "numpy") and hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple, deque, array.array)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def difference(want: Any, got: Any, where: str = "", tol: float = TOL) -> tuple[str, Any, Any] | None:
    """(where, expected, got) of the first difference between the reference's value and the learner's, or None."""
    return _first(plain(want), plain(got), where, tol)


def _first(w: Any, g: Any, where: str, tol: float) -> tuple[str, Any, Any] | None:
    if isinstance(w, bool) or isinstance(g, bool):
        return None if type(w) is type(g) and w == g else (where, w, g)
    if isinstance(w, (int, float)) and isinstance(g, (int, float)):
        same = w == g if isinstance(w, int) and isinstance(g, int) else \
            abs(g - w) <= tol + tol * abs(w) or (math.isnan(w) and math.isnan(g))
        return None if same else (where, w, g)
    if isinstance(w, list) and isinstance(g, list):  # a differing item first, else the lengths
        inner = next((d for d in (_first(a, b, f"{where}[{i}]", tol) for i, (a, b) in enumerate(zip(w, g))) if d), None)
        return inner or (None if len(w) == len(g) else (where, w, g))
    if isinstance(w, dict) and isinstance(g, dict):
        keys = [k for k in [*w, *(k for k in g if k not in w)] if not diagnostic(k)]
        for k in keys:
            if k not in w or k not in g:
                return f"{where}[{k!r}]", w.get(k), g.get(k)
            d = _first(w[k], g[k], f"{where}[{k!r}]", tol)
            if d:
                return d
        return None
    return None if type(w) is type(g) and w == g else (where, w, g)
