"""The price of naming full blocks for the prefix cache: the KV-cache manager now hashes a request's blocks when one
fills, against the manager before, which rehashed and re-offered every full block of the request on every
`allocate_slots` call (every decode step), a cost quadratic in the request's length.

No model runs: requests go through the manager the way the scheduler drives it (admit with prefix hits, then one
token per request per step), both managers in alternating rounds in one process, and the prefix caches they build
must be identical after every round.

    python benchmarks/prefix_hashing.py                   # 16 requests, 512-token prompts, 512 decode steps
    python benchmarks/prefix_hashing.py --output-len 2048
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from framework.request import Request  # noqa: E402
from solutions.kv_cache_manager import KVCacheManager, blocks_needed  # noqa: E402


class RehashingKVCacheManager(KVCacheManager):
    """The manager before: every call hashes every full block of the request again and offers each to the cache."""

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        if self.prefix_cache is None:
            return
        hashes = self.block_hashes(request.all_token_ids[:num_tokens], self.block_size)
        for block_hash, block_id in zip(hashes, request.block_table):
            self.prefix_cache.insert(block_hash, block_id)


def drive(manager_cls: type[KVCacheManager], num_requests: int, prompt_len: int, output_len: int,
          block_size: int, seed: int) -> tuple[float, dict[int, int]]:
    """Seconds spent in the manager for one workload (half the prompts share a prefix), and the final cache."""
    rng = random.Random(seed)
    shared = [rng.randrange(50_000) for _ in range(prompt_len // 2)]
    prompts = [(shared if i % 2 else []) + [rng.randrange(50_000) for _ in range(prompt_len - len(shared) * (i % 2))]
               for i in range(num_requests)]
    blocks = num_requests * blocks_needed(prompt_len + output_len, block_size)
    kv = manager_cls(blocks, block_size, enable_prefix_caching=True)
    requests = [Request(p) for p in prompts]
    start = time.perf_counter()
    for r in requests:
        computed = kv.get_computed_blocks(r)
        num_new = r.num_tokens - len(computed) * block_size
        assert kv.allocate_slots(r, num_new, computed), "the pool is sized to hold everything"
        r.num_computed_tokens += num_new
    for step in range(output_len):
        for r in requests:
            r.output_token_ids.append(rng.randrange(50_000))
            assert kv.allocate_slots(r, 1)
            r.num_computed_tokens += 1
    for r in requests:
        kv.free(r)
    return time.perf_counter() - start, dict(kv.prefix_cache.hash_to_block)


def run(num_requests: int = 16, prompt_len: int = 512, output_len: int = 512, block_size: int = 16,
        rounds: int = 5) -> dict:
    managers = {"before (rehash every call)": RehashingKVCacheManager,
                "after (hash when a block fills)": KVCacheManager}
    seconds: dict[str, list[float]] = {name: [] for name in managers}
    for r in range(rounds):
        caches = []
        for name in managers if r % 2 == 0 else list(managers)[::-1]:
            s, cache = drive(managers[name], num_requests, prompt_len, output_len, block_size, seed=r)
            seconds[name].append(s)
            caches.append(cache)
        assert caches[0] == caches[1], "the two managers built different prefix caches"
    before, after = (seconds[name] for name in managers)
    return {"num_requests": num_requests, "prompt_len": prompt_len, "output_len": output_len,
            "block_size": block_size, "rounds": rounds, "seconds": seconds,
            "median_s": {name: statistics.median(v) for name, v in seconds.items()},
            "speedup": statistics.median(b / a for b, a in zip(before, after))}


def format_report(r: dict) -> str:
    lines = [f"{r['num_requests']} requests, {r['prompt_len']}-token prompts (half share a prefix), "
             f"{r['output_len']} decode steps, blocks of {r['block_size']}, prefix caching on, {r['rounds']} rounds"]
    for name, s in r["median_s"].items():
        rounds = ", ".join(f"{x:.3f}" for x in r["seconds"][name])
        lines.append(f"{name:32s} median {s:.3f} s in the manager (rounds: {rounds})")
    lines.append(f"before/after: {r['speedup']:.1f}x (median of the per-round ratios); identical prefix caches")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if min(args.num_requests, args.prompt_len, args.output_len, args.block_size, args.rounds) < 1:
        ap.error("every option must be at least 1")
    print(format_report(run(args.num_requests, args.prompt_len, args.output_len, args.block_size, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
