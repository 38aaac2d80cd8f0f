"""The flat batch layout (solutions/batch.py) and the model runner (solutions/model_runner.py).

build_batch is checked on a worked example and against a per-token reimplementation written here; the model
runner is checked against the plain model run on each request alone.
"""

from __future__ import annotations

import random

import pytest
import torch

from framework.kv_cache_manager import blocks_needed
from mini_llm import Qwen3Config, Transformer
from solutions.batch import BatchItem, build_batch
from solutions.model_runner import ModelRunner

LOGITS_TOL = 1e-4  # fp32


# ---------------------------------------------------------------- build_batch

def test_build_batch_worked_example():
    # block_size 4. A: full prefill of 5 tokens. B: decode at position 6. C: chunk of positions 2..4, no logits.
    items = [
        BatchItem([11, 12, 13, 14, 15], 0, [3, 7], True),
        BatchItem([21], 6, [1, 4], True),
        BatchItem([31, 32, 33], 2, [5, 0, 2], False),
    ]
    b = build_batch(items, block_size=4)
    assert b.input_ids.tolist() == [11, 12, 13, 14, 15, 21, 31, 32, 33]
    assert b.positions.tolist() == [0, 1, 2, 3, 4, 6, 2, 3, 4]
    # A: block 3 rows 0-3, block 7 row 0. B: block 4 row 2. C: block 5 rows 2-3, block 0 row 0.
    assert b.slot_mapping.tolist() == [12, 13, 14, 15, 28, 18, 22, 23, 0]
    assert b.query_start_loc.tolist() == [0, 5, 6, 9]
    assert b.seq_lens.tolist() == [5, 7, 5]
    assert b.block_tables == [[3, 7], [1, 4], [5, 0, 2]]
    assert b.logits_indices.tolist() == [4, 5]


def naive_batch(items, block_size):
    """The same layout, token by token."""
    input_ids, positions, slots, qsl, seq_lens, logits_indices = [], [], [], [0], [], []
    for token_ids, num_computed, table, need_logits in items:
        for j, tok in enumerate(token_ids):
            p = num_computed + j
            input_ids.append(tok)
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        qsl.append(len(input_ids))
        seq_lens.append(num_computed + len(token_ids))
        if need_logits:
            logits_indices.append(len(input_ids) - 1)
    return dict(input_ids=input_ids, positions=positions, slot_mapping=slots, query_start_loc=qsl,
                seq_lens=seq_lens, logits_indices=logits_indices)


def random_items(rng: random.Random, block_size: int) -> list[BatchItem]:
    items, free = [], list(range(1000))  # enough for 8 requests of up to 70 tokens at block size 1
    rng.shuffle(free)
    for _ in range(rng.randint(1, 8)):
        num_computed = rng.choice([0, rng.randint(0, 40)])
        num_new = rng.choice([1, rng.randint(1, 30)])
        nb = blocks_needed(num_computed + num_new, block_size) + rng.randint(0, 2)  # spare blocks are allowed
        table, free = free[:nb], free[nb:]
        ids = [rng.randrange(1000) for _ in range(num_new)]
        items.append(BatchItem(ids, num_computed, table, rng.random() < 0.6))
    return items


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_build_batch_matches_per_token_layout(block_size):
    rng = random.Random(block_size)
    for _ in range(30):
        items = random_items(rng, block_size)
        b, ref = build_batch(items, block_size), naive_batch(items, block_size)
        for name, want in ref.items():
            got = getattr(b, name)
            assert got.dtype == torch.long and got.tolist() == want, name
        assert b.block_tables == [list(it.block_table) for it in items]


def test_build_batch_rejects_short_block_table():
    with pytest.raises(ValueError):
        build_batch([BatchItem([1, 2, 3], 6, [0, 1], True)], block_size=4)  # 9 tokens need 3 blocks


def test_build_batch_accepts_plain_tuples():
    b = build_batch([([5, 6], 0, [2], True)], block_size=4)
    assert b.slot_mapping.tolist() == [8, 9] and b.logits_indices.tolist() == [1]


# ---------------------------------------------------------------- model runner

@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=211, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return Transformer(cfg).eval()


def alone_logits(model: Transformer, tokens: list[int]) -> torch.Tensor:
    """Logits of the last token of `tokens`, with the plain model and no cache at all."""
    with torch.inference_mode():
        return model(torch.tensor([tokens]))[0, -1].float()


class RowCounter:
    """Counts the rows that pass through the output layer."""

    def __init__(self, model: Transformer) -> None:
        self.rows = 0
        self.handle = model.lm_head.register_forward_hook(self.hook)

    def hook(self, module, inputs, output) -> None:
        self.rows += inputs[0].reshape(-1, inputs[0].shape[-1]).shape[0]


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_mixed_step_equals_each_request_alone(model, block_size):
    rng = random.Random(block_size)
    vocab = model.cfg.vocab_size
    prompts = {name: [rng.randrange(vocab) for _ in range(n)] for name, n in
               [("prefill", 9), ("dec1", 6), ("dec2", 11), ("chunked", 23)]}
    num_blocks = 64 // block_size * 4
    free = list(range(num_blocks))
    rng.shuffle(free)  # every request's blocks are scattered over the pool
    tables = {}
    for name, p in prompts.items():
        nb = blocks_needed(len(p) + 2, block_size)
        tables[name], free = free[:nb], free[nb:]
    runner = ModelRunner(model, num_blocks=num_blocks, block_size=block_size)

    # Step 1: prefill the two future decoders and the first chunk (7 tokens) of the chunked prompt.
    ch = prompts["chunked"]
    step1 = runner.execute_model([
        (prompts["dec1"], 0, tables["dec1"], True),
        (prompts["dec2"], 0, tables["dec2"], True),
        (ch[:7], 0, tables["chunked"], False),
    ])
    next1, next2 = step1.argmax(-1).tolist()

    # Step 2, the mixed one: a full prefill, two decodes and a middle chunk (positions 7..16) of the chunked one.
    counter = RowCounter(model)
    try:
        step2 = runner.execute_model([
            (prompts["prefill"], 0, tables["prefill"], True),
            ([next1], len(prompts["dec1"]), tables["dec1"], True),
            ([next2], len(prompts["dec2"]), tables["dec2"], True),
            (ch[7:17], 7, tables["chunked"], False),
        ])
    finally:
        counter.handle.remove()
    assert step2.shape == (3, vocab) and step2.dtype == torch.float32
    assert counter.rows == 3, "the output layer must see only the rows of logits_indices"
    refs = torch.stack([alone_logits(model, prompts["prefill"]),
                        alone_logits(model, prompts["dec1"] + [next1]),
                        alone_logits(model, prompts["dec2"] + [next2])])
    assert (step2 - refs).abs().max().item() <= LOGITS_TOL

    # Step 3: the last chunk; its logits show the middle chunk's K/V landed where they belong.
    step3 = runner.execute_model([(ch[17:], 17, tables["chunked"], True)])
    assert (step3[0] - alone_logits(model, ch)).abs().max().item() <= LOGITS_TOL
    assert runner.num_forward_passes == 3


def test_step_without_logits_runs_no_output_layer(model):
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    counter = RowCounter(model)
    try:
        out = runner.execute_model([([1, 2, 3, 4, 5], 0, [6, 2], False)])
    finally:
        counter.handle.remove()
    assert out.shape == (0, model.cfg.vocab_size) and counter.rows == 0


def test_runner_writes_only_its_blocks(model):
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    runner.execute_model([([1, 2, 3, 4, 5, 6], 0, [5, 2], True)])  # slots 20-23 and 8-9
    used = runner.kv_cache.key_caches.flatten(3).abs().sum(-1) != 0  # [layers, blocks, rows]
    expected = torch.zeros_like(used[0])
    expected[5, :] = True
    expected[2, :2] = True
    assert all(torch.equal(u, expected) for u in used)
