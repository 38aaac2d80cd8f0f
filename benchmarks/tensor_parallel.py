"""Tensor parallelism side by side in one run: the engine with TP=N and one torch thread per rank against TP=1 with
one thread and with N threads, on the same workload, rounds alternating; tokens compared, time in all-reduce per
step measured on rank 0 (framework/executor.py's counters).

    python benchmarks/throughput.py --tensor-parallel 2 --shape qwen3-0.6b --num-requests 8

TP=N with one thread per rank uses as many cores as TP=1 with N threads: the first ratio says what sharding buys
over one core, the second how it compares with letting torch spread one process's matrix multiplies.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import torch

from benchmarks.measure import (SystemResult, Workload, checkpoint_folder, make_workload, mismatches, prompt_vocab,
                                run_engine, summarize)
from framework.executor import start_tensor_parallel
from framework.kv_cache_manager import blocks_needed
from mini_llm import load_transformer
from solutions.engine import LLM, LLMEngine
from solutions.model_runner import ModelRunner

BLOCK_SIZE = 16  # run_engine's


def run_tensor_parallel(world_size: int, num_requests: int, seed: int, max_batch: int, token_budget: int,
                        model: str | None, dtype: torch.dtype, prompt_lens: tuple[int, int],
                        output_lens: tuple[int, int], rounds: int, shape: str | None,
                        shape_overrides: dict | None) -> dict:
    """The report of the three systems (CPU): "tp1, 1 thread", f"tp1, {N} threads", f"tp{N}, 1 thread/rank"."""
    torch.set_num_threads(1)  # before the workers start: they keep the thread count they are spawned with
    with checkpoint_folder(model, shape, shape_overrides) as folder:
        dense = load_transformer(folder, dtype=dtype, device="cpu")
        workload = make_workload(num_requests, seed, prompt_vocab(folder, dense.cfg.vocab_size), prompt_lens,
                                 output_lens)
        num_blocks = max_batch * blocks_needed(workload.max_len, BLOCK_SIZE)  # what run_engine's config asks for
        sharded, executor = start_tensor_parallel(LLM.load_shard, ModelRunner, folder, dtype, "cpu", world_size,
                                                  num_blocks, BLOCK_SIZE)
    try:
        tp_engine = functools.partial(LLMEngine, runner=executor)
        reduce_seconds: list[float] = []

        def sharded_run(w: Workload) -> SystemResult:
            executor.comm.stats.reset()
            passes = executor.num_forward_passes
            result = run_engine(sharded, w, max_batch, token_budget, engine_cls=tp_engine)[0]
            passes = executor.num_forward_passes - passes  # the executor's count runs across engines
            reduce_seconds.append(executor.comm.stats.all_reduce_seconds / passes)
            return replace(result, forward_passes=passes)

        systems = {"tp1, 1 thread": (1, lambda w: run_engine(dense, w, max_batch, token_budget)[0]),
                   f"tp1, {world_size} threads": (world_size, lambda w: run_engine(dense, w, max_batch,
                                                                                   token_budget)[0]),
                   f"tp{world_size}, 1 thread/rank": (1, sharded_run)}
        warm = make_workload(2, seed + 1, list(range(100, 1000)), (8, 16), (2, 4))
        runs: dict[str, list[SystemResult]] = {name: [] for name in systems}
        for r in range(rounds + 1):  # round 0 warms up (allocator growth, lazy initialisation)
            for name in systems if r % 2 else list(systems)[::-1]:
                threads, run = systems[name]
                torch.set_num_threads(threads)
                result = run(warm if r == 0 else workload)
                if r:
                    runs[name].append(result)
        reduce_seconds = reduce_seconds[1:]  # without the warm-up's
    finally:
        executor.shutdown()
    names = list(systems)
    results = {n: sorted(rs, key=lambda x: x.seconds)[(len(rs) - 1) // 2] for n, rs in runs.items()}
    base = names[0]
    round_ratios = {f"{n}/{base}": [b.seconds / o.seconds for b, o in zip(runs[base], runs[n])] for n in names[1:]}
    return {"config": {"world_size": world_size, "num_requests": num_requests, "seed": seed, "max_batch": max_batch,
                       "token_budget": token_budget, "model": f"random {shape}" if shape else str(folder),
                       "dtype": str(dtype).replace("torch.", ""), "layers": dense.cfg.num_hidden_layers,
                       "prompt_lens": list(prompt_lens), "output_lens": list(output_lens), "rounds": rounds},
            "systems": {n: summarize(r) | {"round_seconds": [x.seconds for x in runs[n]]} for n, r in results.items()},
            "round_ratios": round_ratios, "ratios": {k: float(np.median(v)) for k, v in round_ratios.items()},
            "all_reduce_seconds_per_step": reduce_seconds,
            "mismatches": {n: [m for r in runs[n] for m in mismatches(results[base].outputs, r.outputs)]
                           for n in names[1:]}}


def format_tensor_parallel(report: dict) -> str:
    lines = [f"config: {report['config']}", "",
             f"{'system':<22}{'tokens':>8}{'wall s':>9}{'tok/s':>8}{'passes':>8}{'s/pass':>8}   rounds (wall s)"]
    for name, s in report["systems"].items():
        lines.append(f"{name:<22}{s['output_tokens']:>8}{s['seconds']:>9.2f}{s['tokens_per_s']:>8.1f}"
                     f"{s['forward_passes']:>8}{s['seconds'] / s['forward_passes']:>8.3f}   "
                     + ", ".join(f"{x:.2f}" for x in s["round_seconds"]))
    lines.append("")
    for k, v in report["ratios"].items():
        lines.append(f"throughput {k}: {v:.2f}x (median; rounds: "
                     + ", ".join(f"{x:.2f}x" for x in report["round_ratios"][k]) + ")")
    tp_name = list(report["systems"])[-1]
    per_step = report["all_reduce_seconds_per_step"]
    pass_s = report["systems"][tp_name]["seconds"] / report["systems"][tp_name]["forward_passes"]
    lines.append(f"all-reduce on rank 0, per step: {1000 * float(np.median(per_step)):.1f} ms (median of rounds: "
                 + ", ".join(f"{1000 * x:.1f}" for x in per_step) + f" ms), {float(np.median(per_step)) / pass_s:.0%} "
                 "of a step, waiting for the other rank included")
    for name, bad in report["mismatches"].items():
        lines.append(f"tokens {name} vs {list(report['systems'])[0]}: "
                     + ("identical for every request" if not bad else f"{len(bad)} request(s) differ: {bad[:5]}"))
    return "\n".join(lines)
