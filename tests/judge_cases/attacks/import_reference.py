"""Attack: import the reference (and fall back to inheriting from the reference module's namespace)."""

from solutions.batch import build_batch  # noqa: F401
