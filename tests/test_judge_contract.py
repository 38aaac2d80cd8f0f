"""The judge grades the contract the statements state, through the worker as a class is graded: a learner's own
ValueError subclass is a ValueError, ref_cnt may be any sequence of ints, write_kv gets a view into a real
multi-layer cache and must return None, hash values are the learner's own, and a NotImplementedError from another
exercise's stub that the learner's code called names that stub."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge import compare, crossing, public

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "judge_cases"

# (exercise, fixture): each is graded in the worker, where the bugs the in-process tests cannot see showed
THROUGH_THE_WORKER = [
    (125, "block_pool/right_array_ref_cnt_error_subclass.py"),
    (125, "block_pool/right_own_free_queue.py"),
    (125, "block_pool/wrong_look_alike_no_free_blocks_error.py"),
    (126, "slot_mapping/right_value_error_subclass.py"),
    (126, "slot_mapping/wrong_data_rebinding.py"),
    (126, "slot_mapping/wrong_as_strided_offset_zero.py"),
    (126, "slot_mapping/wrong_returns_cache.py"),
    (126, "slot_mapping/wrong_empty_range_past_table.py"),
    (132, "prefix_caching/right_blake2b_bytes.py"),
]


@pytest.mark.parametrize("ex_id,rel", THROUGH_THE_WORKER, ids=[Path(r).stem for _, r in THROUGH_THE_WORKER])
def test_fixture_graded_in_the_worker(ex_id, rel):
    path = CASES / rel
    report = judge.grade(ex_id, impl=str(path))
    if path.name.startswith("right_"):
        assert report.ok, report.text()
    else:
        assert report.failed > 0, report.text()
        assert expect_of(path) in report.text(), report.text()


def test_another_exercises_stub_is_blamed_not_the_learner():
    if "raise NotImplementedError" not in (ROOT / "practice" / "preemption.py").read_text():
        pytest.skip("practice/preemption.py has been filled in")
    report = judge.grade(129, impl=str(CASES / "scheduler" / "stub_calls_preemption_module.py"),
                         cases=["one request: a prompt that fits, then its decodes"])
    text = report.text()
    assert "exercise 131's stub" in text and "self.allocate_or_preempt(" in text, text
    assert "not implemented yet: Scheduler.schedule" not in text, text


def test_a_learner_exception_crosses_as_an_instance_of_its_known_bases():
    from framework.errors import NoFreeBlocksError

    own = crossing.rebuilt({"type": "TableTooShort", "module": "submission", "message": "end 9",
                             "mro": [["submission", "TableTooShort"], ["builtins", "ValueError"],
                                     ["builtins", "Exception"]]})
    assert isinstance(own, ValueError) and type(own).__name__ == "TableTooShort"
    look_alike = crossing.rebuilt({"type": "NoFreeBlocksError", "module": "submission", "message": "",
                                    "mro": [["submission", "NoFreeBlocksError"], ["builtins", "RuntimeError"]]})
    assert isinstance(look_alike, RuntimeError) and not isinstance(look_alike, NoFreeBlocksError)
    real = crossing.rebuilt({"type": "NoFreeBlocksError", "module": "framework.errors", "message": ""})
    assert isinstance(real, NoFreeBlocksError)


def test_public_replay_matches_subclasses_and_ignores_diagnostics():
    want = {"type": "ValueError", "module": "builtins"}
    assert public.raised_as({"type": "Mine", "module": "m", "mro": [["m", "Mine"], ["builtins", "ValueError"]]}, want)
    assert not public.raised_as({"type": "KeyError", "module": "builtins",
                                 "mro": [["builtins", "KeyError"], ["builtins", "LookupError"]]}, want)
    assert compare.difference({"raised": "ValueError", "_error": {"message": "a"}},
                              {"raised": "ValueError", "_error": {"message": "b"}}) is None
    assert compare.difference({"raised": "ValueError"}, {"raised": None}) is not None


def test_statements_and_list_say_how_many_cases_are_public_and_hidden():
    import importlib

    for ex in judge.load_exercises().values():
        names = importlib.import_module(ex.tests).CASES.names()
        public_cases = ex.public_cases or tuple(names[:2])
        assert set(public_cases) <= set(names), ex.id
        assert len(public_cases) >= 4, f"{ex.id}: a worked example and at least four cases are public"
        assert ex.case_counts() == (len(public_cases), len(names)), ex.id
        line = f"{len(names)} cases: {len(public_cases)} public"
        assert line in (ROOT / ex.statement).read_text(), f"{ex.statement} must say '{line} ...'"


def test_every_random_hidden_case_is_drawn_from_the_secret_seed():
    """judge.secret.rng mixes the instructor's secret in: a bare random.Random in a hidden module would make its
    cases the same in every class, and computable from a student's copy."""
    offenders = [f"{p.name}:{n}" for p in sorted((ROOT / "judge" / "hidden").glob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1) if "random.Random(" in line]
    assert not offenders, offenders


def test_the_practice_modules_lent_for_missing_references_are_withdrawn_after_grading(tmp_path, monkeypatch):
    """In a process that goes on after grading (a notebook's kernel), `solutions.<name>` is again only what the copy
    holds: the finder that lent the student's practice module is gone, and so is the module it lent."""
    import sys

    from judge import drivers
    from judge.practice_finder import PracticeFinder

    (tmp_path / "practice").mkdir()
    (tmp_path / "practice" / "lent_part.py").write_text("WHO = 'the practice module'\n")
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, PracticeFinder(str(tmp_path))])
    import solutions.lent_part  # noqa: F401 - lent by the finder

    assert sys.modules["solutions.lent_part"].WHO == "the practice module"
    drivers.forget()
    assert "solutions.lent_part" not in sys.modules and not hasattr(sys.modules["solutions"], "lent_part")
    assert not any(isinstance(f, PracticeFinder) for f in sys.meta_path)
    with pytest.raises(ModuleNotFoundError):
        import solutions.lent_part  # noqa: F401,F811
