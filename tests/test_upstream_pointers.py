"""Every vLLM / SGLang pointer in the course names a file and symbols of the pinned release (docs/upstream.json).

A pointer is a source path of vLLM (`vllm/...py`) or SGLang (`python/sglang/...py`) in a chapter (markdown, code
and outputs), a doc, a statement, a docstring or a comment. Each path must be a file of a pin; each commit named in
its sentence must be that pin's commit; each backticked name of its paragraph (or list item) must be a symbol
listed under one of the files its text cites, or one of `other_names`. Commits named anywhere else ("commit X",
"at X", "@X") must be a pin's or one of `other_commits`. Offline: the list is refreshed by hand (docs/upstream.json
says how), never read from the network.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = json.loads((ROOT / "docs" / "upstream.json").read_text())
PATH_RE = re.compile(r"(?<![\w/.])(vllm/[\w/]+\.py|(?:python/)?sglang/[\w/]+\.py)")
HEX_RE = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")
CITED_COMMIT_RE = re.compile(r"(?:commit|\bat|@)\s*`?([0-9a-f]{7,40})\b")
NAME_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")
# docs/review.md is a log of what was read when: its commits are history, not pointers. This file holds wrong
# pointers on purpose, for its self-test.
SKIPPED = {"docs/review.md", "tests/test_upstream_pointers.py"}


@functools.cache
def documents() -> list[tuple[str, str]]:
    """(name, text) of every place a pointer may be: notebook cells and outputs, docs, statements, Python files."""
    found = []
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            found.append((f"{path.name} cell {i}", cell.source))
            for out in cell.get("outputs", []):
                if isinstance(out.get("text"), str):
                    found.append((f"{path.name} cell {i} output", out["text"]))
    paths = [*(ROOT / "docs").glob("*.md"), *(ROOT / "practice" / "exercises").glob("*.md"),
             ROOT / "README.md", ROOT / "chapters" / "README.md"]
    for folder in ("framework", "solutions", "practice", "course", "benchmarks", "mini_llm", "chapters", "scripts",
                   "tests"):
        paths += (ROOT / folder).rglob("*.py")
    for path in sorted(paths):
        name = path.relative_to(ROOT).as_posix()
        if name not in SKIPPED and ".ipynb_checkpoints" not in name:
            text = path.read_text(encoding="utf-8")
            found.append((name, re.sub(r"(?m)^\s*# ?", "", text) if path.suffix == ".py" else text))
    return found


BLOCK_RE = re.compile(r"\n\s*\n|\n(?=\s*(?:[*-] |\d+\. |\||#|>|\"\"\"))")


def blocks(text: str) -> list[str]:
    """Paragraphs, list items and table rows, each on one line."""
    return [" ".join(block.split()) for block in BLOCK_RE.split(text)]


def sentences(block: str) -> list[str]:
    """A block's sentences (a commit is checked against the files of its own sentence)."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*(\"`])", block)


def names(block: str) -> list[str]:
    """The backticked names of a block: identifiers, dotted or called, not paths or commits."""
    return [token.removesuffix("()") for token in re.findall(r"`([^`\n]+)`", block)
            if NAME_RE.match(token) and not HEX_RE.fullmatch(token)]


def pin_of(path: str) -> tuple[str, str] | None:
    """(pin name, repository path) of a cited path, or None if no pin lists it."""
    path = "python/" + path if path.startswith("sglang/") else path
    for name, pin in UPSTREAM["pins"].items():
        if path in pin["files"]:
            return name, path
    return None


def problems(where: str, text: str) -> list[str]:
    """What is wrong with the pointers of one text (a cell, a doc, a Python file); nothing if it cites no upstream
    file. Paths and commits are checked sentence by sentence; the names of every paragraph or list item that cites a
    file must be symbols listed under one of the files the text cites (a pointer's sentences often go on to name more
    of the same file), or `other_names`."""
    cited = {p: pin_of(p) for p in PATH_RE.findall(text)}
    if not cited:
        return []
    found = [f"{where}: {path} is not a file of any pin in docs/upstream.json"
             for path, o in cited.items() if o is None]
    symbols = set(UPSTREAM["other_names"])
    for owner in filter(None, cited.values()):
        symbols.update(UPSTREAM["pins"][owner[0]]["files"][owner[1]])
    for block in blocks(text):
        if not PATH_RE.search(block):
            continue
        for sentence in sentences(block):
            owners = [cited[p] for p in PATH_RE.findall(sentence) if cited[p]]
            pins = [UPSTREAM["pins"][name] for name, _ in owners] or UPSTREAM["pins"].values()
            commits = {pin["commit"] for pin in pins}
            found += [f"{where}: commit {c} beside {', '.join(p for _, p in owners)} is not the pinned one"
                      for c in HEX_RE.findall(sentence) if not any(full.startswith(c) for full in commits)]
        found += [f"{where}: `{name}` is not a listed symbol of {', '.join(sorted(cited))}"
                  for name in names(block) if name not in symbols]
    return found


def stray_commits(where: str, text: str) -> list[str]:
    allowed = [pin["commit"] for pin in UPSTREAM["pins"].values()] + list(UPSTREAM["other_commits"].values())
    return [f"{where}: commit {c} is neither a pin nor in other_commits" for c in CITED_COMMIT_RE.findall(text)
            if HEX_RE.fullmatch(c) and not any(a.startswith(c) or c.startswith(a) for a in allowed)]


def test_every_pointer_is_pinned_and_listed():
    pointers = [p for _, text in documents() for p in PATH_RE.findall(text)]
    assert len(pointers) >= 100, f"only {len(pointers)} pointers found: is the extraction broken?"
    errors = [e for where, text in documents() for e in problems(where, text) + stray_commits(where, text)]
    assert not errors, "\n".join(errors)


def test_every_pinned_file_and_other_name_is_used():
    cited = {pin_of(p) for _, text in documents() for p in PATH_RE.findall(text)}
    listed = {(name, path) for name, pin in UPSTREAM["pins"].items() for path in pin["files"]}
    assert listed <= cited, f"listed but cited nowhere (drop them): {sorted(listed - cited)}"
    used = {n for _, text in documents() for block in blocks(text) if PATH_RE.search(block) for n in names(block)}
    assert set(UPSTREAM["other_names"]) <= used, f"unused other_names: {set(UPSTREAM['other_names']) - used}"


def test_the_check_fails_on_a_wrong_pointer():
    vllm = UPSTREAM["pins"]["vllm"]["commit"]
    good = (f"`Scheduler.schedule` (`vllm/v1/core/sched/scheduler.py`, commit {vllm[:10]}) schedules. "
            "Then `token_budget`.")
    assert problems("x", good) == []
    assert problems("x", good.replace(vllm[:10], "00024d3145")), "another commit must fail"
    assert problems("x", good.replace("Scheduler.schedule`", "Scheduler.schedule_all`")), "an unknown symbol must fail"
    assert problems("x", good.replace("token_budget", "token_budget_left")), "so must one later in the paragraph"
    assert problems("x", good.replace("scheduler.py", "scheduler2.py")), "an unknown file must fail"
    assert stray_commits("x", "eagle.py at f7eef1b6987f"), "a commit of no pin must fail"
    assert not stray_commits("x", f"at {vllm}")


def test_the_pins_are_stated_for_readers():
    readme = (ROOT / "chapters" / "README.md").read_text()
    for pin in UPSTREAM["pins"].values():
        assert pin["commit"][:10] in readme and pin["release"] in readme, pin["release"]
