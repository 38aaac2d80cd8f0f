"""Driver of exercise 135 (shard the layer): the learner's `layer_forward` run on every rank, one thread each, with
an `all_reduce` that waits for every rank and returns the sum of their tensors (a real all-reduce's arithmetic,
without a network). It returns what each rank did: its output or exception, and every tensor it passed to
`all_reduce`; the grader compares them with the dense layer it computes itself (judge/hidden/tensor_parallel.py).
"""

from __future__ import annotations

import re
import threading
from types import ModuleType
from typing import Any

import torch

from judge.crossing import learner_error
from mini_llm import Qwen3Config

WAIT_SECONDS = 10.0  # how long a rank waits in all_reduce for the others


class RanksOutOfStep(RuntimeError):
    """A rank waited in all_reduce for ranks that never came (they called it fewer times, or failed)."""


class SummingGroup:
    """`world_size` threads that meet in `all_reduce`: each gets the sum of all their tensors, in rank order."""

    def __init__(self, world_size: int) -> None:
        self.barrier = threading.Barrier(world_size, timeout=WAIT_SECONDS)
        self.pending: list[torch.Tensor | None] = [None] * world_size
        self.sent: list[list[torch.Tensor]] = [[] for _ in range(world_size)]

    def all_reduce_of(self, rank: int):
        def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
            if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
                raise TypeError(f"all_reduce takes a tensor of at least one dimension, got {type(tensor).__name__}")
            # recorded as [rows, last dim], so that a [1, T, hidden] tensor reads as the [T, hidden] it holds
            self.sent[rank].append(tensor.detach().reshape(-1, tensor.shape[-1]).clone())
            self.pending[rank] = tensor.detach().clone()
            self._wait()
            parts = list(self.pending)  # the tensors as given
            self._wait()  # everyone has read the parts before anyone sends the next ones
            shapes = {tuple(p.shape) for p in parts}
            if len(shapes) > 1:
                raise ValueError(f"the ranks passed all_reduce tensors of different shapes {sorted(shapes)}")
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            return total

        return all_reduce

    def _wait(self) -> None:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise RanksOutOfStep("this rank waited in all_reduce for ranks that did not call it (they called "
                                 "all_reduce fewer times, or failed)") from None


def shard(impl: ModuleType, weights: dict[str, torch.Tensor], rank: int, world_size: int, num_heads: int,
          num_kv_heads: int) -> dict[str, Any]:
    """`shard_layer` on a copy of the weights: its shard (a value that is not a tensor by its type's name) and the
    inputs it wrote into, the type it returned if not a dict, or the exception it raised (any ValueError as one)."""
    given = {n: t.clone() for n, t in weights.items()}
    try:
        out = impl.shard_layer(given, rank, world_size, num_heads, num_kv_heads)
    except Exception as exc:  # noqa: BLE001 - the learner's, reported to the grader
        return {"raised": "ValueError" if isinstance(exc, ValueError) else type(exc).__name__,
                "_error": learner_error(exc)}
    if not isinstance(out, dict):
        return {"not a dict": type(out).__name__}
    return {"shard": {str(n): t if isinstance(t, torch.Tensor) else type(t).__name__ for n, t in out.items()},
            "changed": [n for n in weights if not torch.equal(given[n], weights[n])]}


def describe(fn: str, *args: Any) -> str:
    """The call of this driver as Python a learner can paste (the tensors by their shapes)."""
    if fn == "shard":
        _, rank, ws, heads, kv_heads = args
        return f"shard_layer(weights, rank={rank}, world_size={ws}, num_heads={heads}, num_kv_heads={kv_heads})"
    _, x, positions, _, ws = args
    return (f"layer_forward(shard[rank], x: [{', '.join(map(str, x.shape))}], positions={positions.tolist()}, cfg, "
            f"world_size={ws}, all_reduce) on every rank")


RANK_FACTS = {"outputs": "output of layer_forward", "returned": "type layer_forward returned", "errors": "exception",
              "out_of_step": "wait in all_reduce for ranks that never came",
              "dtypes": "dtype of layer_forward's output"}  # `forward`'s lists, one entry a rank


def where(path: str, fn: str, *args: Any) -> str | None:
    """A place in `forward`'s answer (`sent[0][1][2][3]`) as the learner's code: `the tensor rank 0 passed to
    all_reduce in its call 2, at [2][3]`."""
    found = re.fullmatch(r"(sent|outputs|errors|returned|out_of_step|dtypes)\[(\d+)\](?:\[(\d+)\])?(.*)", path)
    if fn != "forward" or found is None:
        return None
    what, rank, index, rest = found[1], found[2], found[3], found[4]
    if what != "sent":
        return f"rank {rank}'s {RANK_FACTS[what]}" + (f", at [{index}]{rest}" if index else "")
    if index is None:
        return f"the tensors rank {rank} passed to all_reduce, one per call"
    return f"the tensor rank {rank} passed to all_reduce in its call {int(index) + 1}" + (f", at {rest}" * bool(rest))


def forward(impl: ModuleType, shards: list[dict[str, torch.Tensor]], x: torch.Tensor, positions: torch.Tensor,
            config: dict, world_size: int) -> dict[str, Any]:
    """Every rank's `layer_forward(shards[rank], x, positions, cfg, world_size, all_reduce)`, in one thread each: per
    rank its output, what it returned, its exception, whether it waited for ranks that never came, its tensors
    passed to all_reduce, and its output's dtype."""
    cfg = Qwen3Config(**config)
    group = SummingGroup(world_size)
    outputs: list[Any] = [None] * world_size
    errors: list[dict | None] = [None] * world_size  # per rank: {"_error": its exception}, or None
    out_of_step = [False] * world_size

    def run(rank: int) -> None:
        try:
            with torch.no_grad():
                outputs[rank] = impl.layer_forward(shards[rank], x.clone(), positions.clone(), cfg, world_size,
                                                   group.all_reduce_of(rank))
        except RanksOutOfStep:
            out_of_step[rank] = True
        except Exception as exc:  # noqa: BLE001 - the learner's, reported to the grader
            errors[rank] = {"_error": learner_error(exc)}  # as every driver marks the learner's exception
            group.barrier.abort()  # the other ranks stop waiting for this one

    threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # what the ranks passed to all_reduce first: a replayed case names the first sum that differs (a residual
    # summed too, a head mapped wrong) before the output it spoils
    return {"sent": group.sent, "outputs": [o if isinstance(o, torch.Tensor) else None for o in outputs],
            "returned": [type(o).__name__ for o in outputs], "errors": errors, "out_of_step": out_of_step,
            "dtypes": [str(o.dtype).removeprefix("torch.") if isinstance(o, torch.Tensor) else None for o in outputs]}
