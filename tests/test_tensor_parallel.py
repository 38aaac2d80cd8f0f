"""Tensor parallelism (framework/executor.py, solutions/tensor_parallel.py): `LLM(tensor_parallel_size=2)` gives
the tokens of TP=1 on a slice of the benchmark's workload, and a worker that dies mid-generate makes generate raise
a clear error within seconds, leaving no process behind; `torchrun --nproc-per-node 2` runs the same script."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks.measure import make_workload, prompt_vocab
from framework.engine import StepError
from framework.sampling import SamplingParams
from mini_llm.settings import EMBEDDED_MODEL
from solutions.engine import LLM


def children() -> list[int]:
    """Processes whose parent is this one (spawned workers, and anything they left)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_tp2_generates_the_tokens_of_tp1_on_the_benchmark_workload():
    """A slice of benchmarks/throughput.py's default workload (the first 4 of its 64 requests, fp32, greedy, their
    outputs cut to 24 tokens: the all-reduces of two ranks on 2 cores are slow)."""
    tp2 = LLM(dtype=torch.float32, tensor_parallel_size=2)
    with pytest.raises(RuntimeError, match="already runs a tensor-parallel engine"):
        LLM(dtype=torch.float32, tensor_parallel_size=2)
    workload = make_workload(64, 0, prompt_vocab(EMBEDDED_MODEL, tp2.model.cfg.vocab_size))
    prompts = workload.prompts[:4]
    params = [SamplingParams(max_tokens=min(n, 24), ignore_eos=True) for n in workload.output_lens[:4]]
    tp1 = LLM(dtype=torch.float32)
    want = [o.outputs[0].token_ids for o in tp1.engine.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in tp2.engine.generate(prompts, params)]
    assert got == want
    stats = tp2.engine.runner.comm.stats
    num_layers = tp2.model.cfg.num_hidden_layers
    assert stats.all_reduce_calls == 2 * num_layers * tp2.engine.runner.num_forward_passes
    tp2.shutdown()
    assert not multiprocessing.active_children()


def test_killed_worker_raises_a_clear_error_and_leaves_no_process():
    llm = LLM(dtype=torch.float32, tensor_parallel_size=2)
    executor = llm.engine.runner
    worker = executor.processes[0]
    local_step, calls = executor.runner.execute_model, []

    def kill_at_third_step(items):
        calls.append(time.monotonic())
        if len(calls) == 3:
            os.kill(worker.pid, signal.SIGKILL)
        return local_step(items)

    executor.runner.execute_model = kill_at_third_step
    with pytest.raises(StepError, match=r"WorkerDied: tensor-parallel worker rank 1 \(pid \d+, exit code -9\) died"):
        llm.generate(["Once upon a time"] * 3, SamplingParams(max_tokens=20))
    assert time.monotonic() - calls[-1] < 10
    assert not worker.is_alive() and executor.closed
    with pytest.raises(StepError, match="WorkerDied: the tensor-parallel workers were stopped"):
        llm.generate(["Once upon a time"], SamplingParams(max_tokens=2))
    assert worker.pid not in children() and not multiprocessing.active_children()


TORCHRUN_SCRIPT = """
import torch
from framework.sampling import SamplingParams
from solutions.engine import LLM

llm = LLM(dtype=torch.float32, tensor_parallel_size=2)  # on rank 1 this runs the worker, then exits
out = llm.generate(["Once upon a time, a little fox"], SamplingParams(max_tokens=8))
print("TOKENS", out[0].outputs[0].token_ids)
llm.shutdown()
"""


def test_torchrun_starts_the_ranks_itself(tmp_path):
    script = tmp_path / "tp_script.py"
    script.write_text(TORCHRUN_SCRIPT)
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)],
                          capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("TOKENS")]
    want = LLM(dtype=torch.float32).generate(["Once upon a time, a little fox"], SamplingParams(max_tokens=8))
    assert lines == [f"TOKENS {want[0].outputs[0].token_ids}"]  # printed by rank 0 only


@pytest.mark.parametrize("torchrun, expected", [(True, 1), (False, 3)])
def test_each_rank_takes_its_gpu_of_this_machine(monkeypatch, torchrun, expected):
    """Under torchrun a rank's GPU is LOCAL_RANK (its RANK counts across nodes: rank 3 is the second of node 1);
    a spawned rank r, on one machine, takes cuda:r. Checked without a GPU: the device calls are stubbed."""
    from framework import executor

    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if torchrun else 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(executor.dist, "init_process_group", lambda *args, **kwargs: None)
    monkeypatch.setattr(executor.dist, "new_group", lambda *args, **kwargs: None)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    spec = executor.ParallelSpec(4, None if torchrun else 1234, None, None, None, None, "cuda", 8, 4, 1)
    comm = executor._init(spec, 3, store=None if torchrun else object())
    assert comm.device == torch.device("cuda", expected) and chosen == [comm.device]
