"""Fixtures shared by the test modules."""

import os

import pytest

from mini_llm.settings import EMBEDDED_MODEL

# The tests check the hidden cases as written: never with an instructor's secret seed (judge/secret.py), which a
# machine that wrote a student edition has in ~/.config. Subprocesses inherit this.
os.environ["JUDGE_SECRET_SEED"] = ""


@pytest.fixture(scope="module")
def model_dir() -> str:
    """The embedded checkpoint the judge grades with."""
    return str(EMBEDDED_MODEL)
