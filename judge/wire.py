"""Plain data between the grader and the worker, as JSON lines; never pickle: None, bool, int, float, str, lists,
tuples, dicts, sets, torch tensors, numpy arrays. What the worker sends is the learner's to forge: whatever breaks
the limits below raises WireError, which the grader turns into the submission's verdict."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections import deque
from typing import Any

MAX_DEPTH = 12  # containers nested in a value the encoder sends and the decoder accepts
MAX_MESSAGE = 8 << 20  # bytes in one message the grader receives (a line of JSON)
TEXT_LIMIT = 2000  # characters kept of an exception's message, and of its traceback
NAME_LIMIT = 100  # characters of an exception's type name (a longer or odd one is received as "LearnerError")


class WireError(ValueError):
    """A message the grader cannot receive: too long, too deep, not JSON of the protocol, or a malformed value."""


class WorkerLost(BaseException):
    """The worker died, hung or flooded its output while the case waited for it (the runner gives the verdict)."""


def _float(x: float) -> Any:
    return x if math.isfinite(x) else {"__float__": repr(float(x))}  # float(): repr(np.float64) names numpy


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-able form of `value`; TypeError for anything that is not plain data."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to send")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -(2 ** 62) < value < 2 ** 62 else {"__int__": str(value)}
    if isinstance(value, float):
        return _float(value)
    rec = lambda v: encode(v, depth + 1)  # noqa: E731
    if isinstance(value, (list, deque)):
        return [rec(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"__tuple__": [rec(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) and not k.startswith("__") for k in value):
        return {k: rec(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {"__dict__": [[rec(k), rec(v)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [rec(v) for v in value]}
    return _encode_array(value)


def _encode_array(value: Any) -> dict:
    """A tensor's or a numpy array's wire form; TypeError for any other value."""
    mod = type(value).__module__.split(".")[0]
    if mod == "torch" and type(value).__name__ in ("Tensor", "Parameter"):
        import torch

        t = value.detach().to("cpu").contiguous()
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:  # what the other end takes, so that a learner's uint16 is theirs, not a broken pipe
            raise TypeError(f"cannot send a {dtype} tensor")
        flat = t.reshape(-1)
        if flat.numel() and flat.stride() != (1,):  # a one-element view keeps its stride through .contiguous()
            flat = flat.clone(memory_format=torch.contiguous_format)
        raw = b"" if not t.numel() else \
            (flat.to(torch.uint8) if t.dtype == torch.bool else flat.view(torch.uint8)).numpy().tobytes()
        return {"__tensor__": dtype, "shape": list(t.shape), "data": base64.b64encode(raw).decode()}
    if mod == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            a = np.ascontiguousarray(value)
            return {"__ndarray__": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            return {"__npscalar__": value.dtype.str, "value": _float(value.item()) if value.dtype.kind == "f"
                    else value.item()}
    raise TypeError(f"cannot send a {type(value).__name__}")


_DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"}


def decode(data: Any) -> Any:
    """The plain value that `encode` sent; WireError for anything else (a forged or malformed value)."""
    try:
        return _decode(data, 0)
    except WireError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError, RuntimeError,
            binascii.Error) as exc:
        raise WireError(f"a malformed value ({type(exc).__name__}: {str(exc)[:200]})") from None


def _decode(data: Any, depth: int) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} deep")
    rec = lambda v: _decode(v, depth + 1)  # noqa: E731
    if isinstance(data, list):
        return [rec(v) for v in data]
    if not isinstance(data, dict):
        raise ValueError(f"unexpected {type(data).__name__} on the wire")
    if "__tuple__" in data:
        return tuple(rec(v) for v in data["__tuple__"])
    if "__dict__" in data:
        return {_key(rec(k)): rec(v) for k, v in data["__dict__"]}
    if "__set__" in data:
        return {_key(rec(v)) for v in data["__set__"]}
    if "__float__" in data:
        return float(str(data["__float__"]))
    if "__int__" in data:
        return int(str(data["__int__"]))
    if "__tensor__" in data:
        return _tensor(data)
    if "__ndarray__" in data or "__npscalar__" in data:
        return _ndarray(data)
    if any(k.startswith("__") for k in data):  # encode sends such keys only in a "__dict__"
        raise ValueError("an unknown wire type")
    return {k: rec(v) for k, v in data.items()}


def _key(k: Any) -> Any:
    if isinstance(k, (list, dict, set)):
        raise ValueError("unhashable key on the wire")
    return k


def _tensor(data: dict) -> Any:
    import numpy as np
    import torch

    dtype = str(data["__tensor__"])
    if dtype not in _DTYPES:
        raise ValueError(f"tensor dtype {dtype!r} cannot be received")
    shape = [int(s) for s in data["shape"]]
    raw = base64.b64decode(str(data["data"]))
    target = getattr(torch, dtype)
    if not raw:
        if math.prod(shape):
            raise ValueError("tensor data does not match its shape")
        return torch.empty(shape, dtype=target)
    flat = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())
    flat = flat.to(torch.bool) if dtype == "bool" else flat.view(target)  # a forged bool byte is read as True
    if flat.numel() != math.prod(shape):
        raise ValueError("tensor data does not match its shape")
    return flat.reshape(shape)


def _ndarray(data: dict) -> Any:
    import numpy as np

    dt = np.dtype(str(data.get("__ndarray__") or data.get("__npscalar__")))
    if dt.kind not in "biuf":
        raise ValueError(f"array dtype {dt} cannot be received")
    if "__npscalar__" in data:  # a float's value may be {"__float__": "nan"}, as `encode` sends it
        value = data["value"]
        return dt.type(float(str(value["__float__"])) if isinstance(value, dict) else value)
    a = np.frombuffer(base64.b64decode(str(data["data"])), dtype=dt).copy()
    return a.reshape([int(s) for s in data["shape"]])


def dumps(msg: dict) -> bytes:
    return (json.dumps(msg, allow_nan=False, separators=(",", ":")) + "\n").encode()


def loads(line: bytes) -> dict:
    """One message; WireError if it is too long, too deep or not a JSON object (ValueError: not JSON at all)."""
    if len(line) > MAX_MESSAGE:
        raise WireError(f"a message of more than {MAX_MESSAGE} bytes")
    try:
        msg = json.loads(line)
    except RecursionError:
        raise WireError("a message nested too deeply") from None
    if not isinstance(msg, dict):
        raise WireError("a message that is not a JSON object")
    return msg


def cut(text: Any, limit: int = TEXT_LIMIT) -> str:
    """`text` as a string of at most `limit` characters, and a note of how many were cut."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} characters cut]"
