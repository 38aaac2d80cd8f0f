"""Batched paged attention's SDPA call, two ways: `enable_gqa=True` with a boolean mask (what
`solutions.paged_attention.paged_attention_batched` does) against K and V first repeated to every query head (what
the per-request kernel does). Same mask, same outputs; which kernel SDPA picks for each (from torch.profiler) and
the median time of the call. Qwen3-0.6B's heads: 16 query heads, 8 KV heads of 128.

    python benchmarks/attention_gqa.py                       # the default device (MINI_LLM_DEVICE, else CUDA if any)
    python benchmarks/attention_gqa.py --device cuda --dtype bfloat16
    python benchmarks/attention_gqa.py --small     # each group's requests, query rows and key slots divided by 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import DTYPES, call_seconds  # noqa: E402
from mini_llm import pick_device, repeat_kv, sync  # noqa: E402

# (requests G, query rows Q, key slots K): decode groups, then prefill groups
GROUPS = ((16, 1, 512), (64, 1, 1024), (64, 1, 4096), (4, 256, 512), (2, 1024, 2048))


def group_inputs(g: int, q: int, k: int, heads: tuple[int, int, int], dtype: torch.dtype, device: torch.device,
                 seed: int = 0) -> tuple[torch.Tensor, ...]:
    """query [G, H, Q, D], key and value [G, KV, K, D], and the mask [G, 1, Q, K] of requests whose contexts fill
    between half and all of the K slots, the Q rows being their last positions."""
    n_heads, n_kv, dim = heads
    gen = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(g, h, n, dim, generator=gen).to(device, dtype)
                         for h, n in ((n_heads, q), (n_kv, k), (n_kv, k)))
    ctx = torch.randint(max(k // 2, q), k + 1, (g,), generator=gen)
    mask = torch.arange(k)[None, None, :] <= (ctx - q)[:, None, None] + torch.arange(q)[None, :, None]
    return query, key, value, mask[:, None].to(device)


def with_gqa(query, key, value, mask) -> torch.Tensor:
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)


def with_repeat(query, key, value, mask) -> torch.Tensor:
    n_rep = query.shape[1] // key.shape[1]
    return F.scaled_dot_product_attention(query, repeat_kv(key, n_rep), repeat_kv(value, n_rep), attn_mask=mask)


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    for _ in range(3):
        fn()
    return statistics.median(call_seconds(fn, repeats, device)[0])


def sdpa_kernels(fn: Callable[[], object], device: torch.device) -> list[str]:
    """The `aten::_scaled_dot_product_*` operator SDPA dispatched to."""
    with torch.profiler.profile() as prof:
        fn()
        sync(device)
    return sorted({e.key for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="bfloat16 on a GPU, else float32")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per way (50 on a GPU, 5 on a CPU)")
    parser.add_argument("--small", action="store_true",
                        help="each group's requests, query rows and key slots divided by 4")
    args = parser.parse_args()
    device = pick_device(args.device)
    dtype = DTYPES[args.dtype or ("float32" if device.type == "cpu" else "bfloat16")]
    repeats = args.repeats or (5 if device.type == "cpu" else 50)
    print(f"{device}, {dtype}, 16 query heads, 8 KV heads of 128; median of {repeats} calls")
    for g, q, k in GROUPS:
        if args.small:
            g, q, k = max(g // 4, 1), max(q // 4, 1), k // 4
        inputs = group_inputs(g, q, k, (16, 8, 128), dtype, device)
        gqa, repeat = (lambda: with_gqa(*inputs)), (lambda: with_repeat(*inputs))
        diff = (gqa().float() - repeat().float()).abs().max().item()
        t_gqa, t_repeat = median_seconds(gqa, repeats, device), median_seconds(repeat, repeats, device)
        print(f"G={g:3} Q={q:5} K={k:5}: enable_gqa {t_gqa * 1e3:8.3f} ms, repeated K/V {t_repeat * 1e3:8.3f} ms "
              f"({t_repeat / t_gqa:.2f}x), max |diff| {diff:.1e}; kernels {', '.join(sdpa_kernels(gqa, device))} / "
              f"{', '.join(sdpa_kernels(repeat, device))}")


if __name__ == "__main__":
    main()
