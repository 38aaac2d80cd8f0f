"""Failure messages are Python: every exercise's public cases, replayed on wrong code, and its hidden cases of the
same names, never show the wire (`__handle__`, JSON null/true/false) or a replay's "step N" (an engine step is
called an engine step). Run in this process, through the worker's own request handler, so that no process starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import judge
from judge import harness, public
from judge.remote import RemoteModule, Session, learner_failure

from in_process import InProcess, Recording

ROOT = Path(__file__).resolve().parent.parent
WIRE = re.compile(r"__handle__|\bnull\b|\btrue\b|\bfalse\b|(?<!engine )\bstep \d")
# Hidden messages not checked yet, and why (remove the entry once fixed).
HIDDEN_PENDING: dict[int, str] = {}


def wrong_code(ex) -> list[Path]:
    """The starter stub and the first wrong fixture of the exercise."""
    fixtures = sorted((ROOT / "tests" / "judge_cases" / ex.tests.rsplit(".", 1)[1]).glob("wrong_*.py"))
    return [ex.practice_path, *fixtures[:1]]


@pytest.mark.parametrize("ex_id", sorted(judge.load_exercises()))
def test_messages_show_python_not_the_wire(ex_id):
    ex = judge.get_exercise(ex_id)
    every = judge.runner._case_list(ex, None)
    cases = [c for c in every if c.name in (ex.public_cases or [c.name for c in every[:2]])]
    recorded = {}
    for case in cases:
        rec = Recording(ex, {"impl_module": ex.reference})
        assert harness.run_case(case, RemoteModule(rec)).passed, case.name
        recorded[case.name] = rec.log
    for path in wrong_code(ex):
        messages = []
        for case in cases:
            messages.append(public.replay(InProcess(ex, {"impl": str(path)}), recorded[case.name]) or "")
            if ex_id not in HIDDEN_PENDING:
                out = harness.run_case(case, RemoteModule(InProcess(ex, {"impl": str(path)})))
                messages.append(out.message + " " + " ".join(map(str, out.details.values())))
        assert any(messages), f"{path.name} passes every public case of {ex_id}"
        # Quoted Python strings may hold JSON (136's grammars and outputs): the wire shows outside them.
        shown = [m for m in messages if WIRE.search(re.sub(r"'[^'\n]*'", "''", m))]
        assert not shown, shown[0]


def test_a_public_case_names_the_failing_call_and_what_it_raised():
    """A replayed case of several calls: the one that raised is the input, with only its exception (no whole cache
    against "None"), and the calls before it are listed as passed."""
    ex = judge.get_exercise(126)
    case = next(c for c in judge.runner._case_list(ex, None) if "multi-layer" in c.name)
    rec = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(rec)).passed
    wrong = ROOT / "tests" / "judge_cases" / "slot_mapping" / "wrong_int32_slots_to_index_copy.py"
    message = public.replay(InProcess(ex, {"impl": str(wrong)}), rec.log)
    failing, _, earlier = message.partition("\nearlier calls of this case (they passed):\n")
    assert failing.startswith("key_caches, value_caches = random bfloat16") and "dtype=torch.int32" in failing, message
    assert "your code raised RuntimeError: index_copy_(): Expected a long tensor" in failing, message
    assert "expected" not in failing.split("your code raised")[0], message
    assert earlier.startswith("key_caches, value_caches = random float32") and "int64" in earlier, message


def test_another_exercises_stub_is_named_first():
    """A part the case runs is still another exercise's stub (a student copy without that reference): the failure
    begins with that exercise and its file, in a replayed public case and in a hidden one, and the graded
    exercise's own stub still says "not implemented yet"."""
    stub = {"type": "NotImplementedError", "module": "builtins", "mro": [["builtins", "NotImplementedError"]],
            "message": "exercise 125: BlockPool is not implemented yet (practice/block_pool.py)"}
    request = {"op": "call", "driver": "spec_decode", "attr": "verify",
               "args": [{"prompt": [1], "outputs": [], "drafts": [], "logits": [[0.0, 1.0]], "eos": None,
                         "params": {"max_tokens": 4, "stop": []}}]}

    class Stubbed(Session):
        def request(self, msg: dict) -> dict:
            return {"ok": False, "error": stub}

    with harness.grading(harness.Context(exercise=judge.get_exercise(134))):
        replayed = public.replay(Stubbed(), [[request, {"ok": True, "value": {}}]])
        hidden = learner_failure(stub, "verify_and_update", "verify_and_update(request, [], logits, None)")
    first = "exercise 125 is not done yet: this case runs practice/block_pool.py, which is still a stub"
    assert replayed.startswith(first), replayed
    assert "\ninput: logits = torch.nn.functional.one_hot(torch.tensor([1]), 2)" in replayed, replayed
    assert hidden.message.startswith(first), hidden.message
    with harness.grading(harness.Context(exercise=judge.get_exercise(125))):
        own = public.replay(Stubbed(), [[request, {"ok": True, "value": {}}]])
    assert own.startswith("not implemented yet: "), own


def test_130s_hint_says_which_way_num_computed_tokens_went_wrong():
    """The hint follows what the learner's count shows: not advanced, too little, or too much."""
    from judge.hidden.inference_loop import _advance_hint

    assert "was not advanced" in _advance_hint(0, 8, 0)
    assert "not by the 8 tokens" in _advance_hint(0, 8, 1)
    assert "more than the 1 tokens" in _advance_hint(5, 1, 7)
    ex = judge.get_exercise(130)
    path = ROOT / "tests" / "judge_cases" / "inference_loop" / "wrong_num_computed_plus_one.py"
    hints = [str(out.details.get("hint", "")) for case in judge.runner._case_list(ex, None)
             for out in [harness.run_case(case, RemoteModule(InProcess(ex, {"impl": str(path)})))] if not out.passed]
    assert any("add s.num_new_tokens, not 1" in h for h in hints), hints


def test_a_failure_in_a_later_world_lists_that_worlds_calls():
    """A public case of several worlds (129's scenarios) failing in a later one: the calls listed as passed begin
    with the failing world's own setup (its requests), not the first world's, which would push it past the cut."""
    ex = judge.get_exercise(129)
    case = next(c for c in judge.runner._case_list(ex, None) if c.name.startswith("without chunked prefill"))
    rec = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(rec)).passed
    wrong = ROOT / "tests" / "judge_cases" / "scheduler" / "wrong_later_prompts_overtake.py"
    message = public.replay(InProcess(ex, {"impl": str(wrong)}), rec.log)
    _, _, earlier = message.partition("\nearlier calls of this case (they passed):\n")
    before = r"\(\d+ calls? of this case before, for other inputs, passed too\)\nkv = KVCacheManager"
    assert re.match(before, earlier), message
    assert "request_id='c'" in earlier and "request_id='d0'" not in earlier, message


def test_135s_public_messages_name_what_each_rank_passed_to_all_reduce():
    """The driver's answer lists what every rank passed to all_reduce, first; a replayed case names it in the learner's
    words (rank, call), never as the driver's field `sent`."""
    ex = judge.get_exercise(135)
    case = next(c for c in judge.runner._case_list(ex, None) if "1, 2 and 4 ranks, two all-reduces" in c.name)
    rec = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(rec)).passed
    wrong = ROOT / "tests" / "judge_cases" / "tensor_parallel" / "wrong_no_reduce_on_one_rank.py"
    message = public.replay(InProcess(ex, {"impl": str(wrong)}), rec.log)
    assert message.startswith("the tensors rank 0 passed to all_reduce, one per call: 2 items expected, got 0"), message
    assert "sent" not in message, message
    # the first sum that differs is named before the output it spoils: here the residual summed with o_proj's output
    summed = ROOT / "tests" / "judge_cases" / "tensor_parallel" / "wrong_residual_reduced.py"
    message = public.replay(InProcess(ex, {"impl": str(summed)}), rec.log)
    assert message.startswith("the tensor rank 0 passed to all_reduce in its call 1, at "), message


def test_a_report_hides_the_graders_folders_but_not_a_student_named_like_one(monkeypatch):
    """The home folder is shown as ~ where it is a whole path; a student whose login is root keeps their folder."""
    from judge import report

    monkeypatch.setenv("HOME", "/root")
    text = report._private(f"grading /srv/submitted/root/ex125/ex125.ipynb, {report.ROOT}/judge/x.py, /root/.cache")
    assert text == "grading /srv/submitted/root/ex125/ex125.ipynb, <course>/judge/x.py, ~/.cache", text
    cmdline = report.clean(f"python\0{report.ROOT}/.venv/bin/x\0-I")  # a message quoting /proc/<pid>/cmdline
    assert report._private(cmdline) == "python\\x00<course>/.venv/bin/x\\x00-I", cmdline
    assert report._private(report.clean(f"a\u200b{report.ROOT}/x")) == "a\\u200b<course>/x"


def test_133s_public_messages_read_as_the_schedule_and_the_loop():
    """A replayed case of 133 gives its input as the schedule a learner can rerun (not a driver call cut at 200
    characters) and names what differs in the loop's words, as the hidden cases do."""
    ex = judge.get_exercise(133)
    case = next(c for c in judge.runner._case_list(ex, None) if c.name in ex.public_cases)
    rec = Recording(ex, {"impl_module": ex.reference})
    assert harness.run_case(case, RemoteModule(rec)).passed
    wrong = ROOT / "tests" / "judge_cases" / "online_loop" / "wrong_step_on_loop_thread.py"
    message = public.replay(InProcess(ex, {"impl": str(wrong)}), rec.log)
    assert message.startswith("engine step 1 ran on the event loop's thread"), message
    assert re.search(r"\ninput: add a \(\[[\d, ]+\], max_tokens=\d+\); .*\(EngineConfig\(\{.*\}\)\)$", message), message
