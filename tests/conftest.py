"""Fixtures shared by the test modules."""

import pytest

from mini_llm.settings import EMBEDDED_MODEL


@pytest.fixture(scope="module")
def model_dir() -> str:
    """The embedded checkpoint the judge grades with."""
    return str(EMBEDDED_MODEL)
