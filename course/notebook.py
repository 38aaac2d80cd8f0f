"""A chapter in Jupyter at every stage of the course: cells that cannot run yet show their stored outputs, and
cells that run on your modules are compared with them.

`course.start("04_mixed_batch")` (each chapter's setup cell) installs two IPython hooks for the chapter's
kernel:

* a cell that calls a function or class of a module you have not passed yet (course.NotPassedYet), that needs
  a file of the course's repository your copy does not have (course.NotInThisCopy), or that uses
  a name such a cell would have defined, stops there without an error: it shows the chapter's stored output of
  that cell under one line, `(stored output: this cell runs build_batch, exercise 128, which you have not passed
  yet)`, and "Run All" goes on with the next cell;
* with some of your modules in use, each code cell's printed text is compared with the stored one, and the last
  code cell of the chapter ends with the verdict, e.g. `your batch reproduces all 6 checked outputs of this
  chapter`. Not compared: cells tagged "timing" (wall-clock figures vary) and "unchecked" (they print what the
  contract leaves to you, such as your error messages or the type of a returned list).

The stored outputs are read from the chapter's .ipynb when the chapter starts: the notebook as you last saved it.
Outside IPython (a plain `python` process) `install` does nothing and NotPassedYet propagates.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
MARK = "(stored output: "
UNCOMPARED_TAGS = ("timing", "unchecked")


def normalised(text: str) -> str:
    """Printed text as compared: object addresses, the implementation's name and numbers in scientific notation
    (rounding noise such as 4.8e-07) vary between runs and machines; the cells assert their bounds."""
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"\bpractice\b", "solutions", text)
    return re.sub(r"-?\d+(?:\.\d+)?e[+-]\d+", "<sci>", text)


def stdout_text(outputs: list[dict]) -> str:
    return "".join("".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                   for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")


class _Tee(io.TextIOBase):
    """sys.stdout that also keeps what was written."""

    def __init__(self, inner) -> None:
        self.inner, self.parts = inner, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class ChapterSession:
    def __init__(self, shell, chapter: str, yours: set[str], stops: tuple[type[Exception], ...]) -> None:
        self.yours, self.stops = yours, stops  # course.USED_YOURS; course.NotPassedYet and course.NotInThisCopy
        self.shell, self.chapter = shell, chapter
        path = CHAPTERS / f"{chapter}.ipynb"
        cells = json.loads(path.read_text())["cells"] if path.is_file() else []
        self.code = [(_source(c), c) for c in cells if c["cell_type"] == "code"]
        self.start_source = self.code[0][0] if self.code else None
        self.reason: str | None = None  # the last NotPassedYet line: later NameErrors come from its cell
        self.matched: dict[int, bool] = {}  # per code-cell index: its last output equalled the stored one
        self.cell: str = ""
        self.names_before: dict = {}
        self.tee: _Tee | None = None

    def install(self) -> None:
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self.shell.set_custom_exc((Exception,), _handler(self))

    def uninstall(self) -> None:
        if self.tee is not None:
            sys.stdout, self.tee = self.tee.inner, None
        self.shell.events.unregister("pre_run_cell", self.pre_run_cell)
        self.shell.events.unregister("post_run_cell", self.post_run_cell)

    def stored(self, source: str) -> tuple[int, dict] | None:
        for i, (src, cell) in enumerate(self.code):
            if src == source:
                return i, cell
        return None

    # -- hooks
    def pre_run_cell(self, info) -> None:
        self.cell = info.raw_cell
        self.names_before = dict(self.shell.user_ns)
        self.tee = _Tee(sys.stdout)
        sys.stdout = self.tee

    def post_run_cell(self, result) -> None:
        if self.tee is None:
            return
        sys.stdout, printed = self.tee.inner, "".join(self.tee.parts)
        self.tee = None
        found = self.stored(self.cell)
        if found is None or self.cell == self.start_source:
            return
        index, cell = found
        tags = cell.get("metadata", {}).get("tags", [])
        checked = not any(tag in tags for tag in UNCOMPARED_TAGS) and MARK not in printed
        want = stdout_text(cell.get("outputs", []))
        if checked and result.error_in_exec is None and want.strip() and self.yours:
            self.matched[index] = normalised(printed) == normalised(want)
        if index == len(self.code) - 1:
            line = self.verdict()
            if line:
                print(line)

    def verdict(self) -> str | None:
        if not self.yours:
            return None
        names, n = ", ".join(sorted(self.yours)), len(self.matched)
        differ = sorted(i for i, same in self.matched.items() if not same)
        if n == 0:
            return f"your {names}: no checked output of this chapter ran on it"
        if not differ:
            return f"your {names} reproduce{'s' if len(self.yours) == 1 else ''} all {n} checked outputs of this chapter"
        return (f"your {names}: {len(differ)} of {n} checked outputs of this chapter differ from the stored ones "
                f"(code cells {differ}, counted from 0)")

    def skip(self, line: str) -> None:
        """Show the stored output of the current cell under one line; the cell then counts as run without error,
        and binds none of its names (half-built values would fail further down)."""
        namespace = self.shell.user_ns
        for name in [n for n in namespace if not n.startswith("_")]:
            if name not in self.names_before:
                del namespace[name]
            elif namespace[name] is not self.names_before[name]:
                namespace[name] = self.names_before[name]
        from IPython.display import clear_output

        clear_output()  # what the cell printed before it stopped: the stored output replaces it
        print(f"{MARK}{line})")
        found = self.stored(self.cell)
        if found is None:
            print("(this cell differs from the chapter as stored, so there is no stored output to show)")
        else:
            _republish(found[1].get("outputs", []))
        result = self.shell.displayhook.exec_result  # the running cell's result: no error, "Run All" goes on
        if result is not None:
            result.error_in_exec = None


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _republish(outputs: list[dict]) -> None:
    from IPython.display import display

    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
            text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(MARK))
            (sys.stdout if out.get("name") == "stdout" else sys.stderr).write(text)
        elif kind in ("display_data", "execute_result"):
            display(out.get("data", {}), raw=True, metadata=out.get("metadata", {}))
    sys.stdout.flush()


def _handler(session: ChapterSession):
    def handle(shell, etype, value, tb, tb_offset=None):
        if isinstance(value, session.stops):
            session.reason = value.line()
            session.skip(session.reason)
        elif isinstance(value, NameError) and session.reason:
            session.skip(f"this cell uses a name from a cell above that {session.reason.removeprefix('this cell ')}")
        else:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)

    return handle


def install(chapter: str, yours: set[str], stops: tuple[type[Exception], ...]) -> ChapterSession | None:
    """Install the hooks in the running IPython kernel (nothing outside IPython). `yours`: the names of the learner's
    modules in use, which the course fills; `stops`: the exceptions that show a cell's stored output instead."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return None
    global _active
    if _active is not None:  # a second start() in the same kernel replaces the first
        _active.uninstall()
    _active = ChapterSession(shell, chapter, yours, stops)
    _active.install()
    return _active


_active: ChapterSession | None = None
