"""The last grading result of each practice file, for `python practice/judge.py list`: stored outside the repository,
valid while the file's content (sha256) is unchanged."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from pathlib import Path

from .registry import Exercise
from .report import Report


def cache_file() -> Path:
    base = os.environ.get("JUDGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mini-llm-judge")
    return Path(base) / "results.json"


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _load() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def save(ex: Exercise, path: Path, report: Report) -> None:
    digest = _digest(path)
    if digest is None:
        return
    data = _load()
    # public_only: graded on a copy without the hidden tests (the public cases alone: a banner says "public cases")
    data[f"{ex.id}:{path.resolve()}"] = {"sha256": digest, "passed": report.passed, "failed": report.failed,
                                         "public_only": ex.case_counts()[1] is None}
    with suppress(OSError):
        f = cache_file()
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(f)


def lookup(ex: Exercise, path: Path) -> dict | None:
    """{"passed": n, "failed": n, "public_only": bool, "changed": bool} of the last grading of this file, "changed"
    where its content is no longer what was graded; None where it was never graded."""
    entry = _load().get(f"{ex.id}:{path.resolve()}")
    return entry and {**entry, "changed": entry.get("sha256") != _digest(path)}
