"""Both paths, one verdict: the same file graded in a worker (isolated with bubblewrap where it runs, as class
grading does; else a plain subprocess) and in this process gets, case by case, the same verdict and message.
One right and one wrong variant per exercise whose cases run apart from the learner's code."""

from __future__ import annotations

from pathlib import Path

import pytest

import judge
from judge.loader import load_file
from judge.sandbox import bwrap_problem

CASES = Path(__file__).parent / "judge_cases"
PAIRS = {125: ("block_pool", "right_deque", "wrong_lifo"),
         126: ("slot_mapping", None, None), 127: ("paged_attention", None, None),
         128: ("batch_layout", "right_pure_python_lists", "wrong_positions_from_zero"),
         129: ("scheduler", "right_index_loop", "wrong_lifo_admission"),
         131: ("preemption", "right_pop_then_requeue", "wrong_victim_oldest"),
         132: ("prefix_caching", None, None)}


def _files(ex_id: int) -> list[Path]:
    folder, right, wrong = PAIRS[ex_id]
    found = sorted((CASES / folder).glob("*.py"))
    return [next(p for p in found if p.stem == name) if name else next(p for p in found if p.stem.startswith(kind))
            for name, kind in ((right, "right"), (wrong, "wrong"))]


@pytest.mark.parametrize("path", [p for ex in PAIRS for p in _files(ex)], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_worker_and_in_process_agree(path, model_dir):
    ex = next(i for i, (folder, _, _) in PAIRS.items() if folder == path.parent.name)
    graded = judge.grade(ex, path, isolated=bwrap_problem() is None, options={"model": model_dir})
    here = judge.grade_inprocess(ex, load_file(path), options={"model": model_dir})
    assert [(r.name, r.verdict, r.message) for r in graded.results] == \
        [(r.name, r.verdict, r.message) for r in here.results], graded.text() + "\n" + here.text()
    assert graded.ok == path.stem.startswith("right")
