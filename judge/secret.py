"""The instructor's secret seed ($JUDGE_SECRET_SEED, else the file `python -m judge.edition` creates): random hidden
cases drawn from it differ from anything a student could run. Without one the seed is "" (the cases this
repository's tests check). It never leaves the grader: the worker gets inputs, not seeds."""

from __future__ import annotations

import hashlib
import os
import random
import secrets
from pathlib import Path


def secret_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "mini-llm-judge" / "secret_seed"


def secret_seed() -> str:
    if "JUDGE_SECRET_SEED" in os.environ:
        return os.environ["JUDGE_SECRET_SEED"]
    try:
        return secret_file().read_text().strip()
    except OSError:
        return ""


def ensure_secret() -> Path:
    """Create the instructor's secret seed file if there is none; return its path."""
    f = secret_file()
    if not f.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(secrets.token_hex(16) + "\n")
        f.chmod(0o600)
    return f


def rng(seed: int | str) -> random.Random:
    """random.Random for a hidden case: `seed` alone without a secret (as today), mixed with the secret if any."""
    secret = secret_seed()
    if not secret:
        return random.Random(seed)
    return random.Random(int.from_bytes(hashlib.sha256(f"{secret}:{seed}".encode()).digest()[:8], "big"))
