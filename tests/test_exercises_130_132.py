"""Exercises 130 (inference loop) and 132 (prefix caching): the reference passes, the untouched starters say
"not implemented yet", every deliberately wrong version in tests/judge_cases/{inference_loop,prefix_caching}/
is rejected with the expected diagnosis, and differently written correct ones are accepted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import judge
from judge.hidden import inference_loop, prefix_caching
from judge.loader import load_file

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).parent / "judge_cases"
FIXTURES = {130: CASES_DIR / "inference_loop", 132: CASES_DIR / "prefix_caching"}
STARTERS = {130: ("practice/engine.py", "LLMEngine.step"), 132: ("practice/prefix_cache.py", "hash_block")}
MODULES = {130: inference_loop, 132: prefix_caching}


def fixtures(kind: str) -> list:
    return [pytest.param(ex, p, id=f"{ex}-{p.stem}")
            for ex, d in FIXTURES.items() for p in sorted(d.glob(f"{kind}_*.py"))]


def expect_of(path: Path) -> str:
    return re.search(r"EXPECT: (.+)", path.read_text()).group(1).strip()


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


def test_130_grades_step_and_generate_on_reference_components(model_dir):
    """A learner whose other practice files are still stubs is graded on 130 alone: the engine under test calls
    stand-ins whose work the reference scheduler, KV-cache manager and runner do in the grader (the host), not
    practice/'s."""
    report = judge.grade_inprocess(130, load_file(FIXTURES[130] / "right_reference_style.py"),
                                   cases=["several requests"], options={"model": model_dir})
    assert report.ok, report.text()
    from judge import drivers
    from judge.drivers import engine as engine_driver, hosts, stand_ins
    from solutions.kv_cache_manager import KVCacheManager
    from solutions.model_runner import ModelRunner
    from solutions.scheduler import Scheduler

    assert engine_driver.new_engine(load_file(FIXTURES[130] / "right_reference_style.py"), "engine",
                                    {"num_blocks": 8, "block_size": 4}, None) == {}
    engine = drivers.kept("engine").engine
    assert isinstance(engine.scheduler, stand_ins.RemoteScheduler)
    assert isinstance(engine.runner, stand_ins.RemoteModelRunner)
    assert isinstance(engine.kv_cache_manager, stand_ins.RemoteKVCacheManager)
    host = hosts._hosts[engine.scheduler.link.host]  # the grader's side (here, in this process)
    assert type(host.scheduler) is Scheduler and type(host.kv) is KVCacheManager
    engine.add_request([1, 2, 3, 4, 5], engine_driver.params_of({"max_tokens": 2}))
    engine.step()
    assert isinstance(host.runner, ModelRunner) and host.kv.num_free_blocks == 8 - 2
    assert engine.kv_cache_manager.num_free_blocks == 6 and engine.scheduler.running[0].block_table == [0, 1]


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
