"""Online serving, in the manner of `vllm bench serve`: servers side by side on one seeded workload.

Each system is an OpenAI-compatible server started here on 127.0.0.1, one after the other, on the same model
folder, dtype and thread count:

  course        python -m course.serve: the online loop (AsyncLLM) around the engine, continuous batching
  transformers  transformers serve --continuous-batching (needs `accelerate`, a dependency of the course)
  baseline      python -m course.serve --max-num-seqs 1: the same server one request at a time

For each request rate (Poisson arrivals, or `inf`: all at once), optionally capped at --max-concurrency requests
in flight, every request is streamed through the openai async client (greedy, max_tokens drawn per request, the
end-of-sequence token stops it). Reported per system and rate, with vLLM's definitions
(`calculate_metrics` in vllm/benchmarks/serve.py): TTFT (first text), TPOT ((latency - TTFT) / (output tokens -
1)), ITL (time between two chunks) and E2E latency, mean, p50 and p99, in ms; request and output-token
throughput; goodput, the requests per second that meet every SLO of --goodput. The greedy texts must be the same
on every system (checked; a difference is printed and makes the exit status 1). A system that cannot run (a
missing package, a server that does not start) is reported as skipped, with why, and the others run on: the
summary and the JSON are written whatever happens.

    python benchmarks/serving.py                                      # 3 systems, rates 2 8 32, 48 prompts
    python benchmarks/serving.py --systems course baseline --request-rate 4 inf --num-prompts 32
    python benchmarks/serving.py --request-rate inf --max-concurrency 8 --goodput ttft:500 tpot:50
    python benchmarks/serving.py --json results.json                  # every figure, for a plot
    python benchmarks/serving.py --ignore-eos --max-concurrency 4     # exactly max_tokens each, as guidellm sends
    python benchmarks/serving.py --request-rate 4 --burstiness inf    # one request every 250 ms (guidellm's constant)

The machine may be shared: the figures are noisy; compare systems within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SYSTEMS = ("course", "transformers", "baseline")
DEFAULT_RATES, DEFAULT_NUM_PROMPTS = (2.0, 8.0, 32.0), 48  # what a run with no options sends to each system
REQUIRES = {"transformers": "accelerate"}  # system -> the package its server needs beyond the course's own
STORY = ("once upon a time there was a little girl named lucy who lived in a quiet forest with her dog and a cat "
         "one day the sun was warm and they went to play by the river")
WORDS = STORY.split()


@dataclass
class RequestResult:
    prompt: str
    ok: bool = False
    text: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str = ""


def workload(num_prompts: int, seed: int, tokenizer, min_tokens: int, max_tokens: int) -> list[tuple[str, int, int]]:
    """(prompt, prompt tokens, max_tokens) per request: seeded story-word prompts of 4 to 48 words."""
    rng = random.Random(seed)
    out = []
    for _ in range(num_prompts):
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 48))).capitalize()
        out.append((prompt, len(tokenizer.encode(prompt)), rng.randint(min_tokens, max_tokens)))
    return out


# ----------------------------------------------------------------------------------------------------------
# Servers


def server_command(system: str, model: str, port: int, dtype: str, threads: int) -> list[str]:
    if system == "transformers":
        return [str(Path(sys.executable).parent / "transformers"), "serve", "--continuous-batching", "--dtype",
                dtype, "--device", "cpu", "--port", str(port), "--host", "127.0.0.1", model]
    command = [sys.executable, "-m", "course.serve", "--model", model, "--dtype", dtype, "--threads", str(threads),
               "--port", str(port), "--served-model-name", model, "--max-pending", "100000"]
    return command + (["--max-num-seqs", "1"] if system == "baseline" else [])


def free_port(preferred: int) -> int:
    """`preferred` if nothing listens or connects on it, else one the system picks: the next system's port may be
    one the client's own connections took from the ephemeral range."""
    import socket

    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


class Server:
    def __init__(self, system: str, model: str, port: int, dtype: str, threads: int) -> None:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PYTHONPATH=str(ROOT))
        self.system, self.base = system, f"http://127.0.0.1:{port}"
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"serving-{system}-{port}.log"
        self.log = open(log, "w")  # noqa: SIM115 - the server's output, open while it runs
        self.proc = subprocess.Popen(server_command(system, model, port, dtype, threads), env=env, cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.system} server exited ({self.proc.returncode}); see {self.log.name}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.system} server not ready after {timeout} s; see {self.log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# ----------------------------------------------------------------------------------------------------------
# The client


async def one_request(client, model: str, prompt: str, max_tokens: int, tokenizer, ignore_eos: bool = False
                      ) -> RequestResult:
    result, start = RequestResult(prompt), time.perf_counter()
    last = None
    extra = {"ignore_eos": True} if ignore_eos else None  # vLLM's extension, as `vllm bench serve --ignore-eos`
    try:
        stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body=extra)
        async for chunk in stream:
            now = time.perf_counter()
            text = chunk.choices[0].text if chunk.choices else ""
            if text:
                if last is None:
                    result.ttft = now - start
                else:
                    result.itl.append(now - last)
                last = now
                result.text += text
            if chunk.usage is not None:
                result.output_tokens = chunk.usage.completion_tokens
        result.latency = time.perf_counter() - start
        result.output_tokens = result.output_tokens or len(tokenizer.encode(result.text))
        result.ok = last is not None
    except Exception as error:  # noqa: BLE001 - a failed request is counted, not fatal
        result.error = f"{type(error).__name__}: {error}"
    return result


def arrival_gap(rng: random.Random, rate: float, burstiness: float) -> float:
    """Seconds to the next request, as vLLM's `get_request` (vllm/benchmarks/serve.py at
    b31e9326a7d9394aab8c767f8ebe225c65594b60): gamma distributed with mean 1 / rate and shape burstiness (1: Poisson
    arrivals; inf: one every 1 / rate s)."""
    return 1 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, 1 / (rate * burstiness))


async def run_rate(base: str, model: str, requests: list[tuple[str, int, int]], rate: float,
                   max_concurrency: int | None, seed: int, tokenizer, ignore_eos: bool = False,
                   burstiness: float = 1.0) -> tuple[list[RequestResult], float]:
    import openai

    rng = random.Random(seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="-", max_retries=0, timeout=600) as client:
        async def limited(prompt: str, max_tokens: int) -> RequestResult:
            if limit is None:
                return await one_request(client, model, prompt, max_tokens, tokenizer, ignore_eos)
            async with limit:
                return await one_request(client, model, prompt, max_tokens, tokenizer, ignore_eos)

        start, tasks = time.perf_counter(), []
        for prompt, _, max_tokens in requests:
            tasks.append(asyncio.ensure_future(limited(prompt, max_tokens)))
            if not math.isinf(rate):
                await asyncio.sleep(arrival_gap(rng, rate, burstiness))
        results = await asyncio.gather(*tasks)
    return results, time.perf_counter() - start


def metrics(results: list[RequestResult], requests: list[tuple[str, int, int]], duration: float,
            goodput: dict[str, float]) -> dict:
    """vLLM's serving metrics (ms for latencies)."""
    ok = [(r, n_in) for r, (_, n_in, _) in zip(results, requests) if r.ok]
    ttft = [r.ttft * 1e3 for r, _ in ok]
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) * 1e3 for r, _ in ok if r.output_tokens > 1]
    itl = [x * 1e3 for r, _ in ok for x in r.itl]
    e2e = [r.latency * 1e3 for r, _ in ok]
    good = sum(1 for r, _ in ok if r.ttft * 1e3 <= goodput.get("ttft", math.inf) and
               (r.output_tokens <= 1 or (r.latency - r.ttft) / (r.output_tokens - 1) * 1e3 <=
                goodput.get("tpot", math.inf)) and r.latency * 1e3 <= goodput.get("e2el", math.inf))
    out = {"completed": len(ok), "failed": len(results) - len(ok), "duration_s": duration,
           "total_input": sum(n for _, n in ok), "total_output": sum(r.output_tokens for r, _ in ok),
           "request_throughput": len(ok) / duration, "goodput": good / duration,
           "output_throughput": sum(r.output_tokens for r, _ in ok) / duration,
           "total_token_throughput": sum(r.output_tokens + n for r, n in ok) / duration}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        v = np.array(values or [math.nan])
        out.update({f"mean_{name}_ms": float(v.mean()), f"p50_{name}_ms": float(np.percentile(v, 50)),
                    f"p99_{name}_ms": float(np.percentile(v, 99))})
    return out


def server_figures(base: str) -> dict[str, float]:
    """The server's own counters and histograms (/metrics, prometheus_client's text format), summed over their
    labels; a histogram bucket as "<name>_bucket@<le>"."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(base + "/metrics", timeout=30).text):
        for sample in family.samples:
            key = sample.name.removeprefix("mini_llm:") + (f"@{sample.labels['le']}" if "le" in sample.labels else "")
            out[key] = out.get(key, 0.0) + sample.value
    return out


def served(before: dict[str, float], after: dict[str, float]) -> dict:
    """What the server itself measured between two readings of `server_figures`: requests, tokens, mean TTFT and
    latency from its arrival to its first and last token, and a bound on the slowest request (the least histogram
    bucket holding every request)."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    n = delta["e2e_request_latency_seconds_count"]

    def slowest(metric: str) -> float:
        buckets = sorted((float(k.split("@")[1]), v) for k, v in delta.items() if k.startswith(metric + "_bucket@"))
        return next(le for le, count in buckets if count >= n)

    return {"requests": n, "tokens": delta["generation_tokens_total"],
            "mean_ttft_ms": delta["time_to_first_token_seconds_sum"] / n * 1e3,
            "mean_e2e_ms": delta["e2e_request_latency_seconds_sum"] / n * 1e3,
            "max_ttft_s": slowest("time_to_first_token_seconds"), "max_e2e_s": slowest("e2e_request_latency_seconds")}


def means_over_any(k: int, server: dict, name: str) -> tuple[float, float]:
    """The least and greatest mean (ms) of `name` ("ttft" or "e2e") over any k of the requests the server timed
    (`served`): a tool that reports k of them averages over those k only. The n - k left out are each at most the
    slowest bucket and at least 0."""
    n, total = server["requests"], server[f"mean_{name}_ms"] * server["requests"]
    return max(0.0, total - (n - k) * server[f"max_{name}_s"] * 1e3) / k, total / k


def parse_goodput(items: list[str]) -> dict[str, float]:
    slos = {}
    for item in items:
        name, _, value = item.partition(":")
        if name not in ("ttft", "tpot", "e2el") or not value:
            raise SystemExit(f"--goodput takes ttft:MS, tpot:MS or e2el:MS, got {item!r}")
        slos[name] = float(value)
    return slos


def table(rows: list[dict]) -> str:
    head = ("system", "rate", "done", "req/s", "good/s", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
            "ITL p99", "E2E p99")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        m = r["metrics"]
        lines.append("| " + " | ".join([r["system"], str(r["rate"]), str(m["completed"]),
                                        f"{m['request_throughput']:.2f}", f"{m['goodput']:.2f}",
                                        f"{m['output_throughput']:.0f}"] +
                                       [f"{m[k]:.0f}" for k in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms",
                                                                "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms")]) + " |")
    return "\n".join(lines)


def missing(system: str) -> str | None:
    """Why `system` cannot run here, with the line that fixes it; None if it can."""
    package = REQUIRES.get(system)
    if package is not None and importlib.util.find_spec(package) is None:
        return f"needs {package}: pip install {package}"
    return None


def run_system(system: str, model: str, port: int, requests: list[tuple[str, int, int]], args: argparse.Namespace,
               slos: dict[str, float], tokenizer, rows: list[dict], texts: dict) -> None:
    """Every rate on one system's server, appending a row (and its texts) per rate as it finishes."""
    server = Server(system, model, free_port(port), args.dtype, args.threads)
    try:
        server.wait_ready()
        asyncio.run(run_rate(server.base, model, requests[:2], math.inf, None, args.seed, tokenizer))  # warm
        for rate in args.request_rate:
            results, duration = asyncio.run(run_rate(server.base, model, requests, rate, args.max_concurrency,
                                                     args.seed, tokenizer, args.ignore_eos, args.burstiness))
            rows.append({"system": system, "rate": rate, "metrics": metrics(results, requests, duration, slos),
                         "errors": sorted({r.error for r in results if r.error})[:3]})
            texts[system, rate] = [r.text for r in results]
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        server.stop()


def run(args: argparse.Namespace, rows: list[dict], skipped: dict[str, str]) -> list[str]:
    """Every system at every rate, into `rows` (system, rate, metrics, errors) and `skipped` (system: why), as it
    goes, so that an interrupted run keeps what it measured; the greedy texts that differ between systems."""
    from mini_llm import load_tokenizer
    from mini_llm.loading import model_path

    model = str(model_path(args.model))
    tokenizer = load_tokenizer(model)
    requests = workload(args.num_prompts, args.seed, tokenizer, args.min_tokens, args.max_tokens)
    slos = parse_goodput(args.goodput)
    texts = {}
    for i, system in enumerate(args.systems):
        why = missing(system)
        if why is None:
            try:
                run_system(system, model, args.port + i, requests, args, slos, tokenizer, rows, texts)
            except RuntimeError as error:  # a server that exits or never answers: the others still run
                why = str(error)
        if why is not None:
            skipped[system] = why
            print(f"{system}: skipped ({why})", flush=True)
    mismatches = []
    first = next(iter(texts), None)
    for key, got in texts.items():
        for j, (a, b) in enumerate(zip(texts[first], got)):
            if a != b:
                at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                mismatches.append(f"request {j}: {first} and {key} differ from character {at}: "
                                  f"{a[max(at - 20, 0):at + 20]!r} vs {b[max(at - 20, 0):at + 20]!r}")
    return mismatches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--request-rate", nargs="+", type=float, default=list(DEFAULT_RATES),
                    help="requests per second (Poisson); inf sends them all at once")
    ap.add_argument("--max-concurrency", type=int, default=None)
    ap.add_argument("--burstiness", type=float, default=1.0,
                    help="shape of the gamma-distributed gaps between arrivals, as vLLM's: 1 is Poisson, inf is "
                         "one request every 1/rate seconds")
    ap.add_argument("--num-prompts", type=int, default=DEFAULT_NUM_PROMPTS)
    ap.add_argument("--min-tokens", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--goodput", nargs="*", default=["ttft:500", "tpot:50"], metavar="NAME:MS")
    ap.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens per request")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: the embedded model)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args()
    rows, skipped, mismatches = [], {}, []
    try:
        mismatches = run(args, rows, skipped)
    finally:  # the summary and the JSON of what ran, even when a run is interrupted
        print(f"\n{args.num_prompts} prompts, seed {args.seed}, {args.dtype}, {args.threads} thread(s), goodput "
              f"SLOs {' '.join(args.goodput)} (ms)\n" + table(rows))
        for r in rows:
            if r["errors"]:
                print(f"{r['system']} at {r['rate']}: errors {r['errors']}")
        for system, why in skipped.items():
            print(f"{system}: skipped ({why})")
        print("greedy texts identical across systems and rates" if not mismatches else "\n".join(mismatches[:10]))
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "skipped": skipped,
                                                   "mismatches": mismatches}, indent=1, default=str))
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
