"""Generation with a contiguous KV cache: one prefill over the prompt, then one decode step per token.

Each sequence reserves `max_len` slots up front; chapter 1 measures what that reservation wastes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import Transformer, repeat_kv


class ContiguousKVCache:
    """K and V for `batch` sequences, `[batch, max_len, n_kv_heads, head_dim]` per layer, filled left to right."""

    def __init__(self, model: Transformer, batch: int, max_len: int) -> None:
        cfg = model.cfg
        shape = (cfg.num_hidden_layers, batch, max_len, cfg.num_key_value_heads, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=model.dtype, device=model.device)
        self.v = torch.zeros(shape, dtype=model.dtype, device=model.device)
        self.length = 0  # tokens stored so far, the same for every sequence in the batch

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Store this step's k, v `[B, T, ...]` after the cached ones, then attend causally over all of them."""
        start, t = self.length, q.shape[1]
        self.k[layer, :, start : start + t] = k
        self.v[layer, :, start : start + t] = v
        keys, values = self.k[layer, :, : start + t], self.v[layer, :, : start + t]
        n_rep = q.shape[-2] // k.shape[-2]
        qh, kh, vh = q.transpose(1, 2), repeat_kv(keys.transpose(1, 2), n_rep), repeat_kv(values.transpose(1, 2), n_rep)
        # Query i of this step sits at position start + i and may see keys 0 .. start + i.
        mask = torch.ones(t, start + t, dtype=torch.bool, device=q.device).tril(diagonal=start)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
        return out.transpose(1, 2)

    def forward(self, model: Transformer, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits of the last token for the new tokens `[B, T]`, which follow the cached ones."""
        t = input_ids.shape[1]
        positions = torch.arange(self.length, self.length + t, device=input_ids.device).expand_as(input_ids)
        hidden = model.hidden_states(input_ids, positions, self.attend)
        self.length += t
        return model.compute_logits(hidden[:, -1])


def sample_next(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Greedy when temperature is 0, else a draw from softmax(logits / temperature)."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def generate(
    model: Transformer,
    prompt_ids: list[int] | list[list[int]],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    eos_token_id: int | None = None,
) -> list[int] | list[list[int]]:
    """New token ids for one prompt (a list of ids) or a batch of equal-length prompts.

    Stops after `max_new_tokens`, or once every sequence has produced `eos_token_id` (kept in the output; the
    tokens after it are cut).
    """
    single = isinstance(prompt_ids[0], int)
    batch = [prompt_ids] if single else prompt_ids
    if len({len(p) for p in batch}) != 1:
        raise ValueError("prompts in one call must have equal lengths; call generate once per prompt instead")
    if len(batch[0]) + max_new_tokens > model.cfg.max_position_embeddings:
        raise ValueError("prompt plus max_new_tokens exceeds "
                         f"max_position_embeddings={model.cfg.max_position_embeddings}")
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=model.device)
        generator.manual_seed(0 if seed is None else seed)
    cache = ContiguousKVCache(model, len(batch), len(batch[0]) + max_new_tokens)
    ids = torch.tensor(batch, device=model.device)
    out = torch.empty(len(batch), 0, dtype=torch.long, device=model.device)
    for _ in range(max_new_tokens):
        token = sample_next(cache.forward(model, ids), temperature, generator)
        out = torch.cat([out, token[:, None]], dim=1)
        if eos_token_id is not None and (out == eos_token_id).any(dim=1).all():
            break
        ids = token[:, None]
    result = [_cut_at_eos(row, eos_token_id) for row in out.tolist()]
    return result[0] if single else result


def _cut_at_eos(tokens: list[int], eos_token_id: int | None) -> list[int]:
    if eos_token_id is not None and eos_token_id in tokens:
        return tokens[: tokens.index(eos_token_id) + 1]
    return tokens
