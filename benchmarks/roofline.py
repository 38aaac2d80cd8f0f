"""This machine's roofline, and the engine's steps on it.

Measures, with torch, in a few seconds: the matmul peak (GFLOP/s of square `torch.mm`, 1024 square on a CPU and
8192 on a GPU, best of repeats, at the dtype and thread count stated) and the memory bandwidth (a STREAM-like triad
`a = b + s * c` over arrays far larger than the caches, best of repeats: 3 arrays of 256 MiB, 3 x 256 MiB counted
per pass; on a machine whose last-level cache is larger, raise `num_bytes`). On a CPU both are also measured per
CPU-second of this process: on a machine that other jobs share, the wall clock counts their time too, the CPU time
does not.

Then runs a workload with the step trace on (framework/trace.py) and places its prefill-heavy steps (at least half
of the step's new tokens are prompt tokens) and its decode steps (none are) on the roofline: FLOPs and bytes from
the trace's shapes, over the steps' wall time (and over their CPU time, against the per-CPU-second peaks), as a
fraction of the bound that applies, min(peak, intensity * bandwidth), and the share of that time spent in the
runner's `execute_model` (building the batch and the forward pass; the rest is scheduling, sampling and updates).
The workload is benchmarks/throughput.py's default one on the embedded model, or with `--shape qwen3-0.6b` a few
requests on random weights of Qwen3-0.6B's shape (prompts 16-128 tokens, outputs 4-8: a bounded number of steps,
each of which costs seconds on a CPU).

`--trace-cost N` also measures what tracing costs on the default workload: the engine untraced, with a tracer
attached then closed ("off": what `tracing()` leaves behind) and traced ("on"), N runs each in alternating order;
medians and their ratios.

    python benchmarks/roofline.py --threads 1                         # embedded model, 64 requests
    python benchmarks/roofline.py --threads 1 --shape qwen3-0.6b      # 8 requests, Qwen3-0.6B's shape
    python benchmarks/roofline.py --threads 1 --num-requests 16 --trace-cost 3 --json roofline.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import DTYPES, call_seconds, checkpoint_folder, make_workload, prompt_vocab  # noqa: E402
from framework.kv_cache_manager import blocks_needed  # noqa: E402
from framework.sampling import SamplingParams  # noqa: E402
from framework.trace import StepRecord, StepTracer, step_cost, tracing  # noqa: E402
from mini_llm import load_transformer, model_path, pick_device  # noqa: E402
from solutions.engine import EngineConfig, LLMEngine  # noqa: E402

SHAPE_WORKLOAD = {"num_requests": 8, "prompt_lens": (16, 128), "output_lens": (4, 8)}


def best_seconds(fn: Callable[[], Any], repeats: int, device: torch.device) -> tuple[float, float]:
    """The fastest of `repeats` calls of `fn`: (wall seconds, this process's CPU seconds), each its own minimum."""
    fn()  # warm up: allocation, thread pool
    walls, cpus = call_seconds(fn, repeats, device)
    return min(walls), min(cpus)


def matmul_peak(n: int = 1024, dtype: torch.dtype = torch.float32, repeats: int = 10,
                device: torch.device | str = "cpu") -> tuple[float, float]:
    """GFLOP/s of an n x n by n x n `torch.mm` (2 n^3 FLOPs), best of `repeats`: over wall time, and per CPU-second."""
    device = torch.device(device)
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    wall, cpu = best_seconds(lambda: torch.mm(a, b, out=out), repeats, device)
    return 2 * n ** 3 / wall / 1e9, 2 * n ** 3 / cpu / 1e9


def memory_bandwidth(num_bytes: int = 256 << 20, repeats: int = 5,
                     device: torch.device | str = "cpu") -> tuple[float, float]:
    """GB/s of a triad `a = b + 3 c` on float32 arrays of `num_bytes` each (read b and c, write a), best of
    `repeats`: over wall time, and per CPU-second."""
    device, n = torch.device(device), num_bytes // 4
    a, b, c = torch.empty(n, device=device), torch.rand(n, device=device), torch.rand(n, device=device)
    wall, cpu = best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), repeats, device)
    return 3 * num_bytes / wall / 1e9, 3 * num_bytes / cpu / 1e9


@dataclass
class Machine:
    """The roofline of a device at a dtype and thread count. The per-CPU-second figures are None off the CPU,
    where the host's CPU time says nothing about the device's work."""

    device: str
    dtype: str
    threads: int
    peak_gflops: float
    bandwidth_gbps: float
    peak_gflops_cpu: float | None = None
    bandwidth_gbps_cpu: float | None = None

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) above which the matmul peak, not the bandwidth, is the bound."""
        return self.peak_gflops / self.bandwidth_gbps

    def as_dict(self) -> dict:
        return asdict(self) | {"ridge_flop_per_byte": self.ridge}


def measure_machine(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    matmul_n: int | None = None, bandwidth_bytes: int = 256 << 20, repeats: int = 5) -> Machine:
    """The roofline of `device`. The matmul is 1024 square on a CPU and 8192 on a GPU, whose tensor cores a 1024
    product leaves mostly idle (an H100 gave 105 TFLOP/s in bf16 at 1024, about a ninth of its rated dense peak)."""
    device = torch.device(device)
    matmul_n = matmul_n or (1024 if device.type == "cpu" else 8192)
    peak = matmul_peak(matmul_n, dtype, 2 * repeats, device)
    bandwidth = memory_bandwidth(bandwidth_bytes, repeats, device)
    on_cpu = device.type == "cpu"
    return Machine(str(device), str(dtype).removeprefix("torch."), torch.get_num_threads(), peak[0], bandwidth[0],
                   peak[1] if on_cpu else None, bandwidth[1] if on_cpu else None)


def bound_seconds(flops: float, moved: float, peak_gflops: float, bandwidth_gbps: float) -> float:
    """The roofline's least time for `flops` and `moved` bytes: max(compute time at the peak, traffic at the
    bandwidth)."""
    return max(flops / (peak_gflops * 1e9), moved / (bandwidth_gbps * 1e9))


def place(steps: list[StepRecord], machine: Machine) -> dict:
    """Steps' totals on the roofline: achieved GFLOP/s and GB/s over their wall time, and the fraction of the
    bound that applies at their arithmetic intensity; the same over their CPU time against the per-CPU-second
    peaks, when measured."""
    flops, moved = sum(s.flops for s in steps), sum(s.bytes for s in steps)
    seconds, cpu_seconds = sum(s.end - s.start for s in steps), sum(s.cpu_end - s.cpu_start for s in steps)
    forward = sum(s.phases["forward"][1] - s.phases["forward"][0] for s in steps)
    intensity = flops / moved
    bound = "compute" if intensity >= machine.ridge else "memory"
    out = {"steps": len(steps), "seconds": seconds, "forward_share": forward / seconds, "gflop": flops / 1e9,
           "gbytes": moved / 1e9, "intensity_flop_per_byte": intensity, "gflops": flops / seconds / 1e9,
           "gbps": moved / seconds / 1e9, "bound": bound,
           "bound_gflops": min(machine.peak_gflops, intensity * machine.bandwidth_gbps),
           "fraction_of_bound": bound_seconds(flops, moved, machine.peak_gflops, machine.bandwidth_gbps) / seconds,
           "cpu_seconds": cpu_seconds, "fraction_of_bound_cpu": None}
    if machine.peak_gflops_cpu is not None:
        # the steps' own speed, less what a shared machine's other work took, against the peaks measured alike
        out["fraction_of_bound_cpu"] = bound_seconds(flops, moved, machine.peak_gflops_cpu,
                                                     machine.bandwidth_gbps_cpu) / cpu_seconds
    return out


def workload_cost(cfg: Any, prompts: list[list[int]], output_lens: list[int], forward_passes: int,
                  dtype_bytes: int) -> tuple[int, int]:
    """(FLOPs, bytes) of a workload's useful work, by `step_cost`'s rules: every prompt token and every output
    token fed back (all but the last) computed once, attention over its context; the weights read once per
    forward pass, each token's K and V written once and its context's read once. A system that pads (static
    batches) computes more than this, which shows as a lower fraction of the bound."""
    items = []
    for prompt, n in zip(prompts, output_lens):
        items.append((prompt, 0, [], True))
        items += [([0], len(prompt) + j, [], True) for j in range(n - 1)]
    flops, moved = step_cost(cfg, items, dtype_bytes)
    weights = step_cost(cfg, [], dtype_bytes)[1]
    return flops, moved + (forward_passes - 1) * weights


def system_fractions(summary: dict, flops: int, moved: int, machine: Machine) -> dict:
    """A benchmark system's achieved GFLOP/s and GB/s (over wall time and per CPU-second) as fractions of the
    machine's peak and bandwidth, and the roofline's least time over its time."""
    out = {}
    for clock, seconds, peak, bandwidth in (("wall", summary["seconds"], machine.peak_gflops, machine.bandwidth_gbps),
                                            ("cpu", summary["cpu_seconds"], machine.peak_gflops_cpu,
                                             machine.bandwidth_gbps_cpu)):
        if peak is None:
            continue
        gflops, gbps = flops / seconds / 1e9, moved / seconds / 1e9
        out[clock] = {"gflops": gflops, "gbps": gbps, "of_peak": gflops / peak, "of_bandwidth": gbps / bandwidth,
                      "of_bound": bound_seconds(flops, moved, peak, bandwidth) / seconds}
    return out


def workload_engine(model, num_requests: int, vocab: list[int], prompt_lens: tuple[int, int] = (16, 256),
                    output_lens: tuple[int, int] = (16, 128)) -> tuple[LLMEngine, list, list]:
    """The engine and requests of benchmarks/throughput.py's workload (its engine's config: 16 requests and 256
    tokens per step, blocks for 16 requests of the longest length)."""
    w = make_workload(num_requests, 0, vocab, prompt_lens, output_lens)
    config = EngineConfig(num_blocks=16 * blocks_needed(w.max_len, 16), token_budget=256, max_num_seqs=16)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in w.output_lens]
    return LLMEngine(model, config), w.prompts, params


def trace_cost(model, vocab: list[int], num_requests: int, repeats: int) -> dict:
    """Wall and CPU seconds of the workload untraced, with a tracer attached then closed ("off"), and traced
    ("on"), in alternating order; medians, and their ratios to untraced. CPU time (this process's) is the
    steadier clock on a machine that other work shares."""
    modes = ("untraced", "off", "on")
    runs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for r in range(repeats):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            engine, prompts, params = workload_engine(model, num_requests, vocab)
            if mode == "off":
                StepTracer(engine).close()
            wall, cpu = time.perf_counter(), time.process_time()
            if mode == "on":
                with tracing(engine):
                    engine.generate(prompts, params)
            else:
                engine.generate(prompts, params)
            runs[mode].append((time.perf_counter() - wall, time.process_time() - cpu))
    med = {mode: {clock: statistics.median(run[i] for run in runs[mode]) for i, clock in enumerate(("wall", "cpu"))}
           for mode in modes}
    ratios = {f"{mode}/untraced": {clock: med[mode][clock] / med["untraced"][clock] for clock in ("wall", "cpu")}
              for mode in ("off", "on")}
    return {"num_requests": num_requests, "repeats": repeats, "medians": med, "ratios": ratios, "runs": runs}


def split_steps(steps: list[StepRecord]) -> dict[str, list[StepRecord]]:
    """Prefill-heavy steps (at least half of their new tokens are prompt tokens), decode steps (none are), all."""
    return {"prefill_heavy": [s for s in steps if 2 * s.rows["prefill"] >= s.tokens_scheduled],
            "decode": [s for s in steps if s.rows["prefill"] == 0], "all_steps": steps}


def traced_run(model, vocab: list[int], sizes: dict) -> list[StepRecord]:
    """The steps of the workload of `sizes` through the reference engine, traced."""
    engine, prompts, params = workload_engine(model, sizes["num_requests"], vocab, sizes["prompt_lens"],
                                              sizes["output_lens"])
    with tracing(engine) as tracer:
        engine.generate(prompts, params)
    return tracer.steps


def run(num_requests: int | None = None, shape: str | None = None, trace_repeats: int = 0,
        device: str | None = None, dtype: str = "float32") -> dict:
    dev, torch_dtype = pick_device(device), DTYPES[dtype]
    machine = measure_machine(dev, torch_dtype)
    sizes = SHAPE_WORKLOAD if shape else {"num_requests": 64, "prompt_lens": (16, 256), "output_lens": (16, 128)}
    sizes = sizes | ({"num_requests": num_requests} if num_requests else {})
    with checkpoint_folder(None, shape) as folder:
        model = load_transformer(folder, dtype=torch_dtype, device=dev)
        vocab = prompt_vocab(folder, model.cfg.vocab_size)
    steps = traced_run(model, vocab, sizes)
    report = {"machine": machine.as_dict(),
              "workload": {"model": f"random {shape}" if shape else "embedded", **sizes, "steps": len(steps)}}
    report |= {name: place(chosen, machine) for name, chosen in split_steps(steps).items() if chosen}
    report["steps"] = [{"rows": s.rows, "flops": s.flops, "bytes": s.bytes, "seconds": s.end - s.start,
                        "cpu_seconds": s.cpu_end - s.cpu_start} for s in steps]
    if trace_repeats:  # on the default benchmark's workload: the embedded model
        if shape:
            model = load_transformer(dtype=torch_dtype, device=dev)
            vocab = prompt_vocab(model_path(), model.cfg.vocab_size)
        report["trace_cost"] = trace_cost(model, vocab, 64 if shape else sizes["num_requests"], trace_repeats)
    return report


def format_machine(m: dict) -> str:
    line = (f"machine: {m['device']}, {m['dtype']}, {m['threads']} threads: matmul peak {m['peak_gflops']:.1f} "
            f"GFLOP/s, triad bandwidth {m['bandwidth_gbps']:.1f} GB/s, ridge {m['ridge_flop_per_byte']:.1f} FLOP/byte")
    if m["peak_gflops_cpu"] is not None:
        line += (f"; per CPU-second: {m['peak_gflops_cpu']:.1f} GFLOP/s, {m['bandwidth_gbps_cpu']:.1f} GB/s, ridge "
                 f"{m['peak_gflops_cpu'] / m['bandwidth_gbps_cpu']:.1f}")
    return line


def format_report(r: dict) -> str:
    w = r["workload"]
    cpu = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    lines = [format_machine(r["machine"]),
             f"workload: {w['model']}, {w['num_requests']} requests, prompts {w['prompt_lens'][0]}-"
             f"{w['prompt_lens'][1]}, outputs {w['output_lens'][0]}-{w['output_lens'][1]}, {w['steps']} steps",
             f"{'steps':<14}{'n':>5}{'s':>8}{'GFLOP':>9}{'GB':>8}{'FLOP/B':>8}{'GFLOP/s':>9}{'GB/s':>7}"
             f"{'bound':>9}{'of bound':>10}{'forward':>9}{'CPU s':>8}{'of bound':>10}",
             f"{'':<14}{'':>5}{'wall':>8}{'':>9}{'':>8}{'':>8}{'wall':>9}{'wall':>7}{'':>9}{'wall':>10}{'wall':>9}"
             f"{'':>8}{'per CPU-s':>10}"]
    for name in ("prefill_heavy", "decode", "all_steps"):
        if name not in r:
            continue
        p = r[name]
        lines.append(f"{name:<14}{p['steps']:>5}{p['seconds']:>8.2f}{p['gflop']:>9.1f}{p['gbytes']:>8.2f}"
                     f"{p['intensity_flop_per_byte']:>8.1f}{p['gflops']:>9.1f}{p['gbps']:>7.1f}{p['bound']:>9}"
                     f"{p['fraction_of_bound']:>10.0%}{p['forward_share']:>9.0%}{p['cpu_seconds']:>8.2f}"
                     f"{cpu(p['fraction_of_bound_cpu']):>10}")
    if "trace_cost" in r:
        c = r["trace_cost"]
        med, ratio = c["medians"], c["ratios"]
        lines.append(f"tracing, {c['num_requests']} requests of the default workload, medians of {c['repeats']}: "
                     + "; ".join(f"{clock} untraced {med['untraced'][clock]:.2f} s, off {med['off'][clock]:.2f} s "
                                 f"({ratio['off/untraced'][clock]:.3f}x), on {med['on'][clock]:.2f} s "
                                 f"({ratio['on/untraced'][clock]:.3f}x)" for clock in ("wall", "cpu")))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.shapes import SHAPES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-requests", type=int, default=None, help="default 64; 8 with --shape")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="random weights of this model's shape")
    ap.add_argument("--trace-cost", type=int, default=0, metavar="N",
                    help="also time the default workload untraced, tracer closed and traced, N runs each")
    ap.add_argument("--device", default=None, help="default: $MINI_LLM_DEVICE, else CUDA if available, else CPU")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--json", default=None, help="also write the report there")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.num_requests is not None and args.num_requests < 1 or args.trace_cost < 0:
        ap.error("--num-requests must be at least 1 and --trace-cost at least 0")
    report = run(args.num_requests, args.shape, args.trace_cost, args.device, args.dtype)
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
