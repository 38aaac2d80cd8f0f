"""A chapter in Jupyter at every stage of the course: cells that cannot run yet show their stored outputs, and
cells that run on your modules are compared with them.

`course.start("04_mixed_batch")` (each chapter's setup cell) installs two IPython hooks for the chapter's
kernel:

* a cell that calls a function or class of a module you have not passed yet (course.NotPassedYet), that needs
  a file of the course's repository your copy does not have (course.NotInThisCopy), or that uses
  a name such a cell would have defined, stops there without an error: it shows the chapter's stored output of
  that cell under one line, `(stored output: this cell runs build_batch, exercise 128, which you have not passed
  yet)`, and "Run All" goes on with the next cell;
* with some of your modules in use, the printed text of each code cell that ran your code (a function of your
  practice/ file was called while it ran) is compared with the stored one, and the last code cell of the chapter
  ends with the verdict, naming those cells and, where cells showed stored outputs instead, the exercise (or the
  file of the course this copy lacks) they wait for, e.g. `your batch reproduces the 1 checked output of this
  chapter that ran it (counted from 0: code cell 9 ran batch); 5 cells showed stored outputs: they need
  paged_kv_cache (exercise 126), which you have not passed yet`. Not compared: cells tagged "timing" (wall-clock
  figures vary) and "unchecked" (they print what the contract leaves to you, such as your error messages or the
  type of a returned list).

The stored outputs are read from the chapter's .ipynb when the chapter starts: the notebook as you last saved it.
Outside IPython (a plain `python` process) `install` does nothing and NotPassedYet propagates.
"""

from __future__ import annotations

import ast
import io
import json
import re
import sys
import threading
from pathlib import Path

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
PRACTICE = CHAPTERS.parent / "practice"
MARK = "(stored output: "
TIMING_TAG, VARIES_TAG = "timing", "varies"  # output that varies run to run (tests/test_notebooks.py reads these)
UNCOMPARED_TAGS = (TIMING_TAG, VARIES_TAG, "unchecked")


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
        self.waiting_for: list = []  # what the last stopped cell waits for (`_waiting_for`): cells skipped for a
        # NameError after it wait for the same
        self.unbound: dict[str, tuple[str, list]] = {}  # name a skipped cell would have bound -> (its line, waits)
        self.matched: dict[int, bool] = {}  # per code-cell index that ran your code: its output equalled the stored one
        self.ran: dict[int, set[str]] = {}  # per such index: which of your modules it ran
        self.skipped: dict[int, list] = {}  # per code-cell index that showed its stored output: what it waits for
        self.watch: _Watch | None = None
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
        found = self.stored(self.cell)
        if found is not None and _checked(found[1]):
            self.watch = _Watch(self.yours)

    def post_run_cell(self, result) -> None:
        if self.tee is None:
            return
        sys.stdout, printed = self.tee.inner, "".join(self.tee.parts)
        self.tee = None
        ran = self.watch.stop() if self.watch else set()
        self.watch = None
        found = self.stored(self.cell)
        if found is None or self.cell == self.start_source:
            return
        index, cell = found
        want = stdout_text(cell.get("outputs", []))
        if ran and MARK not in printed and result.error_in_exec is None and want.strip():
            self.ran[index] = ran
            self.matched[index] = normalised(printed) == normalised(want)
        if index == len(self.code) - 1:
            line = self.verdict()
            if line:
                print(line)

    def verdict(self) -> str | None:
        """One line: how many checked outputs ran your code and equal the stored ones, which cells they are (counted
        from 0) and which of your modules each ran; then what the cells that showed stored outputs wait for."""
        if not self.yours:
            return None
        ran = set().union(*self.ran.values()) or self.yours  # of your modules in use, those that ran
        names, them = ", ".join(sorted(ran)), "it" if len(ran) == 1 else "them"
        cells = "; ".join(f"code cell {i} ran {', '.join(sorted(self.ran[i]))}" for i in sorted(self.ran))
        differ = sorted(i for i, same in self.matched.items() if not same)
        n = len(self.matched)
        if n == 0:
            line = f"your {names}: no checked output of this chapter ran {them}"
        elif differ:
            line = (f"your {names}: {len(differ)} of the {n} checked outputs of this chapter that ran {them} differ "
                    f"from the stored ones (code cells {differ}; counted from 0: {cells})")
        else:
            what = "the 1 checked output" if n == 1 else f"all {n} checked outputs"
            line = (f"your {names} reproduce{'s' if len(ran) == 1 else ''} {what} of this chapter that ran "
                    f"{them} (counted from 0: {cells})")
        if self.skipped:
            many, waits = len(self.skipped) > 1, set().union(*self.skipped.values())
            latest = {w.module: w for cell in sorted(self.skipped) for w in self.skipped[cell]
                      if not isinstance(w, str)}  # each module once, as the last cell saw it
            exercises = sorted((w for w in latest.values() if w.exercise), key=lambda c: c.exercise)
            unreleased = sorted(w.module for w in latest.values() if not w.exercise)
            files = sorted(w for w in waits if isinstance(w, str))  # "benchmarks/throughput.py"
            needs = ([awaited(exercises, "{module} (exercise {exercise}{why})")] if exercises else []) + \
                    ([f"{listed(unreleased)}, whose exercise this copy does not release"] if unreleased else []) + \
                    ([f"{listed(files)}, which your copy does not have"] if files else [])
            line += (f"; {len(self.skipped)} cell{'s' if many else ''} showed stored outputs: "
                     f"{'they need' if many else 'it needs'} {'; and '.join(needs)}")
        return line

    def skip(self, line: str) -> None:
        """Show the stored output of the current cell under one line; the cell then counts as run without error,
        and binds none of its names (half-built values would fail further down)."""
        found = self.stored(self.cell)
        if found is not None and self.waiting_for:
            self.skipped[found[0]] = self.waiting_for
        self.unbound.update(dict.fromkeys(_bound_names(self.cell), (line, self.waiting_for)))
        namespace = self.shell.user_ns
        for name in [n for n in namespace if not n.startswith("_")]:
            if name not in self.names_before:
                del namespace[name]
            elif namespace[name] is not self.names_before[name]:
                namespace[name] = self.names_before[name]
        from IPython.display import clear_output

        clear_output()  # what the cell printed before it stopped: the stored output replaces it
        print(f"{MARK}{line})")
        if found is None:
            print("(this cell differs from the chapter as stored, so there is no stored output to show)")
        else:
            _republish(found[1].get("outputs", []))
        result = self.shell.displayhook.exec_result  # the running cell's result: no error, "Run All" goes on
        if result is not None:
            result.error_in_exec = None


def _checked(cell: dict) -> bool:
    return not any(tag in cell.get("metadata", {}).get("tags", []) for tag in UNCOMPARED_TAGS)


class _Watch:
    """Which of your exercise modules (practice/<module>.py) run while a cell runs: a profile hook, in this thread
    and in threads the cell starts, that notes each call of a function of theirs, and removes itself once it has
    seen them all (it costs nothing after that). A module the cell's own `course.use` returns is added then."""

    def __init__(self, modules: set[str]) -> None:
        self.files: dict[str, str] = {}
        self.seen: set[str] = set()
        self.add(modules)

    def add(self, modules: set[str]) -> None:
        new = {getattr(sys.modules.get(f"practice.{m}"), "__file__", None) or str(PRACTICE / f"{m}.py"): m
               for m in modules - set(self.files.values())}
        if new:
            self.files.update(new)
            sys.setprofile(self.hook)
            threading.setprofile(self.hook)

    def hook(self, frame, event, arg) -> None:
        if event == "call" and frame.f_code.co_filename in self.files:
            self.seen.add(self.files[frame.f_code.co_filename])
            if len(self.seen) == len(self.files):
                self.stop()

    def stop(self) -> set[str]:
        if sys.getprofile() == self.hook:
            sys.setprofile(None)
        threading.setprofile(None)
        return self.seen


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


def _bound_names(source: str) -> set[str]:
    """The names a cell's code binds (assigned, defined, imported); none where it is not plain Python."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython's %magics
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _what_it_did(line: str) -> str:
    """A skipped cell's line without its subject ("this cell runs X, ..." -> "runs X, ..."), for a later cell's;
    a line that says the cell used a name from above keeps that cell's own reason."""
    return line.split(" from a cell above that ", 1)[-1].removeprefix("this cell ")


def _stop_in(error: BaseException, stops: tuple) -> BaseException | None:
    """The first of `stops` in the chain of causes of `error` (an engine's StepError wraps what its step raised)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, stops):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _handler(session: ChapterSession):
    def handle(shell, etype, value, tb, tb_offset=None):
        stop = _stop_in(value, session.stops)
        if stop is not None:
            session.reason = stop.line()
            session.waiting_for = _waiting_for(stop)
            session.skip(session.reason)
        elif isinstance(value, NameError) and session.reason:
            line, session.waiting_for = session.unbound.get(value.name, (session.reason, session.waiting_for))
            session.skip(f"this cell uses a name from a cell above that {_what_it_did(line)}")
        else:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)

    return handle


def listed(items: list[str]) -> str:
    """["a", "b", "c"] as "a, b and c"."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def awaited(missing: list, form: str) -> str:
    """The exercises `missing` (course.Choice), each as `form` names it, and why they are not yours: "A and B, which
    you have not passed yet", or each with its own reason ({why}) where one of them changed since it passed."""
    changed = any(m.changed for m in missing)

    def why(m) -> str:
        return "" if not changed else ", changed since it passed: grade it again" if m.changed else ", not passed yet"

    named = listed([form.format(exercise=m.exercise, module=m.module, why=why(m)) for m in missing])
    return named if changed else f"{named}, which you have not passed yet"


def _waiting_for(stop: Exception) -> list:
    """What a stopped cell waits for: the exercises not passed yet or not released here (course.Choice), or a file
    this copy lacks, "benchmarks/throughput.py"."""
    if hasattr(stop, "missing"):  # course.NotPassedYet; course.NotInThisCopy has a path instead
        return stop.missing() or [stop.choice]  # none: a module whose exercise this copy does not release
    return [stop.path] if getattr(stop, "path", None) else []


def using(modules: set[str]) -> None:
    """Your modules that a `course.use` call has just returned: the cell being watched watches them too."""
    if _active is not None and _active.watch is not None:
        _active.watch.add(modules)


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
