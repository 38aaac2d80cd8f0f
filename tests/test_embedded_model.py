"""The embedded tiny checkpoint (mini_llm/models/tiny-qwen3): it loads, it is small, it writes English that
does not loop, and its model card states the figures of the files beside it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import mini_llm
from mini_llm import EMBEDDED_MODEL, generate, load_tokenizer, load_transformer
from mini_llm.prompts import STANDARD_PROMPTS

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 10 * 1000 * 1000
NEW_TOKENS = 60
LOOP_NGRAM = 8  # a repeated 8-token window inside 60 new tokens means the text went round in a loop


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_transformer(EMBEDDED_MODEL, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(EMBEDDED_MODEL)


@pytest.fixture(scope="module")
def continuations(model, tokenizer):
    out = {}
    for prompt in STANDARD_PROMPTS:
        ids = tokenizer.encode(prompt)
        out[prompt] = generate(model, ids, NEW_TOKENS, temperature=0.0, eos_token_id=model.cfg.eos_token_id)
    return out


@pytest.fixture(scope="module")
def generator_vocabulary() -> set[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import story_generator
    finally:
        sys.path.pop(0)
    return story_generator.vocabulary()


def test_folder_is_complete_and_small():
    names = {p.name for p in EMBEDDED_MODEL.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= names
    total = sum(p.stat().st_size for p in EMBEDDED_MODEL.iterdir() if p.is_file())
    assert total <= MAX_BYTES, f"embedded model folder is {total:,} bytes, over the 10 MB limit"


def test_loads_in_mini_llm_with_gqa_and_tied_embeddings(model):
    cfg = model.cfg
    assert cfg.architectures == ["Qwen3ForCausalLM"]
    assert cfg.num_attention_heads > cfg.num_key_value_heads > 0  # grouped-query attention
    assert cfg.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert cfg.eos_token_id is not None and cfg.max_position_embeddings == 2048
    raw = json.loads((EMBEDDED_MODEL / "config.json").read_text())
    assert raw["model_type"] == "qwen3" and raw["rope_parameters"]["rope_type"] == "default"
    assert raw["rope_theta"] == raw["rope_parameters"]["rope_theta"]
    with safe_open(str(EMBEDDED_MODEL / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert load_transformer(EMBEDDED_MODEL, device="cpu").dtype == torch.bfloat16  # shipped dtype by default


def test_tokenizer_round_trips(tokenizer, model):
    texts = STANDARD_PROMPTS + [
        'Tom said, "Where is my red ball?" and looked under the bed.',
        "Numbers 123, symbols #@%&, tabs\tand\nnewlines, unicode: café, naïve, 日本語, 🦊.",
        "  leading and trailing spaces  ",
    ]
    for text in texts:
        ids = tokenizer.encode(text)
        assert all(0 <= i < model.cfg.vocab_size for i in ids)
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == model.cfg.eos_token_id
    assert tokenizer.encode("<|endoftext|>") == [model.cfg.eos_token_id]


def test_greedy_continuations_do_not_loop(continuations):
    for prompt, new in continuations.items():
        assert len(new) >= 20, f"{prompt!r}: only {len(new)} tokens before end of text"
        grams = [tuple(new[i : i + LOOP_NGRAM]) for i in range(len(new) - LOOP_NGRAM + 1)]
        repeated = {g for g in grams if grams.count(g) > 1}
        assert not repeated, f"{prompt!r}: an {LOOP_NGRAM}-token window repeats, the continuation loops"
        assert len(set(new)) >= 0.4 * len(new), f"{prompt!r}: too few distinct tokens"


def test_greedy_continuations_are_english(continuations, tokenizer, generator_vocabulary):
    for prompt, new in continuations.items():
        text = tokenizer.decode(new, skip_special_tokens=True)
        words = re.findall(r"[A-Za-z]+", text)
        assert len(words) >= 10, f"{prompt!r} -> {text!r}"
        known = sum(w.lower() in generator_vocabulary for w in words)
        assert known >= 0.9 * len(words), f"{prompt!r} -> {text!r}: too many unknown words"


def test_model_sometimes_ends_with_eos(model, tokenizer):
    """The engine relies on a model that emits EOS: a story's last sentence leads to <|endoftext|>."""
    ids = tokenizer.encode("Once upon a time, a little fox named Pip lived in a quiet forest.")
    new = generate(model, ids, 300, temperature=0.0, eos_token_id=model.cfg.eos_token_id)
    assert new[-1] == model.cfg.eos_token_id, "no <|endoftext|> within 300 greedy tokens"


def test_model_card_states_the_files_figures():
    card = (EMBEDDED_MODEL / "README.md").read_text()
    with safe_open(str(EMBEDDED_MODEL / "model.safetensors"), "pt") as f:
        n_params = sum(torch.Size(f.get_slice(k).get_shape()).numel() for k in f.keys())
    stated = int(re.search(r"\| parameters \| ([\d,]+)", card).group(1).replace(",", ""))
    assert stated == n_params
    for path in EMBEDDED_MODEL.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`: {path.stat().st_size:,} bytes" in card, f"card misstates {path.name}"
    for prompt in STANDARD_PROMPTS:
        assert prompt in card
    assert "python scripts/train_tiny_model.py" in card
    assert re.search(r"Held-out loss:\*\* \d+\.\d{4}", card)


def test_loads_in_transformers_with_the_same_logits(model):
    transformers = pytest.importorskip("transformers")
    hf = transformers.Qwen3ForCausalLM.from_pretrained(str(EMBEDDED_MODEL), dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 1000, 12, 8]])
    with torch.no_grad():
        ours = model(ids)
        theirs = hf(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert mini_llm.Qwen3Config.from_json(EMBEDDED_MODEL / "config.json").vocab_size == hf.config.vocab_size
