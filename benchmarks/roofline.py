"""This machine's roofline, and the engine's steps on it.

Measures, with torch, in a few seconds: the matmul peak (GFLOP/s of square `torch.mm`, best of repeats, at the
dtype and thread count stated) and the memory bandwidth (a STREAM-like triad `a = b + s * c` over arrays far
larger than the caches, best of repeats: 3 arrays of 256 MiB, 3 x 256 MiB counted per pass; on a machine whose
last-level cache is larger, raise `num_bytes`). Then runs the benchmark's default workload
(benchmarks/throughput.py's, the reference engine, fp32, the embedded model) with the step trace on
(framework/trace.py) and places its prefill-heavy steps (at least half of the step's new tokens are prompt tokens)
and its decode steps (none are) on the roofline: FLOPs and bytes from the trace's shapes, over the steps' wall
time (and over the process's CPU time: the steps' own speed on a shared machine), as a fraction of the bound that
applies, min(peak, intensity * bandwidth), and the share of that time spent in the runner's `execute_model`
(building the batch and the forward pass; the rest is scheduling, sampling and updates). Also the cost of tracing: the same workload with the tracer off and on, alternating, medians over
`--repeats` runs.

    python benchmarks/roofline.py                      # 64 requests, CPU, fp32, torch's threads
    python benchmarks/roofline.py --num-requests 16 --threads 1 --json roofline.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import make_workload, prompt_vocab  # noqa: E402
from framework.kv_cache_manager import blocks_needed  # noqa: E402
from framework.sampling import SamplingParams  # noqa: E402
from framework.trace import StepRecord, tracing  # noqa: E402
from mini_llm import EMBEDDED_MODEL, load_transformer  # noqa: E402
from solutions.engine import EngineConfig, LLMEngine  # noqa: E402


def best_seconds(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm up: allocation, thread pool
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak(n: int = 1024, dtype: torch.dtype = torch.float32, repeats: int = 10) -> float:
    """GFLOP/s of an n x n by n x n `torch.mm` (2 n^3 FLOPs), best of `repeats`."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype)
    return 2 * n ** 3 / best_seconds(lambda: torch.mm(a, b, out=out), repeats) / 1e9


def memory_bandwidth(num_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """GB/s of a triad `a = b + 3 c` on float32 arrays of `num_bytes` each (read b and c, write a), best of
    `repeats`."""
    n = num_bytes // 4
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    return 3 * num_bytes / best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), repeats) / 1e9


def default_workload_engine(model, num_requests: int) -> tuple[LLMEngine, list, list]:
    """The engine and requests of benchmarks/throughput.py's default workload (its engine's config)."""
    w = make_workload(num_requests, 0, prompt_vocab(EMBEDDED_MODEL, model.cfg.vocab_size))
    config = EngineConfig(num_blocks=16 * blocks_needed(w.max_len, 16), token_budget=256, max_num_seqs=16)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in w.output_lens]
    return LLMEngine(model, config), w.prompts, params


def place(steps: list[StepRecord], peak: float, bandwidth: float) -> dict:
    """Steps' totals on the roofline: achieved GFLOP/s and GB/s over their wall time, and the fraction of the
    bound that applies at their arithmetic intensity."""
    flops, moved = sum(s.flops for s in steps), sum(s.bytes for s in steps)
    seconds, cpu_seconds = sum(s.end - s.start for s in steps), sum(s.cpu_end - s.cpu_start for s in steps)
    forward = sum(s.phases["forward"][1] - s.phases["forward"][0] for s in steps)
    intensity = flops / moved
    bound = min(peak, intensity * bandwidth)
    return {"steps": len(steps), "seconds": seconds, "forward_share": forward / seconds, "gflop": flops / 1e9, "gbytes": moved / 1e9,
            "intensity_flop_per_byte": intensity, "gflops": flops / seconds / 1e9, "gbps": moved / seconds / 1e9,
            "bound": "compute" if bound == peak else "memory", "bound_gflops": bound,
            "fraction_of_bound": flops / seconds / 1e9 / bound, "cpu_seconds": cpu_seconds,
            # over the process's CPU time: the steps' own speed, less what a shared machine's other work took
            "fraction_of_bound_cpu": flops / cpu_seconds / 1e9 / bound}


def trace_cost(model, num_requests: int, repeats: int) -> dict:
    """Wall and CPU seconds of the workload with the tracer off and on, alternating; medians, and their ratios.
    CPU time (this process's) is the steadier of the two on a machine that other work shares."""
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for _ in range(repeats):
        for mode in ("off", "on"):
            engine, prompts, params = default_workload_engine(model, num_requests)
            wall, cpu = time.perf_counter(), time.process_time()
            if mode == "on":
                with tracing(engine):
                    engine.generate(prompts, params)
            else:
                engine.generate(prompts, params)
            runs[mode].append((time.perf_counter() - wall, time.process_time() - cpu))
    med = {f"{mode}_{clock}_seconds": statistics.median(r[i] for r in runs[mode])
           for mode in runs for i, clock in enumerate(("wall", "cpu"))}
    return {"repeats": repeats, **med, "on_over_off_wall": med["on_wall_seconds"] / med["off_wall_seconds"],
            "on_over_off_cpu": med["on_cpu_seconds"] / med["off_cpu_seconds"], "runs": runs}


def run(num_requests: int = 64, repeats: int = 3) -> dict:
    machine = {"threads": torch.get_num_threads(), "dtype": "float32",
               "matmul_peak_gflops": matmul_peak(), "triad_bandwidth_gbps": memory_bandwidth()}
    machine["ridge_flop_per_byte"] = machine["matmul_peak_gflops"] / machine["triad_bandwidth_gbps"]
    model = load_transformer(dtype=torch.float32)
    engine, prompts, params = default_workload_engine(model, num_requests)
    with tracing(engine) as tracer:
        engine.generate(prompts, params)
    steps = tracer.steps
    prefill = [s for s in steps if 2 * s.rows["prefill"] >= s.tokens_scheduled]
    decode = [s for s in steps if s.rows["prefill"] == 0]
    peak, bw = machine["matmul_peak_gflops"], machine["triad_bandwidth_gbps"]
    return {"machine": machine, "workload": {"num_requests": num_requests, "steps": len(steps)},
            "prefill_heavy": place(prefill, peak, bw), "decode": place(decode, peak, bw),
            "all_steps": place(steps, peak, bw), "trace_cost": trace_cost(model, num_requests, repeats)}


def format_report(r: dict) -> str:
    m, c = r["machine"], r["trace_cost"]
    lines = [f"machine: matmul peak {m['matmul_peak_gflops']:.1f} GFLOP/s ({m['dtype']}, {m['threads']} threads), "
             f"triad bandwidth {m['triad_bandwidth_gbps']:.1f} GB/s, ridge {m['ridge_flop_per_byte']:.1f} FLOP/byte",
             f"workload: {r['workload']['num_requests']} requests, {r['workload']['steps']} steps",
             f"{'steps':<14}{'n':>5}{'s':>8}{'GFLOP':>9}{'GB':>8}{'FLOP/B':>8}{'GFLOP/s':>9}{'GB/s':>7}"
             f"{'bound':>9}{'of bound':>10}{'forward':>9}{'CPU s':>7}{'of bound':>10}"]
    for name in ("prefill_heavy", "decode", "all_steps"):
        p = r[name]
        lines.append(f"{name:<14}{p['steps']:>5}{p['seconds']:>8.2f}{p['gflop']:>9.1f}{p['gbytes']:>8.2f}"
                     f"{p['intensity_flop_per_byte']:>8.1f}{p['gflops']:>9.1f}{p['gbps']:>7.1f}{p['bound']:>9}"
                     f"{p['fraction_of_bound']:>9.0%}{p['forward_share']:>9.0%}{p['cpu_seconds']:>7.2f}"
                     f"{p['fraction_of_bound_cpu']:>9.0%}")
    lines.append(f"tracing (medians of {c['repeats']}): wall off {c['off_wall_seconds']:.2f} s, on "
                 f"{c['on_wall_seconds']:.2f} s, on/off {c['on_over_off_wall']:.3f}; CPU off {c['off_cpu_seconds']:.2f} s, "
                 f"on {c['on_cpu_seconds']:.2f} s, on/off {c['on_over_off_cpu']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="runs of the workload per tracer setting")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--json", default=None, help="also write the report there")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = run(args.num_requests, args.repeats)
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
