"""Code that does nothing scores nothing: every practice stub with each `raise NotImplementedError(...)` replaced
by `return None` (or an empty value: a function that returns without doing its work) fails every case of its
exercise. A case that such code passes checks too little."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import judge

ROOT = Path(__file__).resolve().parent.parent
# `return None` everywhere; and the empty values that once passed an edge case (no slots, a constant hash)
VARIANTS = [(ex_id, "return None") for ex_id in sorted(judge.load_exercises())] + [(126, "return []"),
                                                                                   (132, "return 0")]


@pytest.mark.parametrize("ex_id, body", VARIANTS)
def test_code_that_does_nothing_fails_every_case(ex_id, body):
    ex = judge.get_exercise(ex_id)
    stub = (ROOT / ex.practice_file).read_text()
    if "raise NotImplementedError" not in stub:
        pytest.skip(f"{ex.practice_file} has been filled in")
    source = re.sub(r"^(\s*)raise NotImplementedError\(.*\)$", rf"\1{body}", stub, flags=re.M)
    report = judge.grade(ex_id, source=source)  # in the sandbox, as the practice file (relative imports work)
    assert report.passed == 0, report.text()
