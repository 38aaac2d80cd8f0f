"""The model runner on the reference pieces (exercises 126-128), with the batched attention kernel.

The shell, `framework.model_runner.ModelRunnerBase`, calls `paged_attention` once per layer as exercise 127
defines it; here it runs the same results with one SDPA per group of requests instead of one per request.
"""

from __future__ import annotations

from framework.model_runner import Attention, ModelRunnerBase
from mini_llm import Transformer

from .batch import build_batch
from .paged_attention import GatherWorkspace, build_padded_groups, paged_attention, paged_attention_batched
from .paged_kv_cache import write_kv


class ModelRunner(ModelRunnerBase):
    build_batch = staticmethod(build_batch)
    write_kv = staticmethod(write_kv)
    paged_attention = staticmethod(paged_attention)

    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        super().__init__(model, num_blocks, block_size)
        self.gather_workspace = GatherWorkspace()  # reused by every layer of every step

    def attention_for_step(self, cpu_batch, batch) -> Attention:
        # The metadata is built once per step from the CPU copy, so no layer waits on the device to read it.
        groups = build_padded_groups(cpu_batch.query_start_loc.numpy(), cpu_batch.seq_lens.numpy(),
                                     cpu_batch.block_tables, self.block_size, self.model.device)
        return lambda q, k_cache, v_cache: paged_attention_batched(
            q, k_cache, v_cache, groups, workspace=self.gather_workspace)
