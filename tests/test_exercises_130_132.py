"""Exercises 130 (inference loop) and 132 (prefix caching): the reference passes, the untouched starters say
"not implemented yet", every deliberately wrong version in tests/judge_cases/{inference_loop,prefix_caching}/
is rejected with the expected diagnosis, and differently written correct ones are accepted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import judge
from framework.engine import LLMEngineBase
from alarm import cut_short_by_an_alarm
from judge import harness
from judge.drivers.rounds import CALL_KEYS, answered
from judge.hidden import inference_loop, prefix_caching
from judge.loader import load_file

from fixture_header import expect_of

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases"
FIXTURES = {130: CASES_DIR / "inference_loop", 132: CASES_DIR / "prefix_caching"}
STARTERS = {130: ("practice/engine.py", "LLMEngine.step"), 132: ("practice/prefix_cache.py", "hash_block")}
MODULES = {130: inference_loop, 132: prefix_caching}


def fixtures(kind: str) -> list:
    return [pytest.param(ex, p, id=f"{ex}-{p.stem}")
            for ex, d in FIXTURES.items() for p in sorted(d.glob(f"{kind}_*.py"))]



pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("ex", [130, 132])
def test_registered(ex):
    exercise = judge.get_exercise(ex)
    assert exercise == judge.get_exercise(exercise.slug)
    assert exercise.practice_file == STARTERS[ex][0]
    assert (ROOT / exercise.statement).is_file()
    assert len(list(FIXTURES[ex].glob("wrong_*.py"))) >= 8 and len(list(FIXTURES[ex].glob("right_*.py"))) >= 2


@pytest.mark.parametrize("ex", [130, 132])
def test_reference_passes_in_the_sandbox(ex, model_dir):
    report = judge.grade(ex, reference=True, options={"model": model_dir})
    assert report.ok, report.text()
    assert report.text().splitlines()[-1] == f"{len(MODULES[ex].CASES)} passed, 0 failed"


@pytest.mark.parametrize("ex", [130, 132])
def test_untouched_starter_says_not_implemented(ex, model_dir):
    path, first = STARTERS[ex]
    if "raise NotImplementedError" not in (ROOT / path).read_text():
        pytest.skip(f"{path} has been filled in")
    report = judge.grade(ex, options={"model": model_dir})
    assert report.passed == 0, report.text()
    assert {r.verdict for r in report.results} == {"not implemented"}, report.text()
    assert f"not implemented yet: {first} raises NotImplementedError" in report.text()


@pytest.mark.parametrize("ex, path", fixtures("wrong"))
def test_wrong_version_is_rejected(ex, path, model_dir):
    report = judge.grade_inprocess(ex, load_file(path), options={"model": model_dir})
    assert report.failed > 0, report.text()
    assert expect_of(path) in report.text(), report.text()
    assert all(r.verdict in ("pass", "fail", "error") for r in report.results), report.text()


@pytest.mark.parametrize("ex, path", fixtures("right"))
def test_correct_version_is_accepted(ex, path, model_dir):
    report = judge.grade_inprocess(ex, load_file(path), options={"model": model_dir})
    assert report.ok, report.text()


def test_130_grades_step_and_generate_on_a_script_of_the_references(model_dir):
    """A learner whose other practice files are still stubs is graded on 130 alone: the engine under test calls
    fakes whose calls the grader answers, one at a time, with what the reference scheduler, KV-cache manager and
    runner did (not practice/'s); the first call that differs from the reference's ends the run (a departure)."""
    right = load_file(FIXTURES[130] / "right_reference_style.py")
    report = judge.grade_inprocess(130, right, cases=["several requests"], options={"model": model_dir})
    assert report.ok, report.text()
    from judge import drivers
    from judge.drivers import engine as engine_driver
    from solutions import engine as ref
    from solutions.kv_cache_manager import KVCacheManager
    from solutions.model_runner import ModelRunner
    from solutions.scheduler import Scheduler

    config = {"num_blocks": 8, "block_size": 4}
    assert engine_driver.new_engine(ref, "twin", config, None, record=True) == {}
    assert engine_driver.new_engine(right, "engine", config, None) == {}
    twin, engine = drivers.kept("twin").engine, drivers.kept("engine").engine
    assert isinstance(twin.scheduler, Scheduler) and isinstance(twin.kv_cache_manager, KVCacheManager)
    assert isinstance(twin.runner, ModelRunner)
    assert not any(isinstance(part, (Scheduler, KVCacheManager, ModelRunner))
                   for part in (engine.scheduler, engine.kv_cache_manager, engine.runner))
    script = engine_driver.add(ref, "twin", [1, 2, 3, 4, 5], {"max_tokens": 2})["_script"]
    assert [entry["op"] for entry in script] == ["add_request"]
    paused = engine_driver.add(right, "engine", [1, 2, 3, 4, 5], {"max_tokens": 2})
    assert paused == {"call": {k: script[0][k] for k in CALL_KEYS}}  # the worker holds no recorded call before it
    assert engine_driver.answer(right, "engine", script[0]) == {"request_id": "#0"}
    step = engine_driver.step(ref, "twin")["_script"]
    assert [entry["op"] for entry in step] == ["schedule", "execute_model"]
    grader = SimpleNamespace(answer=lambda name, entry: engine_driver.answer(right, name, entry))
    assert "departure" not in answered(grader, "engine", engine_driver.step(right, "engine"), {None: step},
                                       engine_driver.departure_message)
    assert engine.kv_cache_manager.num_free_blocks == 6 and engine.scheduler.running[0].block_table == [0, 1]
    assert engine.scheduler.running[0].output_token_ids == twin.scheduler.running[0].output_token_ids
    again = answered(grader, "engine", engine_driver.step(right, "engine"), {None: step},  # #0 has moved on since
                     engine_driver.departure_message)["departure"]
    assert engine_driver.first_difference(again["made"], again["expected"]) == {
        "request": "#0", "field": "num_computed_tokens", "want": 0, "got": 5}, again


class Spinning:
    """An engine that waits for its requests to finish without ever stepping them."""

    class LLMEngine(LLMEngineBase):
        def generate(self, prompts, params=None):
            self.add_requests(prompts, params)
            while self.has_unfinished_requests():
                pass


def test_130_a_grading_that_stops_waiting_stops_the_learners_thread(model_dir):
    """In the test's own process nothing kills a looping engine: once the wait for it is cut short (an alarm, as an
    in-process time limit cuts it), its next call of a part raises, and its thread ends."""
    from judge.drivers import engine as engine_driver
    from solutions import engine as ref

    config = {"num_blocks": 8, "block_size": 4}
    with harness.grading(harness.Context(options={"model": model_dir})):
        assert engine_driver.new_engine(ref, "twin", config, None, record=True) == {}
        assert engine_driver.new_engine(Spinning, "engine", config, None) == {}
        script = engine_driver.generate(ref, "twin", [[1, 2, 3]], {"max_tokens": 2})["_script"]
        grader = SimpleNamespace(answer=lambda name, entry: engine_driver.answer(Spinning, name, entry))
        with cut_short_by_an_alarm("the engine's thread"):
            answered(grader, "engine", engine_driver.generate(Spinning, "engine", [[1, 2, 3]], {"max_tokens": 2}),
                     {None: script}, engine_driver.departure_message)


def test_130_step_only_without_generate_names_generate(model_dir):
    """step written, generate still the stub: the step cases pass and the generate ones name generate."""
    source = (FIXTURES[130] / "right_reference_style.py").read_text()
    source = source.replace("        requests = self.add_requests(prompts, params)",
                            "        raise NotImplementedError\n        requests = self.add_requests(prompts, params)")
    report = judge.grade(130, source=source, cases=["one request"], options={"model": model_dir})
    assert [r.verdict for r in report.results] == ["pass", "not implemented"], report.text()
    assert "LLMEngine.generate raises NotImplementedError" in report.text()


def test_132_wrong_evict_caught_end_to_end(model_dir):
    """Evicting nothing leaves stale hashes in the engine: stale hits (wrong outputs or hit counts)."""
    report = judge.grade_inprocess(132, load_file(FIXTURES[132] / "wrong_evict_noop.py"),
                                   cases=["end to end: a small KV cache"], options={"model": model_dir})
    assert report.failed == 1, report.text()
    assert any(m in report.results[0].message for m in ("differ from generating it alone", "num_cached_tokens"))
