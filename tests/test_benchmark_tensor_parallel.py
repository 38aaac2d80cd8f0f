"""benchmarks/throughput.py --tensor-parallel 2 on a tiny workload: the three systems run side by side with the same
tokens, and the report has the ratios and the all-reduce time per step."""

from __future__ import annotations

import torch

from benchmarks.tensor_parallel import format_tensor_parallel, run_tensor_parallel


def test_tensor_parallel_benchmark_runs_three_systems_with_the_same_tokens():
    threads = torch.get_num_threads()
    try:
        report = run_tensor_parallel(2, num_requests=2, seed=1, max_batch=2, token_budget=32, model=None,
                                     dtype=torch.float32, prompt_lens=(4, 12), output_lens=(2, 4), rounds=1,
                                     shape=None, shape_overrides=None)
    finally:
        torch.set_num_threads(threads)
    assert list(report["systems"]) == ["tp1, 1 thread", "tp1, 2 threads", "tp2, 1 thread/rank"]
    assert not any(report["mismatches"].values())
    passes = {s["forward_passes"] for s in report["systems"].values()}
    assert len(passes) == 1, report["systems"]  # the same steps, counted per run
    assert len(report["all_reduce_seconds_per_step"]) == 1 and report["all_reduce_seconds_per_step"][0] > 0
    text = format_tensor_parallel(report)
    assert "throughput tp2, 1 thread/rank/tp1, 1 thread" in text and "identical for every request" in text
