"""The throughput benchmark (benchmarks/throughput.py) on a tiny workload, and the batched paged-attention kernel
the engine runs, against the per-request reference kernel.

No timing is asserted here: speed is a ratio the benchmark measures, not a unit test. What is asserted is that
the systems produce the same tokens, that the workload is what was asked for, and that the report is whole.

These tests run on `pick_device()`: MINI_LLM_DEVICE, else CUDA when available, else the CPU
(`scripts/gpu_check.sh` runs them with MINI_LLM_DEVICE=cuda).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.shapes import shape_config, write_shape_checkpoint  # noqa: E402
from benchmarks.throughput import (  # noqa: E402
    ENGINE_VARIANTS, SHAPE_SYSTEMS, SYSTEMS, format_report, main, make_workload, mismatches, run_benchmark)
from mini_llm import EMBEDDED_MODEL, load_transformer, pick_device  # noqa: E402
from solutions.model_runner import ModelRunner  # noqa: E402
from framework.kv_cache_manager import blocks_needed  # noqa: E402
from framework.model_runner import ModelRunnerBase  # noqa: E402
from solutions.paged_attention import (  # noqa: E402
    GatherWorkspace, build_padded_groups, paged_attention, paged_attention_batched)

DEVICE = pick_device()
# fp32: the same dot products summed in a different order (on CUDA, also in tiles of another size)
TOL = 1e-5 if DEVICE.type == "cpu" else 1e-4


@pytest.fixture(scope="module")
def report():
    torch.manual_seed(0)
    return run_benchmark(num_requests=5, seed=3, max_batch=2, token_budget=24, device=str(DEVICE),
                         model=str(EMBEDDED_MODEL), prompt_lens=(4, 40), output_lens=(2, 9), warmup=False)


def test_every_system_produces_identical_tokens(report):
    assert set(report["outputs"]) == set(SYSTEMS) == {"engine", "hf", "hf-cb", "sequential"}
    assert report["mismatches"] == {"hf": [], "hf-cb": [], "sequential": []}
    engine = report["outputs"]["engine"]
    for name in ("hf", "hf-cb", "sequential"):
        assert report["outputs"][name] == engine, name


def test_every_request_generates_its_drawn_length(report):
    workload = make_workload(5, 3, list(range(10)), (4, 40), (2, 9))
    for name in SYSTEMS:
        assert [len(o) for o in report["outputs"][name]] == workload.output_lens
        assert report["systems"][name]["output_tokens"] == sum(workload.output_lens)
    lens = workload.output_lens  # static batches of 2: one prefill pass, then one per further token of the longest
    assert report["systems"]["hf"]["forward_passes"] == max(lens[0:2]) + max(lens[2:4]) + lens[4]
    assert report["systems"]["engine"]["forward_passes"] >= sum(lens) / 2  # at most 2 tokens a pass
    # transformers' continuous batching got the same limit of 2 requests a step (its default is 1024).
    assert report["systems"]["hf-cb"]["forward_passes"] >= sum(lens) / 2


def test_report_has_every_field(report):
    for name in SYSTEMS:
        s = report["systems"][name]
        assert s["seconds"] > 0 and s["tokens_per_s"] == pytest.approx(s["output_tokens"] / s["seconds"])
        assert s["tbt_median_s"] is not None and s["tbt_p99_s"] >= s["tbt_median_s"]
    for name in ("engine", "hf", "hf-cb"):
        assert 0 < report["systems"][name]["ttft_median_s"] <= report["systems"][name]["ttft_p99_s"]
    assert list(report["ratios"]) == ["engine/hf", "engine/hf-cb", "engine/sequential"]
    kv = report["kv_memory"]
    assert kv["paged_peak_bytes"] == kv["peak_blocks"] * kv["block_bytes"] <= kv["contiguous_bytes"]
    assert 0 < kv["peak_blocks"]
    assert "identical for every request" in format_report(report)


def test_engine_variants_run_side_by_side_over_rounds():
    """The engine before each of chapter 9's fixes runs as an extra system: same tokens, ratios from every round."""
    report = run_benchmark(num_requests=3, seed=4, max_batch=2, token_budget=24, device=str(DEVICE),
                           model=str(EMBEDDED_MODEL), prompt_lens=(4, 30), output_lens=(2, 6), warmup=False,
                           systems=("engine", *ENGINE_VARIANTS), rounds=2)
    assert report["mismatches"] == {name: [] for name in ENGINE_VARIANTS}
    assert set(report["ratios"]) == {f"engine/{name}" for name in ENGINE_VARIANTS}
    assert all(len(r) == 2 for r in report["round_ratios"].values())
    assert all(len(s["round_seconds"]) == 2 for s in report["systems"].values())


def test_shape_runs_random_weights_of_that_width_in_every_loader():
    """--shape: a random checkpoint of Qwen3-0.6B's width (one layer and a small vocabulary, to stay fast) that
    mini_llm and transformers both load; the identical tokens of the three systems show they hold the same weights."""
    report = run_benchmark(num_requests=2, seed=1, max_batch=2, token_budget=32, device=str(DEVICE),
                           prompt_lens=(4, 12), output_lens=(2, 4), systems=SHAPE_SYSTEMS, warmup=False,
                           shape="qwen3-0.6b", shape_overrides={"num_hidden_layers": 1, "vocab_size": 2048})
    assert report["mismatches"] == {"hf": [], "hf-cb": []}
    assert report["config"]["model"] == "random qwen3-0.6b" and report["config"]["layers"] == 1
    # 8 KV heads of 128 dims, K and V, 16 slots, 4 bytes (fp32), one layer
    assert report["kv_memory"]["block_bytes"] == 8 * 128 * 2 * 16 * 4


def test_shape_checkpoint_has_the_models_config_and_weights(tmp_path):
    cfg = shape_config("qwen3-0.6b")
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (151936, 1024, 3072, 28)
    heads = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.tie_word_embeddings)
    assert heads == (16, 8, 128, True)
    write_shape_checkpoint("qwen3-0.6b", tmp_path, num_hidden_layers=2, vocab_size=2048)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [2048, 1024]
        assert f.get_slice("model.layers.1.mlp.down_proj.weight").get_shape() == [1024, 3072]
    assert "lm_head.weight" not in names and not any(".layers.2." in n for n in names)
    with pytest.raises(FileExistsError):
        write_shape_checkpoint("qwen3-0.6b", tmp_path)
    with pytest.raises(ValueError, match="unknown shape"):
        shape_config("qwen3-70b")
    with pytest.raises(ValueError, match="cannot override"):
        shape_config("qwen3-0.6b", hidden_layers=2)


def test_cli_rejects_unknown_or_repeated_systems(capsys):
    for systems in ("engine,vllm", "engine,engine"):
        with pytest.raises(SystemExit):
            main(["--systems", systems])
        assert "give each system once" in capsys.readouterr().err


def test_workload_is_seeded_and_in_range():
    vocab = [3, 5, 7, 11]
    a, b = make_workload(20, 1, vocab, (16, 256), (16, 128)), make_workload(20, 1, vocab, (16, 256), (16, 128))
    assert a == b and a != make_workload(20, 2, vocab, (16, 256), (16, 128))
    assert all(16 <= len(p) <= 256 and set(p) <= set(vocab) for p in a.prompts)
    assert all(16 <= n <= 128 for n in a.output_lens)


def test_mismatches_names_request_and_position():
    assert mismatches([[1, 2, 3], [4]], [[1, 2, 3], [4]]) == []
    assert mismatches([[1, 2, 3], [4]], [[1, 9, 3], [4]]) == [{"request": 0, "position": 1, "lengths": (3, 3)}]
    assert mismatches([[1, 2]], [[1, 2, 3]]) == [{"request": 0, "position": 2, "lengths": (2, 3)}]


# ---------------------------------------------------------------- the batched kernel against the reference

def random_batch(seed: int, block_size: int, n_heads: int, n_kv_heads: int, q_lens: list[int], ctx_lens: list[int]):
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    num_blocks, hd = 64, 8
    kc = torch.randn(num_blocks, block_size, n_kv_heads, hd, generator=g)
    vc = torch.randn(num_blocks, block_size, n_kv_heads, hd, generator=g)
    blocks = rng.permutation(num_blocks).tolist()
    tables = []
    for ctx in ctx_lens:  # disjoint tables, sometimes longer than needed
        n = blocks_needed(ctx, block_size) + int(rng.integers(0, 2))
        tables.append(blocks[:n])
        blocks = blocks[n:]
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).tolist()
    q = torch.randn(qsl[-1], n_heads, hd, generator=g)
    return q.to(DEVICE), kc.to(DEVICE), vc.to(DEVICE), qsl, ctx_lens, tables


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_size,n_heads,n_kv_heads", [(4, 4, 2), (16, 4, 4), (3, 6, 2)])
def test_batched_kernel_equals_per_request_kernel(seed, block_size, n_heads, n_kv_heads):
    # Decodes, whole prompts, a chunk in mid-prompt and a request with no new tokens, in one mixed batch.
    q_lens = [1, 7, 1, 5, 0, 1, 12]
    ctx_lens = [9, 7, 30, 21, 6, 1, 12]
    q, kc, vc, qsl, ctx, tables = random_batch(seed, block_size, n_heads, n_kv_heads, q_lens, ctx_lens)
    groups = build_padded_groups(qsl, ctx, tables, block_size, DEVICE)
    assert len(groups) == 2  # decodes and the rest
    expected = paged_attention(q, kc, vc, qsl, ctx, tables)
    torch.testing.assert_close(paged_attention_batched(q, kc, vc, groups), expected, atol=TOL, rtol=TOL)


def test_gather_workspace_reused_across_calls_of_different_sizes():
    """One workspace serves every layer and step: a small batch after a large one reads no stale rows, and a
    larger one after that grows it."""
    workspace = GatherWorkspace()
    batches = [([1, 6, 1], [40, 6, 25]), ([1], [3]), ([1, 1, 9, 1], [50, 33, 20, 64])]
    for seed, (q_lens, ctx_lens) in enumerate(batches):
        q, kc, vc, qsl, ctx, tables = random_batch(seed, 4, 4, 2, q_lens, ctx_lens)
        groups = build_padded_groups(qsl, ctx, tables, 4, DEVICE)
        torch.testing.assert_close(paged_attention_batched(q, kc, vc, groups, workspace=workspace),
                                   paged_attention(q, kc, vc, qsl, ctx, tables), atol=TOL, rtol=TOL)


def test_runner_batched_and_per_request_kernels_give_the_same_logits():
    """The reference runner's batched kernel and the shell's per-request `paged_attention` give the same logits
    for a mixed batch."""
    model = load_transformer(EMBEDDED_MODEL, dtype=torch.float32, device=DEVICE)

    class PerRequestRunner(ModelRunner):
        attention_for_step = ModelRunnerBase.attention_for_step

    prompts = [list(range(5, 25)), list(range(40, 43)), list(range(60, 79))]
    logits = []
    for runner in (ModelRunner(model, 16, 4), PerRequestRunner(model, 16, 4)):
        runner.execute_model([(prompts[0], 0, [0, 1, 2, 3, 4], True), (prompts[1], 0, [5], True),
                              (prompts[2][:10], 0, [6, 7, 8], False)])
        step2 = runner.execute_model([([7], 20, [0, 1, 2, 3, 4, 9], True), ([8], 3, [5], True),
                                      (prompts[2][10:], 10, [6, 7, 8, 10, 11], True)])
        logits.append(step2)
    torch.testing.assert_close(logits[0], logits[1], atol=1e-4, rtol=1e-4)


def test_decode_step_benchmark_reports_every_part():
    """benchmarks/decode_step.py on 3 requests: every timed engine step is a pure decode of all of them (what the
    script claims to measure), and the report has every part."""
    from benchmarks import decode_step

    r = decode_step.run(batch=3, steps=3, rounds=1, device=str(DEVICE), model=str(EMBEDDED_MODEL))
    assert r["pure_decode"]
    assert r["engine_step_s"] > 0 and r["generate_step_s"] > 0 and r["engine_body_s"] > 0
    assert r["engine_python_s"] >= 0  # the forward is timed inside the step
    assert "ratio generate/engine per step" in decode_step.format_report(r)


def test_attention_gqa_benchmark_compares_equal_calls():
    """benchmarks/attention_gqa.py times two ways to one result: the mask lets each row see its own positions
    only, and enable_gqa equals K/V repeated per query head; the profiler names the kernel each took."""
    from benchmarks import attention_gqa

    query, key, value, mask = attention_gqa.group_inputs(3, 4, 16, (4, 2, 8), torch.float32, DEVICE)
    assert mask.shape == (3, 1, 4, 16) and mask.sum(-1).diff(dim=-1).eq(1).all()  # one more key per later row
    out = attention_gqa.with_gqa(query, key, value, mask)
    torch.testing.assert_close(out, attention_gqa.with_repeat(query, key, value, mask), atol=TOL, rtol=TOL)
    for way in (attention_gqa.with_gqa, attention_gqa.with_repeat):
        assert attention_gqa.sdpa_kernels(lambda: way(query, key, value, mask), DEVICE)


def test_against_transformers_reports_within_tolerance_on_the_embedded_model(tmp_path, capsys):
    """benchmarks/against_transformers.py on the embedded checkpoint: fp32 within its tolerance, and the engine's
    agreement printed with its count of rows (three: the last row of each request of its two steps)."""
    from benchmarks import against_transformers

    out = tmp_path / "r.json"
    assert against_transformers.main(["--model", str(EMBEDDED_MODEL), "--device", str(DEVICE),
                                      "--dtypes", "float32", "--json", str(out)]) == 0
    result = json.loads(out.read_text())[0]
    assert result["engine_rows"] == 3 and result["positions"] == 110
    assert max(result["forward_max_diff"], result["engine_max_diff"]) <= against_transformers.FP32_TOL
    assert "argmax agrees at 3 of 3 rows" in capsys.readouterr().out
