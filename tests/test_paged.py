"""The paged KV cache (solutions/paged_kv_cache.py) and paged attention (solutions/paged_attention.py).

Every check compares against something computed another way: slots against the block/row definition, cache
writes against a clone with only the expected rows changed, paged attention against dense causal attention
of each request alone, written out in this file with an explicit softmax.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from framework.kv_cache_manager import blocks_needed
from solutions.paged_attention import gather_context, paged_attention
from solutions.paged_kv_cache import PagedKVCache, compute_slot_mapping, write_kv

TOL = 1e-5  # fp32: both sides sum the same few hundred products in different orders


# ---------------------------------------------------------------- slot mapping

def test_slot_mapping_hand_example():
    # Positions 2, 3 are rows 2, 3 of block 7; positions 4, 5 are rows 0, 1 of block 2.
    assert compute_slot_mapping([7, 2], 2, 6, 4) == [30, 31, 8, 9]


@pytest.mark.parametrize("block_size", [1, 2, 3, 16])
def test_slot_mapping_matches_block_and_row(block_size):
    rng = random.Random(block_size)
    for _ in range(50):
        n_blocks = rng.randint(1, 6)
        table = rng.sample(range(40), n_blocks)
        start = rng.randint(0, n_blocks * block_size)
        end = rng.randint(start, n_blocks * block_size)
        slots = compute_slot_mapping(table, start, end, block_size)
        assert len(slots) == end - start
        for p, s in zip(range(start, end), slots):
            assert s // block_size == table[p // block_size] and s % block_size == p % block_size


def test_slot_mapping_rejects_short_table():
    assert compute_slot_mapping([5, 1], 0, 8, 4)[-1] == 7  # exactly full is fine
    with pytest.raises(ValueError):
        compute_slot_mapping([5, 1], 6, 9, 4)


# ---------------------------------------------------------------- write_kv

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_size", [1, 4, 5])
def test_write_kv_writes_exactly_the_given_slots(dtype, block_size):
    g = torch.Generator().manual_seed(block_size)
    num_blocks, heads, hd, n = 9, 2, 8, 7
    kc = torch.randn(num_blocks, block_size, heads, hd, generator=g).to(dtype)
    vc = torch.randn(num_blocks, block_size, heads, hd, generator=g).to(dtype)
    kc0, vc0 = kc.clone(), vc.clone()
    slots = torch.randperm(num_blocks * block_size, generator=g)[:n]
    key = torch.randn(n, heads, hd, generator=g).to(dtype)
    value = torch.randn(n, heads, hd, generator=g).to(dtype)

    write_kv(kc, vc, key, value, slots)

    written = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    for i, s in enumerate(slots.tolist()):
        b, r = divmod(s, block_size)
        assert torch.equal(kc[b, r], key[i]) and torch.equal(vc[b, r], value[i])
        written[b, r] = True
    assert torch.equal(kc[~written], kc0[~written]) and torch.equal(vc[~written], vc0[~written])


def test_paged_kv_cache_shape_and_bytes():
    cache = PagedKVCache(num_layers=3, num_blocks=10, block_size=4, num_kv_heads=2, head_dim=8,
                         dtype=torch.bfloat16, device=torch.device("cpu"))
    assert cache.key_caches.shape == (3, 10, 4, 2, 8) == cache.value_caches.shape
    assert cache.bytes == 2 * 3 * 10 * 4 * 2 * 8 * 2


# ---------------------------------------------------------------- gather and paged attention

def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One request alone: q `[t, H, d]` are the last t of the `ctx` positions in k, v `[ctx, KVH, d]`."""
    t, ctx, n_rep = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for h in range(q.shape[1]):
        kh, vh = k[:, h // n_rep], v[:, h // n_rep]
        scores = (q[:, h] @ kh.T) * scale  # [t, ctx]
        q_pos = torch.arange(ctx - t, ctx)[:, None]
        scores = scores.masked_fill(torch.arange(ctx)[None, :] > q_pos, -math.inf)
        out[:, h] = scores.softmax(-1) @ vh
    return out


def place_in_pool(pool: torch.Tensor, table: list[int], rows: torch.Tensor) -> None:
    """Put a request's per-position rows into its blocks, one position at a time (no slot arithmetic shared)."""
    block_size = pool.shape[1]
    for p in range(rows.shape[0]):
        pool[table[p // block_size], p % block_size] = rows[p]


def random_paged_batch(seed: int, block_size: int, n_heads: int, n_kv_heads: int, head_dim: int = 16):
    """Requests with random context lengths and query counts, their blocks shuffled across a NaN-filled pool.

    NaN in every unused row means any read outside a request's own context poisons the output.
    """
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    ctx_lens = [rng.randint(1, 23) for _ in range(rng.randint(1, 5))]
    # Query counts: 1 (decode), all (prefill), anything between (a chunk, often starting mid-block), or 0.
    q_lens = [rng.choice([1, ctx, rng.randint(0, ctx)]) for ctx in ctx_lens]
    num_blocks_needed = [blocks_needed(ctx, block_size) for ctx in ctx_lens]
    num_blocks = sum(num_blocks_needed) + 3
    free = list(range(num_blocks))
    rng.shuffle(free)
    tables = []
    for nb in num_blocks_needed:
        tables.append(free[:nb])
        free = free[nb:]

    kc = torch.full((num_blocks, block_size, n_kv_heads, head_dim), math.nan)
    vc = torch.full_like(kc, math.nan)
    queries, refs = [], []
    scale = 1.0 / math.sqrt(head_dim)
    for ctx, t, table in zip(ctx_lens, q_lens, tables):
        k = torch.randn(ctx, n_kv_heads, head_dim, generator=g)
        v = torch.randn(ctx, n_kv_heads, head_dim, generator=g)
        q = torch.randn(t, n_heads, head_dim, generator=g)
        place_in_pool(kc, table, k)
        place_in_pool(vc, table, v)
        queries.append(q)
        refs.append(dense_causal_attention(q, k, v, scale) if t else q)
    qsl = [0]
    for t in q_lens:
        qsl.append(qsl[-1] + t)
    return torch.cat(queries), kc, vc, qsl, ctx_lens, tables, torch.cat(refs)


def test_gather_context_reads_the_block_table_in_order():
    kc = torch.arange(6 * 3, dtype=torch.float32).view(6, 3, 1, 1)  # slot s holds the value s
    rows = gather_context(kc, [4, 0, 5], 7)
    assert rows.flatten().tolist() == [12, 13, 14, 0, 1, 2, 15]


@pytest.mark.parametrize("block_size", [1, 2, 3, 16])
@pytest.mark.parametrize("n_heads,n_kv_heads", [(2, 2), (4, 2), (8, 1)])
@pytest.mark.parametrize("seed", range(4))
def test_paged_attention_equals_dense_causal_attention(block_size, n_heads, n_kv_heads, seed):
    q, kc, vc, qsl, seq_lens, tables, ref = random_paged_batch(seed, block_size, n_heads, n_kv_heads)
    out = paged_attention(q, kc, vc, qsl, seq_lens, tables)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert not out.isnan().any(), "read a row outside some request's context"
    assert (out - ref).abs().max().item() <= TOL


def test_paged_attention_chunk_starting_mid_block():
    # One request: 5 tokens cached, a chunk of 6 new queries at positions 5..10, block size 4
    # (the chunk starts at row 1 of the second block and ends in the third).
    g = torch.Generator().manual_seed(1)
    table, ctx, t = [6, 2, 9], 11, 6
    kc = torch.full((10, 4, 2, 8), math.nan)
    vc = kc.clone()
    k, v = torch.randn(ctx, 2, 8, generator=g), torch.randn(ctx, 2, 8, generator=g)
    place_in_pool(kc, table, k)
    place_in_pool(vc, table, v)
    q = torch.randn(t, 4, 8, generator=g)
    out = paged_attention(q, kc, vc, [0, t], [ctx], [table])
    assert (out - dense_causal_attention(q, k, v, 8 ** -0.5)).abs().max().item() <= TOL


def test_paged_attention_accepts_tensors_and_custom_scale():
    q, kc, vc, qsl, seq_lens, tables, _ = random_paged_batch(7, 4, 4, 2)
    scale = 0.3
    out = paged_attention(q, kc, vc, torch.tensor(qsl), torch.tensor(seq_lens), tables, scale=scale)
    ref = torch.cat([
        dense_causal_attention(q[qsl[i]:qsl[i + 1]], gather_context(kc, tables[i], seq_lens[i]),
                               gather_context(vc, tables[i], seq_lens[i]), scale)
        for i in range(len(seq_lens))
    ])
    assert (out - ref).abs().max().item() <= TOL


def test_write_then_attend_round_trip():
    """write_kv by compute_slot_mapping, then paged_attention, equals attention over the unpaged rows."""
    g = torch.Generator().manual_seed(3)
    block_size, ctx = 3, 10
    table = [8, 1, 5, 3]
    kc = torch.full((9, block_size, 2, 8), math.nan)
    vc = kc.clone()
    k, v = torch.randn(ctx, 2, 8, generator=g), torch.randn(ctx, 2, 8, generator=g)
    # Two steps: a prefill of 7 tokens, then a chunk of 3 starting mid-block.
    for start, end in [(0, 7), (7, 10)]:
        slots = torch.tensor(compute_slot_mapping(table, start, end, block_size))
        write_kv(kc, vc, k[start:end], v[start:end], slots)
    q = torch.randn(3, 4, 8, generator=g)
    out = paged_attention(q, kc, vc, [0, 3], [ctx], [table])
    assert (out - dense_causal_attention(q, k, v, 8 ** -0.5)).abs().max().item() <= TOL
