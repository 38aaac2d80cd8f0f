"""Throughput of the course's engine against transformers (static and continuous batching) and one request at a time.

One seeded workload runs through four systems, greedy, each forced to generate every request's drawn number of
tokens (end-of-sequence ignored), so they do the same useful work:

  (a) engine      solutions.engine.LLMEngine: continuous batching, paged KV cache, mixed prefill/decode steps
  (b) hf          transformers' Qwen3ForCausalLM.generate on the same checkpoint and dtype: static batches of
                  `--max-batch` requests, left padding; a batch runs until its longest request is done
  (c) hf-cb       transformers' own continuous batching (ContinuousBatchingManager: paged cache, a background
                  thread), same model object, with the engine's limits (requests and tokens per step, blocks)
  (d) sequential  mini_llm.generate, one request at a time

It checks that all of them produce the same tokens for every request, then reports output tokens/s, the ratios of
(a) to each other system from this run, time to first token and time between tokens, and the engine's KV memory.
Unless `--no-roofline`, it also measures this machine's matmul peak and memory bandwidth (benchmarks/roofline.py)
and reports each system's achieved GFLOP/s and GB/s as fractions of them: the workload's useful work (every
prompt token and fed-back output token once, attention over its context; the weights read once per forward pass
of that system), over its wall time and per CPU-second.

    python benchmarks/throughput.py                       # 64 requests, embedded model, CPU, fp32
    python benchmarks/throughput.py --num-requests 16 --seed 1
    python benchmarks/throughput.py --shape qwen3-0.6b    # random weights, Qwen3-0.6B's shape, 8 requests
    MINI_LLM_MODEL=~/models/Qwen3-0.6B python benchmarks/throughput.py --device cuda --dtype bfloat16

TTFT counts from the moment the whole workload is submitted (an offline batch), so it includes queueing.

Speculative decoding (chapter 11): `engine-ngram` is the engine with n-gram drafts (solutions/spec_decode.py),
`hf-lookup` transformers' `generate` with `prompt_lookup_num_tokens`, one request at a time (how transformers runs
it). `--workload repetitive` (benchmarks/repetitive.py) asks the model to retell a passage it wrote:

    python benchmarks/throughput.py --workload repetitive --systems engine,engine-ngram,hf-lookup --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import (DTYPES, Stopwatch, SystemResult, Workload, checkpoint_folder,  # noqa: E402
                                left_padded, load_hf_model, make_workload, mismatches, prompt_vocab, result_from,
                                run_engine, summarize)
from benchmarks.repetitive import repetitive_prompts  # noqa: E402
from benchmarks.roofline import Machine, format_machine, measure_machine, system_fractions, workload_cost  # noqa: E402
from benchmarks.shapes import SHAPES  # noqa: E402
from framework.kv_cache_manager import blocks_needed  # noqa: E402
from framework.model_runner import ModelRunnerBase  # noqa: E402
from framework.spec_decode import SpeculativeConfig  # noqa: E402
from mini_llm import generate, load_transformer, pick_device, sync  # noqa: E402
from solutions.engine import LLMEngine  # noqa: E402
from solutions.model_runner import ModelRunner  # noqa: E402
from solutions.paged_attention import GatherWorkspace  # noqa: E402
from solutions.spec_decode import SpecDecodeEngine  # noqa: E402

SYSTEMS = ("engine", "hf", "hf-cb", "sequential")
# With --shape, a model where a step costs arithmetic: one request at a time would take most of the run.
SHAPE_SYSTEMS = ("engine", "hf", "hf-cb")
SHAPE_PROMPT_LENS, SHAPE_OUTPUT_LENS = (16, 128), (16, 48)  # every pass costs seconds on a CPU





class PerRequestRunner(ModelRunner):
    """The runner as it was before chapter 9: the shell's attention, the per-request kernel called as exercise 127
    defines it, one SDPA per request per layer, with metadata read back from the device."""
    attention_for_step = ModelRunnerBase.attention_for_step


class PerRequestEngine(LLMEngine):
    runner_cls = PerRequestRunner


class FreshGatherBuffers(GatherWorkspace):
    """A workspace that keeps nothing: every gather gets newly allocated memory."""
    def gather(self, name: str, cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
        self._buffers.clear()
        return super().gather(name, cache, block_tables)


class FreshBuffersRunner(ModelRunner):
    """The runner before its gather workspace: every layer of every step gathers into fresh memory."""
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gather_workspace = FreshGatherBuffers()


class FreshBuffersEngine(LLMEngine):
    runner_cls = FreshBuffersRunner


# The engine as it was before each of chapter 9's fixes: extra systems, for before/after ratios in one run.
ENGINE_VARIANTS = {"engine-per-request-attention": PerRequestEngine, "engine-fresh-gather-buffers": FreshBuffersEngine}
# Further systems, not run by default: transformers' continuous batching with the configuration it picks itself;
# speculative decoding, the engine's and transformers' prompt lookup.
EXTRA_SYSTEMS = ("hf-cb-defaults", *ENGINE_VARIANTS, "engine-ngram", "hf-lookup")
WORKLOADS = ("default", "repetitive")


def run_hf(hf_model, workload: Workload, max_batch: int, pad_token_id: int) -> SystemResult:
    """(b) transformers' generate: static batches of `max_batch` requests in order, left-padded, greedy, no EOS
    stop; each batch generates its longest request's count and every request keeps its first drawn tokens."""
    from transformers import GenerationConfig
    from transformers.generation.streamers import BaseStreamer

    # generate() fills the fields we leave at None from the checkpoint's generation_config, EOS included: switch
    # EOS off at the source, or a request that samples EOS stops early and its row is padded.
    hf_model.generation_config.eos_token_id = None
    device = hf_model.device
    outputs: list[list[int]] = []
    stamps: list[list[float]] = []
    watch = Stopwatch()
    start = watch.start(device)

    class Clock(BaseStreamer):
        """Stamps every generated token; the first `put` is the prompt."""
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value) -> None:
            self.times.append(time.perf_counter() - start)

        def end(self) -> None:
            pass

    for lo in range(0, len(workload.prompts), max_batch):
        prompts, lens = workload.prompts[lo: lo + max_batch], workload.output_lens[lo: lo + max_batch]
        ids, mask = left_padded(prompts, pad_token_id, device)
        width = ids.shape[1]
        gen = GenerationConfig(max_new_tokens=max(lens), do_sample=False, eos_token_id=None,
                               pad_token_id=pad_token_id)
        clock = Clock()
        with torch.inference_mode():
            out = hf_model.generate(input_ids=ids, attention_mask=mask, generation_config=gen, streamer=clock)
        rows = out[:, width:].tolist()
        token_times = clock.times[1:]
        outputs += [row[:n] for row, n in zip(rows, lens)]
        stamps += [token_times[:n] for n in lens]
    # A batch runs one prefill pass, then one pass per further token of its longest request.
    passes = sum(max(workload.output_lens[lo: lo + max_batch]) for lo in range(0, len(workload.prompts), max_batch))
    return result_from(outputs, watch.stop(device), stamps, passes)


def run_hf_cb(hf_model, workload: Workload, max_batch: int, token_budget: int, block_size: int = 16,
              engine_limits: bool = True) -> SystemResult:
    """(c) transformers' own continuous batching (`ContinuousBatchingManager`, a paged cache served by a background
    thread), given the engine's limits: `max_batch` requests and `token_budget` tokens per step, blocks of
    `block_size` tokens, as many blocks as the engine gets, no prefix sharing (the engine's is off); with
    `engine_limits=False`, the configuration `init_continuous_batching()` picks by itself. `generate_batch` takes
    one `max_new_tokens` for all its prompts, so each request goes through `add_request` with its own;
    `eos_token_id=-1` switches EOS off."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=max(workload.output_lens))
    cb = ContinuousBatchingConfig()
    if engine_limits:
        num_blocks = max_batch * blocks_needed(workload.max_len, block_size)
        cb = ContinuousBatchingConfig(max_requests_per_batch=max_batch, max_batch_tokens=token_budget,
                                      page_size=block_size, num_blocks=num_blocks, allow_block_sharing=False)
    passes = [0]
    hook = hf_model.register_forward_pre_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    device, watch, results = hf_model.device, Stopwatch(), {}
    try:
        # Its warm-up builds the cache (and on a GPU captures its graphs) before the clock starts, as the engine's
        # constructor allocates its cache before `run_engine` starts its clock.
        with torch.inference_mode(), hf_model.continuous_batching_context_manager(
                generation_config=gen, continuous_batching_config=cb, warmup=True) as manager:
            passes[0] = 0
            start = watch.start(device)
            ids = [manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n, eos_token_id=-1,
                                       record_timestamps=True)
                   for i, (prompt, n) in enumerate(zip(workload.prompts, workload.output_lens))]
            while len(results) < len(ids):
                out = manager.get_result(timeout=1)  # a request can take minutes on a CPU: wait while it runs
                if out is None and not manager.is_running():
                    raise RuntimeError("transformers' continuous batching stopped before every request finished")
                if out is not None and out.error is not None:
                    raise RuntimeError(f"transformers' continuous batching failed on {out.request_id}: {out.error}")
                if out is not None and out.is_finished():
                    results[out.request_id] = out
            clocks = watch.stop(device)
    finally:
        hook.remove()
    outputs = [results[i] for i in ids]
    stamps = [[t - start for t in o.timestamps] for o in outputs]
    return result_from([list(o.generated_tokens) for o in outputs], clocks, stamps, passes[0])


def run_hf_lookup(hf_model, workload: Workload, num_speculative_tokens: int) -> SystemResult:
    """transformers' prompt-lookup decoding (`generate(prompt_lookup_num_tokens=k)`), greedy, no EOS stop, one
    request at a time: its assisted generation takes a batch of one."""
    from transformers import GenerationConfig
    from transformers.generation.streamers import BaseStreamer

    hf_model.generation_config.eos_token_id = None
    device, watch = hf_model.device, Stopwatch()
    outputs, stamps, steps = [], [], []
    passes = [0]
    hook = hf_model.register_forward_pre_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    start = watch.start(device)

    class Clock(BaseStreamer):
        """Stamps each token when its chunk arrives (an accepted run comes at once); the first `put` is the prompt."""
        def __init__(self) -> None:
            self.times: list[float] = []
            self.puts = 0

        def put(self, value) -> None:
            self.puts += 1
            if self.puts > 1:
                self.times += [time.perf_counter() - start] * value.numel()

        def end(self) -> None:
            pass

    try:
        for prompt, n in zip(workload.prompts, workload.output_lens):
            gen = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, prompt_lookup_num_tokens=num_speculative_tokens)
            clock, ids = Clock(), torch.tensor([prompt], device=device)
            with torch.inference_mode():  # an explicit mask: one built from pad_token_id would hide token 0
                out = hf_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen,
                                        streamer=clock)
            outputs.append(out[0, len(prompt):].tolist())
            stamps.append(clock.times[:n])
            steps.append(len(set(clock.times)))
    finally:
        hook.remove()
    result = result_from(outputs, watch.stop(device), stamps, passes[0])
    result.drafts = {"steps": steps}
    return result


def run_sequential(model, workload: Workload) -> SystemResult:
    """(d) One request at a time with the contiguous-cache generator; per-request wall times only."""
    outputs, stamps = [], []
    watch = Stopwatch()
    start = watch.start(model.device)
    for prompt, n in zip(workload.prompts, workload.output_lens):
        begin = time.perf_counter() - start
        outputs.append(generate(model, prompt, max_new_tokens=n, eos_token_id=None))
        sync(model.device)
        stamps.append([begin, time.perf_counter() - start])
    clocks = watch.stop(model.device)
    # mini_llm.generate has no per-token hook: report each request's mean time per token as its "TBT".
    tbt = [(t[1] - t[0]) / n for t, n in zip(stamps, workload.output_lens)]
    return SystemResult(outputs, *clocks, forward_passes=sum(workload.output_lens), ttft=[], tbt=tbt)


def run_benchmark(num_requests: int = 64, seed: int = 0, max_batch: int = 16, token_budget: int = 256,
                  device: str | None = None, model: str | None = None, dtype: str = "float32",
                  prompt_lens: tuple[int, int] = (16, 256), output_lens: tuple[int, int] = (16, 128),
                  systems: tuple[str, ...] = SYSTEMS, warmup: bool = True,
                  engine_cls: type[LLMEngine] = LLMEngine, rounds: int = 1, shape: str | None = None,
                  shape_overrides: dict | None = None, workload_name: str = "default",
                  speculative: SpeculativeConfig | None = None, machine: Machine | None = None) -> dict:
    """Run the workload through `systems`, `rounds` times, alternating their order; the first system is the
    reference for the token comparison. Each system is reported from its median round; the ratios are the
    medians of the per-round ratios, each measured between runs minutes apart at most. `shape` (one of
    `benchmarks.shapes.SHAPES`) replaces the checkpoint with random weights of that shape, changed by
    `shape_overrides` if given (e.g. `{"num_hidden_layers": 2}`). With `machine` (benchmarks/roofline.py's
    measured peaks), each system's achieved GFLOP/s and GB/s on the workload's useful work, as fractions of them."""
    dev, torch_dtype = pick_device(device), DTYPES[dtype]
    with checkpoint_folder(model, shape, shape_overrides) as folder:
        ours = load_transformer(folder, dtype=torch_dtype, device=dev)
        vocab = prompt_vocab(folder, ours.cfg.vocab_size)
        hf_model = load_hf_model(folder, torch_dtype, dev) \
            if {"hf", "hf-cb", "hf-cb-defaults", "hf-lookup"} & set(systems) else None
        if workload_name == "repetitive":
            from mini_llm import load_tokenizer
            workload = Workload(*repetitive_prompts(ours, load_tokenizer(folder), num_requests, seed, output_lens,
                                                      engine_cls=LLMEngine))
        else:
            workload = make_workload(num_requests, seed, vocab, prompt_lens, output_lens)
    speculative = speculative or SpeculativeConfig()
    kv: dict = {}

    def engine(w: Workload) -> SystemResult:
        result, figures = run_engine(ours, w, max_batch, token_budget, engine_cls=engine_cls)
        kv.update(figures)
        return result

    runners = {"engine": engine, "sequential": lambda w: run_sequential(ours, w),
               "hf": lambda w: run_hf(hf_model, w, max_batch, pad_token_id=0),
               "hf-cb": lambda w: run_hf_cb(hf_model, w, max_batch, token_budget),
               "hf-cb-defaults": lambda w: run_hf_cb(hf_model, w, max_batch, token_budget, engine_limits=False)}
    runners |= {name: lambda w, cls=cls: run_engine(ours, w, max_batch, token_budget, engine_cls=cls)[0]
                for name, cls in ENGINE_VARIANTS.items()}
    runners["engine-ngram"] = lambda w: run_engine(ours, w, max_batch, token_budget, engine_cls=SpecDecodeEngine,
                                                   speculative=speculative)[0]
    runners["hf-lookup"] = lambda w: run_hf_lookup(hf_model, w, speculative.num_speculative_tokens)
    if warmup:  # first calls pay for allocator growth and lazy initialisation
        tiny = make_workload(2, seed + 1, vocab, (8, 16), (2, 4))
        for name in systems:
            runners[name](tiny)
    runs: dict[str, list[SystemResult]] = {name: [] for name in systems}
    for r in range(rounds):
        for name in systems if r % 2 == 0 else systems[::-1]:  # no system always runs first
            runs[name].append(runners[name](workload))
    results = {name: sorted(rs, key=lambda x: x.seconds)[(len(rs) - 1) // 2] for name, rs in runs.items()}
    reference = results[systems[0]].outputs
    report = {
        "config": {"num_requests": num_requests, "seed": seed, "max_batch": max_batch, "token_budget": token_budget,
                   "device": str(dev), "model": f"random {shape}" if shape else _shown(folder), "dtype": dtype,
                   "layers": ours.cfg.num_hidden_layers, "prompt_lens": list(prompt_lens),
                   "output_lens": list(output_lens), "torch_threads": torch.get_num_threads(),
                   "engine": engine_cls.__name__, "rounds": rounds, "workload": workload_name,
                   "speculative": vars(speculative) if {"engine-ngram", "hf-lookup"} & set(systems) else None},
        "systems": {name: summarize(r) | {"round_seconds": [x.seconds for x in runs[name]]}
                    for name, r in results.items()},
        "reference": systems[0],
        "mismatches": {name: [m for r in runs[name] for m in mismatches(reference, r.outputs)]
                       for name in systems if name != systems[0]},
        "kv_memory": kv if "engine" in systems else None,
        "outputs": {name: r.outputs for name, r in results.items()},
    }
    if machine is not None:
        report["roofline"] = roofline_fractions(report, ours.cfg, workload, DTYPES[dtype].itemsize, machine)
    if "engine" in results:
        # Same tokens in every run, so a throughput ratio is a ratio of seconds.
        per_round = lambda name, clock: [getattr(o, clock) / getattr(e, clock)  # noqa: E731
                                         for e, o in zip(runs["engine"], runs[name])]
        others = [name for name in systems if name != "engine"]
        report["round_ratios"] = {f"engine/{n}": per_round(n, "seconds") for n in others}
        report["ratios"] = {k: float(np.median(v)) for k, v in report["round_ratios"].items()}
        report["cpu_ratios"] = {f"engine/{n}": float(np.median(per_round(n, "cpu_seconds"))) for n in others}
        if "engine-ngram" in results:  # speculation's speed-ups: the other way round
            for n in (n for n in systems if n != "engine-ngram"):
                ratios = [getattr(o, "seconds") / getattr(e, "seconds") for e, o in zip(runs["engine-ngram"], runs[n])]
                report["round_ratios"][f"engine-ngram/{n}"] = ratios
                report["ratios"][f"engine-ngram/{n}"] = float(np.median(ratios))
                report["cpu_ratios"][f"engine-ngram/{n}"] = float(np.median(
                    [o.cpu_seconds / e.cpu_seconds for e, o in zip(runs["engine-ngram"], runs[n])]))
    return report


def roofline_fractions(report: dict, cfg, workload: Workload, dtype_bytes: int, machine: Machine) -> dict:
    """Per system: the workload's useful FLOPs and its bytes at that system's number of forward passes
    (benchmarks/roofline.py's `workload_cost`), over its time, as fractions of the machine's peaks."""
    out = {"machine": machine.as_dict(), "systems": {}}
    for name, summary in report["systems"].items():
        flops, moved = workload_cost(cfg, workload.prompts, workload.output_lens, summary["forward_passes"],
                                     dtype_bytes)
        out["systems"][name] = {"gflop": flops / 1e9, "gbytes": moved / 1e9,
                                **system_fractions(summary, flops, moved, machine)}
    return out


def format_roofline(roofline: dict) -> list[str]:
    lines = [format_machine(roofline["machine"]),
             f"{'system':<13}{'GFLOP':>8}{'GB':>8}{'GFLOP/s':>9}{'of peak':>9}{'GB/s':>7}{'of bw':>7}{'of bound':>10}"
             f"   (wall clock; then per CPU-second)"]
    for name, s in roofline["systems"].items():
        line = f"{name:<13}{s['gflop']:>8.1f}{s['gbytes']:>8.2f}"
        for clock in ("wall", "cpu"):
            if clock in s:
                c = s[clock]
                line += (f"{c['gflops']:>9.2f}{c['of_peak']:>9.1%}{c['gbps']:>7.2f}{c['of_bandwidth']:>7.1%}"
                         f"{c['of_bound']:>10.1%}")
        lines.append(line)
    return lines


def _shown(folder: Path) -> str:
    """A checkpoint folder as a report shows it: relative to the course when inside it (no machine's path)."""
    folder = Path(folder).resolve()
    return str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)


def format_report(report: dict) -> str:
    ms = lambda x: "-" if x is None else f"{1000 * x:.1f}"  # noqa: E731
    width = max(11, *(len(name) + 2 for name in report["systems"]))
    lines = [f"config: {json.dumps(report['config'])}", "",
             f"{'system':<{width}}{'tokens':>8}{'wall s':>8}{'tok/s':>8}{'cpu s':>8}{'tok/cpu-s':>10}{'TTFT p50':>10}"
             f"{'TTFT p99':>10}{'TBT p50':>9}{'TBT p99':>9}{'passes':>8}{'faults':>9}"
             "   (TTFT, TBT in ms; forward passes; minor page faults)"]
    for name, s in report["systems"].items():
        lines.append(f"{name:<{width}}{s['output_tokens']:>8}{s['seconds']:>8.2f}{s['tokens_per_s']:>8.1f}"
                     f"{s['cpu_seconds']:>8.2f}{s['tokens_per_cpu_s']:>10.1f}{ms(s['ttft_median_s']):>10}"
                     f"{ms(s['ttft_p99_s']):>10}{ms(s['tbt_median_s']):>9}{ms(s['tbt_p99_s']):>9}"
                     f"{s['forward_passes']:>8}{'-' if s['page_faults'] is None else s['page_faults']:>9}")
    for name, s in report["systems"].items():
        if "speculation" in s:
            sp = s["speculation"]
            rate = f"acceptance rate {sp['acceptance_rate_all']:.0%}, " if "acceptance_rate_all" in sp else ""
            per_request = [x for x in sp.get("acceptance_rate", []) if x is not None]
            spread = (f" (per request: {min(per_request):.0%} to {max(per_request):.0%})" if per_request else "")
            lines.append(f"{name}: {rate}mean accepted length {sp['mean_accepted_length_all']:.2f} tokens per "
                         f"step{spread}; TBT mean {ms(s['tbt_mean_s'])} ms")
    lines.append("")
    for k, v in report.get("ratios", {}).items():
        rounds = report["round_ratios"][k]
        lines.append(f"ratio {k}: {v:.2f}x wall-clock throughput, {report['cpu_ratios'][k]:.2f}x per CPU-second"
                     + (f" (medians; rounds: {', '.join(f'{x:.2f}x' for x in rounds)})" if len(rounds) > 1 else ""))
    for name, bad in report["mismatches"].items():
        lines.append(f"tokens {name} vs {report['reference']}: " + ("identical for every request" if not bad else
                                                      f"{len(bad)} request(s) differ: {bad[:5]}"))
    if "roofline" in report:
        lines += ["", "on this machine's roofline (the useful work: every token once; weights read once per pass):",
                  *format_roofline(report["roofline"])]
    kv = report["kv_memory"]
    if kv:
        lines.append(f"KV memory: peak {kv['peak_blocks']} blocks x {kv['block_bytes']} B = "
                     f"{kv['paged_peak_bytes'] / 2**20:.2f} MiB paged, against {kv['contiguous_bytes'] / 2**20:.2f} "
                     f"MiB for a contiguous max_len reservation "
                     f"({kv['paged_peak_bytes'] / kv['contiguous_bytes']:.0%})")
    return "\n".join(lines)


def length_range(text: str) -> tuple[int, int]:
    """`LO,HI` on the command line: an inclusive range of lengths."""
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give two integers LO,HI, e.g. 16,128") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= LO <= HI")
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=None, help="default 64; 8 with --shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-batch", type=int, default=16, help="engine max_num_seqs, HF static batch size and "
                                                              "hf-cb max_requests_per_batch")
    ap.add_argument("--token-budget", type=int, default=256, help="tokens per step (engine, hf-cb)")
    ap.add_argument("--prompt-lens", type=length_range, default=None,
                    help=f"LO,HI (default 16,256; {','.join(map(str, SHAPE_PROMPT_LENS))} with --shape)")
    ap.add_argument("--output-lens", type=length_range, default=None,
                    help=f"LO,HI (default 16,128; {','.join(map(str, SHAPE_OUTPUT_LENS))} with --shape)")
    ap.add_argument("--device", default=None, help="default: $MINI_LLM_DEVICE, else CUDA if available, else CPU")
    ap.add_argument("--model", default=None, help="checkpoint folder; default: $MINI_LLM_MODEL, else embedded")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES),
                    help="instead of a checkpoint: random weights of this model's shape, in a temporary folder")
    ap.add_argument("--shape-layers", type=int, default=None, help="with --shape: this many layers (default all)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--systems", default=None,
                    help=f"comma-separated, from {', '.join(SYSTEMS + EXTRA_SYSTEMS)} (hf-cb-defaults: transformers' "
                         "continuous batching configured by itself; engine-*: the engine before one of chapter 9's "
                         "fixes); the first is the reference for the token check. "
                         f"Default: {','.join(SYSTEMS)}; {','.join(SHAPE_SYSTEMS)} with --shape")
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every system this many times, alternating the order; report medians")
    ap.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                    help="instead of the systems: the engine with TP=N (1 thread per rank) against TP=1 with 1 and "
                         "N threads (benchmarks/tensor_parallel.py)")
    ap.add_argument("--json", type=Path, default=None, help="also write the full report (with outputs) here")
    ap.add_argument("--no-roofline", action="store_true",
                    help="skip measuring the machine's matmul peak and bandwidth (benchmarks/roofline.py) and the "
                         "systems' fractions of them")
    ap.add_argument("--workload", default="default", choices=WORKLOADS,
                    help="default: random prompt tokens; repetitive: the model retells a passage it wrote "
                         "(benchmarks/repetitive.py), where prompt lookup hits")
    ap.add_argument("--num-speculative-tokens", type=int, default=None,
                    help="drafts per step for engine-ngram and hf-lookup (default: SpeculativeConfig's)")
    ap.add_argument("--tokens-may-differ", action="store_true",
                    help="report token differences without failing (bf16/fp16: implementations that round "
                         "differently can break a near-tie of two logits differently)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    systems = tuple(args.systems.split(",")) if args.systems else SHAPE_SYSTEMS if args.shape else SYSTEMS
    unknown = [name for name in systems if name not in SYSTEMS + EXTRA_SYSTEMS]
    if unknown or len(set(systems)) != len(systems):
        ap.error(f"--systems {args.systems}: give each system once, from {', '.join(SYSTEMS + EXTRA_SYSTEMS)}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.num_requests is not None and args.num_requests < 1:
        ap.error("--num-requests must be at least 1")
    if args.shape and args.model:
        ap.error("--model and --shape both name the weights: give one")
    if args.shape_layers is not None and (not args.shape or args.shape_layers < 1):
        ap.error("--shape-layers needs --shape and at least 1")
    num_requests = args.num_requests or (8 if args.shape else 64)
    prompt_lens = args.prompt_lens or (SHAPE_PROMPT_LENS if args.shape else (16, 256))
    output_lens = args.output_lens or (SHAPE_OUTPUT_LENS if args.shape else (16, 128))
    if args.tensor_parallel > 1:
        from benchmarks.tensor_parallel import format_tensor_parallel, run_tensor_parallel

        report = run_tensor_parallel(args.tensor_parallel, num_requests, args.seed, args.max_batch,
                                     args.token_budget, args.model, DTYPES[args.dtype], prompt_lens, output_lens,
                                     args.rounds, args.shape,
                                     args.shape_layers and {"num_hidden_layers": args.shape_layers})
        print(format_tensor_parallel(report))
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0 if args.tokens_may_differ or not any(report["mismatches"].values()) else 1
    machine = None if args.no_roofline else measure_machine(pick_device(args.device), DTYPES[args.dtype])
    report = run_benchmark(num_requests, args.seed, args.max_batch, args.token_budget, args.device, args.model,
                           args.dtype, prompt_lens, output_lens, systems=systems, rounds=args.rounds,
                           shape=args.shape,
                           shape_overrides=args.shape_layers and {"num_hidden_layers": args.shape_layers},
                           workload_name=args.workload, speculative=SpeculativeConfig(
                               **{"num_speculative_tokens": args.num_speculative_tokens}
                               if args.num_speculative_tokens else {}), machine=machine)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if args.tokens_may_differ or not any(report["mismatches"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
