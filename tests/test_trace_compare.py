"""Your engine against the reference (framework/trace_compare.py, course/traces.py): two traces of one workload
agree where the engines plan alike; a scheduler that puts prompt chunks before decodes (a wrong fixture of
exercise 129) differs at the step chapter 05's comparison names, with the rows it prints; the figures draw; a
chapter cell says so when your part is not written yet."""

from __future__ import annotations

import dataclasses
import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest
import torch

matplotlib.use("Agg")  # before pyplot: the figures are drawn, not shown

import course  # noqa: E402
from benchmarks.repetitive import repetitive_prompts  # noqa: E402
import mini_llm  # noqa: E402
import solutions.engine  # noqa: E402
import solutions.preemption  # noqa: E402
from course import figures, notebook, traces  # noqa: E402
from framework.engine import EngineConfig  # noqa: E402
from framework.sampling import SamplingParams  # noqa: E402
from framework.spec_decode import SpeculativeConfig  # noqa: E402
from framework.trace_compare import Row, first_difference  # noqa: E402
from solutions import spec_decode  # noqa: E402

WRONG = Path(__file__).parent / "judge_cases" / "scheduler" / "wrong_prefills_before_decodes.py"
CONFIG = EngineConfig(token_budget=64, max_num_seqs=8, num_blocks=4096, block_size=16)  # chapter 05's timeline


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return mini_llm.load_transformer(dtype=torch.float32)


def decode_last_engine() -> type:
    """The reference engine behind the wrong scheduler: running prompt chunks before the decodes."""
    spec = importlib.util.spec_from_file_location("wrong_prefills_before_decodes", WRONG)
    wrong = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrong)
    scheduler = type("Scheduler", (wrong.Scheduler,), {"preemption": solutions.preemption})
    return type("LLMEngine", (solutions.engine.LLMEngine,), {"scheduler_cls": scheduler})


def chapter_05_drive(engine, num_steps: int | None = None) -> None:
    """Chapter 05's timeline workload: twelve chat requests arriving over 40 steps, documents of 300 and 500
    tokens at steps 8 and 20 (`timeline_workload` and `run_timeline` there, on the engine); its first `num_steps`
    steps only, if given (the plans up to a step do not depend on the steps after it)."""
    rng = random.Random(1)
    work = [(rng.randrange(0, 40), rng.randrange(10, 61), rng.randrange(10, 61)) for _ in range(12)]
    pending = sorted(work + [(8, 300, 20), (20, 500, 20)])
    step = 0
    while (pending or engine.has_unfinished_requests()) and step != num_steps:
        while pending and pending[0][0] <= step:
            arrival, prompt, max_tokens = pending.pop(0)
            engine.add_request(list(range(1, prompt + 1)), SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        engine.step()
        step += 1


def first_12(engine) -> None:
    chapter_05_drive(engine, 12)


@pytest.fixture(scope="module")
def reference(model):
    """The reference's trace of the whole workload."""
    return traces.traced(solutions.engine.LLMEngine(model, CONFIG), chapter_05_drive, 1000)[0]


def test_identical_plans_have_no_difference(model, reference, tmp_path):
    """Two runs of one engine, and a run against its own saved trace read back: no difference; a run cut short
    differs where it stopped."""
    again, _ = traces.traced(solutions.engine.LLMEngine(model, CONFIG), chapter_05_drive, 1000)
    assert first_difference(again, reference) is None
    reference.save(tmp_path / "reference.json")
    assert first_difference(tmp_path / "reference.json", again) is None
    short, _ = traces.traced(solutions.engine.LLMEngine(model, CONFIG), first_12, 1000)
    diff = first_difference(short, reference)
    assert diff.step == len(short.steps) and diff.what == ["scheduled requests", "number of steps"]
    assert "yours had no such step" in diff.table().splitlines()[0]


def test_decode_last_scheduler_differs_where_chapter_05_says(model, reference):
    """At step 10 (index 9) the 300-token document is running: the reference decodes the five running requests
    first and gives the document the 59 tokens left; decode-last gives it all 64 and skips the decodes."""
    yours, error = traces.traced(decode_last_engine()(model, CONFIG), first_12, 1000)
    assert error is None
    diff = first_difference(yours, reference)
    assert diff.step == 9 and diff.what[0] == "scheduled requests"
    assert diff.rows[0] == [Row("#5", "prefill", 64, 0, 5)]
    assert diff.rows[1] == [Row(f"#{i}", "decode", 1, 0, b) for i, b in enumerate((4, 2, 3, 2, 3))] + \
        [Row("#5", "prefill", 59, 0, 5)]
    assert [len(s) for s in diff.steps] == [10, 10]
    table = diff.table().splitlines()
    assert table[0] == "first difference at step 10 (trace index 9): scheduled requests"
    assert table[-1].split() == ["#5", "prefill", "64", "5", "prefill", "59", "5", "<"]
    assert table[3].split() == ["#0", "-", "decode", "1", "4", "<"]
    figures.trace_comparison(diff, "decode-last against the reference")
    figures.step_timeline(reference.steps, list(reference.requests.values()), "the reference")


@pytest.fixture()
def stored(tmp_path, monkeypatch) -> Path:
    """Where the chapters' cells store the reference's traces: a temporary folder."""
    monkeypatch.setattr(traces, "STORED", tmp_path)
    return tmp_path


def test_chapter_cell_with_your_wrong_scheduler(model, monkeypatch, capsys, stored):
    """The chapter's cell with COURSE_IMPL=practice: your scheduler (here the wrong fixture) against the reference,
    the table printed; with your practice/scheduler.py as shipped (a stub), a line saying it is not written yet."""
    monkeypatch.setattr(course, "IMPL", "practice")
    make = lambda m: m.LLMEngine(model, CONFIG)  # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(traces, "your_modules", lambda part: SimpleNamespace(LLMEngine=decode_last_engine()))
        diff = traces.against_reference("scheduler", make, first_12, "ch05")
    assert diff.step == 9 and "first difference at step 10" in capsys.readouterr().out
    assert traces.against_reference("scheduler", make, first_12, "stub") is None
    assert "practice/scheduler.py is not written yet" in capsys.readouterr().out


def test_reference_trace_stored_for_a_copy_without_the_reference(model, monkeypatch, stored):
    """Where the reference engine runs, its trace is stored timed by steps (the same file on every run); a copy
    without it (a student edition) compares with the stored trace, which plans as the live one."""
    make = lambda m: m.LLMEngine(model, CONFIG)  # noqa: E731
    live = traces.reference_trace("scheduler", make, first_12)
    text = (stored / "scheduler.json").read_text()
    assert traces.reference_trace("scheduler", make, first_12) and (stored / "scheduler.json").read_text() == text
    steps, requests = live
    assert [(s.start, s.end) for s in steps[:2]] == [(0.0, 1.0), (1.0, 2.0)]
    assert [r.request_id for r in requests] == [f"#{i}" for i in range(len(requests))]
    assert all(r.arrival <= r.steps[0] < (r.first_token or 1e9) for r in requests if r.steps)
    assert [r.first_token for r in requests[:4]] == [1.0, 2.0, 2.0, 5.0]  # as chapter 05's timeline draws them

    def absent(part):
        raise course.NotInThisCopy("LLMEngine", "solutions/engine.py")

    monkeypatch.setattr(traces, "reference_modules", absent)
    loaded = traces.reference_trace("scheduler", make, first_12)
    assert first_difference(loaded, live) is None and loaded[1] == live[1]
    (stored / "scheduler.json").unlink()
    with pytest.raises(course.NotInThisCopy):
        traces.reference_trace("scheduler", make, first_12)


def test_speculation_drafts_in_the_comparison(model):
    """With speculation on, the rows carry the drafts: the same workload with and without it first differs at the
    first step that drafted, and its table has a drafts column."""
    prompts, _ = repetitive_prompts(model, mini_llm.load_tokenizer(), 2, 0, (8, 12),
                              engine_cls=solutions.engine.LLMEngine)  # text that repeats itself
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    config = dict(token_budget=64, block_size=4, num_blocks=64)
    plain, _ = traces.traced(solutions.engine.LLMEngine(model, EngineConfig(**config)),
                             lambda e: e.generate(prompts, params), 100)
    spec, _ = traces.traced(spec_decode.SpecDecodeEngine(model, EngineConfig(**config,
                                                                             speculative=SpeculativeConfig())),
                            lambda e: e.generate(prompts, params), 100)
    diff = first_difference(spec, plain, labels=("speculative", "plain"))
    first_draft = next(s.index for s in spec.steps if s.rows["draft"])
    assert diff.step == first_draft and "drafts" in diff.what
    assert "drafts" in diff.table().splitlines()[2]


def test_a_part_neither_yours_nor_shipped_stops_the_cell(monkeypatch):
    """In a student edition, the engine around your part needs the other parts: one that is neither passed nor
    shipped stops the cell as every chapter cell stops (course.NotPassedYet: the stored output, under one line)."""
    picked = course.choices()
    picked["block_pool"] = dataclasses.replace(picked["block_pool"], yours=False, has_reference=False)
    monkeypatch.setattr(course, "choices", lambda: dict(picked))
    with pytest.raises(course.NotPassedYet) as stop:
        traces.your_modules("scheduler")
    assert stop.value.line() == ("this cell runs your scheduler in the engine, which needs block_pool (exercise 125), "
                                 "which you have not passed yet")


def test_a_cell_that_needs_several_parts_not_passed_names_them_all(monkeypatch):
    """A learner told only of the first missing part would think passing it unlocks the cell."""
    picked = course.choices()
    for name in ("scheduler", "engine"):
        picked[name] = dataclasses.replace(picked[name], yours=False, has_reference=False)
    monkeypatch.setattr(course, "choices", lambda: dict(picked))
    with pytest.raises(course.NotPassedYet) as stop:
        course.use("engine").LLMEngine(None)
    assert stop.value.line() == ("this cell runs LLMEngine, which needs exercises 129 (scheduler) and 130 (engine), "
                                 "which you have not passed yet")
    # the chapter's last line gathers what its skipped cells wait for: both, not the first (it said 130 only)
    assert [(c.exercise, c.module) for c in notebook._waiting_for(stop.value)] == [(129, "scheduler"), (130, "engine")]


def test_a_part_that_changed_since_it_passed_is_not_called_not_passed(monkeypatch):
    """Two parts missing, one of them passed and then edited: each is named with its own reason (the line said
    "which you have not passed yet" of both, beside a banner saying "130 changed since it passed")."""
    picked = course.choices()
    picked["scheduler"] = dataclasses.replace(picked["scheduler"], yours=False, has_reference=False)
    picked["engine"] = dataclasses.replace(picked["engine"], yours=False, has_reference=False, changed=True)
    monkeypatch.setattr(course, "choices", lambda: dict(picked))
    with pytest.raises(course.NotPassedYet) as stop:
        course.use("engine").LLMEngine(None)
    assert stop.value.line() == ("this cell runs LLMEngine, which needs exercises 129 (scheduler, not passed yet) and "
                                 "130 (engine, changed since it passed: grade it again)")
    assert notebook.awaited(notebook._waiting_for(stop.value), "{module} (exercise {exercise}{why})") == (
        "scheduler (exercise 129, not passed yet) and engine (exercise 130, changed since it passed: grade it again)")


def test_a_passed_module_is_yours_where_the_copy_has_no_reference_whatever_course_impl_says(monkeypatch):
    """COURSE_IMPL=solutions in a student copy: a passed exercise without a shipped reference runs the student's
    module (it showed the stored outputs, "125 not passed yet", for an exercise that had passed)."""
    from judge import cache

    monkeypatch.setattr(course, "IMPL", "solutions")
    monkeypatch.setattr(course, "_shipped", lambda module: module != "solutions.block_pool")
    passed = {"passed": 8, "failed": 0, "changed": False}
    monkeypatch.setattr(cache, "lookup", lambda ex, path: passed if ex.id == 125 else None)
    picked = course.choices()
    assert picked["block_pool"].yours and not picked["batch"].yours and picked["batch"].has_reference
