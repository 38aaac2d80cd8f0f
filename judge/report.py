"""Grading results and their text form (what the CLI prints and what `check` puts in its AssertionError)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CaseResult:
    name: str
    passed: bool
    seconds: float = 0.0
    verdict: str = "pass"  # pass | fail | error | not implemented | exit | memory | timeout | crash | output | not run
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    exercise_id: int
    slug: str
    title: str
    target: str  # what was graded: a file path, a module name, "<source>", ...
    results: list[CaseResult] = field(default_factory=list)
    fatal: str | None = None  # why nothing (or not everything) could be graded
    output: str = ""  # the learner's captured stdout+stderr, truncated
    output_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def failed(self) -> int:
        n = sum(not r.passed for r in self.results)
        return n if (self.results or not self.fatal) else 1

    @property
    def ok(self) -> bool:
        return self.failed == 0 and bool(self.results) and not self.fatal

    @property
    def score(self) -> float:
        total = self.passed + self.failed
        return round(100.0 * self.passed / total, 1) if total else 0.0

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, summary: bool = True, verbose: bool = False) -> str:
        lines = [f"== exercise {self.exercise_id} {self.slug}: {self.title}", f"   grading {self.target}"]
        if self.fatal:
            lines += ["", *_indent(self.fatal, "   "), ""]
        width = max([len(r.name) for r in self.results] + [20])
        previous = None
        for r in self.results:
            status = "PASS" if r.passed else "FAIL"
            verdict = "" if r.passed or r.verdict in ("fail", "error") else f"  [{r.verdict}]"
            lines.append(f"{status}  {r.name:<{width}}  {r.seconds:6.2f}s{verdict}")
            if r.passed:
                continue
            key = (r.verdict, r.message, sorted((k, str(v)) for k, v in r.details.items() if k != "input"))
            if key == previous:
                lines.append("      (same as above)")
                continue
            previous = key
            lines += _indent(r.message, "      ")
            d = r.details
            if d.get("input"):
                lines += _indent(f"smallest failing input: {d['input']}", "      ")
            if d.get("field"):
                lines.append(f"      {d['field']}: expected {d.get('expected')}")
                lines.append(f"      {' ' * len(d['field'])}  got      {d.get('got')}")
            if d.get("hint"):
                lines += _indent(f"hint: {d['hint']}", "      ")
            if d.get("traceback"):
                lines += _indent(d["traceback"], "      | ")
        if self.output_bytes and (verbose or not self.ok):
            lines += ["", f"your code printed {self.output_bytes} bytes" +
                      (" (truncated):" if self.output_bytes > len(self.output.encode()) else ":")]
            shown = [ln if len(ln) <= 300 else ln[:300] + " ..." for ln in self.output.rstrip("\n").splitlines()]
            lines += _indent("\n".join(shown), "   > ")
        for note in self.notes:
            lines.append(f"note: {note}")
        if summary:
            lines.append(self.summary())
        return "\n".join(lines)


def _indent(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in str(text).splitlines()] or [prefix]
