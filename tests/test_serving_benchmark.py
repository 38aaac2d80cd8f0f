"""benchmarks/serving.py's metrics follow vLLM's definitions (vllm/benchmarks/serve.py, calculate_metrics), on
hand-made request results; and its workload is seeded."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("serving_benchmark", ROOT / "benchmarks" / "serving.py")
serving = sys.modules["serving_benchmark"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(serving)


def test_ttft_tpot_itl_and_goodput():
    R = serving.RequestResult
    results = [R("a", ok=True, ttft=0.1, latency=1.1, itl=[0.5, 0.5], output_tokens=3),  # TPOT 500 ms
               R("b", ok=True, ttft=0.3, latency=0.4, itl=[0.1], output_tokens=2),  # TPOT 100 ms
               R("c", ok=False, error="boom")]
    requests = [("a", 5, 3), ("b", 7, 2), ("c", 1, 1)]
    m = serving.metrics(results, requests, duration=2.0, goodput={"ttft": 200, "tpot": 600})
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["mean_ttft_ms"] == pytest.approx(200) and m["p50_tpot_ms"] == pytest.approx(300)
    assert m["p99_itl_ms"] == pytest.approx(500) and m["mean_e2el_ms"] == pytest.approx(750)
    assert m["request_throughput"] == 1.0 and m["output_throughput"] == 2.5 and m["total_token_throughput"] == 8.5
    assert m["goodput"] == 0.5  # b misses the TTFT SLO
    assert serving.metrics(results, requests, 2.0, {})["goodput"] == 1.0
    assert math.isnan(serving.metrics([], [], 1.0, {})["mean_ttft_ms"])


def test_goodput_arguments_and_seeded_workload():
    assert serving.parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    with pytest.raises(SystemExit, match="ttft:MS"):
        serving.parse_goodput(["latency:5"])

    class Words:
        def encode(self, text):
            return text.split()

    a = serving.workload(8, 3, Words(), 16, 64)
    assert a == serving.workload(8, 3, Words(), 16, 64) and a != serving.workload(8, 4, Words(), 16, 64)
    assert all(16 <= n <= 64 and len(p.split()) == k for p, k, n in a)
