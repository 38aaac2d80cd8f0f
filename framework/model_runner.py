"""The model runner's shell: one forward pass of the model over a mixed batch, reading and writing the paged KV
cache. vLLM's counterpart is `GPUModelRunner.execute_model` in vllm/v1/worker/gpu_model_runner.py.

It is built from three pieces, given as class attributes: `build_batch` (exercise 128), `write_kv` (126) and
`paged_attention` (127). solutions/model_runner.py plugs in the reference ones, practice/model_runner.py yours.
"""

from __future__ import annotations

from typing import Callable

import torch

from mini_llm import Transformer

from .paged_kv_cache import PagedKVCache

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, key_cache, value_cache)


class ModelRunnerBase:
    build_batch: Callable  # build_batch(items, block_size) -> batch
    write_kv: Callable  # write_kv(key_cache, value_cache, key, value, slot_mapping)
    paged_attention: Callable  # paged_attention(q, key_cache, value_cache, query_start_loc, seq_lens, block_tables)

    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        self.model, self.block_size = model, block_size
        self.kv_cache = PagedKVCache.for_model(model, num_blocks, block_size)
        self.num_forward_passes = 0

    def attention_for_step(self, cpu_batch, batch) -> Attention:
        """The attention every layer of this step runs: `paged_attention` called exactly as exercise 127
        defines it. A runner may return a faster kernel with the same results (solutions/model_runner.py)."""
        return lambda q, k_cache, v_cache: self.paged_attention(
            q, k_cache, v_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables)

    @torch.inference_mode()
    def execute_model(self, items: list) -> torch.Tensor:
        """fp32 logits `[L, vocab]` for the items that need them, in order; writes every new token's K and V.

        `items` are `(token_ids, num_computed, block_table, need_logits)` as in `build_batch`.
        """
        self.num_forward_passes += 1
        cpu_batch = self.build_batch(items, self.block_size)
        batch = cpu_batch.to(self.model.device)
        kc, vc = self.kv_cache.key_caches, self.kv_cache.value_caches
        attention = self.attention_for_step(cpu_batch, batch)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.write_kv(kc[layer], vc[layer], k, v, batch.slot_mapping)
            return attention(q, kc[layer], vc[layer])

        hidden = self.model.hidden_states(batch.input_ids, batch.positions, attend)
        # The output layer only where logits are needed: a prefill chunk that is not the last needs none.
        return self.model.compute_logits(hidden[batch.logits_indices]).float()
