"""Grading results and their text form, bounded whatever the graded code does (judge/README.md, "How the sandbox
works"): no control characters, strings cut to TEXT_LIMIT, the text to REPORT_LIMIT, and for a class (`for_class`) no
path of the grader's machine, no frame of the course's files or of a reference, no printed output."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .registry import ROOT

TEXT_LIMIT = 2000  # characters of one string of a case (message, exception, traceback, expected / got)
REPORT_LIMIT = 40_000  # characters of a whole report
# C0 controls but tab and newline, DEL, C1 controls, and the Unicode marks that reorder or hide text
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: Any, limit: int = TEXT_LIMIT) -> str:
    """`text` safe to print: control characters escaped (\\x1b), at most `limit` characters."""
    text = str(text)
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                         text[:limit])
    if len(text) <= limit and len(shown) <= limit:
        return shown
    cut = f" [... cut at {limit} characters]"
    return shown[:limit - len(cut)] + cut


_FRAME = re.compile(r'  File "(?P<path>[^"]*)", line')


def _public_frames(traceback: str) -> str:
    """A traceback without the frames of the grader's files or of a reference: their source is not the student's."""
    hidden = (str(ROOT) + os.sep, "/course/solutions/")
    out, skipping = [], False
    for line in traceback.splitlines():
        m = _FRAME.match(line)
        if m:
            skipping = m["path"].startswith(hidden)
            out += ["  (a frame of the course)"] if skipping else [line]
        elif not (skipping and line.startswith("    ")):
            skipping = False
            out.append(line)
    return "\n".join(out)


def _private(text: str) -> str:
    """`text` without the grader's folders (the course checkout, the home folder)."""
    for path, shown in ((str(ROOT), "<course>"), (os.path.expanduser("~"), "~")):
        if len(path) > 1:  # a whole path only: a student named root keeps .../submitted/root/...
            # after a separator, or after a character `clean` escaped (/proc/*/cmdline's NULs: \x00; \u200b)
            text = re.sub(rf"(?:(?<=\\x[0-9a-f]{{2}})|(?<=\\u[0-9a-f]{{4}})|(?<![\w./-])){re.escape(path)}(?![\w.-])",
                          shown, text)
    return text


@dataclass
class CaseResult:
    name: str
    passed: bool
    seconds: float = 0.0
    verdict: str = "pass"  # fail, error, not implemented, exit, memory, timeout, crash, output, protocol, not run...
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.message = clean(self.message)
        self.details = {k: clean(v) if isinstance(v, str) else v for k, v in self.details.items()}


@dataclass
class Report:
    exercise_id: int
    slug: str
    title: str
    target: str  # what was graded: a file path, a module name, ...
    results: list[CaseResult] = field(default_factory=list)
    fatal: str | None = None  # why nothing (or not everything) could be graded
    output: str = ""  # the learner's captured stdout+stderr, truncated
    output_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    class_grading: bool = False  # see `for_class`

    def for_class(self) -> "Report":
        """This report as a class sees it (see the module docstring)."""
        for r in self.results:
            r.message = _private(r.message)
            if isinstance(r.details.get("traceback"), str):
                r.details["traceback"] = _public_frames(r.details["traceback"])
            r.details = {k: _private(v) if isinstance(v, str) else v for k, v in r.details.items()}
        self.target, self.fatal = _private(self.target), _private(self.fatal) if self.fatal else self.fatal
        self.notes = [_private(n) for n in self.notes]
        self.class_grading = True
        return self

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

    def text(self, summary: bool = True, verbose: bool = False) -> str:
        lines = [f"== exercise {self.exercise_id} {self.slug}: {self.title}", f"   grading {clean(self.target, 300)}"]
        if self.fatal:
            lines += ["", *_indent(clean(self.fatal), "   "), ""]
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
        if self.output_bytes and self.class_grading:
            lines += ["", f"your code printed {self.output_bytes} bytes (not shown when grading a class: it could "
                          "carry the hidden inputs)"]
        elif self.output_bytes and (verbose or not self.ok):
            lines += ["", f"your code printed {self.output_bytes} bytes" +
                      (" (truncated):" if self.output_bytes > len(self.output.encode()) else ":")]
            shown = [clean(ln, 300) for ln in self.output.rstrip("\n").splitlines()]
            lines += _indent("\n".join(shown), "   > ")
        for note in self.notes:
            lines.append(f"note: {clean(note)}")
        text = "\n".join(lines)
        if len(text) > REPORT_LIMIT:
            end = text.rfind("\n", 0, REPORT_LIMIT)
            text = text[:end if end > 0 else REPORT_LIMIT] + f"\n[... the report is cut at {REPORT_LIMIT} characters]"
        return text + ("\n" + self.summary() if summary else "")


def _indent(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in str(text).splitlines()] or [prefix]
