"""Driver of exercise 127 (paged_attention), run beside the learner's code. A case is a `Spec` (plain data: seeds,
sizes, the requests' lengths and block tables); `run` builds its tensors here with `make_inputs`, as the grader does
to compute the expected output, and returns what the learner's `paged_attention` did with them, never a verdict.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import torch

from judge.crossing import learner_error
from judge.harness import short, unchanged


@dataclass(frozen=True)
class Req:
    t: int  # new tokens (queries) this step
    seq_len: int  # context length, counting the new tokens
    table: tuple[int, ...]
    qseed: int  # seeds this request's queries, so that dropping another request keeps them


@dataclass(frozen=True)
class Spec:
    seed: int  # seeds the caches
    block_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    num_blocks: int
    reqs: tuple[Req, ...]
    scale: float | None = None
    index_kind: str = "list"  # how query_start_loc / seq_lens are passed: list | int32 | int64
    dtype: torch.dtype = torch.float32
    example: bool = False  # the statement's worked example: queries 1, keys 0, the values below; else random

    def plain(self) -> dict:
        return {**asdict(self), "dtype": str(self.dtype).removeprefix("torch.")}

    @staticmethod
    def from_plain(d: dict) -> "Spec":
        reqs = tuple(Req(**{**r, "table": tuple(r["table"])}) for r in d["reqs"])
        return Spec(**{**d, "reqs": reqs, "dtype": getattr(torch, d["dtype"])})


def query_start_loc(s: Spec) -> list[int]:
    return list(itertools.accumulate((r.t for r in s.reqs), initial=0))


TOLERANCE = 1e-5  # the statement's, float32: |got - expected| <= TOLERANCE + TOLERANCE * |expected| (public cases too)
EXAMPLE_VALUES = [[10.0, 20.0], [3.0, 4.0], [30.0, 999.0], [1.0, 2.0]]  # the worked example's value cache, by block


def make_inputs(s: Spec) -> dict[str, Any]:
    """The arguments of paged_attention for `s`, by name: caches and queries from its seeds (or the example's)."""
    g = torch.Generator().manual_seed(s.seed)
    shape = (s.num_blocks, s.block_size, s.n_kv_heads, s.head_dim)
    kc, vc = torch.randn(shape, generator=g).to(s.dtype), torch.randn(shape, generator=g).to(s.dtype)
    qs = [torch.randn(r.t, s.n_heads, s.head_dim, generator=torch.Generator().manual_seed(r.qseed)) for r in s.reqs]
    if s.example:
        kc, vc = torch.zeros(shape, dtype=s.dtype), torch.tensor(EXAMPLE_VALUES, dtype=s.dtype).reshape(shape)
        qs = [torch.ones(r.t, s.n_heads, s.head_dim) for r in s.reqs]
    query = torch.cat(qs).to(s.dtype) if qs else torch.zeros(0, s.n_heads, s.head_dim, dtype=s.dtype)
    qsl: Any = query_start_loc(s)
    lens: Any = [r.seq_len for r in s.reqs]
    if s.index_kind != "list":
        dt = torch.int32 if s.index_kind == "int32" else torch.long
        qsl, lens = torch.tensor(qsl, dtype=dt), torch.tensor(lens, dtype=dt)
    return {"query": query, "key_cache": kc, "value_cache": vc, "query_start_loc": qsl, "seq_lens": lens,
            "block_tables": [list(r.table) for r in s.reqs], "scale": s.scale}


def show(s: Spec) -> str:
    """The inputs of `s` as a learner reads them (the random tensors by their shapes)."""
    if s.example:
        return (f"the statement's worked example's caches: query ones [{query_start_loc(s)[-1]}, 1, 1], key_cache "
                f"zeros, value_cache by block "
                f"{EXAMPLE_VALUES}, query_start_loc={query_start_loc(s)}, seq_lens={[r.seq_len for r in s.reqs]}, "
                f"block_tables={[list(r.table) for r in s.reqs]}")
    idx = "" if s.index_kind == "list" else f" (as {s.index_kind} tensors)"
    return (f"query: random {str(s.dtype).replace('torch.', '')} [N={query_start_loc(s)[-1]}, n_heads={s.n_heads}, "
            f"head_dim={s.head_dim}]; key_cache, value_cache: random [num_blocks={s.num_blocks}, "
            f"block_size={s.block_size}, n_kv_heads={s.n_kv_heads}, head_dim={s.head_dim}]\n"
            f"query_start_loc={query_start_loc(s)}, seq_lens={[r.seq_len for r in s.reqs]}{idx}, "
            f"block_tables={[list(r.table) for r in s.reqs]}, scale={s.scale}")


def run(impl: ModuleType, spec: dict) -> dict[str, Any]:
    """paged_attention on the inputs of `spec`: {"dtype": name, "output": tensor} or {"returned": type name, "repr":
    ...}, with "inputs changed" (the tensors it wrote into, the lists it changed), or {"error": the learner's
    exception}."""
    inp = make_inputs(Spec.from_plain(spec))
    saved = make_inputs(Spec.from_plain(spec))
    try:
        out = impl.paged_attention(inp["query"], inp["key_cache"], inp["value_cache"], inp["query_start_loc"],
                                   inp["seq_lens"], inp["block_tables"], inp["scale"])
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the grader classifies it
        return {"error": learner_error(exc)}
    changed = [k for k, v in saved.items()
               if not (torch.equal(inp[k], v) if isinstance(v, torch.Tensor) else unchanged(inp[k], v))]
    if isinstance(out, torch.Tensor):  # a subclass too; the dtype first, so that a public case names it first
        return {"dtype": str(out.dtype).removeprefix("torch."), "output": out.detach().as_subclass(torch.Tensor),
                "inputs changed": changed}
    return {"returned": type(out).__name__, "repr": short(out), "inputs changed": changed}


def attend_layer(impl: ModuleType, query: torch.Tensor, key_caches: torch.Tensor, value_caches: torch.Tensor,
                 layer: int, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                 block_tables: list[list[int]]) -> dict[str, Any]:
    """paged_attention as the model runner calls it in an engine step (the grader runs the runner: 127's end-to-end
    case), on layer `layer` of whole multi-layer caches: {"output": tensor} or {"error": ...}."""
    try:
        out = impl.paged_attention(query, key_caches[layer], value_caches[layer], query_start_loc, seq_lens,
                                   block_tables)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the grader classifies it
        return {"error": learner_error(exc)}
    if not isinstance(out, torch.Tensor):
        return {"error": learner_error(TypeError(f"paged_attention returned {type(out).__name__} {short(out)}; it "
                                                 "must return the output tensor"))}
    return {"output": out.detach().as_subclass(torch.Tensor)}


def where(path: str, fn: str, *args: Any) -> str | None:
    """A place in `run`'s answer in the statement's words."""
    return "the output's dtype (the output must have the query's dtype)" if path == "dtype" else None


def describe(fn: str, *args: Any) -> str | None:
    """The call of this driver as a learner reads it: the inputs of the case (None: the replay shows the call)."""
    if fn != "run":
        return None
    return "paged_attention(query, key_cache, value_cache, query_start_loc, seq_lens, block_tables, scale) on " + \
        show(Spec.from_plain(args[0]))
