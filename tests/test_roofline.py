"""benchmarks/roofline.py: the machine's figures are measured (positive, finite) and a step lands on the bound that
applies at its arithmetic intensity, computed by hand."""

from __future__ import annotations

import math

from benchmarks.roofline import matmul_peak, memory_bandwidth, place
from framework.trace import StepRecord


def step(flops: int, moved: int, seconds: float) -> StepRecord:
    return StepRecord(0, 0.0, seconds, 0.0, seconds, {"forward": [0.0, seconds / 2]}, [], {"prefill": 0, "decode": 1, "draft": 0}, 256, 1,
                      1, 1, 0, [], 0, 0, [], flops, moved)


def test_machine_figures_are_measured():
    peak, bandwidth = matmul_peak(n=128, repeats=2), memory_bandwidth(num_bytes=1 << 20, repeats=2)
    assert math.isfinite(peak) and peak > 0 and math.isfinite(bandwidth) and bandwidth > 0


def test_steps_land_on_the_bound_that_applies():
    peak, bandwidth = 100.0, 10.0  # GFLOP/s, GB/s: the ridge is at 10 FLOP/byte
    decode = place([step(2e9, 1e9, 0.5), step(2e9, 1e9, 0.5)], peak, bandwidth)  # 2 FLOP/byte, 4 GFLOP in 1 s
    assert decode["bound"] == "memory" and decode["bound_gflops"] == 20.0
    assert math.isclose(decode["fraction_of_bound"], 4 / 20) and math.isclose(decode["gbps"], 2.0)
    prefill = place([step(50e9, 1e9, 1.0)], peak, bandwidth)  # 50 FLOP/byte
    assert prefill["bound"] == "compute" and math.isclose(prefill["fraction_of_bound"], 0.5)
    assert prefill["forward_share"] == 0.5 and prefill["fraction_of_bound_cpu"] == prefill["fraction_of_bound"]
