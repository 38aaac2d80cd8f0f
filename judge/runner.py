"""Grading: the cases run here, in the grader; the learner's code runs in a separate process, the worker.

For each case the grader calls the learner's code through `judge.remote` proxies: the worker receives plain
inputs, runs the learner's code (or a public driver of judge/drivers/ that builds what the exercise needs from the
framework), and answers with plain data. The grader compares that data with expected values it computes itself
and gives the verdict: nothing the worker does, prints or forges can pass a case.

One case at a time: a case whose worker hangs, crashes, exits, exhausts its memory or floods its output gets that
verdict, and a fresh worker runs the next case. A total time cap per submission stops the rest (reported).

The worker is started by `judge.sandbox`: under bubblewrap when `isolated` (class grading), else as a plain
subprocess with limits (self-study). For function objects, `grade_inprocess` runs the cases in this process.
"""

from __future__ import annotations

import importlib
import os
import selectors
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator

from . import sandbox, wire
from .registry import Exercise, get_exercise
from .remote import RemoteModule, Session, WorkerLost
from .report import CaseResult, Report

STARTUP_TIMEOUT = 120.0  # seconds for the worker to start Python and reach the learner's module
IMPORT_SLACK = 30.0  # seconds on top of the case limit to import the learner's module (it imports torch)
OUTPUT_LIMIT = 1_000_000  # bytes of learner output before the worker is stopped
KEEP_OUTPUT = 1500  # bytes kept from the start and from the end of the learner's output


class IsolationUnavailable(RuntimeError):
    """Isolated grading was asked for and bubblewrap cannot run here."""


class _Output:
    def __init__(self) -> None:
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = KEEP_OUTPUT - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-KEEP_OUTPUT:]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        if not self.tail:
            return head
        skipped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {skipped} bytes not shown ...]\n" if skipped > 0 else ""
        return head + middle + self.tail.decode("utf-8", "replace")


def _signal_name(num: int) -> str:
    try:
        name = signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
    extra = {"SIGSEGV": " (segmentation fault)", "SIGABRT": " (abort)", "SIGBUS": " (bus error)",
             "SIGFPE": " (arithmetic error)", "SIGILL": " (illegal instruction)"}.get(name, "")
    return name + extra


class WorkerProcess(Session):
    """One worker: started, asked, and stopped by the grader. `lost` says why it stopped, if it did."""

    def __init__(self, ex: Exercise, target: dict[str, Any], isolated: bool, memory_mb: int | None,
                 options: dict[str, Any], output: _Output, output_limit: int) -> None:
        self.args = (ex, target, isolated, memory_mb, options, output, output_limit)
        self.ex, self.output, self.output_limit, self.memory_mb = ex, output, output_limit, memory_mb
        self.output_start = output.total  # the limit is per worker, hence per case
        self.epoch = 0
        self.deadline = time.monotonic() + STARTUP_TIMEOUT
        self.phase = "start"  # start | import | case
        self.lost: tuple[str, str] | None = None  # (verdict, message)
        self.status: int | None = None
        self.rusage = None
        self.buf = b""
        self.tmp = tempfile.mkdtemp(prefix="judge-")
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        submission = Path(target["impl"]) if target.get("impl") else None
        extra = [p for p in (options.get("model"),) if p and os.path.exists(p)]
        argv, inner, args_fd = sandbox.command(ex, isolated, submission, extra, (req_r, rep_w))
        cfg = {"exercise": ex.id, "options": options, "memory_mb": memory_mb, "display": target.get("display"),
               "impl_module": target.get("impl_module"), "impl": inner}
        passed = (req_r, rep_w) if args_fd is None else (req_r, rep_w, args_fd)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     pass_fds=passed, cwd=self.tmp, env=sandbox.worker_env(self.tmp),
                                     start_new_session=True)
        for fd in passed:
            os.close(fd)
        self.out_fd = self.proc.stdout.fileno()
        for fd in (self.rep_r, self.out_fd):
            os.set_blocking(fd, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.rep_r, selectors.EVENT_READ, "reply")
        self.sel.register(self.out_fd, selectors.EVENT_READ, "output")
        self.open_fds = 2
        self.next_id = 0
        self._write(cfg)

    # -- talking to it

    def _write(self, msg: dict) -> None:
        data = wire.dumps(msg)
        try:
            while data:
                data = data[os.write(self.req_w, data):]
        except (BrokenPipeError, OSError):
            pass  # it died: the next read says how

    def _read_message(self) -> dict:
        """The next message of the worker; WorkerLost when it dies, hangs past the deadline or floods output."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    return wire.loads(line)
                except ValueError:
                    continue  # not a message: written by the learner's code on the reply pipe; ignored
            if self.lost:
                raise WorkerLost(self.lost[1])
            self._pump()

    def _pump(self) -> None:
        if self.status is None:
            pid, st, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.status, self.rusage = st, ru
        timeout = max(0.0, min(self.deadline - time.monotonic(), 0.05 if self.status is None else 0.0))
        events = self.sel.select(timeout) if self.open_fds else []
        for key, _ in events:
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                self.sel.unregister(key.fd)
                self.open_fds -= 1
            elif key.data == "reply":
                self.buf += data
            else:
                self.output.add(data)
        if b"\n" in self.buf:
            return
        if self.output.total - self.output_start > self.output_limit:
            self._stop("output", f"output limit exceeded: your code printed more than {self.output_limit} bytes "
                                 "(remove the prints in loops)")
        elif self.status is not None and not events:
            self._stop(*self._death())
        elif time.monotonic() > self.deadline and self.status is None:
            limit = self.limit
            if self.phase == "start":
                msg = f"the grading process did not start within {limit:g}s"
            elif self.phase == "import":
                msg = f"time limit exceeded while importing your module (no result after {limit:g}s): " \
                      "code at module level loops?"
            else:
                msg = f"time limit exceeded: no result after {limit:g}s (an infinite loop? a very slow implementation?)"
            self._stop("timeout", msg)

    limit = STARTUP_TIMEOUT

    def set_deadline(self, seconds: float, cap: float | None = None) -> None:
        self.limit = seconds
        self.deadline = time.monotonic() + seconds
        if cap is not None:
            self.deadline = min(self.deadline, cap)

    def _death(self) -> tuple[str, str]:
        rc = os.waitstatus_to_exitcode(self.status)
        maxrss_mb = (self.rusage.ru_maxrss / 1024) if self.rusage else 0
        where = {"start": "before the tests started", "import": "while importing your module"}.get(
            self.phase, "during this case")
        if rc < 0:
            sig = -rc
            if self.memory_mb and maxrss_mb > 0.8 * self.memory_mb or sig == signal.SIGKILL:
                return "memory", (f"killed by {_signal_name(sig)} {where}; it used {maxrss_mb:.0f} MB: memory limit "
                                  f"({self.memory_mb} MB) exceeded, or your code killed its own process?")
            return "crash", f"the grading process crashed with {_signal_name(sig)} {where}"
        if rc == 0:
            return "exit", (f"the grading process exited (code 0) {where}: your code must return its result, not "
                            "call os._exit() or sys.exit()")
        if rc >= 128 and sandbox_signal(rc):  # bubblewrap reports a signal of its child as 128 + signal
            return self._death_by(rc - 128, where, maxrss_mb)
        return "exit", f"the grading process exited with code {rc} {where} (os._exit()? a crash in C code?)"

    def _death_by(self, sig: int, where: str, maxrss_mb: float) -> tuple[str, str]:
        if sig == signal.SIGKILL:
            return "memory", (f"killed by SIGKILL {where}: memory limit ({self.memory_mb} MB) exceeded, or your code "
                              "killed its own process?")
        return "crash", f"the grading process crashed with {_signal_name(sig)} {where}"

    def _stop(self, verdict: str, message: str) -> None:
        self.lost = (verdict, message)
        self.close()

    def request(self, msg: dict) -> dict:
        """Send one request and return its reply (plain data); WorkerLost if the worker is gone."""
        return self.send(msg)()

    def send(self, msg: dict) -> Callable[[], dict]:
        """Send one request now; the function returned waits for its reply (the grader works meanwhile)."""
        if self.lost:
            raise WorkerLost(self.lost[1])
        self.next_id += 1
        self.epoch += 1
        wanted = self.next_id
        self._write({**msg, "id": wanted})

        def reply() -> dict:
            while True:
                answer = self._read_message()
                if answer.get("t") == "reply" and answer.get("id") == wanted:
                    return answer

        return reply

    def wait_ready(self, import_limit: float, cap: float | None) -> dict:
        """{"t": "ready"} or {"t": "fatal", ...}; WorkerLost if it never gets there."""
        self.set_deadline(STARTUP_TIMEOUT + import_limit, cap)
        self.phase = "import"
        while True:
            msg = self._read_message()
            if msg.get("t") in ("ready", "fatal"):
                return msg

    def sibling(self) -> "WorkerProcess":
        """Another worker for the same code, ready (a fresh process: e.g. another hash seed)."""
        w = WorkerProcess(*self.args)
        msg = w.wait_ready(self.ex.case_timeout + IMPORT_SLACK, None)
        if msg.get("t") != "ready":
            w.close()
            raise WorkerLost(str(msg.get("message")))
        w.phase = "case"
        w.set_deadline(self.limit)
        return w

    def close(self) -> None:
        if getattr(self, "closed", False):
            return
        self.closed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # bubblewrap and what it started; or the plain worker's group
        except (ProcessLookupError, PermissionError):
            pass
        if self.status is None:
            _, self.status, self.rusage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(self.status)
        # Drain what is left to read (the output of the last moments), without waiting.
        for key in list(self.sel.get_map().values()):
            try:
                while True:
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        break
                    if key.data == "output":
                        self.output.add(data)
                    else:
                        self.buf += data
            except (BlockingIOError, OSError):
                pass
        self.sel.close()
        for fd in (self.rep_r, self.req_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.stdout.close()
        _rmtree(self.tmp)


@contextmanager
def another_process(impl: Any) -> Iterator[Any]:
    """The learner's code loaded afresh in another process (its own hash seed), for a case that compares what two
    processes compute: a sibling worker of a graded one, or for an in-process module, a plain worker on its file."""
    from . import harness

    if isinstance(impl, RemoteModule):
        w = object.__getattribute__(impl, "_session").sibling()
    else:
        path = getattr(impl, "__file__", None) or harness._STATE.get("learner_file")
        ex = harness._STATE.get("exercise")
        if not path or not os.path.isfile(path) or ex is None:
            raise RuntimeError("this case loads your code again in a fresh process, which needs it in a file: grade "
                               "the file (judge.check(ID, 'path/to/file.py')) rather than objects defined here")
        w = WorkerProcess(ex, {"impl": path}, False, ex.memory_limit_mb, {}, _Output(), OUTPUT_LIMIT)
        w.phase = "case"
        msg = w.wait_ready(ex.case_timeout + IMPORT_SLACK, None)
        if msg.get("t") != "ready":
            w.close()
            raise WorkerLost(str(msg.get("message")))
    try:
        yield RemoteModule(w, None)
    finally:
        w.close()


def sandbox_signal(rc: int) -> bool:
    return 128 < rc < 128 + 65


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _target_for(ex: Exercise, impl: Any, source: str | None, reference: bool) -> tuple[dict[str, Any], str, Any]:
    """(worker target, display name, temp dir to delete or None)."""
    if reference:
        return {"impl_module": ex.reference, "display": ex.reference}, f"{ex.reference} (reference)", None
    if source is not None:
        tmp = tempfile.mkdtemp(prefix="judge-src-")
        path = Path(tmp) / Path(ex.practice_file).name
        path.write_text(source)
        os.chmod(tmp, 0o755)
        os.chmod(path, 0o644)
        return {"impl": str(path), "display": "your code"}, "your code (source text)", tmp
    if impl is None:
        path = ex.practice_path
    elif isinstance(impl, ModuleType):
        if not getattr(impl, "__file__", None):
            raise TypeError("a module without a file cannot be graded in a subprocess; pass its functions")
        path = Path(impl.__file__)
    else:
        text = str(impl)
        if not text.endswith(".py") and "/" not in text and not Path(text).exists():
            import importlib.util

            try:
                found = importlib.util.find_spec(text) is not None
            except (ImportError, ValueError):
                found = False
            if found:  # a dotted module name, e.g. "solutions.batch"
                return {"impl_module": text, "display": text}, text, None
        path = Path(impl)
    path = path.resolve()
    if path.suffix == ".ipynb":
        from .notebooks import solution_source

        src, problem = solution_source(path)
        if problem:
            return {"fatal": problem}, str(path), None
        target, _, tmp = _target_for(ex, None, src, False)
        return target, _display(path), tmp
    return {"impl": str(path), "display": _display(path)}, _display(path), None


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _case_list(ex: Exercise, cases: list[str] | None) -> list:
    from . import harness

    try:
        every = list(importlib.import_module(ex.tests).CASES)
    except ModuleNotFoundError as exc:
        every = _public_cases(ex, exc)
    if cases is None:
        return every
    names = [c.name for c in every]
    return [c for c in every if harness.selected(c.name, cases, names)]


def _public_cases(ex: Exercise, missing: ModuleNotFoundError) -> list:
    """The recorded public cases, where the hidden ones are not installed (a student's copy of the course)."""
    from . import harness, public

    logs = public.load(ex)
    if logs is None or not (missing.name and ex.tests.startswith(missing.name)):
        raise missing

    def case_fn(log: list):
        def run(impl: Any) -> None:
            problem = public.replay(object.__getattribute__(impl, "_session"), log)
            if problem:
                raise harness.CaseFailure(problem, kind="not implemented" if problem.startswith("not implemented")
                                          else "fail")

        return run

    return [harness.Case(name, case_fn(log)) for name, log in logs.items()]


def grade(exercise: int | str | Exercise, impl: Any = None, *, source: str | None = None, reference: bool = False,
          time_limit: float | None = None, memory_limit_mb: int | None = None, cases: list[str] | None = None,
          options: dict[str, Any] | None = None, output_limit: int = OUTPUT_LIMIT, isolated: bool = False,
          total_limit: float | None = None) -> Report:
    """Grade one exercise and return a Report (never raises for learner misbehaviour).

    impl: None (the learner's practice file), a path (.py, or a submitted .ipynb: its solution cell), a dotted module
    name, a module with a __file__, or a function / namespace / class (then the cases run in this process, without
    the sandbox: see `grade_inprocess`).
    source: the learner's code as text (graded from a temporary file).
    reference: grade the reference solution instead (never isolated: it is the instructor's own code).
    time_limit: seconds per case (and for importing the learner's module), overriding the exercise's.
    cases: only these cases (exact names, or else case-insensitive parts of names).
    isolated: run the learner's code under bubblewrap (IsolationUnavailable if it cannot run here).
    total_limit: seconds for the whole submission (default: the exercise's total_timeout).
    """
    ex = get_exercise(exercise)
    if impl is not None and not isinstance(impl, (str, os.PathLike, ModuleType)):
        return grade_inprocess(ex, impl, cases=cases, options=options)
    if isolated and not reference:
        problem = sandbox.bwrap_problem()
        if problem:
            raise IsolationUnavailable(problem)
    t0 = time.monotonic()
    target, display, tmp = _target_for(ex, impl, source, reference)
    report = Report(ex.id, ex.slug, ex.title, display)
    memory_mb = ex.memory_limit_mb if memory_limit_mb is None else memory_limit_mb
    cap = t0 + (total_limit or ex.total_timeout)
    output = _Output()
    try:
        if target.get("fatal"):
            report.fatal = target["fatal"]
            return report
        if "impl" in target and not Path(target["impl"]).is_file():
            report.fatal = f"{display} does not exist (exercise {ex.id} is edited in {ex.practice_file})"
            return report
        run = _Run(ex, target, isolated and not reference, memory_mb, dict(options or {}), output, output_limit,
                   time_limit, cap)
        try:
            run.spawn()  # the worker starts Python and imports while this process imports the cases
            selected = _case_list(ex, cases)
            if not selected:
                if cases:
                    report.fatal = f"no case of exercise {ex.id} matches {cases}"
                return report
            report.results, report.fatal = run.cases(selected)
        finally:
            run.stop()
        missing = sandbox.missing_references(ex)
        if missing:
            report.notes.append("not in this copy, so your practice/ module of the same name runs in its place: "
                                + ", ".join(missing))
        if run.capped:
            report.notes.append(f"the total time cap of {cap - t0:g}s for one submission was reached: "
                                f"{run.capped} case(s) not run")
        report.output, report.output_bytes = output.text(), output.total
        return report
    finally:
        report.seconds = time.monotonic() - t0
        if tmp:
            _rmtree(tmp)


class _Run:
    """The cases of one submission, each with a live worker (a fresh one after a worker was lost)."""

    def __init__(self, ex, target, isolated, memory_mb, options, output, output_limit, time_limit, cap) -> None:
        self.ex, self.target, self.isolated, self.memory_mb = ex, target, isolated, memory_mb
        self.options, self.output, self.output_limit = options, output, output_limit
        self.time_limit, self.cap = time_limit, cap
        self.worker: WorkerProcess | None = None
        self.ready = False
        self.capped = 0

    def spawn(self) -> None:
        """Start a worker (it imports while the grader goes on)."""
        self.worker = WorkerProcess(self.ex, self.target, self.isolated, self.memory_mb, self.options, self.output,
                                    self.output_limit)
        self.ready = False

    def start(self) -> str | None:
        """A worker with the learner's module loaded; the reason if that fails (for every case)."""
        if self.worker is None:
            self.spawn()
        w = self.worker
        try:
            msg = w.wait_ready(self.time_limit or self.ex.case_timeout + IMPORT_SLACK, self.cap)
        except WorkerLost:
            self.stop()
            return w.lost[1] if w.lost else "the grading process stopped"
        if msg.get("t") == "fatal":
            self.stop()
            return str(msg.get("message"))
        w.phase = "case"
        self.ready = True
        return None

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
            self.ready = False

    def cases(self, selected: list) -> tuple[list[CaseResult], str | None]:
        from . import harness

        results: list[CaseResult] = []
        for i, case in enumerate(selected):
            fatal = None
            if (self.worker is None or not self.ready) and time.monotonic() < self.cap:
                fatal = self.start()
            if time.monotonic() >= self.cap:
                self.capped = len(selected) - i
                results += [CaseResult(c.name, False, 0.0, "timeout", "not run: the total time cap for one "
                                       "submission was used up") for c in selected[i:]]
                break
            if fatal:
                return results + [CaseResult(c.name, False, 0.0, "not run", "not run: see above")
                                  for c in selected[i:]], fatal
            w = self.worker
            w.set_deadline(self.time_limit or case.timeout or self.ex.case_timeout, self.cap)
            t0 = time.perf_counter()
            saved = dict(harness._STATE)
            harness._STATE.update(options=self.options, memory_mb=self.memory_mb, exercise=self.ex,
                                  learner_file=self.target.get("impl") or self.ex.practice_file,
                                  learner_display=self.target.get("display"))
            try:
                out = harness.run_case(case, RemoteModule(w, None))
            finally:
                harness._STATE.clear()
                harness._STATE.update(saved)
            out = CaseResult(out.name, out.passed, out.seconds, out.verdict, out.message, out.details)
            if w.lost:  # whatever the case made of it, the worker's end is the verdict
                verdict, message = w.lost
                out = CaseResult(case.name, False, time.perf_counter() - t0, verdict, message)
                self.stop()
            results.append(out)
        return results, None


def grade_inprocess(exercise: int | str | Exercise, impl: Any, *, cases: list[str] | None = None,
                    options: dict[str, Any] | None = None) -> Report:
    """Run the cases in this process on `impl`: a module, a namespace, or (for one-function exercises) the
    function itself. No sandbox: no time limit and no isolation (for tests and trusted code)."""
    from . import harness
    from .loader import SetupError, check_api

    ex = get_exercise(exercise)
    t0 = time.monotonic()
    if callable(impl) and not isinstance(impl, (ModuleType, SimpleNamespace)) and len(ex.api) == 1 \
            and not any(hasattr(impl, n) for n in ex.api):
        impl = SimpleNamespace(**{next(iter(ex.api)): impl})  # graded under the expected name
    display = getattr(impl, "__name__", None) or type(impl).__name__
    report = Report(ex.id, ex.slug, ex.title, f"{display} (in this process)")
    saved = dict(harness._STATE)
    try:
        tests = importlib.import_module(ex.tests)
        selected = [c for c in tests.CASES if cases is None or harness.selected(c.name, cases, tests.CASES.names())]
        try:
            check_api(impl, ex, "your code")
        except SetupError as err:
            report.fatal = err.message
            report.results = [CaseResult(c.name, False, 0.0, "not run", "not run: see above") for c in selected]
            return report
        first = getattr(impl, next(iter(ex.api)), None) if ex.api else None
        code = getattr(first, "__code__", None)
        harness._STATE.update(learner_file=getattr(impl, "__file__", None) or (code.co_filename if code else None),
                              options=dict(options or {}),
                              exercise=ex)
        for c in selected:
            out = harness.run_case(c, impl)
            report.results.append(CaseResult(out.name, out.passed, out.seconds, out.verdict, out.message,
                                             out.details))
        return report
    finally:
        harness._STATE.clear()
        harness._STATE.update(saved)
        report.seconds = time.monotonic() - t0


def check(exercise: int | str | Exercise, impl: Any = None, **kwargs: Any) -> None:
    """Grade and raise AssertionError with the readable report unless every case passes (for nbgrader cells)."""
    report = grade(exercise, impl, **kwargs)
    if not report.ok:
        raise AssertionError("\n" + report.text())

