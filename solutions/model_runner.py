"""The model runner: one forward pass of the model over a mixed batch, reading and writing the paged KV cache.

Its pieces are class attributes so that a learner's own `build_batch`, `write_kv` or `paged_attention` can be
plugged in (see practice/model_runner.py) without touching the rest. vLLM's counterpart is
`GPUModelRunner.execute_model` in vllm/v1/worker/gpu_model_runner.py.
"""

from __future__ import annotations

import torch

from mini_llm import Transformer

from .batch import build_batch
from .paged_attention import GatherWorkspace, build_padded_groups, paged_attention, paged_attention_batched
from .paged_kv_cache import PagedKVCache, write_kv


class ModelRunner:
    build_batch = staticmethod(build_batch)
    write_kv = staticmethod(write_kv)
    paged_attention = staticmethod(paged_attention)

    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        self.model, self.block_size = model, block_size
        self.kv_cache = PagedKVCache.for_model(model, num_blocks, block_size)
        self.num_forward_passes = 0
        self.gather_workspace = GatherWorkspace()  # reused by every layer of every step

    @torch.inference_mode()
    def execute_model(self, items: list) -> torch.Tensor:
        """fp32 logits `[L, vocab]` for the items that need them, in order; writes every new token's K and V.

        `items` are `(token_ids, num_computed, block_table, need_logits)` as in `build_batch`.
        """
        self.num_forward_passes += 1
        cpu_batch = self.build_batch(items, self.block_size)
        batch = cpu_batch.to(self.model.device)
        kc, vc = self.kv_cache.key_caches, self.kv_cache.value_caches
        if self.paged_attention is paged_attention:
            # The reference kernel's results with one SDPA per group of requests instead of one per request; its
            # metadata is built once per step from the CPU copy, so no layer waits on the device to read it.
            groups = build_padded_groups(cpu_batch.query_start_loc.numpy(), cpu_batch.seq_lens.numpy(),
                                         cpu_batch.block_tables, self.block_size, self.model.device)
            attention = lambda q, k_cache, v_cache: paged_attention_batched(  # noqa: E731
                q, k_cache, v_cache, groups, workspace=self.gather_workspace)
        else:  # a plugged-in kernel (practice/model_runner.py) is called exactly as the exercise defines it
            attention = lambda q, k_cache, v_cache: self.paged_attention(  # noqa: E731
                q, k_cache, v_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.write_kv(kc[layer], vc[layer], k, v, batch.slot_mapping)
            return attention(q, kc[layer], vc[layer])

        hidden = self.model.hidden_states(batch.input_ids, batch.positions, attend)
        # The output layer only where logits are needed: a prefill chunk that is not the last needs none.
        return self.model.compute_logits(hidden[batch.logits_indices]).float()
