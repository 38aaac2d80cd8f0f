"""The model runner's shell: one forward pass of the model over a mixed batch, reading and writing the paged KV
cache. vLLM's counterpart is `GPUModelRunner.execute_model` in vllm/v1/worker/gpu_model_runner.py.

It is built from three pieces, given as class attributes: `build_batch` (exercise 128), `write_kv` (126) and
`paged_attention` (127). practice/model_runner.py plugs in yours, and its twin in solutions/ the reference ones.
Whatever exercise 128 accepts as a batch (any object with the attributes; integer tensors of any integer dtype,
or lists for `query_start_loc` and `seq_lens`) is turned into one `RunnerBatch` here, in `as_runner_batch`, so
that every layer, every attention and every chapter sees the same types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from mini_llm import Transformer

from .paged_kv_cache import PagedKVCache

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, key_cache, value_cache)

BATCH_FIELDS = ("input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens", "block_tables",
                "logits_indices")


@dataclass
class RunnerBatch:
    """A batch as the runner uses it: int64 tensors, and the block tables as lists of ints."""

    input_ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [N]
    slot_mapping: torch.Tensor  # [N]
    query_start_loc: torch.Tensor  # [B+1]
    seq_lens: torch.Tensor  # [B]
    block_tables: list[list[int]]  # [B]
    logits_indices: torch.Tensor  # [L]

    def to(self, device: torch.device) -> "RunnerBatch":
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return RunnerBatch(move(self.input_ids), move(self.positions), move(self.slot_mapping),
                           move(self.query_start_loc), move(self.seq_lens), self.block_tables,
                           move(self.logits_indices))


TENSOR_FIELDS = ("input_ids", "positions", "slot_mapping", "logits_indices")  # the others may be lists too


def _as_long(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    elif name in TENSOR_FIELDS:
        raise TypeError(f"the batch's {name} is a {type(value).__name__}; it must be a 1-D integer torch tensor "
                        "(exercise 128)")
    elif isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    else:
        try:
            tensor = torch.as_tensor(list(value))
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"the batch's {name} is a {type(value).__name__}; it must be a 1-D tensor or a list of "
                            "integers (exercise 128)") from None
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool or tensor.dim() != 1:
        raise TypeError(f"the batch's {name} is a {tensor.dtype} tensor of shape {tuple(tensor.shape)}; it must be "
                        "1-D integers (exercise 128)")
    return tensor.to(torch.long).cpu()


def as_runner_batch(batch: Any) -> RunnerBatch:
    """The one place that reads a `build_batch` result, with exercise 128's contract: any object with the
    attributes; input_ids, positions, slot_mapping and logits_indices 1-D integer tensors (any integer dtype);
    query_start_loc and seq_lens integer tensors or sequences; block_tables B sequences of block ids. A clear
    TypeError says what is wrong."""
    if batch is None or isinstance(batch, dict):
        raise TypeError(f"build_batch returned {'None' if batch is None else 'a dict'}; it must return an object "
                        f"with the attributes {', '.join(BATCH_FIELDS)} (exercise 128)")
    missing = [name for name in BATCH_FIELDS if not hasattr(batch, name)]
    if missing:
        raise TypeError(f"the batch build_batch returned ({type(batch).__name__}) has no attribute(s) "
                        f"{', '.join(missing)} (exercise 128)")
    tables = batch.block_tables
    tables = tables.tolist() if isinstance(tables, (torch.Tensor, np.ndarray)) else tables
    return RunnerBatch(
        *(_as_long(getattr(batch, name), name) for name in BATCH_FIELDS[:5]),
        block_tables=[[int(b) for b in table] for table in tables],
        logits_indices=_as_long(batch.logits_indices, "logits_indices"),
    )


class ModelRunnerBase:
    build_batch: Callable  # build_batch(items, block_size) -> batch (anything as_runner_batch reads)
    write_kv: Callable  # write_kv(key_cache, value_cache, key, value, slot_mapping)
    paged_attention: Callable  # paged_attention(q, key_cache, value_cache, query_start_loc, seq_lens, block_tables)

    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        self.model, self.block_size = model, block_size
        self.kv_cache = PagedKVCache.for_model(model, num_blocks, block_size)
        self.num_forward_passes = 0

    def attention_for_step(self, cpu_batch: RunnerBatch, batch: RunnerBatch) -> Attention:
        """The attention every layer of this step runs: `paged_attention` called exactly as exercise 127
        defines it, with the host's copy of the batch's indices (a kernel that reads them as Python ints then reads
        no device memory in every layer). A runner may return a faster kernel with the same results (the reference
        runner batches requests)."""
        return lambda q, k_cache, v_cache: self.paged_attention(
            q, k_cache, v_cache, cpu_batch.query_start_loc, cpu_batch.seq_lens, cpu_batch.block_tables)

    @torch.inference_mode()
    def execute_model(self, items: list) -> torch.Tensor:
        """fp32 logits `[L, vocab]` for the items that need them, in order; writes every new token's K and V.

        `items` are `(token_ids, num_computed, block_table, need_logits)` as in `build_batch`.
        """
        self.num_forward_passes += 1
        cpu_batch = as_runner_batch(self.build_batch(items, self.block_size))
        batch = cpu_batch.to(self.model.device)
        kc, vc = self.kv_cache.key_caches, self.kv_cache.value_caches
        attention = self.attention_for_step(cpu_batch, batch)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.write_kv(kc[layer], vc[layer], k, v, batch.slot_mapping)
            return attention(q, kc[layer], vc[layer])

        hidden = self.model.hidden_states(batch.input_ids, batch.positions, attend)
        # The output layer only where logits are needed: a prefill chunk that is not the last needs none.
        return self.model.compute_logits(hidden[batch.logits_indices]).float()


def runner_class(base: type, **pieces: Callable) -> type:
    """`base` (ModelRunnerBase, or a runner with a batched kernel of its own) with these pieces (`build_batch`,
    `write_kv`, `paged_attention`) plugged in as its static methods: how the course and the judge assemble a runner
    from the exercises' code."""
    return type("ModelRunner", (base,), {name: staticmethod(fn) for name, fn in pieces.items()})
