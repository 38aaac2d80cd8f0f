"""The judge shows the first step where your run's plan differs from the reference's as a table, and `--trace DIR`
writes both step traces (framework/trace.py's format): 129 through the command line on a scheduler that puts
prefill chunks before decodes, 134 in this process on a verify_and_update that advances num_computed_tokens by the
drafts; 130's engine, on a scheduler replaying the reference's plans, departs from the script first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import judge
from judge import harness, traces
from judge.cli import main
from judge.loader import load_file
from judge.remote import RemoteModule
from framework.trace import load_trace

from in_process import InProcess, Recording

CASES = Path(__file__).parent / "judge_cases"
TABLE = re.compile(r"first difference at engine step (\d+) \(trace index (\d+)\)")


def traces_of(folder: Path, exercise: int, case: str) -> tuple[list, list]:
    """The steps of the two traces the judge wrote for `case`, yours then the reference's."""
    slug = re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")
    return tuple(load_trace(folder / f"{exercise}-{slug}-{side}.json")[0] for side in ("yours", "reference"))


def check_written(text: str, folder: Path, exercise: int, case: str) -> int:
    """The step the table names (from 1), after checking that both traces reach it and say where they are."""
    step = int(TABLE.search(text)[1])
    yours, reference = traces_of(folder, exercise, case)
    assert len(yours) >= step and len(reference) >= step
    assert f"{folder / f'{exercise}-'}" in text  # the report names the files it wrote
    return step


def test_129_report_names_the_step_and_the_rows_and_trace_writes_both_runs(tmp_path, capsys):
    case = "decodes first, then prefill chunks, then new requests"
    wrong = CASES / "scheduler" / "wrong_prefills_before_decodes.py"
    assert main(["129", "--impl", str(wrong), "--unisolated", "--case", case, "--trace", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    # it first calls allocate_or_preempt for the chunk, where the reference's calls it for the decode: the step's
    # table shows your plan as far as it got, beside the reference's
    message = out.split("engine step 1: your code called preemption.allocate_or_preempt(<request chunking>, 12", 1)[1]
    assert "\n      first difference at engine step 1 (trace index 0): scheduled requests, KV blocks used\n" in message
    rows = {words[0]: words[1:] for words in map(str.split, message.splitlines()[:7])
            if words and words[0] in ("decoding", "chunking", "new")}
    assert rows == {"decoding": ["-", "decode", "1", "1", "<"],
                    "chunking": ["prefill", "12", "5", "prefill", "12", "5"],
                    "new": ["-", "prefill", "4", "1", "<"]}
    assert "KV blocks used: yours 6, reference 7" in message
    assert check_written(out, tmp_path, 129, case) == 1
    yours, reference = traces_of(tmp_path, 129, case)
    assert [r["request_id"] for r in yours[0].scheduled] == ["chunking"]
    assert [r["request_id"] for r in reference[0].scheduled] == ["decoding", "chunking", "new"]


def test_the_right_scheduler_gets_no_table_and_no_trace_without_the_option():
    report = judge.grade_inprocess(129, load_file(CASES / "scheduler" / "right_reference_style.py"),
                                   cases=["decodes first"])
    assert report.ok and not report.notes and "first difference" not in report.text()


def test_trace_on_an_exercise_without_step_traces_says_so(tmp_path):
    report = judge.grade(128, "solutions.batch", cases=["single prefill"], options={"trace": str(tmp_path / "t")})
    assert report.ok and "--trace: no case run of exercise 128 has step traces to write" in report.text()
    assert not (tmp_path / "t").exists()


def test_130_departure_names_the_step_and_trace_writes_both_runs(tmp_path):
    """130's scheduler is a fake replaying the reference's plans, so a wrong engine departs from the script before
    any plan can differ: the report names the step and the call, and --trace writes both runs."""
    case = "a mixed workload: chunks, decodes, admissions and a full cache"
    report = judge.grade_inprocess(130, load_file(CASES / "inference_loop" / "wrong_static_batching.py"),
                                   cases=[case], options={"trace": str(tmp_path)})
    text = report.text()
    assert "engine step 1: your engine called self.scheduler.schedule()" in text
    assert f"{tmp_path / '130-'}" in text  # the report names the files it wrote
    yours, reference = traces_of(tmp_path, 130, case)
    assert not yours and len(reference) > 1


def test_134_end_to_end_failure_shows_the_first_differing_plan(tmp_path):
    case = "end to end: greedy with speculation equals without"
    report = judge.grade_inprocess(134, load_file(CASES / "spec_decode" / "wrong_num_computed_by_drafts.py"),
                                   cases=[case], options={"trace": str(tmp_path)})
    text = report.text()
    assert "tokens differ from the engine's without speculation\n      first difference at engine step" in text
    step = check_written(text, tmp_path, 134, case)
    assert re.search(rf"the plans of engine steps 1\.\.{step - 1} matched", text)


def test_a_replayed_public_case_shows_the_table_and_writes_both_traces(tmp_path):
    """A student edition replays 129's public cases from recorded reference answers: the table and the traces come
    from those answers and the student's."""
    ex = judge.get_exercise(129)
    case = next(c for c in judge.runner._case_list(ex, None) if c.name.startswith("decodes first"))
    recording = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(recording)).passed
    wrong = RemoteModule(InProcess(ex, {"impl": str(CASES / "scheduler" / "wrong_prefills_before_decodes.py")}))
    with harness.grading(harness.Context(options={"trace": str(tmp_path)}, exercise=ex)):
        with pytest.raises(harness.CaseFailure) as failed:
            judge.runner._replayed(recording.log, wrong)
        written = traces.save(ex, case.name)
    message = str(failed.value)
    assert "\nfirst difference at engine step 1 (trace index 0): scheduled requests, KV blocks used\n" in message
    assert "KV blocks used: yours 6, reference 7" in message
    assert len(written) == 2
    yours, reference = traces_of(tmp_path, 129, case.name)
    assert [r["request_id"] for r in yours[0].scheduled] == ["chunking"]
    assert len(yours) == len(reference) == 1  # the replay stops at the first differing answer


def test_a_replayed_case_of_several_worlds_tables_the_world_that_departed():
    """A public case of 129 that builds several worlds: your departed step sits beside the reference's step of the
    same world (the second here), not the first world's."""
    ex = judge.get_exercise(129)
    case = next(c for c in judge.runner._case_list(ex, None) if c.name.startswith("decodes first"))
    recording = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(recording)).passed
    assert sum(req["attr"] == "new_world" for req, _ in recording.log) > 1
    wrong = RemoteModule(InProcess(ex, {"impl": str(CASES / "scheduler" / "wrong_lifo_admission.py")}))
    with harness.grading(harness.Context(options={}, exercise=ex)):
        with pytest.raises(harness.CaseFailure) as failed:
            judge.runner._replayed(recording.log, wrong)
    message = str(failed.value)
    assert "first difference at engine step 2 (trace index 1): scheduled requests\n" in message, message
    assert "the plans of engine steps 1..1 matched" in message
    rows = {words[0]: words[1:] for words in map(str.split, message.splitlines()) if words[:1] in (["n1"], ["n2"])}
    assert rows == {"n1": ["-", "prefill", "3", "1", "<"], "n2": ["prefill", "2", "1", "-", "<"]}, message


def test_a_departed_step_drops_the_requests_preempted_in_it():
    """A scheduler that goes on to allocate for a request preempted earlier in the same step: your step's table
    shows the victim's blocks freed and its tokens recomputed from 0 (one block for 2 tokens), never more blocks in
    use than the cache has; it showed the victim still holding its blocks (5 of 3 used) and no preemption."""
    ex = judge.get_exercise(129)
    case = next(c for c in judge.runner._case_list(ex, None) if c.name.startswith("preemption:"))
    recording = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(recording)).passed
    wrong = RemoteModule(InProcess(ex, {"impl": str(CASES / "scheduler" / "wrong_preempted_not_skipped.py")}))
    with harness.grading(harness.Context(options={}, exercise=ex)):
        with pytest.raises(harness.CaseFailure) as failed:
            judge.runner._replayed(recording.log, wrong)
    message = str(failed.value)
    rows = {words[0]: words[1:] for words in map(str.split, message.splitlines()) if words[:1] in (["a"], ["b"])}
    assert rows == {"a": ["decode", "1", "2", "decode", "1", "2"], "b": ["prefill", "2", "1", "-", "<"]}, message
    assert "KV blocks used: yours 3, reference 2\n" in message and "preempted:" not in message, message
