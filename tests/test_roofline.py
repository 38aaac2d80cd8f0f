"""benchmarks/roofline.py: the machine's figures are measured (positive, finite); a step lands on the bound that
applies at its arithmetic intensity, computed by hand; a workload's useful work is the sum of its steps' work;
and the throughput benchmark's per-system fractions run end to end at tiny sizes."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import roofline, throughput
from benchmarks.roofline import (Machine, matmul_peak, measure_machine, memory_bandwidth, place, run,
                                 system_fractions, workload_cost)
from framework.trace import StepRecord, step_cost
from mini_llm import load_transformer


def step(flops: int, moved: int, seconds: float, cpu_seconds: float | None = None) -> StepRecord:
    cpu = seconds if cpu_seconds is None else cpu_seconds
    return StepRecord(0, 0.0, seconds, 0.0, cpu, {"forward": [0.0, seconds / 2]},
                      [], {"prefill": 0, "decode": 1, "draft": 0}, 256, 1, 1, 1, 0, [], 0, 0, [], flops, moved)


def test_machine_figures_are_measured():
    for wall, cpu in (matmul_peak(n=128, repeats=2), memory_bandwidth(num_bytes=1 << 20, repeats=2)):
        assert math.isfinite(wall) and wall > 0 and math.isfinite(cpu) and cpu > 0
    m = measure_machine(matmul_n=128, bandwidth_bytes=1 << 20, repeats=2)
    assert m.peak_gflops_cpu is not None and m.ridge == m.peak_gflops / m.bandwidth_gbps


def test_the_matmul_is_larger_off_the_cpu(monkeypatch):
    """1024 square on a CPU; 8192 elsewhere, where a GPU's tensor cores need large products to approach their peak
    (the meta device stands in for one here)."""
    sizes = []
    monkeypatch.setattr(roofline, "matmul_peak", lambda n, dtype, repeats, device: sizes.append(
        (n, torch.device(device).type)) or (1.0, 1.0))
    monkeypatch.setattr(roofline, "memory_bandwidth", lambda *args: (1.0, 1.0))
    measure_machine("cpu"), measure_machine("meta")
    assert sizes == [(1024, "cpu"), (8192, "meta")]


def test_steps_land_on_the_bound_that_applies():
    machine = Machine("cpu", "float32", 1, 100.0, 10.0, 50.0, 5.0)  # GFLOP/s, GB/s: ridges at 10 FLOP/byte
    decode = place([step(2e9, 1e9, 0.5, 1.0), step(2e9, 1e9, 0.5, 1.0)], machine)  # 2 FLOP/byte, 4 GFLOP in 1 s
    assert decode["bound"] == "memory" and decode["bound_gflops"] == 20.0
    assert math.isclose(decode["fraction_of_bound"], 4 / 20) and math.isclose(decode["gbps"], 2.0)
    # over 2 CPU-seconds against 5 GB/s: 2 GB need 0.4 s
    assert math.isclose(decode["fraction_of_bound_cpu"], 0.4 / 2)
    prefill = place([step(50e9, 1e9, 1.0)], machine)  # 50 FLOP/byte
    assert prefill["bound"] == "compute" and math.isclose(prefill["fraction_of_bound"], 0.5)
    assert prefill["forward_share"] == 0.5 and math.isclose(prefill["fraction_of_bound_cpu"], 1.0)
    assert place([step(1e9, 1e9, 1.0)], Machine("cuda:0", "bfloat16", 1, 100.0, 10.0))["fraction_of_bound_cpu"] is None


def test_workload_cost_is_its_steps_cost():
    """The useful work of two requests, run as the engine runs them (a prefill step, then decode steps), step by
    step with step_cost: the same FLOPs, and the weights once per pass."""
    cfg = load_transformer(dtype=torch.float32).cfg
    prompts, outputs = [[1, 2, 3], [4, 5, 6, 7, 8]], [3, 2]
    steps = [[(p, 0, [], True) for p in prompts], [([0], 3, [], True), ([0], 5, [], True)], [([0], 4, [], True)]]
    costs = [step_cost(cfg, items, 4) for items in steps]
    flops, moved = workload_cost(cfg, prompts, outputs, len(steps), 4)
    assert flops == sum(f for f, _ in costs) and moved == sum(b for _, b in costs)
    frac = system_fractions({"seconds": 2.0, "cpu_seconds": 1.0}, 4e9, 1e9, Machine("cpu", "float32", 1, 10.0, 1.0,
                                                                                      20.0, 2.0))
    assert math.isclose(frac["wall"]["of_peak"], 0.2) and math.isclose(frac["wall"]["of_bandwidth"], 0.5)
    assert math.isclose(frac["wall"]["of_bound"], 0.5) and math.isclose(frac["cpu"]["of_bound"], 0.5)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_throughput_reports_fractions(one_thread):
    machine = measure_machine(matmul_n=128, bandwidth_bytes=1 << 20, repeats=2)
    report = throughput.run_benchmark(2, prompt_lens=(8, 16), output_lens=(2, 4), systems=("engine", "sequential"),
                                      warmup=False, machine=machine)
    fractions = report["roofline"]["systems"]
    assert set(fractions) == {"engine", "sequential"}
    for name, f in fractions.items():
        assert 0 < f["wall"]["of_peak"] and 0 < f["cpu"]["of_bandwidth"] and f["gflop"] > 0, name
    # the same useful FLOPs; the sequential system reads the weights once per token
    assert fractions["engine"]["gflop"] == fractions["sequential"]["gflop"]
    assert fractions["sequential"]["gbytes"] > fractions["engine"]["gbytes"]
    assert "of bound" in throughput.format_report(report)


def test_roofline_run_places_the_steps(one_thread, monkeypatch):
    monkeypatch.setattr("benchmarks.roofline.measure_machine",
                        lambda device, dtype: measure_machine(device, dtype, 128, 1 << 20, 2))
    report = run(num_requests=2, trace_repeats=1)
    assert report["workload"]["steps"] == len(report["steps"]) > 0
    assert report["decode"]["bound"] in ("memory", "compute") and report["prefill_heavy"]["steps"] > 0
    assert set(report["trace_cost"]["ratios"]) == {"off/untraced", "on/untraced"}

