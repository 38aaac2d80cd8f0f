"""Exercises 125 (block pool), 126 (slot mapping) and 127 (paged attention): the reference passes in the sandbox,
the untouched starter says "not implemented yet", every deliberately wrong solution in
tests/judge_cases/<slug>/wrong_*.py is rejected with the diagnosis its EXPECT line names, and differently written
correct ones (right_*.py) are accepted. The hidden tests' own oracles are checked against torch where they can be."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import judge
from judge.hidden import block_pool, paged_attention, slot_mapping
from judge.loader import load_file

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases"
EXERCISES = {125: ("block_pool", block_pool), 126: ("slot_mapping", slot_mapping),
             127: ("paged_attention", paged_attention)}


def fixtures(prefix: str) -> list[tuple[int, Path]]:
    return [(ex, p) for ex, (folder, _) in EXERCISES.items()
            for p in sorted((CASES_DIR / folder).glob(f"{prefix}_*.py"))]


WRONG, RIGHT = fixtures("wrong"), fixtures("right")



@pytest.mark.parametrize("ex_id", EXERCISES)
def test_registered_with_statement_and_enough_fixtures(ex_id):
    ex = judge.get_exercise(ex_id)
    assert judge.get_exercise(ex.slug) == ex
    assert (ROOT / ex.statement).is_file() and (ROOT / ex.practice_file).is_file()
    assert sum(1 for e, _ in WRONG if e == ex_id) >= 8 and sum(1 for e, _ in RIGHT if e == ex_id) >= 2


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_reference_passes_every_case_in_the_sandbox(ex_id):
    report = judge.grade(ex_id, reference=True)
    n = len(EXERCISES[ex_id][1].CASES)
    assert report.ok and len(report.results) == n, report.text()
    assert report.text().splitlines()[-1] == f"{n} passed, 0 failed"


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_untouched_starter_says_not_implemented(ex_id):
    ex = judge.get_exercise(ex_id)
    if "raise NotImplementedError" not in (ROOT / ex.practice_file).read_text():
        pytest.skip(f"{ex.practice_file} has been filled in")
    report = judge.grade(ex_id)
    assert report.passed == 0 and report.failed == len(EXERCISES[ex_id][1].CASES), report.text()
    assert {r.verdict for r in report.results} == {"not implemented"}, report.text()
    assert "not implemented yet" in report.text() and ex.practice_file in report.text()


@pytest.mark.parametrize("ex_id,path", WRONG, ids=[p.stem for _, p in WRONG])
def test_wrong_solution_is_rejected_with_its_diagnosis(ex_id, path):
    report = judge.grade_inprocess(ex_id, load_file(path))
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()


@pytest.mark.parametrize("ex_id,path", RIGHT, ids=[p.stem for _, p in RIGHT])
def test_correct_variant_is_accepted(ex_id, path):
    report = judge.grade_inprocess(ex_id, load_file(path))
    assert report.ok, report.text()


# ---------------------------------------------------------------- failures are shown small

def test_block_pool_failure_is_a_short_script():
    report = judge.grade_inprocess(125, load_file(CASES_DIR / "block_pool" / "wrong_repeats_not_counted.py"),
                                   cases=["random scripts with illegal calls mixed in"])
    shown = report.results[0].details["input"].splitlines()
    assert len(shown) <= 3 and "free([" in shown[-1], shown  # BlockPool(n), allocate, the bad free


def test_paged_attention_failure_is_one_small_request():
    report = judge.grade_inprocess(127, load_file(CASES_DIR / "paged_attention" / "wrong_no_causal_mask.py"),
                                   cases=["mixed prefills, chunks and decodes"])
    shown = report.results[0].details["input"]
    qsl = eval(re.search(r"query_start_loc=(\[[^\]]*\])", shown).group(1))  # noqa: S307 - our own output
    assert len(qsl) == 2 and qsl[1] <= 2, shown  # one request, at most two queries
    assert "no causal mask" in report.results[0].details["hint"]


# ---------------------------------------------------------------- the oracles themselves

def test_block_pool_spec_agrees_with_a_plain_reading_of_the_contract():
    spec = block_pool.Spec(4)
    assert spec.apply(("allocate", 3)) == (None, [0, 1, 2])
    assert spec.apply(("free", [2, 0])) == (None, None) and spec.queue == [3, 2, 0]
    assert spec.apply(("incref", 2)) == (None, None) and spec.queue == [3, 0] and spec.ref_cnt == [0, 1, 1, 0]
    assert spec.apply(("free", [1, 1])) == ("ValueError", None) and spec.ref_cnt == [0, 1, 1, 0]
    assert spec.apply(("allocate", 3)) == ("NoFreeBlocksError", None) and spec.queue == [3, 0]
    assert spec.apply(("allocate", 0)) == (None, [])


@pytest.mark.parametrize("n_heads,n_kv", [(4, 4), (4, 2), (8, 2)])
def test_dense_reference_equals_torch_causal_sdpa_on_a_contiguous_prefill(n_heads, n_kv):
    # Blocks 0, 1, 2, ... in order hold a prefill of 11 tokens: the paged layout is then just a contiguous one.
    bs, L, d = 4, 11, 8
    spec = paged_attention.Spec(3, bs, n_heads, n_kv, d, 3, (paged_attention.Req(L, L, (0, 1, 2), 7),))
    inp = paged_attention.make_inputs(spec)
    got = paged_attention.dense_reference(spec, inp)
    k = inp["key_cache"].flatten(0, 1)[:L].repeat_interleave(n_heads // n_kv, dim=1)
    v = inp["value_cache"].flatten(0, 1)[:L].repeat_interleave(n_heads // n_kv, dim=1)
    want = F.scaled_dot_product_attention(inp["query"].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                          is_causal=True).transpose(0, 1)
    assert (got - want.double()).abs().max().item() < 1e-5


def test_dense_reference_decode_sees_the_whole_context_in_table_order():
    # One decode query at position 5 of a context in blocks (2, 0): softmax over all 6 keys, gathered by hand.
    spec = paged_attention.Spec(4, 4, 2, 1, 8, 3, (paged_attention.Req(1, 6, (2, 0), 9),), scale=0.5)
    inp = paged_attention.make_inputs(spec)
    kc, vc = inp["key_cache"], inp["value_cache"]
    keys = torch.stack([kc[2, 0], kc[2, 1], kc[2, 2], kc[2, 3], kc[0, 0], kc[0, 1]])[:, 0]  # [6, D]
    vals = torch.stack([vc[2, 0], vc[2, 1], vc[2, 2], vc[2, 3], vc[0, 0], vc[0, 1]])[:, 0]
    for h in range(2):
        w = torch.softmax(inp["query"][0, h] @ keys.T * 0.5, dim=-1)
        assert torch.allclose(paged_attention.dense_reference(spec, inp)[0, h].float(), w @ vals, atol=1e-6)
    assert math.isclose(paged_attention.ATOL, 1e-5)


def test_paged_attention_oracle_matches_the_worked_example():
    """The statement's worked example, as its public case builds it: the oracle gives the statement's numbers."""
    spec = paged_attention.Spec(0, 2, 1, 1, 1, 4, (paged_attention.Req(2, 4, (3, 1), 0),
                                                  paged_attention.Req(1, 3, (0, 2), 0)), example=True)
    out = paged_attention.dense_reference(spec, paged_attention.make_inputs(spec))
    assert out.flatten().tolist() == [2.0, 2.5, 20.0]


def test_slot_mapping_oracle_matches_the_worked_example():
    assert slot_mapping.expected_slots([7, 2], 2, 6, 4) == [30, 31, 8, 9]
    assert slot_mapping.expected_slots([7, 2], 2, 9, 4) is None  # table too short: ValueError expected
