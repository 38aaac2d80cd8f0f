"""What the benchmarks share: the seeded workload, the checkpoint and the transformers model they load, the clocks,
the engine's run (benchmarks/throughput.py's system "engine", also run by benchmarks/tensor_parallel.py) and the
results with their summaries. The scripts import it; it imports none of them."""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from benchmarks.shapes import write_shape_checkpoint
from framework.kv_cache_manager import blocks_needed
from framework.sampling import SamplingParams
from framework.spec_decode import SpeculativeConfig
from mini_llm import model_path, sync
from solutions.engine import EngineConfig, LLMEngine

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def max_len(self) -> int:
        return max(len(p) + n for p, n in zip(self.prompts, self.output_lens))


@dataclass
class SystemResult:
    outputs: list[list[int]]
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: more robust than wall time on a machine shared with other jobs
    page_faults: int | None  # memory touched for the first time (fresh allocations), where the OS counts it
    forward_passes: int  # model forward passes (engine steps; generate's prefills and decode steps)
    # Per request: seconds from submission to its first token, and between its consecutive tokens (may be empty).
    ttft: list[float] = field(default_factory=list)
    tbt: list[float] = field(default_factory=list)
    # Speculative systems, per request: drafts proposed, drafts accepted, steps (forward passes) that emitted.
    drafts: dict[str, list[int]] | None = None


def make_workload(num_requests: int, seed: int, vocab: list[int], prompt_lens: tuple[int, int] = (16, 256),
                  output_lens: tuple[int, int] = (16, 128)) -> Workload:
    """Prompt and output lengths uniform in the inclusive ranges; prompt tokens uniform over `vocab`."""
    rng = np.random.default_rng(seed)
    p_lens = rng.integers(prompt_lens[0], prompt_lens[1] + 1, num_requests)
    o_lens = rng.integers(output_lens[0], output_lens[1] + 1, num_requests)
    vocab_arr = np.asarray(vocab)
    prompts = [vocab_arr[rng.integers(0, len(vocab_arr), n)].tolist() for n in p_lens]
    return Workload(prompts, o_lens.tolist())


def prompt_vocab(folder, vocab_size: int) -> list[int]:
    """Ordinary token ids to draw prompts from: the tokenizer's vocabulary without special tokens when the
    checkpoint has one (Qwen3's embedding matrix has unused rows past it), else every id the model knows."""
    try:
        from mini_llm import load_tokenizer
        tok = load_tokenizer(folder)
    except Exception:  # a bare checkpoint without tokenizer files
        return list(range(vocab_size))
    special = set(tok.all_special_ids)
    return [i for i in range(min(len(tok), vocab_size)) if i not in special]


class Stopwatch:
    """Wall clock, this process's CPU time and its minor page faults, from `start()` to `stop()`."""

    def start(self, device: torch.device) -> float:
        sync(device)
        self.wall, self.cpu, self.faults = time.perf_counter(), time.process_time(), page_faults()
        return self.wall

    def stop(self, device: torch.device) -> tuple[float, float, int | None]:
        sync(device)
        faults = page_faults()
        return (time.perf_counter() - self.wall, time.process_time() - self.cpu,
                None if faults is None else faults - self.faults)


def page_faults() -> int | None:
    try:
        import resource
    except ImportError:  # Windows has no getrusage
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def call_seconds(fn: Callable[[], Any], repeats: int, device: torch.device) -> tuple[list[float], list[float]]:
    """`repeats` calls of `fn`, each timed alone with the device's queue drained: (wall seconds, this process's CPU
    seconds) of each. Warm up before calling it."""
    walls, cpus = [], []
    for _ in range(repeats):
        sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        sync(device)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def run_engine(model, workload: Workload, max_batch: int, token_budget: int, block_size: int = 16,
               engine_cls: type[LLMEngine] = LLMEngine, speculative: SpeculativeConfig | None = None
               ) -> tuple[SystemResult, dict]:
    """(a) The engine (`engine_cls`, e.g. `course.use("engine").LLMEngine`); also returns its KV-memory figures."""
    blocks_per_seq = blocks_needed(workload.max_len, block_size)
    config = EngineConfig(num_blocks=max_batch * blocks_per_seq, block_size=block_size, token_budget=token_budget,
                          max_num_seqs=max_batch, speculative=speculative)
    engine = engine_cls(model, config)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in workload.output_lens]
    requests = engine.add_requests(workload.prompts, params)
    index = {r.request_id: i for i, r in enumerate(requests)}
    stamps: list[list[float]] = [[] for _ in requests]
    pool, peak_blocks = engine.kv_cache_manager.block_pool, 0
    watch = Stopwatch()
    start = watch.start(model.device)
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter()  # the sampled tokens are Python ints: the step's device work is done
        peak_blocks = max(peak_blocks, pool.num_blocks - pool.num_free_blocks)
        for out in outputs:  # a speculative step emits several tokens at once
            stamps[index[out.request_id]] += [now - start] * len(out.new_token_ids)
    clocks = watch.stop(model.device)
    cache = engine.runner.kv_cache
    block_bytes = cache.bytes // cache.num_blocks
    kv = {"block_size": block_size, "block_bytes": block_bytes, "peak_blocks": peak_blocks,
          "paged_peak_bytes": peak_blocks * block_bytes,
          # A contiguous cache reserves max_len slots for each of max_batch sequences, whatever they use.
          "contiguous_bytes": max_batch * workload.max_len * block_bytes // block_size,
          "used_token_slots_peak": peak_blocks * block_size}
    result = result_from([list(r.output_token_ids) for r in requests], clocks, stamps, engine.runner.num_forward_passes)
    if speculative is not None:
        result.drafts = {"proposed": [r.num_draft_tokens for r in requests],
                         "accepted": [r.num_accepted_tokens for r in requests],
                         "steps": [len(set(s)) for s in stamps]}
    return result, kv


def left_padded(prompts: list[list[int]], pad_token_id: int, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """`generate`'s inputs for a static batch: token ids padded on the left to the longest prompt, and the
    attention mask that hides the padding."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask


def result_from(outputs: list[list[int]], clocks: tuple[float, float, int | None], stamps: list[list[float]],
            forward_passes: int) -> SystemResult:
    return SystemResult(outputs, *clocks, forward_passes=forward_passes, ttft=[s[0] for s in stamps],
                        tbt=[b - a for s in stamps for a, b in zip(s, s[1:])])


def mismatches(reference: list[list[int]], other: list[list[int]]) -> list[dict]:
    """Requests whose tokens differ, with the first differing position."""
    found = []
    for i, (a, b) in enumerate(zip(reference, other, strict=True)):
        if a != b:
            pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            found.append({"request": i, "position": pos, "lengths": (len(a), len(b))})
    return found


def summarize(result: SystemResult) -> dict:
    tokens = sum(len(o) for o in result.outputs)
    stat = lambda xs, q: float(np.percentile(xs, q)) if xs else None  # noqa: E731
    summary = {"output_tokens": tokens, "seconds": result.seconds, "tokens_per_s": tokens / result.seconds,
               "cpu_seconds": result.cpu_seconds, "tokens_per_cpu_s": tokens / result.cpu_seconds,
               "ttft_median_s": stat(result.ttft, 50), "ttft_p99_s": stat(result.ttft, 99),
               "tbt_median_s": stat(result.tbt, 50), "tbt_p99_s": stat(result.tbt, 99),
               "tbt_mean_s": float(np.mean(result.tbt)) if result.tbt else None, "page_faults": result.page_faults,
               "forward_passes": result.forward_passes}
    return summary | ({"speculation": speculation(result)} if result.drafts else {})


def speculation(result: SystemResult) -> dict:
    """Per request: acceptance rate (accepted / proposed drafts; None without any) and mean accepted length
    (tokens emitted per step that emitted some); and the same over all requests."""
    d, lens = result.drafts, [len(o) for o in result.outputs]
    per_step = [n / s for n, s in zip(lens, d["steps"])]
    out = {"mean_accepted_length": per_step, "mean_accepted_length_all": sum(lens) / sum(d["steps"])}
    if "proposed" in d:
        out["acceptance_rate"] = [a / p if p else None for a, p in zip(d["accepted"], d["proposed"])]
        out["acceptance_rate_all"] = sum(d["accepted"]) / max(sum(d["proposed"]), 1)
        out["proposed"], out["accepted"] = d["proposed"], d["accepted"]
    return out


def load_hf_model(folder: str | Path, dtype: torch.dtype, device: torch.device):
    """transformers' Qwen3ForCausalLM on the same folder, dtype and device, without its loading progress bar."""
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return Qwen3ForCausalLM.from_pretrained(str(folder), dtype=dtype).to(device).eval()
    finally:
        if shown:
            hf_logging.enable_progress_bar()


@contextmanager
def checkpoint_folder(model: str | None, shape: str | None, shape_overrides: dict | None = None) -> Iterator[Path]:
    """The checkpoint to load: `model` (default: $MINI_LLM_MODEL, else the embedded one), or a random-initialised
    checkpoint of `shape` written to a temporary folder that lives as long as the context."""
    if shape is None:
        yield model_path(model)
        return
    if model is not None:
        raise ValueError(f"give a checkpoint folder ({model}) or a shape ({shape}), not both")
    with tempfile.TemporaryDirectory(prefix=f"{shape}-random-") as tmp:
        yield write_shape_checkpoint(shape, tmp, **(shape_overrides or {}))
