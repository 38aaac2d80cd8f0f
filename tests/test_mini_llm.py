"""mini_llm against transformers' own Qwen3, on the embedded checkpoint (or $MINI_LLM_MODEL), in fp32 on CPU."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch import nn

import mini_llm
import mini_llm.model as mm
from mini_llm import CheckpointError, Qwen3Config, Transformer, generate, load_tokenizer, load_transformer

TOL = 1e-4  # max abs logits difference accepted against transformers, fp32


@pytest.fixture(scope="module")
def model_dir():
    return mini_llm.model_path()


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def model(model_dir):
    return load_transformer(model_dir, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def batches(model_dir):
    """Several prompts: the standard ones one at a time, and random-token batches of 3 and 4 sequences."""
    from mini_llm.prompts import STANDARD_PROMPTS

    tok = load_tokenizer(model_dir)
    gen = torch.Generator().manual_seed(0)
    vocab = Qwen3Config.from_json(model_dir / "config.json").vocab_size
    out = [torch.tensor([tok.encode(p)]) for p in STANDARD_PROMPTS]
    out += [torch.randint(0, vocab, (3, 40), generator=gen), torch.randint(0, vocab, (4, 7), generator=gen)]
    return out


def max_diff_and_argmax(ours: Transformer, hf, batches) -> tuple[float, bool]:
    worst, same = 0.0, True
    with torch.no_grad():
        for ids in batches:
            a, b = ours(ids), hf(ids).logits
            worst = max(worst, (a - b).abs().max().item())
            same &= bool((a.argmax(-1) == b.argmax(-1)).all())
    return worst, same


def test_logits_match_transformers(model, hf_model, batches):
    worst, same_argmax = max_diff_and_argmax(model, hf_model, batches)
    print(f"max |mini_llm - transformers| = {worst:.2e}")
    assert worst <= TOL and same_argmax


def test_output_layer_in_slices_is_the_one_product(model, batches, monkeypatch):
    """On CPU the output layer runs slice by slice over the vocabulary (the embedded model's 1,516 rows fit in
    one slice, so the slice is made smaller here): every logit is bit for bit the one product's."""
    with torch.no_grad():
        whole = [model(ids) for ids in batches]
        monkeypatch.setattr(mm, "VOCAB_SLICE", 500)  # 4 slices, the last one shorter
        assert all(torch.equal(model(ids), w) for ids, w in zip(batches, whole))


def interleaved_rope(x, cos, sin):
    """A classic mistake: rotating adjacent pairs (GPT-J style) where Qwen3 rotates halves."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([-x2, x1], dim=-1).flatten(-2)
    return x * cos + rotated * sin


def tiled_repeat_kv(x, n_rep, head_dim_axis=-3):
    """A classic mistake: query head h reads KV head h % n_kv instead of h // n_rep."""
    reps = [1] * x.dim()
    reps[head_dim_axis] = n_rep
    return x.repeat(*reps)


def _wrong_eps(model):
    for m in model.modules():
        if isinstance(m, mini_llm.RMSNorm):
            m.eps = 1e-2  # e.g. eps read from the wrong field


def _no_qk_norm(model):
    for layer in model.model.layers:
        layer.self_attn.q_norm = nn.Identity()
        layer.self_attn.k_norm = nn.Identity()


def _untied_head(model):
    torch.manual_seed(0)
    model.lm_head = nn.Linear(model.cfg.hidden_size, model.cfg.vocab_size, bias=False)


PERTURBATIONS = {
    "rmsnorm_eps": (_wrong_eps, None),
    "qk_norm": (_no_qk_norm, None),
    "rope": (None, ("apply_rope", interleaved_rope)),
    "gqa_mapping": (None, ("repeat_kv", tiled_repeat_kv)),
    "tied_embeddings": (_untied_head, None),
}


@pytest.mark.parametrize("name", list(PERTURBATIONS))
def test_comparison_catches_mistake(name, model_dir, hf_model, batches, monkeypatch):
    """The equality test above is only worth something if each plausible mistake breaks it."""
    edit, patch = PERTURBATIONS[name]
    wrong = load_transformer(model_dir, dtype=torch.float32, device="cpu")
    if edit:
        edit(wrong)
    if patch:
        monkeypatch.setattr(mm, *patch)
    worst, same_argmax = max_diff_and_argmax(wrong, hf_model, batches)
    print(f"{name}: max diff {worst:.2e}, same argmax {same_argmax}")
    assert worst > TOL


def test_kv_cache_generation_equals_recompute(model, batches):
    for ids in batches[:3] + [batches[-1][:2]]:
        new = generate(model, ids.tolist(), 24)
        seqs = ids.tolist()
        with torch.no_grad():
            for _ in range(24):
                nxt = model(torch.tensor(seqs))[:, -1].argmax(-1).tolist()
                seqs = [s + [t] for s, t in zip(seqs, nxt)]
        assert new == [s[ids.shape[1]:] for s in seqs]


def test_seeded_sampling_is_reproducible(model, batches):
    prompt = batches[0][0].tolist()
    a = generate(model, prompt, 20, temperature=1.0, seed=7)
    b = generate(model, prompt, 20, temperature=1.0, seed=7)
    c = generate(model, prompt, 20, temperature=1.0, seed=8)
    assert a == b and a != c


def test_generation_stops_at_eos(model, batches):
    prompt = batches[0][0].tolist()
    free = generate(model, prompt, 10)
    eos = free[3]  # pretend the 4th token is end-of-sequence
    assert generate(model, prompt, 10, eos_token_id=eos) == free[: free.index(eos) + 1]


def test_tokenizer_roundtrip(model_dir):
    tok = load_tokenizer(model_dir)
    text = "Once upon a time, a fox found a red ball."
    assert tok.decode(tok.encode(text)) == text


# --- clear errors for bad checkpoints -------------------------------------------------------------------


def _copy(model_dir, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(model_dir, dst)
    return dst


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_transformer(tmp_path / "nope")


def test_missing_weights(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path)
    for f in d.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(CheckpointError, match="safetensors"):
        load_transformer(d)


def test_missing_config(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        load_transformer(d)


def test_unsupported_architecture(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama")
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unsupported architecture"):
        load_transformer(d)


def test_the_model_is_built_in_the_asked_dtype(model_dir, model, monkeypatch):
    """bf16 weights are built in bf16, not in fp32 and then cast (which held twice the weights for a moment); the
    process's default dtype is torch's again afterwards; the weights are the fp32 model's, rounded."""
    built = []
    init = mm.Transformer.__init__
    monkeypatch.setattr(mm.Transformer, "__init__", lambda self, cfg: (init(self, cfg), built.append(
        {p.dtype for p in self.parameters()}))[0])
    bf16 = load_transformer(model_dir, dtype=torch.bfloat16, device="cpu")
    assert built == [{torch.bfloat16}] and torch.get_default_dtype() == torch.float32
    for (name, p), q in zip(bf16.named_parameters(), model.parameters()):
        assert torch.equal(p, q.to(torch.bfloat16)), name


def test_mismatched_shapes(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] += 8
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="shape"):
        load_transformer(d)


def test_missing_tokenizer(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (d / name).unlink(missing_ok=True)
    with pytest.raises(CheckpointError, match="tokenizer"):
        load_tokenizer(d)


# --- config and settings ----------------------------------------------------------------------------------


def test_config_reads_rope_theta_from_either_place():
    base = dict(architectures=["Qwen3ForCausalLM"], vocab_size=10, hidden_size=8, intermediate_size=16,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=4)
    assert Qwen3Config.from_dict({**base, "rope_theta": 5.0}).rope_theta == 5.0
    rope = {"rope_type": "default", "rope_theta": 7.0}
    assert Qwen3Config.from_dict({**base, "rope_parameters": rope}).rope_theta == 7.0
    with pytest.raises(CheckpointError, match="multiple"):
        Qwen3Config.from_dict({**base, "num_key_value_heads": 3, "num_attention_heads": 4})
    with pytest.raises(CheckpointError, match="rope"):
        Qwen3Config.from_dict({**base, "rope_parameters": {"rope_type": "yarn", "rope_theta": 7.0}})


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MINI_LLM_MODEL", str(tmp_path))
    assert mini_llm.model_path() == tmp_path
    monkeypatch.delenv("MINI_LLM_MODEL")
    assert mini_llm.model_path() == mini_llm.EMBEDDED_MODEL
    monkeypatch.setenv("MINI_LLM_DEVICE", "cpu")
    assert mini_llm.pick_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        monkeypatch.setenv("MINI_LLM_DEVICE", "cuda")
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            mini_llm.pick_device()
