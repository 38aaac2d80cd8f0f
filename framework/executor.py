"""Tensor parallelism's plumbing: one process per rank, the engine on rank 0 driving the others.

Rank 0 runs the scheduler and the engine loop. Each step, `TensorParallelExecutor.execute_model(items)` sends
the step's items (plain data) to the workers with `broadcast_object_list` over a gloo group, then runs rank 0's
share of the forward pass; every worker runs its share of the same items (`worker_loop`); the all-reduces inside
the layers and the gather of the logits to rank 0 go over the device's group (gloo on CPU, NCCL on CUDA). Rank 0
samples. This is the shape of vLLM's `MultiprocExecutor` (vllm/v1/executor/multiproc_executor.py at commit
b31e9326a7: `execute_model` enqueues the `SchedulerOutput` on `rpc_broadcast_mq`, a shared-memory queue that
every worker process reads in `WorkerProc.worker_busy_loop`; `start_worker_monitor` watches their sentinels and
`_ensure_worker_termination` stops them), except that there rank 0 too is a worker process apart from the engine
core. vLLM's groups (vllm/distributed/parallel_state.py at b31e9326a7: `GroupCoordinator`, a `cpu_group` for
metadata beside a `device_group` for tensors) are the two groups here. SGLang differs: every rank runs a
`Scheduler` of its own; rank 0 receives the new requests and broadcasts them with `broadcast_pyobj` over the
`tp_cpu_group` (python/sglang/srt/managers/scheduler.py, `recv_requests`, at bbe9c7eeb5), each rank schedules
identically from them, and its `TpModelWorker` runs its share of the forward pass
(python/sglang/srt/managers/tp_worker.py at bbe9c7eeb5). See chapters/12_tensor_parallel.ipynb.

Failures end the whole group: a worker that dies (seen before a step, or when a collective fails) makes the engine
raise `WorkerDied` naming it, and the others are stopped; collectives time out instead of hanging (on the CPU's gloo
a timed-out collective raises; on NCCL, torch's watchdog aborts the process instead, by default); a worker whose
engine process is gone exits by itself.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mini_llm.settings import pick_device

COLLECTIVE_TIMEOUT = timedelta(seconds=60)  # an all-reduce waiting longer fails (gloo raises, NCCL aborts): no hang
IDLE_TIMEOUT = timedelta(days=7)  # workers wait this long for the engine's next step (an idle server)
JOIN_SECONDS = 5.0
JOINED = "workers_joined"  # the key of the store that counts the workers that reached it


class WorkerDied(RuntimeError):
    """A tensor-parallel worker process is gone; the engine's workers were stopped, and it serves no more steps."""


@dataclass
class CommStats:
    """What the collectives of this process moved: counts, bytes and (on CPU) seconds."""

    all_reduce_calls: int = 0
    all_reduce_bytes: int = 0
    all_reduce_seconds: float = 0.0
    gather_calls: int = 0
    gather_bytes: int = 0
    gather_seconds: float = 0.0

    def reset(self) -> None:
        self.__init__()


@dataclass
class Collectives:
    """This rank's groups and the two collectives of the forward pass, counted."""

    rank: int
    world_size: int
    device: torch.device
    cpu_group: Any  # gloo, for the step's items (plain data)
    stats: CommStats = field(default_factory=CommStats)

    def _timed(self, fn: Callable[[], None]) -> float:
        start = time.perf_counter()
        fn()
        if self.device.type != "cpu":
            return 0.0  # asynchronous on a GPU: timing it here would add a synchronisation per layer
        return time.perf_counter() - start

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over ranks, in place (the tensor is returned)."""
        self.stats.all_reduce_seconds += self._timed(lambda: dist.all_reduce(tensor))
        self.stats.all_reduce_calls += 1
        self.stats.all_reduce_bytes += tensor.numel() * tensor.element_size()
        return tensor

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """On rank 0, every rank's `tensor` concatenated on the last axis; elsewhere `tensor` itself."""
        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)] if self.rank == 0 else None
        self.stats.gather_seconds += self._timed(lambda: dist.gather(tensor, parts, dst=0))
        self.stats.gather_calls += 1
        self.stats.gather_bytes += tensor.numel() * tensor.element_size()
        return torch.cat(parts, dim=-1) if parts is not None else tensor

    def broadcast_items(self, items: list | None) -> list | None:
        """Rank 0's `items` on every rank (None: shut down)."""
        box = [items]
        dist.broadcast_object_list(box, src=0, group=self.cpu_group)
        return box[0]


@dataclass
class ParallelSpec:
    """What every rank needs to build its share of the engine's model runner (picklable, sent to the workers)."""

    world_size: int
    store_port: int | None  # rank 0's TCPStore on 127.0.0.1, where the spawned workers meet it; None: torchrun
    load_shard: Callable  # load_shard(path, rank, world_size, all_reduce, gather, dtype, device) -> Transformer
    runner_cls: type  # the engine's ModelRunner(model, num_blocks, block_size)
    model_path: str | None
    dtype: torch.dtype | None
    device_type: str  # "cpu" or "cuda": a spawned rank r uses cuda:r, a torchrun one cuda:LOCAL_RANK
    num_blocks: int
    block_size: int
    num_threads: int  # torch CPU threads of each worker
    parent_pid: int | None = None  # a spawned worker exits when this process is gone


def _init(spec: ParallelSpec, rank: int, store: dist.TCPStore | None = None) -> Collectives:
    if spec.device_type == "cuda":
        # torchrun numbers the GPUs of each node (LOCAL_RANK; RANK counts across nodes); spawned ranks share this one
        torchrun = spec.store_port is None
        here = int(os.environ["LOCAL_WORLD_SIZE"]) if torchrun else spec.world_size
        if torch.cuda.device_count() < here:
            raise RuntimeError(f"{here} ranks on this machine need {here} GPUs, it has {torch.cuda.device_count()}: "
                               "lower tensor_parallel_size (or torchrun's --nproc-per-node)")
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) if torchrun else rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if store is None and spec.store_port is None:  # torchrun: its environment says where to meet
        dist.init_process_group(backend, init_method="env://", timeout=COLLECTIVE_TIMEOUT)
    else:
        if store is None:
            store = dist.TCPStore("127.0.0.1", spec.store_port, spec.world_size, is_master=False,
                                  timeout=COLLECTIVE_TIMEOUT)
            store.add(JOINED, 1)
        dist.init_process_group(backend, store=store, rank=rank, world_size=spec.world_size,
                                timeout=COLLECTIVE_TIMEOUT)
    cpu_group = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)
    return Collectives(rank, spec.world_size, device, cpu_group)


def _build_runner(spec: ParallelSpec, comm: Collectives):
    model = spec.load_shard(spec.model_path, comm.rank, spec.world_size, comm.all_reduce, comm.gather, spec.dtype,
                            comm.device)
    runner = spec.runner_cls(model, spec.num_blocks, spec.block_size)
    # Every rank loaded: the first step's collectives (with their timeout) do not wait for a slow load.
    dist.barrier(group=comm.cpu_group)
    return model, runner


def _exit_with_parent(parent_pid: int) -> None:
    """A spawned worker whose engine process died (SIGKILL leaves it no time to stop us) exits too."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def worker_loop(spec: ParallelSpec, rank: int) -> None:
    """A worker's life: build its share of the runner, run every step rank 0 broadcasts, stop on None."""
    torch.set_num_threads(spec.num_threads)
    if spec.parent_pid is not None:
        _exit_with_parent(spec.parent_pid)
    comm = _init(spec, rank)
    try:
        _, runner = _build_runner(spec, comm)
        while (items := comm.broadcast_items(None)) is not None:
            runner.execute_model(items)
    finally:
        dist.destroy_process_group()


def _spawned_worker(index: int, spec: ParallelSpec) -> None:
    worker_loop(spec, index + 1)  # torch.multiprocessing.spawn numbers its processes from 0; rank 0 is the engine


def launched_by_torchrun() -> bool:
    return dist.is_torchelastic_launched()


class TensorParallelExecutor:
    """Where the engine has its model runner: `execute_model(items)` runs the step on every rank and returns rank
    0's logits. Also `kv_cache` and `num_forward_passes` of rank 0's runner, and `comm.stats`."""

    def __init__(self, spec: ParallelSpec) -> None:
        self.spec, self.processes, self.closed, self.comm = spec, [], False, None
        if dist.is_initialized():
            self.closed = True
            raise RuntimeError("this process already runs a tensor-parallel engine (torch.distributed's default "
                               "group is taken): call shutdown() on that LLM first")
        store = None
        if not launched_by_torchrun():
            store = dist.TCPStore("127.0.0.1", 0, spec.world_size, is_master=True, timeout=COLLECTIVE_TIMEOUT,
                                  wait_for_workers=False)
            spec = self.spec = replace(spec, store_port=store.port)
            context = mp.spawn(_spawned_worker, args=(spec,), nprocs=spec.world_size - 1, join=False, daemon=True)
            self.processes = list(context.processes)
        try:
            if store is not None:
                self._wait_for_workers(store)
            self.comm = _init(spec, 0, store)
            self.model, self.runner = _build_runner(spec, self.comm)
        except BaseException as error:
            self._raise_if_dead(error)
            self.shutdown(graceful=False)
            raise

    def _wait_for_workers(self, store: dist.TCPStore) -> None:
        """Until every spawned worker has reached the store; one that died on the way is reported at once."""
        deadline = time.monotonic() + COLLECTIVE_TIMEOUT.total_seconds()
        while store.add(JOINED, 0) < self.spec.world_size - 1:
            self._raise_if_dead()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the tensor-parallel workers did not start within {COLLECTIVE_TIMEOUT}")
            time.sleep(0.05)

    @property
    def kv_cache(self):
        return self.runner.kv_cache

    @property
    def num_forward_passes(self) -> int:
        return self.runner.num_forward_passes

    def dead_workers(self, wait: float = 0.0) -> list[str]:
        """The workers that have exited, waiting up to `wait` seconds for a failing one to be reaped."""
        deadline = time.monotonic() + wait
        while True:
            dead = [f"rank {rank} (pid {p.pid}, exit code {p.exitcode})"
                    for rank, p in enumerate(self.processes, 1) if not p.is_alive()]
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.05)

    def _raise_if_dead(self, error: BaseException | None = None) -> None:
        dead = self.dead_workers(wait=0.0 if error is None else 2.0)
        if dead:
            self.shutdown(graceful=False)
            raise WorkerDied(f"tensor-parallel worker {', '.join(dead)} died; the other workers were stopped and "
                             "this engine serves no more steps: create a new LLM") from error

    def execute_model(self, items: list) -> torch.Tensor:
        if self.closed:
            raise WorkerDied("the tensor-parallel workers were stopped after an earlier failure: create a new LLM")
        self._raise_if_dead()
        try:
            self.comm.broadcast_items(items)
            return self.runner.execute_model(items)
        except BaseException as error:
            # A failed step leaves the ranks at different collectives: the group cannot go on.
            self._raise_if_dead(error)
            self.shutdown(graceful=False)
            raise

    def shutdown(self, graceful: bool = True) -> None:
        """Stop the workers, then leave the process group. Graceful: ask them (they finish the step they are in);
        after a failure: kill them at once, since the survivors may be waiting in a collective. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.comm is not None and graceful and not self.dead_workers():
            try:
                self.comm.broadcast_items(None)
            except RuntimeError:  # a worker went away meanwhile
                graceful = False
        for p in self.processes:
            p.join(JOIN_SECONDS if graceful else 0)
            if p.is_alive():
                p.kill()
                p.join()
        if self.comm is not None:
            dist.destroy_process_group()

    def __del__(self) -> None:
        self.shutdown()


def start_tensor_parallel(load_shard: Callable, runner_cls: type, model_path: str | None, dtype: torch.dtype | None,
                          device: Any, world_size: int, num_blocks: int, block_size: int):
    """The engine's side of tensor parallelism: rank 0's model and a `TensorParallelExecutor` in place of its
    runner. Under `torchrun --nproc-per-node N` every process calls this; on ranks > 0 it runs the worker loop and
    exits the process when the engine shuts down."""
    device = pick_device(str(device) if device is not None else None)
    torchrun = launched_by_torchrun()
    if torchrun and int(os.environ["WORLD_SIZE"]) != world_size:
        raise ValueError(f"tensor_parallel_size={world_size} but torchrun started {os.environ['WORLD_SIZE']} "
                         "processes: pass --nproc-per-node equal to tensor_parallel_size")
    spec = ParallelSpec(world_size, None, load_shard,
                        runner_cls, None if model_path is None else str(model_path), dtype, device.type, num_blocks,
                        block_size, torch.get_num_threads(), None if torchrun else os.getpid())
    if torchrun and int(os.environ["RANK"]) != 0:
        worker_loop(spec, int(os.environ["RANK"]))
        raise SystemExit(0)
    executor = TensorParallelExecutor(spec)
    return executor.model, executor
