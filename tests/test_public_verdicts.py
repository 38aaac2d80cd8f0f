"""Every fixture of tests/judge_cases/ through the public cases, as a student edition's judge replays them: each
exercise's public cases are recorded on the reference once (judge.edition.record), then replayed to each fixture
(judge.public.replay). A right_* fixture passes them all; a wrong_* fixture says in its docstring whether the
public cases catch it (`PUBLIC: caught`, it fails one) or only the hidden ones do (`PUBLIC: hidden only (why)`,
it passes them all), so the marker cannot go stale.

The replay runs in this process, on the worker's own request handling (a worker per fixture would cost a second
each): the answers cross as the JSON they are on the pipes."""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import judge
from judge import edition, harness, public
from judge.loader import module_name_for
from judge.remote import Session

from in_process import InProcess
from fixture_header import expect_of

CASES_DIR = Path(__file__).parent / "judge_cases"
FOLDERS = {125: "block_pool", 126: "slot_mapping", 127: "paged_attention", 128: "batch_layout", 129: "scheduler",
           130: "inference_loop", 131: "preemption", 132: "prefix_caching", 133: "online_loop", 134: "spec_decode",
           135: "tensor_parallel", 136: "structured_output"}
FIXTURES = [(ex_id, path) for ex_id, folder in FOLDERS.items()
            for path in sorted((CASES_DIR / folder).glob("*.py")) if path.name.startswith(("right_", "wrong_"))]
MARKER = re.compile(r"PUBLIC: (caught|hidden only \(.+?\))")
SECONDS_PER_CASE = 5  # a loop that never ends times out in a student's copy too (case_timeout, 10 s or more);
# here sooner: no public case takes a second


class FixtureTimeout(Exception):
    """A public case still running after SECONDS_PER_CASE: it fails, as it would in a student's copy."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """FixtureTimeout after `seconds`; pytest-timeout's own alarm (the same signal) is set again after."""
    def expire(*_: Any) -> None:
        raise FixtureTimeout(f"still running after {seconds} s")

    saved = signal.signal(signal.SIGALRM, expire)
    t0 = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - t0), 0.001))


def public_failures(ex_id: int, path: Path, logs: dict[str, list], first_only: bool) -> dict[str, str]:
    """{public case: why the fixture fails it} (the first failure only if `first_only`)."""
    ex = judge.get_exercise(ex_id)
    name = module_name_for(path, ex)
    saved = sys.modules.get(name)
    failures: dict[str, str] = {}
    try:
        session = InProcess(ex, {"impl": str(path)})
        if session.fatal:
            return {"(loading it)": session.fatal}
        with harness.grading(harness.Context(learner_file=str(path), exercise=ex)):
            for case, log in logs.items():
                with time_limit(SECONDS_PER_CASE):
                    result = harness.run_case(harness.Case(case, _replayed(session, log)), None)
                if not result.passed:
                    failures[case] = f"{result.verdict}: {result.message}"
                    if first_only:
                        break
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved
    return failures


def _replayed(session: Session, log: list) -> Any:
    """A case that replays `log` to the fixture, failed with the replay's first difference."""
    def run(_: Any) -> None:
        problem = public.replay(session, log)
        if problem:
            raise harness.CaseFailure(problem)

    return run


@pytest.fixture(scope="session")
def recorded() -> dict[int, dict[str, list]]:
    """Each exercise's public cases, recorded on the reference when first needed."""
    return {}


def marker_of(path: Path) -> str | None:
    found = MARKER.search(path.read_text())
    return found.group(1) if found else None


@pytest.mark.parametrize("ex_id,path", FIXTURES, ids=[f"{e}/{p.stem}" for e, p in FIXTURES])
def test_public_verdict(ex_id: int, path: Path, recorded: dict[int, dict[str, list]]) -> None:
    if ex_id not in recorded:
        recorded[ex_id] = edition.record(judge.get_exercise(ex_id))
    right = path.name.startswith("right_")
    marker = None if right else marker_of(path)
    assert right or marker, f"{path.name}: its docstring says neither 'PUBLIC: caught' nor 'PUBLIC: hidden only (why)'"
    failures = public_failures(ex_id, path, recorded[ex_id], first_only=marker == "caught")
    if marker == "caught":
        assert failures, f"{path.name} passes every public case of {ex_id}, but says 'PUBLIC: caught'"
    else:
        assert not failures, "\n".join(f"[{case}] {why}" for case, why in failures.items())


HINTED = [(125, "wrong_repeats_not_counted"), (125, "wrong_free_not_atomic"), (126, "wrong_not_in_place"),
          (126, "wrong_block_id_not_scaled"), (132, "wrong_lookup_skips_misses"), (132, "wrong_evict_one_map"),
          (127, "wrong_no_causal_mask"),
          (127, "wrong_gqa_tiled"), (127, "wrong_scale_zero_means_default"),
          (128, "wrong_qsl_missing_leading_zero"), (128, "wrong_local_logits_indices"),
          (128, "wrong_positions_from_zero"), (129, "wrong_status_not_set"),
          (131, "wrong_appended_to_tail"), (131, "wrong_num_computed_not_reset"),
          (133, "wrong_step_on_loop_thread"), (135, "wrong_kv_heads_strided"), (135, "wrong_norms_sharded"),
          (135, "wrong_output_float64")]


@pytest.mark.parametrize("ex_id,stem", HINTED, ids=[f"{e}/{s}" for e, s in HINTED])
def test_a_public_case_gives_the_hidden_cases_hint(ex_id: int, stem: str, recorded: dict[int, dict[str, list]]) -> None:
    """The hints the hidden cases give for a common mistake (the fixture's EXPECT) come with the recorded public
    cases (each hidden module's `public_hints`), so a student's copy says them too."""
    if ex_id not in recorded:
        recorded[ex_id] = edition.record(judge.get_exercise(ex_id))
    path = CASES_DIR / FOLDERS[ex_id] / f"{stem}.py"
    failures = public_failures(ex_id, path, recorded[ex_id], first_only=True)
    expect = expect_of(path)
    assert any("hint: " in why and expect in why for why in failures.values()), failures


HINTED_BY_PHRASE = [(130, "wrong_samples_prompt_chunks", "need_logits is true only when"),  # a departure
                    (130, "wrong_num_computed_plus_one", "num_computed_tokens += num_new_tokens"),  # a step's record
                    (130, "wrong_completion_order", "generate's final outputs are self.make_output(request, [])")]


@pytest.mark.parametrize("ex_id,stem,phrase", HINTED_BY_PHRASE, ids=[f"{e}/{s}" for e, s, _ in HINTED_BY_PHRASE])
def test_a_public_case_of_an_engine_gives_the_hint_of_its_difference(
        ex_id: int, stem: str, phrase: str, recorded: dict[int, dict[str, list]]) -> None:
    """130's public cases hint at what differs, as the hidden cases do: an item of the forward pass the engine
    departed at, a request's field after a step, generate's final outputs."""
    if ex_id not in recorded:
        recorded[ex_id] = edition.record(judge.get_exercise(ex_id))
    failures = public_failures(ex_id, CASES_DIR / FOLDERS[ex_id] / f"{stem}.py", recorded[ex_id], first_only=True)
    assert any(phrase in why.split("\nhint: ", 1)[-1] and "\nhint: " in why for why in failures.values()), failures


SAID = [(126, "wrong_float_slots"), (127, "wrong_output_float64"), (129, "wrong_numpy_count"),
        (129, "wrong_status_a_string"), (131, "wrong_status_a_string"), (131, "wrong_preempted_ids"),
        (134, "wrong_output_ids_a_tuple"), (134, "wrong_returns_three_values"), (130, "wrong_step_returns_a_tuple"),
        (130, "wrong_make_output_with_an_int"), (130, "wrong_output_ids_a_tuple")]


@pytest.mark.parametrize("ex_id,stem", SAID, ids=[f"{e}/{s}" for e, s in SAID])
def test_a_public_case_says_what_the_statement_requires_of_a_results_type(
        ex_id: int, stem: str, recorded: dict[int, dict[str, list]]) -> None:
    """What the statement requires of a result besides its values: 126's slots are integers, 127's output has the
    query's dtype, 129's numbers of tokens are ints, a status is a RequestStatus, 131's out.preempted holds
    Requests, 134 returns a pair and keeps output_token_ids a list, 130's step returns a list of
    RequestOutput. A public case fails them in the hidden cases' words (the fixture's EXPECT); the values alone, as
    numbers, would have passed."""
    if ex_id not in recorded:
        recorded[ex_id] = edition.record(judge.get_exercise(ex_id))
    path = CASES_DIR / FOLDERS[ex_id] / f"{stem}.py"
    failures = public_failures(ex_id, path, recorded[ex_id], first_only=True)
    assert any(expect_of(path) in why for why in failures.values()), failures


def test_a_list_of_another_length_is_named_by_its_first_difference_or_its_length() -> None:
    """Two long lists of different lengths (a loop's step records, a slot mapping) are named by their lengths, not
    shown as two dumps cut at 2,000 characters; an item that differs is named first."""
    from judge.compare import difference

    assert difference([1, 2, 3], [1, 5]) == ("[1]", 2, 5) and difference([1, 2, 3], [1, 2]) == ("", [1, 2, 3], [1, 2])
    want = [i % 7 for i in range(80)]
    req = {"driver": "paged_kv_cache", "attr": "slots", "args": [[7, 2], 2, 6, 4]}
    answers = [{"ok": True, "value": {"returned": slots}} for slots in (want, want + [3])]
    message = public._problem(*answers, "compute_slot_mapping([7, 2], 2, 6, 4)", req)
    assert message.startswith("returned: 80 items expected, got 81\n"), message


def test_a_set_of_ids_is_shown_by_what_differs(recorded: dict[int, dict[str, list]]) -> None:
    """136's masks are the token ids at -inf, in increasing order: a wrong mask is named by its logits row and shown
    by the tokens only one side masks, not by the first index where the two lists part ("masked[1][3]: expected 4,
    got 3", a position read as a token id)."""
    if 136 not in recorded:
        recorded[136] = edition.record(judge.get_exercise(136))
    path = CASES_DIR / "structured_output" / "wrong_drafts_not_advanced.py"
    message = next(iter(public_failures(136, path, recorded[136], first_only=True).values()))
    assert re.match(r"fail: the tokens set to -inf in logits row \d+: \[[\d, ]*\] in yours only, \[[\d, ]*\] "
                    r"missing from yours\n", message), message


def test_an_answer_cut_short_by_an_exception_is_shown_as_the_exception(recorded: dict[int, dict[str, list]]) -> None:
    """132's evict raising KeyError for a block the cache does not hold: the public case names the calls and the
    exception, not first "lookups: expected [[]], got []" (the answer the exception cut short)."""
    if 132 not in recorded:
        recorded[132] = edition.record(judge.get_exercise(132))
    path = CASES_DIR / "prefix_caching" / "wrong_evict_unknown_raises.py"
    message = next(iter(public_failures(132, path, recorded[132], first_only=True).values()))
    assert re.match(r"fail: c = PrefixCache\(\); c\.evict\(7\);.*: your code raised KeyError: 7\n", message), message
